//! `instanceha-bench`: the performance benchmark of instance-ha (issue 8).
//!
//! It starts `openstack-sim`, `instanceha-engine` and `instanceha-api` as
//! separate OS processes on 127.0.0.1 (release binaries found next to its
//! own executable, or given with `--bin-dir` / `--sim-bin` /
//! `--engine-bin` / `--api-bin`), runs recovery scenarios against a
//! realistic timing model and the intake load, and prints tables (Markdown)
//! and, with `--json FILE`, one JSON document. See `BENCHMARKS.md`.
//!
//! With `--masakari also` (or `only`) the same scenarios and intake load
//! are run by OpenStack Masakari itself (`masakari`: its PyPI release in a
//! cached venv, started by `bench/masakari/run_masakari.py`), and its
//! figures printed beside ours.
//!
//! The exit status is 0 when every run completed and recovered everything
//! (and intake kept every report exactly once), 1 otherwise; the issue's
//! targets are reported, never asserted. What Masakari fails to recover is
//! reported, not counted against the exit status.

mod cloud;
mod config;
mod db;
mod intake;
mod masakari;
mod procs;
mod real;
mod recovery;
mod report;
mod runs;
mod scenario;
mod sim;
mod soak;
mod stats;
mod workdir;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::masakari::runner::{CloudAccess, Masakari, MasakariSettings};
use crate::procs::Binaries;
use crate::report::{Document, Machine};
use crate::runs::Bench;
use crate::scenario::{NAMED, Scenario, TimingModel};
use crate::workdir::WorkDir;

/// The performance benchmark of instance-ha: recovery time against what
/// simulated Nova allows, dispatch latency, intake and memory.
#[derive(Debug, Parser)]
#[command(name = "instanceha-bench", version)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
struct Common {
    /// Directory holding openstack-sim, instanceha-engine and
    /// instanceha-api (default: this executable's directory).
    #[arg(long, global = true)]
    bin_dir: Option<PathBuf>,
    /// Path of openstack-sim (overrides --bin-dir for it).
    #[arg(long, global = true)]
    sim_bin: Option<PathBuf>,
    /// Path of instanceha-engine.
    #[arg(long, global = true)]
    engine_bin: Option<PathBuf>,
    /// Path of instanceha-api.
    #[arg(long, global = true)]
    api_bin: Option<PathBuf>,
    /// Also write every figure as one JSON document to this file.
    #[arg(long, global = true)]
    json: Option<PathBuf>,
    /// Where the runs keep their configuration, databases and logs
    /// (default: a temporary directory, removed at the end unless --keep).
    #[arg(long, global = true)]
    work_dir: Option<PathBuf>,
    /// Keep the temporary run directory (its path is printed).
    #[arg(long, global = true)]
    keep: bool,
    /// The services' log filter (the products' default is info).
    #[arg(long, global = true, default_value = "info")]
    log_filter: String,
    /// PostgreSQL server and a user that may create databases; the
    /// benchmark creates its own database there and drops it afterwards.
    #[arg(
        long,
        global = true,
        env = "INSTANCEHA_BENCH_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres"
    )]
    postgres_url: String,
    /// An environment variable for instanceha-engine, KEY=VALUE
    /// (repeatable; e.g. INSTANCEHA_ENGINE_RECOVERY__POLL_INTERVAL=2s to
    /// experiment with a setting). Off by default: runs use the defaults.
    #[arg(long, global = true, value_parser = key_value)]
    engine_env: Vec<(String, String)>,
    /// An environment variable for instanceha-api, KEY=VALUE (repeatable).
    #[arg(long, global = true, value_parser = key_value)]
    api_env: Vec<(String, String)>,
    /// The Python that makes Masakari's venv.
    #[arg(long, global = true, default_value = "python3")]
    masakari_python: PathBuf,
    /// Masakari's venv: made on first use with the pinned release from
    /// PyPI, reused afterwards (default ~/.cache/instanceha/masakari-venv).
    #[arg(long, global = true)]
    masakari_venv: Option<PathBuf>,
    /// AMQP port of Masakari's private RabbitMQ node.
    #[arg(long, global = true, default_value_t = 25683)]
    masakari_amqp_port: u16,
    /// Erlang distribution port of that node.
    #[arg(long, global = true, default_value_t = 25684)]
    masakari_dist_port: u16,
}

