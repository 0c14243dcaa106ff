//! The binary as an operator first meets it: it refuses to start without
//! a settings file, `--check` changes nothing on disk, the spool it makes
//! is private whatever the umask, and a log written to a pipe holds no
//! colour codes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BINARY: &str = env!("CARGO_BIN_EXE_instanceha-agent");

/// A settings file in `dir` whose spool is `dir/state/spool.redb`, the
/// API unreachable (port 9, discard).
fn settings(dir: &Path) -> (PathBuf, PathBuf) {
    let spool = dir.join("state/spool.redb");
    let config = dir.join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "hostname = \"compute-x\"\n[api]\nurl = \"http://127.0.0.1:9\"\n[spool]\npath = \"{}\"\n",
            spool.display()
        ),
    )
    .unwrap();
    (config, spool)
}

/// The binary with none of this process's agent settings or log filter.
fn agent() -> Command {
    let mut command = Command::new(BINARY);
    command
        .env_remove("INSTANCEHA_AGENT_CONFIG")
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null());
    command
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn without_a_settings_file_it_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let output = agent().current_dir(dir.path()).output().unwrap();
    let said = text(&output);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(said.contains("--config"), "{said}");
    assert!(said.contains("INSTANCEHA_AGENT_CONFIG"), "{said}");
    assert!(
        entries(dir.path()).is_empty(),
        "it wrote {:?}",
        entries(dir.path())
    );
}

#[test]
fn check_changes_nothing_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let (config, spool) = settings(dir.path());
    let output = agent()
        .arg("--config")
        .arg(&config)
        .arg("--check")
        .output()
        .unwrap();
    let said = text(&output);
    assert!(output.status.success(), "{said}");
    assert!(said.contains("settings ok"), "{said}");
    assert!(said.contains("does not exist yet"), "{said}");
    assert!(!spool.exists(), "--check made the spool");
    assert_eq!(entries(dir.path()), ["agent.toml"]);
}

#[test]
fn check_names_an_unreadable_file() {
    let dir = tempfile::tempdir().unwrap();
    let (config, _) = settings(dir.path());
    let mut text_of = std::fs::read_to_string(&config).unwrap();
    text_of.push_str("[process]\nlist_path = \"/nonexistent/processes.yaml\"\n");
    std::fs::write(&config, text_of).unwrap();
    let output = agent()
        .arg("--config")
        .arg(&config)
        .arg("--check")
        .output()
        .unwrap();
    let said = text(&output);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(said.contains("/nonexistent/processes.yaml"), "{said}");
}

/// The spool, made by the binary's first start under a umask that takes
/// nothing away: 0600 in a directory made 0700. Its log, on a pipe, holds
/// no colour codes.
#[test]
fn the_spool_is_private_and_the_piped_log_plain() {
    let dir = tempfile::tempdir().unwrap();
    let (config, spool) = settings(dir.path());
    let mut child = Command::new("sh")
        .args(["-c", "umask 0; exec \"$@\"", "sh", BINARY])
        .arg("--config")
        .arg(&config)
        .env_remove("INSTANCEHA_AGENT_CONFIG")
        .env_remove("NO_COLOR")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !spool.exists() && Instant::now() < deadline {
        // sleep: polling for the spool file, within the deadline above.
        std::thread::sleep(Duration::from_millis(50));
    }
    // Its output is read only once it exits: nothing else to wait for.
    // sleep: its start-up line is logged just after the spool opens.
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        // sleep: polling for its exit, within the deadline above.
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    let said = text(&output);
    assert!(spool.exists(), "no spool made: {said}");
    let mode = |p: &Path| instanceha_runtime::private::mode_of(p).unwrap();
    assert_eq!(mode(&spool), 0o600);
    assert_eq!(mode(&dir.path().join("state")), 0o700);
    assert!(said.contains("instanceha-agent starting"), "{said}");
    assert!(
        !said.contains("\x1b["),
        "colour codes in a piped log: {said:?}"
    );
}
