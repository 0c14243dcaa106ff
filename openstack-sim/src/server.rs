//! The HTTP front: one listener for every API, served with hyper directly so that a fault can
//! drop the TCP connection or hang; each call is classified, fault-checked, delayed, routed and
//! logged.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, Uri};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tower::ServiceExt;

use crate::envelope::{self, Api};
use crate::faults::{CallFacts, ErrorBody, FaultEffect, FaultService, FaultSet};
use crate::request_log::{RequestLog, RequestRecord};
use crate::scenario::Scenario;
use crate::world::World;

/// State every handler shares.
pub(crate) struct Shared {
    pub world: Mutex<World>,
    pub faults: Mutex<FaultSet>,
    pub log: Mutex<RequestLog>,
    /// The scenario last loaded (what `reset` goes back to).
    pub scenario: Mutex<Scenario>,
    /// `http://127.0.0.1:PORT` (`https://` when served with TLS).
    pub base_url: String,
}

impl Shared {
    pub fn identity_url(&self) -> String {
        format!("{}/identity", self.base_url)
    }

    /// Simulated seconds since the scenario was loaded.
    pub fn sim_now(&self) -> f64 {
        self.world.lock().clock.now().as_secs_f64()
    }
}

/// The catalog interface a call came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Interface {
    #[default]
    Public,
    Internal,
}

impl Interface {
    pub fn as_str(self) -> &'static str {
        match self {
            Interface::Public => "public",
            Interface::Internal => "internal",
        }
    }

    /// The path prefix of the interface's endpoints.
    pub fn prefix(self) -> &'static str {
        match self {
            Interface::Public => "",
            Interface::Internal => "/internal",
        }
    }
}

/// Per-call facts handed to the handlers as a request extension.
#[derive(Debug, Clone, Default)]
pub(crate) struct RequestMeta {
    /// `req-<uuid>`, returned as the request id header.
    pub request_id: String,
    pub interface: Interface,
}

/// Response extension naming the negotiated microversion, for the request log.
#[derive(Debug, Clone)]
pub(crate) struct LoggedVersion(pub String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Service {
    Identity,
    Compute,
    Volume,
    Control,
    Other,
}

impl Service {
    fn as_str(self) -> &'static str {
        match self {
            Service::Identity => "identity",
            Service::Compute => "compute",
            Service::Volume => "volume",
            Service::Control => "control",
            Service::Other => "other",
        }
    }

    fn fault_service(self) -> Option<FaultService> {
        match self {
            Service::Identity => Some(FaultService::Identity),
            Service::Compute => Some(FaultService::Compute),
            Service::Volume => Some(FaultService::Volume),
            _ => None,
        }
    }
}

fn segment_is(path: &str, prefix: &str) -> bool {
    path == prefix || path.starts_with(&format!("{prefix}/"))
}

fn classify(path: &str) -> Service {
    if segment_is(path, "/identity") {
        Service::Identity
    } else if segment_is(path, "/compute") {
        Service::Compute
    } else if segment_is(path, "/volume") {
        Service::Volume
    } else if segment_is(path, "/sim") {
        Service::Control
    } else {
        Service::Other
    }
}

/// Cinder resource collections (a first segment that is not a project id).
const CINDER_RESOURCES: &[&str] = &["volumes", "attachments", "types", "limits", "os-services"];

/// The path relative to the service's versioned root, as fault rules match it.
fn relative_path(service: Service, path: &str) -> String {
    let strip = |p: &str, prefix: &str| -> Option<String> {
        segment_is(p, prefix).then(|| p[prefix.len()..].to_string())
    };
    let rel = match service {
        Service::Identity => strip(path, "/identity/v3").or_else(|| strip(path, "/identity")),
        Service::Compute => strip(path, "/compute/v2.1").or_else(|| strip(path, "/compute")),
        Service::Volume => strip(path, "/volume/v3")
            .map(|rest| {
                let first = rest.trim_start_matches('/').split('/').next().unwrap_or("");
                if first.is_empty() || CINDER_RESOURCES.contains(&first) {
                    rest
                } else {
                    rest.trim_start_matches('/')[first.len()..].to_string()
                }
            })
            .or_else(|| strip(path, "/volume")),
        _ => Some(path.to_string()),
    };
    let rel = rel.unwrap_or_default();
    if rel.is_empty() { "/".into() } else { rel }
}

fn server_id_in(rel: &str) -> Option<String> {
    let mut parts = rel.trim_start_matches('/').split('/');
    (parts.next() == Some("servers"))
        .then(|| parts.next())
        .flatten()
        .filter(|id| !id.is_empty() && *id != "detail")
        .map(str::to_string)
}

