//! The process monitor: watches the processes of masakari-monitors'
//! `process_list.yaml` (a process is running when a command line in
//! `/proc` contains its `process_name`, as masakari-processmonitor's
//! `ps -ef` match), restarts one that is gone up to `restart_retries`
//! times with its pre/restart/post commands, reports `PROCESS` `STOPPED`
//! when it stays down and `STARTED` once it is back. What to do next is
//! [`step`], a pure function; this module's loop only observes and acts.
//!
//! Faster than masakari-processmonitor by design: the process's own pid
//! is checked every `check_interval` (a `/proc` read, cheap enough for
//! 500 ms), a failed restart is retried after `restart_interval` (1 s) and
//! the last failure is reported at once, where masakari-processmonitor
//! lists all processes every 5 s and sleeps 5 s after every failed
//! restart, the last one included.

use std::path::Path;
use std::time::Duration;

use chrono::Utc;
use serde::Deserialize;
use tokio::process::Command;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::ProcessSettings;
use crate::metrics::Metrics;
use crate::report::Report;
use crate::spool::Spool;

/// One entry of `process_list.yaml` (masakari-monitors' format).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct WatchedProcess {
    pub process_name: String,
    #[serde(default)]
    pub start_command: Option<String>,
    #[serde(default)]
    pub pre_start_command: Option<String>,
    #[serde(default)]
    pub post_start_command: Option<String>,
    #[serde(default)]
    pub restart_command: Option<String>,
    #[serde(default)]
    pub pre_restart_command: Option<String>,
    #[serde(default)]
    pub post_restart_command: Option<String>,
    /// Accepted for compatibility; the commands run as the agent's user.
    #[serde(default)]
    pub run_as_root: Option<bool>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("process.list_path {path}: {message}")]
    List { path: String, message: String },
}

/// Parses a `process_list.yaml`.
pub fn parse_list(text: &str) -> Result<Vec<WatchedProcess>, String> {
    let list: Option<Vec<WatchedProcess>> =
        serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
    let list = list.unwrap_or_default();
    for (i, p) in list.iter().enumerate() {
        if p.process_name.trim().is_empty() {
            return Err(format!("entry {i}: process_name is empty"));
        }
    }
    Ok(list)
}

pub fn load_list(path: &Path) -> Result<Vec<WatchedProcess>, Error> {
    let list_error = |message: String| Error::List {
        path: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| list_error(e.to_string()))?;
    parse_list(&text).map_err(list_error)
}

/// Where a watched process stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Up,
    /// Gone; this many restarts were tried.
    Down {
        restarts: u32,
    },
    /// Reported STOPPED; waiting for it to come back.
    Reported,
}

/// What to do after an observation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Do {
    Nothing,
    /// Try restart number `n` (from 1).
    Restart(u32),
    /// It came back after a restart.
    Restarted,
    ReportStopped,
    ReportStarted,
}

/// The process monitor's decision, given whether the process is found.
pub fn step(phase: Phase, found: bool, retries: u32) -> (Phase, Do) {
    match (phase, found) {
        (Phase::Up, true) => (Phase::Up, Do::Nothing),
        (Phase::Down { .. }, true) => (Phase::Up, Do::Restarted),
        (Phase::Reported, true) => (Phase::Up, Do::ReportStarted),
        (Phase::Reported, false) => (Phase::Reported, Do::Nothing),
        (Phase::Up, false) => step(Phase::Down { restarts: 0 }, false, retries),
        (Phase::Down { restarts }, false) if restarts < retries => (
            Phase::Down {
                restarts: restarts + 1,
            },
            Do::Restart(restarts + 1),
        ),
        (Phase::Down { .. }, false) => (Phase::Reported, Do::ReportStopped),
    }
}

/// Whether a command line shows the process (a substring match, as
/// masakari-processmonitor's on `ps -ef`).
pub fn matches(cmdline: &str, process_name: &str) -> bool {
    !process_name.is_empty() && cmdline.contains(process_name)
}

fn cmdline(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let text = String::from_utf8_lossy(&raw);
    Some(text.trim_end_matches('\0').replace('\0', " "))
}

