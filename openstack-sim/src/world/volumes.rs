//! Cinder's side of the world: attachments and their effect on volume status, the
//! "use the Compute API" rule, force detach and reset status, how an evacuation moves a server's
//! volumes, and which attachment on a dead source host stalls a rebuild.

use chrono::{DateTime, Utc};

use super::model::{AttachStatus, Attachment, Volume};
use super::{Error, World, connection_info, new_uuid};
use crate::clock::SimTime;
use crate::identity::Caller;

/// Statuses `os-reset_status` accepts, including the `detaching`/`error_deleting` pair that
/// upstream accepts through a missing comma; `deleting` is refused.
pub const RESET_STATUSES: &[&str] = &[
    "available",
    "error",
    "creating",
    "error_deleting",
    "detaching",
    "error_managing",
    "managing",
    "attaching",
    "in-use",
    "maintenance",
    "reserved",
];

/// The device Cinder records for an attachment given `connector`: its
/// `mountpoint` (Nova sends one), else `na`.
fn mountpoint(connector: &serde_json::Value) -> String {
    connector
        .get("mountpoint")
        .and_then(|m| m.as_str())
        .unwrap_or("na")
        .to_owned()
}

/// What `POST /attachments` asked for.
#[derive(Debug, Clone)]
pub struct NewAttachment {
    pub volume_id: String,
    pub instance_id: Option<String>,
    pub connector: Option<serde_json::Value>,
    pub mode: String,
}

impl World {
    pub(crate) fn volume(&self, id: &str) -> Result<&Volume, Error> {
        self.volumes
            .get(id)
            .ok_or_else(|| Error::NotFound(format!("Volume {id} could not be found.")))
    }

    /// The volume and attachment of an attachment id.
    pub(crate) fn attachment(&self, id: &str) -> Result<(&Volume, &Attachment), Error> {
        let not_found = || {
            Error::NotFound(format!(
                "Volume attachment could not be found with filter: attachment_id = {id}."
            ))
        };
        let volume_id = self.attachment_volume.get(id).ok_or_else(not_found)?;
        let volume = &self.volumes[volume_id];
        let attachment = volume
            .attachments
            .iter()
            .find(|a| a.id == id)
            .ok_or_else(not_found)?;
        Ok((volume, attachment))
    }

    fn recompute_status(&mut self, volume_id: &str, wall: DateTime<Utc>) {
        let volume = self.volumes.get_mut(volume_id).expect("known volume");
        volume.status = volume.status_from_attachments().to_string();
        volume.updated_at = wall;
    }

    /// What Cinder's `volume_attached(mark_attached=False)` writes when an
    /// attachment gets a connector: the volume `attaching`, whatever its
    /// other attachments (an attached one included), until the attachment
    /// completes or goes.
    fn mark_attaching(&mut self, volume_id: &str) {
        let volume = self.volumes.get_mut(volume_id).expect("known volume");
        volume.status = "attaching".into();
    }

    pub(crate) fn remove_attachment(
        &mut self,
        volume_id: &str,
        attachment_id: &str,
        wall: DateTime<Utc>,
    ) {
        let volume = self.volumes.get_mut(volume_id).expect("known volume");
        volume.attachments.retain(|a| a.id != attachment_id);
        self.attachment_volume.remove(attachment_id);
        self.recompute_status(volume_id, wall);
    }

    /// Cinder's `attachment_deletion_allowed`: a non-service caller may not remove an attachment
    /// that Nova's BDM of an existing server uses.
    fn check_deletion_allowed(
        &self,
        caller: &Caller,
        attachment: &Attachment,
    ) -> Result<(), Error> {
        if caller.is_service {
            return Ok(());
        }
        let Some(server) = attachment.instance_id.as_deref() else {
            return Ok(());
        };
        if attachment.connection_info.is_none() {
            return Ok(());
        }
        let in_use = self.instances.get(server).is_some_and(|inst| {
            inst.bdms
                .iter()
                .any(|b| b.attachment_id.as_deref() == Some(attachment.id.as_str()))
        });
        if in_use {
            return Err(Error::Conflict(format!(
                "Detach volume from instance {server} using the Compute API"
            )));
        }
        Ok(())
    }

