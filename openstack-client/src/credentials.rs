//! How to log in to Keystone, from the engine's own configuration, a
//! `clouds.yaml` cloud (`clouds`), or the `OS_*` variables, as OpenStack
//! users expect: `auth_type` password, token or application credential.

use std::collections::BTreeMap;

use instanceha_runtime::secret::Secret;
use serde::{Deserialize, Serialize};

/// How to log in to Keystone v3.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// Password login scoped to a project (Nova's admin policies need a
    /// project-scoped token with the admin role).
    Password {
        auth_url: String,
        username: String,
        user_domain: Domain,
        password: Secret,
        project: Project,
    },
    /// Application credential login; the project comes from the credential.
    ApplicationCredential {
        auth_url: String,
        id: Option<String>,
        name: Option<String>,
        user: Option<AppCredentialUser>,
        secret: Secret,
    },
    /// A token exchanged for a new one, scoped to `project` when given
    /// (keystoneauth's `token` plugin); it cannot outlive the first.
    Token {
        auth_url: String,
        token: Secret,
        project: Option<Project>,
    },
}

impl Credentials {
    pub fn auth_url(&self) -> &str {
        match self {
            Self::Password { auth_url, .. }
            | Self::ApplicationCredential { auth_url, .. }
            | Self::Token { auth_url, .. } => auth_url,
        }
    }
}

/// A domain by id or name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Domain {
    Id(String),
    Name(String),
}

/// A project by id, or by name within a domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Project {
    Id(String),
    Name { name: String, domain: Domain },
}

/// The owner of an application credential given by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppCredentialUser {
    Id(String),
    Name { name: String, domain: Domain },
}

/// Settings as written in the engine's configuration, a `clouds.yaml`
/// `auth` section or `OS_*` variables: every field optional until resolved.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthSettings {
    /// `password` (or `v3password`), `token` (`v3token`) or
    /// `v3applicationcredential`; unset: from the fields given.
    pub auth_type: Option<String>,
    pub auth_url: Option<String>,
    pub username: Option<String>,
    pub user_id: Option<String>,
    pub password: Option<Secret>,
    pub user_domain_name: Option<String>,
    pub user_domain_id: Option<String>,
    pub project_name: Option<String>,
    pub project_id: Option<String>,
    pub project_domain_name: Option<String>,
    pub project_domain_id: Option<String>,
    pub application_credential_id: Option<String>,
    pub application_credential_name: Option<String>,
    pub application_credential_secret: Option<Secret>,
    /// The token of `auth_type = "token"`.
    pub token: Option<Secret>,
}

/// Credentials that cannot be used, naming what is missing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("{0} is required")]
    Missing(&'static str),
    #[error("cloud {cloud:?} is not in {path}")]
    UnknownCloud { cloud: String, path: String },
    #[error("no clouds.yaml found (looked in {0})")]
    NoCloudsFile(String),
    #[error("cannot read {path}: {reason}")]
    Unreadable { path: String, reason: String },
    #[error(
        "auth_type {0:?} is not supported (use password, v3password, token, v3token or v3applicationcredential)"
    )]
    UnsupportedAuthType(String),
    #[error("{0}")]
    Tls(#[from] crate::tls::TlsError),
}

/// The login methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Password,
    Token,
    ApplicationCredential,
}

fn domain(id: &Option<String>, name: &Option<String>) -> Domain {
    match (id, name) {
        (Some(id), _) => Domain::Id(id.clone()),
        (None, Some(name)) => Domain::Name(name.clone()),
        // Keystone's and keystoneauth's default domain.
        (None, None) => Domain::Id("default".to_owned()),
    }
}

impl AuthSettings {
    /// Whether nothing at all is set.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// Fills unset fields from `other`.
    pub fn or(self, other: AuthSettings) -> AuthSettings {
        AuthSettings {
            auth_type: self.auth_type.or(other.auth_type),
            auth_url: self.auth_url.or(other.auth_url),
            username: self.username.or(other.username),
            user_id: self.user_id.or(other.user_id),
            password: self.password.or(other.password),
            user_domain_name: self.user_domain_name.or(other.user_domain_name),
            user_domain_id: self.user_domain_id.or(other.user_domain_id),
            project_name: self.project_name.or(other.project_name),
            project_id: self.project_id.or(other.project_id),
            project_domain_name: self.project_domain_name.or(other.project_domain_name),
            project_domain_id: self.project_domain_id.or(other.project_domain_id),
            application_credential_id: self
                .application_credential_id
                .or(other.application_credential_id),
            application_credential_name: self
                .application_credential_name
                .or(other.application_credential_name),
            application_credential_secret: self
                .application_credential_secret
                .or(other.application_credential_secret),
            token: self.token.or(other.token),
        }
    }

