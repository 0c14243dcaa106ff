//! Smoke tests of `instanceha-bench` that CI can afford: the smallest
//! recovery scenario end to end (the three services as processes, at 20x
//! real time) and a short intake run on SQLite. They check that the runs
//! finish, recover everything and report; they assert no timing.
//!
//! The service binaries must sit next to `instanceha-bench` in the target
//! directory: `cargo test --workspace` builds them (their crates have
//! integration tests); alone, run
//! `cargo build -p instanceha-api -p instanceha-engine -p openstack-sim` first.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn bench() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_instanceha-bench"))
}

fn services_built() {
    let dir = bench().parent().expect("a target directory").to_owned();
    for name in ["openstack-sim", "instanceha-engine", "instanceha-api"] {
        assert!(
            dir.join(name).is_file(),
            "{name} is not built in {}: run `cargo build -p instanceha-api -p instanceha-engine -p openstack-sim` \
             (or `cargo test --workspace`, which builds it)",
            dir.display()
        );
    }
}

fn run(args: &[&str]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    run_in(dir.path(), args)
}

/// Runs the benchmark with its run directory `dir/runs`.
fn run_in(dir: &std::path::Path, args: &[&str]) -> Value {
    services_built();
    let json = dir.join("figures.json");
    let output = Command::new(bench())
        .args(args)
        .arg("--json")
        .arg(&json)
        .arg("--work-dir")
        .arg(dir.join("runs"))
        .output()
        .expect("instanceha-bench runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "instanceha-bench {args:?} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(stdout.contains("Targets of issue 8"), "no table:\n{stdout}");
    serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON file"))
        .expect("valid JSON")
}

#[test]
fn the_smallest_scenario_recovers_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let doc = run_in(
        dir.path(),
        &["recovery", "one-host-10", "--speed", "20", "--keep"],
    );
    kept_every_log(&dir.path().join("runs"));
    let entry = &doc["recovery"][0];
    let measured = &entry["measured"];
    assert_eq!(measured["scenario"]["name"], "one-host-10");
    assert_eq!(measured["notifications"], 1);
    assert_eq!(measured["instances"], 10);
    assert_eq!(measured["vmove_statuses"]["succeeded"], 10);
    assert_eq!(measured["problems"].as_array().unwrap().len(), 0);
    assert!(measured["recovery_wall_secs"].as_f64().unwrap() > 0.0);
    assert!(measured["ratio_to_ideal"].as_f64().is_some());
    assert_eq!(measured["dispatch_latency_ms"]["count"], 1);
    assert_eq!(measured["instance_recovery_secs"]["count"], 10);
    for service in ["api", "engine", "sim"] {
        assert!(
            measured["usage"][service]["peak_rss_kib"].as_u64().unwrap() > 0,
            "{service}: {}",
            measured["usage"]
        );
    }
    assert_eq!(entry["masakari_model"]["recovered"], 10);
    assert!(doc["machine"]["nproc"].as_u64().unwrap() >= 1);
}

#[test]
fn intake_keeps_every_report_exactly_once() {
    let doc = run(&[
        "intake",
        "--database",
        "sqlite",
        "--count",
        "300",
        "--warmup",
        "20",
        "--concurrency",
        "8",
        "--connections",
        "2",
        "--hosts",
        "10",
    ]);
    let intake = &doc["intake"][0];
    assert_eq!(intake["database"], "sqlite");
    assert_eq!(intake["stored"], 320);
    assert_eq!(intake["lost_or_duplicated"], false);
    assert!(intake["notifications_per_sec"].as_f64().unwrap() > 0.0);
    assert!(intake["create_latency_ms"]["p99"].as_f64().is_some());
}

/// `--keep` keeps what it says: each service's output, and the
/// simulator's every call.
fn kept_every_log(runs: &std::path::Path) {
    let run = std::fs::read_dir(runs)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.join("instanceha-engine.log").is_file())
        .unwrap_or_else(|| panic!("no run folder with the engine's log in {}", runs.display()));
    for (log, line) in [
        ("instanceha-engine.log", "recovery run started"),
        ("instanceha-api.log", "notification created"),
        ("openstack-sim.log", "listening on"),
    ] {
        let text = std::fs::read_to_string(run.join(log)).unwrap();
        assert!(text.contains(line), "{log} lacks {line:?}:\n{text}");
    }
    let scenario = std::fs::read_to_string(run.join("scenario.toml")).unwrap();
    assert!(
        !scenario.contains("request_log_capacity = 1000\n"),
        "the kept run's request log is capped at 1,000 calls:\n{scenario}"
    );
    let requests: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("sim-requests.json")).unwrap())
            .unwrap();
    let calls = requests["requests"].as_array().expect("a list of calls");
    assert_eq!(calls[0]["seq"], 1, "the first call is kept");
    assert_eq!(
        Some(calls.len() as u64),
        requests["last_seq"].as_u64(),
        "every call is kept"
    );
}
