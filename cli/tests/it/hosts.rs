//! `instanceha host ...` against a real API: the life cycle, segment and
//! host names, the `--segment` scope and filters.

use serde_json::Value;

use crate::helpers::spawn_api;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_list_show_update_delete() {
    let app = spawn_api().await;
    let segment = app.segment("rack-1", &[]).await;

    // The segment may be named.
    let created = app
        .json(&[
            "host",
            "create",
            "compute-1",
            "--segment",
            "rack-1",
            "--type",
            "COMPUTE",
            "--control-attributes",
            "SSH",
        ])
        .await;
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["name"], "compute-1");
    assert_eq!(created["segment_id"], segment.as_str());
    assert_eq!(created["type"], "COMPUTE");
    assert_eq!(created["control_attributes"], "SSH");
    assert_eq!(created["reserved"], false);
    assert_eq!(created["on_maintenance"], false);

    let spare = app.host(&segment, "compute-spare", &["--reserved"]).await;

    app.run(&["host", "list"])
        .await
        .expect_exit(0)
        .expect_stdout("compute-1")
        .expect_stdout("compute-spare")
        .expect_stdout("on_maintenance");

    let reserved = app.json(&["host", "list", "--reserved", "true"]).await;
    assert_eq!(reserved.as_array().map(Vec::len), Some(1));
    assert_eq!(reserved[0]["id"], spare.as_str());

    let by_name = app.json(&["host", "show", "compute-1"]).await;
    assert_eq!(by_name, created);
    let scoped = app
        .json(&["host", "show", "compute-1", "--segment", "rack-1"])
        .await;
    assert_eq!(scoped["id"], id.as_str());

    let updated = app
        .json(&[
            "host",
            "update",
            "compute-1",
            "--on-maintenance",
            "true",
            "--reserved",
            "true",
            "--name",
            "compute-01",
        ])
        .await;
    assert_eq!(updated["id"], id.as_str());
    assert_eq!(updated["name"], "compute-01");
    assert_eq!(updated["on_maintenance"], true);
    assert_eq!(updated["reserved"], true);
    assert_eq!(updated["control_attributes"], "SSH");

    let on_maintenance = app
        .json(&["host", "list", "--on-maintenance", "true"])
        .await;
    assert_eq!(on_maintenance.as_array().map(Vec::len), Some(1));

    app.run(&["host", "delete", "compute-01", "--segment", &segment])
        .await
        .expect_exit(0)
        .expect_stdout(&id);
    app.run(&["host", "show", &id])
        .await
        .expect_exit(3)
        .expect_stderr("not found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segment_scope_and_filters() {
    let app = spawn_api().await;
    let rack1 = app.segment("rack-1", &[]).await;
    let rack2 = app.segment("rack-2", &[]).await;
    let host1 = app.host(&rack1, "compute-1", &[]).await;
    app.host(&rack2, "compute-2", &[]).await;

    let in_rack2 = app.json(&["host", "list", "--segment", "rack-2"]).await;
    let names: Vec<&str> = in_rack2
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["compute-2"]);

    // A host asked for in the wrong segment is not found, by ID or by name.
    app.run(&["host", "show", &host1, "--segment", &rack2])
        .await
        .expect_exit(3);
    app.run(&["host", "show", "compute-1", "--segment", "rack-2"])
        .await
        .expect_exit(3)
        .expect_stderr("no host is named \"compute-1\"");
    app.run(&[
        "host",
        "create",
        "compute-3",
        "--segment",
        "rack-9",
        "--type",
        "COMPUTE",
    ])
    .await
    .expect_exit(3)
    .expect_stderr("no segment is named \"rack-9\"");

    let by_type = app.json(&["host", "list", "--type", "COMPUTE"]).await;
    assert_eq!(by_type.as_array().map(Vec::len), Some(2));
    assert_eq!(
        app.json(&["host", "list", "--type", "GPU"]).await,
        Value::Array(vec![])
    );
    assert_eq!(
        app.json(&["host", "list", "--name", "compute-1"]).await[0]["id"],
        host1.as_str()
    );

    // Deleting the segment deletes its hosts.
    app.run(&["segment", "delete", "rack-1"])
        .await
        .expect_exit(0);
    app.run(&["host", "show", &host1]).await.expect_exit(3);
}

/// `host restore`: a notification that brings the host back (an operator's
/// word, in its payload), refused while the host's own is unfinished; a
/// segment's return_to_service is shown and changed by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_and_return_to_service() {
    let app = spawn_api().await;
    let segment = app.segment("rack-1", &[]).await;
    app.host(&segment, "compute-1", &[]).await;
    let shown = app.json(&["segment", "show", "rack-1"]).await;
    assert_eq!(shown["return_to_service"], "manual");
    let updated = app
        .json(&["segment", "update", "rack-1", "--return-to-service", "auto"])
        .await;
    assert_eq!(updated["return_to_service"], "auto");
    app.run(&[
        "segment",
        "update",
        "rack-1",
        "--return-to-service",
        "sometimes",
    ])
    .await
    .expect_exit(2)
    .expect_stderr("manual")
    .expect_stderr("auto");

    let restore = app.json(&["host", "restore", "compute-1"]).await;
    assert_eq!(restore["type"], "COMPUTE_HOST");
    assert_eq!(restore["hostname"], "compute-1");
    assert_eq!(restore["payload"]["event"], "STARTED");
    assert_eq!(restore["payload"]["restored_by"], "operator");
    // No engine here: the first restore stays unfinished, and a second waits.
    app.run(&["host", "restore", "compute-1"])
        .await
        .expect_exit(6)
        .expect_stderr("compute-1");
}
