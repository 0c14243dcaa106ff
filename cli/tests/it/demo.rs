//! `instanceha demo`: the whole system in one process recovers a failed
//! host, and with an injected fault ends `failed` naming the instance.

use serde_json::Value;

use crate::helpers::{Home, run};

/// The JSON lines of a `--format json` watch, and the summary (last).
fn summary(stdout: &str) -> Value {
    let lines: Vec<Value> = stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let last = lines.last().expect("some output").clone();
    assert_eq!(last["kind"], "summary", "{last}");
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_recovers_every_ha_instance() {
    let home = Home::new();
    let result = run(home.instanceha([
        "--format",
        "json",
        "demo",
        "--speed",
        "25",
        "--instances",
        "8",
    ]))
    .await;
    assert_eq!(
        result.code, 0,
        "stdout:\n{}\nstderr:\n{}",
        result.stdout, result.stderr
    );
    let summary = summary(&result.stdout);
    assert_eq!(summary["status"], "finished", "{summary}");
    let instances = summary["instances"].as_array().expect("instances");
    assert_eq!(instances.len(), 8, "the unprotected instance is left alone");
    for instance in instances {
        assert_eq!(instance["status"], "succeeded", "{instance}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_nova_503_ends_failed_and_names_the_instance() {
    let home = Home::new();
    let result = run(home.instanceha([
        "--format", "json", "demo", "--speed", "25", "--inject", "nova-503",
    ]))
    .await;
    assert_eq!(
        result.code, 10,
        "stdout:\n{}\nstderr:\n{}",
        result.stdout, result.stderr
    );
    let summary = summary(&result.stdout);
    assert_eq!(summary["status"], "failed", "{summary}");
    let message = summary["message"].as_str().unwrap();
    assert!(
        message.contains("web-1") && message.contains("503"),
        "{message}"
    );
    let web1 = summary["instances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["instance_name"] == "web-1")
        .cloned()
        .unwrap_or_else(|| panic!("web-1 in {summary}"));
    assert_eq!(web1["status"], "failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_agents_the_dead_host_is_noticed_fenced_reported_and_recovered() {
    let home = Home::new();
    let result =
        run(home.instanceha(["--format", "json", "demo", "--speed", "25", "--agents"])).await;
    assert_eq!(
        result.code, 0,
        "stdout:\n{}\nstderr:\n{}",
        result.stdout, result.stderr
    );
    assert!(
        result.stderr.contains("host_status NORMAL"),
        "reported as fenced:\n{}",
        result.stderr
    );
    assert_eq!(summary(&result.stdout)["status"], "finished");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_instances_fit_in_the_demo_cloud() {
    let home = Home::new();
    let result = run(home.instanceha([
        "--format",
        "json",
        "demo",
        "--speed",
        "100",
        "--instances",
        "200",
    ]))
    .await;
    assert_eq!(
        result.code, 0,
        "stdout:\n{}\nstderr:\n{}",
        result.stdout, result.stderr
    );
    let summary = summary(&result.stdout);
    assert_eq!(summary["status"], "finished", "{summary}");
    let instances = summary["instances"].as_array().expect("instances");
    assert_eq!(instances.len(), 200);
    for instance in instances {
        assert_eq!(instance["status"], "succeeded", "{instance}");
    }
}
