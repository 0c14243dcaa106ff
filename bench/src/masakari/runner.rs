//! Masakari itself, as processes: `bench/masakari/run_masakari.py` (built
//! into this binary and written into the run directory) makes or reuses a
//! venv with the pinned `masakari` release from PyPI, writes Masakari's
//! configuration (its defaults, plus where the cloud is), starts a private
//! RabbitMQ node, masakari-api and masakari-engine, and stops them all on
//! SIGTERM. Any Keystone with an admin account will do: the simulator's, or
//! a real cloud's.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use serde::{Deserialize, Serialize};

use crate::procs::{Service, Usage};

/// The harness, as kept in the repository.
const HARNESS: &str = include_str!("../../masakari/run_masakari.py");

/// Where Masakari finds the cloud: Keystone, an admin account, the region
/// and the catalog interface of the endpoints it calls.
#[derive(Clone, Debug, Serialize)]
pub struct CloudAccess {
    pub auth_url: String,
    pub username: String,
    #[serde(skip)]
    pub password: String,
    pub project_name: String,
    pub user_domain_name: String,
    pub project_domain_name: String,
    pub region: String,
    /// `public`, `internal` or `admin`.
    pub interface: String,
}

impl CloudAccess {
    /// The simulator's admin account (every simulated cloud has it).
    pub fn simulator(auth_url: String) -> Self {
        Self {
            auth_url,
            username: "admin".into(),
            password: "secret".into(),
            project_name: "admin".into(),
            user_domain_name: "Default".into(),
            project_domain_name: "Default".into(),
            region: "RegionOne".into(),
            interface: "public".into(),
        }
    }
}

/// How Masakari runs on this machine.
#[derive(Clone, Debug)]
pub struct MasakariSettings {
    /// The interpreter the venv is made with.
    pub python: PathBuf,
    /// The venv (created on first use, reused afterwards).
    pub venv: PathBuf,
    /// The private RabbitMQ node's AMQP and Erlang distribution ports.
    pub amqp_port: u16,
    pub dist_port: u16,
    /// masakari-api's port (default: a free one).
    pub api_port: Option<u16>,
}

impl MasakariSettings {
    /// `~/.cache/instanceha/masakari-venv`.
    pub fn default_venv() -> PathBuf {
        let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
        home.join(".cache/instanceha/masakari-venv")
    }
}

/// Peak memory and CPU of Masakari's processes (each with its children).
#[derive(Clone, Debug, Default, Serialize)]
pub struct MasakariUsage {
    pub api: Option<Usage>,
    pub engine: Option<Usage>,
    pub rabbitmq: Option<Usage>,
}

#[derive(Debug, Deserialize)]
struct Pids {
    api: u32,
    engine: Option<u32>,
    rabbitmq: u32,
}

/// Masakari running for one run; stopped with [`Masakari::stop`].
pub struct Masakari {
    supervisor: Service,
    pids: Pids,
    /// masakari-api's base URL, `http://127.0.0.1:PORT`.
    pub url: String,
    /// The release running (`22.0.0`).
    pub version: String,
}

/// Writes the harness into `dir` and returns its path.
fn harness(dir: &Path) -> anyhow::Result<PathBuf> {
    let path = dir.join("run_masakari.py");
    std::fs::write(&path, HARNESS).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Makes (or finds) the venv; returns the installed release.
pub async fn prepare(settings: &MasakariSettings, dir: &Path) -> anyhow::Result<String> {
    let script = harness(dir)?;
    let output = tokio::process::Command::new(&settings.python)
        .arg(&script)
        .arg("--venv")
        .arg(&settings.venv)
        .arg("venv")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("running {}", settings.python.display()))?;
    if !output.status.success() {
        bail!(
            "cannot make Masakari's venv in {} ({}): {}",
            settings.venv.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .split_once(" masakari ")
        .map(|(_, version)| version.trim().to_owned())
        .ok_or_else(|| anyhow!("unexpected answer from the harness: {stdout}"))
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Masakari {
    /// Starts Masakari against `cloud`, its files and logs in `dir`; with
    /// `engine` false only the API runs (nothing is recovered).
    pub async fn start(
        settings: &MasakariSettings,
        cloud: &CloudAccess,
        dir: &Path,
        engine: bool,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let version = prepare(settings, dir).await?;
        let script = harness(dir)?;
        let api_port = match settings.api_port {
            Some(port) => port,
            None => free_port()?,
        };
        let mut args = vec![
            script.display().to_string(),
            "--venv".into(),
            settings.venv.display().to_string(),
            "serve".into(),
            "--run-dir".into(),
            dir.display().to_string(),
            "--auth-url".into(),
            cloud.auth_url.clone(),
            "--username".into(),
            cloud.username.clone(),
            "--project-name".into(),
            cloud.project_name.clone(),
            "--user-domain-name".into(),
            cloud.user_domain_name.clone(),
            "--project-domain-name".into(),
            cloud.project_domain_name.clone(),
            "--region".into(),
            cloud.region.clone(),
            "--interface".into(),
            cloud.interface.clone(),
            "--api-port".into(),
            api_port.to_string(),
            "--amqp-port".into(),
            settings.amqp_port.to_string(),
            "--dist-port".into(),
            settings.dist_port.to_string(),
        ];
        if !engine {
            args.push("--no-engine".into());
        }
        let supervisor = Service::start_within(
            "masakari",
            &settings.python,
            &args,
            &[("RUN_MASAKARI_PASSWORD", cloud.password.clone())],
            dir.join("run_masakari.log"),
            "masakari-api listening on",
            Duration::from_secs(300),
        )
        .await?;
        let url = supervisor.addr.clone();
        let pids_file = dir.join("pids.json");
        let pids: Pids = serde_json::from_str(
            &std::fs::read_to_string(&pids_file)
                .with_context(|| format!("reading {}", pids_file.display()))?,
        )
        .with_context(|| format!("reading {}", pids_file.display()))?;
        Ok(Self {
            supervisor,
            pids,
            url,
            version,
        })
    }

    /// Fails if Masakari (or its supervisor) has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        self.supervisor.check_alive()
    }

    /// Peak memory and CPU so far.
    pub fn usage(&self) -> MasakariUsage {
        MasakariUsage {
            api: Usage::of_tree(self.pids.api).ok(),
            engine: self.pids.engine.and_then(|pid| Usage::of_tree(pid).ok()),
            rabbitmq: Usage::of_tree(self.pids.rabbitmq).ok(),
        }
    }

    /// Stops every process (RabbitMQ takes a few seconds).
    pub async fn stop(self) -> MasakariUsage {
        let usage = self.usage();
        let _ = self.supervisor.stop_within(Duration::from_secs(120)).await;
        usage
    }
}