/// A running process whose command line matches, other than this agent.
pub fn find(process_name: &str) -> Option<u32> {
    let me = std::process::id();
    let entries = std::fs::read_dir("/proc").ok()?;
    let mut pids: Vec<u32> = entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .collect();
    pids.sort_unstable();
    pids.into_iter()
        .find(|pid| cmdline(*pid).is_some_and(|c| matches(&c, process_name)))
}

fn still_running(pid: u32, process_name: &str) -> bool {
    // A zombie keeps its pid but loses its command line.
    cmdline(pid).is_some_and(|c| matches(&c, process_name))
}

/// Runs `command` with `sh -c`; true when it exits 0 in time.
async fn run_command(what: &str, command: &Option<String>, timeout: Duration) -> bool {
    let Some(command) = command.as_deref().filter(|c| !c.trim().is_empty()) else {
        return true;
    };
    let child = Command::new("/bin/sh")
        .args(["-c", command])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(timeout, child).await {
        Ok(Ok(output)) if output.status.success() => true,
        Ok(Ok(output)) => {
            tracing::warn!(
                what,
                command,
                status = %output.status,
                stderr = %String::from_utf8_lossy(&output.stderr).trim(),
                "command failed"
            );
            false
        }
        Ok(Err(e)) => {
            tracing::warn!(what, command, error = %e, "command could not run");
            false
        }
        Err(_) => {
            tracing::warn!(what, command, ?timeout, "command timed out");
            false
        }
    }
}

/// Watches one process until `shutdown`.
pub async fn watch(
    process: WatchedProcess,
    hostname: String,
    settings: ProcessSettings,
    spool: Spool,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let name = process.process_name.clone();
    let mut pid = find(&name);
    if pid.is_none() && process.start_command.is_some() {
        tracing::info!(process = %name, "not running at start: starting it");
        if run_command(
            "pre_start_command",
            &process.pre_start_command,
            settings.command_timeout,
        )
        .await
        {
            run_command(
                "start_command",
                &process.start_command,
                settings.command_timeout,
            )
            .await;
            run_command(
                "post_start_command",
                &process.post_start_command,
                settings.command_timeout,
            )
            .await;
        }
        pid = wait_for(&name, settings.restart_interval, &shutdown).await;
    }
    let mut phase = if pid.is_some() {
        Phase::Up
    } else {
        Phase::Down { restarts: 0 }
    };
    let mut down_since = Utc::now();
    tracing::info!(process = %name, pid = ?pid, "watching process");
    loop {
        let found = match pid {
            Some(p) if still_running(p, &name) => true,
            _ => {
                pid = find(&name);
                pid.is_some()
            }
        };
        if phase == Phase::Up && !found {
            down_since = Utc::now();
            metrics.detection("process");
            tracing::warn!(process = %name, "process is gone");
        }
        let (next, todo) = step(phase, found, settings.restart_retries);
        phase = next;
        match todo {
            Do::Nothing => {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(settings.check_interval) => {}
                }
            }
            Do::Restart(n) => {
                if n > 1 {
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(settings.restart_interval) => {}
                    }
                }
                tracing::info!(process = %name, attempt = n, of = settings.restart_retries, "restarting process");
                let t = settings.command_timeout;
                let ok = run_command("pre_restart_command", &process.pre_restart_command, t).await
                    && process.restart_command.is_some()
                    && run_command("restart_command", &process.restart_command, t).await
                    && run_command("post_restart_command", &process.post_restart_command, t).await;
                if ok {
                    pid = wait_for(&name, settings.restart_interval, &shutdown).await;
                }
            }
            Do::Restarted => tracing::info!(process = %name, pid = ?pid, "process restarted"),
            Do::ReportStopped => {
                tracing::warn!(process = %name, "process stays down: reporting it stopped");
                let incident = down_since.timestamp_millis().to_string();
                let report = Report::process(&hostname, &name, false, &incident, Utc::now());
                push(&spool, report, "process stopped").await;
            }
            Do::ReportStarted => {
                tracing::info!(process = %name, pid = ?pid, "process is back: reporting it started");
                let incident = Utc::now().timestamp_millis().to_string();
                let report = Report::process(&hostname, &name, true, &incident, Utc::now());
                push(&spool, report, "process started").await;
            }
        }
    }
}

