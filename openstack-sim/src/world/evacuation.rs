//! Evacuation as Nova performs it: API checks, conductor scheduling, the destination's claim,
//! volume re-attachment (which a stale or stuck attachment stalls), spawn, host change and the
//! migration record, with injectable failures, a per-host rebuild limit and benchmark statistics.

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::model::{
    ActionEvent, EvacuationFailure, Fault, InstanceAction, Migration, MigrationStatus, TaskState,
    VmState, power_state,
};
use super::{Error, EventKind, World, new_uuid};
use crate::clock::SimTime;
use crate::identity::Caller;

/// The steps an evacuation's timed events drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EvacStep {
    /// nova-conductor gets a request whose cast waited for the message bus.
    Received,
    Scheduled,
    Claimed,
    BlockDevicesDone,
    Spawned,
    PoweredOff,
    HostChanged,
    Done,
}

/// Where an evacuation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvacuationPhase {
    Scheduling,
    Queued,
    Claiming,
    /// Waiting for a blocking volume attachment on the source host to be cleared.
    Stalled,
    BlockDeviceMapping,
    Spawning,
    PoweringOff,
    Finishing,
    Done,
    Failed,
    /// nova-conductor dropped it (the message bus went away while it scheduled): Nova's records
    /// stay as they were, for good.
    Lost,
}

/// The parts of a request the API validated.
#[derive(Debug, Clone, Default)]
pub struct EvacuateRequest {
    pub host: Option<String>,
    /// Skip the scheduler (2.29–2.67 `force`, or any host before 2.29).
    pub force: bool,
    pub admin_pass: Option<String>,
    /// The server should end stopped (2.95+) unless it was in error.
    pub stop_unless_error: bool,
}

/// Sampled durations of one evacuation (simulated seconds).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvacuationDurations {
    pub schedule: f64,
    pub claim: f64,
    pub block_device_mapping: f64,
    pub spawn: f64,
    pub stop: f64,
    pub finish: f64,
}

/// The running state of one evacuation, keyed by its migration id.
#[derive(Debug, Clone)]
pub(crate) struct Evacuation {
    pub migration_id: u64,
    pub instance_id: String,
    pub source: String,
    pub dest: Option<String>,
    pub requested_host: Option<String>,
    pub forced: bool,
    pub target_stopped: bool,
    pub failure: Option<EvacuationFailure>,
    pub phase: EvacuationPhase,
    pub requested_at: SimTime,
    pub scheduled_at: Option<SimTime>,
    pub rebuild_started_at: Option<SimTime>,
    pub done_at: Option<SimTime>,
    pub failed_at: Option<SimTime>,
    pub stalled_since: Option<SimTime>,
    pub stall_id: u64,
    pub stalled_secs: f64,
    pub durations: EvacuationDurations,
    pub request_id: String,
    /// The destination's compute died mid-rebuild: nothing more happens until it restarts.
    pub frozen: bool,
    pub error: Option<String>,
}

pub(crate) fn generated_password(world: &mut World) -> String {
    const CHARS: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    (0..12)
        .map(|_| CHARS[world.rng.random_range(0..CHARS.len())] as char)
        .collect()
}

