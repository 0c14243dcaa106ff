//! `instanceha notification watch`: to the end of a notification that is
//! already terminal, along a notification whose status changes while it is
//! watched (driven through the API's store and change feed, as the engine
//! link will drive it), and through a scripted recovery with instances,
//! progress events and a fresh snapshot; in every output format, with the
//! exit codes 0 (finished or ignored), 10 (failed) and 7 (stream cut).

use std::io::{BufRead as _, BufReader};
use std::process::Stdio;

use instanceha_api::changes::Change;
use instanceha_api::domain::NotificationId;
use instanceha_api::status::{NotificationEvent, NotificationStatus};
use serde_json::Value;

use crate::fake_api::{CUT_SHORT, FAILING_RECOVERY, FakeApi};
use crate::helpers::{Home, TestApi, run, spawn_api};

/// A disabled segment's report is stored `ignored` at once.
async fn ignored_notification(app: &TestApi) -> String {
    let segment = app.segment("rack-off", &["--disabled"]).await;
    app.host(&segment, "compute-1", &[]).await;
    let created = app.host_down("compute-1").await;
    assert_eq!(created["status"], "ignored", "{created}");
    created["id"].as_str().unwrap().to_owned()
}

fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_notification_prints_its_snapshot_and_exits_0() {
    let app = spawn_api().await;
    let id = ignored_notification(&app).await;

    let table = app.run(&["notification", "watch", &id]).await;
    table
        .expect_exit(0)
        .expect_stdout(&format!("notification {id} ignored"))
        .expect_stdout("is disabled; no recovery")
        .expect_stdout("destination")
        .expect_stdout("duration");

    let json = app
        .run(&["--format", "json", "notification", "watch", &id])
        .await;
    json.expect_exit(0);
    let lines = json_lines(&json.stdout);
    assert_eq!(lines.len(), 2, "{}", json.stdout);
    assert_eq!(lines[0]["kind"], "snapshot");
    assert_eq!(lines[0]["notification"]["id"], id.as_str());
    assert_eq!(lines[0]["notification"]["status"], "ignored");
    assert_eq!(lines[0]["vmoves"], Value::Array(vec![]));
    assert_eq!(lines[1]["kind"], "summary");
    assert_eq!(lines[1]["status"], "ignored");
    assert_eq!(lines[1]["notification_id"], id.as_str());
    assert_eq!(lines[1]["instances"], Value::Array(vec![]));

    let yaml = app
        .run(&["--format", "yaml", "notification", "watch", &id])
        .await;
    yaml.expect_exit(0);
    let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&yaml.stdout)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("a YAML document"))
        .collect();
    assert_eq!(docs.len(), 2, "{}", yaml.stdout);
    assert_eq!(docs[1]["status"], "ignored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_an_unknown_notification_is_not_found() {
    let app = spawn_api().await;
    app.run(&[
        "notification",
        "watch",
        "5a0c1f52-1f7e-4b8e-9a53-33c1f0a0d111",
    ])
    .await
    .expect_exit(3)
    .expect_stderr("not found");
    app.run(&["notification", "watch", "nope"])
        .await
        .expect_exit(4);
}

/// Starts a watch with piped stdout, waits for its first line (so the
/// watcher is subscribed), applies `events` through the store and the
/// change feed, and returns the exit code and every stdout line.
async fn watch_while(
    app: &TestApi,
    id: &str,
    format: &str,
    events: &[(NotificationStatus, NotificationEvent, Option<&str>)],
) -> (i32, Vec<String>, String) {
    let mut command = app.command(&["--format", format, "notification", "watch", id]);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().expect("the binary starts");
    let stdout = child.stdout.take().unwrap();
    let (first_line, mut reader) = tokio::task::spawn_blocking(move || {
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        reader.read_line(&mut line).expect("the first line");
        (line, reader)
    })
    .await
    .unwrap();
    assert!(!first_line.is_empty(), "the watch printed nothing");

    let notification: NotificationId = id.parse().unwrap();
    for (from, event, message) in events {
        let changed = app
            .api
            .store()
            .transition_notification(notification, *from, *event, message.map(str::to_owned))
            .await
            .expect("a legal transition");
        app.api.changes().publish(Change::Notification(changed));
    }

    let (code, rest, stderr) = tokio::task::spawn_blocking(move || {
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut reader, &mut rest).unwrap();
        let output = child.wait_with_output().unwrap();
        (
            output.status.code().unwrap_or(-1),
            rest,
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    })
    .await
    .unwrap();
    let lines = std::iter::once(first_line.trim_end().to_owned())
        .chain(rest.lines().map(str::to_owned))
        .collect();
    (code, lines, stderr)
}

