//! Nova operations other than evacuation: lock, unlock, stop, start, reset state, compute
//! service updates and aggregate membership.

use super::model::{ActionEvent, InstanceAction, MigrationStatus, TaskState, VmState, power_state};
use super::{Error, EventKind, World};
use crate::clock::SimTime;
use crate::identity::Caller;

/// A change to a compute service (`PUT /os-services/{id}`).
#[derive(Debug, Clone, Default)]
pub struct ServiceUpdate {
    pub enabled: Option<bool>,
    pub disabled_reason: Option<String>,
    pub forced_down: Option<bool>,
}

/// What a service update did.
#[derive(Debug, Clone)]
pub struct ServiceUpdateOutcome {
    pub host: String,
    /// Simulated seconds the API blocks before answering (an RPC to an unreachable compute).
    pub blocked_secs: f64,
}

impl World {
    /// A server visible to the caller (admins see all; others their project's).
    pub(crate) fn visible_instance(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<&super::model::Instance, Error> {
        self.instances
            .get(id)
            .filter(|i| caller.is_admin || i.project_id == caller.project_id)
            .ok_or_else(|| Error::NotFound(format!("Instance {id} could not be found.")))
    }

    fn record_action(
        &mut self,
        caller: &Caller,
        instance_id: &str,
        action: &str,
        request_id: &str,
        event: Option<(&str, Option<String>)>,
        t: SimTime,
    ) {
        let wall = self.wall(t);
        self.actions
            .entry(instance_id.into())
            .or_default()
            .push(InstanceAction {
                action: action.into(),
                instance_uuid: instance_id.into(),
                request_id: request_id.into(),
                user_id: caller.user_id.clone(),
                project_id: caller.project_id.clone(),
                start_time: wall,
                updated_at: wall,
                message: None,
                events: event
                    .into_iter()
                    .map(|(name, host)| ActionEvent {
                        event: name.into(),
                        start_time: wall,
                        finish_time: None,
                        result: None,
                        traceback: None,
                        host,
                        details: None,
                    })
                    .collect(),
            });
    }

    /// An action Nova's API carries out itself (lock, unlock): one event,
    /// `api_<action>`, on the API's host, finished at once.
    fn record_api_action(
        &mut self,
        caller: &Caller,
        instance_id: &str,
        action: &str,
        request_id: &str,
        t: SimTime,
    ) {
        let event = format!("api_{action}");
        self.record_action(
            caller,
            instance_id,
            action,
            request_id,
            Some((&event, Some("controller".into()))),
            t,
        );
        let wall = self.wall(t);
        if let Some(recorded) = self
            .actions
            .get_mut(instance_id)
            .and_then(|list| list.last_mut())
        {
            for e in &mut recorded.events {
                e.finish_time = Some(wall);
                e.result = Some("Success".into());
            }
        }
    }

    /// `lock` (2.73+ with a reason).
    pub fn lock(
        &mut self,
        caller: &Caller,
        id: &str,
        reason: Option<String>,
        request_id: &str,
    ) -> Result<(), Error> {
        let t = self.tick();
        self.visible_instance(caller, id)?;
        if !caller.is_member() {
            return Err(Error::Forbidden(
                "Policy doesn't allow os_compute_api:os-lock-server:lock to be performed.".into(),
            ));
        }
        let wall = self.wall(t);
        let inst = self.instances.get_mut(id).expect("visible");
        inst.locked = true;
        inst.locked_reason = reason;
        inst.locked_by = Some(if caller.is_admin { "admin" } else { "owner" }.into());
        inst.updated = wall;
        self.record_api_action(caller, id, "lock", request_id, t);
        Ok(())
    }

    /// `unlock`; only an admin may lift an admin's lock.
    pub fn unlock(&mut self, caller: &Caller, id: &str, request_id: &str) -> Result<(), Error> {
        let t = self.tick();
        let inst = self.visible_instance(caller, id)?;
        if !caller.is_member() || (inst.locked_by.as_deref() == Some("admin") && !caller.is_admin) {
            return Err(Error::Forbidden(
                "Policy doesn't allow os_compute_api:os-lock-server:unlock:unlock_override to be performed."
                    .into(),
            ));
        }
        let wall = self.wall(t);
        let inst = self.instances.get_mut(id).expect("visible");
        inst.locked = false;
        inst.locked_reason = None;
        inst.locked_by = None;
        inst.updated = wall;
        self.record_api_action(caller, id, "unlock", request_id, t);
        Ok(())
    }

    /// `os-stop` (`stop = true`) or `os-start`.
    pub fn power_action(
        &mut self,
        caller: &Caller,
        id: &str,
        stop: bool,
        request_id: &str,
    ) -> Result<(), Error> {
        let t = self.tick();
        let inst = self.visible_instance(caller, id)?;
        let verb = if stop { "stop" } else { "start" };
        if !caller.is_member() {
            return Err(Error::Forbidden(format!(
                "Policy doesn't allow os_compute_api:servers:{verb} to be performed."
            )));
        }
        if inst.locked && !caller.is_admin {
            return Err(Error::Conflict(format!("Instance {id} is locked")));
        }
        if inst.host.is_none() {
            return Err(Error::Conflict(format!("Instance {id} is not ready")));
        }
        let allowed = if stop {
            matches!(inst.vm_state, VmState::Active | VmState::Error)
        } else {
            inst.vm_state == VmState::Stopped
        };
        if !allowed {
            return Err(Error::Conflict(format!(
                "Cannot '{verb}' instance {id} while it is in vm_state {}",
                inst.vm_state
            )));
        }
        if let Some(task) = inst.task_state {
            return Err(Error::Conflict(format!(
                "Cannot '{verb}' instance {id} while it is in task_state {task}"
            )));
        }
        let host = inst.host.clone();
        let wall = self.wall(t);
        let base = if stop {
            self.settings.durations.stop
        } else {
            self.settings.durations.start
        };
        let after = self.sample(base);
        let inst = self.instances.get_mut(id).expect("visible");
        inst.task_state = Some(if stop {
            TaskState::PoweringOff
        } else {
            TaskState::PoweringOn
        });
        inst.updated = wall;
        inst.generation += 1;
        let generation = inst.generation;
        let event = if stop {
            "compute_stop_instance"
        } else {
            "compute_start_instance"
        };
        self.record_action(caller, id, verb, request_id, Some((event, host)), t);
        self.schedule(
            t.plus_secs(after),
            EventKind::Power {
                instance_id: id.into(),
                generation,
                stop,
            },
        );
        Ok(())
    }

    pub(crate) fn power_op_due(&mut self, t: SimTime, id: &str, generation: u64, stop: bool) {
        let Some(inst) = self.instances.get(id) else {
            return;
        };
        if inst.generation != generation {
            return;
        }
        let host = inst.host.clone().unwrap_or_default();
        match self.host_idx(&host) {
            Some(idx) if self.compute_alive(idx, t) => self.finish_power_op(t, id, stop),
            _ => self
                .frozen_power_ops
                .entry(host)
                .or_default()
                .push((id.to_string(), stop)),
        }
    }

    pub(crate) fn finish_power_op(&mut self, t: SimTime, id: &str, stop: bool) {
        let wall = self.wall(t);
        let Some(inst) = self.instances.get_mut(id) else {
            return;
        };
        let expected = if stop {
            TaskState::PoweringOff
        } else {
            TaskState::PoweringOn
        };
        if inst.task_state != Some(expected) {
            return;
        }
        inst.task_state = None;
        if stop {
            inst.vm_state = VmState::Stopped;
            inst.power_state = power_state::SHUTDOWN;
        } else {
            inst.vm_state = VmState::Active;
            inst.power_state = power_state::RUNNING;
            inst.launched_at = wall;
        }
        inst.updated = wall;
        let event = if stop {
            "compute_stop_instance"
        } else {
            "compute_start_instance"
        };
        if let Some(action) = self.actions.get_mut(id).and_then(|list| {
            list.iter_mut().rev().find(|a| {
                a.events
                    .iter()
                    .any(|e| e.event == event && e.finish_time.is_none())
            })
        }) {
            action.updated_at = wall;
            for e in action.events.iter_mut().filter(|e| e.event == event) {
                e.finish_time = Some(wall);
                e.result = Some("Success".into());
            }
        }
    }

    /// `os-resetState` (admin): sets vm_state and clears task_state.
    pub fn reset_state(&mut self, id: &str, state: VmState) -> Result<(), Error> {
        let t = self.tick();
        let wall = self.wall(t);
        let inst = self
            .instances
            .get_mut(id)
            .ok_or_else(|| Error::NotFound(format!("Instance {id} could not be found.")))?;
        inst.vm_state = state;
        inst.task_state = None;
        inst.updated = wall;
        inst.generation += 1;
        Ok(())
    }

    /// Finds a compute host's index by its service UUID.
    pub(crate) fn host_by_service_uuid(&self, uuid: &str) -> Option<usize> {
        self.hosts.iter().position(|h| h.service_uuid == uuid)
    }

    /// Applies a service update to a compute host.
    pub fn update_service(
        &mut self,
        idx: usize,
        update: &ServiceUpdate,
    ) -> Result<ServiceUpdateOutcome, Error> {
        let t = self.tick();
        let name = self.hosts[idx].name.clone();
        if update.forced_down == Some(false) && self.hosts[idx].forced_down {
            let waiting = self.migrations.iter().any(|m| {
                m.migration_type == "evacuation"
                    && m.status == MigrationStatus::Done
                    && m.source_compute == name
            });
            if waiting {
                return Err(Error::BadRequest(format!(
                    "Cannot unset forced_down on host {name}: evacuated instances remain to be \
                     cleaned up when its nova-compute restarts (migrations in status done)."
                )));
            }
        }
        let mut blocked_secs = 0.0;
        if update.enabled.is_some()
            && self.service_is_up(idx, t)
            && !self.compute_alive(idx, t)
            && update.forced_down != Some(true)
        {
            // nova-api syncs the COMPUTE_STATUS_DISABLED trait over RPC and waits for a timeout
            blocked_secs = self.settings.rpc_response_timeout;
        }
        let wall = self.wall(t);
        let host = &mut self.hosts[idx];
        if let Some(enabled) = update.enabled {
            host.enabled = enabled;
            host.disabled_reason = if enabled {
                None
            } else {
                update.disabled_reason.clone()
            };
        } else if let Some(reason) = &update.disabled_reason
            && !host.enabled
        {
            host.disabled_reason = Some(reason.clone());
        }
        if let Some(forced) = update.forced_down {
            host.forced_down = forced;
        }
        host.service_updated = wall;
        tracing::info!(host = %name, ?update.enabled, ?update.forced_down, "compute service updated");
        Ok(ServiceUpdateOutcome {
            host: name,
            blocked_secs,
        })
    }

    /// `add_host` on an aggregate.
    pub fn aggregate_add_host(&mut self, aggregate_id: u64, host: &str) -> Result<usize, Error> {
        let t = self.tick();
        let idx = self
            .aggregates
            .iter()
            .position(|a| a.id == aggregate_id)
            .ok_or_else(|| {
                Error::NotFound(format!("Aggregate {aggregate_id} could not be found."))
            })?;
        if self.host_idx(host).is_none() {
            return Err(Error::NotFound(format!(
                "Compute host {host} could not be found."
            )));
        }
        let wall = self.wall(t);
        let agg = &mut self.aggregates[idx];
        if agg.hosts.iter().any(|h| h == host) {
            return Err(Error::Conflict(format!(
                "Aggregate {aggregate_id} already has host {host}."
            )));
        }
        agg.hosts.push(host.into());
        agg.updated_at = Some(wall);
        Ok(idx)
    }

    /// `remove_host` on an aggregate.
    pub fn aggregate_remove_host(&mut self, aggregate_id: u64, host: &str) -> Result<usize, Error> {
        let t = self.tick();
        let idx = self
            .aggregates
            .iter()
            .position(|a| a.id == aggregate_id)
            .ok_or_else(|| {
                Error::NotFound(format!("Aggregate {aggregate_id} could not be found."))
            })?;
        let wall = self.wall(t);
        let agg = &mut self.aggregates[idx];
        let before = agg.hosts.len();
        agg.hosts.retain(|h| h != host);
        if agg.hosts.len() == before {
            return Err(Error::NotFound(format!(
                "Cannot remove host {host} in aggregate {aggregate_id}: not found"
            )));
        }
        agg.updated_at = Some(wall);
        Ok(idx)
    }
}
