//! `clouds.yaml` as the openstack CLI reads it: the first file found in
//! openstacksdk's places (`OS_CLIENT_CONFIG_FILE`, the current directory,
//! `~/.config/openstack`, `/etc/openstack`), with the same cloud of
//! `secure.yaml` (`OS_CLIENT_SECURE_FILE`, then the same places) merged over
//! it, so that passwords can live in a file of their own. What is kept: the
//! `auth` section, `auth_type`, `region_name`, `interface`, and TLS
//! (`cacert`, `verify`, `cert`, `key`); other keys are the SDK's own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use instanceha_runtime::secret::Secret;
use serde_yaml_ng::{Mapping, Value};

use crate::credentials::{AuthSettings, Error};
use crate::tls::{TlsSettings, parse_bool};

/// One cloud of a `clouds.yaml` (with its `secure.yaml` part).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CloudEntry {
    /// The `auth` section, with the cloud's `auth_type`.
    pub auth: AuthSettings,
    pub region_name: Option<String>,
    pub interface: Option<String>,
    pub tls: TlsSettings,
}

/// The places `clouds.yaml` is looked for, in order (openstacksdk's).
pub fn clouds_yaml_paths(env: &BTreeMap<String, String>) -> Vec<PathBuf> {
    paths(env, "OS_CLIENT_CONFIG_FILE", "clouds.yaml")
}

/// The places `secure.yaml` is looked for, in order (openstacksdk's).
pub fn secure_yaml_paths(env: &BTreeMap<String, String>) -> Vec<PathBuf> {
    paths(env, "OS_CLIENT_SECURE_FILE", "secure.yaml")
}

fn paths(env: &BTreeMap<String, String>, variable: &str, file: &str) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    if let Some(path) = env.get(variable).filter(|p| !p.is_empty()) {
        paths.push(PathBuf::from(path));
    }
    paths.push(PathBuf::from(file));
    if let Some(home) = env.get("HOME") {
        paths.push(Path::new(home).join(".config/openstack").join(file));
    }
    paths.push(Path::new("/etc/openstack").join(file));
    paths
}

/// Cloud `name` from the `clouds.yaml` and `secure.yaml` of `env`'s places.
pub fn load_cloud_from_env(
    name: &str,
    env: &BTreeMap<String, String>,
) -> Result<CloudEntry, Error> {
    load_cloud(name, &clouds_yaml_paths(env), &secure_yaml_paths(env))
}

/// Reads cloud `name` from the first `clouds.yaml` of `paths` that
/// exists, with its entry of the first `secure.yaml` of `secure` merged
/// over it.
pub fn load_cloud(name: &str, paths: &[PathBuf], secure: &[PathBuf]) -> Result<CloudEntry, Error> {
    let Some(path) = paths.iter().find(|p| p.is_file()) else {
        return Err(Error::NoCloudsFile(
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        ));
    };
    let text = read(path)?;
    let secure = match secure.iter().find(|p| p.is_file()) {
        Some(path) => Some((read(path)?, path.display().to_string())),
        None => None,
    };
    parse_cloud(
        name,
        &text,
        &path.display().to_string(),
        secure
            .as_ref()
            .map(|(text, path)| (text.as_str(), path.as_str())),
    )
}

fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|e| Error::Unreadable {
        path: path.display().to_string(),
        reason: e.to_string(),
    })
}

/// The `clouds` mapping of a file's text.
fn clouds_of(text: &str, path: &str) -> Result<Mapping, Error> {
    let unreadable = |reason: String| Error::Unreadable {
        path: path.to_owned(),
        reason,
    };
    let file: Value = serde_yaml_ng::from_str(text).map_err(|e| unreadable(e.to_string()))?;
    match file.get("clouds") {
        Some(Value::Mapping(clouds)) => Ok(clouds.clone()),
        Some(_) => Err(unreadable("`clouds` is not a mapping".to_owned())),
        None => Err(unreadable("no `clouds` mapping".to_owned())),
    }
}

