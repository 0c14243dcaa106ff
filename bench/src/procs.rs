//! The services under test as separate OS processes: where their binaries
//! are, starting one with a configuration and learning the address it
//! listens on (from the line it prints), and reading its peak resident
//! memory (`VmHWM`) and CPU time from `/proc` before stopping it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, Command};

/// The three service binaries.
#[derive(Clone, Debug)]
pub struct Binaries {
    pub sim: PathBuf,
    pub engine: PathBuf,
    pub api: PathBuf,
}

impl Binaries {
    /// The binaries in `dir`, or else next to this executable (cargo puts
    /// every binary of the workspace in one `target/<profile>` directory);
    /// a path given for one binary wins.
    pub fn locate(
        dir: Option<&Path>,
        sim: Option<PathBuf>,
        engine: Option<PathBuf>,
        api: Option<PathBuf>,
    ) -> anyhow::Result<Self> {
        let dir = match dir {
            Some(dir) => dir.to_owned(),
            None => std::env::current_exe()
                .context("cannot tell where instanceha-bench runs from")?
                .parent()
                .map(Path::to_owned)
                .ok_or_else(|| anyhow!("instanceha-bench has no directory"))?,
        };
        let pick = |given: Option<PathBuf>, name: &str| -> anyhow::Result<PathBuf> {
            let path = given.unwrap_or_else(|| dir.join(name));
            if path.is_file() {
                Ok(path)
            } else {
                bail!(
                    "{} not found; build it next to instanceha-bench \
                     (cargo build --release -p instanceha-api -p instanceha-engine -p openstack-sim) \
                     or pass --bin-dir / --{}-bin",
                    path.display(),
                    name.trim_start_matches("instanceha-")
                        .trim_start_matches("openstack-")
                )
            }
        };
        Ok(Self {
            sim: pick(sim, "openstack-sim")?,
            engine: pick(engine, "instanceha-engine")?,
            api: pick(api, "instanceha-api")?,
        })
    }
}

/// Peak memory and CPU time of a process, read just before it stopped.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Usage {
    /// `VmHWM`: peak resident set size, KiB.
    pub peak_rss_kib: u64,
    /// `VmRSS` at the end, KiB.
    pub rss_kib: u64,
    /// User plus system CPU time, seconds.
    pub cpu_secs: f64,
}

impl Usage {
    pub fn peak_rss_mib(&self) -> f64 {
        self.peak_rss_kib as f64 / 1024.0
    }

    /// The process and every descendant, summed (a Python service forks
    /// its workers, `rabbitmq-server` runs the Erlang VM under a shell):
    /// the sum of each process's peak, which may exceed the tree's peak
    /// at any one moment.
    pub fn of_tree(pid: u32) -> anyhow::Result<Self> {
        let mut total = Self::of(pid)?;
        for child in descendants(pid) {
            if let Ok(u) = Self::of(child) {
                total.peak_rss_kib += u.peak_rss_kib;
                total.rss_kib += u.rss_kib;
                total.cpu_secs += u.cpu_secs;
            }
        }
        Ok(total)
    }

    /// Reads `/proc/PID/status` and `/proc/PID/stat`.
    pub fn of(pid: u32) -> anyhow::Result<Self> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("reading /proc/{pid}/status"))?;
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or_default()
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .with_context(|| format!("reading /proc/{pid}/stat"))?;
        // Fields after the command name (which may hold spaces): state is
        // field 3, utime 14 and stime 15.
        let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or_default()
        };
        // USER_HZ is 100 on every Linux this runs on.
        let cpu_secs = (ticks(11) + ticks(12)) as f64 / 100.0;
        Ok(Self {
            peak_rss_kib: kib("VmHWM:"),
            rss_kib: kib("VmRSS:"),
            cpu_secs,
        })
    }
}

/// Every process below `pid` (children, grandchildren...), from the parent
/// ids in `/proc/*/stat`.
fn descendants(pid: u32) -> Vec<u32> {
    let mut parent_of = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(child) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
                continue;
            };
            // After the command name: state, then the parent's id.
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(parent) = parent {
                parent_of.push((child, parent));
            }
        }
    }
    let mut found = Vec::new();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for &(child, parent) in &parent_of {
            if parent == p && !found.contains(&child) {
                found.push(child);
                frontier.push(child);
            }
        }
    }
    found
}

/// A running service process; killed when dropped.
pub struct Service {
    pub name: &'static str,
    child: Child,
    pid: u32,
    /// What it printed after "listening on".
    pub addr: String,
    pub log: PathBuf,
}

