//! A recording reverse proxy between the engine and a cloud (real or
//! simulated): every call passes through unchanged and is kept, with its
//! response. The engine finds its endpoints in Keystone's catalog, so the
//! proxy rewrites every upstream address in the bodies and `Location`
//! headers it returns to its own: pointed at the proxied Keystone, the
//! engine's calls to Nova and Cinder come through it too. The same proxy in
//! front of both clouds makes their records comparable
//! (`tests/it/sim_vs_real.rs`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Response, StatusCode};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One call and its answer.
#[derive(Clone, Debug)]
pub struct Exchange {
    /// The label of the upstream it went to (`keystone`, `nova`, `sim`...).
    pub upstream: String,
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// The request's `OpenStack-API-Version`, if any.
    pub microversion: Option<String>,
    pub request: Option<Value>,
    /// `None` when the caller had no answer: the upstream did not answer,
    /// or the caller gave up waiting first (its timeout).
    pub status: Option<u16>,
    /// The answer, when it is JSON.
    pub response: Option<Value>,
    /// The names of the answer's headers, lowercase.
    pub response_headers: Vec<String>,
}

/// Every call so far in the order they came, each with whether it is
/// over (answered, or given up by its caller).
type Log = Arc<Mutex<Vec<(Exchange, bool)>>>;

/// A proxy in front of each of a cloud's upstreams.
pub struct Recorder {
    exchanges: Log,
    /// (upstream origin, proxy origin).
    origins: Vec<(String, String)>,
    tasks: Vec<JoinHandle<()>>,
}

struct Upstream {
    label: String,
    origin: String,
    http: reqwest::Client,
    exchanges: Log,
    /// Every (upstream origin, proxy origin) of the recorder, filled once
    /// all proxies listen.
    origins: Arc<Mutex<Vec<(String, String)>>>,
}

/// Headers a proxy does not pass on (hop by hop, or rewritten).
const DROPPED: [&str; 7] = [
    "host",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "upgrade",
    "content-length",
];

impl Recorder {
    /// One proxy on loopback per `(label, origin)`, e.g.
    /// `("nova", "http://127.0.0.1:25774")`.
    pub async fn start(upstreams: &[(&str, &str)]) -> Recorder {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let exchanges = Arc::new(Mutex::new(Vec::new()));
        let shared_origins = Arc::new(Mutex::new(Vec::new()));
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an http client");
        let mut origins = Vec::new();
        let mut tasks = Vec::new();
        for (label, origin) in upstreams {
            let origin = origin.trim_end_matches('/').to_owned();
            let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
                .await
                .expect("a loopback port");
            let proxy = format!("http://{}", listener.local_addr().unwrap());
            origins.push((origin.clone(), proxy));
            let upstream = Arc::new(Upstream {
                label: (*label).to_owned(),
                origin,
                http: http.clone(),
                exchanges: exchanges.clone(),
                origins: shared_origins.clone(),
            });
            let app = Router::new().fallback(forward).with_state(upstream);
            tasks.push(tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            }));
        }
        *shared_origins.lock().unwrap() = origins.clone();
        Recorder {
            exchanges,
            origins,
            tasks,
        }
    }

    /// `url` with its upstream origin replaced by the proxy's.
    pub fn url(&self, url: &str) -> String {
        rewrite(url, &self.origins)
    }

    /// Every call over so far, in the order they came; a call its caller
    /// gave up on before the answer (its timeout), with no status.
    pub fn exchanges(&self) -> Vec<Exchange> {
        self.exchanges
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, over)| *over)
            .map(|(e, _)| e.clone())
            .collect()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn rewrite(text: &str, origins: &[(String, String)]) -> String {
    origins
        .iter()
        .fold(text.to_owned(), |t, (from, to)| t.replace(from, to))
}

/// One call in the log, from its arrival: when its handler is dropped
/// before the answer (the caller gave up and closed the connection), the
/// call is over without an answer.
struct Entry {
    log: Log,
    index: usize,
}

impl Entry {
    fn open(log: &Log, exchange: Exchange) -> Entry {
        let mut list = log.lock().unwrap();
        list.push((exchange, false));
        Entry {
            log: log.clone(),
            index: list.len() - 1,
        }
    }

