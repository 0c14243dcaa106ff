//! The Masakari-compatible REST API, over HTTP: version discovery and
//! microversions, each resource's status codes, bodies and errors, paging,
//! authentication, a REST notification recovered end to end and watched
//! over gRPC, and Masakari's own Python clients (when
//! `INSTANCEHA_TEST_PYTHON` names a Python that has them).

mod clients;
mod cloud;
mod hosts;
mod notifications;
mod protocol;
mod request_ids;
mod segments;
mod tls;

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::TestApp;

/// A REST client for one API, optionally at a microversion and with a
/// token.
#[derive(Clone)]
pub struct Rest {
    client: reqwest::Client,
    base: String,
    version: Option<String>,
    token: Option<String>,
}

/// A response: status, headers and the body as JSON (`Null` if empty).
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Reply {
    /// The `OpenStack-API-Version` header, if any.
    pub fn version_header(&self) -> Option<&str> {
        self.headers
            .get("openstack-api-version")
            .and_then(|v| v.to_str().ok())
    }

    /// The message of a Masakari fault named `fault`, asserting its code.
    pub fn fault(&self, fault: &str) -> &str {
        let body = &self.body[fault];
        assert_eq!(
            body["code"].as_u64(),
            Some(u64::from(self.status)),
            "a {fault} fault: {:#}",
            self.body
        );
        body["message"].as_str().expect("a fault message")
    }

    /// Asserts the status, showing the body when it differs.
    #[track_caller]
    pub fn expect(&self, status: u16) -> &Value {
        assert_eq!(self.status, status, "{:#}", self.body);
        &self.body
    }
}

impl Rest {
    pub fn new(app: &TestApp) -> Self {
        Self::at_addr(app.rest.expect("the REST API is on"))
    }

    pub fn at_addr(addr: std::net::SocketAddr) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Self {
            client: reqwest::Client::new(),
            base: format!("http://{addr}"),
            version: None,
            token: None,
        }
    }

    /// A client of the REST API on TLS at `addr`, trusting the CA in the
    /// PEM file `ca` and reaching it as `localhost`.
    pub fn over_tls(addr: std::net::SocketAddr, ca: &std::path::Path) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let ca = reqwest::Certificate::from_pem(&std::fs::read(ca).expect("the CA file"))
            .expect("a CA certificate");
        Self {
            client: reqwest::Client::builder()
                .add_root_certificate(ca)
                .resolve("localhost", addr)
                .build()
                .expect("an https client"),
            base: format!("https://localhost:{}", addr.port()),
            version: None,
            token: None,
        }
    }

    /// The same client asking for microversion `version`.
    pub fn version(&self, version: &str) -> Self {
        Self {
            version: Some(version.to_owned()),
            ..self.clone()
        }
    }

    pub fn token(&self, token: &str) -> Self {
        Self {
            token: Some(token.to_owned()),
            ..self.clone()
        }
    }

    pub async fn send(&self, method: Method, path: &str, body: Option<&Value>) -> Reply {
        let mut request = self.client.request(method, format!("{}{path}", self.base));
        if let Some(version) = &self.version {
            request = request.header("OpenStack-API-Version", format!("instance-ha {version}"));
        }
        if let Some(token) = &self.token {
            request = request.header("X-Auth-Token", token);
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.expect("the REST API answers");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.expect("a body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)))
        };
        Reply {
            status,
            headers,
            body,
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.send(Method::POST, path, Some(&body)).await
    }

    pub async fn put(&self, path: &str, body: Value) -> Reply {
        self.send(Method::PUT, path, Some(&body)).await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.send(Method::DELETE, path, None).await
    }

    /// A base URL for raw requests.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// Creates a segment (`auto`) and returns its body.
    pub async fn segment(&self, name: &str) -> Value {
        self.post(
            "/v1/segments",
            json!({"segment": {"name": name, "recovery_method": "auto", "service_type": "COMPUTE"}}),
        )
        .await
        .expect(201)["segment"]
            .clone()
    }

    /// Creates a host in `segment` and returns its body.
    pub async fn host(&self, segment: &str, name: &str) -> Value {
        self.post(
            &format!("/v1/segments/{segment}/hosts"),
            json!({"host": {"name": name, "type": "COMPUTE", "control_attributes": "SSH"}}),
        )
        .await
        .expect(201)["host"]
            .clone()
    }
}

/// A notification body as a hostmonitor sends it for `host`.
pub fn host_down(host: &str, generated_time: &str) -> Value {
    json!({"notification": {
        "type": "COMPUTE_HOST",
        "hostname": host,
        "generated_time": generated_time,
        "payload": {"event": "STOPPED", "host_status": "NORMAL", "cluster_status": "OFFLINE"},
    }})
}

/// Now, as Masakari's clients write it.
pub fn now() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6f")
        .to_string()
}

/// `minutes` ago, to the second: reports older than `dispatch.expire_after`
/// are refused, so fixed dates would not stay valid.
pub fn minutes_ago(minutes: i64) -> chrono::DateTime<chrono::Utc> {
    use chrono::SubsecRound;
    (chrono::Utc::now() - chrono::Duration::minutes(minutes)).trunc_subsecs(0)
}

/// The `uuid` (or `notification_uuid`) strings of a list.
pub fn uuids(list: &Value, key: &str) -> Vec<String> {
    list.as_array()
        .expect("a list")
        .iter()
        .map(|item| item[key].as_str().expect("a uuid").to_owned())
        .collect()
}
