//! The simulator's control API (`/sim/...`, no authentication): power
//! hosts off, move the clock, and read the evacuation statistics and the
//! clock that maps simulated seconds to wall-clock time.

use anyhow::{Context as _, bail};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::json;

/// A client of one simulator.
#[derive(Clone)]
pub struct SimControl {
    base: String,
    http: reqwest::Client,
}

/// `GET /sim/clock`.
#[derive(Clone, Debug, Deserialize)]
pub struct Clock {
    pub sim_time: f64,
    pub speed: f64,
    pub wall_time: DateTime<Utc>,
}

impl Clock {
    /// The wall-clock time of a simulated moment (valid as long as the
    /// clock is not advanced after this reading).
    pub fn wall(&self, sim_secs: f64) -> DateTime<Utc> {
        let real = (sim_secs - self.sim_time) / self.speed;
        self.wall_time + chrono::Duration::microseconds((real * 1e6).round() as i64)
    }
}

/// One evacuation in `GET /sim/stats` (simulated seconds since the
/// scenario was loaded).
#[derive(Clone, Debug, Deserialize)]
pub struct EvacuationRecord {
    pub source: String,
    pub requested_at: f64,
}

/// `GET /sim/stats`.
#[derive(Clone, Debug, Deserialize)]
pub struct Stats {
    pub evacuations: Vec<EvacuationRecord>,
    pub makespan: Option<f64>,
    pub ideal_makespan: Option<f64>,
    pub done: usize,
    pub failed: usize,
    pub in_progress: usize,
}

impl Stats {
    /// A recovery's wall time (cloud s) over the ideal, if there is one.
    pub fn ratio_to_ideal(&self, wall_secs: f64) -> Option<f64> {
        self.ideal_makespan
            .filter(|i| *i > 0.0)
            .map(|ideal| wall_secs / ideal)
    }
}

/// A server in `GET /sim/state` (only what the benchmark checks).
#[derive(Clone, Debug, Deserialize)]
pub struct Server {
    pub id: String,
    pub name: String,
    /// None for a server booted from volume.
    pub image_id: Option<String>,
    pub vm_state: String,
    pub task_state: Option<String>,
    pub locked: bool,
    pub host: Option<String>,
}

/// `GET /sim/state` (only the servers).
#[derive(Clone, Debug, Deserialize)]
pub struct World {
    pub instances: Vec<Server>,
}

impl SimControl {
    /// `base` is what the simulator printed, e.g. `http://127.0.0.1:PORT`.
    pub fn new(base: &str) -> anyhow::Result<Self> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .no_proxy()
            .build()
            .context("building the HTTP client")?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            http,
        })
    }

    pub fn auth_url(&self) -> String {
        format!("{}/identity/v3", self.base)
    }

    async fn post(&self, path: &str, body: serde_json::Value) -> anyhow::Result<()> {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .with_context(|| format!("POST {path}"))?;
        if !response.status().is_success() {
            let status = response.status();
            bail!(
                "POST {path}: {status}: {}",
                response.text().await.unwrap_or_default()
            );
        }
        Ok(())
    }

    async fn get<T: for<'de> Deserialize<'de>>(&self, path: &str) -> anyhow::Result<T> {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .with_context(|| format!("GET {path}"))?;
        if !response.status().is_success() {
            bail!("GET {path}: {}", response.status());
        }
        response
            .json()
            .await
            .with_context(|| format!("GET {path}: unexpected body"))
    }

    /// Cuts the host's power: its heartbeats stop.
    pub async fn power_off(&self, host: &str) -> anyhow::Result<()> {
        self.post(&format!("/sim/hosts/{host}/power-off"), json!({}))
            .await
    }

    /// Gives the host its power back: it boots, and its nova-compute
    /// reports again.
    pub async fn power_on(&self, host: &str) -> anyhow::Result<()> {
        self.post(&format!("/sim/hosts/{host}/power-on"), json!({}))
            .await
    }

    /// Makes nova-api answer this share of its calls 503 (seeded), for
    /// good.
    pub async fn nova_errors(&self, share: f64) -> anyhow::Result<()> {
        let rule = json!({
            "service": "compute",
            "effect": {"kind": "error", "status": 503, "body": "html"},
            "probability": share,
        });
        self.post("/sim/faults", rule).await
    }

    /// Jumps simulated time forward.
    pub async fn advance(&self, secs: f64) -> anyhow::Result<()> {
        self.post("/sim/clock/advance", json!({ "secs": secs }))
            .await
    }

    /// The calls the installed fault rules struck (ended outage windows
    /// included).
    pub async fn fault_hits(&self) -> anyhow::Result<u64> {
        #[derive(serde::Deserialize)]
        struct Faults {
            faults: Vec<Hits>,
        }
        #[derive(serde::Deserialize)]
        struct Hits {
            hits: u64,
        }
        let faults: Faults = self.get("/sim/faults").await?;
        Ok(faults.faults.iter().map(|f| f.hits).sum())
    }

    /// Makes nova-api answer every call 503 for `secs` simulated seconds
    /// from now (an outage window).
    pub async fn nova_outage(&self, secs: f64) -> anyhow::Result<()> {
        let rule = json!({
            "service": "compute",
            "effect": {"kind": "error", "status": 503, "body": "html"},
            "for_secs": secs,
        });
        self.post("/sim/faults", rule).await
    }

    pub async fn clock(&self) -> anyhow::Result<Clock> {
        self.get("/sim/clock").await
    }

    pub async fn state(&self) -> anyhow::Result<World> {
        self.get("/sim/state").await
    }

    /// The request log (the last `request_log_capacity` calls), as JSON.
    pub async fn requests(&self) -> anyhow::Result<serde_json::Value> {
        self.get("/sim/requests?since=0").await
    }

    /// The simulator's last calls written to `path`, for whoever looks into
    /// a run (nothing if they cannot be read or written).
    pub async fn save_requests(&self, path: &std::path::Path) {
        if let Ok(log) = self.requests().await {
            let _ = std::fs::write(path, serde_json::to_string_pretty(&log).unwrap_or_default());
        }
    }

    pub async fn stats(&self) -> anyhow::Result<Stats> {
        self.get("/sim/stats").await
    }
}
