//! Masakari's own clients against the REST API: the Python scripts in
//! `tests/masakari/`, and the `openstack` command over TLS, run with the
//! Python named by `INSTANCEHA_TEST_PYTHON` (a virtual environment with
//! python-masakariclient, python-openstackclient and openstacksdk; see
//! REST.md). Each gets a cloud of its own whose API validates their
//! Keystone tokens with the simulator.
//! Without the variable the tests are ignored (build.rs; under CI, with `CI`
//! set, they run and fail instead); with it, a failing script fails the test.

use std::time::Duration;

use instanceha_testkit::pki::Pki;

use super::Rest;
use super::cloud::{Auth, Cloud, two_hosts_and_a_spare};
use crate::auth::token_of;

/// The Python named by `INSTANCEHA_TEST_PYTHON`; `None` (and a notice)
/// when none is, which fails under CI.
fn python(what: &str) -> Option<String> {
    let Ok(python) = std::env::var("INSTANCEHA_TEST_PYTHON") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "INSTANCEHA_TEST_PYTHON is not set: under CI (CI is set) {what} must run, not skip"
        );
        println!("skipping {what}: INSTANCEHA_TEST_PYTHON is not set");
        return None;
    };
    Some(python)
}

/// Runs `script` against a fresh cloud; `None` when no Python is named.
async fn run(script: &str) -> Option<String> {
    let python = python(script)?;
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
#[cfg_attr(no_python_clients, ignore = "set INSTANCEHA_TEST_PYTHON to run")]
async fn openstacksdk_does_not_notice() {
    if let Some(out) = run("openstacksdk_check.py").await {
        assert!(out.contains("openstacksdk instance_ha: all"), "{out}");
        assert!(out.contains("hostmonitor notification recovered"), "{out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(no_python_clients, ignore = "set INSTANCEHA_TEST_PYTHON to run")]
async fn python_masakariclient_does_not_notice() {
    if let Some(out) = run("masakariclient_check.py").await {
        assert!(out.contains("python-masakariclient: all"), "{out}");
    }
}

/// `openstack ARGS...` (python-openstackclient with the
/// python-masakariclient plugin, as an operator runs it) in an empty
/// directory with no `OS_*` settings nor CA bundle of this process:
/// success, standard output and standard error.
async fn openstack(python: &str, args: &[&str]) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(python);
    command
        .args(["-m", "openstackclient.shell"])
        .args(args)
        .current_dir(dir.path())
        .env("HOME", dir.path())
        .kill_on_drop(true);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("OS_")
            || [
                "REQUESTS_CA_BUNDLE",
                "CURL_CA_BUNDLE",
                "SSL_CERT_FILE",
                "SSL_CERT_DIR",
            ]
            .contains(&key.as_str())
        {
            command.env_remove(key);
        }
    }
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("openstack finishes within 2 minutes")
        .unwrap_or_else(|e| panic!("{python} runs: {e}"));
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// `openstack segment list` over https: with the test CA (`--os-cacert`)
/// it lists the segment created before; without it, it fails on the
/// server's certificate. Keystone tokens, as the other clients use them
/// (`--os-token`, `--os-endpoint`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(no_python_clients, ignore = "set INSTANCEHA_TEST_PYTHON to run")]
async fn the_openstack_cli_lists_segments_over_tls() {
    let Some(python) = python("openstack segment list over TLS") else {
        return;
    };
    let pki = Pki::new("openstack-cli");
    let cloud = Cloud::start_with(two_hosts_and_a_spare(), Auth::Keystone, |api| {
        api.tls = pki.server(false);
    })
    .await;
    let token = token_of(&cloud.sim, "admin", "admin").await;
    let rest = Rest::over_tls(cloud.rest, &pki.path("ca.pem")).token(&token);
    let segment = rest.segment("rack-tls").await;
    let endpoint = format!("https://localhost:{}/v1", cloud.rest.port());
    let ca = pki.path("ca.pem").display().to_string();
    let auth = [
        "--os-auth-type",
        "admin_token",
        "--os-token",
        &token,
        "--os-endpoint",
        &endpoint,
    ];
    let list = ["segment", "list", "-f", "json"];

    let (ok, stdout, stderr) =
        openstack(&python, &[&auth[..], &["--os-cacert", &ca], &list].concat()).await;
    assert!(ok, "openstack segment list failed:\n{stdout}\n{stderr}");
    let rows: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{stderr}"));
    let listed: Vec<(&str, &str)> = rows
        .as_array()
        .expect("a list of segments")
        .iter()
        .map(|row| {
            (
                row["name"].as_str().unwrap_or_default(),
                row["uuid"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [("rack-tls", segment["uuid"].as_str().unwrap())],
        "{stdout}"
    );

    // The command's last word is about version discovery; the cause is in
    // its debug log.
    let (ok, stdout, stderr) = openstack(&python, &[&["--debug"], &auth[..], &list].concat()).await;
    assert!(!ok, "listed without trusting the CA: {stdout}");
    assert!(
        stderr
            .lines()
            .any(|l| l.contains(&endpoint) && l.contains("CERTIFICATE_VERIFY_FAILED")),
        "not a certificate error of {endpoint}:\n{stderr}"
    );
    cloud.stop().await;
}
