//! Microversions and version discovery, as Masakari does them
//! (`masakari/api/api_version_request.py`, `api/openstack/wsgi.py`,
//! `api/openstack/ha/versions.py`).
//!
//! A request under `/v1` may ask for a microversion with
//! `OpenStack-API-Version: instance-ha X.Y` (or `latest`); without one it
//! gets 1.0. A malformed version is 400, one outside 1.0 to 1.3 is 406.
//! Masakari 22 answers successes (`Resource.__call__` in
//! `masakari/api/openstack/wsgi.py`) and faults (`Fault.__call__`, same
//! file) with `OpenStack-API-Version: instance-ha X.Y` and
//! `Vary: OpenStack-API-Version`; a 406 for an out-of-range version gets
//! the `Vary` but no `OpenStack-API-Version` (`Fault.__call__` skips it for
//! `NOT_ACCEPTABLE`), and a malformed version (400) gets neither, as the
//! request never had a version. So do we.

use std::fmt;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::RestState;
use super::call::Call;
use super::error::{NoVersionHeaders, RestError};
use crate::auth::Operation;

/// The header, in Masakari's spelling.
pub const HEADER: &str = "OpenStack-API-Version";
/// The service type clients name in the header.
pub const SERVICE_TYPE: &str = "instance-ha";

pub const MIN_VERSION: ApiVersion = ApiVersion { major: 1, minor: 0 };
pub const MAX_VERSION: ApiVersion = ApiVersion { major: 1, minor: 3 };

/// A microversion, `major.minor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiVersion {
    pub major: u32,
    pub minor: u32,
}

impl ApiVersion {
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }

    /// Notifications show `recovery_workflow_details`.
    pub fn has_workflow_details(self) -> bool {
        self >= Self::new(1, 1)
    }

    /// Segments take `enabled` in create and update bodies.
    pub fn has_segment_enabled(self) -> bool {
        self >= Self::new(1, 2)
    }

    /// `^([1-9]\d*)\.([1-9]\d*|0)$`, Masakari's format.
    fn parse(s: &str) -> Option<Self> {
        let (major, minor) = s.split_once('.')?;
        Some(Self {
            major: number(major, false)?,
            minor: number(minor, true)?,
        })
    }
}

/// Digits without a leading zero (`0` itself only where allowed).
fn number(part: &str, zero_allowed: bool) -> Option<u32> {
    if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if part.starts_with('0') && !(zero_allowed && part == "0") {
        return None;
    }
    part.parse().ok()
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Why a requested microversion is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VersionRequest {
    /// No header for `instance-ha`: 1.0.
    Default,
    Latest,
    Exact(ApiVersion),
    /// Not `X.Y` (400).
    Malformed(String),
}

/// What the request asks for (microversion-parse's rules: every
/// `OpenStack-API-Version` header, comma-separated entries, the service
/// type compared without case).
pub fn requested(headers: &HeaderMap) -> VersionRequest {
    let entries = headers
        .get_all(HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','));
    for entry in entries {
        let mut parts = entry.split_whitespace();
        let (Some(service), Some(version)) = (parts.next(), parts.next()) else {
            continue;
        };
        if !service.eq_ignore_ascii_case(SERVICE_TYPE) {
            continue;
        }
        if version.eq_ignore_ascii_case("latest") {
            return VersionRequest::Latest;
        }
        return match ApiVersion::parse(version) {
            Some(v) => VersionRequest::Exact(v),
            None => VersionRequest::Malformed(version.to_owned()),
        };
    }
    VersionRequest::Default
}

/// The middleware on every `/v1` route: settles the version (or answers
/// 400/406), hands it to the handler, and sets the response headers.
pub async fn negotiate(mut request: Request, next: Next) -> Response {
    let version = match settle(request.headers()) {
        Ok(version) => version,
        Err(refused) => return *refused,
    };
    request.extensions_mut().insert(version);
    let mut response = next.run(request).await;
    if response.extensions().get::<NoVersionHeaders>().is_none() {
        set_headers(&mut response, version);
    }
    response
}

/// A fault for a `/v1` request answered outside the routes (405) with the
/// version headers Masakari's `Fault` gives it once the version is settled.
pub fn with_version_headers(headers: &HeaderMap, mut response: Response) -> Response {
    match settle(headers) {
        Ok(version) => {
            set_headers(&mut response, version);
            response
        }
        Err(refused) => *refused,
    }
}

/// The version a request is served at, or its 400/406.
fn settle(headers: &HeaderMap) -> Result<ApiVersion, Box<Response>> {
    Ok(match requested(headers) {
        VersionRequest::Default => MIN_VERSION,
        VersionRequest::Latest => MAX_VERSION,
        VersionRequest::Exact(v) if (MIN_VERSION..=MAX_VERSION).contains(&v) => v,
        VersionRequest::Exact(v) => {
            let mut response = RestError::NotAcceptable(format!(
                "Version {v} is not supported by the API. Minimum is {MIN_VERSION} and maximum is {MAX_VERSION}."
            ))
            .into_response();
            // Masakari's Fault.__call__: Vary, no OpenStack-API-Version.
            response
                .headers_mut()
                .append(header::VARY, HeaderValue::from_static(HEADER));
            return Err(Box::new(response));
        }
        VersionRequest::Malformed(s) => {
            // Masakari has no version for this request: no header.
            return Err(Box::new(
                RestError::BadRequest(format!(
                    "API Version String {s} is of invalid format. Must be of format MajorNum.MinorNum."
                ))
                .into_response(),
            ));
        }
    })
}

