//! Nova calls the engine makes, with the response fields it reads. Parsers
//! tolerate missing keys (down-cell records, older microversions).

use chrono::{DateTime, Utc};
use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use super::catalog::ServiceKind;
use super::client::OpenStack;
use super::error::Error;
use super::microversion::Microversion;
use super::request::Request;

mod records;

pub use records::*;

const COMPUTE: ServiceKind = ServiceKind::Compute;

/// The page size used when listing a host's servers.
pub const SERVER_PAGE: u32 = 200;

/// The request of a server action.
fn action_request(id: &str, body: Value) -> Request {
    let action = match body
        .as_object()
        .and_then(|o| o.keys().next())
        .map(String::as_str)
    {
        Some("evacuate") => "servers.action.evacuate",
        Some("lock") => "servers.action.lock",
        Some("unlock") => "servers.action.unlock",
        Some("os-stop") => "servers.action.stop",
        Some("os-start") => "servers.action.start",
        Some("os-resetState") => "servers.action.reset_state",
        _ => "servers.action",
    };
    Request::with_body(COMPUTE, Method::POST, format!("/servers/{id}/action"), body).named(action)
}

/// The answer to an evacuate request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvacuateAccepted {
    pub request_id: Option<String>,
}

/// The `evacuate` action body for a microversion (additionalProperties is
/// false in every schema: send exactly what the version allows).
pub fn evacuate_body(microversion: Microversion, host: Option<&str>) -> Value {
    let mut body = serde_json::Map::new();
    if let Some(host) = host {
        body.insert("host".into(), json!(host));
    }
    if microversion < Microversion::new(2, 14) {
        // Required before 2.14; the compute node cannot tell, so say false
        // and let it detect shared storage itself on later versions.
        body.insert("onSharedStorage".into(), json!("False"));
    } else if microversion >= Microversion::new(2, 29) && microversion < Microversion::new(2, 68) {
        // Let the scheduler validate a named host instead of forcing it.
        if host.is_some() {
            body.insert("force".into(), json!(false));
        }
    }
    json!({ "evacuate": body })
}

#[derive(Deserialize)]
struct ServersPage {
    servers: Vec<Server>,
    #[serde(default)]
    servers_links: Vec<Link>,
}

#[derive(Deserialize)]
struct Link {
    rel: String,
    href: String,
}

fn marker_of(href: &str) -> Option<String> {
    let query = href.split_once('?')?.1;
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == "marker")
        .map(|(_, v)| v.to_owned())
}

