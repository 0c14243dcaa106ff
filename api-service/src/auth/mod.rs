//! Who may call the API: authentication (Keystone-validated tokens, or a
//! file of hashed static tokens, or none when explicitly configured) and
//! the roles' permissions, decided here for every transport (the gRPC
//! layer and the Masakari-compatible REST API call [`Guard::check`]).

mod keystone;
mod operation;
mod policy;
mod static_tokens;

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use keystone::KeystoneValidator;
pub use operation::{GrpcCall, Operation, grpc_call};
pub use policy::{Policy, default_roles};
pub use static_tokens::{StaticTokens, token_sha256};

use openstack_client::credentials::AuthSettings as KeystoneCredentials;
use openstack_client::tls::TlsSettings;

use crate::rate_limit::{Caller, RateLimiter};

/// What a caller may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Everything.
    Admin,
    /// Create notifications and read them (monitoring agents).
    MonitoringAgent,
    /// Get, list and watch.
    Reader,
}

impl TryFrom<&str> for Role {
    type Error = ();

    fn try_from(name: &str) -> Result<Self, ()> {
        match name {
            "admin" => Ok(Self::Admin),
            "monitoring_agent" => Ok(Self::MonitoringAgent),
            "reader" => Ok(Self::Reader),
            _ => Err(()),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Admin => "admin",
            Self::MonitoringAgent => "monitoring_agent",
            Self::Reader => "reader",
        })
    }
}

/// What a call does: its default rule (`policy::default_roles`), and
/// whether it counts against a caller's reports budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Get, list or watch anything.
    Read,
    /// Report a failure.
    CreateNotification,
    /// Create, change or delete segments and hosts.
    Administer,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Read => "read",
            Self::CreateNotification => "create notifications",
            Self::Administer => "change segments and hosts",
        })
    }
}

/// An authenticated caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// A user name (Keystone) or token name (static); `anonymous` without
    /// authentication.
    pub name: String,
    pub project: Option<String>,
    pub roles: BTreeSet<Role>,
}

/// Why a call is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("a token is required: send it as x-auth-token or authorization: Bearer")]
    Missing,
    #[error("the token is not valid (expired, revoked or unknown)")]
    Invalid,
    #[error("{who} may not call {operation} (needs one of the roles: {needed})")]
    Forbidden {
        who: String,
        operation: String,
        needed: String,
    },
    /// Keystone could not be asked: fail closed.
    #[error("tokens cannot be validated right now: {0}")]
    Unavailable(String),
}

/// `[auth]`: how callers are authenticated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthSettings {
    pub mode: AuthMode,
    /// For `static`: a TOML file of `[[token]]` entries with `name`,
    /// `sha256` (hex digest of the token) and `roles`.
    pub static_tokens_file: Option<PathBuf>,
    /// For `keystone`: the API's own credentials, used to validate callers'
    /// tokens (`GET /v3/auth/tokens`).
    pub keystone: KeystoneCredentials,
    /// For `keystone`: TLS towards Keystone, as `clouds.yaml` spells it
    /// (`cacert`: a private CA's PEM file; `verify = false`; `cert`, `key`).
    pub keystone_tls: TlsSettings,
    /// For `keystone`: Keystone role names granting each role.
    pub roles: RoleNames,
    /// For `keystone`: how long a validated token is trusted at most
    /// (never past its expiry).
    #[serde(with = "humantime_serde")]
    pub cache_ttl: Duration,
    /// For `keystone`: how long a token Keystone refused is refused
    /// without asking it again.
    #[serde(with = "humantime_serde")]
    pub negative_cache_ttl: Duration,
    /// A TOML file overriding who may call each operation (`auth::policy`:
    /// `ListSegments = ["admin", "reader"]`); checked at start.
    pub policy_file: Option<PathBuf>,
}

impl Default for AuthSettings {
    fn default() -> Self {
        Self {
            mode: AuthMode::Keystone,
            static_tokens_file: None,
            keystone: KeystoneCredentials::default(),
            keystone_tls: TlsSettings::default(),
            roles: RoleNames::default(),
            cache_ttl: Duration::from_secs(300),
            negative_cache_ttl: Duration::from_secs(10),
            policy_file: None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    Keystone,
    Static,
    /// No authentication at all: every caller is admin. Only for tests and
    /// demos; logged as a warning at start.
    None,
}

/// Keystone role names for each role. No Keystone role grants the reader
/// role by default: Keystone's default roles imply admin ⊃ member ⊃
/// reader, so `reader` would let every project member read every tenant's
/// hosts, notifications and instances.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoleNames {
    pub admin: Vec<String>,
    pub monitoring_agent: Vec<String>,
    pub reader: Vec<String>,
}

impl Default for RoleNames {
    fn default() -> Self {
        Self {
            admin: vec!["admin".to_owned()],
            monitoring_agent: vec!["instanceha_agent".to_owned()],
            reader: Vec::new(),
        }
    }
}

impl RoleNames {
    pub fn roles_of(&self, keystone_roles: &[String]) -> BTreeSet<Role> {
        let has = |names: &[String]| {
            keystone_roles
                .iter()
                .any(|r| names.iter().any(|n| n.eq_ignore_ascii_case(r)))
        };
        let mut roles = BTreeSet::new();
        if has(&self.admin) {
            roles.insert(Role::Admin);
        }
        if has(&self.monitoring_agent) {
            roles.insert(Role::MonitoringAgent);
        }
        if has(&self.reader) {
            roles.insert(Role::Reader);
        }
        roles
    }
}

/// The authentication in force, and the request budgets counted once a
/// caller is known (`crate::rate_limit`). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Guard {
    mode: Arc<GuardMode>,
    policy: Arc<Policy>,
    limiter: Option<RateLimiter>,
}