    /// `POST /attachments`.
    pub fn attachment_create(&mut self, req: NewAttachment) -> Result<Attachment, Error> {
        let t = self.tick();
        let wall = self.wall(t);
        let volume = self.volume(&req.volume_id)?;
        if let Some(server) = &req.instance_id
            && !self.instances.contains_key(server)
        {
            return Err(Error::NotFound(format!(
                "Instance {server} could not be found."
            )));
        }
        let live: Vec<&Attachment> = volume
            .attachments
            .iter()
            .filter(|a| a.attach_status != AttachStatus::Detached)
            .collect();
        let status = volume.status.as_str();
        let same_instance_only = live.iter().all(|a| a.instance_id == req.instance_id);
        let allowed = match status {
            "available" | "downloading" => true,
            "in-use" | "reserved" => volume.multiattach || same_instance_only,
            _ => false,
        };
        if !allowed {
            return Err(Error::BadRequest(format!(
                "Invalid volume: Volume {} status must be available or downloading to reserve, \
                 but the current status is {status}.",
                volume.id
            )));
        }
        let id = new_uuid(&mut self.rng);
        let host = req
            .connector
            .as_ref()
            .and_then(|c| c.get("host"))
            .and_then(|h| h.as_str())
            .map(str::to_string);
        let attachment = Attachment {
            id: id.clone(),
            volume_id: req.volume_id.clone(),
            instance_id: req.instance_id.clone(),
            host_name: host,
            attach_status: if req.connector.is_some() {
                AttachStatus::Attaching
            } else {
                AttachStatus::Reserved
            },
            mode: req.mode.clone(),
            device: req.connector.as_ref().map(mountpoint),
            connection_info: req
                .connector
                .as_ref()
                .map(|_| connection_info(&req.volume_id)),
            connector: req.connector,
            attached_at: None,
            detached_at: None,
            created_at: wall,
        };
        self.volumes
            .get_mut(&req.volume_id)
            .expect("checked")
            .attachments
            .push(attachment.clone());
        self.attachment_volume.insert(id, req.volume_id.clone());
        self.recompute_status(&req.volume_id, wall);
        if attachment.connector.is_some() {
            self.mark_attaching(&req.volume_id);
        }
        self.recheck_stalls(t);
        Ok(attachment)
    }

    /// `PUT /attachments/{id}` with a connector: the attachment becomes `attaching` on that host.
    pub fn attachment_update(
        &mut self,
        attachment_id: &str,
        connector: serde_json::Value,
    ) -> Result<Attachment, Error> {
        let t = self.tick();
        let wall = self.wall(t);
        let (volume, attachment) = self.attachment(attachment_id)?;
        if attachment.attach_status == AttachStatus::Attached {
            return Err(Error::BadRequest(format!(
                "Invalid volume attachment: attachment {attachment_id} is already attached"
            )));
        }
        let volume_id = volume.id.clone();
        let host = connector
            .get("host")
            .and_then(|h| h.as_str())
            .map(str::to_string);
        let volume = self.volumes.get_mut(&volume_id).expect("known");
        let a = volume
            .attachments
            .iter_mut()
            .find(|a| a.id == attachment_id)
            .expect("found above");
        a.host_name = host;
        a.device = Some(mountpoint(&connector));
        a.connection_info = Some(connection_info(&volume_id));
        a.connector = Some(connector);
        a.attach_status = AttachStatus::Attaching;
        let updated = a.clone();
        self.recompute_status(&volume_id, wall);
        self.mark_attaching(&volume_id);
        self.recheck_stalls(t);
        Ok(updated)
    }

    /// `POST /attachments/{id}/action {"os-complete": {}}`.
    pub fn attachment_complete(&mut self, attachment_id: &str) -> Result<(), Error> {
        let t = self.tick();
        let wall = self.wall(t);
        let (volume, _) = self.attachment(attachment_id)?;
        let volume_id = volume.id.clone();
        let volume = self.volumes.get_mut(&volume_id).expect("known");
        let a = volume
            .attachments
            .iter_mut()
            .find(|a| a.id == attachment_id)
            .expect("found above");
        a.attach_status = AttachStatus::Attached;
        a.attached_at = Some(wall);
        self.recompute_status(&volume_id, wall);
        self.recheck_stalls(t);
        Ok(())
    }