impl World {
    /// `POST /servers/{id}/action {"evacuate": ...}` after body validation. Returns the admin
    /// password to report (when the microversion reports one).
    pub fn evacuate(
        &mut self,
        caller: &Caller,
        instance_id: &str,
        req: EvacuateRequest,
        request_id: &str,
    ) -> Result<String, Error> {
        let t = self.tick();
        let inst = self.instances.get(instance_id).ok_or_else(|| {
            Error::NotFound(format!("Instance {instance_id} could not be found."))
        })?;
        if let Some(host) = &req.host {
            if self.host_idx(host).is_none() {
                return Err(Error::NotFound(format!("Compute host {host} not found.")));
            }
            if inst.host.as_deref() == Some(host.as_str()) {
                return Err(Error::BadRequest(
                    "The target host can't be the same one.".into(),
                ));
            }
        }
        if !matches!(
            inst.vm_state,
            VmState::Active | VmState::Stopped | VmState::Error
        ) {
            return Err(Error::Conflict(format!(
                "Cannot 'evacuate' instance {instance_id} while it is in vm_state {}",
                inst.vm_state
            )));
        }
        if let Some(task) = inst.task_state {
            return Err(Error::Conflict(format!(
                "Cannot 'evacuate' instance {instance_id} while it is in task_state {task}"
            )));
        }
        let source = inst
            .host
            .clone()
            .ok_or_else(|| Error::Conflict(format!("Instance {instance_id} is not ready")))?;
        let source_idx = self.host_idx(&source).expect("instance hosts exist");
        if self.service_is_up(source_idx, t) {
            return Err(Error::BadRequest(format!(
                "Compute service of {source} is still in use."
            )));
        }

        let orig_vm = inst.vm_state;
        let target_stopped =
            orig_vm == VmState::Stopped || (req.stop_unless_error && orig_vm != VmState::Error);
        let (user_id, project_id) = (inst.user_id.clone(), inst.project_id.clone());
        let source_node = inst.node.clone().unwrap_or_default();
        let wall = self.wall(t);

        let migration_id = self.migrations.len() as u64 + 1;
        let uuid = new_uuid(&mut self.rng);
        self.migrations.push(Migration {
            id: migration_id,
            uuid,
            instance_uuid: instance_id.into(),
            migration_type: "evacuation".into(),
            status: MigrationStatus::Accepted,
            source_compute: source.clone(),
            source_node,
            dest_compute: req.host.clone(),
            dest_node: None,
            dest_host: None,
            user_id,
            project_id,
            created_at: wall,
            updated_at: None,
        });
        // the cast to nova-conductor waits for a message bus that is down: its event starts
        // when the conductor gets it
        let reaches_conductor = self.cast_to_conductor(t);
        self.actions
            .entry(instance_id.into())
            .or_default()
            .push(InstanceAction {
                action: "evacuate".into(),
                instance_uuid: instance_id.into(),
                request_id: request_id.into(),
                user_id: caller.user_id.clone(),
                project_id: caller.project_id.clone(),
                start_time: wall,
                updated_at: wall,
                message: None,
                events: if reaches_conductor == t {
                    vec![conductor_event(wall)]
                } else {
                    Vec::new()
                },
            });
        let inst = self.instances.get_mut(instance_id).expect("checked");
        inst.task_state = Some(TaskState::Rebuilding);
        inst.updated = wall;
        inst.generation += 1;

        let d = self.settings.durations.clone();
        let durations = EvacuationDurations {
            schedule: self.sample(d.schedule),
            claim: self.sample(d.claim),
            block_device_mapping: self.sample(d.block_device_mapping),
            spawn: self.sample(d.spawn),
            stop: self.sample(d.stop),
            finish: self.sample(d.finish),
        };
        let failure = self
            .failures
            .remove(instance_id)
            .or_else(|| self.draw_failure());
        let admin_pass = req
            .admin_pass
            .clone()
            .unwrap_or_else(|| generated_password(self));
        let (at, step) = if reaches_conductor == t {
            (t.plus_secs(durations.schedule), EvacStep::Scheduled)
        } else {
            (reaches_conductor, EvacStep::Received)
        };
        self.schedule(at, EventKind::Evacuation { migration_id, step });
        self.evacuations.insert(
            migration_id,
            Evacuation {
                migration_id,
                instance_id: instance_id.into(),
                source: source.clone(),
                dest: None,
                requested_host: req.host.clone(),
                forced: req.force && req.host.is_some(),
                target_stopped,
                failure,
                phase: EvacuationPhase::Scheduling,
                requested_at: t,
                scheduled_at: None,
                rebuild_started_at: None,
                done_at: None,
                failed_at: None,
                stalled_since: None,
                stall_id: 0,
                stalled_secs: 0.0,
                durations,
                request_id: request_id.into(),
                frozen: false,
                error: None,
            },
        );
        tracing::info!(
            instance = instance_id,
            source = %source,
            migration_id,
            sim_time = t.as_secs_f64(),
            "evacuation accepted"
        );
        Ok(admin_pass)
    }

