//! Logging in as the openstack CLI does, run as a person runs it: a
//! `clouds.yaml` (and its `secure.yaml`) in the working directory and
//! `OS_CLOUD`, or the `OS_*` variables; the API validates the Keystone
//! token, and its address comes from the catalog (`instance-ha-grpc`).

use std::time::Duration;

use instanceha_api::auth::AuthMode;
use openstack_client::credentials::{AuthSettings, Credentials};
use openstack_client::keystone::Keystone;
use openstack_client::retry::RetryPolicy;
use openstack_sim::scenario::HostSpec;
use openstack_sim::{Scenario, Sim};

use crate::helpers::{Home, TestApi, run, spawn_api_with};

const PASSWORD: &str = "secret";

fn scenario(grpc_url: Option<&str>) -> Scenario {
    let mut scenario = Scenario::builder()
        .seed(1)
        .host(HostSpec::new("compute-01"))
        .build()
        .unwrap();
    scenario.settings.instance_ha_grpc_url = grpc_url.map(str::to_owned);
    scenario
}

/// The simulator's Keystone, and the API validating its tokens, registered
/// in its catalog.
async fn keystone_and_api() -> (Sim, TestApi) {
    let sim = Sim::start(scenario(None), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let keystone = admin_settings(&sim);
    let api = spawn_api_with(|settings| {
        settings.auth.mode = AuthMode::Keystone;
        settings.auth.keystone = keystone;
    })
    .await;
    sim.load_scenario(scenario(Some(&api.endpoint))).unwrap();
    (sim, api)
}

/// The simulator's admin (the API's own identity).
fn admin_settings(sim: &Sim) -> AuthSettings {
    AuthSettings {
        auth_url: Some(sim.auth_url()),
        username: Some("admin".into()),
        password: Some(instanceha_runtime::secret::Secret::new(PASSWORD)),
        project_name: Some("admin".into()),
        user_domain_name: Some("Default".into()),
        project_domain_name: Some("Default".into()),
        ..AuthSettings::default()
    }
}

fn admin(sim: &Sim) -> Credentials {
    admin_settings(sim).credentials().unwrap()
}

/// A `clouds.yaml` with cloud `sim` (no password) and a `secure.yaml`
/// holding its password, in `dir`.
fn cloud_files(dir: &std::path::Path, sim: &Sim, password: &str) {
    std::fs::write(
        dir.join("clouds.yaml"),
        format!(
            "clouds:\n  sim:\n    auth_type: password\n    auth:\n      auth_url: {}\n      \
             username: admin\n      project_name: admin\n      user_domain_name: Default\n      \
             project_domain_name: Default\n    region_name: RegionOne\n    interface: public\n",
            sim.auth_url()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("secure.yaml"),
        format!("clouds:\n  sim:\n    auth:\n      password: {password}\n"),
    )
    .unwrap();
}

#[tokio::test]
async fn os_cloud_logs_in_and_finds_the_api_in_the_catalog() {
    let (sim, api) = keystone_and_api().await;
    let home = Home::new();
    let work = tempfile::tempdir().unwrap();
    cloud_files(work.path(), &sim, PASSWORD);
    let cli = |args: &[&str]| {
        let mut command = home.instanceha(args);
        command.current_dir(work.path()).env("OS_CLOUD", "sim");
        command
    };

    // Without a login the API refuses: the login below is what lets in.
    let refused = run(home.instanceha(["--endpoint", &api.endpoint, "segment", "list"])).await;
    refused.expect_exit(8);

    run(cli(&[
        "segment",
        "create",
        "rack-1",
        "--recovery-method",
        "auto",
    ]))
    .await
    .expect_exit(0);
    let list = run(cli(&["--format", "json", "segment", "list"])).await;
    list.expect_exit(0);
    assert_eq!(list.json()[0]["name"], "rack-1", "{}", list.stdout);
    // Nothing secret was left behind.
    let mut files = Vec::new();
    for entry in walk(home.dir.path()) {
        files.push(entry.display().to_string());
    }
    assert!(files.is_empty(), "{files:?}");

    // A wrong password (OS_PASSWORD wins over secure.yaml, as with the
    // openstack CLI): Keystone's refusal, named, without the password.
    let mut wrong = cli(&["segment", "list"]);
    wrong.env("OS_PASSWORD", "not-the-s3cret");
    let wrong = run(wrong).await;
    wrong
        .expect_exit(8)
        .expect_stderr("login as user \"admin\" failed: 401")
        .expect_stderr("check the cloud's credentials");
    assert!(!wrong.stderr.contains("not-the-s3cret"), "{}", wrong.stderr);

    // An unknown cloud, and an auth_type the CLI does not speak.
    let mut unknown = cli(&["segment", "list"]);
    unknown.env("OS_CLOUD", "nope");
    run(unknown)
        .await
        .expect_exit(2)
        .expect_stderr("cloud \"nope\" is not in clouds.yaml");
    let mut oidc = cli(&["segment", "list"]);
    oidc.env("OS_AUTH_TYPE", "v3oidcpassword");
    run(oidc)
        .await
        .expect_exit(2)
        .expect_stderr("auth_type \"v3oidcpassword\" is not supported");
}

#[tokio::test]
async fn os_variables_log_in_and_a_missing_catalog_entry_is_explained() {
    let (sim, api) = keystone_and_api().await;
    let home = Home::new();
    let with_os = |args: &[&str]| {
        let mut command = home.instanceha(args);
        command
            .env("OS_AUTH_URL", sim.auth_url())
            .env("OS_USERNAME", "admin")
            .env("OS_PASSWORD", PASSWORD)
            .env("OS_PROJECT_NAME", "admin")
            .env("OS_USER_DOMAIN_NAME", "Default")
            .env("OS_PROJECT_DOMAIN_NAME", "Default");
        command
    };
    run(with_os(&["segment", "list"])).await.expect_exit(0);
    // --endpoint wins over the catalog.
    run(with_os(&["--endpoint", &api.endpoint, "segment", "list"]))
        .await
        .expect_exit(0);
    // Another interface than the catalog has: named, with what to do.
    run(with_os(&["--os-interface", "admin", "segment", "list"]))
        .await
        .expect_exit(2)
        .expect_stderr("no instance-ha-grpc endpoint in the catalog for interfaces [\"admin\"]")
        .expect_stderr("or give --endpoint");
    // A token of the same user, exchanged (auth type token): no password.
    let keystone = Keystone::standalone(
        admin(&sim),
        RetryPolicy::default(),
        Duration::from_secs(5),
        &Default::default(),
    )
    .unwrap();
    let token = keystone.token().await.unwrap().value.expose().to_owned();
    let mut by_token = home.instanceha(["segment", "list"]);
    by_token
        .env("OS_AUTH_URL", sim.auth_url())
        .env("OS_AUTH_TYPE", "v3token")
        .env("OS_TOKEN", &token)
        .env("OS_PROJECT_NAME", "admin")
        .env("OS_PROJECT_DOMAIN_NAME", "Default");
    run(by_token).await.expect_exit(0);

    sim.load_scenario(scenario(None)).unwrap();
    run(with_os(&["segment", "list"]))
        .await
        .expect_exit(2)
        .expect_stderr("openstack endpoint create instance-ha-grpc");
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}
