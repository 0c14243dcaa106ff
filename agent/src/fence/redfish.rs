//! Redfish fencing: `POST .../Actions/ComputerSystem.Reset` with
//! `{"ResetType": "ForceOff"}` and `PowerState` read from the
//! `ComputerSystem` resource, with HTTP basic authentication.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::{Error, Power};
use crate::credentials::Secret;

/// A Redfish BMC.
#[derive(Debug)]
pub struct Redfish {
    http: reqwest::Client,
    base: String,
    system: Option<String>,
    username: Option<String>,
    password: Option<Secret>,
}

fn err(e: impl std::fmt::Display) -> Error {
    Error::Redfish(e.to_string())
}

/// The power state a `ComputerSystem` resource carries.
pub fn power_state(system: &Value) -> Power {
    match system.get("PowerState").and_then(Value::as_str) {
        Some("Off") => Power::Off,
        Some("On") => Power::On,
        _ => Power::Other,
    }
}

/// The `ComputerSystem.Reset` target of a system (its `Actions`, else the
/// standard path).
pub fn reset_target(system_path: &str, system: &Value) -> String {
    system
        .pointer("/Actions/#ComputerSystem.Reset/target")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{system_path}/Actions/ComputerSystem.Reset"))
}

impl Redfish {
    pub fn new(
        url: &str,
        system: Option<String>,
        username: Option<String>,
        password: Option<Secret>,
        ca_file: Option<&Path>,
        insecure: bool,
    ) -> Result<Self, Error> {
        crate::install_crypto_provider();
        let mut http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .connect_timeout(Duration::from_secs(5));
        if let Some(path) = ca_file {
            let pem =
                std::fs::read(path).map_err(|e| err(format!("ca_file {}: {e}", path.display())))?;
            for cert in reqwest::Certificate::from_pem_bundle(&pem).map_err(err)? {
                http = http.add_root_certificate(cert);
            }
        }
        if insecure {
            http = http.danger_accept_invalid_certs(true);
        }
        Ok(Self {
            http: http.build().map_err(err)?,
            base: url.trim_end_matches('/').to_owned(),
            system,
            username,
            password,
        })
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let url = if path.starts_with("http://") || path.starts_with("https://") {
            path.to_owned()
        } else {
            format!("{}{}", self.base, path)
        };
        let builder = self
            .http
            .request(method, url)
            .header(reqwest::header::ACCEPT, "application/json");
        match &self.username {
            Some(user) => builder.basic_auth(user, self.password.as_ref().map(Secret::expose)),
            None => builder,
        }
    }

    async fn get(&self, path: &str) -> Result<Value, Error> {
        let response = self
            .request(reqwest::Method::GET, path)
            .send()
            .await
            .map_err(err)?;
        let status = response.status();
        if !status.is_success() {
            return Err(err(format!("GET {path}: HTTP {status}")));
        }
        response.json().await.map_err(err)
    }

    /// The system's resource path: the configured one, or the only member
    /// of the systems collection.
    async fn system_path(&self) -> Result<String, Error> {
        if let Some(system) = &self.system {
            return Ok(if system.starts_with('/') {
                system.clone()
            } else {
                format!("/redfish/v1/Systems/{system}")
            });
        }
        let collection = self.get("/redfish/v1/Systems").await?;
        let members: Vec<&str> = collection
            .get("Members")
            .and_then(Value::as_array)
            .map(|m| {
                m.iter()
                    .filter_map(|v| v.get("@odata.id")?.as_str())
                    .collect()
            })
            .unwrap_or_default();
        match members.as_slice() {
            [only] => Ok((*only).to_owned()),
            other => Err(err(format!(
                "the BMC has {} systems; set the device's `system`",
                other.len()
            ))),
        }
    }

    pub async fn power_off(&self) -> Result<(), Error> {
        let path = self.system_path().await?;
        let system = self.get(&path).await?;
        let target = reset_target(&path, &system);
        let response = self
            .request(reqwest::Method::POST, &target)
            .json(&serde_json::json!({"ResetType": "ForceOff"}))
            .send()
            .await
            .map_err(err)?;
        let status = response.status();
        if status.is_success() {
            tracing::info!(system = %path, "redfish forceoff requested");
            Ok(())
        } else {
            Err(err(format!("POST {target}: HTTP {status}")))
        }
    }

    pub async fn power(&self) -> Result<Power, Error> {
        let path = self.system_path().await?;
        Ok(power_state(&self.get(&path).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn power_states_and_reset_targets_are_read_from_the_resource() {
        let system = json!({
            "PowerState": "Off",
            "Actions": {"#ComputerSystem.Reset": {"target": "/redfish/v1/Systems/x/Actions/ComputerSystem.Reset"}}
        });
        assert_eq!(power_state(&system), Power::Off);
        assert_eq!(power_state(&json!({"PowerState": "On"})), Power::On);
        assert_eq!(
            power_state(&json!({"PowerState": "PoweringOff"})),
            Power::Other
        );
        assert_eq!(power_state(&json!({})), Power::Other);
        assert_eq!(
            reset_target("/redfish/v1/Systems/y", &system),
            "/redfish/v1/Systems/x/Actions/ComputerSystem.Reset"
        );
        assert_eq!(
            reset_target("/redfish/v1/Systems/y", &json!({})),
            "/redfish/v1/Systems/y/Actions/ComputerSystem.Reset"
        );
    }
}