    fn draw_failure(&mut self) -> Option<EvacuationFailure> {
        let p = self.settings.failure_probability.clone();
        if p.scheduling == 0.0 && p.claim == 0.0 && p.compute == 0.0 {
            return None;
        }
        let x: f64 = self.rng.random();
        if x < p.scheduling {
            Some(EvacuationFailure::Scheduling)
        } else if x < p.scheduling + p.claim {
            Some(EvacuationFailure::Claim)
        } else if x < p.scheduling + p.claim + p.compute {
            Some(EvacuationFailure::Compute)
        } else {
            None
        }
    }

    /// Makes the next evacuation of a server fail this way (None clears it).
    pub fn set_evacuation_failure(
        &mut self,
        instance_id: &str,
        failure: Option<EvacuationFailure>,
    ) -> Result<(), Error> {
        if !self.instances.contains_key(instance_id) {
            return Err(Error::NotFound(format!(
                "Instance {instance_id} could not be found."
            )));
        }
        match failure {
            Some(f) => self.failures.insert(instance_id.into(), f),
            None => self.failures.remove(instance_id),
        };
        Ok(())
    }

    pub(crate) fn evacuation_step(&mut self, t: SimTime, migration_id: u64, step: EvacStep) {
        let Some(evac) = self.evacuations.get(&migration_id) else {
            return;
        };
        if evac.frozen
            || matches!(
                evac.phase,
                EvacuationPhase::Done | EvacuationPhase::Failed | EvacuationPhase::Lost
            )
        {
            return;
        }
        if let Some(outage) = self.bus_outage_at(t) {
            if step == EvacStep::Scheduled {
                // the scheduling call nova-conductor makes meets the outage
                self.conductor_call_lost(t, migration_id, &outage);
            } else {
                // the compute's next write waits for the bus
                self.schedule(outage.end, EventKind::Evacuation { migration_id, step });
            }
            return;
        }
        if !self.instances.contains_key(&evac.instance_id) {
            self.fail_evacuation(
                t,
                migration_id,
                MigrationStatus::Failed,
                "Instance was deleted",
            );
            return;
        }
        if !matches!(step, EvacStep::Received | EvacStep::Scheduled) {
            let dest = evac.dest.clone().expect("a destination once scheduled");
            let idx = self.host_idx(&dest).expect("known host");
            if !self.compute_alive(idx, t) {
                // its nova-compute died under it: frozen for good
                self.evacuations
                    .get_mut(&migration_id)
                    .expect("present")
                    .frozen = true;
                tracing::warn!(migration_id, dest = %dest, "rebuild frozen on a dead destination");
                return;
            }
        }
        if let Some(expected) = expected_task_state(step)
            && self.instances[&evac.instance_id].task_state != Some(expected)
        {
            self.unexpected_task_state(t, migration_id, step);
            return;
        }
        match step {
            EvacStep::Received => self.on_received(t, migration_id),
            EvacStep::Scheduled => self.on_scheduled(t, migration_id),
            EvacStep::Claimed => self.on_claimed(t, migration_id),
            EvacStep::BlockDevicesDone => self.on_block_devices_done(t, migration_id),
            EvacStep::Spawned => self.on_spawned(t, migration_id),
            EvacStep::PoweredOff => self.on_powered_off(t, migration_id),
            EvacStep::HostChanged => self.on_host_changed(t, migration_id),
            EvacStep::Done => self.on_done(t, migration_id),
        }
    }