impl Common {
    fn masakari(&self, api_port: Option<u16>) -> MasakariSettings {
        MasakariSettings {
            python: self.masakari_python.clone(),
            venv: self
                .masakari_venv
                .clone()
                .unwrap_or_else(MasakariSettings::default_venv),
            amqp_port: self.masakari_amqp_port,
            dist_port: self.masakari_dist_port,
            api_port,
        }
    }
}

fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Recovery scenarios: one-host-10, one-host-100, one-host-1000,
    /// hosts-100x50, hosts-100x50-bfv (or `one-host-N`, `hosts-HxN[-bfv][-outageS[@T]]`).
    Recovery(RecoveryArgs),
    /// Notification intake on SQLite and/or PostgreSQL.
    Intake(IntakeArgs),
    /// Every named recovery scenario, then intake on both databases.
    All {
        #[command(flatten)]
        recovery: RecoveryTuning,
        #[command(flatten)]
        intake: IntakeTuning,
    },
    /// The host-failure scenario on a real OpenStack
    /// (conformance/real-openstack, named by INSTANCEHA_REAL_OPENSTACK_CTL)
    /// against Nova's own ideal, alternating, in the same run.
    Real {
        /// Runs of each (instance-ha and the ideal).
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// HA instances on the failed host.
        #[arg(long, default_value_t = 10)]
        instances: usize,
        /// Of which boot from a volume.
        #[arg(long, default_value_t = 2)]
        bfv: usize,
        /// Of which are stopped.
        #[arg(long, default_value_t = 1)]
        stopped: usize,
        /// Also run OpenStack Masakari on the same failure (`also`), or it
        /// instead of instance-ha (`only`); Nova's ideal always runs.
        #[arg(long, value_enum, default_value = "off")]
        masakari: WithMasakari,
    },
    /// Runs OpenStack Masakari (API, engine, a private RabbitMQ node)
    /// against a cloud until Ctrl-C: to point it at a real Keystone and
    /// Nova. Its files and logs are in the work directory.
    MasakariServe(ServeArgs),
    /// A steady stream of host failures with repaired hosts returning and
    /// Nova answering a share of its calls 503: every report must end
    /// finished and every instance be back (issue 25).
    Soak(soak::SoakArgs),
    /// Only Masakari's modelled figures for the scenarios (no process runs).
    Model {
        /// Scenario names (default: every named scenario).
        scenarios: Vec<String>,
        #[arg(long, default_value_t = 2026)]
        seed: u64,
    },
}

#[derive(Debug, Args)]
struct ServeArgs {
    /// Keystone's URL, e.g. http://keystone:5000/v3.
    #[arg(long, env = "OS_AUTH_URL")]
    auth_url: String,
    /// An admin account (Masakari's policies are admin only).
    #[arg(long, env = "OS_USERNAME", default_value = "admin")]
    username: String,
    #[arg(long, env = "OS_PASSWORD", hide_env_values = true)]
    password: String,
    #[arg(long, env = "OS_PROJECT_NAME", default_value = "admin")]
    project_name: String,
    #[arg(long, env = "OS_USER_DOMAIN_NAME", default_value = "Default")]
    user_domain_name: String,
    #[arg(long, env = "OS_PROJECT_DOMAIN_NAME", default_value = "Default")]
    project_domain_name: String,
    #[arg(long, env = "OS_REGION_NAME", default_value = "RegionOne")]
    region: String,
    /// The catalog interface of the endpoints Masakari calls.
    #[arg(long, env = "OS_INTERFACE", default_value = "public")]
    interface: String,
    /// masakari-api's port.
    #[arg(long, default_value_t = 15868)]
    api_port: u16,
    /// The API alone: reports are stored, nothing is recovered.
    #[arg(long)]
    no_engine: bool,
}

/// Whether OpenStack Masakari runs too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum WithMasakari {
    /// instance-ha only.
    Off,
    /// instance-ha, then Masakari on the same scenario.
    Also,
    /// Masakari only.
    Only,
}

impl WithMasakari {
    fn ours(self) -> bool {
        self != Self::Only
    }

    fn theirs(self) -> bool {
        self != Self::Off
    }
}

#[derive(Debug, Args)]
struct RecoveryArgs {
    /// Scenario names, or `all`.
    #[arg(default_value = "one-host-10")]
    scenarios: Vec<String>,
    #[command(flatten)]
    tuning: RecoveryTuning,
}