    /// `DELETE /attachments/{id}`; returns the volume's remaining attachments.
    pub fn attachment_delete(
        &mut self,
        caller: &Caller,
        attachment_id: &str,
    ) -> Result<Vec<Attachment>, Error> {
        let t = self.tick();
        let wall = self.wall(t);
        let (volume, attachment) = self.attachment(attachment_id)?;
        self.check_deletion_allowed(caller, attachment)?;
        let volume_id = volume.id.clone();
        self.remove_attachment(&volume_id, attachment_id, wall);
        tracing::info!(attachment = attachment_id, volume = %volume_id, "attachment deleted");
        let remaining = self.volumes[&volume_id].attachments.clone();
        self.recheck_stalls(t);
        Ok(remaining)
    }

    /// `os-force_detach`: removes the attachment (the only one when none is named).
    pub fn force_detach(
        &mut self,
        caller: &Caller,
        volume_id: &str,
        attachment_id: Option<&str>,
        connector_host: Option<&str>,
    ) -> Result<(), Error> {
        let t = self.tick();
        let wall = self.wall(t);
        let volume = self.volume(volume_id)?;
        let target = match attachment_id {
            Some(id) => volume.attachments.iter().find(|a| a.id == id).ok_or_else(|| {
                Error::BadRequest(format!(
                    "Error force detaching volume - VolumeAttachmentNotFound: Volume attachment \
                     could not be found with filter: attachment_id = {id}."
                ))
            })?,
            None => {
                let mut candidates = volume
                    .attachments
                    .iter()
                    .filter(|a| connector_host.is_none_or(|h| a.host_name.as_deref() == Some(h)));
                match (candidates.next(), candidates.next()) {
                    (Some(only), None) => only,
                    (None, _) => {
                        return Err(Error::BadRequest(format!(
                            "Error force detaching volume - InvalidVolume: Volume {volume_id} \
                             has no attachment to detach."
                        )));
                    }
                    (Some(_), Some(_)) => {
                        return Err(Error::BadRequest(format!(
                            "Error force detaching volume - InvalidVolume: Volume {volume_id} \
                             has multiple attachments; an attachment_id is required."
                        )));
                    }
                }
            }
        };
        self.check_deletion_allowed(caller, target)?;
        let target_id = target.id.clone();
        self.remove_attachment(volume_id, &target_id, wall);
        tracing::info!(attachment = %target_id, volume = volume_id, "attachment force-detached");
        self.recheck_stalls(t);
        Ok(())
    }

    /// `os-begin_detaching`, what Nova's legacy detach sends first: an `in-use` volume becomes
    /// `detaching`, its attachments unchanged (Cinder has no `detaching` attachment).
    pub fn begin_detaching(&mut self, volume_id: &str) -> Result<(), Error> {
        let t = self.tick();
        let wall = self.wall(t);
        let volume = self.volume(volume_id)?;
        let attached = volume
            .attachments
            .iter()
            .any(|a| a.attach_status == AttachStatus::Attached);
        if volume.status != "in-use" || !attached {
            return Err(Error::BadRequest(
                "Invalid volume: Unable to detach volume. Volume status must be 'in-use' and \
                 attach_status must be 'attached' to detach."
                    .into(),
            ));
        }
        let volume = self.volumes.get_mut(volume_id).expect("checked");
        volume.status = "detaching".into();
        volume.updated_at = wall;
        tracing::info!(volume = volume_id, "volume detaching");
        Ok(())
    }

    /// `os-roll_detaching`: a `detaching` volume goes back to `in-use`; any other is left as it
    /// is, without an error, as Cinder does.
    pub fn roll_detaching(&mut self, volume_id: &str) -> Result<(), Error> {
        let t = self.tick();
        let wall = self.wall(t);
        if self.volume(volume_id)?.status == "detaching" {
            let volume = self.volumes.get_mut(volume_id).expect("checked");
            volume.status = "in-use".into();
            volume.updated_at = wall;
            self.recheck_stalls(t);
        }
        Ok(())
    }