async fn new_notification(app: &TestApi) -> String {
    let segment = app.segment("rack-1", &[]).await;
    app.host(&segment, "compute-1", &[]).await;
    let created = app.host_down("compute-1").await;
    assert_eq!(created["status"], "new");
    created["id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_that_fails_exits_10_with_each_change_on_its_own_line() {
    let app = spawn_api().await;
    let id = new_notification(&app).await;
    let (code, lines, stderr) = watch_while(
        &app,
        &id,
        "json",
        &[
            (NotificationStatus::New, NotificationEvent::Start, None),
            (
                NotificationStatus::Running,
                NotificationEvent::Fail,
                Some("instance vm-1: nova returned 503"),
            ),
        ],
    )
    .await;
    assert_eq!(code, 10, "stderr: {stderr}\nstdout: {lines:?}");
    let lines: Vec<Value> = json_lines(&lines.join("\n"));
    let kinds: Vec<&str> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["snapshot", "notification", "notification", "summary"]
    );
    assert_eq!(lines[0]["notification"]["status"], "new");
    assert_eq!(lines[1]["notification"]["status"], "running");
    assert_eq!(lines[2]["notification"]["status"], "failed");
    assert_eq!(lines[3]["status"], "failed");
    assert_eq!(lines[3]["message"], "instance vm-1: nova returned 503");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_that_finishes_exits_0_with_log_lines_off_a_terminal() {
    let app = spawn_api().await;
    let id = new_notification(&app).await;
    let (code, lines, stderr) = watch_while(
        &app,
        &id,
        "table",
        &[
            (NotificationStatus::New, NotificationEvent::Start, None),
            (NotificationStatus::Running, NotificationEvent::Finish, None),
        ],
    )
    .await;
    assert_eq!(code, 0, "stderr: {stderr}\nstdout: {lines:?}");
    let text = lines.join("\n");
    assert!(
        lines[0].starts_with(&format!("notification {id} new")),
        "{text}"
    );
    assert!(
        text.contains(&format!("notification {id} running")),
        "{text}"
    );
    assert!(
        lines
            .last()
            .is_some_and(|l| l.starts_with(&format!("notification {id} finished"))),
        "{text}"
    );
    assert!(text.contains("destination"), "the summary table: {text}");
    assert!(
        !text.contains('\u{1b}'),
        "no terminal escapes off a tty: {text:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovery_with_instances_shows_each_one_and_survives_a_resnapshot() {
    let fake = FakeApi::start().await;
    let home = Home::new();

    let mut json = home.instanceha([
        "--endpoint",
        &fake.endpoint,
        "-f",
        "json",
        "notification",
        "watch",
        FAILING_RECOVERY,
    ]);
    json.env("COLUMNS", "200");
    let json = run(json).await;
    json.expect_exit(10);
    let lines = json_lines(&json.stdout);
    let kinds: Vec<&str> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    // The stale vmove update is not printed.
    assert_eq!(
        kinds,
        [
            "snapshot",
            "progress_event",
            "vmove",
            "progress_event",
            "snapshot",
            "vmove",
            "vmove",
            "notification",
            "summary"
        ],
        "{}",
        json.stdout
    );
    assert_eq!(lines[2]["vmove"]["step"], "evacuate");
    assert_eq!(lines[3]["progress_event"]["instance_id"], "instance-vm-a");
    let summary = &lines[8];
    assert_eq!(summary["status"], "failed");
    assert_eq!(summary["instances"][0]["instance_name"], "vm-a");
    assert_eq!(summary["instances"][0]["status"], "succeeded");
    assert_eq!(summary["instances"][0]["destination"], "compute-2");
    assert_eq!(summary["instances"][0]["duration"], "1m 05s");
    assert_eq!(summary["instances"][0]["duration_seconds"], 65.0);
    assert_eq!(summary["instances"][1]["status"], "failed");
    assert_eq!(summary["instances"][1]["duration"], "30.0s");
    assert_eq!(summary["instances"][1]["message"], "nova returned 503");

    let log = run(home.instanceha([
        "--endpoint",
        &fake.endpoint,
        "notification",
        "watch",
        FAILING_RECOVERY,
    ]))
    .await;
    log.expect_exit(10)
        .expect_stdout("instance vm-a ongoing: step evacuate, compute-1 -> -")
        .expect_stdout("progress #1 2025-06-15T15:06:41Z disable_compute_service succeeded")
        .expect_stdout("resynchronised")
        .expect_stdout("instance vm-b failed: step evacuate, compute-1 -> - — nova returned 503")
        .expect_stdout("1m 05s")
        .expect_stdout(&format!(
            "notification {FAILING_RECOVERY} failed: 1 of 2 instances could not be recovered"
        ));
    assert_eq!(
        log.stdout.matches("instance vm-b pending").count(),
        1,
        "only the first snapshot has vm-b pending; the stale update is not shown: {}",
        log.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_ends_early_is_unavailable() {
    let fake = FakeApi::start().await;
    let home = Home::new();
    let cut = run(home.instanceha([
        "--endpoint",
        &fake.endpoint,
        "-f",
        "json",
        "notification",
        "watch",
        CUT_SHORT,
    ]))
    .await;
    cut.expect_exit(7)
        .expect_stderr("ended before it reached a final status")
        .expect_stderr(&format!("instanceha notification watch {CUT_SHORT}"));
    let lines = json_lines(&cut.stdout);
    assert_eq!(
        lines.first().map(|l| l["kind"].clone()),
        Some("snapshot".into())
    );
    assert_eq!(
        lines.last().map(|l| l["status"].clone()),
        Some("running".into())
    );
}