    fn pick_destination(&self, t: SimTime, evac: &Evacuation) -> Option<String> {
        let inst = &self.instances[&evac.instance_id];
        let (vcpus, ram) = (inst.flavor.vcpus as u64, inst.flavor.ram_mb);
        let fits = |idx: usize| {
            let h = &self.hosts[idx];
            let (used_cpu, used_ram) = self.usage[idx];
            // like Nova's ComputeFilter: a dead host still counts as up until its heartbeat
            // is stale, and a rebuild sent there gets stuck
            h.enabled
                && self.service_is_up(idx, t)
                && h.name != evac.source
                && used_cpu + vcpus <= h.vcpus as u64
                && used_ram + ram <= h.ram_mb
        };
        if let Some(host) = &evac.requested_host {
            let idx = self.host_idx(host)?;
            if evac.forced {
                return Some(host.clone());
            }
            return fits(idx).then(|| host.clone());
        }
        (0..self.hosts.len())
            .filter(|&i| fits(i))
            .max_by(|&a, &b| {
                let free = |i: usize| self.hosts[i].ram_mb - self.usage[i].1;
                free(a)
                    .cmp(&free(b))
                    .then_with(|| self.hosts[b].name.cmp(&self.hosts[a].name))
            })
            .map(|i| self.hosts[i].name.clone())
    }

    fn on_received(&mut self, t: SimTime, migration_id: u64) {
        let wall = self.wall(t);
        let e = &self.evacuations[&migration_id];
        let (instance_id, request_id) = (e.instance_id.clone(), e.request_id.clone());
        let schedule = e.durations.schedule;
        if let Some(action) = self.action_mut(&instance_id, &request_id) {
            action.events.push(conductor_event(wall));
            action.updated_at = wall;
        }
        self.schedule(
            t.plus_secs(schedule),
            EventKind::Evacuation {
                migration_id,
                step: EvacStep::Scheduled,
            },
        );
    }

    fn on_scheduled(&mut self, t: SimTime, migration_id: u64) {
        let evac = self.evacuations[&migration_id].clone();
        let dest = if evac.failure == Some(EvacuationFailure::Scheduling) {
            None
        } else {
            self.pick_destination(t, &evac)
        };
        let Some(dest) = dest else {
            self.fail_scheduling(t, migration_id);
            return;
        };
        let wall = self.wall(t);
        let idx = self.host_idx(&dest).expect("known host");
        let inst = &self.instances[&evac.instance_id];
        self.usage[idx].0 += inst.flavor.vcpus as u64;
        self.usage[idx].1 += inst.flavor.ram_mb;
        self.finish_event(
            &evac.instance_id,
            &evac.request_id,
            "rebuild_server",
            wall,
            true,
        );
        let alive = self.compute_alive(idx, t);
        let e = self.evacuations.get_mut(&migration_id).expect("present");
        e.dest = Some(dest.clone());
        e.scheduled_at = Some(t);
        if alive {
            self.receive_rebuild(t, migration_id);
        } else {
            // cast to a nova-compute that is not running: it waits in its queue
            e.phase = EvacuationPhase::Queued;
            self.rebuild_slots
                .entry(dest)
                .or_default()
                .awaiting
                .push_back(migration_id);
        }
    }

    /// The destination's nova-compute receives the rebuild: it records its event at once, then
    /// waits for a rebuild slot (Nova's resource tracker lock).
    pub(crate) fn receive_rebuild(&mut self, t: SimTime, migration_id: u64) {
        let wall = self.wall(t);
        let e = &self.evacuations[&migration_id];
        let (instance_id, request_id) = (e.instance_id.clone(), e.request_id.clone());
        let dest = e.dest.clone().expect("scheduled");
        if let Some(action) = self.action_mut(&instance_id, &request_id) {
            action.events.push(ActionEvent {
                event: "compute_rebuild_instance".into(),
                start_time: wall,
                finish_time: None,
                result: None,
                traceback: None,
                host: Some(dest.clone()),
                details: None,
            });
            action.updated_at = wall;
        }
        let limit = self.settings.rebuild_concurrency;
        let slots = self.rebuild_slots.entry(dest).or_default();
        if slots.active < limit {
            slots.active += 1;
            self.start_rebuild(t, migration_id);
        } else {
            slots.queue.push_back(migration_id);
            self.evacuations
                .get_mut(&migration_id)
                .expect("present")
                .phase = EvacuationPhase::Queued;
        }
    }

