//! Conformance with the official openstacksdk: runs tests/conformance/openstacksdk_check.py
//! with the Python named by INSTANCEHA_TEST_PYTHON against a simulator on port 0
//! (ignored when it is unset at build time, build.rs; under CI, with `CI` set, it runs and fails).

use std::time::Duration;

use openstack_sim::Scenario;

use crate::helpers::start;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(no_python_clients, ignore = "set INSTANCEHA_TEST_PYTHON to run")]
async fn openstacksdk_does_not_notice() {
    let Ok(python) = std::env::var("INSTANCEHA_TEST_PYTHON") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "INSTANCEHA_TEST_PYTHON is not set: under CI (CI is set) the conformance test must run, not skip"
        );
        println!("skipping openstacksdk conformance: INSTANCEHA_TEST_PYTHON is not set");
        return;
    };
    let mut scenario = Scenario::small();
    scenario.settings.speed = 200.0;
    let h = start(scenario).await;
    let dir = tempfile::tempdir().unwrap();
    let clouds = dir.path().join("clouds.yaml");
    std::fs::write(
        &clouds,
        format!(
            "clouds:\n  sim:\n    auth:\n      auth_url: {}\n      username: admin\n      password: secret\n      project_name: admin\n      user_domain_name: Default\n      project_domain_name: Default\n    region_name: RegionOne\n    interface: internal\n    identity_api_version: 3\n",
            h.sim.auth_url()
        ),
    )
    .unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/conformance/openstacksdk_check.py"
    );
    let child = tokio::process::Command::new(&python)
        .arg(script)
        .env("OS_CLIENT_CONFIG_FILE", &clouds)
        .env("SIM_BASE_URL", h.sim.base_url())
        .current_dir(dir.path())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(300), child)
        .await
        .expect("the conformance script finishes within 5 minutes")
        .expect("the Python interpreter runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "openstacksdk conformance failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("openstacksdk conformance:"), "{stdout}");
    let internal = h
        .sim
        .request_log(None)
        .iter()
        .filter(|r| r.interface == "internal")
        .count();
    assert!(
        internal > 10,
        "clouds.yaml asked for the internal interface"
    );
}