fn set_headers(response: &mut Response, version: ApiVersion) {
    if let Ok(value) = HeaderValue::from_str(&format!("{SERVICE_TYPE} {version}")) {
        response.headers_mut().insert(HEADER, value);
    }
    response
        .headers_mut()
        .append(header::VARY, HeaderValue::from_static(HEADER));
}

/// Masakari's one API version, as its version documents describe it.
fn version_document() -> serde_json::Map<String, Value> {
    let value = json!({
        "id": "v1.0",
        "status": "CURRENT",
        "version": MAX_VERSION.to_string(),
        "min_version": MIN_VERSION.to_string(),
        "updated": "2016-07-01T11:33:21Z",
        "links": [
            {"rel": "describedby", "type": "text/html", "href": "https://docs.openstack.org/"}
        ],
        "media-types": [
            {"base": "application/json", "type": "application/vnd.openstack.masakari+json;version=1"}
        ],
    });
    value.as_object().cloned().unwrap_or_default()
}

/// `GET /`: the versions (no authentication, as keystoneauth's discovery
/// expects).
/// Links name `rest.public_url`, never the request's `Host`.
pub async fn index(State(state): State<RestState>) -> Response {
    let document = version_document();
    let base = &state.base_url;
    let entry = json!({
        "id": document["id"],
        "status": document["status"],
        "version": document["version"],
        "min_version": document["min_version"],
        "updated": document["updated"],
        "links": [{"rel": "self", "href": format!("{base}/v1/")}],
    });
    axum::Json(json!({ "versions": [entry] })).into_response()
}

/// `GET /v1`: this version (authenticated, as in Masakari's pipeline).
pub async fn show(State(state): State<RestState>, call: Call) -> Result<Response, RestError> {
    call.allow(&state, Operation::ListVersions).await?;
    let mut document = version_document();
    if let Some(Value::Array(links)) = document.get_mut("links") {
        links.insert(
            0,
            json!({"rel": "self", "href": format!("{}/v1/", state.base_url)}),
        );
    }
    Ok(axum::Json(json!({ "version": document })).into_response())
}

/// Anything else: 300 with the choices outside `/v1` (Masakari's version
/// application answers every other path so), 404 under it.
pub async fn fallback(State(state): State<RestState>, uri: Uri) -> Response {
    let path = uri.path();
    if path == "/v1" || path.starts_with("/v1/") {
        return RestError::NotFound("The resource could not be found.".to_owned()).into_response();
    }
    let document = version_document();
    let base = &state.base_url;
    let choice = json!({
        "id": document["id"],
        "status": document["status"],
        "links": [{"rel": "self", "href": format!("{base}/v1/{}", path.trim_start_matches('/'))}],
        "media-types": document["media-types"],
    });
    (
        StatusCode::MULTIPLE_CHOICES,
        axum::Json(json!({ "choices": [choice] })),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in values {
            map.append(HEADER, v.parse().unwrap());
        }
        map
    }

    #[test]
    fn versions_parse_as_masakari_does() {
        assert_eq!(ApiVersion::parse("1.3"), Some(ApiVersion::new(1, 3)));
        assert_eq!(ApiVersion::parse("1.0"), Some(ApiVersion::new(1, 0)));
        assert_eq!(ApiVersion::parse("10.20"), Some(ApiVersion::new(10, 20)));
        for bad in [
            "1", "1.", ".1", "01.1", "1.01", "0.9", "1.x", "a.b", "1.2.3", "",
        ] {
            assert_eq!(ApiVersion::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_header_is_found_among_others() {
        assert_eq!(requested(&HeaderMap::new()), VersionRequest::Default);
        assert_eq!(
            requested(&headers(&["compute 2.1"])),
            VersionRequest::Default
        );
        assert_eq!(
            requested(&headers(&["compute 2.1, Instance-HA 1.2"])),
            VersionRequest::Exact(ApiVersion::new(1, 2))
        );
        assert_eq!(
            requested(&headers(&["compute 2.1", "instance-ha latest"])),
            VersionRequest::Latest
        );
        assert_eq!(
            requested(&headers(&["instance-ha 1.02"])),
            VersionRequest::Malformed("1.02".to_owned())
        );
    }

    #[test]
    fn features_follow_the_version() {
        assert!(!MIN_VERSION.has_workflow_details());
        assert!(ApiVersion::new(1, 1).has_workflow_details());
        assert!(!ApiVersion::new(1, 1).has_segment_enabled());
        assert!(MAX_VERSION.has_segment_enabled());
    }
}
