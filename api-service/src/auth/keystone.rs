//! Keystone token validation: the API logs in with its own credentials and
//! asks Keystone about each caller's token (`GET /v3/auth/tokens`),
//! trusting the answer until the token expires or the cache time passes.
//! If Keystone cannot be asked, calls are refused (fail closed).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use instanceha_runtime::secret::Secret;
use openstack_client::keystone::Keystone;
use openstack_client::retry::RetryPolicy;

use super::{AuthError, AuthSettings, ConfigError, Principal, RoleNames, token_sha256};

/// Cached validations at most; beyond it the cache is emptied.
const CACHE_CAPACITY: usize = 10_000;

#[derive(Debug)]
pub struct KeystoneValidator {
    keystone: Keystone,
    roles: RoleNames,
    cache_ttl: Duration,
    cache: Mutex<HashMap<String, (Principal, DateTime<Utc>)>>,
}

impl KeystoneValidator {
    pub fn new(settings: &AuthSettings) -> Result<Self, ConfigError> {
        let credentials = settings
            .keystone
            .credentials()
            .map_err(|e| ConfigError::Keystone(e.to_string()))?;
        let keystone =
            Keystone::standalone(credentials, RetryPolicy::default(), Duration::from_secs(10))
                .map_err(|e| ConfigError::Keystone(e.to_string()))?;
        Ok(Self {
            keystone,
            roles: settings.roles.clone(),
            cache_ttl: settings.cache_ttl,
            cache: Mutex::new(HashMap::new()),
        })
    }

    pub async fn principal(&self, token: &str) -> Result<Principal, AuthError> {
        let key = token_sha256(token);
        let now = Utc::now();
        if let Some((principal, until)) = self.cache.lock().expect("cache lock").get(&key)
            && *until > now
        {
            return Ok(principal.clone());
        }
        let validated = self
            .keystone
            .validate(&Secret::new(token))
            .await
            .map_err(|e| AuthError::Unavailable(e.to_string()))?
            .ok_or(AuthError::Invalid)?;
        if validated.expires_at <= now {
            return Err(AuthError::Invalid);
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
        let ttl = chrono::Duration::from_std(self.cache_ttl).unwrap_or_default();
        let until = validated.expires_at.min(now + ttl);
        let mut cache = self.cache.lock().expect("cache lock");
        if cache.len() >= CACHE_CAPACITY {
            cache.retain(|_, (_, until)| *until > now);
            if cache.len() >= CACHE_CAPACITY {
                cache.clear();
            }
        }
        cache.insert(key, (principal.clone(), until));
        Ok(principal)
    }
}