fn header_string(req: &axum::http::request::Parts, name: &str) -> Option<String> {
    req.headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

struct CallLog {
    started: Instant,
    record: RequestRecord,
}

impl CallLog {
    fn finish(
        mut self,
        shared: &Shared,
        status: Option<u16>,
        outcome: &str,
        response: Option<&Response<Body>>,
    ) {
        self.record.duration_ms = self.started.elapsed().as_secs_f64() * 1000.0;
        self.record.status = status;
        self.record.outcome = outcome.into();
        if let Some(resp) = response {
            if let Some(v) = resp.extensions().get::<LoggedVersion>() {
                self.record.microversion = Some(v.0.clone());
            }
            self.record.request_id = resp
                .headers()
                .get("x-openstack-request-id")
                .or_else(|| resp.headers().get("x-compute-request-id"))
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
        }
        shared.log.lock().push(self.record);
    }
}

/// Serves one call.
async fn handle(
    shared: Arc<Shared>,
    router: Router,
    drop_connection: Arc<Notify>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let started = Instant::now();
    let (mut parts, body) = req.into_parts();
    let original_path = parts.uri.path().to_string();
    let query = parts.uri.query().map(str::to_string);
    let (interface, path) = if segment_is(&original_path, "/internal") {
        let rest = &original_path["/internal".len()..];
        (
            Interface::Internal,
            if rest.is_empty() {
                "/".to_string()
            } else {
                rest.to_string()
            },
        )
    } else {
        (Interface::Public, original_path.clone())
    };
    if interface == Interface::Internal {
        let rebuilt = match &query {
            Some(q) => format!("{path}?{q}"),
            None => path.clone(),
        };
        if let Ok(uri) = rebuilt.parse::<Uri>() {
            parts.uri = uri;
        }
    }
    let service = classify(&path);
    let rel = relative_path(service, &path);
    let method = parts.method.clone();

    let (body, action) = if method == axum::http::Method::POST && path.ends_with("/action") {
        let bytes = axum::body::to_bytes(Body::new(body), 4 << 20)
            .await
            .unwrap_or_default();
        let action = serde_json::from_slice::<Value>(&bytes)
            .ok()
            .and_then(|v| v.as_object().and_then(|o| o.keys().next().cloned()));
        (Body::from(bytes), action)
    } else {
        (Body::new(body), None)
    };
    let instance_id = (service == Service::Compute)
        .then(|| server_id_in(&rel))
        .flatten();

    let api = service.fault_service().is_some();
    let (sim_time, latency) = {
        let world = shared.world.lock();
        let latency = if api {
            world
                .clock
                .real_duration(world.settings.durations.api_latency)
        } else {
            Duration::ZERO
        };
        (world.clock.now().as_secs_f64(), latency)
    };
    let mut log = CallLog {
        started,
        record: RequestRecord {
            seq: 0,
            time: chrono::Utc::now(),
            sim_time,
            service: service.as_str().into(),
            interface: interface.as_str().into(),
            method: method.to_string(),
            path: path.clone(),
            query,
            action: action.clone(),
            instance_id: instance_id.clone(),
            microversion: header_string(&parts, "openstack-api-version")
                .or_else(|| header_string(&parts, "x-openstack-nova-api-version")),
            status: None,
            duration_ms: 0.0,
            request_id: None,
            global_request_id: header_string(&parts, "x-openstack-request-id"),
            traceparent: header_string(&parts, "traceparent"),
            has_service_token: parts.headers.contains_key("x-service-token"),
            fault_id: None,
            outcome: String::new(),
        },
    };
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let fault = service.fault_service().and_then(|fs| {
        let now = shared.sim_now();
        let mut faults = shared.faults.lock();
        if faults.is_empty() {
            return None;
        }
        faults.apply(
            &CallFacts {
                service: fs,
                method: method.as_str(),
                path: &rel,
                action: action.as_deref(),
                instance_id: instance_id.as_deref(),
            },
            now,
        )
    });
    let request_id = format!("req-{}", uuid::Uuid::new_v4());
    parts.extensions.insert(RequestMeta {
        request_id: request_id.clone(),
        interface,
    });
    let request = Request::from_parts(parts, body);

    if let Some((fault_id, _)) = &fault {
        log.record.fault_id = Some(*fault_id);
    }
    let mut response = match fault.map(|(_, effect)| effect) {
        Some(FaultEffect::Error {
            status,
            body,
            message,
            retry_after,
        }) => {
            let message = message.unwrap_or_else(|| default_fault_message(status));
            match (body, service) {
                (ErrorBody::Html, _) => envelope::html_error(status, retry_after),
                (ErrorBody::Json, Service::Identity) => {
                    envelope::keystone_error(status, &message, &shared.identity_url(), retry_after)
                }
                (ErrorBody::Json, Service::Volume) => {
                    envelope::service_error(Api::Volume, status, &message, retry_after)
                }
                (ErrorBody::Json, _) => {
                    let mut r =
                        envelope::service_error(Api::Compute, status, &message, retry_after);
                    if let Ok(v) = HeaderValue::from_str(&request_id) {
                        r.headers_mut().insert("x-compute-request-id", v);
                    }
                    r
                }
            }
        }
        Some(FaultEffect::Latency { ms }) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            router
                .oneshot(request)
                .await
                .unwrap_or_else(|never| match never {})
        }
        Some(FaultEffect::Drop) => {
            log.finish(&shared, None, "dropped", None);
            drop_connection.notify_one();
            return std::future::pending().await;
        }
        Some(FaultEffect::Hang) => {
            log.finish(&shared, None, "hung", None);
            return std::future::pending().await;
        }
        None => router
            .oneshot(request)
            .await
            .unwrap_or_else(|never| match never {}),
    };
    if matches!(service, Service::Identity | Service::Volume)
        && !response.headers().contains_key("x-openstack-request-id")
        && response
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .is_none_or(|c| c != "text/html")
        && let Ok(v) = HeaderValue::from_str(&request_id)
    {
        // Cinder's request-id middleware also sends Nova's compat header.
        if service == Service::Volume {
            response
                .headers_mut()
                .insert("x-compute-request-id", v.clone());
        }
        response.headers_mut().insert("x-openstack-request-id", v);
    }
    let status = response.status().as_u16();
    log.finish(&shared, Some(status), "response", Some(&response));
    Ok(response)
}

