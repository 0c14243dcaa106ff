//! Keystone token validation: the API logs in with its own credentials and
//! asks Keystone about each caller's token (`GET /v3/auth/tokens`). The
//! answers are cached per token (by its SHA-256), in `moka`'s bounded
//! cache: a valid token until it expires or `auth.cache_ttl` passes, a
//! refused one for `auth.negative_cache_ttl`; concurrent validations of
//! one token are merged into one request; a full cache evicts entries one
//! by one (TinyLFU), never all at once. If Keystone cannot be asked, calls
//! are refused (fail closed) and nothing is cached. Before a token that is
//! not cached goes to Keystone, its caller's anonymous budget is spent
//! (`Guard::admit`): a flood of made-up tokens costs Keystone little.

use std::sync::Arc;
use std::time::Duration;

use instanceha_runtime::clock::Clock;
use instanceha_runtime::secret::Secret;
use moka::future::Cache;
use openstack_client::keystone::Keystone;
use openstack_client::retry::RetryPolicy;

use super::{AuthError, AuthSettings, ConfigError, Principal, RoleNames, token_sha256};

/// Cached validations at most; beyond it the least useful are evicted.
const CACHE_CAPACITY: u64 = 10_000;

/// What Keystone said of a token, and how long to believe it.
#[derive(Clone, Debug)]
enum Validation {
    Valid { principal: Principal, ttl: Duration },
    Invalid { ttl: Duration },
}

impl Validation {
    fn ttl(&self) -> Duration {
        match self {
            Self::Valid { ttl, .. } | Self::Invalid { ttl } => *ttl,
        }
    }

    fn principal(self) -> Result<Principal, AuthError> {
        match self {
            Self::Valid { principal, .. } => Ok(principal),
            Self::Invalid { .. } => Err(AuthError::Invalid),
        }
    }
}

/// Each entry lives as long as its validation says.
struct PerEntry;

impl moka::Expiry<String, Validation> for PerEntry {
    fn expire_after_create(
        &self,
        _key: &String,
        value: &Validation,
        _created_at: std::time::Instant,
    ) -> Option<Duration> {
        Some(value.ttl())
    }
}

pub struct KeystoneValidator {
    keystone: Keystone,
    roles: RoleNames,
    cache_ttl: Duration,
    negative_cache_ttl: Duration,
    cache: Cache<String, Validation>,
    clock: Clock,
}

impl std::fmt::Debug for KeystoneValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeystoneValidator")
            .field("cached", &self.cache.entry_count())
            .finish_non_exhaustive()
    }
}

impl KeystoneValidator {
    pub fn new(settings: &AuthSettings) -> Result<Self, ConfigError> {
        let credentials = settings
            .keystone
            .credentials()
            .map_err(|e| ConfigError::Keystone(e.to_string()))?;
        if settings.keystone_tls.insecure() {
            tracing::warn!(
                "keystone tls certificate verification is OFF (auth.keystone_tls.verify = false): \
                 anyone on the path can impersonate keystone and vouch for any token"
            );
        }
        let keystone = Keystone::standalone(
            credentials,
            RetryPolicy::default(),
            Duration::from_secs(10),
            &settings.keystone_tls,
        )
        .map_err(|e| ConfigError::Keystone(e.to_string()))?;
        Ok(Self {
            keystone,
            roles: settings.roles.clone(),
            cache_ttl: settings.cache_ttl,
            negative_cache_ttl: settings.negative_cache_ttl,
            cache: Cache::builder()
                .max_capacity(CACHE_CAPACITY)
                .expire_after(PerEntry)
                .build(),
            clock: Clock::system(),
        })
    }

    /// What the cache says of `token`, without asking Keystone: `None`
    /// when it has to be asked.
    pub async fn cached(&self, token: &str) -> Option<Result<Principal, AuthError>> {
        self.cache
            .get(&token_sha256(token))
            .await
            .map(Validation::principal)
    }

    /// The caller `token` stands for: from the cache, else from Keystone
    /// (one request for every concurrent caller of one token).
    pub async fn principal(&self, token: &str) -> Result<Principal, AuthError> {
        self.cache
            .try_get_with(token_sha256(token), self.validate(token))
            .await
            .map_err(|e: Arc<AuthError>| (*e).clone())?
            .principal()
    }

    async fn validate(&self, token: &str) -> Result<Validation, AuthError> {
        let refused = Validation::Invalid {
            ttl: self.negative_cache_ttl,
        };
        let Some(validated) = self
            .keystone
            .validate(&Secret::new(token))
            .await
            .map_err(|e| AuthError::Unavailable(e.to_string()))?
        else {
            return Ok(refused);
        };
        let left = (validated.expires_at - self.clock.now())
            .to_std()
            .unwrap_or_default();
        if left.is_zero() {
            return Ok(refused);
        }
        let principal = Principal {
            name: validated
                .user_name
                .clone()
                .or(validated.user_id.clone())
                .unwrap_or_else(|| "unknown".to_owned()),
            project: validated
                .project_name
                .clone()
                .or(validated.project_id.clone()),
            roles: self.roles.roles_of(&validated.roles),
        };
        Ok(Validation::Valid {
            principal,
            ttl: left.min(self.cache_ttl),
        })
    }
}
