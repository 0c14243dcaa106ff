//! `instanceha segment ...` against a real API: the whole life cycle, name
//! resolution, filters and the three output formats.

use serde_json::Value;

use crate::helpers::spawn_api;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_list_show_update_delete() {
    let app = spawn_api().await;

    let created = app
        .json(&[
            "segment",
            "create",
            "rack-1",
            "--recovery-method",
            "reserved_host",
            "--description",
            "first rack",
        ])
        .await;
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["name"], "rack-1");
    assert_eq!(created["recovery_method"], "reserved_host");
    assert_eq!(created["service_type"], "COMPUTE");
    assert_eq!(created["description"], "first rack");
    assert_eq!(created["enabled"], true);
    assert!(
        chrono::DateTime::parse_from_rfc3339(created["created_at"].as_str().unwrap()).is_ok(),
        "{created}"
    );

    let table = app.run(&["segment", "list"]).await;
    table
        .expect_exit(0)
        .expect_stdout("rack-1")
        .expect_stdout(&id)
        .expect_stdout("reserved_host")
        .expect_stdout("recovery_method");

    let shown = app.json(&["segment", "show", &id]).await;
    assert_eq!(shown, created);

    let show_table = app.run(&["segment", "show", &id]).await;
    show_table
        .expect_exit(0)
        .expect_stdout("Field")
        .expect_stdout("first rack");

    let updated = app
        .json(&[
            "segment",
            "update",
            &id,
            "--name",
            "rack-one",
            "--recovery-method",
            "rh_priority",
            "--disable",
        ])
        .await;
    assert_eq!(updated["id"], id.as_str());
    assert_eq!(updated["name"], "rack-one");
    assert_eq!(updated["recovery_method"], "rh_priority");
    assert_eq!(updated["enabled"], false);
    assert_eq!(
        updated["description"], "first rack",
        "unchanged fields stay"
    );

    let enabled = app.json(&["segment", "update", &id, "--enable"]).await;
    assert_eq!(enabled["enabled"], true);

    let deleted = app.run(&["segment", "delete", &id]).await;
    deleted.expect_exit(0).expect_stdout(&id);
    app.run(&["segment", "show", &id])
        .await
        .expect_exit(3)
        .expect_stderr("not found");
    assert_eq!(app.json(&["segment", "list"]).await, Value::Array(vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_resolve_to_ids() {
    let app = spawn_api().await;
    let id = app.segment("rack-2", &[]).await;

    let by_name = app.json(&["segment", "show", "rack-2"]).await;
    assert_eq!(by_name["id"], id.as_str());

    let updated = app
        .json(&["segment", "update", "rack-2", "--description", "by name"])
        .await;
    assert_eq!(updated["id"], id.as_str());
    assert_eq!(updated["description"], "by name");

    app.run(&["segment", "show", "rack-9"])
        .await
        .expect_exit(3)
        .expect_stderr("no segment is named \"rack-9\"");
    app.run(&["segment", "delete", "rack-9"])
        .await
        .expect_exit(3);

    let deleted = app.json(&["segment", "delete", "rack-2"]).await;
    assert_eq!(deleted["id"], id.as_str());
    assert_eq!(deleted["deleted"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_filters_are_applied() {
    let app = spawn_api().await;
    app.segment("auto-on", &[]).await;
    app.segment("auto-off", &["--disabled"]).await;
    app.json(&[
        "segment",
        "create",
        "rh-on",
        "--recovery-method",
        "rh_priority",
        "--service-type",
        "COMPUTE-GPU",
    ])
    .await;

    let names = |list: Value| -> Vec<String> {
        let mut names: Vec<String> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names(app.json(&["segment", "list", "--enabled", "false"]).await),
        ["auto-off"]
    );
    assert_eq!(
        names(app.json(&["segment", "list", "--enabled", "true"]).await),
        ["auto-on", "rh-on"]
    );
    assert_eq!(
        names(
            app.json(&["segment", "list", "--recovery-method", "rh_priority"])
                .await
        ),
        ["rh-on"]
    );
    assert_eq!(
        names(
            app.json(&["segment", "list", "--service-type", "COMPUTE-GPU"])
                .await
        ),
        ["rh-on"]
    );
    assert_eq!(
        names(app.json(&["segment", "list", "--name", "auto-on"]).await),
        ["auto-on"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_output_parses_back() {
    let app = spawn_api().await;
    let id = app.segment("rack-y", &["--description", "yaml"]).await;

    let one = app.run(&["--format", "yaml", "segment", "show", &id]).await;
    one.expect_exit(0);
    let one: Value = serde_yaml_ng::from_str(&one.stdout).expect("YAML");
    assert_eq!(one["id"], id.as_str());
    assert_eq!(one["recovery_method"], "auto");
    assert_eq!(one["description"], "yaml");

    let list = app.run(&["segment", "list", "-f", "yaml"]).await;
    list.expect_exit(0);
    let list: Value = serde_yaml_ng::from_str(&list.stdout).expect("YAML");
    assert_eq!(list.as_array().map(Vec::len), Some(1));
    assert_eq!(list[0]["name"], "rack-y");
}

/// A segment stored before the API refused control and bidirectional
/// characters in names: every table shows them escaped, so the row cannot
/// retitle, clear or recolour the operator's terminal; JSON carries the
/// exact text, escaped as JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escape_sequence_stored_in_an_old_row_is_printed_escaped() {
    use instanceha_api::domain::{NewSegment, RecoveryMethod, ReturnToService};

    let app = spawn_api().await;
    let evil_name = "rack\u{1b}]0;owned\u{7}\u{202e}1";
    let old = app
        .api
        .store()
        .insert_segment(&NewSegment {
            name: evil_name.to_owned(),
            description: Some("\u{1b}[2J\u{1b}[31mred\u{9b}".to_owned()),
            service_type: "COMPUTE".to_owned(),
            recovery_method: RecoveryMethod::Auto,
            enabled: true,
            return_to_service: ReturnToService::Manual,
        })
        .await
        .expect("the store takes what the service would refuse");
    let id = old.id.to_string();

    for args in [vec!["segment", "list"], vec!["segment", "show", &id]] {
        let out = app.run(&args).await;
        out.expect_exit(0)
            .expect_stdout("rack\\u{1b}]0;owned\\u{7}\\u{202e}1")
            .expect_stdout("\\u{1b}[2J\\u{1b}[31mred\\u{9b}");
        assert!(
            !out.stdout
                .contains(['\u{1b}', '\u{7}', '\u{9b}', '\u{202e}']),
            "{args:?} printed a raw control character: {:?}",
            out.stdout
        );
    }

    let json = app.json(&["segment", "show", &id]).await;
    assert_eq!(json["name"], evil_name);
    let raw = app.run(&["--format", "json", "segment", "show", &id]).await;
    assert!(!raw.stdout.contains('\u{1b}'), "{:?}", raw.stdout);
}
