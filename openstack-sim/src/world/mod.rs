//! The simulated cloud's state and its discrete-event time model: one `World` holds Keystone's,
//! Nova's and Cinder's data, and every timed change is an event applied lazily in time order.

mod boot;
mod build;
pub mod disruptions;
pub mod evacuation;
pub mod model;
pub mod operations;
pub mod power;
pub mod snapshot;
pub mod stats;
pub mod volumes;

pub use boot::NewServer;

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};

use chrono::{DateTime, Utc};
use rand::{Rng, rngs::StdRng};
use serde_json::json;

use crate::clock::{Clock, SimTime};
use crate::identity::Identity;
use crate::scenario::Settings;
use evacuation::{EvacStep, Evacuation};
use model::{
    Aggregate, EvacuationFailure, Flavor, Host, Image, Instance, InstanceAction, Migration, Volume,
};

/// Why an operation on the world was refused; each API renders it in its own envelope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
}

impl Error {
    /// The HTTP status this error maps to.
    pub fn status(&self) -> u16 {
        match self {
            Error::BadRequest(_) => 400,
            Error::Forbidden(_) => 403,
            Error::NotFound(_) => 404,
            Error::Conflict(_) => 409,
        }
    }
}

/// A timed change, ordered by time then by scheduling order.
#[derive(Debug)]
struct Scheduled {
    at: SimTime,
    seq: u64,
    kind: EventKind,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

#[derive(Debug, Clone)]
pub(crate) enum EventKind {
    Evacuation {
        migration_id: u64,
        step: EvacStep,
    },
    StaleTimeout {
        migration_id: u64,
        stall: u64,
    },
    Power {
        instance_id: String,
        generation: u64,
        stop: bool,
    },
    HostBoot {
        host: usize,
        generation: u64,
    },
    /// A killed nova-compute process starts again (`generation`: the kill's).
    ComputeStart {
        host: usize,
        generation: u64,
    },
    /// nova-conductor's scheduling call of an evacuation, lost with the message bus, times out.
    ConductorTimeout {
        migration_id: u64,
    },
    /// A server booted with `POST /servers` is scheduled and spawned
    /// (`generation`: its create's).
    Boot {
        instance_id: String,
        generation: u64,
    },
}

/// Rebuilds running on, and queued for, one destination host.
#[derive(Debug, Default, Clone)]
pub(crate) struct RebuildSlots {
    pub active: usize,
    pub queue: VecDeque<u64>,
    /// Rebuilds nova-conductor cast to the host while its nova-compute was not running: they
    /// wait in its message queue and run when it starts.
    pub awaiting: VecDeque<u64>,
}

/// A non-compute Nova service (always up).
#[derive(Debug, Clone)]
pub(crate) struct ControlService {
    pub id: u64,
    pub uuid: String,
    pub binary: &'static str,
    pub host: &'static str,
}

/// The whole simulated cloud.
pub struct World {
    pub(crate) clock: Clock,
    pub(crate) settings: Settings,
    pub(crate) rng: StdRng,
    events: BinaryHeap<Reverse<Scheduled>>,
    next_event_seq: u64,
    pub(crate) identity: Identity,
    pub(crate) flavors: Vec<Flavor>,
    /// Glance's images, oldest first.
    pub(crate) images: Vec<Image>,
    pub(crate) hosts: Vec<Host>,
    pub(crate) host_index: HashMap<String, usize>,
    /// (vcpus, ram_mb) allocated per host index.
    pub(crate) usage: Vec<(u64, u64)>,
    pub(crate) control_services: Vec<ControlService>,
    pub(crate) aggregates: Vec<Aggregate>,
    pub(crate) instances: HashMap<String, Instance>,
    /// Server ids, newest first (Nova's default sort: created_at desc).
    pub(crate) instance_order: Vec<String>,
    pub(crate) instance_pos: HashMap<String, usize>,
    pub(crate) volumes: HashMap<String, Volume>,
    /// Volume ids, newest first.
    pub(crate) volume_order: Vec<String>,
    pub(crate) volume_pos: HashMap<String, usize>,
    /// Attachment id to volume id.
    pub(crate) attachment_volume: HashMap<String, String>,
    pub(crate) migrations: Vec<Migration>,
    pub(crate) actions: HashMap<String, Vec<InstanceAction>>,
    pub(crate) evacuations: BTreeMap<u64, Evacuation>,
    pub(crate) stalled: BTreeSet<u64>,
    pub(crate) rebuild_slots: HashMap<String, RebuildSlots>,
    pub(crate) failures: HashMap<String, EvacuationFailure>,
    /// Power operations whose compute was down when they were due, per host.
    pub(crate) frozen_power_ops: HashMap<String, Vec<(String, bool)>>,
    pub(crate) stall_counter: u64,
    pub(crate) instance_counter: u64,
}

/// Formats an id from 16 random bytes as a UUID (version 4 layout).
pub(crate) fn new_uuid(rng: &mut StdRng) -> String {
    let bytes: [u8; 16] = rng.random();
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .to_string()
}

impl World {
    fn reindex(&mut self) {
        self.instance_pos = self
            .instance_order
            .iter()
            .enumerate()
            .map(|(i, id)| (id.clone(), i))
            .collect();
        self.volume_pos = self
            .volume_order
            .iter()
            .enumerate()
            .map(|(i, id)| (id.clone(), i))
            .collect();
    }

