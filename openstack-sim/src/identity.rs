//! Keystone's data: projects, users, roles, application credentials and issued tokens, with
//! password and application-credential authentication, token validation and revocation.

use std::collections::HashMap;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use rand::{Rng, RngCore, rngs::StdRng};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha224};

use crate::scenario::{AppCredentialSpec, UserSpec};

/// Why authentication or token validation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("The request you have made requires authentication.")]
    Unauthenticated,
    #[error("Application credentials cannot request a scope.")]
    AppCredentialScope,
    #[error("{0}")]
    Malformed(String),
    #[error("token expired")]
    Expired,
    #[error("token revoked")]
    Revoked,
    #[error("token not found")]
    UnknownToken,
}

/// A domain-scoped name.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Project {
    pub id: String,
    pub name: String,
    pub domain_id: String,
}

/// A role.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Role {
    pub id: String,
    pub name: String,
}

/// A user with a role assignment on one project.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct User {
    pub id: String,
    pub name: String,
    #[serde(skip_serializing)]
    pub password: String,
    pub domain_id: String,
    pub domain_name: String,
    pub project_id: String,
    pub roles: Vec<Role>,
}

/// An application credential.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AppCredential {
    pub id: String,
    pub name: String,
    #[serde(skip_serializing)]
    pub secret: String,
    pub user_id: String,
}

/// An issued token.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Token {
    pub user_id: String,
    pub project_id: String,
    pub roles: Vec<Role>,
    pub methods: Vec<String>,
    pub application_credential: Option<(String, String)>,
    pub issued_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub audit_id: String,
    pub revoked: bool,
}

/// Who is calling, as the services see it after validating the token(s).
#[derive(Clone, Debug)]
pub struct Caller {
    pub user_id: String,
    pub user_name: String,
    pub project_id: String,
    pub project_name: String,
    pub roles: Vec<String>,
    /// Has the `admin` role.
    pub is_admin: bool,
    /// Sent a valid `X-Service-Token` carrying the `service` role.
    pub is_service: bool,
}

impl Caller {
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }

    /// Allowed to change its own project's servers (member or admin).
    pub fn is_member(&self) -> bool {
        self.is_admin || self.has_role("member")
    }
}

/// Whom a password login names.
#[derive(Debug, Clone, Default)]
pub struct UserRef {
    pub id: Option<String>,
    pub name: Option<String>,
    pub domain_id: Option<String>,
    pub domain_name: Option<String>,
}

/// Which project a login asks for.
#[derive(Debug, Clone, Default)]
pub struct ProjectRef {
    pub id: Option<String>,
    pub name: Option<String>,
    pub domain_id: Option<String>,
    pub domain_name: Option<String>,
}

/// Keystone's store.
#[derive(Debug, Clone, Default)]
pub struct Identity {
    pub projects: Vec<Project>,
    pub users: Vec<User>,
    pub roles: Vec<Role>,
    pub application_credentials: Vec<AppCredential>,
    tokens: HashMap<String, Token>,
    token_ttl_secs: u64,
}

/// The role Keystone's default roles imply (`keystone-manage bootstrap`
/// makes admin imply manager, manager member, member reader).
fn implied_role(name: &str) -> Option<&'static str> {
    match name {
        "admin" => Some("manager"),
        "manager" => Some("member"),
        "member" => Some("reader"),
        _ => None,
    }
}

