//! A scenario's `[settings]`: the simulated cloud's pace (durations in
//! simulated seconds), its failure probabilities and its message-bus
//! outages.

use serde::{Deserialize, Serialize};

use super::{Error, invalid};

/// Global settings. Durations are simulated seconds unless the name says otherwise.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Simulated seconds per real second.
    pub speed: f64,
    /// Seed for every random choice (ids, jitter, failure probabilities, fault probabilities).
    pub seed: u64,
    pub region: String,
    /// Nova's `[DEFAULT]service_down_time`.
    pub service_down_time: f64,
    /// Nova's `[DEFAULT]report_interval` (heartbeat period).
    pub report_interval: f64,
    /// How long a disable of an unreachable but still "up" compute blocks (Nova's RPC timeout).
    pub rpc_response_timeout: f64,
    /// Keystone token lifetime in REAL seconds (not scaled by speed).
    pub token_ttl_secs: u64,
    /// Nova's and Cinder's `[api]max_limit`.
    pub max_limit: usize,
    /// Concurrent rebuilds per destination host; further ones queue.
    pub rebuild_concurrency: usize,
    /// How long a rebuild may stall on a blocked volume attachment before failing.
    pub stale_attachment_timeout: f64,
    /// Nova's `[api]enable_instance_password` (adminPass in evacuate responses before 2.14).
    pub enable_instance_password: bool,
    /// Capacity of the request log ring buffer.
    pub request_log_capacity: usize,
    /// Whether Keystone's catalog lists Cinder (`block-storage`, `volumev3`): a cloud without
    /// it has only Keystone and Nova.
    pub block_storage: bool,
    /// An `instance-ha` endpoint (Masakari's service type) in Keystone's
    /// catalog, public and internal at this URL, as an operator registers
    /// Masakari's API or instance-ha's REST facade; none by default.
    pub instance_ha_url: Option<String>,
    /// An `instance-ha-grpc` endpoint in the catalog at this URL: instance-ha's gRPC API,
    /// where its CLI looks for it after a Keystone login; none by default.
    pub instance_ha_grpc_url: Option<String>,
    pub durations: Durations,
    pub failure_probability: FailureProbability,
    /// Outages of the message bus (RabbitMQ): an evacuation whose nova-conductor step falls in
    /// one is lost (see [`MessageBusOutage`]). The control API adds to the live world's list.
    pub message_bus_outages: Vec<MessageBusOutage>,
}

/// The message bus stopped for a while. An evacuation nova-conductor is scheduling when it
/// stops is lost as on Nova 34: the scheduling call times out, `rebuild_server` ends `Error`
/// `conductor_error_after_secs` later, and the migration stays `accepted` with no destination
/// and the server `rebuilding` on its failed host, for good. A request made during the outage
/// reaches the conductor when the bus is back; compute steps due during it wait for its end.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, try_from = "RawMessageBusOutage")]
pub struct MessageBusOutage {
    /// When it starts (simulated seconds since the scenario was loaded); `None`: at the next
    /// evacuate request, which is then in flight in nova-conductor when the bus stops.
    pub at_secs: Option<f64>,
    pub for_secs: f64,
    /// How long after the conductor's step its `rebuild_server` ends `Error` (MessagingTimeout:
    /// 60-100 s measured).
    pub conductor_error_after_secs: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMessageBusOutage {
    #[serde(default)]
    at_secs: Option<f64>,
    for_secs: f64,
    #[serde(default = "default_conductor_error_after")]
    conductor_error_after_secs: f64,
}

fn default_conductor_error_after() -> f64 {
    60.0
}

impl MessageBusOutage {
    /// An outage of `for_secs` from the next evacuate request, its losses ending Error 60 s
    /// after.
    pub fn from_next_evacuation(for_secs: f64) -> MessageBusOutage {
        MessageBusOutage {
            at_secs: None,
            for_secs,
            conductor_error_after_secs: default_conductor_error_after(),
        }
    }

    /// The same, starting at `at_secs`.
    pub fn at(mut self, at_secs: f64) -> MessageBusOutage {
        self.at_secs = Some(at_secs);
        self
    }

    /// The same, the conductor's `rebuild_server` ending `secs` after its step.
    pub fn conductor_error_after(mut self, secs: f64) -> MessageBusOutage {
        self.conductor_error_after_secs = secs;
        self
    }

    /// Checks it, naming the bad field.
    pub fn check(&self) -> Result<(), Error> {
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !positive(self.for_secs) {
            return Err(invalid("message_bus_outage.for_secs", "must be positive"));
        }
        if !(self.conductor_error_after_secs.is_finite() && self.conductor_error_after_secs >= 0.0)
        {
            return Err(invalid(
                "message_bus_outage.conductor_error_after_secs",
                "must be zero or more",
            ));
        }
        if self
            .at_secs
            .is_some_and(|at| !(at.is_finite() && at >= 0.0))
        {
            return Err(invalid(
                "message_bus_outage.at_secs",
                "must be zero or more",
            ));
        }
        Ok(())
    }
}

impl TryFrom<RawMessageBusOutage> for MessageBusOutage {
    type Error = Error;

    fn try_from(raw: RawMessageBusOutage) -> Result<Self, Error> {
        let outage = MessageBusOutage {
            at_secs: raw.at_secs,
            for_secs: raw.for_secs,
            conductor_error_after_secs: raw.conductor_error_after_secs,
        };
        outage.check()?;
        Ok(outage)
    }
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            speed: 1.0,
            seed: 0,
            region: "RegionOne".into(),
            service_down_time: 60.0,
            report_interval: 10.0,
            rpc_response_timeout: 60.0,
            token_ttl_secs: 3600,
            max_limit: 1000,
            rebuild_concurrency: 10,
            stale_attachment_timeout: 780.0,
            enable_instance_password: true,
            request_log_capacity: 10_000,
            block_storage: true,
            instance_ha_url: None,
            instance_ha_grpc_url: None,
            durations: Durations::default(),
            failure_probability: FailureProbability::default(),
            message_bus_outages: Vec::new(),
        }
    }
}

/// How long things take, in simulated seconds.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Durations {
    /// Added to every Nova and Cinder call.
    pub api_latency: f64,
    /// Added to every Keystone token request (a real Keystone took about 0.5 s).
    pub token_issue: f64,
    /// Conductor scheduling of an evacuation.
    pub schedule: f64,
    /// Resource claim on the destination (migration becomes pre-migrating).
    pub claim: f64,
    /// Re-attaching volumes (task_state rebuild_block_device_mapping).
    pub block_device_mapping: f64,
    /// Spawning the guest (task_state rebuild_spawning).
    pub spawn: f64,
    /// From task_state cleared to host change, and from host change to migration done.
    pub finish: f64,
    /// os-stop, and the power-off of an evacuated instance that ends stopped.
    pub stop: f64,
    /// os-start.
    pub start: f64,
    /// From powering a host on until its nova-compute heartbeats again.
    pub host_boot: f64,
    /// Relative jitter applied to each sampled duration (0.1 means ±10 %).
    pub jitter: f64,
}

impl Default for Durations {
    fn default() -> Durations {
        Durations {
            api_latency: 0.0,
            token_issue: 0.0,
            schedule: 1.0,
            claim: 0.5,
            block_device_mapping: 1.5,
            spawn: 3.0,
            finish: 0.2,
            stop: 2.0,
            start: 2.0,
            host_boot: 30.0,
            jitter: 0.0,
        }
    }
}

/// Probability of each evacuation failure mode, drawn per evacuation from the seeded generator.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct FailureProbability {
    pub scheduling: f64,
    pub claim: f64,
    pub compute: f64,
}