    /// The login method `auth_type` names, else the one the fields
    /// describe (an application credential's secret, a password, a token).
    fn method(&self) -> Result<Method, Error> {
        let Some(name) = &self.auth_type else {
            return Ok(if self.application_credential_secret.is_some() {
                Method::ApplicationCredential
            } else if self.password.is_none() && self.token.is_some() {
                Method::Token
            } else {
                Method::Password
            });
        };
        match name.to_ascii_lowercase().replace(['_', '-'], "").as_str() {
            "password" | "v3password" => Ok(Method::Password),
            "token" | "v3token" => Ok(Method::Token),
            "v3applicationcredential" | "applicationcredential" => {
                Ok(Method::ApplicationCredential)
            }
            _ => Err(Error::UnsupportedAuthType(name.clone())),
        }
    }

    fn project(&self) -> Option<Project> {
        match (&self.project_id, &self.project_name) {
            (Some(id), _) => Some(Project::Id(id.clone())),
            (None, Some(name)) => Some(Project::Name {
                name: name.clone(),
                domain: domain(&self.project_domain_id, &self.project_domain_name),
            }),
            (None, None) => None,
        }
    }

    /// The login these settings describe.
    pub fn credentials(&self) -> Result<Credentials, Error> {
        let auth_url = self
            .auth_url
            .clone()
            .ok_or(Error::Missing("auth_url"))?
            .trim_end_matches('/')
            .to_owned();
        match self.method()? {
            Method::ApplicationCredential => self.application_credential(auth_url),
            Method::Token => Ok(Credentials::Token {
                auth_url,
                token: self.token.clone().ok_or(Error::Missing("token"))?,
                project: self.project(),
            }),
            Method::Password => {
                let username = self.username.clone().ok_or(Error::Missing("username"))?;
                let password = self.password.clone().ok_or(Error::Missing("password"))?;
                let project = self
                    .project()
                    .ok_or(Error::Missing("project_name or project_id"))?;
                Ok(Credentials::Password {
                    auth_url,
                    username,
                    user_domain: domain(&self.user_domain_id, &self.user_domain_name),
                    password,
                    project,
                })
            }
        }
    }

    fn application_credential(&self, auth_url: String) -> Result<Credentials, Error> {
        let secret = self
            .application_credential_secret
            .clone()
            .ok_or(Error::Missing("application_credential_secret"))?;
        let user = match (&self.user_id, &self.username) {
            (Some(id), _) => Some(AppCredentialUser::Id(id.clone())),
            (None, Some(name)) => Some(AppCredentialUser::Name {
                name: name.clone(),
                domain: domain(&self.user_domain_id, &self.user_domain_name),
            }),
            (None, None) => None,
        };
        if self.application_credential_id.is_none() {
            if self.application_credential_name.is_none() {
                return Err(Error::Missing(
                    "application_credential_id (or application_credential_name)",
                ));
            }
            if user.is_none() {
                return Err(Error::Missing(
                    "username or user_id (an application credential given by name needs its user)",
                ));
            }
        }
        Ok(Credentials::ApplicationCredential {
            auth_url,
            id: self.application_credential_id.clone(),
            name: self.application_credential_name.clone(),
            user,
            secret,
        })
    }

