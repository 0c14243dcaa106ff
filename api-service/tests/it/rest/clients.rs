//! Masakari's own clients against the REST API: the Python scripts in
//! `tests/masakari/`, run with the Python named by `INSTANCEHA_TEST_PYTHON`
//! (a virtual environment with python-masakariclient, python-openstackclient
//! and openstacksdk; see REST.md). Each script gets a cloud of its own
//! whose API validates the scripts' Keystone tokens with the simulator.
//! Without the variable the tests say so and pass (under CI, with `CI`
//! set, they fail instead); with it, a failing script fails the test.

use std::time::Duration;

use super::cloud::{Auth, Cloud, two_hosts_and_a_spare};

/// Runs `script` against a fresh cloud; `None` when no Python is named.
async fn run(script: &str) -> Option<String> {
    let Ok(python) = std::env::var("INSTANCEHA_TEST_PYTHON") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "INSTANCEHA_TEST_PYTHON is not set: under CI (CI is set) {script} must run, not skip"
        );
        println!("skipping {script}: INSTANCEHA_TEST_PYTHON is not set");
        return None;
    };
    let cloud = Cloud::start(two_hosts_and_a_spare(), Auth::Keystone).await;
    let dir = tempfile::tempdir().unwrap();
    let clouds = dir.path().join("clouds.yaml");
    // openstacksdk takes the REST API from the override; Keystone and the
    // rest of the catalog are the simulator's.
    std::fs::write(
        &clouds,
        format!(
            "clouds:\n  ha:\n    auth:\n      auth_url: {}\n      username: admin\n      password: secret\n      project_name: admin\n      user_domain_name: Default\n      project_domain_name: Default\n    region_name: RegionOne\n    identity_api_version: 3\n    instance_ha_endpoint_override: http://{}/v1\n",
            cloud.sim.auth_url(),
            cloud.rest,
        ),
    )
    .unwrap();
    let path = format!("{}/tests/masakari/{script}", env!("CARGO_MANIFEST_DIR"));
    let child = tokio::process::Command::new(&python)
        .arg(&path)
        .env("OS_CLIENT_CONFIG_FILE", &clouds)
        .env("OS_CLOUD", "ha")
        .env("INSTANCEHA_REST_URL", format!("http://{}", cloud.rest))
        .env("SIM_BASE_URL", cloud.sim.base_url())
        .current_dir(dir.path())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(300), child)
        .await
        .unwrap_or_else(|_| panic!("{script} finishes within 5 minutes"))
        .unwrap_or_else(|e| panic!("{python} runs: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "{script} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    cloud.stop().await;
    Some(stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openstacksdk_does_not_notice() {
    if let Some(out) = run("openstacksdk_check.py").await {
        assert!(out.contains("openstacksdk instance_ha: all"), "{out}");
        assert!(out.contains("hostmonitor notification recovered"), "{out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_masakariclient_does_not_notice() {
    if let Some(out) = run("masakariclient_check.py").await {
        assert!(out.contains("python-masakariclient: all"), "{out}");
    }
}
