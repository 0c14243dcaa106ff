//! Logging in as the openstack CLI does: `--os-cloud` / `OS_CLOUD` (a cloud
//! of `clouds.yaml`, with its `secure.yaml` part) and the `OS_*` variables,
//! read by the engine's own code (`openstack_client::clouds` and
//! `credentials`); a Keystone token for the API; and the API's address
//! from the token's catalog, unless an endpoint is given. Nothing is kept
//! on disk: each run logs in again.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use openstack_client::catalog::select_typed_endpoint;
use openstack_client::clouds::load_cloud_from_env;
use openstack_client::credentials::{self, AuthSettings};
use openstack_client::keystone::Keystone;
use openstack_client::retry::RetryPolicy;
use openstack_client::tls::TlsSettings;

use crate::config::{Settings, Token, check_endpoint};

/// The catalog's service type of the API's gRPC address. Not Masakari's
/// `instance-ha`, which names the REST API (port 15868) that Masakari's
/// clients speak; this CLI speaks gRPC (port 15869).
pub const SERVICE_TYPE: &str = "instance-ha-grpc";

/// The openstack CLI's options. Flags win over the `OS_*` variables, which
/// win over the cloud's `clouds.yaml` entry.
#[derive(Args, Debug, Default, Clone)]
#[command(next_help_heading = "Keystone login, as the openstack CLI (when no --token is given)")]
pub struct LoginArgs {
    /// A cloud of clouds.yaml (./, ~/.config/openstack/, /etc/openstack/ or
    /// OS_CLIENT_CONFIG_FILE; secure.yaml merged over it)
    #[arg(
        long = "os-cloud",
        global = true,
        env = "OS_CLOUD",
        value_name = "NAME"
    )]
    pub cloud: Option<String>,
    /// password, v3password, token, v3token or v3applicationcredential
    #[arg(
        long = "os-auth-type",
        global = true,
        env = "OS_AUTH_TYPE",
        value_name = "TYPE"
    )]
    pub auth_type: Option<String>,
    /// Keystone's v3 address
    #[arg(
        long = "os-auth-url",
        global = true,
        env = "OS_AUTH_URL",
        value_name = "URL"
    )]
    pub auth_url: Option<String>,
    #[arg(
        long = "os-username",
        global = true,
        env = "OS_USERNAME",
        value_name = "NAME"
    )]
    pub username: Option<String>,
    #[arg(
        long = "os-password",
        global = true,
        env = "OS_PASSWORD",
        hide_env_values = true,
        value_name = "PASSWORD"
    )]
    pub password: Option<String>,
    #[arg(
        long = "os-project-name",
        global = true,
        env = "OS_PROJECT_NAME",
        value_name = "NAME"
    )]
    pub project_name: Option<String>,
    #[arg(
        long = "os-project-id",
        global = true,
        env = "OS_PROJECT_ID",
        value_name = "ID"
    )]
    pub project_id: Option<String>,
    #[arg(
        long = "os-user-domain-name",
        global = true,
        env = "OS_USER_DOMAIN_NAME",
        value_name = "NAME"
    )]
    pub user_domain_name: Option<String>,
    #[arg(
        long = "os-project-domain-name",
        global = true,
        env = "OS_PROJECT_DOMAIN_NAME",
        value_name = "NAME"
    )]
    pub project_domain_name: Option<String>,
    /// A Keystone token to exchange (auth type token)
    #[arg(
        long = "os-token",
        id = "os_token",
        global = true,
        env = "OS_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// A PEM file of CAs to trust besides the system's (Keystone and an
    /// https:// endpoint)
    #[arg(
        long = "os-cacert",
        global = true,
        env = "OS_CACERT",
        value_name = "FILE"
    )]
    pub cacert: Option<PathBuf>,
    /// Do not check Keystone's certificate (unsafe; a warning is printed)
    #[arg(long, global = true)]
    pub insecure: bool,
    /// The catalog interface of the API's address [default: public]
    #[arg(
        long = "os-interface",
        global = true,
        env = "OS_INTERFACE",
        value_name = "INTERFACE"
    )]
    pub interface: Option<String>,
    #[arg(
        long = "os-region-name",
        global = true,
        env = "OS_REGION_NAME",
        value_name = "REGION"
    )]
    pub region_name: Option<String>,
}

