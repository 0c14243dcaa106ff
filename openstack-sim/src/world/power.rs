//! Hosts' power and their nova-compute processes: cutting a host's power (its nova-compute stops
//! heartbeating and the rebuilds it ran freeze; its guests die), restoring it (nova-compute boots
//! and finds its guests shut off), killing a nova-compute process (host and guests stay up) and
//! starting it again; what nova-compute does when it starts.

use super::model::{self, VmState, power_state};
use super::{Error, EventKind, World};
use crate::clock::SimTime;

impl World {
    /// Cuts a host's power: its compute stops heartbeating and acting.
    pub fn power_off(&mut self, name: &str) -> Result<(), Error> {
        let t = self.tick();
        let idx = self
            .host_idx(name)
            .ok_or_else(|| Error::NotFound(format!("host {name} not found")))?;
        if !self.hosts[idx].powered_on {
            return Ok(());
        }
        let last = self.last_heartbeat(idx, t);
        let host = &mut self.hosts[idx];
        host.last_heartbeat_before_off = last;
        host.heartbeat_origin = None;
        host.powered_on = false;
        host.power_generation += 1;
        // the rebuilds its nova-compute was running die with it
        self.freeze_rebuilds_on(t, name);
        tracing::info!(host = name, sim_time = t.as_secs_f64(), "host powered off");
        Ok(())
    }

    /// Restores a host's power: its compute boots after `host_boot` and then heartbeats again,
    /// clears the storage sessions it held, and completes the evacuations away from it.
    pub fn power_on(&mut self, name: &str) -> Result<(), Error> {
        let t = self.tick();
        let idx = self
            .host_idx(name)
            .ok_or_else(|| Error::NotFound(format!("host {name} not found")))?;
        if self.hosts[idx].powered_on {
            return Ok(());
        }
        let boot = self.sample(self.settings.durations.host_boot);
        let host = &mut self.hosts[idx];
        host.powered_on = true;
        host.power_generation += 1;
        let generation = host.power_generation;
        self.schedule(
            t.plus_secs(boot),
            EventKind::HostBoot {
                host: idx,
                generation,
            },
        );
        tracing::info!(
            host = name,
            sim_time = t.as_secs_f64(),
            boot_secs = boot,
            "host powered on"
        );
        Ok(())
    }

    pub(crate) fn host_booted(&mut self, t: SimTime, idx: usize, generation: u64) {
        if self.hosts[idx].power_generation != generation || !self.hosts[idx].powered_on {
            return;
        }
        let name = self.hosts[idx].name.clone();
        let wall = self.wall(t);

        // the host clears the storage sessions it held
        let volume_ids: Vec<String> = self
            .volume_order
            .iter()
            .filter(|v| {
                self.volumes[*v]
                    .attachments
                    .iter()
                    .any(|a| a.host_name.as_deref() == Some(name.as_str()))
            })
            .cloned()
            .collect();
        for volume_id in volume_ids {
            self.clear_host_sessions(&volume_id, &name, wall);
        }
        self.compute_started(t, idx);
        // guests that were running are found shut off (resume_guests_state_on_host_boot=False)
        let ids: Vec<String> = self
            .instances
            .values()
            .filter(|i| {
                i.host.as_deref() == Some(name.as_str())
                    && i.vm_state == VmState::Active
                    && i.task_state.is_none()
            })
            .map(|i| i.id.clone())
            .collect();
        for id in ids {
            let inst = self.instances.get_mut(&id).expect("listed");
            inst.vm_state = VmState::Stopped;
            inst.power_state = power_state::SHUTDOWN;
            inst.updated = wall;
        }
    }

    /// nova-compute starts on a host (after a boot, or a restart of the process): it heartbeats,
    /// completes the evacuations away from it, runs the rebuilds that waited in its queue and
    /// the power operations it owed. Rebuilds a dead process was running are not resumed.
    pub(crate) fn compute_started(&mut self, t: SimTime, idx: usize) {
        let name = self.hosts[idx].name.clone();
        self.hosts[idx].heartbeat_origin = Some(t);
        self.hosts[idx].heartbeat_phase = 0.0;
        let wall = self.wall(t);
        // evacuations away from it: done -> completed
        for m in &mut self.migrations {
            if m.source_compute == name
                && m.status == model::MigrationStatus::Done
                && m.migration_type == "evacuation"
            {
                m.status = model::MigrationStatus::Completed;
                m.updated_at = Some(wall);
            }
        }
        // power operations that were waiting for the compute
        for (instance_id, stop) in self.frozen_power_ops.remove(&name).unwrap_or_default() {
            self.finish_power_op(t, &instance_id, stop);
        }
        self.deliver_awaiting_rebuilds(t, &name);
        tracing::info!(host = %name, sim_time = t.as_secs_f64(), "compute service started");
        self.recheck_stalls(t);
    }
    /// Kills a host's nova-compute process (the host and its guests stay up): it stops
    /// heartbeating (its service goes down after `service_down_time`) and the rebuilds it was
    /// running freeze for good. With `restart_after`, it starts again that many simulated
    /// seconds later.
    pub fn kill_compute(&mut self, name: &str, restart_after: Option<f64>) -> Result<(), Error> {
        let t = self.tick();
        let idx = self
            .host_idx(name)
            .ok_or_else(|| Error::NotFound(format!("host {name} not found")))?;
        if restart_after.is_some_and(|s| !(s.is_finite() && s >= 0.0)) {
            return Err(Error::BadRequest(
                "restart_after_secs must be zero or more".into(),
            ));
        }
        if self.compute_alive(idx, t) {
            let last = self.last_heartbeat(idx, t);
            let host = &mut self.hosts[idx];
            host.last_heartbeat_before_off = last;
            host.heartbeat_origin = None;
            self.freeze_rebuilds_on(t, name);
            tracing::info!(
                host = name,
                sim_time = t.as_secs_f64(),
                "nova-compute killed"
            );
        }
        // a boot already due (or a restart planned before) is superseded
        self.hosts[idx].power_generation += 1;
        if let Some(secs) = restart_after {
            let generation = self.hosts[idx].power_generation;
            self.schedule(
                t.plus_secs(secs),
                EventKind::ComputeStart {
                    host: idx,
                    generation,
                },
            );
        }
        Ok(())
    }

    /// Starts a killed nova-compute process again (on a powered host).
    pub fn start_compute(&mut self, name: &str) -> Result<(), Error> {
        let t = self.tick();
        let idx = self
            .host_idx(name)
            .ok_or_else(|| Error::NotFound(format!("host {name} not found")))?;
        if !self.hosts[idx].powered_on {
            return Err(Error::Conflict(format!("host {name} is powered off")));
        }
        if self.hosts[idx].heartbeat_origin.is_none() {
            self.hosts[idx].power_generation += 1;
            self.compute_started(t, idx);
        }
        Ok(())
    }

    pub(crate) fn compute_restart_due(&mut self, t: SimTime, idx: usize, generation: u64) {
        let host = &self.hosts[idx];
        if host.power_generation == generation && host.powered_on && host.heartbeat_origin.is_none()
        {
            self.compute_started(t, idx);
        }
    }
}
