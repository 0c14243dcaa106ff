//! The OpenStack HTTP client: one reqwest client, the Keystone token,
//! endpoints from the catalog, negotiated microversions, and the request
//! loop (timeouts, retries of transient failures for idempotent calls,
//! one re-authentication on 401, `traceparent` on every request).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::OnceCell;
use tracing::Instrument as _;

use super::catalog::{ServiceKind, select_endpoint};
use super::credentials::Credentials;
use super::error::{Call, Error};
use super::gate::OutageGate;
use super::keystone::{Keystone, Token};
use super::metrics;
use super::microversion::{self, Microversion, negotiate};
use instanceha_runtime::backoff::Retries;

use super::retry::{RetryPolicy, parse_retry_after};

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
    keystone: Keystone,
    /// A second identity whose token goes in `X-Service-Token` (Cinder
    /// lets only service callers detach an attachment Nova uses).
    service_keystone: Option<Keystone>,
    settings: ClientSettings,
    compute: OnceCell<ServiceEndpoint>,
    volume: OnceCell<ServiceEndpoint>,
    /// One probe at a time while Nova, or Cinder, is unavailable.
    compute_gate: OutageGate,
    volume_gate: OutageGate,
}

/// One request to send.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub kind: ServiceKind,
    pub method: Method,
    pub path: String,
    pub query: Vec<(&'static str, String)>,
    pub body: Option<Value>,
    /// What the call does (`servers.get`, `servers.action.evacuate`), for
    /// spans and metrics.
    pub operation: &'static str,
    /// Safe to send again after a timeout, a broken connection or a 5xx:
    /// reads. A write is sent again only when it certainly was not applied
    /// (refused); an unknown outcome goes back to the caller, which reads
    /// Nova's state before asking again.
    pub idempotent: bool,
    /// Send `X-Service-Token` too.
    pub service_token: bool,
    /// This request's own timeout, instead of the client's.
    pub timeout: Option<Duration>,
}

impl Request {
    pub fn get(kind: ServiceKind, path: impl Into<String>) -> Self {
        Self {
            kind,
            method: Method::GET,
            path: path.into(),
            query: Vec::new(),
            body: None,
            operation: "other",
            idempotent: true,
            service_token: false,
            timeout: None,
        }
    }

    pub fn with_body(
        kind: ServiceKind,
        method: Method,
        path: impl Into<String>,
        body: Value,
    ) -> Self {
        Self {
            kind,
            method,
            path: path.into(),
            query: Vec::new(),
            body: Some(body),
            operation: "other",
            idempotent: false,
            service_token: false,
            timeout: None,
        }
    }

    pub fn named(mut self, operation: &'static str) -> Self {
        self.operation = operation;
        self
    }

    pub fn query(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.query.push((key, value.into()));
        self
    }

    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    pub fn service_token(mut self) -> Self {
        self.service_token = true;
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// A successful answer.
#[derive(Clone, Debug)]
pub(crate) struct Response {
    pub body: Bytes,
    pub request_id: Option<String>,
    pub call: Call,
}

impl Response {
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.body).map_err(|e| Error::Decode {
            call: Box::new(self.call.clone()),
            reason: e.to_string(),
        })
    }
}

/// A fresh global request id, `req-<uuid>`.
pub fn request_id() -> String {
    format!("req-{}", uuid::Uuid::new_v4())
}

/// The human part of an error body: Nova/Cinder's `{"fault": {"message"}}`,
/// Keystone's `{"error": {"message"}}`, or the start of an HTML page.
pub(crate) fn error_message(body: &str, status: u16) -> String {
    if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(body)
        && let Some(message) = map
            .values()
            .find_map(|v| v.get("message").and_then(Value::as_str))
    {
        return message.to_owned();
    }
    let text: String = strip_tags(body)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if text.is_empty() {
        reqwest::StatusCode::from_u16(status)
            .ok()
            .and_then(|s| s.canonical_reason())
            .unwrap_or("error")
            .to_owned()
    } else {
        text.chars().take(200).collect()
    }
}

fn strip_tags(html: &str) -> String {
    let mut out = String::with_capacity(html.len());
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                out.push(' ');
            }
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

