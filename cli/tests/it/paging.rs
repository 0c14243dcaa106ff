//! Lists show one page of `--limit` (and say when more exist), or follow
//! `next_page_token` to the end with `--all`.

use std::collections::BTreeSet;

use crate::helpers::{minutes_ago, spawn_api};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_follows_every_page() {
    let app = spawn_api().await;
    let mut created = BTreeSet::new();
    for i in 0..7 {
        created.insert(app.segment(&format!("rack-{i}"), &[]).await);
    }
    let segment = created.first().unwrap().clone();
    for i in 0..5 {
        app.host(&segment, &format!("compute-{i}"), &[]).await;
    }

    // One page: the first three, and a hint on stderr (stdout stays JSON).
    let first = app
        .run(&["--format", "json", "segment", "list", "--limit", "3"])
        .await;
    first
        .expect_exit(0)
        .expect_stderr("more segments exist")
        .expect_stderr("--all");
    assert_eq!(first.json().as_array().map(Vec::len), Some(3));

    // Every page, three at a time.
    let all = app
        .run(&[
            "--format", "json", "segment", "list", "--limit", "3", "--all",
        ])
        .await;
    all.expect_exit(0);
    assert!(!all.stderr.contains("more"), "{}", all.stderr);
    let ids: BTreeSet<String> = all
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, created, "every segment once");
    let listed = all.json().as_array().unwrap().len();
    assert_eq!(listed, 7, "no segment twice");

    // A page that holds everything has no hint.
    let whole = app.run(&["segment", "list", "--limit", "7"]).await;
    whole.expect_exit(0);
    assert!(!whole.stderr.contains("more"), "{}", whole.stderr);

    let hosts = app
        .json(&[
            "host",
            "list",
            "--segment",
            &segment,
            "--limit",
            "2",
            "--all",
        ])
        .await;
    assert_eq!(hosts.as_array().map(Vec::len), Some(5));
    let one_page = app
        .run(&["host", "list", "--segment", &segment, "--limit", "2"])
        .await;
    one_page.expect_exit(0).expect_stderr("more hosts exist");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_page_newest_first() {
    let app = spawn_api().await;
    let segment = app.segment("rack-1", &[]).await;
    app.host(&segment, "compute-1", &[]).await;
    let mut ids = Vec::new();
    for minute in 0..5 {
        let time = minutes_ago(10 - minute);
        let created = app
            .json(&[
                "notification",
                "create",
                "--type",
                "PROCESS",
                "--hostname",
                "compute-1",
                "--generated-time",
                &time,
                "--payload",
                &format!("process_name=proc-{minute}"),
                "event=STOPPED",
            ])
            .await;
        ids.push(created["id"].as_str().unwrap().to_owned());
    }
    let all = app
        .json(&["notification", "list", "--limit", "2", "--all"])
        .await;
    let listed: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    let newest_first: Vec<&str> = ids.iter().rev().map(String::as_str).collect();
    assert_eq!(listed, newest_first);
}
