//! Every failure says what was wrong and what to do, and exits with the
//! documented code: against the real API, a closed port, and a scripted
//! fake for the codes the real API cannot be made to return yet.

use crate::fake_api::{FakeApi, GOOD_TOKEN};
use crate::helpers::{Home, run, spawn_api};

/// An address nothing listens on.
async fn closed_endpoint() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_api_refusals() {
    let app = spawn_api().await;
    // 4, and the server's message names the field.
    app.run(&["segment", "create", "", "--recovery-method", "auto"])
        .await
        .expect_exit(4)
        .expect_stderr("name: must not be empty")
        .expect_stderr("fix the named field");
    // 5
    app.segment("rack-1", &[]).await;
    app.run(&["segment", "create", "rack-1", "--recovery-method", "auto"])
        .await
        .expect_exit(5)
        .expect_stderr("already exists")
        .expect_stderr("rack-1");
    // 3
    app.run(&["segment", "show", "5a0c1f52-1f7e-4b8e-9a53-33c1f0a0d111"])
        .await
        .expect_exit(3)
        .expect_stderr("not found")
        .expect_stderr("instanceha segment list");
    // 2: clap's usage errors.
    app.run(&[
        "segment",
        "create",
        "rack-2",
        "--recovery-method",
        "fastest",
    ])
    .await
    .expect_exit(2)
    .expect_stderr("fastest");
    app.run(&["segment", "frobnicate"]).await.expect_exit(2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_is_unavailable() {
    let endpoint = closed_endpoint().await;
    let home = Home::new();
    for args in [
        &["segment", "list"][..],
        &["host", "show", "compute-1"],
        &[
            "notification",
            "watch",
            "5a0c1f52-1f7e-4b8e-9a53-33c1f0a0d111",
        ],
    ] {
        let mut command = home.instanceha(["--endpoint", &endpoint]);
        command.args(args);
        run(command)
            .await
            .expect_exit(7)
            .expect_stderr(&format!("cannot reach instanceha-api at {endpoint}"))
            .expect_stderr("is it running?")
            .expect_stderr("--endpoint");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_weather_codes_from_a_scripted_api() {
    let fake = FakeApi::start().await;
    let home = Home::new();
    let cli = |args: &[&str]| {
        let mut command = home.instanceha(["--endpoint", &fake.endpoint]);
        command.args(args);
        run(command)
    };

    // 8: no token.
    cli(&["segment", "list"])
        .await
        .expect_exit(8)
        .expect_stderr("missing or invalid bearer token")
        .expect_stderr("INSTANCEHA_CLI_TOKEN");
    // 8: a wrong token, which is never printed.
    let wrong = cli(&["--token", "wrong-s3cret", "segment", "list"]).await;
    wrong.expect_exit(8);
    assert!(!wrong.stderr.contains("wrong-s3cret"), "{}", wrong.stderr);
    // 0: the right token, as a flag and from the environment.
    cli(&["--token", GOOD_TOKEN, "segment", "list"])
        .await
        .expect_exit(0);
    let mut from_env = home.instanceha(["--endpoint", &fake.endpoint, "segment", "list"]);
    from_env.env("INSTANCEHA_CLI_TOKEN", GOOD_TOKEN);
    run(from_env).await.expect_exit(0);
    assert_eq!(
        fake.authorizations(),
        [
            None,
            Some("Bearer wrong-s3cret".to_owned()),
            Some(format!("Bearer {GOOD_TOKEN}")),
            Some(format!("Bearer {GOOD_TOKEN}")),
        ]
    );

    // 8: permission denied.
    cli(&["segment", "create", "x", "--recovery-method", "auto"])
        .await
        .expect_exit(8)
        .expect_stderr("permission denied")
        .expect_stderr("may read but not change");
    // 7: no answer within --timeout.
    cli(&[
        "--timeout",
        "300ms",
        "segment",
        "show",
        "5a0c1f52-1f7e-4b8e-9a53-33c1f0a0d111",
    ])
    .await
    .expect_exit(7)
    .expect_stderr("did not answer within 300ms")
    .expect_stderr("--timeout");
    // 1: internal, with the reference to look up in the API's log.
    cli(&[
        "segment",
        "update",
        "5a0c1f52-1f7e-4b8e-9a53-33c1f0a0d111",
        "--name",
        "y",
    ])
    .await
    .expect_exit(1)
    .expect_stderr("1a2b3c4d5e6f")
    .expect_stderr("its log");
    // 7: the API is up but its database is not.
    cli(&["segment", "delete", "5a0c1f52-1f7e-4b8e-9a53-33c1f0a0d111"])
        .await
        .expect_exit(7)
        .expect_stderr("is unavailable: the database is not answering");
    // 1: the API does not offer the call (here: no host service at all).
    cli(&["host", "list"])
        .await
        .expect_exit(1)
        .expect_stderr("does not offer this call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_shows_exit_codes_but_never_the_token() {
    let home = Home::new();
    let mut command = home.instanceha(["--help"]);
    command.env("INSTANCEHA_CLI_TOKEN", "top-s3cret");
    let help = run(command).await;
    help.expect_exit(0)
        .expect_stdout("Exit codes:")
        .expect_stdout("10  watch: the notification ended failed")
        .expect_stdout("INSTANCEHA_CLI_TOKEN");
    assert!(!help.stdout.contains("top-s3cret"), "{}", help.stdout);
}