/// A reqwest error in a few words, without URLs (they may carry tokens in
/// other clients' hands; ours never do, but keep messages short).
pub(crate) fn describe(err: &reqwest::Error) -> String {
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(err);
    let mut deepest = err.to_string();
    while let Some(e) = source {
        deepest = e.to_string();
        source = e.source();
    }
    if err.is_timeout() {
        "timed out".to_owned()
    } else if err.is_connect() {
        format!("connection failed ({deepest})")
    } else {
        deepest
    }
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
        let http = reqwest::Client::builder()
            .connect_timeout(settings.connect_timeout)
            .pool_idle_timeout(Duration::from_secs(60))
            .user_agent(concat!("instanceha-engine/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Auth {
                status: None,
                message: format!("cannot build the HTTP client: {e}"),
            })?;
        let keystone = Keystone::new(
            http.clone(),
            credentials,
            settings.retry.clone(),
            settings.request_timeout,
        );
        let service_keystone = service_credentials.map(|c| {
            Keystone::new(
                http.clone(),
                c,
                settings.retry.clone(),
                settings.request_timeout,
            )
        });
        Ok(Self {
            inner: Arc::new(Inner {
                http,
                keystone,
                service_keystone,
                settings,
                compute: OnceCell::new(),
                volume: OnceCell::new(),
                compute_gate: OutageGate::default(),
                volume_gate: OutageGate::default(),
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
        let token = self.inner.keystone.token().await?;
        self.service_token(&token).await?;
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
        let token = self.inner.keystone.token().await?;
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

    /// Sends `request`, retrying what is safe to retry, in a span of its
    /// own whose context travels in the request's `traceparent`.
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
        let result = self.send_attempts(request).instrument(span.clone()).await;
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

    async fn send_attempts(&self, request: Request) -> Result<Response, Error> {
        let endpoint = self.endpoint(request.kind).await?.clone();
        let call = Call {
            service: request.kind.name(),
            method: request.method.clone(),
            path: request.path.clone(),
        };
        let policy = &self.inner.settings.retry;
        let mut retries = policy.retries();
        let timeout = request
            .timeout
            .unwrap_or(self.inner.settings.request_timeout);
        let mut attempt = 0;
        let mut reauthenticated = false;
        let gate = match request.kind {
            ServiceKind::Compute => &self.inner.compute_gate,
            ServiceKind::BlockStorage => &self.inner.volume_gate,
        };
        loop {
            attempt += 1;
            // Held through this try and the wait after it, if it fails.
            let _probe = gate.pass(retries.deadline()).await;
            let token = self.inner.keystone.token().await?;
            let mut builder = self
                .inner
                .http
                .request(
                    request.method.clone(),
                    format!("{}{}", endpoint.url, request.path),
                )
                .timeout(timeout)
                .header("X-Auth-Token", token.value.expose())
                .header("Accept", "application/json")
                .header("X-OpenStack-Request-ID", request_id());
            builder = match request.kind {
                ServiceKind::Compute => builder
                    .header(
                        "OpenStack-API-Version",
                        format!("compute {}", endpoint.microversion),
                    )
                    .header(
                        "X-OpenStack-Nova-API-Version",
                        endpoint.microversion.to_string(),
                    ),
                ServiceKind::BlockStorage => builder.header(
                    "OpenStack-API-Version",
                    format!("volume {}", endpoint.microversion),
                ),
            };
            let mut trace_headers = http::HeaderMap::new();
            instanceha_runtime::propagation::inject_current(&mut trace_headers);
            builder = builder.headers(trace_headers);
            if request.service_token
                && let Some(service) = self.service_token(&token).await?
            {
                builder = builder.header("X-Service-Token", service.value.expose());
            }
            if !request.query.is_empty() {
                builder = builder.query(&request.query);
            }
            if let Some(body) = &request.body {
                builder = builder.json(body);
            }

            let (failure, retry_after) = match builder.send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    if matches!(status, 502..=504) {
                        gate.unavailable();
                    } else {
                        gate.answered();
                    }
                    tracing::Span::current().record("http.response.status_code", status);
                    tracing::Span::current().record("attempts", attempt);
                    let request_id = response
                        .headers()
                        .get("x-openstack-request-id")
                        .or_else(|| response.headers().get("x-compute-request-id"))
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    let retry_after = response
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(parse_retry_after);
                    let body = match response.bytes().await {
                        Ok(body) => body,
                        Err(e) => {
                            let failure = Error::Lost {
                                call: Box::new(call.clone()),
                                reason: describe(&e),
                                attempts: attempt,
                            };
                            if request.idempotent && self.pause(&failure, &mut retries, None).await
                            {
                                continue;
                            }
                            return Err(failure);
                        }
                    };
                    if (200..300).contains(&status) {
                        return Ok(Response {
                            body,
                            request_id,
                            call,
                        });
                    }
                    if status == 401 && !reauthenticated {
                        // The token expired or was revoked: log in again and
                        // resend once (not counted as an attempt).
                        reauthenticated = true;
                        attempt -= 1;
                        tracing::info!(%call, "token refused; logging in again");
                        self.inner.keystone.invalidate(&token).await;
                        continue;
                    }
                    let failure = Error::Status {
                        call: Box::new(call.clone()),
                        status,
                        message: error_message(&String::from_utf8_lossy(&body), status),
                        request_id,
                        attempts: attempt,
                        retry_after,
                    };
                    // A 429 was not processed: sent again whatever the
                    // request. A 503 (nova-api or its proxy unable to take
                    // it) and a 500, 502 or 504 only if the request is safe
                    // to repeat: the caller of a write reads Nova first.
                    let again = status == 429
                        || (request.idempotent && (failure.refused() || failure.outcome_unknown()));
                    if !again {
                        return Err(failure);
                    }
                    (failure, retry_after)
                }
                Err(e) if e.is_connect() => {
                    gate.unavailable();
                    // Nothing was sent: safe to retry any request.
                    let failure = Error::Connect {
                        call: Box::new(call.clone()),
                        reason: describe(&e),
                        attempts: attempt,
                    };
                    (failure, None)
                }
                Err(e) => {
                    let failure = if e.is_timeout() {
                        Error::Timeout {
                            call: Box::new(call.clone()),
                            timeout,
                            attempts: attempt,
                        }
                    } else {
                        Error::Lost {
                            call: Box::new(call.clone()),
                            reason: describe(&e),
                            attempts: attempt,
                        }
                    };
                    if !request.idempotent {
                        return Err(failure);
                    }
                    (failure, None)
                }
            };
            if !self
                .pause(&failure, &mut retries, policy.retry_after(retry_after))
                .await
            {
                return Err(failure);
            }
        }
    }

    /// Waits before the next try; false when the tries or the budget are
    /// spent.
    async fn pause(
        &self,
        failure: &Error,
        retries: &mut Retries,
        retry_after: Option<Duration>,
    ) -> bool {
        let Some(delay) = retries.next_delay(retry_after) else {
            return false;
        };
        tracing::warn!(error = %failure, attempt = retries.tries() - 1, delay_ms = delay.as_millis() as u64, "transient openstack failure; retrying");
        tokio::time::sleep(delay).await;
        true
    }

    /// The token to send as `X-Service-Token`: the service identity's, or
    /// the engine's own if it holds the `service` role.
    async fn service_token(&self, own: &Arc<Token>) -> Result<Option<Arc<Token>>, Error> {
        if let Some(service) = &self.inner.service_keystone {
            return service.token().await.map(Some);
        }
        Ok(own.has_role("service").then(|| own.clone()))
    }

    /// Whether the engine can act as a service caller.
    pub async fn has_service_identity(&self) -> Result<bool, Error> {
        if self.inner.service_keystone.is_some() {
            return Ok(true);
        }
        Ok(self.inner.keystone.token().await?.has_role("service"))
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
    fn error_bodies_are_read_in_every_shape() {
        assert_eq!(
            error_message(
                r#"{"conflictingRequest":{"code":409,"message":"Cannot 'evacuate' instance"}}"#,
                409
            ),
            "Cannot 'evacuate' instance"
        );
        assert_eq!(
            error_message(
                r#"{"error":{"code":401,"title":"Unauthorized","message":"The request you have made requires authentication."}}"#,
                401
            ),
            "The request you have made requires authentication."
        );
        assert_eq!(
            error_message(
                "<html><body><h1>503 Service Unavailable</h1>\nNo server is available.</body></html>",
                503
            ),
            "503 Service Unavailable No server is available."
        );
        assert_eq!(error_message("", 504), "Gateway Timeout");
    }

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
