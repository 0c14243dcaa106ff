//! `instanceha-engine --check` run as an operator runs it, against the
//! simulated cloud: a good configuration passes and changes nothing on
//! disk; refused credentials, an unreachable Keystone and a wrong setting
//! each end with their own exit code; and a text log on a pipe holds no
//! colour codes.

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use openstack_sim::{Scenario, Sim};

const BINARY: &str = env!("CARGO_BIN_EXE_instanceha-engine");

/// A configuration file in `dir`: Keystone at `auth_url` as `admin` with
/// `password`, one try per call, the state directory in `dir/state`.
fn config(dir: &Path, auth_url: &str, password: &str, extra: &str) -> PathBuf {
    let path = dir.join("engine.toml");
    let auth = |user: &str, project: &str| {
        format!(
            "auth_url = \"{auth_url}\"\nusername = \"{user}\"\npassword = \"{password}\"\nproject_name = \"{project}\"\nuser_domain_name = \"Default\"\nproject_domain_name = \"Default\"\n"
        )
    };
    std::fs::write(
        &path,
        format!(
            "listen = \"127.0.0.1:0\"\nstate_dir = \"{}\"\n{extra}\n[openstack]\ninterfaces = [\"public\"]\nrequest_timeout = \"2s\"\n[openstack.retry]\nmax_attempts = 1\n[openstack.auth]\n{}[openstack.service_auth]\n{}",
            dir.join("state").display(),
            auth("admin", "admin"),
            auth("nova", "service"),
        ),
    )
    .unwrap();
    path
}

/// The binary with `config` and `args`, none of this process's settings.
fn engine(config: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(BINARY);
    command.arg("--config").arg(config).args(args);
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("INSTANCEHA_") || key.starts_with("OS_") {
            command.env_remove(key);
        }
    }
    command
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdin(Stdio::null());
    command
}

/// Runs `--check` off the runtime's threads (the simulator serves on
/// them): its exit code and what it printed.
async fn check(config: PathBuf) -> (Option<i32>, String) {
    tokio::task::spawn_blocking(move || {
        let output = engine(&config, &["--check"]).output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.code(), text)
    })
    .await
    .unwrap()
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

async fn sim() -> Sim {
    Sim::start(Scenario::small(), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_logs_in_and_changes_nothing_on_disk() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path(), &sim.auth_url(), "secret", "");
    let (code, said) = check(path).await;
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("keystone: logged in"), "{said}");
    assert!(said.contains(&sim.compute_url()), "{said}");
    assert!(said.contains("does not exist yet"), "{said}");
    // No state directory, no link token.
    assert_eq!(entries(dir.path()), ["engine.toml"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_tells_refused_credentials_unreachable_keystone_and_bad_settings() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let refused = config(dir.path(), &sim.auth_url(), "wrong", "");
    let (code, said) = check(refused).await;
    assert_eq!(code, Some(4), "refused: {said}");
    assert!(said.contains("401"), "{said}");

    // Nothing listens on port 9 (discard).
    let down = config(dir.path(), "http://127.0.0.1:9/identity/v3", "secret", "");
    let (code, said) = check(down).await;
    assert_eq!(code, Some(3), "unreachable: {said}");
    assert!(said.contains("127.0.0.1:9"), "{said}");

    let bad = config(dir.path(), &sim.auth_url(), "secret", "no_such_setting = 1");
    let (code, said) = check(bad).await;
    assert_eq!(code, Some(2), "bad configuration: {said}");
    assert!(said.contains("no_such_setting"), "{said}");

    let unreadable = config(
        dir.path(),
        &sim.auth_url(),
        "secret",
        "[link]\ntoken_file = \"/nonexistent/link-token\"",
    );
    let (code, said) = check(unreadable).await;
    assert_eq!(code, Some(2), "unreadable token: {said}");
    assert!(said.contains("/nonexistent/link-token"), "{said}");
    assert_eq!(entries(dir.path()), ["engine.toml"]);
}

/// A text log written to a pipe holds no ANSI colour codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_log_on_a_pipe_has_no_colour_codes() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let path = config(
        dir.path(),
        &sim.auth_url(),
        "secret",
        "[log]\nformat = \"text\"\nfilter = \"info\"",
    );
    let mut child = engine(&path, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    // Its log says when OpenStack answered, after it listens.
    while let Ok(line) =
        tokio::task::block_in_place(|| received.recv_timeout(Duration::from_secs(30)))
    {
        let reachable = line.contains("openstack reachable");
        seen.push(line);
        if reachable {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let text = seen.join("\n");
    assert!(text.contains("openstack reachable"), "{text}");
    assert!(!text.contains('\x1b'), "colour codes: {text:?}");
}
