//! The world a scenario describes, built at simulated time zero: its
//! identities and flavors, Nova's control services, the hosts with their
//! heartbeat phases, the aggregates, the servers (created a second apart
//! before the start, each with its `create` action) and the volumes with
//! their attachments. Ids are drawn from the seeded generator in this
//! order, so that a scenario and a seed always make the same cloud.

use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};

use chrono::{DateTime, Utc};
use rand::{SeedableRng, rngs::StdRng};
use sha2::{Digest, Sha224};

use super::model::{
    self, ActionEvent, Aggregate, AttachStatus, Attachment, BlockDeviceMapping, Flavor, Host,
    Instance, InstanceAction, TaskState, VmState, Volume, power_state,
};
use super::{ControlService, World, connection_info, connector, new_uuid};
use crate::clock::{Clock, SimTime};
use crate::identity::Identity;
use crate::scenario::{self, AggregateSpec, HostSpec, InstanceSpec, Scenario, VolumeSpec};

impl World {
    /// Builds the world a scenario describes, at simulated time zero.
    pub fn new(scenario: &Scenario) -> Result<World, scenario::Error> {
        let ex = scenario.expand()?;
        let mut world = World::empty(&ex);
        let start = world.clock.wall(SimTime::ZERO);
        world.add_control_services();
        for (i, h) in ex.hosts.iter().enumerate() {
            world.add_host(i, h, start);
        }
        for (i, a) in ex.aggregates.iter().enumerate() {
            world.add_aggregate(i, a, start);
        }
        // servers: created one second apart, in scenario order, before the scenario starts
        let n = ex.instances.len();
        let mut name_to_id = HashMap::new();
        for (i, spec) in ex.instances.iter().enumerate() {
            let created = start - chrono::Duration::seconds((n - i) as i64 + 60);
            let id = world.add_server(spec, created);
            name_to_id.insert(spec.name.clone(), id);
            if spec.boot_from_volume {
                world.add_volume(&root_volume(spec), &name_to_id, created, true);
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

    /// The world of `ex`'s identities and flavors, with nothing else yet.
    fn empty(ex: &scenario::Expanded) -> World {
        let settings = ex.settings.clone();
        let mut rng = StdRng::seed_from_u64(settings.seed);
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
                extra_specs: f.extra_specs.clone(),
            })
            .collect();
        let clock = Clock::new(settings.speed);
        let images = vec![builtin_image(clock.wall(SimTime::ZERO))];
        World {
            clock,
            settings,
            rng,
            events: BinaryHeap::new(),
            next_event_seq: 0,
            identity,
            flavors,
            images,
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
        }
    }

    /// nova-scheduler and nova-conductor on the controller.
    fn add_control_services(&mut self) {
        for (i, binary) in ["nova-scheduler", "nova-conductor"].into_iter().enumerate() {
            let uuid = new_uuid(&mut self.rng);
            self.control_services.push(ControlService {
                id: i as u64 + 1,
                uuid,
                binary,
                host: "controller",
            });
        }
    }

    /// Host `i`: its nova-compute (service id `i + 3`, after the control
    /// services) and hypervisor, heartbeats in a phase of their own.
    fn add_host(&mut self, i: usize, h: &HostSpec, start: DateTime<Utc>) {
        let phase = (i as f64 * 3.7) % self.settings.report_interval;
        let service_uuid = new_uuid(&mut self.rng);
        let hypervisor_uuid = new_uuid(&mut self.rng);
        let ip = h.ip.clone().unwrap_or_else(|| {
            if i < 250 {
                format!("192.0.2.{}", i + 1)
            } else {
                format!("198.51.100.{}", (i - 250) % 250 + 1)
            }
        });
        self.host_index.insert(h.name.clone(), i);
        self.hosts.push(Host {
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
        self.usage.push((0, 0));
    }

    fn add_aggregate(&mut self, i: usize, a: &AggregateSpec, start: DateTime<Utc>) {
        let uuid = new_uuid(&mut self.rng);
        self.aggregates.push(Aggregate {
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

    /// The server `spec` describes, built at `created` on its host (whose
    /// usage it adds to), with its `create` action; its id.
    fn add_server(&mut self, spec: &InstanceSpec, created: DateTime<Utc>) -> String {
        let id = new_uuid(&mut self.rng);
        let image_id = new_uuid(&mut self.rng);
        let (project_id, user_id) = self.owner(spec);
        let flavor = self
            .flavors
            .iter()
            .find(|f| f.name == spec.flavor)
            .expect("validated flavor")
            .clone();
        let vm_state = VmState::parse(&spec.vm_state).expect("validated vm_state");
        let host_idx = self.host_index[&spec.host];
        self.usage[host_idx].0 += flavor.vcpus as u64;
        self.usage[host_idx].1 += flavor.ram_mb;
        self.instance_counter += 1;
        let fault = (vm_state == VmState::Error).then(|| model::Fault {
            code: 500,
            message: "Simulated failure before the scenario started".into(),
            details: String::new(),
            created,
        });
        let instance = Instance {
            id: id.clone(),
            name: spec.name.clone(),
            instance_name: format!("instance-{:08x}", self.instance_counter),
            project_id,
            user_id,
            flavor,
            image_id: (!spec.boot_from_volume).then_some(image_id),
            vm_state,
            task_state: spec.task_state.as_deref().and_then(TaskState::parse),
            power_state: initial_power_state(vm_state),
            metadata: metadata(spec),
            locked: spec.locked,
            locked_reason: spec.locked_reason.clone(),
            locked_by: spec.locked.then(|| "admin".to_string()),
            host: Some(spec.host.clone()),
            node: Some(self.hosts[host_idx].hypervisor_hostname.clone()),
            bdms: Vec::new(),
            fault,
            created,
            updated: created,
            launched_at: created + chrono::Duration::seconds(20),
            generation: 0,
        };
        self.actions
            .entry(id.clone())
            .or_default()
            .push(created_action(&instance));
        self.instances.insert(id.clone(), instance);
        self.instance_order.push(id.clone());
        id
    }

    /// The project and the user of a server: its user's, or the first of
    /// its project's users (a made-up user id if it has none).
    fn owner(&mut self, spec: &InstanceSpec) -> (String, String) {
        let project = self
            .identity
            .project_by_name(&spec.project)
            .expect("projects include every instance's")
            .clone();
        let user_id = match &spec.user {
            Some(name) => self
                .identity
                .user_by_name(name)
                .expect("validated")
                .id
                .clone(),
            None => self
                .identity
                .users
                .iter()
                .find(|u| u.project_id == project.id)
                .map(|u| u.id.clone())
                .unwrap_or_else(|| new_uuid(&mut self.rng).replace('-', "")),
        };
        (project.id, user_id)
    }

    /// The volume `spec` describes, created at `created`, attached to its
    /// servers (`servers`: id by name); `root`: a server's boot volume.
    fn add_volume(
        &mut self,
        spec: &VolumeSpec,
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
            self.attach_at_start(&mut volume, spec, &servers[server_name], created, root);
        }
        volume.status = match spec.attach_status.as_deref() {
            Some(stuck) => stuck.to_string(),
            None => volume.status_from_attachments().to_string(),
        };
        self.volumes.insert(id.clone(), volume);
        self.volume_order.push(id);
    }

    /// `volume` attached to the server `server_id` (with a stale
    /// attachment before it if `spec` asks), and the server's block device
    /// mapping of it.
    fn attach_at_start(
        &mut self,
        volume: &mut Volume,
        spec: &VolumeSpec,
        server_id: &str,
        created: DateTime<Utc>,
        root: bool,
    ) {
        let id = volume.id.clone();
        let server = &self.instances[server_id];
        let host = server.host.clone().expect("scenario servers have hosts");
        // an image-backed server's own disk is vda
        let index = server.bdms.len() + usize::from(server.image_id.is_some());
        let device = format!("/dev/vd{}", (b'a' + (index % 26) as u8) as char);
        let attachment_id = new_uuid(&mut self.rng);
        let status = spec
            .attach_status
            .as_deref()
            .and_then(AttachStatus::parse)
            .unwrap_or(AttachStatus::Attached);
        let attachment = |id: &str, status, at| Attachment {
            id: id.to_owned(),
            volume_id: volume.id.clone(),
            instance_id: Some(server_id.to_owned()),
            host_name: Some(host.clone()),
            attach_status: status,
            mode: "rw".into(),
            device: Some(device.clone()),
            connector: Some(connector(&host, &self.hosts[self.host_index[&host]].ip)),
            connection_info: Some(connection_info(&volume.id)),
            attached_at: Some(at),
            detached_at: None,
            created_at: at,
        };
        let current = attachment(&attachment_id, status, created);
        let stale = spec.stale_attachment.then(|| {
            // the backend still holds the host's session: an attachment Nova does not know
            let stale_id = new_uuid(&mut self.rng);
            let at = created - chrono::Duration::seconds(5);
            attachment(&stale_id, AttachStatus::Attached, at)
        });
        volume.attachments.push(current);
        self.attachment_volume
            .insert(attachment_id.clone(), id.clone());
        if let Some(stale) = stale {
            self.attachment_volume.insert(stale.id.clone(), id.clone());
            volume.attachments.insert(0, stale);
        }
        let bdm_uuid = new_uuid(&mut self.rng);
        let inst = self.instances.get_mut(server_id).expect("server exists");
        inst.bdms.push(BlockDeviceMapping {
            uuid: bdm_uuid,
            volume_id: id,
            attachment_id: Some(attachment_id),
            device,
            boot_index: root.then_some(0),
            delete_on_termination: false,
        });
    }
}

/// The boot volume of a server booted from volume.
fn root_volume(spec: &InstanceSpec) -> VolumeSpec {
    VolumeSpec {
        name: format!("{}-root", spec.name),
        size: spec.root_volume_size,
        multiattach: spec.root_volume_multiattach,
        bootable: true,
        project: Some(spec.project.clone()),
        attached_to: vec![spec.name.clone()],
        stale_attachment: spec.stale_attachment,
        attach_status: spec.root_attach_status.clone(),
        ..VolumeSpec::default()
    }
}

/// The image every simulated cloud has, as devstack uploads it: CirrOS,
/// its id derived from its name (drawing none from the seeded generator).
fn builtin_image(created: DateTime<Utc>) -> model::Image {
    let name = "cirros-0.6.3-x86_64-disk";
    model::Image {
        id: derived_uuid(&format!("image {name}")),
        name: name.to_owned(),
        size: 21_692_416,
        min_disk_gb: 0,
        min_ram_mb: 0,
        created: created - chrono::Duration::days(1),
    }
}

/// The power state Nova reports for a server in `vm_state`.
fn initial_power_state(vm_state: VmState) -> u8 {
    match vm_state {
        VmState::Active | VmState::Rescued | VmState::Resized => power_state::RUNNING,
        VmState::Paused => power_state::PAUSED,
        VmState::Suspended => power_state::SUSPENDED,
        VmState::Building | VmState::ShelvedOffloaded => power_state::NOSTATE,
        _ => power_state::SHUTDOWN,
    }
}

/// A server's metadata, `HA_Enabled` set as the scenario says.
fn metadata(spec: &InstanceSpec) -> BTreeMap<String, String> {
    let mut metadata = spec.metadata.clone();
    if let Some(ha) = spec.ha_enabled {
        metadata.insert(
            "HA_Enabled".into(),
            if ha { "True" } else { "False" }.into(),
        );
    }
    metadata
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