impl OpenStack {
    /// Every server on compute host `host`, across all projects, following
    /// the pages to the end (Masakari stops after the first).
    pub async fn servers_on_host(&self, host: &str) -> Result<Vec<Server>, Error> {
        let mut servers = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let mut request = Request::get(COMPUTE, "/servers/detail")
                .named("servers.list")
                .query("all_tenants", "1")
                .query("host", host)
                .query("limit", SERVER_PAGE.to_string());
            if let Some(marker) = &marker {
                request = request.query("marker", marker.clone());
            }
            let page: ServersPage = self.get_json(request).await?;
            let empty = page.servers.is_empty();
            servers.extend(page.servers);
            let next = page
                .servers_links
                .iter()
                .find(|l| l.rel == "next")
                .and_then(|l| marker_of(&l.href));
            match next {
                Some(next) if !empty && marker.as_deref() != Some(next.as_str()) => {
                    marker = Some(next)
                }
                _ => break,
            }
        }
        Ok(servers)
    }

    pub async fn server(&self, id: &str) -> Result<Server, Error> {
        #[derive(Deserialize)]
        struct Body {
            server: Server,
        }
        let body: Body = self
            .get_json(Request::get(COMPUTE, format!("/servers/{id}")).named("servers.get"))
            .await?;
        Ok(body.server)
    }

    /// Sends a write that is safe to repeat once it is known not to have
    /// been applied. A refusal (connection refused, 429, 503) or an
    /// unknown outcome (a timeout, a broken connection, a 500/502/504) is
    /// settled by `applied`, which reads Nova's state: applied means done,
    /// not applied means send again after a wait — never again blind. All
    /// within the retry budget (the outage tolerance). `Ok(None)`: applied,
    /// known by reading.
    async fn confirmed_write<F, Fut>(
        &self,
        request: Request,
        applied: F,
    ) -> Result<Option<super::request::Response>, Error>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<bool, Error>>,
    {
        let policy = &self.settings().retry;
        let mut retries = policy.retries();
        loop {
            let error = match self.send(request.clone()).await {
                Ok(response) => return Ok(Some(response)),
                Err(e) if e.outcome_unknown() || e.refused() => e,
                Err(e) => return Err(e),
            };
            match applied().await {
                Ok(true) => {
                    tracing::info!(error = %error, "the answer was lost, but nova shows the change applied");
                    return Ok(None);
                }
                Ok(false) => {}
                // Nova cannot be read within the budget either.
                Err(read) => {
                    tracing::warn!(error = %read, "cannot read nova to confirm a write");
                    return Err(error);
                }
            }
            tracing::warn!(error = %error, "write outcome unknown and nova shows it not applied; sending it again");
            if !retries.wait(policy.retry_after(error.retry_after())).await {
                return Err(error);
            }
        }
    }

    /// A server action that is safe to repeat, confirmed by `applied` on
    /// an unknown outcome (see [`Self::confirmed_write`]).
    async fn confirmed_action<F>(&self, id: &str, body: Value, applied: F) -> Result<(), Error>
    where
        F: Fn(&Server) -> bool,
    {
        let request = action_request(id, body);
        self.confirmed_write(request, || async {
            self.server(id).await.map(|server| applied(&server))
        })
        .await
        .map(drop)
    }

    async fn server_action(
        &self,
        id: &str,
        body: Value,
        idempotent: bool,
    ) -> Result<Option<String>, Error> {
        let response = self
            .send(action_request(id, body).idempotent(idempotent))
            .await?;
        Ok(response.request_id)
    }

    /// Locks the server with a reason (2.73+). Locking twice is harmless.
    pub async fn lock(&self, id: &str, reason: &str) -> Result<(), Error> {
        let version = self.endpoint(COMPUTE).await?.microversion;
        let body = if version >= Microversion::new(2, 73) {
            json!({"lock": {"locked_reason": reason}})
        } else {
            json!({"lock": null})
        };
        self.confirmed_action(id, body, |s| s.locked == Some(true))
            .await
    }

    pub async fn unlock(&self, id: &str) -> Result<(), Error> {
        self.confirmed_action(id, json!({"unlock": null}), |s| s.locked == Some(false))
            .await
    }

    /// `os-stop`; 409 means the state does not allow it (already stopped).
    pub async fn stop(&self, id: &str) -> Result<(), Error> {
        self.confirmed_action(id, json!({"os-stop": null}), |s| {
            s.vm_state() == "stopped" || s.task_state.as_deref() == Some("powering-off")
        })
        .await
    }

    pub async fn start(&self, id: &str) -> Result<(), Error> {
        self.confirmed_action(id, json!({"os-start": null}), |s| {
            s.vm_state() == "active" || s.task_state.as_deref() == Some("powering-on")
        })
        .await
    }

    /// `os-resetState` to `active` or `error` (admin).
    pub async fn reset_state(&self, id: &str, state: &str) -> Result<(), Error> {
        let wanted = state.to_owned();
        self.confirmed_action(id, json!({"os-resetState": {"state": state}}), move |s| {
            s.vm_state() == wanted
        })
        .await
    }

    /// Asks Nova to evacuate the server (to `host`, or where the scheduler
    /// picks). Never retried on an unknown outcome: the caller re-reads the
    /// server and its migrations instead.
    pub async fn evacuate(&self, id: &str, host: Option<&str>) -> Result<EvacuateAccepted, Error> {
        let version = self.endpoint(COMPUTE).await?.microversion;
        let request_id = self
            .server_action(id, evacuate_body(version, host), false)
            .await?;
        Ok(EvacuateAccepted { request_id })
    }

    /// The server's evacuation migrations, newest first.
    pub async fn evacuations_of(&self, instance_id: &str) -> Result<Vec<Migration>, Error> {
        self.migrations(&[("instance_uuid", instance_id.to_owned())])
            .await
    }

    /// The evacuation migrations away from `source`, changed at or after
    /// `since`, newest first.
    pub async fn evacuations_from(
        &self,
        source: &str,
        since: Option<DateTime<Utc>>,
    ) -> Result<Vec<Migration>, Error> {
        let mut filters = vec![("source_compute", source.to_owned())];
        let version = self.endpoint(COMPUTE).await?.microversion;
        if let Some(since) = since
            && version >= Microversion::new(2, 59)
        {
            filters.push((
                "changes-since",
                since.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
            ));
        }
        self.migrations(&filters).await
    }

    async fn migrations(
        &self,
        filters: &[(&'static str, String)],
    ) -> Result<Vec<Migration>, Error> {
        #[derive(Deserialize)]
        struct Page {
            migrations: Vec<Migration>,
            #[serde(default)]
            migrations_links: Vec<Link>,
        }
        let version = self.endpoint(COMPUTE).await?.microversion;
        let paged = version >= Microversion::new(2, 59);
        let mut all: Vec<Migration> = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let mut request = Request::get(COMPUTE, "/os-migrations")
                .named("migrations.list")
                .query("migration_type", "evacuation");
            for (key, value) in filters {
                request = request.query(key, value.clone());
            }
            if paged {
                request = request.query("limit", "1000");
                if let Some(marker) = &marker {
                    request = request.query("marker", marker.clone());
                }
            }
            let page: Page = self.get_json(request).await?;
            let empty = page.migrations.is_empty();
            all.extend(page.migrations);
            let next = page
                .migrations_links
                .iter()
                .find(|l| l.rel == "next")
                .and_then(|l| marker_of(&l.href));
            match next {
                Some(next) if paged && !empty && marker.as_deref() != Some(next.as_str()) => {
                    marker = Some(next)
                }
                _ => break,
            }
        }
        // Newest first whatever the server's order (2.59 sorts, older not).
        all.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
        Ok(all)
    }

    /// One instance action with its events.
    pub async fn instance_action(
        &self,
        id: &str,
        request_id: &str,
    ) -> Result<InstanceAction, Error> {
        #[derive(Deserialize)]
        struct Body {
            #[serde(rename = "instanceAction")]
            action: InstanceAction,
        }
        let body: Body = self
            .get_json(
                Request::get(
                    COMPUTE,
                    format!("/servers/{id}/os-instance-actions/{request_id}"),
                )
                .named("instance_actions.get"),
            )
            .await?;
        Ok(body.action)
    }

    /// The server's actions, newest first.
    pub async fn instance_actions(&self, id: &str) -> Result<Vec<InstanceAction>, Error> {
        #[derive(Deserialize)]
        struct Body {
            #[serde(rename = "instanceActions")]
            actions: Vec<InstanceAction>,
        }
        let body: Body = self
            .get_json(
                Request::get(COMPUTE, format!("/servers/{id}/os-instance-actions"))
                    .named("instance_actions.list"),
            )
            .await?;
        Ok(body.actions)
    }

    /// The nova-compute service of `host`.
    pub async fn compute_service(&self, host: &str) -> Result<Option<ComputeService>, Error> {
        #[derive(Deserialize)]
        struct Body {
            services: Vec<ComputeService>,
        }
        let body: Body = self
            .get_json(
                Request::get(COMPUTE, "/os-services")
                    .named("services.list")
                    .query("binary", "nova-compute")
                    .query("host", host),
            )
            .await?;
        Ok(body
            .services
            .into_iter()
            .find(|s| s.host == host && s.binary == "nova-compute"))
    }

    /// Every nova-compute service, in one call.
    pub async fn compute_services(&self) -> Result<Vec<ComputeService>, Error> {
        #[derive(Deserialize)]
        struct Body {
            services: Vec<ComputeService>,
        }
        let body: Body = self
            .get_json(
                Request::get(COMPUTE, "/os-services")
                    .named("services.list")
                    .query("binary", "nova-compute"),
            )
            .await?;
        Ok(body
            .services
            .into_iter()
            .filter(|s| s.binary == "nova-compute")
            .collect())
    }

    /// Updates a compute service: `PUT /os-services/{id}` from 2.53, the
    /// older `force-down` / `disable-log-reason` / `enable` calls before.
    pub async fn update_service(
        &self,
        service: &ComputeService,
        update: &ServiceUpdate,
    ) -> Result<ComputeService, Error> {
        #[derive(Deserialize)]
        struct Body {
            service: Value,
        }
        let version = self.endpoint(COMPUTE).await?.microversion;
        if let ServiceId::Uuid(id) = &service.id
            && version >= Microversion::new(2, 53)
        {
            let mut body = serde_json::Map::new();
            if let Some(forced_down) = update.forced_down {
                body.insert("forced_down".into(), json!(forced_down));
            }
            match update.enabled {
                Some(true) => {
                    body.insert("status".into(), json!("enabled"));
                }
                Some(false) => {
                    body.insert("status".into(), json!("disabled"));
                    if let Some(reason) = &update.disabled_reason {
                        body.insert("disabled_reason".into(), json!(reason));
                    }
                }
                None => {}
            }
            let request = Request::with_body(
                COMPUTE,
                Method::PUT,
                format!("/os-services/{id}"),
                Value::Object(body),
            )
            .named("services.update")
            .timeout(self.settings().service_update_timeout);
            let applied = || async {
                Ok(self
                    .compute_service(&service.host)
                    .await?
                    .is_some_and(|now| update.is_applied_to(&now)))
            };
            let Some(response) = self.confirmed_write(request, applied).await? else {
                return self.service_of(&service.host).await;
            };
            let body: Body = response.json()?;
            return serde_json::from_value(body.service).map_err(|e| Error::Decode {
                call: Box::new(response.call.clone()),
                reason: e.to_string(),
            });
        }
        // Before 2.53: one call per change, addressed by host and binary.
        let target = json!({"host": service.host, "binary": "nova-compute"});
        if let Some(forced_down) = update.forced_down {
            let mut body = target.clone();
            body["forced_down"] = json!(forced_down);
            self.send(
                Request::with_body(COMPUTE, Method::PUT, "/os-services/force-down", body)
                    .named("services.force_down")
                    .idempotent(true),
            )
            .await?;
        }
        match update.enabled {
            Some(true) => {
                self.send(
                    Request::with_body(COMPUTE, Method::PUT, "/os-services/enable", target.clone())
                        .named("services.enable")
                        .idempotent(true),
                )
                .await?;
            }
            Some(false) => {
                let mut body = target.clone();
                let path = if let Some(reason) = &update.disabled_reason {
                    body["disabled_reason"] = json!(reason);
                    "/os-services/disable-log-reason"
                } else {
                    "/os-services/disable"
                };
                self.send(
                    Request::with_body(COMPUTE, Method::PUT, path, body)
                        .named("services.disable")
                        .timeout(self.settings().service_update_timeout)
                        .idempotent(true),
                )
                .await?;
            }
            None => {}
        }
        self.service_of(&service.host).await
    }

    /// The nova-compute service of `host`, which must exist.
    async fn service_of(&self, host: &str) -> Result<ComputeService, Error> {
        self.compute_service(host)
            .await?
            .ok_or_else(|| Error::Status {
                call: Box::new(super::error::Call {
                    service: "nova",
                    method: Method::GET,
                    path: "/os-services".to_owned(),
                }),
                status: 404,
                message: format!("no nova-compute service on {host}"),
                request_id: None,
                attempts: 1,
                retry_after: None,
            })
    }

    pub async fn aggregates(&self) -> Result<Vec<Aggregate>, Error> {
        #[derive(Deserialize)]
        struct Body {
            aggregates: Vec<Aggregate>,
        }
        let body: Body = self
            .get_json(Request::get(COMPUTE, "/os-aggregates").named("aggregates.list"))
            .await?;
        Ok(body.aggregates)
    }

    /// Adds `host` to aggregate `id`; already a member counts as done.
    pub async fn add_host_to_aggregate(&self, id: i64, host: &str) -> Result<(), Error> {
        let result = self
            .send(
                Request::with_body(
                    COMPUTE,
                    Method::POST,
                    format!("/os-aggregates/{id}/action"),
                    json!({"add_host": {"host": host}}),
                )
                .named("aggregates.add_host")
                .idempotent(true),
            )
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if e.is_conflict() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The server's volume attachments as its block-device mappings know
    /// them (`attachment_id` from 2.89).
    pub async fn bdm_attachments(&self, id: &str) -> Result<Vec<BdmAttachment>, Error> {
        #[derive(Deserialize)]
        struct Body {
            #[serde(rename = "volumeAttachments")]
            attachments: Vec<BdmAttachment>,
        }
        let body: Body = self
            .get_json(
                Request::get(COMPUTE, format!("/servers/{id}/os-volume_attachments"))
                    .named("servers.volume_attachments"),
            )
            .await?;
        Ok(body.attachments)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Microversion {
        s.parse().unwrap()
    }

    #[test]
    fn evacuate_bodies_follow_each_microversion_range() {
        assert_eq!(
            evacuate_body(v("2.1"), Some("c2")),
            json!({"evacuate": {"host": "c2", "onSharedStorage": "False"}})
        );
        assert_eq!(
            evacuate_body(v("2.13"), None),
            json!({"evacuate": {"onSharedStorage": "False"}})
        );
        assert_eq!(
            evacuate_body(v("2.14"), Some("c2")),
            json!({"evacuate": {"host": "c2"}})
        );
        assert_eq!(
            evacuate_body(v("2.29"), Some("c2")),
            json!({"evacuate": {"host": "c2", "force": false}})
        );
        assert_eq!(evacuate_body(v("2.53"), None), json!({"evacuate": {}}));
        assert_eq!(
            evacuate_body(v("2.68"), Some("c2")),
            json!({"evacuate": {"host": "c2"}})
        );
        assert_eq!(evacuate_body(v("2.94"), None), json!({"evacuate": {}}));
    }

    #[test]
    fn servers_parse_with_missing_keys() {
        let full: Server = serde_json::from_value(json!({
            "id": "0e12", "name": "db-1", "status": "ACTIVE",
            "OS-EXT-STS:vm_state": "active", "OS-EXT-STS:task_state": null,
            "OS-EXT-SRV-ATTR:host": "compute-01", "host_status": "UNKNOWN",
            "metadata": {"HA_Enabled": "True", "n": 1},
            "os-extended-volumes:volumes_attached": [{"id": "v1", "delete_on_termination": false}],
            "locked": false, "locked_reason": null
        }))
        .unwrap();
        assert_eq!(full.vm_state(), "active");
        assert_eq!(full.metadata.get("n").map(String::as_str), Some("1"));
        assert_eq!(full.volumes_attached.len(), 1);
        let partial: Server =
            serde_json::from_value(json!({"id": "x", "status": "UNKNOWN"})).unwrap();
        assert_eq!(partial.host, None);
    }

    #[test]
    fn markers_come_from_next_links() {
        assert_eq!(
            marker_of("https://nova/v2.1/servers/detail?all_tenants=1&limit=2&marker=abc"),
            Some("abc".into())
        );
        assert_eq!(marker_of("https://nova/v2.1/servers/detail"), None);
    }

    #[test]
    fn times_with_and_without_zone() {
        assert!(parse_time("2026-08-21T10:01:02.000000").is_some());
        assert!(parse_time("2026-08-21T10:01:02Z").is_some());
        assert!(parse_time("nope").is_none());
    }
}