/// Why a call is not admitted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(transparent)]
    Auth(#[from] AuthError),
    /// Over its budget: retry after `wait`.
    #[error("too many requests from {who}: retry in {} ms ({setting})", wait.as_millis().max(1))]
    Throttled {
        who: String,
        wait: Duration,
        setting: &'static str,
    },
}

#[derive(Debug)]
enum GuardMode {
    Open,
    Static(StaticTokens),
    Keystone(Box<KeystoneValidator>),
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("auth.static_tokens_file is required with auth.mode = \"static\"")]
    NoTokensFile,
    #[error("auth.static_tokens_file {path}: {reason}")]
    TokensFile { path: String, reason: String },
    #[error(
        "auth.keystone: {0} (the API's own credentials, to validate callers' tokens; or set auth.mode = \"static\" or \"none\")"
    )]
    Keystone(String),
    #[error("auth.policy_file {path}: {reason}")]
    PolicyFile { path: String, reason: String },
}

impl Guard {
    pub fn from_settings(settings: &AuthSettings) -> Result<Self, ConfigError> {
        let mode = match settings.mode {
            AuthMode::None => {
                tracing::warn!(
                    "authentication is OFF (auth.mode = \"none\"): every caller is admin"
                );
                GuardMode::Open
            }
            AuthMode::Static => {
                let path = settings
                    .static_tokens_file
                    .as_ref()
                    .ok_or(ConfigError::NoTokensFile)?;
                GuardMode::Static(StaticTokens::load(path)?)
            }
            AuthMode::Keystone => GuardMode::Keystone(Box::new(KeystoneValidator::new(settings)?)),
        };
        let policy = match &settings.policy_file {
            Some(path) => Policy::load(path)?,
            None => Policy::default(),
        };
        Ok(Self {
            mode: Arc::new(mode),
            policy: Arc::new(policy),
            limiter: None,
        })
    }

    /// No authentication (tests, demos).
    pub fn open() -> Self {
        Self {
            mode: Arc::new(GuardMode::Open),
            policy: Arc::default(),
            limiter: None,
        }
    }

    pub fn static_tokens(tokens: StaticTokens) -> Self {
        Self {
            mode: Arc::new(GuardMode::Static(tokens)),
            policy: Arc::default(),
            limiter: None,
        }
    }

    /// Counts admitted calls against `limiter`'s budgets.
    pub fn with_limiter(mut self, limiter: Option<RateLimiter>) -> Self {
        self.limiter = limiter;
        self
    }

    /// Authenticates `token`, checks that the caller may call `operation`
    /// (`None`: a gRPC method the table does not know, the admin's), and
    /// counts the call: against the caller's budget once authenticated (its
    /// reports apart), against its source address's smaller budget if not
    /// — so a flood without valid credentials never takes the budget of
    /// the callers with them. A token Keystone has not answered for yet
    /// spends that anonymous budget *before* it is sent to Keystone.
    pub async fn admit(
        &self,
        token: Option<&str>,
        operation: Option<Operation>,
        client: Option<IpAddr>,
    ) -> Result<Principal, Refusal> {
        let mut anonymous_spent = false;
        if let (GuardMode::Keystone(validator), Some(token), Some(ip)) =
            (self.mode.as_ref(), token, client)
            && validator.cached(token).await.is_none()
        {
            self.admit_anonymous(ip)?;
            anonymous_spent = true;
        }
        let checked = self.check(token, operation).await;
        let Some(limiter) = &self.limiter else {
            return Ok(checked?);
        };
        let throttled = |caller: &Caller| {
            limiter
                .caller(caller)
                .map_err(|throttled| Refusal::Throttled {
                    who: caller.to_string(),
                    wait: throttled.wait,
                    setting: "limits.requests_per_second",
                })
        };
        match checked {
            Ok(principal) => {
                let reports = operation == Some(Operation::CreateNotification);
                let caller = match (self.mode.as_ref(), client) {
                    (GuardMode::Open, Some(ip)) => Caller::Address { ip, reports },
                    _ => Caller::Principal {
                        name: principal.name.clone(),
                        reports,
                    },
                };
                throttled(&caller)?;
                Ok(principal)
            }
            // Authenticated, but not allowed: the caller's own budget.
            Err(forbidden @ AuthError::Forbidden { .. }) => {
                if let AuthError::Forbidden { who, .. } = &forbidden {
                    throttled(&Caller::Principal {
                        name: who.clone(),
                        reports: false,
                    })?;
                }
                Err(forbidden.into())
            }
            Err(refused) => {
                if let Some(ip) = client
                    && !anonymous_spent
                {
                    self.admit_anonymous(ip)?;
                }
                Err(refused.into())
            }
        }
    }

