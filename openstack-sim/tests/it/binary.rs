//! The `openstack-sim` binary serves a scenario file and prints where it listens.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use crate::helpers::client;

#[tokio::test]
async fn the_binary_serves_a_scenario_file_with_overrides() {
    let scenario = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/small.toml");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_openstack-sim"))
        .args([
            "--scenario",
            scenario,
            "--listen",
            "127.0.0.1:0",
            "--speed",
            "50",
            "--seed",
            "9",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    while let Ok(Ok(Some(line))) =
        tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await
    {
        let done = line.contains("app cred:");
        printed.push(line);
        if done {
            break;
        }
    }
    let base = printed[0].rsplit(' ').next().unwrap().to_string();
    assert!(base.starts_with("http://127.0.0.1:"), "{printed:?}");
    assert!(
        printed.iter().any(|l| l.contains("admin / secret")),
        "{printed:?}"
    );
    assert!(
        printed.iter().any(|l| l.contains("speed 50x, seed 9")),
        "{printed:?}"
    );
    let state: serde_json::Value = client()
        .get(format!("{base}/sim/state"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(state["speed"], 50.0);
    assert_eq!(state["instances"].as_array().unwrap().len(), 7);
    child.start_kill().unwrap();
    let _ = child.wait().await;
}

#[test]
fn every_shipped_scenario_is_valid() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios");
    let mut count = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        openstack_sim::Scenario::from_path(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        count += 1;
    }
    assert!(count >= 2);
    let large =
        openstack_sim::Scenario::from_path(&std::path::Path::new(dir).join("large.toml")).unwrap();
    let mut world = openstack_sim::world::World::new(&large).unwrap();
    let snapshot = world.snapshot();
    assert_eq!(snapshot.instances.len(), 5000);
    assert_eq!(snapshot.hosts.len(), 104);
    assert_eq!(snapshot.volumes.len(), 900);
}

/// Its log, on a pipe, holds no ANSI colour codes.
#[tokio::test]
async fn a_log_on_a_pipe_has_no_colour_codes() {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_openstack-sim"))
        .args(["--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "debug")
        .env_remove("NO_COLOR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the binary starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut base = None;
    while let Ok(Ok(Some(line))) =
        tokio::time::timeout(Duration::from_secs(20), lines.next_line()).await
    {
        if base.is_none() {
            base = line.rsplit(' ').next().map(str::to_owned);
        }
        if line.contains("app cred:") {
            break;
        }
    }
    let base = base.expect("it printed where it listens");
    // A request, so that it logs.
    let _ = client().get(format!("{base}/sim/state")).send().await;
    child.start_kill().unwrap();
    let output = child.wait_with_output().await.unwrap();
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(!log.trim().is_empty(), "no log line");
    assert!(!log.contains('\x1b'), "colour codes: {log:?}");
}
