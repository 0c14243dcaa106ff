//! IPMI fencing through `ipmitool` (`chassis power off`, then `chassis
//! power status`), the tool `fence_ipmilan` and masakari-hostmonitor use.
//! The password goes to `ipmitool` in its `IPMI_PASSWORD` environment
//! variable (`-E`), never on its command line where `ps` would show it.

use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use super::{Error, Power};
use crate::credentials::Secret;

/// An IPMI BMC.
#[derive(Debug)]
pub struct Ipmi {
    pub address: String,
    pub port: u16,
    pub username: String,
    pub password: Option<Secret>,
    pub interface: String,
    pub ipmitool: String,
}

/// The power `ipmitool chassis power status` printed.
pub fn parse_status(stdout: &str) -> Power {
    let text = stdout.to_ascii_lowercase();
    if text.contains("chassis power is off") {
        Power::Off
    } else if text.contains("chassis power is on") {
        Power::On
    } else {
        Power::Other
    }
}

impl Ipmi {
    async fn run(&self, args: &[&str]) -> Result<String, Error> {
        let mut command = Command::new(&self.ipmitool);
        command
            .args([
                "-I",
                &self.interface,
                "-H",
                &self.address,
                "-p",
                &self.port.to_string(),
            ])
            .args(["-U", &self.username, "-R", "2", "-N", "2"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        match &self.password {
            Some(password) => {
                command.arg("-E");
                command.env("IPMI_PASSWORD", password.expose());
            }
            None => {
                command.env_remove("IPMI_PASSWORD");
            }
        }
        // ipmitool wants the options before the command.
        let output = tokio::time::timeout(Duration::from_secs(20), command.output())
            .await
            .map_err(|_| Error::Ipmi(format!("ipmitool {} timed out", args.join(" "))))?
            .map_err(|e| Error::Ipmi(format!("cannot run {}: {e}", self.ipmitool)))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() {
            Ok(stdout)
        } else {
            Err(Error::Ipmi(format!(
                "ipmitool {} failed ({}): {}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )))
        }
    }

    pub async fn power_off(&self) -> Result<(), Error> {
        self.run(&["chassis", "power", "off"]).await?;
        tracing::info!(bmc = %self.address, port = self.port, "ipmi power off requested");
        Ok(())
    }

    pub async fn power(&self) -> Result<Power, Error> {
        Ok(parse_status(
            &self.run(&["chassis", "power", "status"]).await?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipmitool_status_lines_are_understood() {
        assert_eq!(parse_status("Chassis Power is off\n"), Power::Off);
        assert_eq!(parse_status("Chassis Power is on\n"), Power::On);
        assert_eq!(parse_status(""), Power::Other);
    }
}
