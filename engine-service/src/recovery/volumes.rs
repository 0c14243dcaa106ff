//! Clearing the volume attachments that would keep Nova from attaching an
//! evacuated instance's volumes on its destination (only ever for a fenced
//! host): stale attachments of the failed host, and Nova's own attachment
//! stuck in a state that blocks a new one.

use super::evacuate::Step;
use super::{Run, StepFailure};
use crate::workflow::volumes::{Clearance, VolumeVerdict, judge_volume};
use openstack_client::cinder::Volume;
use openstack_client::nova::Server;

impl Run {
    /// Clears attachments that would keep Nova from attaching the
    /// instance's volumes on the destination. Only for a fenced host: its
    /// old session is certainly dead.
    pub(super) async fn clear_blocking_volumes(&self, id: &str, server: &Server) -> Step<()> {
        const STEP: &str = "volumes";
        let openstack = self.openstack();
        let source = self.request.hostname.as_str();
        let bdms = match self.or_cancel(openstack.bdm_attachments(id)).await? {
            Ok(bdms) => bdms,
            Err(e) => return Ok(Err(StepFailure::new(STEP, e))),
        };
        let has_api = match self.or_cancel(openstack.has_attachments_api()).await? {
            Ok(has) => has,
            Err(e) => return Ok(Err(StepFailure::new(STEP, e))),
        };
        for attached in &server.volumes_attached {
            let bdm = bdms
                .iter()
                .find(|b| b.volume_id == attached.id)
                .and_then(|b| b.attachment_id.as_deref());
            let (volume, clearances) = match self.judge(id, &attached.id, bdm, has_api).await? {
                Ok((_, VolumeVerdict::Healthy | VolumeVerdict::Multiattach)) => continue,
                Ok((volume, VolumeVerdict::Blocked(clearances))) => (volume, clearances),
                Err(failure) => return Ok(Err(failure)),
            };
            for clearance in &clearances {
                if let Err(failure) = self.clear(&volume.id, clearance, has_api).await? {
                    return Ok(Err(failure));
                }
                self.reporter.step(
                    id,
                    STEP,
                    match clearance {
                        Clearance::Stale { attachment_id } => format!(
                            "removed stale attachment {attachment_id} of volume {} on {source}",
                            volume.id
                        ),
                        Clearance::Stuck {
                            attachment_id,
                            status,
                        } => format!(
                            "force-detached attachment {attachment_id} of volume {} stuck {status}",
                            volume.id
                        ),
                    },
                );
            }
            // Cinder answered each clearance (a 404 counts as done); an
            // attachment still listed would hold the rebuild for Nova's
            // whole attach timeout, so say so now instead.
            if let Ok((_, VolumeVerdict::Blocked(left))) =
                self.judge(id, &attached.id, bdm, has_api).await?
            {
                let still: Vec<&str> = left
                    .iter()
                    .map(Clearance::attachment_id)
                    .filter(|a| clearances.iter().any(|c| c.attachment_id() == *a))
                    .collect();
                if !still.is_empty() {
                    return Ok(Err(StepFailure::new(
                        STEP,
                        format!(
                            "volume {} still lists attachment(s) {} after clearing them; the rebuild would wait for them",
                            volume.id,
                            still.join(", ")
                        ),
                    )));
                }
            }
        }
        Ok(Ok(()))
    }

    /// Reads volume `volume_id` (and its attachment records, with the
    /// attachments API) and judges what keeps it from moving.
    async fn judge(
        &self,
        id: &str,
        volume_id: &str,
        bdm: Option<&str>,
        has_api: bool,
    ) -> Step<(Volume, VolumeVerdict)> {
        const STEP: &str = "volumes";
        let openstack = self.openstack();
        let volume = match self.or_cancel(openstack.volume(volume_id)).await? {
            Ok(volume) => volume,
            Err(e) => return Ok(Err(StepFailure::new(STEP, e))),
        };
        let records = if has_api {
            match self
                .or_cancel(openstack.volume_attachments(volume_id))
                .await?
            {
                Ok(records) => Some(records),
                Err(e) => return Ok(Err(StepFailure::new(STEP, e))),
            }
        } else {
            None
        };
        let source = self.request.hostname.as_str();
        let verdict = judge_volume(&volume, records.as_deref(), bdm, id, source);
        Ok(Ok((volume, verdict)))
    }

    async fn clear(&self, volume_id: &str, clearance: &Clearance, has_api: bool) -> Step<()> {
        const STEP: &str = "volumes";
        let openstack = self.openstack();
        let source = self.request.hostname.as_str();
        let as_service = match self.or_cancel(openstack.has_service_identity()).await? {
            Ok(has) => has,
            Err(e) => return Ok(Err(StepFailure::new(STEP, e))),
        };
        let attachment = clearance.attachment_id();
        let result = match clearance {
            // Nova does not use it: any admin may remove it.
            Clearance::Stale { .. } if has_api => {
                match self
                    .or_cancel(openstack.delete_attachment(attachment, false))
                    .await?
                {
                    Err(e) if e.is_conflict() && as_service => {
                        self.or_cancel(openstack.delete_attachment(attachment, true))
                            .await?
                    }
                    other => other,
                }
            }
            Clearance::Stale { .. } => {
                self.or_cancel(openstack.force_detach(volume_id, attachment, source, false))
                    .await?
            }
            // Nova's own attachment: Cinder wants a service caller. Deleted
            // as Nova deletes its own, so that Cinder terminates the
            // backend's connection with the connector it stored when the
            // attachment was made (an iSCSI target needs its initiator,
            // which no API shows); os-force_detach would take only the
            // connector a caller can give, the host's name.
            Clearance::Stuck { .. } if has_api => {
                self.or_cancel(openstack.delete_attachment(attachment, as_service))
                    .await?
            }
            // Before the attachments API (3.27) a force-detach is all there
            // is.
            Clearance::Stuck { .. } => {
                self.or_cancel(openstack.force_detach(volume_id, attachment, source, as_service))
                    .await?
            }
        };
        Ok(result.map_err(|e| {
            let hint = if e.is_conflict() && !as_service {
                " (Cinder lets only a service caller detach an attachment Nova uses: give the engine's user the service role or set openstack.service_auth)"
            } else {
                ""
            };
            StepFailure::new(
                STEP,
                format!("clear attachment {attachment} of volume {volume_id}: {e}{hint}"),
            )
        }))
    }
}
