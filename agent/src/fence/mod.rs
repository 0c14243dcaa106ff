//! Fencing: powering a failed host off through its BMC and confirming it
//! is off before the host is reported, so that the engine never evacuates
//! the instances of a host that may still write to their disks. Redfish
//! (`redfish`) and IPMI through `ipmitool` (`ipmi`); the confirmation loop
//! is shared.

pub mod ipmi;
pub mod redfish;

use std::time::Duration;

use tokio::time::Instant;

use crate::config::{FenceDevice, FencingSettings};
use crate::credentials;

/// A host's power as its BMC reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Power {
    On,
    Off,
    /// Changing, or a state the driver does not know.
    Other,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Credentials(#[from] credentials::Error),
    #[error("redfish: {0}")]
    Redfish(String),
    #[error("ipmi: {0}")]
    Ipmi(String),
    #[error("the host was not confirmed off within {0:?} (last power state: {1:?})")]
    NotConfirmed(Duration, Option<Power>),
}

/// One host's fencing device, ready to use.
#[derive(Debug)]
pub enum Device {
    Redfish(redfish::Redfish),
    Ipmi(ipmi::Ipmi),
}

impl Device {
    /// The device `config` describes, with its credentials read now (so a
    /// missing password is reported at start, not during an incident).
    pub fn new(host: &str, config: &FenceDevice) -> Result<Self, Error> {
        let setting = format!("fencing.devices.{host}.password");
        Ok(match config {
            FenceDevice::Redfish {
                url,
                system,
                username,
                password,
                ca_file,
                insecure,
            } => Self::Redfish(redfish::Redfish::new(
                url,
                system.clone(),
                username.clone(),
                credentials::read(&setting, password)?,
                ca_file.as_deref(),
                *insecure,
            )?),
            FenceDevice::Ipmi {
                address,
                port,
                username,
                password,
                interface,
                ipmitool,
            } => Self::Ipmi(ipmi::Ipmi {
                address: address.clone(),
                port: *port,
                username: username.clone(),
                password: credentials::read(&setting, password)?,
                interface: interface.clone(),
                ipmitool: ipmitool.clone(),
            }),
        })
    }

    pub fn driver(&self) -> &'static str {
        match self {
            Self::Redfish(_) => "redfish",
            Self::Ipmi(_) => "ipmi",
        }
    }

    async fn power_off(&self) -> Result<(), Error> {
        match self {
            Self::Redfish(d) => d.power_off().await,
            Self::Ipmi(d) => d.power_off().await,
        }
    }

    pub async fn power(&self) -> Result<Power, Error> {
        match self {
            Self::Redfish(d) => d.power().await,
            Self::Ipmi(d) => d.power().await,
        }
    }

    /// Powers the host off and waits until the BMC says it is off.
    pub async fn fence(&self, settings: &FencingSettings) -> Result<Duration, Error> {
        let started = Instant::now();
        let deadline = started + settings.timeout;
        // A refused power-off of a host already off is fine: the reading
        // below decides.
        if let Err(e) = self.power_off().await {
            tracing::warn!(driver = self.driver(), error = %e, "power-off request failed; reading the power state");
        }
        let mut last = None;
        loop {
            match self.power().await {
                Ok(Power::Off) => return Ok(started.elapsed()),
                Ok(p) => last = Some(p),
                Err(e) => {
                    tracing::warn!(driver = self.driver(), error = %e, "cannot read the power state")
                }
            }
            if Instant::now() + settings.poll_interval > deadline {
                return Err(Error::NotConfirmed(settings.timeout, last));
            }
            tokio::time::sleep(settings.poll_interval).await;
        }
    }
}
