//! The binary's one-shot commands run as an operator runs them:
//! `db version` and `db sync` on every backend, a start refused on a
//! database behind when `database.migrate_on_start = false`, `--check`
//! changing nothing on disk with its exit codes, and a text log on a pipe
//! without colour codes.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::backends::{Backend, TestDatabase};
use crate::on_every_backend;

const BINARY: &str = env!("CARGO_BIN_EXE_instanceha-api");

/// The binary with `config` and `args`, none of this process's settings.
fn api(config: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(BINARY);
    command.arg("--config").arg(config).args(args);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("INSTANCEHA_") {
            command.env_remove(key);
        }
    }
    command
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null());
    command
}

fn run(config: &Path, args: &[&str]) -> (Option<i32>, String) {
    let output: Output = api(config, args).output().expect("instanceha-api runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.code(), text)
}

/// A configuration file in `dir` for the database at `url`, `extra`
/// appended to its `[database]` section; dispatch on, its state (the link
/// token) in `dir/state`.
fn config(dir: &Path, url: &str, extra: &str) -> std::path::PathBuf {
    let path = dir.join("api.toml");
    std::fs::write(
        &path,
        format!(
            "listen = \"127.0.0.1:0\"\nstate_dir = \"{}\"\n[database]\nurl = \"{url}\"\nconnect_timeout = \"2s\"\n{extra}\n[auth]\nmode = \"none\"\n[rest]\nenabled = false\n",
            dir.join("state").display()
        ),
    )
    .unwrap();
    path
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

on_every_backend!(db_version_and_db_sync_bring_a_database_up_to_date);

async fn db_version_and_db_sync_bring_a_database_up_to_date(backend: Backend) {
    let Some(database) = TestDatabase::create(backend).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &database.url, "migrate_on_start = false");
    let (code, said) = run(&config, &["db", "version"]);
    assert_eq!(code, Some(5), "behind: {said}");
    assert!(said.contains("applied: none (0 of "), "{said}");
    assert!(said.contains("run `instanceha-api db sync`"), "{said}");
    let latest = said
        .lines()
        .find_map(|l| l.strip_prefix("latest:"))
        .expect("the latest migration")
        .trim()
        .to_owned();
    assert_eq!(entries(dir.path()), ["api.toml"], "db version wrote");

    // The start refuses a database behind, and names the command.
    let (code, said) = run(&config, &[]);
    assert_eq!(code, Some(5), "{said}");
    assert!(said.contains("instanceha-api db sync"), "{said}");

    let (code, said) = run(&config, &["db", "sync"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains(&format!("applied {latest}")), "{said}");
    let (code, said) = run(&config, &["db", "version"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains(&format!("applied: {latest}")), "{said}");
    assert!(said.contains("up to date"), "{said}");
    let (code, said) = run(&config, &["db", "sync"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("nothing to apply"), "{said}");
    // And --check now finds it current.
    let (code, said) = run(&config, &["--check"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("reachable"), "{said}");
}

#[test]
fn check_changes_nothing_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("api.db").display());
    let config = config(dir.path(), &url, "");
    let (code, said) = run(&config, &["--check"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("0 of "), "{said}");
    assert!(said.contains("applied at start"), "{said}");
    assert!(said.contains("does not exist yet"), "{said}");
    // No database file, no state directory, no token.
    assert_eq!(entries(dir.path()), ["api.toml"]);

    // On a database that exists, it reads it and writes nothing to it.
    let (code, said) = run(&config, &["db", "sync"]);
    assert_eq!(code, Some(0), "{said}");
    let before = entries(dir.path());
    let size = std::fs::metadata(dir.path().join("api.db")).unwrap().len();
    let (code, said) = run(&config, &["--check"]);
    assert_eq!(code, Some(0), "{said}");
    assert_eq!(entries(dir.path()), before);
    assert_eq!(
        std::fs::metadata(dir.path().join("api.db")).unwrap().len(),
        size
    );
}

#[test]
fn check_tells_bad_settings_from_an_unreachable_database() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("api.db").display());
    let bad = config(dir.path(), &url, "");
    let text = std::fs::read_to_string(&bad).unwrap().replace(
        "mode = \"none\"",
        "mode = \"static\"\nstatic_tokens_file = \"/nonexistent/tokens.yaml\"",
    );
    std::fs::write(&bad, text).unwrap();
    let (code, said) = run(&bad, &["--check"]);
    assert_eq!(code, Some(2), "bad configuration: {said}");
    assert!(said.contains("/nonexistent/tokens.yaml"), "{said}");

    // Nothing listens on port 9 (discard).
    let down = config(dir.path(), "postgres://ha:secret@127.0.0.1:9/ha", "");
    let (code, said) = run(&down, &["--check"]);
    assert_eq!(code, Some(3), "unreachable: {said}");
    assert!(said.contains("127.0.0.1:9"), "{said}");
    assert!(!said.contains("secret"), "the password printed: {said}");
    let (code, said) = run(&down, &["db", "version"]);
    assert_eq!(code, Some(3), "unreachable: {said}");
    let help = run(&down, &["--help"]).1;
    for code in ["0", "1", "2", "3", "4", "5"] {
        assert!(help.contains(&format!("\n  {code}  ")), "{code}: {help}");
    }
}

/// A text log written to a pipe holds no ANSI colour codes.
#[test]
fn a_text_log_on_a_pipe_has_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("api.db").display());
    let config = config(
        dir.path(),
        &url,
        "[log]\nformat = \"text\"\nfilter = \"info\"",
    );
    let mut child = api(&config, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let listening = line.starts_with("instanceha-api listening on");
        lines.push(line);
        if listening {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let text = lines.join("\n");
    assert!(text.contains("listening on"), "{text}");
    assert!(
        text.contains("INFO") || text.contains("WARN"),
        "no log line: {text}"
    );
    assert!(!text.contains('\x1b'), "colour codes: {text:?}");
}
