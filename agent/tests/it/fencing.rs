//! Fencing against real third-party BMC emulators: Redfish against
//! sushy-tools' emulator (fake driver, basic authentication) and IPMI
//! through Debian's `ipmitool` against pyghmi's fake BMC.

use std::time::Duration;

use instanceha_agent::config::{CredentialSource, FenceDevice, FencingSettings};
use instanceha_agent::fence::{Device, Power};

use crate::support::{self, FakeBmc, Sushy, Tools};

fn settings() -> FencingSettings {
    FencingSettings {
        timeout: Duration::from_secs(30),
        poll_interval: Duration::from_millis(250),
        ..FencingSettings::default()
    }
}

fn redfish(url: &str, password: CredentialSource) -> FenceDevice {
    FenceDevice::Redfish {
        url: url.to_owned(),
        system: None,
        username: Some(support::REDFISH_USER.to_owned()),
        password,
        ca_file: None,
        insecure: false,
    }
}

fn ipmi(port: u16, password: CredentialSource) -> FenceDevice {
    FenceDevice::Ipmi {
        address: "127.0.0.1".to_owned(),
        port,
        username: support::IPMI_USER.to_owned(),
        password,
        interface: "lanplus".to_owned(),
        ipmitool: "ipmitool".to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(no_bmc_emulators, ignore = "set INSTANCEHA_TEST_BMC_PYTHON to run")]
async fn redfish_force_off_is_confirmed_by_reading_the_power_state() {
    let Some(tools) = Tools::find() else { return };
    let sushy = Sushy::start(&tools, "127.0.0.1", &[("compute-01", "On")]);
    let dir = tempfile::tempdir().unwrap();
    let good = CredentialSource {
        file: Some(support::password_file(
            dir.path(),
            "bmc",
            support::REDFISH_PASSWORD,
        )),
        env: None,
    };
    let device = Device::new("compute-01", &redfish(&sushy.url, good)).unwrap();
    assert_eq!(device.power().await.unwrap(), Power::On);
    let took = device.fence(&settings()).await.expect("fenced");
    assert_eq!(
        sushy.power("00000000-0000-4000-8000-000000000000").await,
        "Off"
    );
    assert!(took < Duration::from_secs(30));
    // Fencing a host already off is confirmed at once.
    assert!(device.fence(&settings()).await.unwrap() < Duration::from_secs(5));

    let wrong = CredentialSource {
        file: Some(support::password_file(
            dir.path(),
            "wrong",
            "not-the-password",
        )),
        env: None,
    };
    let device = Device::new("compute-01", &redfish(&sushy.url, wrong)).unwrap();
    let quick = FencingSettings {
        timeout: Duration::from_secs(2),
        ..settings()
    };
    let err = device.fence(&quick).await.unwrap_err().to_string();
    assert!(err.contains("not confirmed off"), "{err}");
    assert!(
        !err.contains("not-the-password"),
        "the password must never show: {err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(no_bmc_emulators, ignore = "set INSTANCEHA_TEST_BMC_PYTHON to run")]
async fn ipmi_power_off_is_confirmed_through_ipmitool() {
    let Some(tools) = Tools::find() else { return };
    let bmc = FakeBmc::start(&tools).await;
    assert!(bmc.power().contains("on"), "{}", bmc.power());
    let dir = tempfile::tempdir().unwrap();
    let good = CredentialSource {
        file: Some(support::password_file(
            dir.path(),
            "bmc",
            support::IPMI_PASSWORD,
        )),
        env: None,
    };
    let device = Device::new("compute-02", &ipmi(bmc.port, good)).unwrap();
    device.fence(&settings()).await.expect("fenced");
    assert!(bmc.power().contains("off"), "{}", bmc.power());

    let wrong = CredentialSource {
        file: Some(support::password_file(
            dir.path(),
            "wrong",
            "not-the-password",
        )),
        env: None,
    };
    let device = Device::new("compute-02", &ipmi(bmc.port, wrong)).unwrap();
    let quick = FencingSettings {
        timeout: Duration::from_secs(1),
        ..settings()
    };
    let err = device.fence(&quick).await.unwrap_err().to_string();
    assert!(!err.contains("not-the-password"), "{err}");
}