    /// Counts a call that needs no authentication (or failed it) against
    /// its source address's budget.
    pub fn admit_anonymous(&self, client: IpAddr) -> Result<(), Refusal> {
        match &self.limiter {
            Some(limiter) => limiter
                .anonymous(client)
                .map_err(|throttled| Refusal::Throttled {
                    who: client.to_string(),
                    wait: throttled.wait,
                    setting: "limits.anonymous_requests_per_second",
                }),
            None => Ok(()),
        }
    }

    /// Authenticates `token` and checks that the caller may call
    /// `operation` (the policy's rule; `None`: the admin's).
    pub async fn check(
        &self,
        token: Option<&str>,
        operation: Option<Operation>,
    ) -> Result<Principal, AuthError> {
        let principal = match self.mode.as_ref() {
            GuardMode::Open => Principal {
                name: "anonymous".to_owned(),
                project: None,
                roles: BTreeSet::from([Role::Admin]),
            },
            GuardMode::Static(tokens) => tokens.principal(token.ok_or(AuthError::Missing)?)?,
            GuardMode::Keystone(validator) => {
                validator
                    .principal(token.ok_or(AuthError::Missing)?)
                    .await?
            }
        };
        if !self.policy.allows(operation, &principal.roles) {
            return Err(AuthError::Forbidden {
                who: principal.name.clone(),
                operation: operation.map_or_else(|| "this method".to_owned(), |op| op.name()),
                needed: self
                    .policy
                    .roles(operation)
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        Ok(principal)
    }
}

/// The token of a request: `x-auth-token`, or `authorization: Bearer`.
pub fn token_from_headers(headers: &http::HeaderMap) -> Option<&str> {
    if let Some(token) = headers.get("x-auth-token").and_then(|v| v.to_str().ok()) {
        return Some(token.trim()).filter(|t| !t.is_empty());
    }
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn permissions_per_role() {
        let tokens = StaticTokens::from_tokens(&[
            ("ops", "a", &[Role::Admin]),
            ("agent", "m", &[Role::MonitoringAgent]),
            ("dashboard", "r", &[Role::Reader]),
        ]);
        let guard = Guard::static_tokens(tokens);
        let may = |token: &'static str, op: Option<Operation>| {
            let guard = guard.clone();
            async move { guard.check(Some(token), op).await.is_ok() }
        };
        for op in Operation::ALL.into_iter().map(Some).chain([None]) {
            assert!(may("a", op).await, "{op:?}");
        }
        assert!(may("m", Some(Operation::ListHosts)).await);
        assert!(may("m", Some(Operation::CreateNotification)).await);
        assert!(!may("m", Some(Operation::CreateHost)).await);
        assert!(may("r", Some(Operation::GetVmove)).await);
        assert!(!may("r", Some(Operation::CreateNotification)).await);
        assert!(!may("r", None).await, "unknown methods are the admin's");
        let err = guard
            .check(Some("r"), Some(Operation::DeleteSegment))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("dashboard may not call DeleteSegment (needs one of the roles: admin)"),
            "{err}"
        );
    }

    #[test]
    fn keystone_roles_map_to_roles() {
        // By default no Keystone role reads: a member (who, by Keystone's
        // implied roles, is also a reader) gets nothing.
        let names = RoleNames::default();
        assert!(
            names
                .roles_of(&["reader".into(), "member".into()])
                .is_empty()
        );
        assert!(names.roles_of(&["admin".into()]).contains(&Role::Admin));
        let named = RoleNames {
            reader: vec!["reader".into()],
            ..RoleNames::default()
        };
        let roles = named.roles_of(&["Reader".into(), "member".into()]);
        assert_eq!(roles, BTreeSet::from([Role::Reader]));
    }

    #[test]
    fn tokens_come_from_either_header() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(token_from_headers(&headers), None);
        headers.insert("authorization", "Bearer abc".parse().unwrap());
        assert_eq!(token_from_headers(&headers), Some("abc"));
        headers.insert("authorization", "Basic abc".parse().unwrap());
        assert_eq!(token_from_headers(&headers), None);
        headers.insert("x-auth-token", "xyz".parse().unwrap());
        assert_eq!(token_from_headers(&headers), Some("xyz"));
    }

    #[tokio::test]
    async fn the_open_guard_lets_everyone_do_everything() {
        let guard = Guard::open();
        assert!(guard.check(None, None).await.is_ok());
    }
}