impl Service {
    /// Starts `program` with `args`, its stdout (the services' logs) and
    /// stderr (a panic's message) both to `log`, and waits (at most a
    /// minute) for the line `<marker> <address>` on its stdout.
    pub async fn start(
        name: &'static str,
        program: &Path,
        args: &[String],
        env: &[(&str, String)],
        log: PathBuf,
        marker: &str,
    ) -> anyhow::Result<Self> {
        Self::start_within(
            name,
            program,
            args,
            env,
            log,
            marker,
            Duration::from_secs(60),
        )
        .await
    }

    /// [`Service::start`], waiting at most `within` for the marker.
    pub async fn start_within(
        name: &'static str,
        program: &Path,
        args: &[String],
        env: &[(&str, String)],
        log: PathBuf,
        marker: &str,
        within: Duration,
    ) -> anyhow::Result<Self> {
        std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        // Both streams append to the one file, each write at its end.
        let append = || {
            std::fs::OpenOptions::new()
                .append(true)
                .open(&log)
                .with_context(|| format!("opening {}", log.display()))
        };
        let log_file = append()?;
        let mut stdout_log = tokio::fs::File::from_std(append()?);
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .kill_on_drop(true);
        // Only the run's own settings: nothing from the caller's
        // environment that the services would read.
        for (key, _) in std::env::vars_os() {
            let key = key.to_string_lossy();
            if ["INSTANCEHA_", "OS_", "OPENSTACK_SIM_", "RUST_LOG"]
                .iter()
                .any(|p| key.starts_with(p))
            {
                command.env_remove(key.as_ref());
            }
        }
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        let pid = child.id().ok_or_else(|| anyhow!("{name} exited at once"))?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let wait = async {
            while let Some(line) = lines.next_line().await? {
                stdout_log.write_all(format!("{line}\n").as_bytes()).await?;
                stdout_log.flush().await?;
                if let Some(rest) = line.split_once(marker).map(|(_, r)| r.trim()) {
                    return Ok::<_, std::io::Error>(Some(rest.to_owned()));
                }
            }
            Ok(None)
        };
        let found = tokio::time::timeout(within, wait).await;
        let addr = match found {
            Ok(Ok(Some(addr))) => addr,
            other => {
                let _ = child.start_kill();
                let tail = tail_of(&log, 20);
                bail!("{name} did not start ({other:?}); the end of its log:\n{tail}");
            }
        };
        // The rest of stdout to the log, read so that the process never
        // blocks on a full pipe.
        let mut rest = lines.into_inner();
        tokio::spawn(async move {
            let _ = tokio::io::copy_buf(&mut rest, &mut stdout_log).await;
            let _ = stdout_log.flush().await;
        });
        Ok(Self {
            name,
            child,
            pid,
            addr,
            log,
        })
    }

    /// Peak memory and CPU so far.
    pub fn usage(&self) -> anyhow::Result<Usage> {
        Usage::of(self.pid)
    }

    /// Waits until the process's gRPC health service reports SERVING (the
    /// engine does once it has logged in to Keystone and found Nova and
    /// Cinder; the API once its database is migrated).
    pub async fn wait_serving(&mut self) -> anyhow::Result<()> {
        use tonic_health::pb::HealthCheckRequest;
        use tonic_health::pb::health_check_response::ServingStatus;
        use tonic_health::pb::health_client::HealthClient;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            self.check_alive()?;
            let url = format!("http://{}", self.addr);
            let status = match tonic::transport::Endpoint::from_shared(url)?
                .connect()
                .await
            {
                Ok(channel) => HealthClient::new(channel)
                    .check(HealthCheckRequest {
                        service: String::new(),
                    })
                    .await
                    .map(|r| r.into_inner().status)
                    .ok(),
                Err(_) => None,
            };
            if status == Some(ServingStatus::Serving as i32) {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "{} is not serving after 60 s; the end of its log:\n{}",
                    self.name,
                    tail_of(&self.log, 20)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Fails if the process has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "{} exited ({status}); the end of its log:\n{}",
                self.name,
                tail_of(&self.log, 20)
            );
        }
        Ok(())
    }

    /// Reads the usage, then stops the process: SIGTERM (the services shut
    /// down cleanly, and a profiler wrapping one writes its output), and
    /// SIGKILL if it is still there after 10 s.
    pub async fn stop(self) -> anyhow::Result<Usage> {
        self.stop_within(Duration::from_secs(10)).await
    }

    /// [`Service::stop`], waiting `grace` before SIGKILL (a supervisor that
    /// stops processes of its own needs longer).
    pub async fn stop_within(mut self, grace: Duration) -> anyhow::Result<Usage> {
        let usage = self.usage();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
        usage
    }
}

/// The last `n` lines of a log file.
pub fn tail_of(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
