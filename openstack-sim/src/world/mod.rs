//! The simulated cloud's state and its discrete-event time model: one `World` holds Keystone's,
//! Nova's and Cinder's data, and every timed change is an event applied lazily in time order.

pub mod disruptions;
pub mod evacuation;
pub mod model;
pub mod operations;
pub mod power;
pub mod snapshot;
pub mod stats;
pub mod volumes;

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};

use chrono::{DateTime, Utc};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::json;
use sha2::{Digest, Sha224};

use crate::clock::{Clock, SimTime};
use crate::identity::Identity;
use crate::scenario::{self, Scenario, Settings};
use evacuation::{EvacStep, Evacuation};
use model::{
    ActionEvent, Aggregate, AttachStatus, Attachment, BlockDeviceMapping, EvacuationFailure,
    Flavor, Host, Instance, InstanceAction, Migration, TaskState, VmState, Volume, power_state,
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

/// A UUID derived from `text`, for records made at start that must not
/// draw from the seeded generator (every later id would move).
fn derived_uuid(text: &str) -> String {
    let digest = Sha224::digest(text.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .to_string()
}

/// The `create` action every server Nova built has: the build on its
/// host, finished when it was launched (failed for one the scenario starts
/// in error).
fn created_action(inst: &Instance) -> InstanceAction {
    InstanceAction {
        action: "create".into(),
        instance_uuid: inst.id.clone(),
        request_id: format!("req-{}", derived_uuid(&format!("create {}", inst.id))),
        user_id: inst.user_id.clone(),
        project_id: inst.project_id.clone(),
        start_time: inst.created,
        updated_at: inst.launched_at,
        message: (inst.vm_state == VmState::Error).then(|| "Error".to_owned()),
        events: vec![ActionEvent {
            event: "compute__do_build_and_run_instance".into(),
            start_time: inst.created,
            finish_time: Some(inst.launched_at),
            result: Some(
                if inst.vm_state == VmState::Error {
                    "Error"
                } else {
                    "Success"
                }
                .into(),
            ),
            traceback: None,
            host: inst.host.clone(),
            details: None,
        }],
    }
}

impl World {
    /// Builds the world a scenario describes, at simulated time zero.
    pub fn new(scenario: &Scenario) -> Result<World, scenario::Error> {
        let ex = scenario.expand()?;
        let settings = ex.settings.clone();
        let mut rng = StdRng::seed_from_u64(settings.seed);
        let clock = Clock::new(settings.speed);
        let start = clock.wall(SimTime::ZERO);
        let mut extra_projects: Vec<String> =
            ex.instances.iter().map(|i| i.project.clone()).collect();
        extra_projects.extend(ex.volumes.iter().filter_map(|v| v.project.clone()));
        let identity = Identity::new(
            &ex.users,
            &ex.application_credentials,
            &extra_projects,
            settings.token_ttl_secs,
            &mut rng,
        );
        let flavors: Vec<Flavor> = ex
            .flavors
            .iter()
            .enumerate()
            .map(|(i, f)| Flavor {
                id: (i + 1).to_string(),
                name: f.name.clone(),
                vcpus: f.vcpus,
                ram_mb: f.ram_mb,
                disk_gb: f.disk_gb,
            })
            .collect();

        let mut world = World {
            clock,
            settings: settings.clone(),
            rng,
            events: BinaryHeap::new(),
            next_event_seq: 0,
            identity,
            flavors,
            hosts: Vec::new(),
            host_index: HashMap::new(),
            usage: Vec::new(),
            control_services: Vec::new(),
            aggregates: Vec::new(),
            instances: HashMap::new(),
            instance_order: Vec::new(),
            instance_pos: HashMap::new(),
            volumes: HashMap::new(),
            volume_order: Vec::new(),
            volume_pos: HashMap::new(),
            attachment_volume: HashMap::new(),
            migrations: Vec::new(),
            actions: HashMap::new(),
            evacuations: BTreeMap::new(),
            stalled: BTreeSet::new(),
            rebuild_slots: HashMap::new(),
            failures: HashMap::new(),
            frozen_power_ops: HashMap::new(),
            stall_counter: 0,
            instance_counter: 0,
        };

        for (i, binary) in ["nova-scheduler", "nova-conductor"].into_iter().enumerate() {
            let uuid = new_uuid(&mut world.rng);
            world.control_services.push(ControlService {
                id: i as u64 + 1,
                uuid,
                binary,
                host: "controller",
            });
        }
        let ri = settings.report_interval;
        for (i, h) in ex.hosts.iter().enumerate() {
            let phase = (i as f64 * 3.7) % ri;
            let service_uuid = new_uuid(&mut world.rng);
            let hypervisor_uuid = new_uuid(&mut world.rng);
            let ip = h.ip.clone().unwrap_or_else(|| {
                if i < 250 {
                    format!("192.0.2.{}", i + 1)
                } else {
                    format!("198.51.100.{}", (i - 250) % 250 + 1)
                }
            });
            world.host_index.insert(h.name.clone(), i);
            world.hosts.push(Host {
                name: h.name.clone(),
                hypervisor_hostname: h
                    .hypervisor_hostname
                    .clone()
                    .unwrap_or_else(|| format!("{}.example.org", h.name)),
                ip,
                service_id: i as u64 + 3,
                service_uuid,
                hypervisor_id: i as u64 + 1,
                hypervisor_uuid,
                vcpus: h.vcpus,
                ram_mb: h.ram_mb,
                disk_gb: h.disk_gb,
                enabled: h.enabled,
                disabled_reason: h.disabled_reason.clone(),
                forced_down: h.forced_down,
                powered_on: h.powered_on,
                heartbeat_origin: h.powered_on.then_some(SimTime::ZERO),
                heartbeat_phase: phase,
                last_heartbeat_before_off: Some(SimTime::ZERO),
                power_generation: 0,
                service_updated: start,
            });
            world.usage.push((0, 0));
        }
        for (i, a) in ex.aggregates.iter().enumerate() {
            let uuid = new_uuid(&mut world.rng);
            world.aggregates.push(Aggregate {
                id: i as u64 + 1,
                uuid,
                name: a.name.clone(),
                availability_zone: a.availability_zone.clone(),
                metadata: a.metadata.clone(),
                hosts: a.hosts.clone(),
                created_at: start,
                updated_at: None,
            });
        }

        // servers: created one second apart, in scenario order, before the scenario starts
        let n = ex.instances.len();
        let mut name_to_id = HashMap::new();
        for (i, spec) in ex.instances.iter().enumerate() {
            let id = new_uuid(&mut world.rng);
            let image_id = new_uuid(&mut world.rng);
            let created = start - chrono::Duration::seconds((n - i) as i64 + 60);
            let project = world
                .identity
                .project_by_name(&spec.project)
                .expect("projects include every instance's")
                .clone();
            let user_id = match &spec.user {
                Some(name) => world
                    .identity
                    .user_by_name(name)
                    .expect("validated")
                    .id
                    .clone(),
                None => world
                    .identity
                    .users
                    .iter()
                    .find(|u| u.project_id == project.id)
                    .map(|u| u.id.clone())
                    .unwrap_or_else(|| new_uuid(&mut world.rng).replace('-', "")),
            };
            let flavor = world
                .flavors
                .iter()
                .find(|f| f.name == spec.flavor)
                .expect("validated flavor")
                .clone();
            let vm_state = VmState::parse(&spec.vm_state).expect("validated vm_state");
            let power = match vm_state {
                VmState::Active | VmState::Rescued | VmState::Resized => power_state::RUNNING,
                VmState::Paused => power_state::PAUSED,
                VmState::Suspended => power_state::SUSPENDED,
                VmState::Building | VmState::ShelvedOffloaded => power_state::NOSTATE,
                _ => power_state::SHUTDOWN,
            };
            let mut metadata = spec.metadata.clone();
            if let Some(ha) = spec.ha_enabled {
                metadata.insert(
                    "HA_Enabled".into(),
                    if ha { "True" } else { "False" }.into(),
                );
            }
            let host_idx = world.host_index[&spec.host];
            world.usage[host_idx].0 += flavor.vcpus as u64;
            world.usage[host_idx].1 += flavor.ram_mb;
            world.instance_counter += 1;
            let fault = (vm_state == VmState::Error).then(|| model::Fault {
                code: 500,
                message: "Simulated failure before the scenario started".into(),
                details: String::new(),
                created,
            });
            let instance = Instance {
                id: id.clone(),
                name: spec.name.clone(),
                instance_name: format!("instance-{:08x}", world.instance_counter),
                project_id: project.id.clone(),
                user_id,
                flavor,
                image_id: (!spec.boot_from_volume).then_some(image_id),
                vm_state,
                task_state: spec.task_state.as_deref().and_then(TaskState::parse),
                power_state: power,
                metadata,
                locked: spec.locked,
                locked_reason: spec.locked_reason.clone(),
                locked_by: spec.locked.then(|| "admin".to_string()),
                host: Some(spec.host.clone()),
                node: Some(world.hosts[host_idx].hypervisor_hostname.clone()),
                bdms: Vec::new(),
                fault,
                created,
                updated: created,
                launched_at: created + chrono::Duration::seconds(20),
                generation: 0,
            };
            name_to_id.insert(spec.name.clone(), id.clone());
            world
                .actions
                .entry(id.clone())
                .or_default()
                .push(created_action(&instance));
            world.instances.insert(id.clone(), instance);
            world.instance_order.push(id);
            if spec.boot_from_volume {
                let vol = scenario::VolumeSpec {
                    name: format!("{}-root", spec.name),
                    size: spec.root_volume_size,
                    multiattach: spec.root_volume_multiattach,
                    bootable: true,
                    project: Some(spec.project.clone()),
                    attached_to: vec![spec.name.clone()],
                    stale_attachment: spec.stale_attachment,
                    attach_status: spec.root_attach_status.clone(),
                    ..scenario::VolumeSpec::default()
                };
                world.add_volume(&vol, &name_to_id, created, true);
            }
        }
        for spec in &ex.volumes {
            world.add_volume(
                spec,
                &name_to_id,
                start - chrono::Duration::seconds(30),
                false,
            );
        }
        world.instance_order.reverse();
        world.volume_order.reverse();
        world.reindex();
        Ok(world)
    }

    fn add_volume(
        &mut self,
        spec: &scenario::VolumeSpec,
        servers: &HashMap<String, String>,
        created: DateTime<Utc>,
        root: bool,
    ) {
        let id = new_uuid(&mut self.rng);
        let first_server = spec.attached_to.first().map(|n| servers[n].clone());
        let project_id = match (&spec.project, &first_server) {
            (Some(p), _) => self
                .identity
                .project_by_name(p)
                .expect("project")
                .id
                .clone(),
            (None, Some(server)) => self.instances[server].project_id.clone(),
            (None, None) => self
                .identity
                .project_by_name("demo")
                .expect("demo")
                .id
                .clone(),
        };
        let user_id = first_server
            .as_ref()
            .map(|s| self.instances[s].user_id.clone())
            .unwrap_or_default();
        let mut volume = Volume {
            id: id.clone(),
            name: spec.name.clone(),
            project_id,
            user_id,
            size: spec.size,
            multiattach: spec.multiattach,
            bootable: spec.bootable || root,
            volume_type: spec.volume_type.clone(),
            status: "available".into(),
            migration_status: None,
            attachments: Vec::new(),
            created_at: created,
            updated_at: created,
        };
        for server_name in &spec.attached_to {
            let server_id = servers[server_name].clone();
            let host = self.instances[&server_id]
                .host
                .clone()
                .expect("scenario servers have hosts");
            let server = &self.instances[&server_id];
            // an image-backed server's own disk is vda
            let index = server.bdms.len() + usize::from(server.image_id.is_some());
            let device = format!("/dev/vd{}", (b'a' + (index % 26) as u8) as char);
            let attachment_id = new_uuid(&mut self.rng);
            let status = spec
                .attach_status
                .as_deref()
                .and_then(AttachStatus::parse)
                .unwrap_or(AttachStatus::Attached);
            volume.attachments.push(Attachment {
                id: attachment_id.clone(),
                volume_id: id.clone(),
                instance_id: Some(server_id.clone()),
                host_name: Some(host.clone()),
                attach_status: status,
                mode: "rw".into(),
                device: Some(device.clone()),
                connector: Some(connector(&host, &self.hosts[self.host_index[&host]].ip)),
                connection_info: Some(connection_info(&id)),
                attached_at: Some(created),
                detached_at: None,
                created_at: created,
            });
            self.attachment_volume
                .insert(attachment_id.clone(), id.clone());
            if spec.stale_attachment {
                // the backend still holds the host's session: an attachment Nova does not know
                let stale_id = new_uuid(&mut self.rng);
                volume.attachments.insert(
                    0,
                    Attachment {
                        id: stale_id.clone(),
                        volume_id: id.clone(),
                        instance_id: Some(server_id.clone()),
                        host_name: Some(host.clone()),
                        attach_status: AttachStatus::Attached,
                        mode: "rw".into(),
                        device: Some(device.clone()),
                        connector: Some(connector(&host, &self.hosts[self.host_index[&host]].ip)),
                        connection_info: Some(connection_info(&id)),
                        attached_at: Some(created - chrono::Duration::seconds(5)),
                        detached_at: None,
                        created_at: created - chrono::Duration::seconds(5),
                    },
                );
                self.attachment_volume.insert(stale_id, id.clone());
            }
            let bdm_uuid = new_uuid(&mut self.rng);
            let inst = self.instances.get_mut(&server_id).expect("server exists");
            inst.bdms.push(BlockDeviceMapping {
                uuid: bdm_uuid,
                volume_id: id.clone(),
                attachment_id: Some(attachment_id),
                device,
                boot_index: root.then_some(0),
                delete_on_termination: false,
            });
        }
        volume.status = match spec.attach_status.as_deref() {
            Some(stuck) => stuck.to_string(),
            None => volume.status_from_attachments().to_string(),
        };
        self.volumes.insert(id.clone(), volume);
        self.volume_order.push(id);
    }

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
    use crate::scenario::{HostSpec, InstanceSpec};

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
