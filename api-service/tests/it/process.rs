//! The `instanceha-api` binary as a child process, as it ships: its own
//! allocator, its own runtime, its log on standard output. For what only
//! the process shows: its resident memory, its start-up log.

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::sync::oneshot;
use tonic::transport::Channel;

/// A running `instanceha-api`; killed when dropped.
pub struct ApiProcess {
    child: tokio::process::Child,
    /// Where its gRPC API listens.
    pub addr: SocketAddr,
    /// Every line it printed so far.
    lines: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl ApiProcess {
    /// Starts the binary with a configuration file of `settings` (TOML)
    /// and a fresh SQLite database, no dispatch, the log in JSON; unless
    /// `settings` names them, gRPC on 127.0.0.1 port 0 (a top-level
    /// `listen`), REST off (a `[rest]` section) and no authentication (an
    /// `[auth]` section).
    pub async fn start(settings: &str) -> Self {
        Self::start_under(settings, &[]).await
    }

    /// [`start`](Self::start), with its open-file limit (soft and hard)
    /// set to `nofile` by `prlimit` before it runs (util-linux), as a
    /// tight limit of its host would be.
    pub async fn start_with_files(settings: &str, nofile: u64) -> Self {
        let limit = format!("--nofile={nofile}:{nofile}");
        Self::start_under(settings, &["prlimit", &limit, "--"]).await
    }

    /// [`start`](Self::start) under a umask that takes nothing away.
    pub async fn start_with_open_umask(settings: &str) -> Self {
        Self::start_under(settings, &["sh", "-c", "umask 0; exec \"$@\"", "sh"]).await
    }

    /// [`start`](Self::start) through `wrapper` (a command and its
    /// arguments, the binary and its own appended).
    async fn start_under(settings: &str, wrapper: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut top_level = settings.lines().take_while(|l| !l.starts_with('['));
        let listen = if top_level.any(|l| l.starts_with("listen")) {
            String::new()
        } else {
            "listen = \"127.0.0.1:0\"\n".to_owned()
        };
        let mut config = format!(
            "{listen}{settings}\n[database]\nurl = \"sqlite://{}\"\n[dispatch]\nenabled = false\n[log]\nformat = \"json\"\nfilter = \"info\"\n",
            dir.path().join("api.db").display()
        );
        if !settings.contains("[rest]") {
            config.push_str("[rest]\nenabled = false\n");
        }
        if !settings.contains("[auth]") {
            config.push_str("[auth]\nmode = \"none\"\n");
        }
        let path = dir.path().join("api.toml");
        std::fs::write(&path, &config).unwrap();
        let binary = env!("CARGO_BIN_EXE_instanceha-api");
        let mut command = match wrapper.split_first() {
            Some((program, arguments)) => {
                let mut command = tokio::process::Command::new(program);
                command.args(arguments).arg(binary);
                command
            }
            None => tokio::process::Command::new(binary),
        };
        command
            .arg("--config")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // Only the configuration file: none of this process's settings.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("INSTANCEHA_") {
                command.env_remove(key);
            }
        }
        command.env_remove("RUST_LOG");
        let mut child = command.spawn().expect("instanceha-api starts");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (listening, addr) = oneshot::channel();
        let mut listening = Some(listening);
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        let kept = lines.clone();
        tokio::spawn(async move {
            loop {
                let line = tokio::select! {
                    Ok(Some(line)) = stdout.next_line() => line,
                    Ok(Some(line)) = stderr.next_line() => line,
                    else => break,
                };
                if let Some(addr) = line.strip_prefix("instanceha-api listening on ")
                    && let Some(tx) = listening.take()
                {
                    let _ = tx.send(addr.parse::<SocketAddr>());
                }
                kept.lock().unwrap().push(line);
            }
        });
        let addr = match tokio::time::timeout(Duration::from_secs(30), addr).await {
            Ok(Ok(Ok(addr))) => addr,
            other => panic!(
                "instanceha-api did not say where it listens ({other:?}):\n{}",
                lines.lock().unwrap().join("\n")
            ),
        };
        Self {
            child,
            addr,
            lines,
            _dir: dir,
        }
    }

    /// Its directory: its configuration and its SQLite files.
    pub fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("the process runs")
    }

    /// A connection to its gRPC API.
    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .unwrap()
            .connect()
            .await
            .expect("a connection to the API")
    }

    /// Where its REST API listens (a `[rest]` section enabling it), from
    /// its log.
    pub async fn rest_addr(&self) -> SocketAddr {
        instanceha_testkit::eventually(
            "a REST address in the log",
            Duration::from_secs(30),
            Duration::from_millis(100),
            || async {
                self.lines().iter().find_map(|line| {
                    let entry: serde_json::Value = serde_json::from_str(line).ok()?;
                    let message = entry["message"].as_str()?;
                    message
                        .contains("rest api listening")
                        .then(|| entry["addr"].as_str()?.parse().ok())?
                })
            },
        )
        .await
    }

    /// What it printed so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// A field of `/proc/<pid>/status` in KiB (`VmRSS`, `VmHWM`...).
    fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("/proc/<pid>/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{field} in /proc/<pid>/status"))
    }

    /// Its resident memory, KiB.
    pub fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS")
    }

    /// Its open file descriptors (listeners, the database, connections).
    pub fn open_files(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .expect("/proc/<pid>/fd")
            .count()
    }
}