fn default_fault_message(status: u16) -> String {
    match status {
        503 => "The server is currently unavailable. Please try again at a later time.".into(),
        500 => "Unexpected API Error. Please report this at http://bugs.launchpad.net/nova/ and attach the Nova API log if possible.".into(),
        429 | 413 => "Rate limit exceeded; retry later.".into(),
        502 => "Bad gateway.".into(),
        504 => "Gateway timeout.".into(),
        401 => "The request you have made requires authentication.".into(),
        _ => format!("Injected fault with status {status}."),
    }
}

/// Accepts connections until shutdown; each connection is served until it ends, a fault drops
/// it, or shutdown closes it. With `tls`, each connection is a TLS one (a failed handshake
/// closes it).
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    router: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let shared = shared.clone();
                let router = router.clone();
                let shutdown = shutdown.clone();
                let tls = tls.clone();
                connections.spawn(async move {
                    match tls {
                        None => serve_connection(stream, shared, router, shutdown).await,
                        Some(acceptor) => match acceptor.accept(stream).await {
                            Ok(stream) => serve_connection(stream, shared, router, shutdown).await,
                            Err(error) => tracing::debug!(%error, "tls handshake failed"),
                        },
                    }
                });
            }
            _ = stopped(&mut shutdown) => break,
        }
        while connections.try_join_next().is_some() {}
    }
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    connections.abort_all();
}

async fn serve_connection<S>(
    stream: S,
    shared: Arc<Shared>,
    router: Router,
    mut shutdown: watch::Receiver<bool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let drop_connection = Arc::new(Notify::new());
    let signal = drop_connection.clone();
    let service = hyper::service::service_fn(move |req| {
        handle(shared.clone(), router.clone(), signal.clone(), req)
    });
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        _ = drop_connection.notified() => {}
        _ = stopped(&mut shutdown) => {
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_millis(500), connection).await;
        }
    }
}

/// Resolves once shutdown is signalled.
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

/// Applies due events regularly so state advances without requests.
pub(crate) async fn tick(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let mut interval = tokio::time::interval(Duration::from_millis(20));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = interval.tick() => { shared.world.lock().tick(); }
            _ = stopped(&mut shutdown) => break,
        }
    }
}

/// Percent-decodes a query component (`+` is a space).
pub(crate) fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 3 <= bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The query's name/value pairs, in order.
pub(crate) fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(pair), String::new()),
        })
        .collect()
}

/// Percent-encodes a query component.
pub(crate) fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_strip_the_service_root() {
        assert_eq!(
            relative_path(Service::Compute, "/compute/v2.1/servers/detail"),
            "/servers/detail"
        );
        assert_eq!(relative_path(Service::Compute, "/compute/"), "/");
        assert_eq!(
            relative_path(Service::Volume, "/volume/v3/abc123/volumes/x"),
            "/volumes/x"
        );
        assert_eq!(
            relative_path(Service::Volume, "/volume/v3/attachments/x"),
            "/attachments/x"
        );
        assert_eq!(
            relative_path(Service::Identity, "/identity/v3/auth/tokens"),
            "/auth/tokens"
        );
        assert_eq!(server_id_in("/servers/abc/action").as_deref(), Some("abc"));
        assert_eq!(server_id_in("/servers/detail"), None);
    }

    #[test]
    fn queries_decode() {
        let pairs = query_pairs(Some("all_tenants=1&host=compute%2D01&name=a+b&flag"));
        assert_eq!(pairs[1], ("host".into(), "compute-01".into()));
        assert_eq!(pairs[2].1, "a b");
        assert_eq!(pairs[3], ("flag".into(), String::new()));
        assert_eq!(decode("100%"), "100%");
        assert_eq!(encode("a b/c"), "a%20b%2Fc");
    }
}