    /// The destination compute takes the rebuild (a rebuild slot is already held).
    fn start_rebuild(&mut self, t: SimTime, migration_id: u64) {
        let e = self.evacuations.get_mut(&migration_id).expect("present");
        e.phase = EvacuationPhase::Claiming;
        e.rebuild_started_at = Some(t);
        let claim = e.durations.claim;
        self.schedule(
            t.plus_secs(claim),
            EventKind::Evacuation {
                migration_id,
                step: EvacStep::Claimed,
            },
        );
    }

    fn on_claimed(&mut self, t: SimTime, migration_id: u64) {
        let evac = self.evacuations[&migration_id].clone();
        if evac.failure == Some(EvacuationFailure::Claim) {
            // the claim rolls back: vm_state untouched, task_state cleared, migration failed
            let wall = self.wall(t);
            let inst = self.instances.get_mut(&evac.instance_id).expect("present");
            inst.task_state = None;
            inst.updated = wall;
            self.fail_evacuation(
                t,
                migration_id,
                MigrationStatus::Failed,
                "Insufficient compute resources: claim failed on the destination",
            );
            return;
        }
        let wall = self.wall(t);
        let dest = evac.dest.clone().expect("scheduled");
        let idx = self.host_idx(&dest).expect("known");
        let (node, ip) = (
            self.hosts[idx].hypervisor_hostname.clone(),
            self.hosts[idx].ip.clone(),
        );
        let m = &mut self.migrations[(migration_id - 1) as usize];
        m.status = MigrationStatus::PreMigrating;
        m.dest_compute = Some(dest);
        m.dest_node = Some(node);
        m.dest_host = Some(ip);
        m.updated_at = Some(wall);
        let inst = self.instances.get_mut(&evac.instance_id).expect("present");
        // the destination saves the power state it sees (no guest yet), then moves the volumes
        inst.power_state = power_state::NOSTATE;
        inst.task_state = Some(TaskState::RebuildBlockDeviceMapping);
        inst.updated = wall;
        self.evacuations
            .get_mut(&migration_id)
            .expect("present")
            .phase = EvacuationPhase::BlockDeviceMapping;
        if let Some((volume, attachment)) = self.blocking_attachment(migration_id) {
            self.stall_counter += 1;
            let stall = self.stall_counter;
            let e = self.evacuations.get_mut(&migration_id).expect("present");
            e.phase = EvacuationPhase::Stalled;
            e.stalled_since = Some(t);
            e.stall_id = stall;
            self.stalled.insert(migration_id);
            let timeout = self.settings.stale_attachment_timeout;
            self.schedule(
                t.plus_secs(timeout),
                EventKind::StaleTimeout {
                    migration_id,
                    stall,
                },
            );
            tracing::info!(
                migration_id,
                volume = %volume,
                attachment = %attachment,
                "rebuild stalled on a volume attachment held by the source host"
            );
        } else {
            self.begin_volume_moves(t, migration_id);
        }
    }

    /// Re-attaches the server's volumes on the destination, then spawns after the BDM time.
    pub(crate) fn begin_volume_moves(&mut self, t: SimTime, migration_id: u64) {
        let evac = self.evacuations[&migration_id].clone();
        let dest = evac.dest.clone().expect("scheduled");
        self.move_volumes_to(t, &evac.instance_id, &dest);
        self.evacuations
            .get_mut(&migration_id)
            .expect("present")
            .phase = EvacuationPhase::BlockDeviceMapping;
        self.schedule(
            t.plus_secs(evac.durations.block_device_mapping),
            EventKind::Evacuation {
                migration_id,
                step: EvacStep::BlockDevicesDone,
            },
        );
    }

    /// A stalled rebuild whose blocking attachment is gone goes on.
    pub(crate) fn recheck_stalls(&mut self, t: SimTime) {
        let stalled: Vec<u64> = self.stalled.iter().copied().collect();
        for migration_id in stalled {
            if self.blocking_attachment(migration_id).is_some() {
                continue;
            }
            self.stalled.remove(&migration_id);
            let e = self.evacuations.get_mut(&migration_id).expect("present");
            if let Some(since) = e.stalled_since.take() {
                e.stalled_secs += t.secs_since(since);
            }
            tracing::info!(migration_id, "stalled rebuild resumes");
            let dest = e.dest.clone().expect("scheduled");
            let idx = self.host_idx(&dest).expect("known");
            if !self.compute_alive(idx, t) {
                self.evacuations
                    .get_mut(&migration_id)
                    .expect("present")
                    .frozen = true;
                continue;
            }
            self.begin_volume_moves(t, migration_id);
        }
    }

