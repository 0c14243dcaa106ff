//! Cinder calls the engine makes: reading volumes and attachments, and
//! clearing an attachment that blocks an evacuation.

use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use super::catalog::ServiceKind;
use super::client::OpenStack;
use super::error::Error;
use super::microversion::Microversion;
use super::request::Request;

const VOLUME: ServiceKind = ServiceKind::BlockStorage;

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct VolumeAttachment {
    #[serde(default)]
    pub attachment_id: Option<String>,
    #[serde(default)]
    pub server_id: Option<String>,
    #[serde(default)]
    pub host_name: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Volume {
    pub id: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub multiattach: bool,
    /// Only attachments whose attach_status is `attached`.
    #[serde(default)]
    pub attachments: Vec<VolumeAttachment>,
}

/// An attachment record of the attachments API (3.27+).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Attachment {
    pub id: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub instance: Option<String>,
    #[serde(default)]
    pub volume_id: Option<String>,
}

impl OpenStack {
    pub async fn volume(&self, id: &str) -> Result<Volume, Error> {
        #[derive(Deserialize)]
        struct Body {
            volume: Volume,
        }
        let body: Body = self
            .get_json(
                Request::get(VOLUME, format!("/volumes/{id}"))
                    .named("attachments.list")
                    .named("volumes.get"),
            )
            .await?;
        Ok(body.volume)
    }

    /// Whether the attachments API is available at the negotiated version.
    pub async fn has_attachments_api(&self) -> Result<bool, Error> {
        Ok(self.endpoint(VOLUME).await?.microversion >= Microversion::new(3, 27))
    }

    /// Every attachment record of a volume, whatever its status.
    pub async fn volume_attachments(&self, volume_id: &str) -> Result<Vec<Attachment>, Error> {
        #[derive(Deserialize)]
        struct Body {
            attachments: Vec<Attachment>,
        }
        let body: Body = self
            .get_json(Request::get(VOLUME, "/attachments").query("volume_id", volume_id))
            .await?;
        Ok(body.attachments)
    }

    /// Deletes an attachment (3.27+), unmapping it from its host's
    /// connector. Gone already counts as done.
    pub async fn delete_attachment(&self, id: &str, as_service: bool) -> Result<(), Error> {
        let mut request =
            Request::get(VOLUME, format!("/attachments/{id}")).named("attachments.delete");
        request.method = Method::DELETE;
        if as_service {
            request = request.service_token();
        }
        match self.send(request).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `os-force_detach` of one attachment, terminating the connection of
    /// `host`'s connector on the backend.
    pub async fn force_detach(
        &self,
        volume_id: &str,
        attachment_id: &str,
        host: &str,
        as_service: bool,
    ) -> Result<(), Error> {
        let mut request = Request::with_body(
            VOLUME,
            Method::POST,
            format!("/volumes/{volume_id}/action"),
            json!({"os-force_detach": {"attachment_id": attachment_id, "connector": {"host": host}}}),
        ).named("volumes.action.force_detach")
        .idempotent(true);
        if as_service {
            request = request.service_token();
        }
        self.send(request).await.map(drop)
    }
}
