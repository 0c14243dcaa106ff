//! Keystone v3 login and the token cache: one token shared by every call,
//! renewed ahead of expiry, invalidated on a 401.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use super::catalog::CatalogEntry;
use instanceha_runtime::secret::Secret;

use super::credentials::{AppCredentialUser, Credentials, Domain, Project};
use super::error::{Call, Error};
use super::retry::{RetryPolicy, parse_retry_after};
use super::tls::TlsSettings;

/// A Keystone token and what came with it.
#[derive(Clone, Debug)]
pub struct Token {
    pub value: Secret,
    pub issued_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub catalog: Vec<CatalogEntry>,
    pub roles: Vec<String>,
    pub project_id: Option<String>,
    pub project_name: Option<String>,
    pub user_id: Option<String>,
    pub user_name: Option<String>,
}

impl Token {
    /// Renew when this little time is left: keystoneauth's 120 s, or half
    /// the lifetime of short-lived tokens.
    fn renew_margin(&self) -> chrono::Duration {
        let lifetime = self.expires_at - self.issued_at;
        chrono::Duration::seconds(120).min(lifetime / 2)
    }

    pub fn needs_renewal(&self, now: DateTime<Utc>) -> bool {
        self.expires_at - now <= self.renew_margin()
    }

    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r.eq_ignore_ascii_case(role))
    }
}

#[derive(Deserialize)]
struct TokenBody {
    token: TokenFields,
}

#[derive(Deserialize)]
struct TokenFields {
    expires_at: DateTime<Utc>,
    #[serde(default)]
    issued_at: Option<DateTime<Utc>>,
    #[serde(default)]
    catalog: Vec<CatalogEntry>,
    #[serde(default)]
    roles: Vec<Named>,
    #[serde(default)]
    project: Option<Named>,
    #[serde(default)]
    user: Option<Named>,
}

#[derive(Deserialize)]
struct Named {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

fn token_from(value: Secret, fields: TokenFields) -> Token {
    Token {
        value,
        issued_at: fields.issued_at.unwrap_or_else(Utc::now),
        expires_at: fields.expires_at,
        catalog: fields.catalog,
        roles: fields.roles.into_iter().filter_map(|r| r.name).collect(),
        project_id: fields.project.as_ref().and_then(|p| p.id.clone()),
        project_name: fields.project.and_then(|p| p.name),
        user_id: fields.user.as_ref().and_then(|u| u.id.clone()),
        user_name: fields.user.and_then(|u| u.name),
    }
}

fn domain_json(domain: &Domain) -> Value {
    match domain {
        Domain::Id(id) => json!({"id": id}),
        Domain::Name(name) => json!({"name": name}),
    }
}

/// The `POST /v3/auth/tokens` body for `credentials`.
fn auth_body(credentials: &Credentials) -> Value {
    match credentials {
        Credentials::Password {
            username,
            user_domain,
            password,
            project,
            ..
        } => {
            let project = project_json(project);
            json!({"auth": {
                "identity": {"methods": ["password"], "password": {"user": {
                    "name": username, "domain": domain_json(user_domain), "password": password.expose()
                }}},
                "scope": {"project": project}
            }})
        }
        Credentials::ApplicationCredential {
            id,
            name,
            user,
            secret,
            ..
        } => {
            let mut credential = serde_json::Map::new();
            if let Some(id) = id {
                credential.insert("id".into(), json!(id));
            } else if let Some(name) = name {
                credential.insert("name".into(), json!(name));
                if let Some(user) = user {
                    let user = match user {
                        AppCredentialUser::Id(id) => json!({"id": id}),
                        AppCredentialUser::Name { name, domain } => {
                            json!({"name": name, "domain": domain_json(domain)})
                        }
                    };
                    credential.insert("user".into(), user);
                }
            }
            credential.insert("secret".into(), json!(secret.expose()));
            // No scope: the credential carries its project, and Keystone
            // refuses a scope with 401.
            json!({"auth": {"identity": {
                "methods": ["application_credential"],
                "application_credential": credential
            }}})
        }
        Credentials::Token { token, project, .. } => {
            let identity = json!({"methods": ["token"], "token": {"id": token.expose()}});
            match project {
                None => json!({"auth": {"identity": identity}}),
                Some(project) => {
                    json!({"auth": {"identity": identity, "scope": {"project": project_json(project)}}})
                }
            }
        }
    }
}

fn project_json(project: &Project) -> Value {
    match project {
        Project::Id(id) => json!({"id": id}),
        Project::Name { name, domain } => json!({"name": name, "domain": domain_json(domain)}),
    }
}

/// Logs in and keeps the token.
#[derive(Debug)]
pub struct Keystone {
    http: reqwest::Client,
    credentials: Credentials,
    retry: RetryPolicy,
    timeout: Duration,
    cached: Mutex<Option<Arc<Token>>>,
}

impl Keystone {
    pub fn new(
        http: reqwest::Client,
        credentials: Credentials,
        retry: RetryPolicy,
        timeout: Duration,
    ) -> Self {
        Self {
            http,
            credentials,
            retry,
            timeout,
            cached: Mutex::new(None),
        }
    }