    pub(crate) fn stale_timeout(&mut self, t: SimTime, migration_id: u64, stall: u64) {
        let Some(e) = self.evacuations.get(&migration_id) else {
            return;
        };
        if e.frozen || e.phase != EvacuationPhase::Stalled || e.stall_id != stall {
            return;
        }
        let (volume, attachment) = self
            .blocking_attachment(migration_id)
            .unwrap_or_else(|| ("?".into(), "?".into()));
        self.stalled.remove(&migration_id);
        let e = self.evacuations.get_mut(&migration_id).expect("present");
        if let Some(since) = e.stalled_since.take() {
            e.stalled_secs += t.secs_since(since);
        }
        let source = e.source.clone();
        let message = format!(
            "Build of instance {} aborted: Unable to attach volume {volume}: volume attachment \
             {attachment} is still held by host {source} (timed out after {}s)",
            e.instance_id, self.settings.stale_attachment_timeout
        );
        self.error_out(t, migration_id, &message);
    }

    fn on_block_devices_done(&mut self, t: SimTime, migration_id: u64) {
        let evac = self.evacuations[&migration_id].clone();
        self.complete_volume_moves(t, &evac.instance_id);
        let wall = self.wall(t);
        let inst = self.instances.get_mut(&evac.instance_id).expect("present");
        inst.task_state = Some(TaskState::RebuildSpawning);
        inst.updated = wall;
        self.evacuations
            .get_mut(&migration_id)
            .expect("present")
            .phase = EvacuationPhase::Spawning;
        self.schedule(
            t.plus_secs(evac.durations.spawn),
            EventKind::Evacuation {
                migration_id,
                step: EvacStep::Spawned,
            },
        );
    }

    fn on_spawned(&mut self, t: SimTime, migration_id: u64) {
        let evac = self.evacuations[&migration_id].clone();
        if evac.failure == Some(EvacuationFailure::Compute) {
            self.error_out(
                t,
                migration_id,
                "Simulated compute failure while spawning the rebuilt instance",
            );
            return;
        }
        let wall = self.wall(t);
        let inst = self.instances.get_mut(&evac.instance_id).expect("present");
        inst.vm_state = VmState::Active;
        inst.power_state = power_state::RUNNING;
        inst.fault = None;
        inst.updated = wall;
        inst.launched_at = wall;
        let (step, after, phase) = if evac.target_stopped {
            inst.task_state = Some(TaskState::PoweringOff);
            (
                EvacStep::PoweredOff,
                evac.durations.stop,
                EvacuationPhase::PoweringOff,
            )
        } else {
            inst.task_state = None;
            (
                EvacStep::HostChanged,
                evac.durations.finish,
                EvacuationPhase::Finishing,
            )
        };
        self.evacuations
            .get_mut(&migration_id)
            .expect("present")
            .phase = phase;
        self.schedule(
            t.plus_secs(after),
            EventKind::Evacuation { migration_id, step },
        );
    }

    fn on_powered_off(&mut self, t: SimTime, migration_id: u64) {
        let evac = self.evacuations[&migration_id].clone();
        let wall = self.wall(t);
        let inst = self.instances.get_mut(&evac.instance_id).expect("present");
        inst.vm_state = VmState::Stopped;
        inst.task_state = None;
        inst.power_state = power_state::SHUTDOWN;
        inst.updated = wall;
        self.evacuations
            .get_mut(&migration_id)
            .expect("present")
            .phase = EvacuationPhase::Finishing;
        self.schedule(
            t.plus_secs(evac.durations.finish),
            EventKind::Evacuation {
                migration_id,
                step: EvacStep::HostChanged,
            },
        );
    }