#[derive(Debug, Clone, Args)]
struct RecoveryTuning {
    /// Simulated seconds per real second; the engine's and the API's
    /// pacing settings are divided by it.
    #[arg(long, default_value_t = 1.0)]
    speed: f64,
    /// The simulator's seed (durations' jitter).
    #[arg(long, default_value_t = 2026)]
    seed: u64,
    /// Database of the API in recovery runs.
    #[arg(long, value_enum, default_value_t = Db::Sqlite)]
    database: Db,
    /// Runs of each scenario.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Give up on a run after this many real seconds (default: ten times
    /// what Nova needs, at least a minute, plus a minute; for Masakari,
    /// its worst case with one retry plus ten minutes).
    #[arg(long)]
    timeout: Option<u64>,
    /// Run OpenStack Masakari on the same scenarios too (`also`), or
    /// instead (`only`); it runs at speed 1 whatever --speed says, since
    /// its own waits are real seconds.
    #[arg(long, value_enum, default_value_t = WithMasakari::Off)]
    masakari: WithMasakari,
}

#[derive(Debug, Args)]
struct IntakeArgs {
    /// Databases to measure.
    #[arg(long, value_enum, default_value_t = IntakeDb::Both)]
    database: IntakeDb,
    #[command(flatten)]
    tuning: IntakeTuning,
}

