//! Who is looking: the token entered once on the login page, kept in an
//! `HttpOnly`, `SameSite=Strict` cookie (`Secure` under TLS) and checked
//! on every request with the APIs' own guard (`crate::auth`), so a
//! Keystone or static token means the same here as on gRPC and REST, and
//! what a role may see and do is the operation table's. The cookie holds
//! the token itself, not a server-side session, so a page survives a
//! restart of the API (or another replica answering).
//!
//! Actions (POST) carry a CSRF token from the page: a digest of the
//! session's token, which a page of another site can neither read nor
//! compute; and they must come from this origin (`Origin`,
//! `Sec-Fetch-Site`).

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

use super::error::ConsoleError;
use crate::auth::{AuthError, Guard, Operation, Principal, Refusal};

/// The session cookie's name.
pub const COOKIE: &str = "instanceha_console";

/// The longest token accepted (Keystone's Fernet tokens are about 200
/// characters; PKI tokens were a few KiB).
const MAX_TOKEN: usize = 8192;

/// The guard's verdict on `token` for `operation`, counted against the
/// caller's request budget. With [`check`], the one place the console
/// calls the guard.
pub async fn admit(
    guard: &Guard,
    token: Option<&str>,
    operation: Operation,
    client: Option<IpAddr>,
) -> Result<Principal, Refusal> {
    guard.admit(token, Some(operation), client).await
}

/// The guard's verdict on `token` for `operation`, not counted.
pub async fn check(
    guard: &Guard,
    token: Option<&str>,
    operation: Operation,
) -> Result<Principal, AuthError> {
    guard.check(token, Some(operation)).await
}

/// Whether `token` may call `operation` (not counted: the page asks to
/// decide which buttons to show).
pub async fn permits(guard: &Guard, token: Option<&str>, operation: Operation) -> bool {
    check(guard, token, operation).await.is_ok()
}

/// The address a request came from (the REST listener is served with it).
#[derive(Clone, Copy, Debug)]
pub struct ClientAddr(pub Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|ConnectInfo(addr)| addr.ip()),
        ))
    }
}

/// The token in the request's session cookie.
pub fn token_from_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .and_then(|(_, value)| URL_SAFE_NO_PAD.decode(value.trim()).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .filter(|token| !token.is_empty() && token.len() <= MAX_TOKEN)
}

/// `Set-Cookie` for a session holding `token` (base64url, so that any
/// token is a valid cookie value).
pub fn session_cookie(token: &str, secure: bool) -> String {
    format!(
        "{COOKIE}={}; Path=/console; HttpOnly; SameSite=Strict{}",
        URL_SAFE_NO_PAD.encode(token),
        if secure { "; Secure" } else { "" }
    )
}

/// `Set-Cookie` ending the session.
pub fn cleared_cookie(secure: bool) -> String {
    format!(
        "{COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0{}",
        if secure { "; Secure" } else { "" }
    )
}