async fn push(spool: &Spool, report: Report, what: &str) {
    let span =
        tracing::info_span!(parent: None, "process event", what, hostname = %report.hostname);
    let traceparent = {
        let _e = span.enter();
        instanceha_runtime::propagation::current_traceparent()
    };
    if let Err(e) = spool.push(report, traceparent).await {
        tracing::error!(error = %e, "cannot spool the report");
    }
}

/// Polls for the process for up to `patience`.
async fn wait_for(name: &str, patience: Duration, shutdown: &CancellationToken) -> Option<u32> {
    let deadline = Instant::now() + patience;
    loop {
        if let Some(pid) = find(name) {
            return Some(pid);
        }
        if Instant::now() >= deadline || shutdown.is_cancelled() {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn masakari_process_lists_parse() {
        let yaml = r#"
-
    # libvirt-bin
    process_name: /usr/sbin/libvirtd
    start_command: systemctl start libvirt-bin
    pre_start_command:
    post_start_command:
    restart_command: systemctl restart libvirt-bin
    pre_restart_command:
    post_restart_command:
    run_as_root: True
-
    process_name: /usr/local/bin/nova-compute
    start_command: systemctl start nova-compute
    restart_command: systemctl restart nova-compute
    run_as_root: True
"#;
        let list = parse_list(yaml).unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].pre_start_command, None);
        assert_eq!(
            list[1].restart_command.as_deref(),
            Some("systemctl restart nova-compute")
        );
        assert!(parse_list("- process_name: ''").is_err());
        assert!(parse_list("").unwrap().is_empty());
    }

    #[test]
    fn a_process_that_stays_down_is_restarted_n_times_then_reported_once() {
        let mut phase = Phase::Up;
        let mut done = Vec::new();
        for _ in 0..6 {
            let (next, todo) = step(phase, false, 3);
            phase = next;
            done.push(todo);
        }
        assert_eq!(
            done,
            [
                Do::Restart(1),
                Do::Restart(2),
                Do::Restart(3),
                Do::ReportStopped,
                Do::Nothing,
                Do::Nothing
            ]
        );
        assert_eq!(step(phase, true, 3), (Phase::Up, Do::ReportStarted));
        assert_eq!(
            step(Phase::Down { restarts: 2 }, true, 3),
            (Phase::Up, Do::Restarted)
        );
        assert_eq!(
            step(Phase::Up, false, 0),
            (Phase::Reported, Do::ReportStopped)
        );
    }

    #[test]
    fn command_lines_match_by_substring() {
        assert!(matches(
            "/usr/bin/python3 /usr/bin/nova-compute --config-file x",
            "/usr/bin/nova-compute"
        ));
        assert!(!matches("/usr/sbin/libvirtd", "nova-compute"));
        assert!(!matches("anything", ""));
    }

    proptest! {
        /// Whatever happens, STOPPED is reported only after `retries`
        /// restarts, and STARTED only after a STOPPED.
        #[test]
        fn reports_alternate_and_follow_the_restarts(found in proptest::collection::vec(any::<bool>(), 0..60), retries in 0u32..5) {
            let mut phase = Phase::Up;
            let mut restarts_since_up = 0;
            let mut last_report = None;
            for f in found {
                let (next, todo) = step(phase, f, retries);
                match todo {
                    Do::Restart(n) => { restarts_since_up += 1; prop_assert_eq!(n, restarts_since_up); }
                    Do::ReportStopped => {
                        prop_assert_eq!(restarts_since_up, retries);
                        prop_assert_ne!(last_report, Some(Do::ReportStopped));
                        last_report = Some(Do::ReportStopped);
                    }
                    Do::ReportStarted => {
                        prop_assert_eq!(last_report, Some(Do::ReportStopped));
                        last_report = Some(Do::ReportStarted);
                    }
                    Do::Nothing | Do::Restarted => {}
                }
                if next == Phase::Up { restarts_since_up = 0; }
                phase = next;
            }
        }
    }
}