#[derive(Debug, Clone, Args)]
struct IntakeTuning {
    /// Timed reports.
    #[arg(long, default_value_t = 20_000)]
    count: usize,
    /// Untimed reports sent first.
    #[arg(long, default_value_t = 2_000)]
    warmup: usize,
    /// Create calls in flight at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// HTTP/2 connections the clients share.
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// Hosts the reports are spread over.
    #[arg(long, default_value_t = 500)]
    hosts: usize,
    /// Share of reports sent twice at once with the same idempotency key.
    #[arg(long, default_value_t = 0.1)]
    replay_fraction: f64,
    /// Threads of the load generator (1: a single-threaded runtime, which
    /// leaves the most CPU to the API and the database).
    #[arg(long, default_value_t = 1)]
    client_threads: usize,
    /// Load OpenStack Masakari's REST API too (`also`), or instead
    /// (`only`), with the same clients, hosts and replays, on SQLite.
    #[arg(long, value_enum, default_value_t = WithMasakari::Off)]
    masakari: WithMasakari,
    /// Timed reports for Masakari (its API sleeps up to 5 s before each).
    #[arg(long, default_value_t = 2_000)]
    masakari_count: usize,
    /// Untimed reports sent to Masakari first.
    #[arg(long, default_value_t = 200)]
    masakari_warmup: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Db {
    Sqlite,
    Postgres,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum IntakeDb {
    Sqlite,
    Postgres,
    Both,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("instanceha-bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("instanceha-bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn scenarios(names: &[String]) -> anyhow::Result<Vec<Scenario>> {
    let mut out = Vec::new();
    for name in names {
        if name == "all" {
            out.extend(NAMED.iter().filter_map(|n| Scenario::named(n)));
        } else {
            match Scenario::named(name) {
                Some(s) => out.push(s),
                None => bail!(
                    "unknown scenario {name:?} (try {}, one-host-N, hosts-HxN, or -bfv and -outageS[@T] after either)",
                    NAMED.join(", ")
                ),
            }
        }
    }
    Ok(out)
}

/// The recovery scenarios to run, and how.
type RecoveryPlan = (Vec<Scenario>, RecoveryTuning);
/// The intake databases to measure, and how.
type IntakePlan = (IntakeDb, IntakeTuning);

/// Runs the command; true if everything completed correctly.
async fn run(cli: Cli) -> anyhow::Result<bool> {
    let common = &cli.common;
    let (recovery, intake): (Option<RecoveryPlan>, Option<IntakePlan>) = match &cli.command {
        Command::Recovery(args) => (
            Some((scenarios(&args.scenarios)?, args.tuning.clone())),
            None,
        ),
        Command::Intake(args) => (None, Some((args.database, args.tuning.clone()))),
        Command::All { recovery, intake } => (
            Some((scenarios(&["all".to_owned()])?, recovery.clone())),
            Some((IntakeDb::Both, intake.clone())),
        ),
        Command::Real {
            runs,
            instances,
            bfv,
            stopped,
            masakari,
        } => {
            let settings = |dir| real::RealSettings {
                runs: *runs,
                instances: *instances,
                bfv: *bfv,
                stopped: *stopped,
                ours: masakari.ours(),
                masakari: masakari.theirs().then(|| (common.masakari(None), dir)),
            };
            return run_real(common, settings).await;
        }
        Command::Model {
            scenarios: names,
            seed,
        } => return print_models(names, *seed),
        Command::Soak(args) => return soak::command(common, args).await,
        Command::MasakariServe(_) => (None, None),
    };

    let binaries = Binaries::locate(
        common.bin_dir.as_deref(),
        common.sim_bin.clone(),
        common.engine_bin.clone(),
        common.api_bin.clone(),
    )?;
    let work = WorkDir::create(common)?;
    if let Command::MasakariServe(args) = &cli.command {
        serve_masakari(common, args, &work.root).await?;
        work.finish(common.keep);
        return Ok(true);
    }
    let bench = Bench {
        common,
        binaries: &binaries,
        root: &work.root,
    };
    let mut document = Document {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: Machine::read(),
        recovery: Vec::new(),
        intake: Vec::new(),
        masakari_recovery: Vec::new(),
        masakari_intake: Vec::new(),
        targets: Vec::new(),
    };
    let mut all_ok = true;
    if let Some((list, tuning)) = recovery {
        all_ok &= bench.recoveries(list, &tuning, &mut document).await?;
    }
    if let Some((which, tuning)) = intake {
        all_ok &= bench.intakes(which, &tuning, &mut document).await?;
    }
    document.judge();
    println!("{}", document.tables());
    if let Some(path) = &common.json {
        std::fs::write(path, serde_json::to_string_pretty(&document)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("instanceha-bench: figures written to {}", path.display());
    }
    work.finish(common.keep);
    Ok(all_ok)
}

/// `real`: the host failure on the real stack; `settings` given where
/// Masakari's files go.
async fn run_real(
    common: &Common,
    settings: impl FnOnce(PathBuf) -> real::RealSettings,
) -> anyhow::Result<bool> {
    let temp = tempfile::Builder::new()
        .prefix("instanceha-bench-real-")
        .tempdir()
        .context("creating the run directory")?;
    let dir = common
        .work_dir
        .clone()
        .unwrap_or_else(|| temp.path().to_owned())
        .join("masakari");
    let report = real::run(&settings(dir)).await;
    if common.keep {
        eprintln!(
            "instanceha-bench: run directory kept: {}",
            temp.keep().display()
        );
    }
    let report = report?;
    println!("{}", real::table(&report));
    if let Some(path) = &common.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(true)
}

/// `model`: Masakari's modelled figures for the scenarios `names` (every
/// named one when empty).
fn print_models(names: &[String], seed: u64) -> anyhow::Result<bool> {
    let names = if names.is_empty() {
        vec!["all".to_owned()]
    } else {
        names.to_vec()
    };
    let timing = TimingModel::default();
    for s in scenarios(&names)? {
        let m = masakari::model(&s, &timing, seed, None);
        println!("{}: {}", s.name, serde_json::to_string_pretty(&m)?);
    }
    Ok(true)
}

/// `masakari-serve`: Masakari against the given cloud until Ctrl-C or
/// SIGTERM.
async fn serve_masakari(
    common: &Common,
    args: &ServeArgs,
    root: &std::path::Path,
) -> anyhow::Result<()> {
    let cloud = CloudAccess {
        auth_url: args.auth_url.clone(),
        username: args.username.clone(),
        password: args.password.clone(),
        project_name: args.project_name.clone(),
        user_domain_name: args.user_domain_name.clone(),
        project_domain_name: args.project_domain_name.clone(),
        region: args.region.clone(),
        interface: args.interface.clone(),
    };
    let dir = root.join("masakari");
    let mut masakari = Masakari::start(
        &common.masakari(Some(args.api_port)),
        &cloud,
        &dir,
        !args.no_engine,
    )
    .await?;
    println!(
        "masakari {} listening on {} (files and logs in {}); Ctrl-C stops it",
        masakari.version,
        masakari.url,
        dir.display()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut alive = tokio::time::interval(Duration::from_secs(1));
    let outcome = loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break Ok(()),
            _ = term.recv() => break Ok(()),
            _ = alive.tick() => {
                if let Err(e) = masakari.check_alive() {
                    break Err(e);
                }
            }
        }
    };
    masakari.stop().await;
    outcome
}
