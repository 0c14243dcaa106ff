//! `instanceha notification ...` and `instanceha vmove ...` against a real
//! API: reports, their validation, idempotency, listing with filters, and
//! showing with progress events.

use serde_json::Value;

use crate::helpers::{minutes_ago, spawn_api};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_list_show() {
    let app = spawn_api().await;
    let segment = app.segment("rack-1", &[]).await;
    let host = app.host(&segment, "compute-1", &[]).await;

    let generated = minutes_ago(5);
    let created = app
        .json(&[
            "notification",
            "create",
            "--type",
            "COMPUTE_HOST",
            "--hostname",
            "compute-1",
            "--generated-time",
            &generated,
            "--payload",
            "event=STOPPED",
            "--payload",
            "host_status=NORMAL",
            "cluster_status=OFFLINE",
        ])
        .await;
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["type"], "COMPUTE_HOST");
    assert_eq!(created["hostname"], "compute-1");
    assert_eq!(created["status"], "new");
    assert_eq!(created["generated_time"], generated.as_str());
    assert_eq!(created["source_host_id"], host.as_str());
    assert_eq!(created["segment_id"], segment.as_str());
    assert_eq!(created["payload"]["event"], "STOPPED");
    assert_eq!(created["payload"]["cluster_status"], "OFFLINE");

    let shown = app.json(&["notification", "show", &id]).await;
    assert_eq!(shown["id"], id.as_str());
    assert_eq!(shown["progress_events"], Value::Array(vec![]));

    app.run(&["notification", "show", &id])
        .await
        .expect_exit(0)
        .expect_stdout("payload")
        .expect_stdout("event=STOPPED")
        .expect_stdout("progress events (0)");

    app.run(&["notification", "list"])
        .await
        .expect_exit(0)
        .expect_stdout(&id)
        .expect_stdout("COMPUTE_HOST")
        .expect_stdout("generated_time")
        .expect_stdout(&generated);

    // Masakari's client takes the payload as JSON: so does this one.
    let process = app
        .json(&[
            "notification",
            "create",
            "--type",
            "process",
            "--hostname",
            "compute-1",
            "--payload",
            r#"{"process_name": "nova-compute", "event": "STOPPED"}"#,
        ])
        .await;
    assert_eq!(process["type"], "PROCESS");
    assert_eq!(process["payload"]["process_name"], "nova-compute");

    let count = |list: Value| list.as_array().map(Vec::len).unwrap();
    assert_eq!(count(app.json(&["notification", "list"]).await), 2);
    assert_eq!(
        count(
            app.json(&["notification", "list", "--type", "PROCESS"])
                .await
        ),
        1
    );
    assert_eq!(
        count(app.json(&["notification", "list", "--status", "new"]).await),
        2
    );
    assert_eq!(
        count(
            app.json(&["notification", "list", "--status", "finished"])
                .await
        ),
        0
    );
    assert_eq!(
        count(
            app.json(&["notification", "list", "--hostname", "compute-1"])
                .await
        ),
        2
    );
    assert_eq!(
        count(
            app.json(&["notification", "list", "--segment", "rack-1"])
                .await
        ),
        2
    );
    assert_eq!(
        count(
            app.json(&["notification", "list", "--host", "compute-1"])
                .await
        ),
        2
    );
    let since = app
        .json(&["notification", "list", "--since", "2030-01-01T00:00:00Z"])
        .await;
    assert_eq!(count(since), 0);

    // A new notification has no vmoves yet.
    assert_eq!(
        app.json(&["vmove", "list", &id]).await,
        Value::Array(vec![])
    );
    app.run(&["vmove", "show", &id, "00000000-0000-4000-8000-000000000000"])
        .await
        .expect_exit(3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_returns_the_first_notification() {
    let app = spawn_api().await;
    let segment = app.segment("rack-1", &[]).await;
    app.host(&segment, "compute-1", &[]).await;
    let generated = minutes_ago(5);
    let create = [
        "notification",
        "create",
        "--type",
        "COMPUTE_HOST",
        "--hostname",
        "compute-1",
        "--generated-time",
        &generated,
        "--payload",
        "event=STOPPED",
        "--idempotency-key",
        "monitor-42",
    ];
    let first = app.json(&create).await;
    let again = app.json(&create).await;
    assert_eq!(first["id"], again["id"]);
    assert_eq!(
        app.json(&["notification", "list"])
            .await
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_have_their_exit_codes() {
    let app = spawn_api().await;
    let segment = app.segment("rack-1", &[]).await;
    app.host(&segment, "compute-1", &[]).await;
    app.host(&segment, "compute-2", &["--on-maintenance"]).await;

    // 4: the payload is checked per type, and the field is named.
    app.run(&[
        "notification",
        "create",
        "--type",
        "COMPUTE_HOST",
        "--hostname",
        "compute-1",
        "--payload",
        "event=EXPLODED",
    ])
    .await
    .expect_exit(4)
    .expect_stderr("payload");
    // 4: an unknown host.
    app.run(&[
        "notification",
        "create",
        "--type",
        "COMPUTE_HOST",
        "--hostname",
        "compute-9",
        "--payload",
        "event=STOPPED",
    ])
    .await
    .expect_exit(4)
    .expect_stderr("hostname");
    // 6: a host on maintenance refuses reports.
    app.run(&[
        "notification",
        "create",
        "--type",
        "COMPUTE_HOST",
        "--hostname",
        "compute-2",
        "--payload",
        "event=STOPPED",
    ])
    .await
    .expect_exit(6)
    .expect_stderr("maintenance");

    // 5: the same report twice is a duplicate.
    app.host_down("compute-1").await;
    app.run(&[
        "notification",
        "create",
        "--type",
        "COMPUTE_HOST",
        "--hostname",
        "compute-1",
        "--payload",
        "event=STOPPED",
        "host_status=NORMAL",
        "cluster_status=OFFLINE",
    ])
    .await
    .expect_exit(5)
    .expect_stderr("duplicate");

    // 6: the segment has an unfinished (new) notification, so it and its
    // hosts cannot change.
    app.run(&["segment", "delete", "rack-1"])
        .await
        .expect_exit(6)
        .expect_stderr("unfinished");
    app.run(&["host", "delete", "compute-1"])
        .await
        .expect_exit(6)
        .expect_stderr("refused in the current state");
    app.run(&["segment", "show", "rack-1"]).await.expect_exit(0);

    // 2: a payload key given twice is a usage error, found before any call.
    app.run(&[
        "notification",
        "create",
        "--type",
        "VM",
        "--hostname",
        "compute-1",
        "--payload",
        "event=A",
        "event=B",
    ])
    .await
    .expect_exit(2)
    .expect_stderr("given twice");

    // 3: unknown notification.
    app.run(&[
        "notification",
        "show",
        "00000000-0000-4000-8000-000000000000",
    ])
    .await
    .expect_exit(3)
    .expect_stderr("instanceha notification list");
    // 4: not a UUID.
    app.run(&["notification", "show", "nope"])
        .await
        .expect_exit(4)
        .expect_stderr("id");
}
