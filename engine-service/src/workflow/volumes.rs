//! Which volume attachments would block an evacuation, and how to clear
//! them. The seed's boot-from-volume problem: a non-multiattach volume
//! whose old host still holds it cannot be attached on the destination, and
//! the instance waits for minutes. A healthy volume (only the attachment
//! Nova's block-device mapping uses, attached) is left to Nova, which moves
//! attachments itself on evacuate.

use openstack_client::cinder::{Attachment, Volume};

/// Attachment (and volume) states that make Nova's attachment swap fail;
/// `detaching` only a volume shows.
const STUCK: [&str; 4] = [
    "detaching",
    "error_detaching",
    "attaching",
    "error_attaching",
];

/// One attachment to clear before evacuating.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Clearance {
    /// An attachment on the failed host that Nova's block-device mapping
    /// does not use: the backend still holds the dead host's session. Any
    /// admin may delete it.
    Stale { attachment_id: String },
    /// The attachment Nova uses, stuck in a transitional or error state
    /// (or its volume's detach in progress). Cinder lets only a service
    /// caller delete it (or, before the attachments API, force-detach it).
    Stuck {
        attachment_id: String,
        status: String,
    },
}

impl Clearance {
    pub fn attachment_id(&self) -> &str {
        match self {
            Self::Stale { attachment_id } | Self::Stuck { attachment_id, .. } => attachment_id,
        }
    }
}

/// What the volume check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeVerdict {
    /// Nova can move it; nothing to do.
    Healthy,
    /// Multiattach volumes attach on the destination before detaching.
    Multiattach,
    /// These attachments must go first.
    Blocked(Vec<Clearance>),
}

