//! The process monitor against real processes and a real API: a watched
//! process killed, its restart failing, is reported STOPPED; started
//! again, STARTED.

use std::process::{Command, Stdio};
use std::time::Duration;

use instanceha_testkit::eventually;

use crate::support::{self, AgentProcess, Api, POLL, Reaped};

/// Whether the API holds a report of the process `event`.
async fn reported(api: &Api, event: &str) -> bool {
    api.notifications()
        .await
        .iter()
        .any(|n| n.payload.get("event").map(String::as_str) == Some(event))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_process_that_stays_down_is_reported_stopped_then_started() {
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(dir.path()).await;
    api.segment("segment-p", &["compute-p"]).await;
    // A process with a name of its own: `sleep` run through a symlink.
    let marker = dir
        .path()
        .join(format!("iha-watched-{}", std::process::id()));
    std::os::unix::fs::symlink("/bin/sleep", &marker).unwrap();
    let start = || {
        Reaped(
            Command::new(&marker)
                .arg("600")
                .stdin(Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let mut watched = start();
    let list = dir.path().join("process_list.yaml");
    std::fs::write(
        &list,
        format!(
            "- process_name: {}\n  start_command:\n  restart_command: /bin/false\n  run_as_root: False\n",
            marker.display()
        ),
    )
    .unwrap();
    let token = support::password_file(dir.path(), "token", support::TOKEN);
    let config = format!(
        "hostname = \"compute-p\"\n[api]\nurl = \"{}\"\ntoken_file = \"{}\"\n[spool]\npath = \"{}/spool.redb\"\n\
         [process]\nlist_path = \"{}\"\n",
        api.url(),
        token.display(),
        dir.path().display(),
        list.display()
    );
    let agent = AgentProcess::spawn(dir.path(), "compute-p", &config, None);
    eventually(
        "the process watched",
        Duration::from_secs(10),
        POLL,
        || async { agent.logged("watching process") },
    )
    .await;
    let _ = watched.0.kill();
    let _ = watched.0.wait();
    let died = tokio::time::Instant::now();
    eventually(
        "PROCESS STOPPED stored",
        Duration::from_secs(20),
        POLL,
        || reported(&api, "STOPPED"),
    )
    .await;
    let took = died.elapsed();
    let all = api.notifications().await;
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(
        all[0].payload["process_name"],
        marker.file_name().unwrap().to_str().unwrap()
    );
    assert!(
        agent.logged("attempt=3"),
        "three restarts first:\n{}",
        agent.log_text()
    );
    eprintln!("process died -> PROCESS STOPPED stored in {took:?}");

    watched = start();
    eventually(
        "PROCESS STARTED stored",
        Duration::from_secs(10),
        POLL,
        || reported(&api, "STARTED"),
    )
    .await;
    drop(watched);
}
