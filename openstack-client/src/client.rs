//! The OpenStack HTTP client: one reqwest client, the Keystone token,
//! endpoints from the catalog, negotiated microversions, and each call
//! sent through the request stack (`stack`: retries, the outage gate,
//! re-authentication, timeouts) in a span of its own, with its metrics.

use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::OnceCell;
use tower::ServiceExt as _;
use tracing::Instrument as _;

use super::catalog::{ServiceKind, select_endpoint};
use super::credentials::Credentials;
use super::error::{Call, Error};
use super::keystone::{Keystone, Token};
use super::metrics;
use super::microversion::{self, Microversion, negotiate};
use super::request::{Request, Response, describe};
use super::retry::RetryPolicy;
use super::stack::gate::OutageGate;
use super::stack::reauth::{Identities, Tokens as _};
use super::stack::{self, Outgoing, Stack};
use super::tls::TlsSettings;

/// How the client reaches and talks to the cloud.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientSettings {
    /// Catalog interfaces in order of preference.
    pub interfaces: Vec<String>,
    pub region: Option<String>,
    pub connect_timeout: Duration,
    /// Per request, every attempt (unless the request sets its own).
    pub request_timeout: Duration,
    /// Per service update (`PUT /os-services`). Disabling a compute Nova
    /// still believes up answers only after Nova's RPC to that compute
    /// times out (`rpc_response_timeout`, 60 s), but Nova writes the status
    /// before it calls: past this wait the update is confirmed by reading
    /// the service (and sent again only if it is not applied).
    pub service_update_timeout: Duration,
    pub retry: RetryPolicy,
    /// Trusted CAs, verification, client certificate (`clouds.yaml`'s
    /// `cacert`, `verify`, `cert`, `key`; `OS_CACERT`...).
    pub tls: TlsSettings,
    /// Fixed microversions instead of negotiating.
    pub nova_microversion: Option<Microversion>,
    pub cinder_microversion: Option<Microversion>,
}

impl Default for ClientSettings {
    fn default() -> Self {
        Self {
            interfaces: vec!["internal".to_owned(), "public".to_owned()],
            region: None,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            service_update_timeout: Duration::from_secs(10),
            retry: RetryPolicy::default(),
            tls: TlsSettings::default(),
            nova_microversion: None,
            cinder_microversion: None,
        }
    }
}

/// An endpoint and the microversion used with it.
#[derive(Clone, Debug)]
pub struct ServiceEndpoint {
    pub url: String,
    pub microversion: Microversion,
}

/// The client. Cheap to clone; all clones share the token and endpoints.
#[derive(Clone, Debug)]
pub struct OpenStack {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    http: reqwest::Client,
    /// The engine's identity, and a second one whose token goes in
    /// `X-Service-Token` (Cinder lets only service callers detach an
    /// attachment Nova uses).
    identities: Identities,
    settings: ClientSettings,
    compute: OnceCell<ServiceEndpoint>,
    volume: OnceCell<ServiceEndpoint>,
    /// The request stacks of Nova and Cinder, each with its own outage
    /// gate (one probe at a time while that service is unavailable).
    compute_stack: Stack,
    volume_stack: Stack,
}

impl OpenStack {
    pub fn new(
        credentials: Credentials,
        service_credentials: Option<Credentials>,
        settings: ClientSettings,
    ) -> Result<Self, Error> {
        // One crypto library (ring, as sqlx uses): install it before the
        // first client; a second install is refused and harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let builder = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .pool_idle_timeout(Duration::from_secs(60))
            .user_agent(concat!("instanceha-engine/", env!("CARGO_PKG_VERSION")));
        if settings.tls.insecure() {
            tracing::warn!(
                "openstack tls certificate verification is OFF (verify: false): anyone between \
                 the engine and the cloud can impersonate keystone and take its credentials; \
                 give the cloud's CA as cacert instead"
            );
        }
        let http = settings
            .tls
            .apply(builder)
            .map_err(|e| Error::Auth {
                status: None,
                message: format!("openstack tls: {e}"),
            })?
            .build()
            .map_err(|e| Error::Auth {
                status: None,
                message: format!("cannot build the HTTP client: {e}"),
            })?;
        let keystone = |credentials| {
            Arc::new(Keystone::new(
                http.clone(),
                credentials,
                settings.retry.clone(),
                settings.request_timeout,
            ))
        };
        let identities = Identities {
            keystone: keystone(credentials),
            service: service_credentials.map(keystone),
        };
        let stack = || {
            stack::stack(
                http.clone(),
                identities.clone(),
                Arc::new(OutageGate::default()),
                settings.retry.clone(),
                settings.request_timeout,
            )
        };
        let (compute_stack, volume_stack) = (stack(), stack());
        Ok(Self {
            inner: Arc::new(Inner {
                http,
                identities,
                settings,
                compute: OnceCell::new(),
                volume: OnceCell::new(),
                compute_stack,
                volume_stack,
            }),
        })
    }