    fn on_host_changed(&mut self, t: SimTime, migration_id: u64) {
        let evac = self.evacuations[&migration_id].clone();
        let dest = evac.dest.clone().expect("scheduled");
        let node = self.hosts[self.host_idx(&dest).expect("known")]
            .hypervisor_hostname
            .clone();
        let wall = self.wall(t);
        let inst = self.instances.get_mut(&evac.instance_id).expect("present");
        inst.host = Some(dest);
        inst.node = Some(node);
        inst.updated = wall;
        self.schedule(
            t.plus_secs(evac.durations.finish),
            EventKind::Evacuation {
                migration_id,
                step: EvacStep::Done,
            },
        );
    }

    fn on_done(&mut self, t: SimTime, migration_id: u64) {
        let evac = self.evacuations[&migration_id].clone();
        let wall = self.wall(t);
        let m = &mut self.migrations[(migration_id - 1) as usize];
        m.status = MigrationStatus::Done;
        m.updated_at = Some(wall);
        self.finish_event(
            &evac.instance_id,
            &evac.request_id,
            "compute_rebuild_instance",
            wall,
            true,
        );
        let source_idx = self.host_idx(&evac.source).expect("known");
        let flavor = self.instances[&evac.instance_id].flavor.clone();
        let usage = &mut self.usage[source_idx];
        usage.0 = usage.0.saturating_sub(flavor.vcpus as u64);
        usage.1 = usage.1.saturating_sub(flavor.ram_mb);
        let e = self.evacuations.get_mut(&migration_id).expect("present");
        e.phase = EvacuationPhase::Done;
        e.done_at = Some(t);
        tracing::info!(
            migration_id,
            instance = %evac.instance_id,
            dest = ?evac.dest,
            sim_time = t.as_secs_f64(),
            "evacuation done"
        );
        self.release_slot(t, migration_id);
    }

    fn fail_scheduling(&mut self, t: SimTime, migration_id: u64) {
        let evac = self.evacuations[&migration_id].clone();
        let wall = self.wall(t);
        let message = "No valid host was found. There are not enough hosts available.";
        let inst = self.instances.get_mut(&evac.instance_id).expect("present");
        inst.vm_state = VmState::Error;
        inst.task_state = None;
        inst.updated = wall;
        inst.fault = Some(Fault {
            code: 500,
            message: message.into(),
            details: "Traceback (most recent call last):\n  nova.exception.NoValidHost".into(),
            created: wall,
        });
        self.finish_event(
            &evac.instance_id,
            &evac.request_id,
            "rebuild_server",
            wall,
            false,
        );
        let m = &mut self.migrations[(migration_id - 1) as usize];
        m.status = MigrationStatus::Error;
        m.updated_at = Some(wall);
        let e = self.evacuations.get_mut(&migration_id).expect("present");
        e.phase = EvacuationPhase::Failed;
        e.failed_at = Some(t);
        e.error = Some(message.into());
        tracing::info!(migration_id, "evacuation failed to schedule");
    }

    /// A compute-side failure: vm_state error with a fault, migration failed.
    fn error_out(&mut self, t: SimTime, migration_id: u64, message: &str) {
        let evac = self.evacuations[&migration_id].clone();
        let wall = self.wall(t);
        let inst = self.instances.get_mut(&evac.instance_id).expect("present");
        inst.vm_state = VmState::Error;
        inst.task_state = None;
        inst.updated = wall;
        inst.fault = Some(Fault {
            code: 500,
            message: message.into(),
            details: format!("Traceback (most recent call last):\n  {message}"),
            created: wall,
        });
        self.fail_evacuation(t, migration_id, MigrationStatus::Failed, message);
    }