fn hex_id(rng: &mut StdRng) -> String {
    let bytes: [u8; 16] = rng.random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn domain_matches(id: &Option<String>, name: &Option<String>) -> bool {
    id.as_deref().is_none_or(|i| i == "default") && name.as_deref().is_none_or(|n| n == "Default")
}

impl Identity {
    /// Builds the store from the scenario's users, generating ids from the seeded generator.
    pub fn new(
        users: &[UserSpec],
        credentials: &[AppCredentialSpec],
        extra_projects: &[String],
        token_ttl_secs: u64,
        rng: &mut StdRng,
    ) -> Identity {
        let mut identity = Identity {
            token_ttl_secs,
            ..Identity::default()
        };
        let mut project_names: Vec<String> = vec!["admin".into(), "service".into(), "demo".into()];
        for name in users.iter().map(|u| &u.project).chain(extra_projects) {
            if !project_names.contains(name) {
                project_names.push(name.clone());
            }
        }
        for name in project_names {
            identity.projects.push(Project {
                id: hex_id(rng),
                name,
                domain_id: "default".into(),
            });
        }
        for user in users {
            let project_id = identity
                .project_by_name(&user.project)
                .expect("project added")
                .id
                .clone();
            let roles = user.roles.iter().map(|r| identity.role(r, rng)).collect();
            identity.users.push(User {
                id: hex_id(rng),
                name: user.name.clone(),
                password: user.password.clone(),
                domain_id: "default".into(),
                domain_name: user.domain.clone(),
                project_id,
                roles,
            });
        }
        // Keystone's default roles imply one another (admin → manager →
        // member → reader); a token carries every role its assignment
        // implies. Added after the assigned ones, with ids that draw
        // nothing from the seeded generator (the world's ids stay put).
        for u in 0..identity.users.len() {
            let mut names: Vec<String> = identity.users[u]
                .roles
                .iter()
                .map(|r| r.name.clone())
                .collect();
            let mut i = 0;
            while i < names.len() {
                if let Some(implied) = implied_role(&names[i])
                    && !names.iter().any(|n| n == implied)
                {
                    names.push(implied.to_owned());
                    let role = identity.implied(implied);
                    identity.users[u].roles.push(role);
                }
                i += 1;
            }
        }
        for cred in credentials {
            let user_id = identity
                .users
                .iter()
                .find(|u| u.name == cred.user)
                .expect("validated user")
                .id
                .clone();
            identity.application_credentials.push(AppCredential {
                id: cred.id.clone().unwrap_or_else(|| hex_id(rng)),
                name: cred.name.clone(),
                secret: cred.secret.clone(),
                user_id,
            });
        }
        identity
    }

    fn role(&mut self, name: &str, rng: &mut StdRng) -> Role {
        if let Some(role) = self.roles.iter().find(|r| r.name == name) {
            return role.clone();
        }
        let role = Role {
            id: hex_id(rng),
            name: name.into(),
        };
        self.roles.push(role.clone());
        role
    }

    /// A role only implied so far: its id derived from its name.
    fn implied(&mut self, name: &str) -> Role {
        if let Some(role) = self.roles.iter().find(|r| r.name == name) {
            return role.clone();
        }
        let digest = Sha224::digest(format!("role:{name}").as_bytes());
        let role = Role {
            id: digest[..16].iter().map(|b| format!("{b:02x}")).collect(),
            name: name.into(),
        };
        self.roles.push(role.clone());
        role
    }

    pub fn project_by_name(&self, name: &str) -> Option<&Project> {
        self.projects.iter().find(|p| p.name == name)
    }

    pub fn project(&self, id: &str) -> Option<&Project> {
        self.projects.iter().find(|p| p.id == id)
    }

    pub fn user(&self, id: &str) -> Option<&User> {
        self.users.iter().find(|u| u.id == id)
    }

    pub fn user_by_name(&self, name: &str) -> Option<&User> {
        self.users.iter().find(|u| u.name == name)
    }

    /// Password login, scoped to the user's project (explicitly or by default).
    pub fn password_login(
        &mut self,
        user: &UserRef,
        password: &str,
        scope: Option<&ProjectRef>,
    ) -> Result<(String, Token), Error> {
        let found = self
            .users
            .iter()
            .find(|u| match (&user.id, &user.name) {
                (Some(id), _) => &u.id == id,
                (None, Some(name)) => {
                    &u.name == name
                        && user.domain_id.as_deref().is_none_or(|d| d == u.domain_id)
                        && user
                            .domain_name
                            .as_deref()
                            .is_none_or(|d| d == u.domain_name)
                }
                (None, None) => false,
            })
            .ok_or(Error::Unauthenticated)?;
        if found.password != password {
            return Err(Error::Unauthenticated);
        }
        if let Some(scope) = scope {
            let project = self
                .project(&found.project_id)
                .ok_or(Error::Unauthenticated)?;
            let matches = match (&scope.id, &scope.name) {
                (Some(id), _) => id == &project.id,
                (None, Some(name)) => {
                    name == &project.name && domain_matches(&scope.domain_id, &scope.domain_name)
                }
                (None, None) => false,
            };
            if !matches {
                return Err(Error::Unauthenticated);
            }
        }
        let (user_id, project_id, roles) = (
            found.id.clone(),
            found.project_id.clone(),
            found.roles.clone(),
        );
        Ok(self.issue(user_id, project_id, roles, vec!["password".into()], None))
    }

    /// Application-credential login; a scope in the request is refused.
    pub fn application_credential_login(
        &mut self,
        id: Option<&str>,
        name: Option<&str>,
        user: Option<&UserRef>,
        secret: &str,
        scoped: bool,
    ) -> Result<(String, Token), Error> {
        if scoped {
            return Err(Error::AppCredentialScope);
        }
        let cred = self
            .application_credentials
            .iter()
            .find(|c| match (id, name) {
                (Some(id), _) => c.id == id,
                (None, Some(name)) => {
                    c.name == name
                        && user.is_some_and(|u| {
                            let owner = self.users.iter().find(|o| o.id == c.user_id);
                            owner.is_some_and(|o| match (&u.id, &u.name) {
                                (Some(uid), _) => &o.id == uid,
                                (None, Some(uname)) => &o.name == uname,
                                (None, None) => false,
                            })
                        })
                }
                (None, None) => false,
            })
            .ok_or(Error::Unauthenticated)?;
        if cred.secret != secret {
            return Err(Error::Unauthenticated);
        }
        let owner = self.user(&cred.user_id).ok_or(Error::Unauthenticated)?;
        let (user_id, project_id, roles) = (
            owner.id.clone(),
            owner.project_id.clone(),
            owner.roles.clone(),
        );
        let app = Some((cred.id.clone(), cred.name.clone()));
        Ok(self.issue(
            user_id,
            project_id,
            roles,
            vec!["application_credential".into()],
            app,
        ))
    }

    /// Token login (`methods: ["token"]`): a new token for the same user and project, expiring
    /// with the one presented, as Keystone does.
    pub fn token_login(&mut self, presented: &str) -> Result<(String, Token), Error> {
        let found = self.validate(presented)?.clone();
        let (id, mut token) = self.issue(
            found.user_id,
            found.project_id,
            found.roles,
            vec!["token".into()],
            found.application_credential,
        );
        token.expires_at = found.expires_at;
        self.tokens.insert(id.clone(), token.clone());
        Ok((id, token))
    }

    fn issue(
        &mut self,
        user_id: String,
        project_id: String,
        roles: Vec<Role>,
        methods: Vec<String>,
        application_credential: Option<(String, String)>,
    ) -> (String, Token) {
        let mut rng = rand::rng();
        let mut raw = [0u8; 132];
        rng.fill_bytes(&mut raw);
        let id = format!(
            "gAAAAAB{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
        );
        let mut audit = [0u8; 16];
        rng.fill_bytes(&mut audit);
        let now = Utc::now();
        let token = Token {
            user_id,
            project_id,
            roles,
            methods,
            application_credential,
            issued_at: now,
            expires_at: now + chrono::Duration::seconds(self.token_ttl_secs as i64),
            audit_id: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(audit),
            revoked: false,
        };
        self.tokens.insert(id.clone(), token.clone());
        (id, token)
    }

    /// The token if it is known, not revoked and not expired.
    pub fn validate(&self, token: &str) -> Result<&Token, Error> {
        let found = self.tokens.get(token).ok_or(Error::UnknownToken)?;
        if found.revoked {
            return Err(Error::Revoked);
        }
        if found.expires_at <= Utc::now() {
            return Err(Error::Expired);
        }
        Ok(found)
    }

    /// The caller a token (and optional service token) stands for.
    pub fn caller(&self, token: &str, service_token: Option<&str>) -> Result<Caller, Error> {
        let found = self.validate(token)?;
        let is_service = match service_token {
            Some(st) => self.validate(st)?.roles.iter().any(|r| r.name == "service"),
            None => false,
        };
        let user = self.user(&found.user_id).ok_or(Error::UnknownToken)?;
        let project = self.project(&found.project_id).ok_or(Error::UnknownToken)?;
        let roles: Vec<String> = found.roles.iter().map(|r| r.name.clone()).collect();
        Ok(Caller {
            user_id: user.id.clone(),
            user_name: user.name.clone(),
            project_id: project.id.clone(),
            project_name: project.name.clone(),
            is_admin: roles.iter().any(|r| r == "admin"),
            is_service,
            roles,
        })
    }

    /// Revokes one token; false when it is unknown.
    pub fn revoke(&mut self, token: &str) -> bool {
        match self.tokens.get_mut(token) {
            Some(t) if !t.revoked => {
                t.revoked = true;
                true
            }
            _ => false,
        }
    }

    /// Revokes every token issued so far; returns how many were live.
    pub fn revoke_all(&mut self) -> usize {
        let mut n = 0;
        for t in self.tokens.values_mut().filter(|t| !t.revoked) {
            t.revoked = true;
            n += 1;
        }
        n
    }

    /// Makes every live token (or one) expire `in_secs` real seconds from now unless it expires
    /// sooner; returns how many were changed.
    pub fn expire(&mut self, token: Option<&str>, in_secs: f64) -> usize {
        let at = Utc::now() + chrono::Duration::milliseconds((in_secs * 1000.0) as i64);
        let mut n = 0;
        for (id, t) in self.tokens.iter_mut() {
            if token.is_some_and(|only| only != id) || t.revoked {
                continue;
            }
            if t.expires_at > at {
                t.expires_at = at;
                n += 1;
            }
        }
        n
    }

    /// Number of tokens issued and not revoked.
    pub fn live_tokens(&self) -> usize {
        let now = Utc::now();
        self.tokens
            .values()
            .filter(|t| !t.revoked && t.expires_at > now)
            .count()
    }
}

#[cfg(test)]
mod tests;