/// A login that did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("openstack credentials: {0}")]
    Credentials(#[from] credentials::Error),
    #[error("{0} — check the cloud's credentials (--os-cloud, OS_*)")]
    Refused(String),
    #[error("{0} — check OS_AUTH_URL or the cloud's auth_url, and that Keystone is up")]
    Unreachable(String),
    #[error(
        "{0} — register the API's gRPC address in Keystone (openstack service create --name \
         instanceha {SERVICE_TYPE}; openstack endpoint create {SERVICE_TYPE} public \
         http://HOST:15869) or give --endpoint"
    )]
    NoEndpoint(String),
    #[error("the catalog's {SERVICE_TYPE} endpoint: {0}")]
    BadEndpoint(String),
}

impl LoginArgs {
    fn auth(&self) -> AuthSettings {
        AuthSettings {
            auth_type: self.auth_type.clone(),
            auth_url: self.auth_url.clone(),
            username: self.username.clone(),
            password: self.password.clone().map(Token::new),
            project_name: self.project_name.clone(),
            project_id: self.project_id.clone(),
            user_domain_name: self.user_domain_name.clone(),
            project_domain_name: self.project_domain_name.clone(),
            token: self.token.clone().map(Token::new),
            ..AuthSettings::default()
        }
    }

    fn tls(&self) -> TlsSettings {
        TlsSettings {
            cacert: self.cacert.clone(),
            verify: self.insecure.then_some(false),
            ..TlsSettings::default()
        }
    }
}

/// Logs in when a cloud or an `OS_AUTH_URL` is given and `settings` has no
/// token: the token goes in `settings`, and the catalog's address too when
/// no endpoint was given. `Ok(false)`: nothing to log in with.
pub async fn log_in(
    args: &LoginArgs,
    env: &BTreeMap<String, String>,
    settings: &mut Settings,
) -> Result<bool, Error> {
    // The CA of an https:// endpoint, whether or not there is a login.
    let cacert = args
        .cacert
        .clone()
        .or_else(|| TlsSettings::from_env(env).cacert);
    settings.ca_file = settings.ca_file.take().or(cacert);
    if settings.token.is_some() {
        return Ok(false);
    }
    let cloud = match &args.cloud {
        Some(name) => Some(load_cloud_from_env(name, env)?),
        None => None,
    };
    let mut auth = args.auth().or(AuthSettings::from_env(env));
    let mut tls = args.tls().or(TlsSettings::from_env(env));
    if let Some(cloud) = &cloud {
        auth = auth.or(cloud.auth.clone());
        tls = tls.or(cloud.tls.clone());
    }
    if cloud.is_none() && auth.auth_url.is_none() {
        return Ok(false);
    }
    let credentials = auth.credentials()?;
    if tls.insecure() {
        eprintln!(
            "warning: Keystone's certificate is not checked (--insecure or verify: false): \
             anyone on the path can read the credentials"
        );
    }
    let retry = RetryPolicy {
        max_attempts: 2,
        initial_backoff: Duration::from_millis(200),
        budget: settings.timeout,
        ..RetryPolicy::default()
    };
    let failed = |e: openstack_client::Error| match e.status() {
        Some(400..=499) => Error::Refused(e.to_string()),
        _ => Error::Unreachable(e.to_string()),
    };
    let keystone =
        Keystone::standalone(credentials, retry, settings.timeout, &tls).map_err(failed)?;
    let token = keystone.token().await.map_err(failed)?;
    if settings.endpoint_is_default {
        let interface = args
            .interface
            .clone()
            .or_else(|| cloud.as_ref().and_then(|c| c.interface.clone()))
            .unwrap_or_else(|| "public".to_owned());
        let region = args
            .region_name
            .clone()
            .or_else(|| cloud.as_ref().and_then(|c| c.region_name.clone()));
        let url = select_typed_endpoint(
            &token.catalog,
            &[SERVICE_TYPE],
            &[interface],
            region.as_deref(),
        )
        .map_err(|e| Error::NoEndpoint(e.to_string()))?;
        settings.endpoint = check_endpoint(url).map_err(Error::BadEndpoint)?;
    }
    settings.token = Some(token.value.clone());
    settings.ca_file = tls.cacert;
    Ok(true)
}

impl Error {
    /// The CLI's exit code: 8 for refused credentials, 7 for a Keystone
    /// that cannot be reached, 2 for what the configuration lacks.
    pub fn exit(&self) -> crate::error::Exit {
        use crate::error::Exit;
        match self {
            Self::Refused(_) => Exit::Unauthenticated,
            Self::Unreachable(_) => Exit::Unavailable,
            Self::Credentials(_) | Self::NoEndpoint(_) | Self::BadEndpoint(_) => Exit::Usage,
        }
    }
}