    /// Ends an evacuation as failed on the compute side (the instance is left as the caller set it).
    pub(crate) fn fail_evacuation(
        &mut self,
        t: SimTime,
        migration_id: u64,
        status: MigrationStatus,
        message: &str,
    ) {
        let Some(evac) = self.evacuations.get(&migration_id).cloned() else {
            return;
        };
        let wall = self.wall(t);
        let m = &mut self.migrations[(migration_id - 1) as usize];
        m.status = status;
        m.updated_at = Some(wall);
        let event = if evac.rebuild_started_at.is_some() {
            "compute_rebuild_instance"
        } else {
            "rebuild_server"
        };
        self.finish_event(&evac.instance_id, &evac.request_id, event, wall, false);
        if let Some(dest) = &evac.dest {
            let idx = self.host_idx(dest).expect("known");
            let flavor = self
                .instances
                .get(&evac.instance_id)
                .map(|i| i.flavor.clone());
            if let Some(flavor) = flavor {
                let usage = &mut self.usage[idx];
                usage.0 = usage.0.saturating_sub(flavor.vcpus as u64);
                usage.1 = usage.1.saturating_sub(flavor.ram_mb);
            }
        }
        self.stalled.remove(&migration_id);
        let e = self.evacuations.get_mut(&migration_id).expect("present");
        let held_slot = e.rebuild_started_at.is_some();
        e.phase = EvacuationPhase::Failed;
        e.failed_at = Some(t);
        e.error = Some(message.into());
        tracing::info!(migration_id, message, "evacuation failed");
        if held_slot {
            self.release_slot(t, migration_id);
        }
    }

    fn release_slot(&mut self, t: SimTime, migration_id: u64) {
        let Some(dest) = self.evacuations[&migration_id].dest.clone() else {
            return;
        };
        let slots = self.rebuild_slots.entry(dest).or_default();
        slots.active = slots.active.saturating_sub(1);
        if let Some(next) = slots.queue.pop_front() {
            slots.active += 1;
            self.start_rebuild(t, next);
        }
    }

    pub(crate) fn action_mut(
        &mut self,
        instance_id: &str,
        request_id: &str,
    ) -> Option<&mut InstanceAction> {
        self.actions
            .get_mut(instance_id)?
            .iter_mut()
            .find(|a| a.request_id == request_id)
    }

    fn finish_event(
        &mut self,
        instance_id: &str,
        request_id: &str,
        event: &str,
        wall: chrono::DateTime<chrono::Utc>,
        success: bool,
    ) {
        if let Some(action) = self.action_mut(instance_id, request_id) {
            if let Some(e) = action
                .events
                .iter_mut()
                .rev()
                .find(|e| e.event == event && e.finish_time.is_none())
            {
                e.finish_time = Some(wall);
                e.result = Some(if success { "Success" } else { "Error" }.into());
                if !success {
                    e.traceback = Some("Traceback (most recent call last):\n  simulated".into());
                }
            }
            action.updated_at = wall;
            if !success {
                action.message = Some("Error".into());
            }
        }
    }
}

/// nova-conductor's event of an evacuation, started at `wall`.
fn conductor_event(wall: chrono::DateTime<chrono::Utc>) -> ActionEvent {
    ActionEvent {
        event: "rebuild_server".into(),
        start_time: wall,
        finish_time: None,
        result: None,
        traceback: None,
        host: Some("controller".into()),
        details: None,
    }
}

/// The task state the write of `step` expects (`instance.save(expected_task_state=...)` in
/// `nova/compute/manager.py`): a rebuild whose expected state is gone (reset meanwhile) stops.
pub(crate) fn expected_task_state(step: EvacStep) -> Option<TaskState> {
    match step {
        EvacStep::Claimed => Some(TaskState::Rebuilding),
        EvacStep::BlockDevicesDone => Some(TaskState::RebuildBlockDeviceMapping),
        EvacStep::Spawned => Some(TaskState::RebuildSpawning),
        EvacStep::PoweredOff => Some(TaskState::PoweringOff),
        EvacStep::Received | EvacStep::Scheduled | EvacStep::HostChanged | EvacStep::Done => None,
    }
}

/// The task state a step was writing when its expected one was gone: Nova writes it anyway
/// with `vm_state` error (`_error_out_instance_on_exception` saves the pending change).
pub(crate) fn pending_task_state(step: EvacStep) -> Option<TaskState> {
    match step {
        EvacStep::Claimed => Some(TaskState::Rebuilding),
        EvacStep::BlockDevicesDone => Some(TaskState::RebuildSpawning),
        _ => None,
    }
}