    // ---- time ----

    /// Applies every event due by now and returns now.
    pub fn tick(&mut self) -> SimTime {
        let now = self.clock.now();
        self.run_until(now);
        now
    }

    /// Applies every event due by `t`, in time order, each at its own scheduled time.
    pub(crate) fn run_until(&mut self, t: SimTime) {
        while let Some(Reverse(next)) = self.events.peek() {
            if next.at > t {
                break;
            }
            let Reverse(event) = self.events.pop().expect("peeked");
            self.apply(event.at, event.kind);
        }
    }

    /// Jumps simulated time forward and applies what fell due.
    pub fn advance(&mut self, secs: f64) -> SimTime {
        self.tick();
        self.clock.advance(secs);
        self.tick()
    }

    /// When the next event is due, if any.
    pub fn next_event_at(&self) -> Option<SimTime> {
        self.events.peek().map(|Reverse(e)| e.at)
    }

    pub(crate) fn schedule(&mut self, at: SimTime, kind: EventKind) {
        self.next_event_seq += 1;
        self.events.push(Reverse(Scheduled {
            at,
            seq: self.next_event_seq,
            kind,
        }));
    }

    fn apply(&mut self, t: SimTime, kind: EventKind) {
        match kind {
            EventKind::Evacuation { migration_id, step } => {
                self.evacuation_step(t, migration_id, step)
            }
            EventKind::StaleTimeout {
                migration_id,
                stall,
            } => self.stale_timeout(t, migration_id, stall),
            EventKind::Power {
                instance_id,
                generation,
                stop,
            } => self.power_op_due(t, &instance_id, generation, stop),
            EventKind::HostBoot { host, generation } => self.host_booted(t, host, generation),
            EventKind::ComputeStart { host, generation } => {
                self.compute_restart_due(t, host, generation)
            }
            EventKind::ConductorTimeout { migration_id } => {
                self.conductor_timed_out(t, migration_id)
            }
            EventKind::Boot {
                instance_id,
                generation,
            } => self.boot_due(t, &instance_id, generation),
        }
    }

    /// A duration from the scenario with the seeded jitter applied.
    pub(crate) fn sample(&mut self, base: f64) -> f64 {
        let j = self.settings.durations.jitter;
        if j == 0.0 || base == 0.0 {
            base
        } else {
            base * (1.0 + self.rng.random_range(-j..=j))
        }
    }

    pub(crate) fn wall(&self, t: SimTime) -> DateTime<Utc> {
        self.clock.wall(t)
    }

    // ---- hosts and services ----

    pub(crate) fn host_idx(&self, name: &str) -> Option<usize> {
        self.host_index.get(name).copied()
    }

    /// The last heartbeat of a host's nova-compute at `t`.
    pub(crate) fn last_heartbeat(&self, idx: usize, t: SimTime) -> Option<SimTime> {
        let host = &self.hosts[idx];
        match host.heartbeat_origin {
            Some(origin) if host.powered_on && origin <= t => {
                let first = origin.plus_secs(host.heartbeat_phase);
                if t < first {
                    Some(origin)
                } else {
                    let ri = self.settings.report_interval;
                    let beats = (t.secs_since(first) / ri).floor();
                    Some(first.plus_secs(beats * ri))
                }
            }
            _ => host.last_heartbeat_before_off,
        }
    }

    /// Nova's `service_is_up`: not forced down and a heartbeat within service_down_time.
    pub(crate) fn service_is_up(&self, idx: usize, t: SimTime) -> bool {
        if self.hosts[idx].forced_down {
            return false;
        }
        self.last_heartbeat(idx, t)
            .is_some_and(|hb| t.secs_since(hb) <= self.settings.service_down_time)
    }

    /// The compute process is running (powered on and booted): it acts on RPCs.
    pub(crate) fn compute_alive(&self, idx: usize, t: SimTime) -> bool {
        let host = &self.hosts[idx];
        host.powered_on && host.heartbeat_origin.is_some_and(|o| o <= t)
    }

