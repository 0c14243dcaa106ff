//! Where the engine's OpenStack credentials come from: its own
//! configuration, a `clouds.yaml` cloud, or the `OS_*` variables, as
//! OpenStack users expect.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
}

impl Credentials {
    pub fn auth_url(&self) -> &str {
        match self {
            Self::Password { auth_url, .. } | Self::ApplicationCredential { auth_url, .. } => {
                auth_url
            }
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
        if let Some(secret) = &self.application_credential_secret {
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
            return Ok(Credentials::ApplicationCredential {
                auth_url,
                id: self.application_credential_id.clone(),
                name: self.application_credential_name.clone(),
                user,
                secret: secret.clone(),
            });
        }
        let username = self.username.clone().ok_or(Error::Missing("username"))?;
        let password = self.password.clone().ok_or(Error::Missing("password"))?;
        let project = match (&self.project_id, &self.project_name) {
            (Some(id), _) => Project::Id(id.clone()),
            (None, Some(name)) => Project::Name {
                name: name.clone(),
                domain: domain(&self.project_domain_id, &self.project_domain_name),
            },
            (None, None) => return Err(Error::Missing("project_name or project_id")),
        };
        Ok(Credentials::Password {
            auth_url,
            username,
            user_domain: domain(&self.user_domain_id, &self.user_domain_name),
            password,
            project,
        })
    }

    /// The `OS_*` variables of `env`.
    pub fn from_env(env: &BTreeMap<String, String>) -> AuthSettings {
        let get = |key: &str| env.get(key).filter(|v| !v.is_empty()).cloned();
        AuthSettings {
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
        }
    }
}

/// One cloud of a `clouds.yaml`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct CloudEntry {
    #[serde(default)]
    pub auth: AuthSettings,
    #[serde(default)]
    pub region_name: Option<String>,
    #[serde(default)]
    pub interface: Option<String>,
}

#[derive(Debug, Deserialize)]
struct CloudsFile {
    clouds: BTreeMap<String, LenientCloud>,
}

/// clouds.yaml entries carry many keys the engine does not use
/// (`auth_type`, `identity_api_version`, `verify`...): keep what matters.
#[derive(Debug, Deserialize)]
struct LenientCloud {
    #[serde(default)]
    auth: BTreeMap<String, serde_yaml_ng::Value>,
    #[serde(default)]
    region_name: Option<String>,
    #[serde(default)]
    interface: Option<String>,
}

/// The places `clouds.yaml` is looked for, in order (openstacksdk's).
pub fn clouds_yaml_paths(env: &BTreeMap<String, String>) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    if let Some(file) = env.get("OS_CLIENT_CONFIG_FILE") {
        paths.push(PathBuf::from(file));
    }
    paths.push(PathBuf::from("clouds.yaml"));
    if let Some(home) = env.get("HOME") {
        paths.push(Path::new(home).join(".config/openstack/clouds.yaml"));
    }
    paths.push(PathBuf::from("/etc/openstack/clouds.yaml"));
    paths
}

/// Reads cloud `name` from the first `clouds.yaml` that exists.
pub fn load_cloud(name: &str, paths: &[PathBuf]) -> Result<CloudEntry, Error> {
    let Some(path) = paths.iter().find(|p| p.is_file()) else {
        return Err(Error::NoCloudsFile(
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        ));
    };
    let text = std::fs::read_to_string(path).map_err(|e| Error::Unreadable {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    parse_cloud(name, &text, &path.display().to_string())
}

/// Cloud `name` from the text of a `clouds.yaml`.
pub fn parse_cloud(name: &str, text: &str, path: &str) -> Result<CloudEntry, Error> {
    let file: CloudsFile = serde_yaml_ng::from_str(text).map_err(|e| Error::Unreadable {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    let cloud = file.clouds.get(name).ok_or_else(|| Error::UnknownCloud {
        cloud: name.to_owned(),
        path: path.to_owned(),
    })?;
    let text = |key: &str| {
        cloud.auth.get(key).and_then(|v| match v {
            serde_yaml_ng::Value::String(s) => Some(s.clone()),
            serde_yaml_ng::Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
    };
    Ok(CloudEntry {
        auth: AuthSettings {
            auth_url: text("auth_url"),
            username: text("username"),
            user_id: text("user_id"),
            password: text("password").map(Secret::new),
            user_domain_name: text("user_domain_name"),
            user_domain_id: text("user_domain_id"),
            project_name: text("project_name").or_else(|| text("tenant_name")),
            project_id: text("project_id").or_else(|| text("tenant_id")),
            project_domain_name: text("project_domain_name"),
            project_domain_id: text("project_domain_id"),
            application_credential_id: text("application_credential_id"),
            application_credential_name: text("application_credential_name"),
            application_credential_secret: text("application_credential_secret").map(Secret::new),
        },
        region_name: cloud.region_name.clone(),
        interface: cloud.interface.clone(),
    })
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
    fn os_variables_and_clouds_yaml() {
        let env = BTreeMap::from([
            ("OS_AUTH_URL".to_owned(), "http://k/v3".to_owned()),
            ("OS_USERNAME".to_owned(), "admin".to_owned()),
            ("OS_PASSWORD".to_owned(), "secret".to_owned()),
            ("OS_PROJECT_NAME".to_owned(), "admin".to_owned()),
            ("OS_USER_DOMAIN_NAME".to_owned(), "Default".to_owned()),
        ]);
        let from_env = AuthSettings::from_env(&env);
        assert!(from_env.credentials().is_ok());

        let yaml = r#"
clouds:
  sim:
    auth_type: password
    auth:
      auth_url: http://127.0.0.1:5000/identity/v3
      username: admin
      password: secret
      project_name: admin
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionOne
    interface: internal
    identity_api_version: 3
"#;
        let cloud = parse_cloud("sim", yaml, "clouds.yaml").unwrap();
        assert_eq!(cloud.region_name.as_deref(), Some("RegionOne"));
        assert_eq!(cloud.interface.as_deref(), Some("internal"));
        assert!(cloud.auth.credentials().is_ok());
        assert!(matches!(
            parse_cloud("other", yaml, "clouds.yaml"),
            Err(Error::UnknownCloud { .. })
        ));
    }
}
