//! `instanceha-engine --check`: the settings and the files they name, and
//! Keystone reached with the engine's credentials (a login, the catalog's
//! Nova and Cinder endpoints and their microversions), changing nothing on
//! disk. It ends with an [`Exit`] whose codes `--help` lists.

use std::time::Duration;

use instanceha_runtime::exit::Exit;
use openstack_client::{Error as OpenStackError, OpenStack};

use crate::config::Settings;

/// How long the check waits for OpenStack, retries included.
const OPENSTACK_TIMEOUT: Duration = Duration::from_secs(60);

/// The files the start reads: TLS and the link token, which is not made
/// when it does not exist yet.
pub fn files(settings: &Settings) -> Result<Vec<String>, String> {
    settings
        .tls
        .load("tls")
        .map_err(|e| format!("configuration: {e}"))?;
    let token = settings.link_token_made(false).map_err(|e| e.to_string())?;
    let mut lines = Vec::new();
    if token.is_none()
        && settings.link.token_file.is_none()
        && !settings.link.insecure_unauthenticated
        && settings.tls.client_ca_file.is_none()
    {
        lines.push(format!(
            "the link token {} does not exist yet: the first start of the engine or the API makes it",
            instanceha_runtime::state::link_token_file(settings.state_dir.as_deref()).display()
        ));
    }
    Ok(lines)
}

/// Logs in and finds the endpoints: the lines to print, or the exit and
/// the reason.
pub async fn openstack(openstack: &OpenStack) -> Result<Vec<String>, (Exit, String)> {
    let checked = tokio::time::timeout(OPENSTACK_TIMEOUT, openstack.check())
        .await
        .map_err(|_| {
            (
                Exit::Unreachable,
                format!(
                    "openstack: no answer within {}",
                    humantime::format_duration(OPENSTACK_TIMEOUT)
                ),
            )
        })?;
    match checked {
        Ok((compute, volume)) => {
            let mut lines = vec![format!(
                "keystone: logged in; nova {} (microversion {})",
                compute.url, compute.microversion
            )];
            lines.push(match volume {
                Some(volume) => format!(
                    "cinder {} (microversion {})",
                    volume.url, volume.microversion
                ),
                None => "no cinder in the catalog: boot-from-volume checks are off".to_owned(),
            });
            Ok(lines)
        }
        Err(e) => Err((exit_of(&e), format!("openstack: {e}"))),
    }
}

/// Refused credentials, an unreachable service, or a setting that does not
/// match the cloud (no endpoint for the interface or region, a
/// microversion out of range).
fn exit_of(err: &OpenStackError) -> Exit {
    match err {
        OpenStackError::NoEndpoint(_) | OpenStackError::Microversion { .. } => Exit::Configuration,
        _ if matches!(err.status(), Some(401 | 403)) => Exit::Refused,
        _ => Exit::Unreachable,
    }
}