/// Judges one volume of `instance_id`, which ran on `failed_host`.
/// `records` are the volume's attachment records from the attachments API
/// (all statuses), when available; `bdm_attachment_id` is the attachment
/// Nova's block-device mapping uses, when Nova says (2.89+).
pub fn judge_volume(
    volume: &Volume,
    records: Option<&[Attachment]>,
    bdm_attachment_id: Option<&str>,
    instance_id: &str,
    failed_host: &str,
) -> VolumeVerdict {
    if volume.multiattach {
        return VolumeVerdict::Multiattach;
    }
    let mut clear = Vec::new();
    // Attached on the failed host but not the BDM's: a stale session. Only
    // judged when Nova told us which attachment is its own.
    if let Some(bdm) = bdm_attachment_id {
        for attachment in &volume.attachments {
            let Some(id) = attachment.attachment_id.as_deref() else {
                continue;
            };
            if attachment.host_name.as_deref() == Some(failed_host) && id != bdm {
                clear.push(Clearance::Stale {
                    attachment_id: id.to_owned(),
                });
            }
        }
    }
    // The instance's own attachment stuck mid-operation, as its attachment
    // records show it (attaching, error_attaching, error_detaching).
    for record in records.unwrap_or_default() {
        let ours = record.instance.as_deref() == Some(instance_id)
            || bdm_attachment_id == Some(record.id.as_str());
        if ours
            && STUCK.contains(&record.status.as_str())
            && !clear.iter().any(|c| c.attachment_id() == record.id)
        {
            clear.push(Clearance::Stuck {
                attachment_id: record.id.clone(),
                status: record.status.clone(),
            });
        }
    }
    // A detach in progress shows only in the volume's status: Cinder has no
    // `detaching` attachment, and its record stays `attached` (measured on
    // Cinder 29, where that instance's evacuation failed with "status must
    // be available or downloading to reserve"). Without the attachments API
    // the volume's status is all there is. Either way the attachment to
    // force-detach is the instance's own on the failed host.
    let stuck_already = clear.iter().any(|c| matches!(c, Clearance::Stuck { .. }));
    if STUCK.contains(&volume.status.as_str()) && !stuck_already {
        let own = bdm_attachment_id.map(str::to_owned).or_else(|| {
            volume
                .attachments
                .iter()
                .find(|a| {
                    a.server_id.as_deref() == Some(instance_id)
                        && a.host_name.as_deref() == Some(failed_host)
                })
                .and_then(|a| a.attachment_id.clone())
        });
        if let Some(attachment_id) = own
            && !clear.iter().any(|c| c.attachment_id() == attachment_id)
        {
            clear.push(Clearance::Stuck {
                attachment_id,
                status: volume.status.clone(),
            });
        }
    }
    if clear.is_empty() {
        VolumeVerdict::Healthy
    } else {
        VolumeVerdict::Blocked(clear)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openstack_client::cinder::VolumeAttachment;

    fn volume(status: &str, multiattach: bool, attached: &[(&str, &str)]) -> Volume {
        Volume {
            id: "v1".into(),
            status: status.into(),
            multiattach,
            attachments: attached
                .iter()
                .map(|(id, host)| VolumeAttachment {
                    attachment_id: Some((*id).into()),
                    server_id: Some("i1".into()),
                    host_name: Some((*host).into()),
                })
                .collect(),
        }
    }

    fn record(id: &str, status: &str) -> Attachment {
        Attachment {
            id: id.into(),
            status: status.into(),
            instance: Some("i1".into()),
            volume_id: Some("v1".into()),
        }
    }

    #[test]
    fn a_healthy_volume_is_left_to_nova() {
        let v = volume("in-use", false, &[("a1", "c1")]);
        let records = [record("a1", "attached")];
        assert_eq!(
            judge_volume(&v, Some(&records), Some("a1"), "i1", "c1"),
            VolumeVerdict::Healthy
        );
    }

    #[test]
    fn multiattach_volumes_are_never_touched() {
        let v = volume("in-use", true, &[("a1", "c1"), ("old", "c1")]);
        assert_eq!(
            judge_volume(&v, None, Some("a1"), "i1", "c1"),
            VolumeVerdict::Multiattach
        );
    }

    #[test]
    fn a_stale_attachment_on_the_failed_host_is_cleared() {
        let v = volume(
            "in-use",
            false,
            &[("a1", "c1"), ("old", "c1"), ("elsewhere", "c9")],
        );
        let verdict = judge_volume(&v, None, Some("a1"), "i1", "c1");
        assert_eq!(
            verdict,
            VolumeVerdict::Blocked(vec![Clearance::Stale {
                attachment_id: "old".into()
            }])
        );
    }

    #[test]
    fn without_the_bdm_id_stale_ones_cannot_be_told_apart() {
        let v = volume("in-use", false, &[("a1", "c1"), ("old", "c1")]);
        assert_eq!(
            judge_volume(&v, None, None, "i1", "c1"),
            VolumeVerdict::Healthy
        );
    }

    #[test]
    fn a_stuck_bdm_attachment_is_force_detached() {
        let v = volume("attaching", false, &[]);
        let records = [record("a1", "attaching")];
        let stuck = VolumeVerdict::Blocked(vec![Clearance::Stuck {
            attachment_id: "a1".into(),
            status: "attaching".into(),
        }]);
        assert_eq!(
            judge_volume(&v, Some(&records), Some("a1"), "i1", "c1"),
            stuck
        );
        // Without the attachments API the volume status is enough.
        assert_eq!(judge_volume(&v, None, Some("a1"), "i1", "c1"), stuck);
    }

    #[test]
    fn a_detach_in_progress_is_seen_in_the_volume_status_alone() {
        // What Cinder 29 shows after os-begin_detaching: the volume
        // detaching, its attachment (and record) still attached.
        let v = volume("detaching", false, &[("a1", "c1")]);
        let records = [record("a1", "attached")];
        let stuck = VolumeVerdict::Blocked(vec![Clearance::Stuck {
            attachment_id: "a1".into(),
            status: "detaching".into(),
        }]);
        assert_eq!(
            judge_volume(&v, Some(&records), Some("a1"), "i1", "c1"),
            stuck
        );
        // Nova not saying which attachment is its own (before 2.89): the
        // instance's attachment on the failed host.
        assert_eq!(judge_volume(&v, Some(&records), None, "i1", "c1"), stuck);
        assert_eq!(judge_volume(&v, None, None, "i1", "c1"), stuck);
        // Another host's attachment is not the failed host's to clear.
        let elsewhere = volume("detaching", false, &[("a1", "c9")]);
        assert_eq!(
            judge_volume(&elsewhere, None, None, "i1", "c1"),
            VolumeVerdict::Healthy
        );
    }

    #[test]
    fn a_stuck_record_is_not_cleared_twice_for_the_volume_status() {
        let v = volume("attaching", false, &[("a1", "c1")]);
        let records = [record("a1", "attached"), record("a2", "attaching")];
        assert_eq!(
            judge_volume(&v, Some(&records), Some("a1"), "i1", "c1"),
            VolumeVerdict::Blocked(vec![Clearance::Stuck {
                attachment_id: "a2".into(),
                status: "attaching".into(),
            }])
        );
    }
}