    /// A Keystone client with an HTTP client of its own (for callers that
    /// only need Keystone, like the API's token validation).
    pub fn standalone(
        credentials: Credentials,
        retry: RetryPolicy,
        timeout: Duration,
        tls: &TlsSettings,
    ) -> Result<Self, Error> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(5));
        let http = tls
            .apply(builder)
            .map_err(|e| Error::Auth {
                status: None,
                message: format!("keystone tls: {e}"),
            })?
            .build()
            .map_err(|e| Error::Auth {
                status: None,
                message: format!("cannot build the HTTP client: {e}"),
            })?;
        Ok(Self::new(http, credentials, retry, timeout))
    }

    /// A valid token, logging in if the cached one is missing or close to
    /// expiry. Concurrent callers share one login.
    pub async fn token(&self) -> Result<Arc<Token>, Error> {
        let mut cached = self.cached.lock().await;
        if let Some(token) = cached.as_ref()
            && !token.needs_renewal(Utc::now())
        {
            return Ok(token.clone());
        }
        let token = Arc::new(self.login().await?);
        *cached = Some(token.clone());
        Ok(token)
    }

    /// Forgets `token` after a service refused it (401), unless another
    /// caller already replaced it.
    pub async fn invalidate(&self, token: &Token) {
        let mut cached = self.cached.lock().await;
        if cached
            .as_ref()
            .is_some_and(|c| c.value.expose() == token.value.expose())
        {
            *cached = None;
        }
    }

    /// Validates someone else's token (`GET /v3/auth/tokens` with
    /// `X-Subject-Token`): `Ok(None)` if Keystone says it is not valid (404),
    /// `Err` if Keystone cannot be asked (so callers fail closed).
    pub async fn validate(&self, subject: &Secret) -> Result<Option<Token>, Error> {
        let url = format!("{}/auth/tokens", self.credentials.auth_url());
        let call = Call {
            service: "keystone",
            method: reqwest::Method::GET,
            path: "/v3/auth/tokens".to_owned(),
        };
        let mut reauthenticated = false;
        let mut retries = self.retry.retries();
        loop {
            let own = self.token().await?;
            let mut request = self
                .http
                .get(&url)
                .timeout(self.timeout)
                .query(&[("nocatalog", "")])
                .header("X-Auth-Token", own.value.expose())
                .header("X-Subject-Token", subject.expose())
                .header("X-OpenStack-Request-ID", super::request::request_id());
            let mut trace_headers = http::HeaderMap::new();
            instanceha_runtime::propagation::inject_current(&mut trace_headers);
            request = request.headers(trace_headers);
            let failure = match request.send().await {
                Ok(response) => match response.status().as_u16() {
                    200 => {
                        let body: TokenBody = response.json().await.map_err(|e| Error::Decode {
                            call: Box::new(call.clone()),
                            reason: e.to_string(),
                        })?;
                        return Ok(Some(token_from(subject.clone(), body.token)));
                    }
                    404 => return Ok(None),
                    401 if !reauthenticated => {
                        // Our own token went stale.
                        reauthenticated = true;
                        self.invalidate(&own).await;
                        continue;
                    }
                    status @ (429 | 500 | 502..=504) if !retries.spent() => format!("{status}"),
                    status => {
                        let text = response.text().await.unwrap_or_default();
                        return Err(Error::Auth {
                            status: Some(status),
                            message: format!(
                                "token validation failed: {status} {}",
                                super::request::error_message(&text, status)
                            ),
                        });
                    }
                },
                Err(e) if !retries.spent() => super::request::describe(&e),
                Err(e) => {
                    return Err(Error::Auth {
                        status: None,
                        message: format!(
                            "token validation failed: {url} unreachable: {}",
                            super::request::describe(&e)
                        ),
                    });
                }
            };
            tracing::warn!(attempt = retries.tries(), error = %failure, "keystone token validation failed; retrying");
            retries.wait(None).await;
        }
    }

    async fn login(&self) -> Result<Token, Error> {
        let url = format!("{}/auth/tokens", self.credentials.auth_url());
        let call = Call {
            service: "keystone",
            method: reqwest::Method::POST,
            path: "/v3/auth/tokens".to_owned(),
        };
        let body = auth_body(&self.credentials);
        let mut retries = self.retry.retries();
        loop {
            let mut request = self
                .http
                .post(&url)
                .timeout(self.timeout)
                .json(&body)
                .header("X-OpenStack-Request-ID", super::request::request_id());
            let mut trace_headers = http::HeaderMap::new();
            instanceha_runtime::propagation::inject_current(&mut trace_headers);
            request = request.headers(trace_headers);
            let retry_after;
            let transient = match request.send().await {
                Ok(response) if response.status().as_u16() == 201 => {
                    return self.parse(response, &call).await;
                }
                Ok(response) => {
                    let status = response.status().as_u16();
                    retry_after = response
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(parse_retry_after);
                    let text = response.text().await.unwrap_or_default();
                    let message = super::request::error_message(&text, status);
                    if !matches!(status, 429 | 500 | 502..=504) || retries.spent() {
                        return Err(Error::Auth {
                            status: Some(status),
                            message: format!("login as {} failed: {status} {message}", self.who()),
                        });
                    }
                    format!("{status} {message}")
                }
                Err(e) if super::tls::is_certificate_error(&e) => {
                    // No retry will change the certificate.
                    return Err(Error::Auth {
                        status: None,
                        message: format!(
                            "login as {} failed: {url}: {} — {}",
                            self.who(),
                            super::request::describe(&e),
                            super::tls::CERTIFICATE_HINT
                        ),
                    });
                }
                Err(e) => {
                    retry_after = None;
                    if retries.spent() {
                        return Err(Error::Auth {
                            status: None,
                            message: format!(
                                "login as {} failed: {} unreachable: {}",
                                self.who(),
                                url,
                                super::request::describe(&e)
                            ),
                        });
                    }
                    super::request::describe(&e)
                }
            };
            let Some(delay) = retries.next_delay(self.retry.retry_after(retry_after)) else {
                return Err(Error::Auth {
                    status: None,
                    message: format!("login as {} failed: {transient}", self.who()),
                });
            };
            tracing::warn!(attempt = retries.tries() - 1, error = %transient, delay_ms = delay.as_millis() as u64, "keystone login failed; retrying");
            tokio::time::sleep(delay).await;
        }
    }

    async fn parse(&self, response: reqwest::Response, call: &Call) -> Result<Token, Error> {
        let value = response
            .headers()
            .get("X-Subject-Token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .ok_or_else(|| Error::Decode {
                call: Box::new(call.clone()),
                reason: "no X-Subject-Token header".to_owned(),
            })?;
        let body: TokenBody = response.json().await.map_err(|e| Error::Decode {
            call: Box::new(call.clone()),
            reason: e.to_string(),
        })?;
        let fields = body.token;
        tracing::debug!(expires_at = %fields.expires_at, "keystone token issued");
        Ok(token_from(Secret::new(value), fields))
    }

    fn who(&self) -> String {
        match &self.credentials {
            Credentials::Password { username, .. } => format!("user {username:?}"),
            Credentials::ApplicationCredential { id, name, .. } => format!(
                "application credential {:?}",
                id.as_deref().or(name.as_deref()).unwrap_or_default()
            ),
            Credentials::Token { .. } => "a token".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_body_is_project_scoped() {
        let body = auth_body(&Credentials::Password {
            auth_url: "http://k/v3".into(),
            username: "ha-engine".into(),
            user_domain: Domain::Name("Default".into()),
            password: Secret::new("secret"),
            project: Project::Name {
                name: "admin".into(),
                domain: Domain::Name("Default".into()),
            },
        });
        assert_eq!(body["auth"]["identity"]["methods"][0], "password");
        assert_eq!(body["auth"]["scope"]["project"]["name"], "admin");
        assert_eq!(
            body["auth"]["identity"]["password"]["user"]["domain"]["name"],
            "Default"
        );
    }

    #[test]
    fn application_credential_body_has_no_scope() {
        let body = auth_body(&Credentials::ApplicationCredential {
            auth_url: "http://k/v3".into(),
            id: Some("423f".into()),
            name: None,
            user: None,
            secret: Secret::new("s"),
        });
        assert!(body["auth"].get("scope").is_none());
        assert_eq!(
            body["auth"]["identity"]["application_credential"]["id"],
            "423f"
        );
    }

    #[test]
    fn token_body_is_scoped_only_when_a_project_is_given() {
        let body = |project| {
            auth_body(&Credentials::Token {
                auth_url: "http://k/v3".into(),
                token: Secret::new("gAAA"),
                project,
            })
        };
        let unscoped = body(None);
        assert_eq!(unscoped["auth"]["identity"]["methods"][0], "token");
        assert_eq!(unscoped["auth"]["identity"]["token"]["id"], "gAAA");
        assert!(unscoped["auth"].get("scope").is_none());
        let scoped = body(Some(Project::Id("p1".into())));
        assert_eq!(scoped["auth"]["scope"]["project"]["id"], "p1");
    }

    #[test]
    fn renewal_margin_is_120s_or_half_a_short_lifetime() {
        let now = Utc::now();
        let token = |lifetime: i64| Token {
            value: Secret::new("t"),
            issued_at: now,
            expires_at: now + chrono::Duration::seconds(lifetime),
            catalog: vec![],
            roles: vec![],
            project_id: None,
            project_name: None,
            user_id: None,
            user_name: None,
        };
        assert!(!token(3600).needs_renewal(now + chrono::Duration::seconds(3000)));
        assert!(token(3600).needs_renewal(now + chrono::Duration::seconds(3481)));
        assert!(!token(10).needs_renewal(now + chrono::Duration::seconds(4)));
        assert!(token(10).needs_renewal(now + chrono::Duration::seconds(6)));
    }
}