    /// The call answered (or not, `status` none).
    fn close(self, exchange: Exchange) {
        self.log.lock().unwrap()[self.index] = (exchange, true);
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        if let Ok(mut list) = self.log.lock() {
            list[self.index].1 = true;
        }
    }
}

async fn forward(State(up): State<Arc<Upstream>>, request: Request) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 64 << 20)
        .await
        .unwrap_or_default();
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().map(str::to_owned);
    let target = match &query {
        Some(q) => format!("{}{path}?{q}", up.origin),
        None => format!("{}{path}", up.origin),
    };
    let mut outgoing = up.http.request(parts.method.clone(), target);
    for (name, value) in &parts.headers {
        if !DROPPED.contains(&name.as_str()) {
            outgoing = outgoing.header(name, value);
        }
    }
    let mut exchange = Exchange {
        upstream: up.label.clone(),
        method: parts.method.to_string(),
        path,
        query,
        microversion: parts
            .headers
            .get("openstack-api-version")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        request: serde_json::from_slice(&body).ok(),
        status: None,
        response: None,
        response_headers: Vec::new(),
    };
    let entry = Entry::open(&up.exchanges, exchange.clone());
    let answer = match outgoing.body(body).send().await {
        Ok(answer) => answer,
        Err(e) => {
            entry.close(exchange);
            return Response::builder()
                .status(StatusCode::BAD_GATEWAY)
                .body(Body::from(format!("recorder: {e}")))
                .unwrap();
        }
    };
    let status = answer.status();
    let headers = answer.headers().clone();
    let bytes = answer.bytes().await.unwrap_or_default();
    let origins = up.origins.lock().unwrap().clone();
    let text = rewrite(&String::from_utf8_lossy(&bytes), &origins);
    exchange.status = Some(status.as_u16());
    exchange.response_headers = headers.keys().map(|k| k.as_str().to_owned()).collect();
    exchange.response = serde_json::from_str(&text).ok();
    entry.close(exchange);
    let mut response = Response::builder().status(status);
    for (name, value) in &headers {
        if DROPPED.contains(&name.as_str()) {
            continue;
        }
        let value = if name == "location" {
            HeaderValue::from_str(&rewrite(value.to_str().unwrap_or(""), &origins))
                .unwrap_or_else(|_| value.clone())
        } else {
            value.clone()
        };
        response = response.header(HeaderName::from(name), value);
    }
    let body = if std::str::from_utf8(&bytes).is_ok() {
        Body::from(text)
    } else {
        Body::from(bytes)
    };
    response.body(body).unwrap()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use axum::routing::get;

    use super::*;

    /// An upstream answering `/slow` after two seconds and `/fast` at once.
    async fn upstream() -> String {
        let app = Router::new()
            .route(
                "/slow",
                get(|| async {
                    // sleep: the slow upstream's two seconds.
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    "{}"
                }),
            )
            .route("/fast", get(|| async { "{\"a\": 1}" }));
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        origin
    }

    #[tokio::test]
    async fn a_call_given_up_on_is_kept_unanswered_and_one_in_flight_not_yet() {
        let origin = upstream().await;
        let recorder = Recorder::start(&[("up", &origin)]).await;
        let client = reqwest::Client::new();
        let url = |path: &str| recorder.url(&format!("{origin}{path}"));

        let gave_up = client
            .get(url("/slow"))
            .timeout(Duration::from_millis(200))
            .send()
            .await;
        assert!(gave_up.is_err(), "the caller gave up");
        let fast = client.get(url("/fast")).send().await.unwrap();
        assert_eq!(fast.status(), 200);
        // Nothing outside the proxy shows when it has noticed the closed
        // connection. sleep: time for it to notice.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let in_flight = tokio::spawn(client.get(url("/slow")).send());
        // The proxy must not record the call before its answer.
        // sleep: time for the call to reach the proxy.
        tokio::time::sleep(Duration::from_millis(500)).await;

        let seen: Vec<(String, Option<u16>)> = recorder
            .exchanges()
            .iter()
            .map(|e| (e.path.clone(), e.status))
            .collect();
        assert_eq!(
            seen,
            [("/slow".to_owned(), None), ("/fast".to_owned(), Some(200))],
            "in the order they came, the one in flight not yet"
        );
        assert_eq!(in_flight.await.unwrap().unwrap().status(), 200);
        assert_eq!(recorder.exchanges()[2].status, Some(200));
    }
}
