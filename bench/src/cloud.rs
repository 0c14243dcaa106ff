//! The system under test, started for one run: `openstack-sim`,
//! `instanceha-engine` and `instanceha-api` as separate processes on
//! 127.0.0.1 (or the API alone, for intake), their configuration files and
//! logs in the run's directory, and gRPC channels to the API.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use instanceha_proto::v1 as pb;
use pb::segment_service_client::SegmentServiceClient;
use serde::Serialize;
use tonic::transport::{Channel, Endpoint};

use crate::config::Pacing;
use crate::db::{Backend, Database};
use crate::procs::{Binaries, Service, Usage};
use crate::recovery::RecoverySettings;
use crate::sim::SimControl;

/// Where the services write and what they log.
#[derive(Clone, Debug)]
pub struct RunDir {
    pub path: PathBuf,
    /// The services' log filter (`info` is the products' default).
    pub log_filter: String,
    /// Extra environment of the engine and of the API (experiments only).
    pub engine_env: Vec<(String, String)>,
    pub api_env: Vec<(String, String)>,
    /// Calls the simulator's request log keeps (saved to
    /// `sim-requests.json` after a run): every call when the run is kept.
    pub request_log_capacity: usize,
}

fn env_of(pairs: &[(String, String)]) -> Vec<(&str, String)> {
    pairs.iter().map(|(k, v)| (k.as_str(), v.clone())).collect()
}

/// The peak memory and CPU of each process of a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ProcessUsage {
    pub api: Option<Usage>,
    pub engine: Option<Usage>,
    pub sim: Option<Usage>,
}

/// The services of a recovery run.
pub struct Cloud {
    pub sim: Service,
    pub control: SimControl,
    pub engine: Service,
    pub api: Service,
    pub channel: Channel,
    _database: Database,
}

impl Cloud {
    /// Starts the simulator with the run's scenario, the engine against it
    /// and the API dispatching to the engine.
    pub async fn start(
        binaries: &Binaries,
        dir: &RunDir,
        options: &RecoverySettings,
    ) -> anyhow::Result<Self> {
        let (scenario, speed) = (&options.scenario, options.speed);
        let pacing = Pacing { speed };
        let (sim, control) = start_sim(
            binaries,
            dir,
            &scenario.sim_toml(
                &options.timing,
                speed,
                options.seed,
                dir.request_log_capacity,
            ),
        )
        .await?;

        let engine_file = dir.path.join("instanceha-engine.toml");
        write(
            &engine_file,
            // The link token made in the run's directory, read by the API.
            &format!(
                "state_dir = {:?}\n{}",
                dir.path,
                pacing.engine_toml(&control.auth_url(), &dir.log_filter)
            ),
        )?;
        let mut engine = Service::start(
            "instanceha-engine",
            &binaries.engine,
            &["--config".into(), engine_file.display().to_string()],
            &env_of(&dir.engine_env),
            dir.path.join("instanceha-engine.log"),
            "listening on",
        )
        .await?;
        engine.wait_serving().await?;

        let database = Database::create(&options.backend, &dir.path, "recovery")?;
        let api = start_api(binaries, dir, &pacing, &database, Some(&engine.addr)).await?;
        let channel = connect(&api.addr).await?;
        Ok(Self {
            sim,
            control,
            engine,
            api,
            channel,
            _database: database,
        })
    }

    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        self.sim.check_alive()?;
        self.engine.check_alive()?;
        self.api.check_alive()
    }

    /// Peak memory and CPU of the three processes so far.
    pub fn usage(&self) -> ProcessUsage {
        ProcessUsage {
            api: self.api.usage().ok(),
            engine: self.engine.usage().ok(),
            sim: self.sim.usage().ok(),
        }
    }

    /// Stops the processes; returns their final usage.
    pub async fn stop(self) -> ProcessUsage {
        ProcessUsage {
            api: self.api.stop().await.ok(),
            engine: self.engine.stop().await.ok(),
            sim: self.sim.stop().await.ok(),
        }
    }
}

/// The simulator with the scenario `toml` (written into the run
/// directory), and its control client.
pub async fn start_sim(
    binaries: &Binaries,
    dir: &RunDir,
    toml: &str,
) -> anyhow::Result<(Service, SimControl)> {
    let scenario_file = dir.path.join("scenario.toml");
    write(&scenario_file, toml)?;
    let sim = Service::start(
        "openstack-sim",
        &binaries.sim,
        &[
            "--scenario".into(),
            scenario_file.display().to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ],
        &[("RUST_LOG", dir.log_filter.clone())],
        dir.path.join("openstack-sim.log"),
        "listening on",
    )
    .await?;
    let control = SimControl::new(&sim.addr)?;
    Ok((sim, control))
}

/// The API alone, without dispatch (for intake).
pub struct ApiOnly {
    pub api: Service,
    pub database: Database,
}

impl ApiOnly {
    pub async fn start(
        binaries: &Binaries,
        dir: &RunDir,
        backend: &Backend,
        tag: &str,
    ) -> anyhow::Result<Self> {
        let pacing = Pacing { speed: 1.0 };
        let database = Database::create(backend, &dir.path, tag)?;
        let api = start_api(binaries, dir, &pacing, &database, None).await?;
        Ok(Self { api, database })
    }
}

async fn start_api(
    binaries: &Binaries,
    dir: &RunDir,
    pacing: &Pacing,
    database: &Database,
    engine: Option<&str>,
) -> anyhow::Result<Service> {
    let api_file = dir.path.join("instanceha-api.toml");
    write(
        &api_file,
        &format!(
            "state_dir = {:?}\n{}",
            dir.path,
            pacing.api_toml(&database.url, engine, &dir.log_filter)
        ),
    )?;
    let mut api = Service::start(
        "instanceha-api",
        &binaries.api,
        &["--config".into(), api_file.display().to_string()],
        &env_of(&dir.api_env),
        dir.path.join("instanceha-api.log"),
        "listening on",
    )
    .await?;
    api.wait_serving().await?;
    Ok(api)
}

/// A gRPC channel (one HTTP/2 connection) to the API.
pub async fn connect(addr: &str) -> anyhow::Result<Channel> {
    Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .connect()
        .await
        .with_context(|| format!("connecting to the API at {addr}"))
}

/// Registers a segment `name` (recovery method `auto`) through the API.
pub async fn create_segment(
    channel: Channel,
    name: String,
    description: Option<String>,
) -> anyhow::Result<pb::Segment> {
    Ok(SegmentServiceClient::new(channel)
        .create_segment(pb::CreateSegmentRequest {
            name,
            description,
            service_type: "COMPUTE".into(),
            recovery_method: pb::RecoveryMethod::Auto as i32,
            enabled: None,
            return_to_service: None,
        })
        .await
        .context("creating the segment")?
        .into_inner())
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}
