//! The `openstack-sim` binary: serves a simulated OpenStack cloud from a scenario file until
//! SIGINT or SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use openstack_sim::{Scenario, Sim};

/// A simulated OpenStack cloud (Keystone v3, Nova, Cinder v3) with fault injection.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Scenario file (TOML, or JSON when it ends in .json); the built-in small one when absent.
    #[arg(long, env = "OPENSTACK_SIM_SCENARIO")]
    scenario: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, env = "OPENSTACK_SIM_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Override the scenario's speed factor (simulated seconds per real second).
    #[arg(long)]
    speed: Option<f64>,
    /// Override the scenario's seed.
    #[arg(long)]
    seed: Option<u64>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Colours only on a terminal, and not under NO_COLOR: a log written
    // to a file or a pipe holds no escape codes.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let mut scenario = match &args.scenario {
        Some(path) => Scenario::from_path(path)
            .with_context(|| format!("loading scenario {}", path.display()))?,
        None => Scenario::small(),
    };
    if let Some(speed) = args.speed {
        scenario.settings.speed = speed;
    }
    if let Some(seed) = args.seed {
        scenario.settings.seed = seed;
    }
    scenario.validate().context("validating scenario")?;
    let sim = Sim::start(scenario.clone(), args.listen).await?;
    let snapshot = sim.snapshot();
    println!("openstack-sim listening on {}", sim.base_url());
    println!("  auth_url:   {}", sim.auth_url());
    println!("  compute:    {}", sim.compute_url());
    println!("  control:    {}/sim/state", sim.base_url());
    println!(
        "  world:      {} hosts, {} servers, {} volumes, speed {}x, seed {}",
        snapshot.hosts.len(),
        snapshot.instances.len(),
        snapshot.volumes.len(),
        scenario.settings.speed,
        scenario.settings.seed
    );
    for user in scenario.expand_users() {
        println!(
            "  user:       {} / {} (project {}, roles {})",
            user.name,
            user.password,
            user.project,
            user.roles.join(",")
        );
    }
    for cred in &snapshot.application_credentials {
        let secret = scenario
            .application_credential_secret(&cred.id)
            .unwrap_or_default();
        println!(
            "  app cred:   id {} secret {} ({})",
            cred.id, secret, cred.name
        );
    }

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    println!("openstack-sim stopping");
    sim.shutdown().await;
    Ok(())
}
