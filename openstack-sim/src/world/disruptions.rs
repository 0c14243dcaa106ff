//! Failures inside the cloud that make Nova lose evacuations it accepted, as measured on Nova 34:
//! the message bus stopped while nova-conductor schedules (the request is dropped, its
//! `rebuild_server` ends `Error`, the records never change again), a destination nova-compute
//! process killed and started again or its host losing power (`power.rs`: the rebuilds it was
//! running freeze here and are never resumed; casts that reached it while it was down wait in
//! its queue and run when it starts), and every task-state write of a rebuild expecting the state
//! it left.

use super::evacuation::{EvacStep, EvacuationPhase, pending_task_state};
use super::model::{MigrationStatus, VmState, power_state};
use super::{Error, EventKind, World};
use crate::clock::SimTime;
use crate::scenario::MessageBusOutage;

/// An outage of the message bus, placed in simulated time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BusWindow {
    pub start: SimTime,
    pub end: SimTime,
    pub conductor_error_after: f64,
}

impl World {
    /// Adds an outage of the message bus (from `outage.at_secs`, or from the next evacuate
    /// request).
    pub fn message_bus_outage(&mut self, outage: MessageBusOutage) -> Result<(), Error> {
        self.tick();
        outage
            .check()
            .map_err(|e| Error::BadRequest(e.to_string()))?;
        tracing::info!(?outage, "message bus outage planned");
        self.settings.message_bus_outages.push(outage);
        Ok(())
    }

    /// The outage the message bus is in at `t`, if any.
    pub(crate) fn bus_outage_at(&self, t: SimTime) -> Option<BusWindow> {
        self.settings
            .message_bus_outages
            .iter()
            .filter_map(|o| {
                let start = SimTime::from_secs_f64(o.at_secs?);
                Some(BusWindow {
                    start,
                    end: start.plus_secs(o.for_secs),
                    conductor_error_after: o.conductor_error_after_secs,
                })
            })
            .find(|w| w.start <= t && t < w.end)
    }

    /// An evacuate request made at `t` casts to nova-conductor: returns when the conductor gets
    /// it. Outages waiting for the next request start now (this request is then in flight in
    /// the conductor when the bus stops); one already under way holds the cast until it ends.
    pub(crate) fn cast_to_conductor(&mut self, t: SimTime) -> SimTime {
        for outage in &mut self.settings.message_bus_outages {
            if outage.at_secs.is_none() {
                outage.at_secs = Some(t.as_secs_f64());
                tracing::info!(sim_time = t.as_secs_f64(), "message bus stopped");
            }
        }
        match self.bus_outage_at(t) {
            Some(window) if window.start < t => window.end,
            _ => t,
        }
    }

    /// nova-conductor's scheduling call meets the outage: it times out later, and the request
    /// is dropped.
    pub(crate) fn conductor_call_lost(&mut self, t: SimTime, migration_id: u64, bus: &BusWindow) {
        tracing::info!(
            migration_id,
            sim_time = t.as_secs_f64(),
            "nova-conductor's scheduling call meets the message bus outage"
        );
        self.schedule(
            t.plus_secs(bus.conductor_error_after),
            EventKind::ConductorTimeout { migration_id },
        );
    }

    /// The conductor's `rebuild_server` ends Error (MessagingTimeout); the migration stays
    /// `accepted` and the server `rebuilding` on its host, never to change.
    pub(crate) fn conductor_timed_out(&mut self, t: SimTime, migration_id: u64) {
        let Some(evac) = self.evacuations.get(&migration_id).cloned() else {
            return;
        };
        if evac.phase != EvacuationPhase::Scheduling {
            return;
        }
        let wall = self.wall(t);
        if let Some(action) = self.action_mut(&evac.instance_id, &evac.request_id) {
            if let Some(event) = action
                .events
                .iter_mut()
                .find(|e| e.event == "rebuild_server" && e.finish_time.is_none())
            {
                event.finish_time = Some(wall);
                event.result = Some("Error".into());
                event.traceback = Some(
                    "Traceback (most recent call last):\n  oslo_messaging.exceptions.MessagingTimeout: \
                     Timed out waiting for a reply to message ID"
                        .into(),
                );
            }
            action.updated_at = wall;
            action.message = Some("Error".into());
        }
        let e = self.evacuations.get_mut(&migration_id).expect("present");
        e.phase = EvacuationPhase::Lost;
        e.error = Some("nova-conductor: MessagingTimeout".into());
        tracing::info!(migration_id, "evacuation lost by nova-conductor");
    }

    /// A destination's nova-compute died: every rebuild it had received (running, or waiting for
    /// a slot) stops where it is. Casts still in its queue are not affected.
    pub(crate) fn freeze_rebuilds_on(&mut self, t: SimTime, host: &str) {
        let slots = self.rebuild_slots.entry(host.to_owned()).or_default();
        slots.active = 0;
        slots.queue.clear();
        let awaiting = slots.awaiting.clone();
        for e in self.evacuations.values_mut() {
            let running = !matches!(
                e.phase,
                EvacuationPhase::Scheduling
                    | EvacuationPhase::Done
                    | EvacuationPhase::Failed
                    | EvacuationPhase::Lost
            );
            if e.dest.as_deref() == Some(host)
                && running
                && !e.frozen
                && !awaiting.contains(&e.migration_id)
            {
                e.frozen = true;
                tracing::warn!(
                    migration_id = e.migration_id,
                    dest = host,
                    sim_time = t.as_secs_f64(),
                    "rebuild frozen: its nova-compute died"
                );
            }
        }
        self.stalled.retain(|id| !self.evacuations[id].frozen);
    }

    /// A nova-compute starts: the rebuilds cast to it while it was down run now, in order.
    pub(crate) fn deliver_awaiting_rebuilds(&mut self, t: SimTime, host: &str) {
        let awaiting: Vec<u64> = self
            .rebuild_slots
            .get_mut(host)
            .map(|slots| slots.awaiting.drain(..).collect())
            .unwrap_or_default();
        for migration_id in awaiting {
            if self.evacuations[&migration_id].phase == EvacuationPhase::Queued {
                self.receive_rebuild(t, migration_id);
            }
        }
    }

    /// A rebuild's write found its expected task state gone (someone reset it): Nova fails the
    /// rebuild (migration `failed`) and `_error_out_instance_on_exception` saves `vm_state`
    /// error with the task state the step was writing.
    pub(crate) fn unexpected_task_state(&mut self, t: SimTime, migration_id: u64, step: EvacStep) {
        let evac = self.evacuations[&migration_id].clone();
        self.fail_evacuation(
            t,
            migration_id,
            MigrationStatus::Failed,
            "UnexpectedTaskStateError: the task state was changed under the rebuild",
        );
        let wall = self.wall(t);
        if let Some(inst) = self.instances.get_mut(&evac.instance_id) {
            inst.vm_state = VmState::Error;
            inst.task_state = pending_task_state(step);
            if step == EvacStep::Claimed {
                inst.power_state = power_state::NOSTATE;
            }
            inst.updated = wall;
        }
    }
}
