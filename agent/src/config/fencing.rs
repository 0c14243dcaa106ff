//! `[fencing]`: how to power each host off, one device per host, and the
//! rules a device's settings must meet.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{CredentialSource, Error, invalid};

/// `[fencing]`: how to power each host off.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FencingSettings {
    /// How long to wait for a host to be confirmed off.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// How often to read its power state meanwhile.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// The fencing device of each host, by host name.
    pub devices: FenceDevices,
}

impl Default for FencingSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(60),
            poll_interval: Duration::from_millis(500),
            devices: BTreeMap::new(),
        }
    }
}

/// Fencing devices by host name.
pub type FenceDevices = BTreeMap<String, FenceDevice>;

/// One host's fencing device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "driver", rename_all = "lowercase", deny_unknown_fields)]
pub enum FenceDevice {
    /// A Redfish BMC: `ComputerSystem.Reset` with `ForceOff`, then
    /// `PowerState` read until `Off`.
    Redfish {
        /// `https://BMC` (the service root is `/redfish/v1`).
        url: String,
        /// The system's id under `/redfish/v1/Systems/` (default: the only
        /// member).
        #[serde(default)]
        system: Option<String>,
        #[serde(default)]
        username: Option<String>,
        #[serde(default)]
        password: CredentialSource,
        /// A PEM CA bundle for the BMC's certificate.
        #[serde(default)]
        ca_file: Option<PathBuf>,
        /// Accept any certificate (self-signed BMCs); off by default.
        #[serde(default)]
        insecure: bool,
    },
    /// An IPMI BMC through `ipmitool`: `chassis power off`, then `chassis
    /// power status` until off.
    Ipmi {
        address: String,
        #[serde(default = "ipmi_port")]
        port: u16,
        username: String,
        #[serde(default)]
        password: CredentialSource,
        /// `lanplus` (IPMI 2.0) or `lan`.
        #[serde(default = "ipmi_interface")]
        interface: String,
        #[serde(default = "ipmitool")]
        ipmitool: String,
    },
}

fn ipmi_port() -> u16 {
    623
}

fn ipmi_interface() -> String {
    "lanplus".to_owned()
}

fn ipmitool() -> String {
    "ipmitool".to_owned()
}

/// The fencing settings: positive timeouts and a usable address per device.
pub(super) fn validate_fencing(fencing: &FencingSettings) -> Result<(), Error> {
    if fencing.timeout.is_zero() || fencing.poll_interval.is_zero() {
        return Err(invalid(
            "fencing.timeout",
            "the timeout and poll_interval must be more than 0",
        ));
    }
    for (host, device) in &fencing.devices {
        let setting = format!("fencing.devices.{host}");
        match device {
            FenceDevice::Redfish { url, .. } => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(invalid(
                        format!("{setting}.url"),
                        format!("{url:?} is not an http:// or https:// URL"),
                    ));
                }
            }
            FenceDevice::Ipmi {
                address, interface, ..
            } => {
                if address.is_empty() {
                    return Err(invalid(format!("{setting}.address"), "must be set"));
                }
                if !matches!(interface.as_str(), "lan" | "lanplus") {
                    return Err(invalid(
                        format!("{setting}.interface"),
                        format!("{interface:?} is neither lan nor lanplus"),
                    ));
                }
            }
        }
    }
    Ok(())
}