    pub fn settings(&self) -> &ClientSettings {
        &self.inner.settings
    }

    /// Logs in and resolves both endpoints and microversions, so that a
    /// misconfiguration shows at start rather than in the first recovery.
    /// Cinder's endpoint is optional: a cloud without it in the catalog
    /// answers `None` (boot-from-volume checks are off there).
    pub async fn check(&self) -> Result<(ServiceEndpoint, Option<ServiceEndpoint>), Error> {
        let compute = self.endpoint(ServiceKind::Compute).await?.clone();
        let volume = match self.endpoint(ServiceKind::BlockStorage).await {
            Ok(volume) => Some(volume.clone()),
            Err(Error::NoEndpoint(_)) => None,
            Err(e) => return Err(e),
        };
        Ok((compute, volume))
    }

    /// Whether the catalog has a block-storage service (Cinder).
    pub async fn has_block_storage(&self) -> Result<bool, Error> {
        match self.endpoint(ServiceKind::BlockStorage).await {
            Ok(_) => Ok(true),
            Err(Error::NoEndpoint(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Keeps the engine's tokens warm: one cheap authenticated read of Nova
    /// (and of Cinder when the catalog has it), so that their
    /// keystonemiddleware caches hold the token's validation, and the
    /// service identity's token fetched, so that the first recovery after
    /// a quiet period waits on neither Keystone nor a login.
    pub async fn warm_up(&self) -> Result<(), Error> {
        let token = self.inner.identities.token().await?;
        self.inner.identities.service_token(&token).await?;
        // keystonemiddleware caches a validation per API worker process
        // unless it shares memcached: calls made at once reach several
        // workers (measured on real Nova with two nova-api workers: the
        // first evacuation after a quiet period waited 1.3-1.7 s on
        // Keystone at the worker the single warm-up call had not reached).
        let call = || {
            self.send(
                Request::get(ServiceKind::Compute, "/os-services")
                    .named("warm_up")
                    .query("binary", "nova-compute")
                    .query("host", "instanceha-warm-up"),
            )
        };
        let (a, b, c, d) = tokio::join!(call(), call(), call(), call());
        a?;
        b?;
        c?;
        d?;
        if self.has_block_storage().await? {
            self.send(
                Request::get(ServiceKind::BlockStorage, "/volumes")
                    .named("warm_up")
                    .query("limit", "1"),
            )
            .await?;
        }
        Ok(())
    }

    /// The endpoint of `kind` and its microversion, discovered once.
    pub async fn endpoint(&self, kind: ServiceKind) -> Result<&ServiceEndpoint, Error> {
        let cell = match kind {
            ServiceKind::Compute => &self.inner.compute,
            ServiceKind::BlockStorage => &self.inner.volume,
        };
        cell.get_or_try_init(|| self.discover(kind)).await
    }

    async fn discover(&self, kind: ServiceKind) -> Result<ServiceEndpoint, Error> {
        let token = self.inner.identities.token().await?;
        let settings = &self.inner.settings;
        let url = select_endpoint(
            &token.catalog,
            kind,
            &settings.interfaces,
            settings.region.as_deref(),
        )?;
        let (wanted, fixed) = match kind {
            ServiceKind::Compute => (microversion::NOVA_PREFERRED, settings.nova_microversion),
            ServiceKind::BlockStorage => {
                (microversion::CINDER_PREFERRED, settings.cinder_microversion)
            }
        };
        if let Some(fixed) = fixed {
            return Ok(ServiceEndpoint {
                url,
                microversion: fixed,
            });
        }
        let (server_min, server_max) = self.version_range(kind, &url, &token).await?;
        let microversion =
            negotiate(wanted, server_min, server_max).ok_or_else(|| Error::Microversion {
                service: kind.name(),
                wanted: wanted.to_string(),
                server_min: server_min.to_string(),
                server_max: server_max.to_string(),
            })?;
        tracing::info!(service = kind.name(), %url, %microversion, %server_max, "openstack endpoint ready");
        Ok(ServiceEndpoint { url, microversion })
    }

    /// Reads the version document: Nova's at the endpoint itself, Cinder's
    /// at the root above `/v3`.
    async fn version_range(
        &self,
        kind: ServiceKind,
        url: &str,
        token: &Token,
    ) -> Result<(Microversion, Microversion), Error> {
        let (doc_url, marker) = match kind {
            ServiceKind::Compute => (cut_after(url, "/v2.1"), "v2.1"),
            ServiceKind::BlockStorage => (format!("{}/", cut_before(url, "/v3")), "v3.0"),
        };
        let call = Call {
            service: kind.name(),
            method: Method::GET,
            path: "(version discovery)".to_owned(),
        };
        let response = self
            .inner
            .http
            .get(&doc_url)
            .timeout(self.inner.settings.request_timeout)
            .header("X-Auth-Token", token.value.expose())
            .send()
            .await
            .map_err(|e| Error::Connect {
                call: Box::new(call.clone()),
                reason: describe(&e),
                attempts: 1,
            })?;
        let body: Value = response.json().await.map_err(|e| Error::Decode {
            call: Box::new(call.clone()),
            reason: e.to_string(),
        })?;
        let version = body
            .get("version")
            .cloned()
            .or_else(|| {
                body.get("versions")?
                    .as_array()?
                    .iter()
                    .find(|v| v.get("id").and_then(Value::as_str) == Some(marker))
                    .cloned()
            })
            .ok_or_else(|| Error::Decode {
                call: Box::new(call.clone()),
                reason: format!("no {marker} version in the version document"),
            })?;
        let read = |key: &str| -> Result<Microversion, Error> {
            version
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| Error::Decode {
                    call: Box::new(call.clone()),
                    reason: format!("the version document has no {key}"),
                })?
                .parse()
                .map_err(|reason| Error::Decode {
                    call: Box::new(call.clone()),
                    reason,
                })
        };
        Ok((read("min_version")?, read("version")?))
    }

    /// Sends `request` through its service's request stack (retrying what
    /// is safe to retry, see `stack`), in a span of its own whose context
    /// travels in the request's `traceparent`, and records its metrics.
    pub(crate) async fn send(&self, request: Request) -> Result<Response, Error> {
        let span = tracing::info_span!(
            "openstack.request",
            otel.name = %format!("{} {}", request.kind.name(), request.operation),
            otel.kind = "client",
            otel.status_code = tracing::field::Empty,
            service = request.kind.name(),
            operation = request.operation,
            http.request.method = %request.method,
            http.response.status_code = tracing::field::Empty,
            openstack.request_id = tracing::field::Empty,
            attempts = tracing::field::Empty,
        );
        let started = std::time::Instant::now();
        let (kind, operation) = (request.kind, request.operation);
        let result = self.through_stack(request).instrument(span.clone()).await;
        let status = match &result {
            Ok(response) => {
                if let Some(id) = &response.request_id {
                    span.record("openstack.request_id", id.as_str());
                }
                "ok".to_owned()
            }
            Err(e) => {
                instanceha_runtime::telemetry::record_error(&span, &e.to_string());
                e.status()
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| match e {
                        Error::Timeout { .. } => "timeout".to_owned(),
                        Error::Connect { .. } => "connect".to_owned(),
                        Error::Lost { .. } => "lost".to_owned(),
                        _ => "error".to_owned(),
                    })
            }
        };
        metrics::record(kind.name(), operation, &status, started.elapsed());
        result
    }

    async fn through_stack(&self, request: Request) -> Result<Response, Error> {
        let endpoint = self.endpoint(request.kind).await?.clone();
        let stack = match request.kind {
            ServiceKind::Compute => &self.inner.compute_stack,
            ServiceKind::BlockStorage => &self.inner.volume_stack,
        };
        stack
            .clone()
            .oneshot(Outgoing::new(request, endpoint))
            .await
    }

    /// Whether the engine can act as a service caller.
    pub async fn has_service_identity(&self) -> Result<bool, Error> {
        if self.inner.identities.service.is_some() {
            return Ok(true);
        }
        Ok(self.inner.identities.token().await?.has_role("service"))
    }

    pub(crate) async fn get_json<T: DeserializeOwned>(&self, request: Request) -> Result<T, Error> {
        self.send(request).await?.json()
    }
}

fn cut_after(url: &str, marker: &str) -> String {
    match url.find(marker) {
        Some(i) => url[..i + marker.len()].to_owned(),
        None => url.to_owned(),
    }
}

fn cut_before(url: &str, marker: &str) -> String {
    match url.rfind(marker) {
        Some(i) => url[..i].to_owned(),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_document_urls() {
        assert_eq!(
            cut_after("http://h/compute/v2.1/abc", "/v2.1"),
            "http://h/compute/v2.1"
        );
        assert_eq!(
            cut_before("http://h/volume/v3/p1", "/v3"),
            "http://h/volume"
        );
    }
}