    /// `os-reset_status`. `attach_status: detached` detaches (and so removes) every attachment.
    pub fn reset_status(
        &mut self,
        volume_id: &str,
        status: Option<&str>,
        attach_status: Option<&str>,
        migration_status: Option<&str>,
    ) -> Result<(), Error> {
        let t = self.tick();
        let wall = self.wall(t);
        let volume = self.volume(volume_id)?;
        if status.is_none() && attach_status.is_none() && migration_status.is_none() {
            return Err(Error::BadRequest(
                "Must specify 'status', 'attach_status' or 'migration_status' for update.".into(),
            ));
        }
        if let Some(s) = status {
            if !RESET_STATUSES.contains(&s) {
                return Err(Error::BadRequest("Must specify a valid status".into()));
            }
            let live = volume
                .attachments
                .iter()
                .any(|a| a.attach_status != AttachStatus::Detached);
            let detaching_all = attach_status == Some("detached");
            if s == "in-use" && (!live || detaching_all) {
                return Err(Error::BadRequest(format!(
                    "Invalid volume: Volume {volume_id} cannot be set to in-use without attachments."
                )));
            }
        }
        if let Some(a) = attach_status
            && !matches!(a, "attached" | "detached")
        {
            return Err(Error::BadRequest(
                "Must specify a valid attach status".into(),
            ));
        }
        if let Some(m) = migration_status
            && !matches!(
                m,
                "migrating" | "error" | "success" | "completing" | "none" | "starting"
            )
        {
            return Err(Error::BadRequest(
                "Must specify a valid migration status".into(),
            ));
        }
        let volume = self.volumes.get_mut(volume_id).expect("checked");
        match attach_status {
            Some("detached") => {
                for a in volume.attachments.drain(..) {
                    self.attachment_volume.remove(&a.id);
                }
                volume.status = "available".into();
            }
            Some(_) => {
                for a in &mut volume.attachments {
                    a.attach_status = AttachStatus::Attached;
                }
            }
            None => {}
        }
        if let Some(s) = status {
            volume.status = s.into();
        }
        if let Some(m) = migration_status {
            volume.migration_status = (m != "none").then(|| m.to_string());
        }
        volume.updated_at = wall;
        tracing::info!(
            volume = volume_id,
            ?status,
            ?attach_status,
            "volume status reset"
        );
        self.recheck_stalls(t);
        Ok(())
    }

    /// The volume and attachment that keep an evacuation's rebuild from attaching its volumes:
    /// on a non-multiattach volume, an attachment on the source host that is not the BDM's, or
    /// that sits in a transitional or error state, or any on the source host of a volume whose
    /// detach is in progress (`detaching`, which only the volume shows). A volume an admin reset
    /// to `available` no longer blocks.
    pub(crate) fn blocking_attachment(&self, migration_id: u64) -> Option<(String, String)> {
        let evac = self.evacuations.get(&migration_id)?;
        let inst = self.instances.get(&evac.instance_id)?;
        for bdm in &inst.bdms {
            let Some(volume) = self.volumes.get(&bdm.volume_id) else {
                continue;
            };
            if volume.multiattach || volume.status == "available" {
                continue;
            }
            let detaching = volume.status == "detaching";
            for a in &volume.attachments {
                let on_source = a.host_name.as_deref() == Some(evac.source.as_str());
                let stuck = matches!(
                    a.attach_status,
                    AttachStatus::ErrorDetaching
                        | AttachStatus::Attaching
                        | AttachStatus::ErrorAttaching
                );
                let not_bdms = bdm.attachment_id.as_deref() != Some(a.id.as_str());
                if on_source
                    && a.attach_status != AttachStatus::Detached
                    && (not_bdms || stuck || detaching)
                {
                    return Some((volume.id.clone(), a.id.clone()));
                }
            }
        }
        None
    }