/// `over` merged into `base`, mappings key by key (openstacksdk's merge).
fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Mapping(base), Value::Mapping(over)) => {
            for (key, value) in over {
                match base.get_mut(&key) {
                    Some(existing) => merge(existing, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, over) => *base = over,
    }
}

/// Cloud `name` from the text of a `clouds.yaml` and, if given, of a
/// `secure.yaml` (text and path).
pub fn parse_cloud(
    name: &str,
    text: &str,
    path: &str,
    secure: Option<(&str, &str)>,
) -> Result<CloudEntry, Error> {
    let clouds = clouds_of(text, path)?;
    let mut cloud = clouds
        .get(name)
        .cloned()
        .ok_or_else(|| Error::UnknownCloud {
            cloud: name.to_owned(),
            path: path.to_owned(),
        })?;
    if let Some((secure_text, secure_path)) = secure
        && let Some(part) = clouds_of(secure_text, secure_path)?.get(name)
    {
        merge(&mut cloud, part.clone());
    }
    let text_of = |value: Option<&Value>| match value {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(Value::Bool(b)) => Some(b.to_string()),
        _ => None,
    };
    let top = |key: &str| text_of(cloud.get(key));
    let auth = |key: &str| text_of(cloud.get("auth").and_then(|a| a.get(key)));
    let verify = match cloud.get("verify") {
        None | Some(Value::Null) => None,
        Some(value) => Some(
            text_of(Some(value))
                .as_deref()
                .and_then(parse_bool)
                .ok_or_else(|| Error::Unreadable {
                    path: path.to_owned(),
                    reason: format!("clouds.{name}.verify must be true or false"),
                })?,
        ),
    };
    // `insecure: true` is the older spelling of `verify: false`.
    let verify = verify.or_else(|| top("insecure").as_deref().and_then(parse_bool).map(|i| !i));
    Ok(CloudEntry {
        auth: AuthSettings {
            auth_type: top("auth_type"),
            auth_url: auth("auth_url"),
            username: auth("username"),
            user_id: auth("user_id"),
            password: auth("password").map(Secret::new),
            user_domain_name: auth("user_domain_name"),
            user_domain_id: auth("user_domain_id"),
            project_name: auth("project_name").or_else(|| auth("tenant_name")),
            project_id: auth("project_id").or_else(|| auth("tenant_id")),
            project_domain_name: auth("project_domain_name"),
            project_domain_id: auth("project_domain_id"),
            application_credential_id: auth("application_credential_id"),
            application_credential_name: auth("application_credential_name"),
            application_credential_secret: auth("application_credential_secret").map(Secret::new),
            token: auth("token").map(Secret::new),
        },
        region_name: top("region_name"),
        interface: top("interface"),
        tls: TlsSettings {
            cacert: top("cacert").map(PathBuf::from),
            verify,
            cert: top("cert").map(PathBuf::from),
            key: top("key").map(PathBuf::from),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::Credentials;

    const CLOUDS: &str = r#"
clouds:
  sim:
    auth_type: password
    auth:
      auth_url: http://127.0.0.1:5000/identity/v3
      username: admin
      project_name: admin
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionOne
    interface: internal
    identity_api_version: 3
    cacert: /etc/ssl/site-ca.pem
  lab:
    auth_type: v3oidcpassword
    auth:
      auth_url: http://k/v3
    verify: false
"#;

    const SECURE: &str = r#"
clouds:
  sim:
    auth:
      password: secret
"#;

    #[test]
    fn a_cloud_with_its_secure_part() {
        let cloud =
            parse_cloud("sim", CLOUDS, "clouds.yaml", Some((SECURE, "secure.yaml"))).unwrap();
        assert_eq!(cloud.region_name.as_deref(), Some("RegionOne"));
        assert_eq!(cloud.interface.as_deref(), Some("internal"));
        assert_eq!(
            cloud.tls.cacert,
            Some(PathBuf::from("/etc/ssl/site-ca.pem"))
        );
        assert_eq!(cloud.tls.verify, None);
        assert!(matches!(
            cloud.auth.credentials(),
            Ok(Credentials::Password { .. })
        ));
        // Without secure.yaml the password is missing, and said so.
        let alone = parse_cloud("sim", CLOUDS, "clouds.yaml", None).unwrap();
        assert_eq!(alone.auth.credentials(), Err(Error::Missing("password")));
        assert!(matches!(
            parse_cloud("other", CLOUDS, "clouds.yaml", None),
            Err(Error::UnknownCloud { .. })
        ));
    }

    #[test]
    fn verify_false_and_unknown_auth_types() {
        let lab = parse_cloud("lab", CLOUDS, "clouds.yaml", None).unwrap();
        assert!(lab.tls.insecure());
        let err = lab.auth.credentials().unwrap_err();
        assert_eq!(
            err.to_string(),
            "auth_type \"v3oidcpassword\" is not supported (use password, v3password, token, v3token or v3applicationcredential)"
        );
        let bad = CLOUDS.replace("verify: false", "verify: sometimes");
        let err = parse_cloud("lab", &bad, "clouds.yaml", None).unwrap_err();
        assert!(err.to_string().contains("clouds.lab.verify"), "{err}");
    }

    #[test]
    fn files_are_found_in_openstacksdk_places() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(home.join(".config/openstack")).unwrap();
        std::fs::write(home.join(".config/openstack/clouds.yaml"), CLOUDS).unwrap();
        let secure = dir.path().join("elsewhere.yaml");
        std::fs::write(&secure, SECURE).unwrap();
        let env = BTreeMap::from([
            ("HOME".to_owned(), home.display().to_string()),
            (
                "OS_CLIENT_SECURE_FILE".to_owned(),
                secure.display().to_string(),
            ),
        ]);
        let cloud = load_cloud_from_env("sim", &env).unwrap();
        assert!(cloud.auth.credentials().is_ok());
        let env = BTreeMap::from([(
            "OS_CLIENT_CONFIG_FILE".to_owned(),
            dir.path().join("missing.yaml").display().to_string(),
        )]);
        let err = load_cloud("sim", &clouds_yaml_paths(&env)[..1], &[]).unwrap_err();
        assert!(err.to_string().contains("missing.yaml"), "{err}");
    }
}
