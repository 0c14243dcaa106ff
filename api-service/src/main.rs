//! The `instanceha-api` binary: parses flags, loads the settings and runs
//! the server until SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use instanceha_api::config::{Overrides, Settings};
use instanceha_api::server::Server;
use instanceha_runtime::exit::{self, Exit};

/// jemalloc, whose background threads give memory freed by ended work
/// (15,000 closed watch streams, say) back to the system within its
/// `dirty_decay_ms`, 10 s; glibc's malloc kept it in its per-thread arenas
/// (BENCHMARKS.md, watch stream memory).
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// instance-ha's API service: the notification API for monitoring agents
/// and operators, persistence, and dispatch of recoveries to the engine.
#[derive(Debug, Parser)]
#[command(name = "instanceha-api", version, after_help = exit::HELP)]
struct Flags {
    /// TOML configuration file (see api-service/instanceha-api.example.toml).
    #[arg(long, short, env = "INSTANCEHA_CONFIG", global = true)]
    config: Option<PathBuf>,
    /// Address of the public gRPC API (setting `listen`).
    #[arg(long, global = true)]
    listen: Option<SocketAddr>,
    /// Database URL (setting `database.url`).
    #[arg(long, global = true)]
    database_url: Option<String>,
    /// Log format, `text` or `json` (setting `log.format`).
    #[arg(long, global = true)]
    log_format: Option<String>,
    /// The engine's gRPC URL (setting `dispatch.engine_url`).
    #[arg(long, global = true)]
    engine_url: Option<String>,
    /// Check the settings, the files they name and that the database
    /// answers, then exit; changes nothing on disk (no database file, no
    /// migration, no token file).
    #[arg(long)]
    check: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The database's schema: the migrations as a step of an upgrade.
    Db {
        #[command(subcommand)]
        action: DbAction,
    },
}

#[derive(Debug, Subcommand)]
enum DbAction {
    /// Apply the migrations (under the lock the API's start takes, so
    /// replicas starting meanwhile wait), print those applied and exit.
    Sync,
    /// Print the applied and the latest migration; exit 5 when the
    /// database is behind. Reads only: an SQLite file is not created.
    Version,
}

/// The one-off command the flags ask for (`--check`, `db sync`, `db
/// version`), run to its exit code; `None`: serve.
fn one_off(
    check: bool,
    command: Option<&Command>,
    settings: &Settings,
    runtime: &tokio::runtime::Runtime,
) -> Option<Exit> {
    match (check, command) {
        (true, _) => Some(runtime.block_on(instanceha_api::commands::check(settings))),
        (false, Some(Command::Db { action })) => Some(runtime.block_on(async {
            match action {
                DbAction::Sync => instanceha_api::commands::db_sync(settings).await,
                DbAction::Version => instanceha_api::commands::db_version(settings).await,
            }
        })),
        (false, None) => None,
    }
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    let overrides = Overrides {
        listen: flags.listen,
        database_url: flags.database_url,
        log_format: flags.log_format,
        engine_url: flags.engine_url,
    };
    let settings = match Settings::load(flags.config.as_deref(), &overrides) {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("instanceha-api: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("instanceha-api: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(exit) = one_off(flags.check, flags.command.as_ref(), &settings, &runtime) {
        return exit.into();
    }
    let (code, telemetry) = runtime.block_on(async {
        let telemetry = match instanceha_runtime::telemetry::init(
            "instanceha-api",
            &settings.log,
            &settings.telemetry,
        ) {
            Ok(telemetry) => telemetry,
            Err(e) => {
                eprintln!("instanceha-api: {e}");
                return (ExitCode::from(2), None);
            }
        };
        for variable in instanceha_api::config::ignored_variables() {
            tracing::warn!(%variable, "ignored environment variable: it names no setting");
        }
        let server = match Server::bind(&settings).await {
            Ok(server) => server,
            Err(e) => {
                eprintln!("instanceha-api: {e}");
                let code = match &e {
                    instanceha_api::server::Error::Config(_) => Exit::Configuration,
                    instanceha_api::server::Error::Store(e) => instanceha_api::commands::exit_of(e),
                    _ => Exit::Failure,
                };
                return (code.into(), Some(telemetry));
            }
        };
        if let Some(addr) = settings.telemetry.prometheus_listen
            && let Err(e) = telemetry.serve_prometheus(addr, server.budget()).await
        {
            eprintln!("instanceha-api: cannot serve metrics on {addr}: {e}");
            return (ExitCode::FAILURE, Some(telemetry));
        }
        println!("instanceha-api listening on {}", server.local_addr());
        let code = match server.run(instanceha_runtime::shutdown::signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = %e, "stopped with an error");
                ExitCode::FAILURE
            }
        };
        (code, Some(telemetry))
    });
    if let Some(telemetry) = telemetry {
        // Flushes the exporters; it blocks, so outside the runtime.
        telemetry.shutdown();
    }
    code
}
