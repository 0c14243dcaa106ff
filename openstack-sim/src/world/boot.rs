//! Servers booted and deleted through the API (`POST /servers`,
//! `DELETE /servers/{id}`), as Nova does them: the create answers at once
//! with the server `BUILD` (vm_state `building`, task `scheduling`, no
//! host); after the scenario's `schedule` and `spawn` durations the
//! scheduler's pick (an enabled host whose nova-compute is up, with room
//! for the flavor, the most free RAM first) runs it `ACTIVE`, or, with no
//! such host, it goes `ERROR` with Nova's "No valid host was found." fault.
//! A delete removes the server at once, releasing its host's resources and
//! its volume attachments.

use std::collections::BTreeMap;

use super::model::{
    self, ActionEvent, Flavor, Image, Instance, InstanceAction, TaskState, VmState, power_state,
};
use super::{Error, EventKind, World, new_uuid};
use crate::clock::SimTime;
use crate::identity::Caller;

/// A validated `POST /servers` body.
#[derive(Clone, Debug, Default)]
pub struct NewServer {
    pub name: String,
    /// `flavorRef`: an id or a link ending in one.
    pub flavor_ref: String,
    /// `imageRef`: an id or a link ending in one.
    pub image_ref: String,
    pub metadata: BTreeMap<String, String>,
}

/// The last path segment of a reference (Nova takes links as well as ids).
fn reference_id(reference: &str) -> &str {
    reference.rsplit('/').next().unwrap_or(reference)
}

impl World {
    /// A flavor by id.
    pub(crate) fn flavor(&self, id: &str) -> Option<&Flavor> {
        self.flavors.iter().find(|f| f.id == id)
    }

    /// An image by id.
    pub(crate) fn image(&self, id: &str) -> Option<&Image> {
        self.images.iter().find(|i| i.id == id)
    }

    /// `POST /servers`: the new server, `BUILD` until its boot is due; its id
    /// and admin password.
    pub fn create_server(
        &mut self,
        caller: &Caller,
        request: NewServer,
        request_id: &str,
    ) -> Result<(String, String), Error> {
        if !caller.is_member() {
            return Err(Error::Forbidden(
                "Policy doesn't allow os_compute_api:servers:create to be performed.".into(),
            ));
        }
        let flavor = self
            .flavor(reference_id(&request.flavor_ref))
            .cloned()
            .ok_or_else(|| Error::BadRequest("Invalid flavorRef provided.".into()))?;
        let image_id = reference_id(&request.image_ref).to_owned();
        let image = self
            .image(&image_id)
            .ok_or_else(|| Error::BadRequest(format!("Image {image_id} could not be found.")))?;
        if flavor.ram_mb < image.min_ram_mb {
            return Err(Error::BadRequest(
                "Flavor's memory is too small for requested image.".into(),
            ));
        }
        let t = self.tick();
        let wall = self.wall(t);
        let id = new_uuid(&mut self.rng);
        let password = super::evacuation::generated_password(self);
        self.instance_counter += 1;
        let instance = Instance {
            id: id.clone(),
            name: request.name,
            instance_name: format!("instance-{:08x}", self.instance_counter),
            project_id: caller.project_id.clone(),
            user_id: caller.user_id.clone(),
            flavor,
            image_id: Some(image_id),
            vm_state: VmState::Building,
            task_state: Some(TaskState::Scheduling),
            power_state: power_state::NOSTATE,
            metadata: request.metadata,
            locked: false,
            locked_reason: None,
            locked_by: None,
            host: None,
            node: None,
            bdms: Vec::new(),
            fault: None,
            created: wall,
            updated: wall,
            launched_at: wall,
            generation: 1,
        };
        self.actions
            .entry(id.clone())
            .or_default()
            .push(create_action(&instance, caller, request_id));
        self.instances.insert(id.clone(), instance);
        // Nova lists the newest server first.
        self.instance_order.insert(0, id.clone());
        self.reindex();
        let durations = &self.settings.durations;
        let base = durations.schedule + durations.claim + durations.spawn + durations.finish;
        let after = self.sample(base);
        self.schedule(
            t.plus_secs(after),
            EventKind::Boot {
                instance_id: id.clone(),
                generation: 1,
            },
        );
        tracing::info!(server = %id, "server create accepted");
        Ok((id, password))
    }

    /// The scheduler's host for `flavor` at `t`: enabled, nova-compute up,
    /// room for it; the most free RAM first, then the name.
    fn pick_boot_host(&self, t: SimTime, flavor: &Flavor) -> Option<usize> {
        let fits = |idx: usize| {
            let h = &self.hosts[idx];
            let (used_cpu, used_ram) = self.usage[idx];
            h.enabled
                && self.service_is_up(idx, t)
                && used_cpu + flavor.vcpus as u64 <= h.vcpus as u64
                && used_ram + flavor.ram_mb <= h.ram_mb
        };
        (0..self.hosts.len()).filter(|&i| fits(i)).max_by(|&a, &b| {
            let free = |i: usize| self.hosts[i].ram_mb - self.usage[i].1;
            free(a)
                .cmp(&free(b))
                .then_with(|| self.hosts[b].name.cmp(&self.hosts[a].name))
        })
    }

