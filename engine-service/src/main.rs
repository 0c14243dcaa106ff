//! The `instanceha-engine` binary: parses flags, loads the settings and
//! credentials, and serves the Recover stream until SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use instanceha_engine::config::{Overrides, Settings};
use instanceha_engine::recovery::Engine;
use instanceha_engine::server::Server;
use instanceha_runtime::exit::{self, Exit};
use instanceha_runtime::telemetry::Telemetry;
use openstack_client::OpenStack;

/// instance-ha's recovery engine: runs host, process and instance recovery
/// workflows against OpenStack for instanceha-api.
#[derive(Debug, Parser)]
#[command(name = "instanceha-engine", version, after_help = exit::HELP)]
struct Flags {
    /// TOML configuration file (see engine-service/instanceha-engine.example.toml).
    #[arg(long, short, env = "INSTANCEHA_ENGINE_CONFIG")]
    config: Option<PathBuf>,
    /// Address of the Recover stream service (setting `listen`).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// A cloud of clouds.yaml to use (setting `openstack.cloud`; OS_CLOUD too).
    #[arg(long)]
    os_cloud: Option<String>,
    /// Log format, `text` or `json` (setting `log.format`).
    #[arg(long)]
    log_format: Option<String>,
    /// Check the settings, the files they name, and that Keystone answers
    /// and accepts the credentials (and the catalog has Nova), then exit;
    /// changes nothing on disk (no state directory, no link token).
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    let overrides = Overrides {
        listen: flags.listen,
        cloud: flags.os_cloud,
        log_format: flags.log_format,
    };
    let settings = match Settings::load(flags.config.as_deref(), &overrides) {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("instanceha-engine: {e}");
            return ExitCode::from(2);
        }
    };
    let env = std::env::vars().collect();
    let (credentials, service, client) = match settings.openstack_client(&env) {
        Ok(resolved) => resolved,
        Err(e) => {
            eprintln!("instanceha-engine: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("instanceha-engine: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if flags.check {
        return runtime
            .block_on(check(&settings, credentials, service, client))
            .into();
    }
    let result = runtime.block_on(async {
        let telemetry = match instanceha_runtime::telemetry::init(
            "instanceha-engine",
            &settings.log,
            &settings.telemetry,
        ) {
            Ok(telemetry) => telemetry,
            Err(e) => {
                eprintln!("instanceha-engine: {e}");
                return (ExitCode::from(2), None);
            }
        };
        for variable in instanceha_engine::config::ignored_variables() {
            tracing::warn!(%variable, "ignored environment variable: it names no setting");
        }
        let openstack = match OpenStack::new(credentials, service, client) {
            Ok(openstack) => openstack,
            Err(e) => {
                eprintln!("instanceha-engine: {e}");
                return (ExitCode::FAILURE, Some(telemetry));
            }
        };
        let engine = Engine::new(
            openstack,
            settings.recovery_settings(),
            settings.recovery.max_concurrent_instances_total,
        );
        let code = serve(&settings, engine, &telemetry).await;
        (code, Some(telemetry))
    });
    let (code, telemetry) = result;
    if let Some(telemetry) = telemetry {
        // Flushes the exporters; it blocks, so outside the runtime.
        telemetry.shutdown();
    }
    code
}

/// `--check`: the files, then OpenStack; each line printed, the first
/// failure ends it.
async fn check(
    settings: &Settings,
    credentials: openstack_client::credentials::Credentials,
    service: Option<openstack_client::credentials::Credentials>,
    client: openstack_client::ClientSettings,
) -> Exit {
    match instanceha_engine::check::files(settings) {
        Ok(lines) => lines
            .iter()
            .for_each(|l| println!("instanceha-engine: {l}")),
        Err(e) => {
            eprintln!("instanceha-engine: {e}");
            return Exit::Configuration;
        }
    }
    println!("instanceha-engine: settings and the files they name: ok");
    let openstack = match OpenStack::new(credentials, service, client) {
        Ok(openstack) => openstack,
        Err(e) => {
            eprintln!("instanceha-engine: {e}");
            return Exit::Configuration;
        }
    };
    match instanceha_engine::check::openstack(&openstack).await {
        Ok(lines) => {
            lines
                .iter()
                .for_each(|l| println!("instanceha-engine: {l}"));
            Exit::Success
        }
        Err((exit, reason)) => {
            eprintln!("instanceha-engine: {reason}");
            exit
        }
    }
}

/// Serves the Recover stream (and the metrics, when asked) until a signal:
/// the exit code says how it ended.
async fn serve(settings: &Settings, engine: Engine, telemetry: &Telemetry) -> ExitCode {
    let tls = match settings.tls.load("tls") {
        Ok(tls) => tls,
        Err(e) => {
            eprintln!("instanceha-engine: configuration: {e}");
            return ExitCode::from(2);
        }
    };
    let link_token = match settings.link_token() {
        Ok(token) => token,
        Err(e) => {
            eprintln!("instanceha-engine: {e}");
            return ExitCode::from(2);
        }
    };
    let server = match Server::bind(settings.listen, engine).await {
        Ok(server) => server
            .with_tls(tls)
            .with_link_token(link_token)
            .with_connections(&settings.connections)
            .with_drain_delay(settings.shutdown.drain_delay)
            .with_token_warm_up(settings.openstack.token_warmup_interval),
        Err(e) => {
            eprintln!("instanceha-engine: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(addr) = settings.telemetry.prometheus_listen
        && let Err(e) = telemetry.serve_prometheus(addr, server.budget()).await
    {
        eprintln!("instanceha-engine: cannot serve metrics on {addr}: {e}");
        return ExitCode::FAILURE;
    }
    println!("instanceha-engine listening on {}", server.local_addr());
    match server.run(instanceha_runtime::shutdown::signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "stopped with an error");
            ExitCode::FAILURE
        }
    }
}