    /// The `OS_*` variables of `env`.
    pub fn from_env(env: &BTreeMap<String, String>) -> AuthSettings {
        let get = |key: &str| env.get(key).filter(|v| !v.is_empty()).cloned();
        AuthSettings {
            auth_type: get("OS_AUTH_TYPE"),
            auth_url: get("OS_AUTH_URL"),
            username: get("OS_USERNAME"),
            user_id: get("OS_USER_ID"),
            password: get("OS_PASSWORD").map(Secret::new),
            user_domain_name: get("OS_USER_DOMAIN_NAME"),
            user_domain_id: get("OS_USER_DOMAIN_ID"),
            project_name: get("OS_PROJECT_NAME").or_else(|| get("OS_TENANT_NAME")),
            project_id: get("OS_PROJECT_ID").or_else(|| get("OS_TENANT_ID")),
            project_domain_name: get("OS_PROJECT_DOMAIN_NAME"),
            project_domain_id: get("OS_PROJECT_DOMAIN_ID"),
            application_credential_id: get("OS_APPLICATION_CREDENTIAL_ID"),
            application_credential_name: get("OS_APPLICATION_CREDENTIAL_NAME"),
            application_credential_secret: get("OS_APPLICATION_CREDENTIAL_SECRET").map(Secret::new),
            token: get("OS_TOKEN").map(Secret::new),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_do_not_print() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "<redacted>");
        let settings = AuthSettings {
            password: Some(s),
            ..AuthSettings::default()
        };
        assert!(!format!("{settings:?}").contains("hunter2"));
    }

    #[test]
    fn password_login_needs_a_project() {
        let settings = AuthSettings {
            auth_url: Some("http://k/v3/".into()),
            username: Some("ha".into()),
            password: Some(Secret::new("x")),
            ..AuthSettings::default()
        };
        assert_eq!(
            settings.credentials(),
            Err(Error::Missing("project_name or project_id"))
        );
        let settings = AuthSettings {
            project_name: Some("admin".into()),
            ..settings
        };
        match settings.credentials().unwrap() {
            Credentials::Password {
                auth_url,
                project,
                user_domain,
                ..
            } => {
                assert_eq!(auth_url, "http://k/v3");
                assert_eq!(user_domain, Domain::Id("default".into()));
                assert_eq!(
                    project,
                    Project::Name {
                        name: "admin".into(),
                        domain: Domain::Id("default".into())
                    }
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn application_credentials_by_name_need_a_user() {
        let settings = AuthSettings {
            auth_url: Some("http://k/v3".into()),
            application_credential_name: Some("monitoring".into()),
            application_credential_secret: Some(Secret::new("s")),
            ..AuthSettings::default()
        };
        assert!(settings.credentials().is_err());
        let settings = AuthSettings {
            user_id: Some("u1".into()),
            ..settings
        };
        assert!(matches!(
            settings.credentials(),
            Ok(Credentials::ApplicationCredential { .. })
        ));
    }

    #[test]
    fn auth_type_picks_the_method_and_unknown_ones_are_named() {
        let settings = AuthSettings {
            auth_url: Some("http://k/v3".into()),
            username: Some("ha".into()),
            password: Some(Secret::new("x")),
            project_id: Some("p1".into()),
            token: Some(Secret::new("t")),
            ..AuthSettings::default()
        };
        assert!(matches!(
            settings.credentials(),
            Ok(Credentials::Password { .. })
        ));
        for (auth_type, password) in [("token", false), ("v3token", false), ("v3password", true)] {
            let chosen = AuthSettings {
                auth_type: Some(auth_type.into()),
                ..settings.clone()
            }
            .credentials()
            .unwrap();
            assert_eq!(
                matches!(chosen, Credentials::Password { .. }),
                password,
                "{auth_type}"
            );
        }
        let err = AuthSettings {
            auth_type: Some("v3oidcpassword".into()),
            ..settings.clone()
        }
        .credentials()
        .unwrap_err();
        assert!(err.to_string().contains("\"v3oidcpassword\""), "{err}");
        let err = AuthSettings {
            auth_type: Some("v3applicationcredential".into()),
            ..settings
        }
        .credentials()
        .unwrap_err();
        assert_eq!(err, Error::Missing("application_credential_secret"));
        let token_only = AuthSettings {
            auth_url: Some("http://k/v3".into()),
            token: Some(Secret::new("t")),
            ..AuthSettings::default()
        };
        assert!(matches!(
            token_only.credentials(),
            Ok(Credentials::Token { project: None, .. })
        ));
    }

    #[test]
    fn os_variables() {
        let env = BTreeMap::from([
            ("OS_AUTH_URL".to_owned(), "http://k/v3".to_owned()),
            ("OS_USERNAME".to_owned(), "admin".to_owned()),
            ("OS_PASSWORD".to_owned(), "secret".to_owned()),
            ("OS_PROJECT_NAME".to_owned(), "admin".to_owned()),
            ("OS_USER_DOMAIN_NAME".to_owned(), "Default".to_owned()),
        ]);
        let from_env = AuthSettings::from_env(&env);
        assert!(from_env.credentials().is_ok());
    }
}