    /// A boot falls due: the server runs on the scheduler's host, or is
    /// `ERROR` when there is none.
    pub(crate) fn boot_due(&mut self, t: SimTime, id: &str, generation: u64) {
        let Some(inst) = self.instances.get(id) else {
            return;
        };
        if inst.generation != generation || inst.vm_state != VmState::Building {
            return;
        }
        let flavor = inst.flavor.clone();
        let picked = self.pick_boot_host(t, &flavor);
        let wall = self.wall(t);
        let host = picked.map(|idx| {
            self.usage[idx].0 += flavor.vcpus as u64;
            self.usage[idx].1 += flavor.ram_mb;
            let h = &self.hosts[idx];
            (h.name.clone(), h.hypervisor_hostname.clone())
        });
        let inst = self.instances.get_mut(id).expect("checked above");
        inst.task_state = None;
        inst.updated = wall;
        match &host {
            Some((name, node)) => {
                inst.vm_state = VmState::Active;
                inst.power_state = power_state::RUNNING;
                inst.host = Some(name.clone());
                inst.node = Some(node.clone());
                inst.launched_at = wall;
            }
            None => {
                inst.vm_state = VmState::Error;
                inst.fault = Some(model::Fault {
                    code: 500,
                    message: "No valid host was found. ".into(),
                    details: String::new(),
                    created: wall,
                });
            }
        }
        let failed = host.is_none();
        if let Some(action) = self.actions.get_mut(id).and_then(|list| list.last_mut()) {
            action.updated_at = wall;
            if failed {
                action.message = Some("Error".into());
            }
            for e in &mut action.events {
                e.finish_time = Some(wall);
                e.result = Some(if failed { "Error" } else { "Success" }.into());
                e.host = host.as_ref().map(|(name, _)| name.clone());
            }
        }
        tracing::info!(server = id, host = ?host.map(|(name, _)| name), "server boot done");
    }

    /// `DELETE /servers/{id}`: the server is gone at once, its host's
    /// resources and its volume attachments released.
    pub fn delete_server(&mut self, caller: &Caller, id: &str) -> Result<(), Error> {
        let t = self.tick();
        let wall = self.wall(t);
        let inst = self.visible_instance(caller, id)?;
        if !caller.is_member() {
            return Err(Error::Forbidden(
                "Policy doesn't allow os_compute_api:servers:delete to be performed.".into(),
            ));
        }
        if inst.locked && !caller.is_admin {
            return Err(Error::Conflict(format!("Instance {id} is locked")));
        }
        if let Some(task) = inst
            .task_state
            .filter(|t| t.as_str().starts_with("rebuild"))
        {
            return Err(Error::Conflict(format!(
                "Cannot 'delete' instance {id} while it is in task_state {task}"
            )));
        }
        let inst = self.instances.remove(id).expect("visible");
        let built = inst.vm_state != VmState::Building;
        if let Some(idx) = inst.host.as_deref().and_then(|h| self.host_idx(h))
            && built
        {
            let usage = &mut self.usage[idx];
            usage.0 = usage.0.saturating_sub(inst.flavor.vcpus as u64);
            usage.1 = usage.1.saturating_sub(inst.flavor.ram_mb);
        }
        for bdm in &inst.bdms {
            if let Some(attachment) = &bdm.attachment_id {
                self.remove_attachment(&bdm.volume_id, attachment, wall);
            }
        }
        self.instance_order.retain(|other| other != id);
        self.reindex();
        tracing::info!(server = id, "server deleted");
        Ok(())
    }
}

/// The `create` action of a booted server: one build event, finished
/// when the boot falls due.
fn create_action(inst: &Instance, caller: &Caller, request_id: &str) -> InstanceAction {
    InstanceAction {
        action: "create".into(),
        instance_uuid: inst.id.clone(),
        request_id: request_id.to_owned(),
        user_id: caller.user_id.clone(),
        project_id: caller.project_id.clone(),
        start_time: inst.created,
        updated_at: inst.created,
        message: None,
        events: vec![ActionEvent {
            event: "compute__do_build_and_run_instance".into(),
            start_time: inst.created,
            finish_time: None,
            result: None,
            traceback: None,
            host: None,
            details: None,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::reference_id;

    #[test]
    fn references_are_ids_or_links() {
        assert_eq!(reference_id("2"), "2");
        assert_eq!(reference_id("http://nova/compute/v2.1/flavors/2"), "2");
    }
}