    /// `host_status` as Nova computes it.
    pub(crate) fn host_status(&self, host: Option<&str>, t: SimTime) -> &'static str {
        let Some(idx) = host.and_then(|h| self.host_idx(h)) else {
            return "";
        };
        let h = &self.hosts[idx];
        if h.forced_down {
            "DOWN"
        } else if !h.enabled {
            "MAINTENANCE"
        } else if self.service_is_up(idx, t) {
            "UP"
        } else {
            "UNKNOWN"
        }
    }

    /// Servers per host, newest first, in one pass.
    pub(crate) fn servers_by_host(&self) -> HashMap<&str, Vec<&Instance>> {
        let mut by_host: HashMap<&str, Vec<&Instance>> = HashMap::new();
        for id in &self.instance_order {
            let inst = &self.instances[id];
            if let Some(host) = inst.host.as_deref() {
                by_host.entry(host).or_default().push(inst);
            }
        }
        by_host
    }

    /// The availability zone of a host (its aggregates' zone, else "nova").
    pub(crate) fn host_zone(&self, host: &str) -> String {
        self.aggregates
            .iter()
            .find(|a| a.availability_zone.is_some() && a.hosts.iter().any(|h| h == host))
            .and_then(|a| a.availability_zone.clone())
            .unwrap_or_else(|| "nova".into())
    }

    /// A usable snapshot of a connector for a host.
    pub(crate) fn connector_for(&self, host: &str) -> serde_json::Value {
        let ip = self
            .host_idx(host)
            .map(|i| self.hosts[i].ip.clone())
            .unwrap_or_default();
        connector(host, &ip)
    }
}

pub(crate) fn connector(host: &str, ip: &str) -> serde_json::Value {
    json!({
        "host": host,
        "ip": ip,
        "initiator": format!("iqn.1994-05.com.redhat:{host}"),
        "platform": "x86_64",
        "os_type": "linux",
        "multipath": false,
    })
}

pub(crate) fn connection_info(volume_id: &str) -> serde_json::Value {
    json!({
        "driver_volume_type": "iscsi",
        "data": {
            "target_discovered": false,
            "target_iqn": format!("iqn.2010-10.org.openstack:volume-{volume_id}"),
            "target_portal": "192.0.2.250:3260",
            "target_lun": 1,
            "volume_id": volume_id,
            "access_mode": "rw",
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{HostSpec, InstanceSpec, Scenario};

    fn world(speed: f64) -> World {
        let scenario = Scenario::builder()
            .speed(speed)
            .host(HostSpec::new("c1"))
            .host(HostSpec::new("c2"))
            .instance(InstanceSpec::new("a", "c1"))
            .instance(InstanceSpec::new("b", "c1").stale_attachment())
            .build()
            .unwrap();
        World::new(&scenario).unwrap()
    }

    #[test]
    fn newest_server_is_listed_first() {
        let w = world(1.0);
        assert_eq!(w.instances[&w.instance_order[0]].name, "b");
        assert_eq!(w.instance_pos[&w.instance_order[1]], 1);
    }

    #[test]
    fn powered_off_host_reads_down_after_service_down_time() {
        let mut w = world(1.0);
        let t0 = w.tick();
        assert!(w.service_is_up(0, t0));
        w.power_off("c1").unwrap();
        let t = w.tick();
        assert!(
            w.service_is_up(0, t),
            "still counts as up right after the power cut"
        );
        w.advance(61.0);
        let t = w.tick();
        assert!(!w.service_is_up(0, t));
        assert_eq!(w.host_status(Some("c1"), t), "UNKNOWN");
        assert!(w.service_is_up(1, t));
        w.hosts[0].forced_down = true;
        assert_eq!(w.host_status(Some("c1"), t), "DOWN");
    }

    #[test]
    fn stale_attachment_volume_has_two_attachments_and_the_bdm_references_one() {
        let w = world(1.0);
        let b = w.instances.values().find(|i| i.name == "b").unwrap();
        let bdm = &b.bdms[0];
        let vol = &w.volumes[&bdm.volume_id];
        assert_eq!(vol.attachments.len(), 2);
        assert_eq!(vol.status, "in-use");
        assert!(
            vol.attachments
                .iter()
                .any(|a| Some(&a.id) == bdm.attachment_id.as_ref())
        );
        assert!(
            vol.attachments
                .iter()
                .any(|a| Some(&a.id) != bdm.attachment_id.as_ref())
        );
    }

    #[test]
    fn the_same_seed_builds_the_same_ids() {
        let a = world(1.0);
        let b = world(1.0);
        assert_eq!(a.instance_order, b.instance_order);
        assert_eq!(a.hosts[1].service_uuid, b.hosts[1].service_uuid);
    }
}
