//! Settings come from flags, then environment variables, then the
//! configuration file, then the defaults.

use std::path::PathBuf;

use crate::helpers::{Home, run, spawn_api};

fn write_config(home: &Home, text: &str) -> PathBuf {
    let dir = home.dir.path().join("config").join("instanceha");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cli.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_beat_environment_beats_file_beats_defaults() {
    let app = spawn_api().await;
    app.segment("rack-1", &[]).await;
    let closed = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };

    let home = Home::new();
    // Defaults: nothing listens on 127.0.0.1:15869 in a test (and if
    // something did, it would not be this API), so only prove the file is
    // read: it points at the API and asks for JSON.
    write_config(
        &home,
        &format!(
            "endpoint = \"{}\"\nformat = \"json\"\ntimeout = \"10s\"\n",
            app.endpoint
        ),
    );
    let from_file = run(home.instanceha(["segment", "list"])).await;
    from_file.expect_exit(0);
    assert_eq!(from_file.json()[0]["name"], "rack-1");

    // The environment beats the file.
    let mut env_endpoint = home.instanceha(["segment", "list"]);
    env_endpoint.env("INSTANCEHA_CLI_ENDPOINT", &closed);
    run(env_endpoint)
        .await
        .expect_exit(7)
        .expect_stderr(&closed);
    let mut env_format = home.instanceha(["segment", "list"]);
    env_format.env("INSTANCEHA_CLI_FORMAT", "yaml");
    let yaml = run(env_format).await;
    yaml.expect_exit(0);
    assert!(yaml.stdout.starts_with("- id:"), "{}", yaml.stdout);

    // Flags beat the environment.
    let mut flags = home.instanceha([
        "--endpoint",
        &app.endpoint,
        "-f",
        "table",
        "segment",
        "list",
    ]);
    flags
        .env("INSTANCEHA_CLI_ENDPOINT", &closed)
        .env("INSTANCEHA_CLI_FORMAT", "yaml");
    run(flags)
        .await
        .expect_exit(0)
        .expect_stdout("recovery_method")
        .expect_stdout("rack-1");

    // --config names another file, which replaces the default one.
    let other = home.dir.path().join("other.toml");
    std::fs::write(&other, format!("endpoint = \"{closed}\"\n")).unwrap();
    run(home.instanceha(["--config", other.to_str().unwrap(), "segment", "list"]))
        .await
        .expect_exit(7)
        .expect_stderr(&closed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_configuration_is_a_usage_error_naming_the_setting() {
    let home = Home::new();
    let path = write_config(&home, "format = \"xml\"\n");
    run(home.instanceha(["segment", "list"]))
        .await
        .expect_exit(2)
        .expect_stderr("format")
        .expect_stderr(path.to_str().unwrap());

    write_config(
        &home,
        "endpoint = \"http://127.0.0.1:1\"\nendpiont = \"x\"\n",
    );
    run(home.instanceha(["segment", "list"]))
        .await
        .expect_exit(2)
        .expect_stderr("endpiont");

    write_config(&home, "token = \"s3cret\\nwith a newline\"\n");
    let token = run(home.instanceha(["segment", "list"])).await;
    token.expect_exit(2).expect_stderr("token");
    assert!(!token.stderr.contains("s3cret"), "{}", token.stderr);

    let missing = home.dir.path().join("missing.toml");
    run(home.instanceha(["--config", missing.to_str().unwrap(), "segment", "list"]))
        .await
        .expect_exit(2)
        .expect_stderr("missing.toml");

    run(home.instanceha(["--endpoint", "localhost:15869", "segment", "list"]))
        .await
        .expect_exit(2)
        .expect_stderr("http://localhost:15869");
}
