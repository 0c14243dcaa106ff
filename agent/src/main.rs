//! The `instanceha-agent` binary: reads its settings, installs logging,
//! tracing and metrics, runs the agent until SIGTERM or SIGINT.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use instanceha_agent::{Agent, Settings, config};

/// instance-ha's monitoring agent: detects host, process and instance
/// failures, fences failed hosts and reports them to instanceha-api.
#[derive(Debug, Parser)]
#[command(name = "instanceha-agent", version)]
struct Cli {
    /// The TOML settings file (also INSTANCEHA_AGENT_CONFIG).
    #[arg(long, env = "INSTANCEHA_AGENT_CONFIG")]
    config: Option<PathBuf>,
    /// Check the settings and the files they name (credentials, keys,
    /// certificates, the process list) and exit; changes nothing on disk
    /// (the spool is made at the first start, not by a check).
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // An agent started with the defaults would watch, fence and report
    // for a host nobody configured: the settings file is required.
    let Some(path) = cli.config.as_deref() else {
        eprintln!(
            "instanceha-agent: no settings file: pass --config FILE or set INSTANCEHA_AGENT_CONFIG (see agent/instanceha-agent.example.toml)"
        );
        return ExitCode::from(2);
    };
    let settings = match Settings::load(Some(path)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("instanceha-agent: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("instanceha-agent: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if cli.check {
        // The API client's channel is built inside a runtime.
        let _entered = runtime.enter();
        return check(&settings);
    }
    runtime.block_on(run(settings))
}

/// `--check`: what the start reads, read; nothing started or written.
fn check(settings: &Settings) -> ExitCode {
    match Agent::check(settings) {
        Ok(lines) => {
            for line in lines {
                println!("instanceha-agent: {line}");
            }
            println!("instanceha-agent: settings ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("instanceha-agent: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run(settings: Settings) -> ExitCode {
    let telemetry = match instanceha_runtime::telemetry::init(
        "instanceha-agent",
        &settings.log,
        &settings.telemetry,
    ) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("instanceha-agent: {e}");
            return ExitCode::from(2);
        }
    };
    for name in config::environment().ignored_variables() {
        tracing::warn!(variable = %name, "environment variable names no setting: ignored");
    }
    let budget =
        instanceha_runtime::connections::ConnectionBudget::for_process(&settings.connections);
    if let Some(addr) = settings.telemetry.prometheus_listen
        && let Err(e) = telemetry.serve_prometheus(addr, &budget).await
    {
        tracing::error!(%addr, error = %e, "cannot serve metrics");
        return ExitCode::from(2);
    }
    let agent = match Agent::start(settings).await {
        Ok(agent) => agent,
        Err(e) => {
            tracing::error!(error = %e, "cannot start");
            eprintln!("instanceha-agent: {e}");
            return ExitCode::from(2);
        }
    };
    wait_for_signal().await;
    tracing::info!("stopping");
    agent.stop().await;
    let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
    ExitCode::SUCCESS
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
