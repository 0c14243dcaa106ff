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
        confirm_off(self, settings).await
    }
}

/// What the confirmation loop needs of a BMC.
trait PowerControl {
    fn driver(&self) -> &'static str;
    async fn power_off(&self) -> Result<(), Error>;
    async fn power(&self) -> Result<Power, Error>;
}

impl PowerControl for Device {
    fn driver(&self) -> &'static str {
        Device::driver(self)
    }

    async fn power_off(&self) -> Result<(), Error> {
        Device::power_off(self).await
    }

    async fn power(&self) -> Result<Power, Error> {
        Device::power(self).await
    }
}

/// Requests the power-off, then reads the power state every
/// `poll_interval` until it is off, for at most `timeout`.
async fn confirm_off<B: PowerControl>(
    bmc: &B,
    settings: &FencingSettings,
) -> Result<Duration, Error> {
    let started = Instant::now();
    let deadline = started + settings.timeout;
    // A refused power-off of a host already off is fine: the reading
    // below decides.
    if let Err(e) = bmc.power_off().await {
        tracing::warn!(driver = bmc.driver(), error = %e, "power-off request failed; reading the power state");
    }
    let mut last = None;
    loop {
        match bmc.power().await {
            Ok(Power::Off) => return Ok(started.elapsed()),
            Ok(p) => last = Some(p),
            Err(e) => {
                tracing::warn!(driver = bmc.driver(), error = %e, "cannot read the power state")
            }
        }
        if Instant::now() + settings.poll_interval > deadline {
            return Err(Error::NotConfirmed(settings.timeout, last));
        }
        tokio::time::sleep(settings.poll_interval).await;
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// A BMC whose host goes off after `off_after` readings (never if
    /// `None`), and whose power-off request may be refused.
    struct Scripted {
        readings: Cell<u32>,
        off_after: Option<u32>,
        refuse: bool,
    }

    fn scripted(off_after: Option<u32>, refuse: bool) -> Scripted {
        Scripted {
            readings: Cell::new(0),
            off_after,
            refuse,
        }
    }

    impl PowerControl for Scripted {
        fn driver(&self) -> &'static str {
            "scripted"
        }

        async fn power_off(&self) -> Result<(), Error> {
            if self.refuse {
                Err(Error::Redfish("HTTP 409".into()))
            } else {
                Ok(())
            }
        }

        async fn power(&self) -> Result<Power, Error> {
            let n = self.readings.get() + 1;
            self.readings.set(n);
            Ok(match self.off_after {
                Some(after) if n > after => Power::Off,
                _ => Power::On,
            })
        }
    }

    fn settings() -> FencingSettings {
        FencingSettings {
            timeout: Duration::from_secs(10),
            poll_interval: Duration::from_millis(500),
            ..FencingSettings::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_host_is_confirmed_off_by_reading_its_power() {
        let bmc = scripted(Some(4), false);
        let took = confirm_off(&bmc, &settings()).await.unwrap();
        assert_eq!(
            took,
            Duration::from_secs(2),
            "four readings on, the fifth off"
        );
        // A refused request (the host already off, say) is decided by the
        // reading.
        let bmc = scripted(Some(0), true);
        assert_eq!(
            confirm_off(&bmc, &settings()).await.unwrap(),
            Duration::ZERO
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_host_never_off_is_not_confirmed_and_the_wait_is_bounded() {
        let bmc = scripted(None, false);
        let started = Instant::now();
        let err = confirm_off(&bmc, &settings()).await.unwrap_err();
        assert!(
            matches!(err, Error::NotConfirmed(_, Some(Power::On))),
            "{err}"
        );
        assert!(started.elapsed() <= Duration::from_secs(10));
        assert_eq!(bmc.readings.get(), 21, "at 0, 0.5 s, ..., 10 s");
    }
}