/// The CSRF token of a session: a digest of its token (of nothing when
/// authentication is off, where the origin check is what guards).
pub fn csrf_token(token: Option<&str>) -> String {
    let mut digest = Sha256::new();
    digest.update(b"instanceha-console-csrf\0");
    digest.update(token.unwrap_or_default().as_bytes());
    digest
        .finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `given` is the session's CSRF token (compared in constant time).
pub fn csrf_matches(token: Option<&str>, given: &str) -> bool {
    let expected = csrf_token(token);
    expected.len() == given.len()
        && expected
            .bytes()
            .zip(given.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// Refuses a request another site made the browser send: `Sec-Fetch-Site`
/// other than same-origin (or none: typed by the user), or an `Origin`
/// whose host is not the one addressed.
pub fn same_origin(headers: &HeaderMap) -> Result<(), ConsoleError> {
    let refused = || ConsoleError::Forbidden("a request from another site is refused".to_owned());
    if let Some(site) = headers.get("sec-fetch-site") {
        let site = site.to_str().map_err(|_| refused())?;
        if !matches!(site, "same-origin" | "none") {
            return Err(refused());
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().map_err(|_| refused())?;
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .ok_or_else(refused)?;
        let origin_host = origin
            .split_once("://")
            .map(|(_, rest)| rest)
            .ok_or_else(refused)?;
        if !origin_host.eq_ignore_ascii_case(host) {
            return Err(refused());
        }
    }
    Ok(())
}

/// Where to go after signing in: a console path, never another site.
pub fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(path)
            if path.starts_with("/console/")
                && !path.starts_with("/console//")
                && !path.contains('\\')
                && path.chars().all(|c| c.is_ascii_graphic()) =>
        {
            path.to_owned()
        }
        _ => "/console/".to_owned(),
    }
}

/// The person looking at a page, and what the operation table lets them
/// do from it.
#[derive(Clone, Debug)]
pub struct Viewer {
    pub principal: Principal,
    token: Option<String>,
    pub csrf: String,
    /// Signed in with a token (authentication is on).
    pub signed_in: bool,
    pub may_retry: bool,
    pub may_maintain: bool,
}

impl Viewer {
    /// Admits the request's session for `operations` (all needed; the
    /// first is counted against the request budget). `next` is where to
    /// come back after signing in (`None`: answer 401, for streams and
    /// actions).
    pub async fn admit(
        guard: &Guard,
        headers: &HeaderMap,
        client: ClientAddr,
        operations: &[Operation],
        next: Option<&str>,
    ) -> Result<Self, ConsoleError> {
        let token = token_from_cookie(headers);
        let (first, rest) = operations
            .split_first()
            .expect("a page names its operations");
        let refused = |err: Refusal| ConsoleError::refused(err, next);
        let principal = admit(guard, token.as_deref(), *first, client.0)
            .await
            .map_err(refused)?;
        for operation in rest {
            check(guard, token.as_deref(), *operation)
                .await
                .map_err(|e| refused(Refusal::Auth(e)))?;
        }
        let may_retry = permits(guard, token.as_deref(), Operation::RetryNotification).await;
        let may_maintain = permits(guard, token.as_deref(), Operation::UpdateHost).await;
        Ok(Self {
            principal,
            csrf: csrf_token(token.as_deref()),
            signed_in: token.is_some(),
            token,
            may_retry,
            may_maintain,
        })
    }

    /// Checks the CSRF token a form sent.
    pub fn check_csrf(&self, given: &str) -> Result<(), ConsoleError> {
        if csrf_matches(self.token.as_deref(), given) {
            Ok(())
        } else {
            Err(ConsoleError::Forbidden(
                "the form's csrf token is missing or not this session's: reload the page"
                    .to_owned(),
            ))
        }
    }

    /// The name streams are counted under: the principal, or without
    /// authentication the address.
    pub fn stream_owner(&self, client: ClientAddr) -> String {
        match (self.principal.name.as_str(), client.0) {
            ("anonymous", Some(ip)) => ip.to_string(),
            (name, _) => name.to_owned(),
        }
    }

    /// The roles, for the page's header.
    pub fn roles(&self) -> String {
        self.principal
            .roles
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Whether the guard takes a request without a token (authentication is
/// off): then there is no login.
pub async fn open(guard: &Guard) -> bool {
    !matches!(
        check(guard, None, Operation::ListSegments).await,
        Err(AuthError::Missing | AuthError::Invalid)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    #[test]
    fn the_cookie_carries_any_token_back() {
        for token in ["gAAAAABl-abc_XYZ", "with space;and=semicolon", "é"] {
            let set = session_cookie(token, false);
            let value = set.split(';').next().unwrap();
            let request = headers(&[("cookie", &format!("other=1; {value}"))]);
            assert_eq!(token_from_cookie(&request).as_deref(), Some(token));
        }
        assert!(session_cookie("t", true).contains("; Secure"));
        assert!(session_cookie("t", false).contains("HttpOnly; SameSite=Strict"));
        assert_eq!(token_from_cookie(&headers(&[("cookie", "a=b")])), None);
        assert_eq!(
            token_from_cookie(&headers(&[("cookie", &format!("{COOKIE}=!!"))])),
            None
        );
    }

    #[test]
    fn the_csrf_token_is_the_sessions_own() {
        let mine = csrf_token(Some("token-a"));
        assert!(csrf_matches(Some("token-a"), &mine));
        assert!(!csrf_matches(Some("token-b"), &mine));
        assert!(!csrf_matches(Some("token-a"), ""));
        assert!(!csrf_matches(Some("token-a"), &mine[..10]));
        assert_eq!(mine.len(), 32);
    }

    #[test]
    fn requests_from_another_site_are_refused() {
        assert!(same_origin(&headers(&[])).is_ok());
        assert!(
            same_origin(&headers(&[
                ("host", "ha.example:15868"),
                ("origin", "https://ha.example:15868"),
                ("sec-fetch-site", "same-origin"),
            ]))
            .is_ok()
        );
        assert!(
            same_origin(&headers(&[
                ("host", "ha.example:15868"),
                ("origin", "https://evil.example"),
            ]))
            .is_err()
        );
        assert!(same_origin(&headers(&[("sec-fetch-site", "cross-site")])).is_err());
        assert!(same_origin(&headers(&[("sec-fetch-site", "same-site")])).is_err());
        assert!(same_origin(&headers(&[("origin", "null"), ("host", "h")])).is_err());
    }

    #[test]
    fn only_console_paths_are_places_to_come_back_to() {
        assert_eq!(
            safe_next(Some("/console/history?status=failed")),
            "/console/history?status=failed"
        );
        for bad in [
            "https://evil.example/",
            "//evil.example",
            "/console//evil.example",
            "/console/\\evil",
            "/v1/segments",
        ] {
            assert_eq!(safe_next(Some(bad)), "/console/", "{bad}");
        }
        assert_eq!(safe_next(None), "/console/");
    }
}