    /// Nova's rebuild on the destination: per BDM, reserve a new attachment for the same server,
    /// delete the old one (as a service), and update the new one with the destination connector.
    pub(crate) fn move_volumes_to(&mut self, t: SimTime, instance_id: &str, dest: &str) {
        let wall = self.wall(t);
        let connector = self.connector_for(dest);
        let bdms = self.instances[instance_id].bdms.clone();
        for (i, bdm) in bdms.iter().enumerate() {
            if !self.volumes.contains_key(&bdm.volume_id) {
                continue;
            }
            let new_id = new_uuid(&mut self.rng);
            let volume = self.volumes.get_mut(&bdm.volume_id).expect("checked");
            volume.attachments.push(Attachment {
                id: new_id.clone(),
                volume_id: bdm.volume_id.clone(),
                instance_id: Some(instance_id.into()),
                host_name: None,
                attach_status: AttachStatus::Reserved,
                mode: "rw".into(),
                device: Some(bdm.device.clone()),
                connector: None,
                connection_info: None,
                attached_at: None,
                detached_at: None,
                created_at: wall,
            });
            self.attachment_volume
                .insert(new_id.clone(), bdm.volume_id.clone());
            if let Some(old) = &bdm.attachment_id {
                self.volumes
                    .get_mut(&bdm.volume_id)
                    .expect("checked")
                    .attachments
                    .retain(|a| &a.id != old);
                self.attachment_volume.remove(old);
            }
            let volume = self.volumes.get_mut(&bdm.volume_id).expect("checked");
            let a = volume
                .attachments
                .iter_mut()
                .find(|a| a.id == new_id)
                .expect("pushed");
            a.host_name = Some(dest.into());
            a.connector = Some(connector.clone());
            a.connection_info = Some(connection_info(&bdm.volume_id));
            a.attach_status = AttachStatus::Attaching;
            self.recompute_status(&bdm.volume_id, wall);
            let inst = self.instances.get_mut(instance_id).expect("present");
            inst.bdms[i].attachment_id = Some(new_id);
        }
    }

    /// `attachment_complete` for every volume of the server: attached, volume in-use.
    pub(crate) fn complete_volume_moves(&mut self, t: SimTime, instance_id: &str) {
        let wall = self.wall(t);
        let bdms = self.instances[instance_id].bdms.clone();
        for bdm in bdms {
            let (Some(attachment_id), Some(volume)) = (
                bdm.attachment_id.as_ref(),
                self.volumes.get_mut(&bdm.volume_id),
            ) else {
                continue;
            };
            if let Some(a) = volume
                .attachments
                .iter_mut()
                .find(|a| &a.id == attachment_id)
            {
                a.attach_status = AttachStatus::Attached;
                a.attached_at = Some(wall);
            }
            self.recompute_status(&bdm.volume_id, wall);
        }
    }

    /// A host that comes back drops the storage sessions Nova does not know about and finishes
    /// the transitions it left half-done.
    pub(crate) fn clear_host_sessions(&mut self, volume_id: &str, host: &str, wall: DateTime<Utc>) {
        let referenced: Vec<String> = self.volumes[volume_id]
            .attachments
            .iter()
            .filter(|a| {
                a.instance_id.as_deref().is_some_and(|server| {
                    self.instances.get(server).is_some_and(|inst| {
                        inst.bdms
                            .iter()
                            .any(|b| b.attachment_id.as_deref() == Some(&a.id))
                    })
                })
            })
            .map(|a| a.id.clone())
            .collect();
        let volume = self.volumes.get_mut(volume_id).expect("known");
        let mut removed = Vec::new();
        for a in &mut volume.attachments {
            if a.host_name.as_deref() != Some(host) {
                continue;
            }
            if !referenced.contains(&a.id) {
                removed.push(a.id.clone());
            } else if matches!(
                a.attach_status,
                AttachStatus::ErrorDetaching
                    | AttachStatus::Attaching
                    | AttachStatus::ErrorAttaching
            ) {
                a.attach_status = AttachStatus::Attached;
            }
        }
        volume.attachments.retain(|a| !removed.contains(&a.id));
        for id in removed {
            self.attachment_volume.remove(&id);
        }
        self.recompute_status(volume_id, wall);
    }
}
