//! The HA instances a scenario boots on the host that will fail, and the
//! invariants of their recovery as Nova, Cinder and Placement record it.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::records::Records;
use crate::stack::{Stack, eventually};
use instanceha_proto::v1 as pb;
use tokio::task::JoinSet;

/// One booted instance.
#[derive(Clone, Debug)]
pub struct Instance {
    pub name: String,
    pub id: String,
    /// Its boot volume, when it boots from one.
    pub volume: Option<String>,
    /// Stopped before the failure (it must stay stopped).
    pub stopped: bool,
}

/// Boots `count` HA instances on `host`: the first `bfv` from a volume,
/// the last `stopped` stopped. All at once, as a cloud fills.
pub async fn boot(
    records: &Records,
    stack: &Stack,
    host: &str,
    count: usize,
    bfv: usize,
    stopped: usize,
) -> Vec<Instance> {
    let image = stack.var("INSTANCEHA_REAL_OPENSTACK_IMAGE").to_owned();
    // The flavor once, before the boots race to create it.
    records.flavor().await;
    let mut set = JoinSet::new();
    for i in 0..count {
        let (records, host, image) = (records.clone(), host.to_owned(), image.clone());
        set.spawn(async move {
            let name = format!("ha-{host}-{i:02}");
            let volume = if i < bfv {
                Some(records.volume(&format!("{name}-root")).await)
            } else {
                None
            };
            let id = records
                .boot(&name, &host, &image, volume.as_deref(), true)
                .await;
            let stopped = i >= count - stopped;
            if stopped {
                records.stop_server(&id).await;
            }
            Instance {
                name,
                id,
                volume,
                stopped,
            }
        });
    }
    let mut instances: Vec<Instance> = set.join_all().await;
    instances.sort_by(|a, b| a.name.cmp(&b.name));
    instances
}

/// Every instance recovered off `failed`, as Nova, Cinder and Placement
/// say, and as the API's records say (`vmoves`: one succeeded per
/// instance).
pub async fn assert_recovered(
    records: &Records,
    failed: &str,
    instances: &[Instance],
    notification: &pb::Notification,
    vmoves: &[pb::Vmove],
) {
    assert_eq!(
        pb::NotificationStatus::try_from(notification.status),
        Ok(pb::NotificationStatus::Finished),
        "{}",
        notification.message
    );
    assert_moved(records, failed, instances, vmoves).await;
}

/// Each of `instances` recovered off `failed`, as Nova, Cinder and
/// Placement say, with a succeeded vmove.
pub async fn assert_moved(
    records: &Records,
    failed: &str,
    instances: &[Instance],
    vmoves: &[pb::Vmove],
) {
    let moved: BTreeSet<&str> = vmoves
        .iter()
        .filter(|v| v.status == pb::VmoveStatus::Succeeded as i32)
        .map(|v| v.instance_id.as_str())
        .collect();
    for i in instances {
        assert!(
            moved.contains(i.id.as_str()),
            "no succeeded vmove for {}",
            i.name
        );
        let s = records.server(&i.id).await.unwrap();
        let wanted = if i.stopped { "SHUTOFF" } else { "ACTIVE" };
        assert_eq!(s.status, wanted, "{}: {s:?}", i.name);
        assert_ne!(s.host, failed, "{} still on the failed host", i.name);
        assert_eq!(s.task_state, None, "{}: {s:?}", i.name);
        assert!(!s.locked, "{} left locked: {:?}", i.name, s.locked_reason);
        let evacuations = records.evacuations(&i.id).await;
        let settled: Vec<_> = evacuations
            .iter()
            .filter(|m| m["status"] == "done" || m["status"] == "completed")
            .collect();
        assert_eq!(
            settled.len(),
            1,
            "{}: one settled evacuation: {evacuations:?}",
            i.name
        );
        assert_eq!(settled[0]["dest_compute"], s.host.as_str(), "{}", i.name);
        let allocated = records.allocation_hosts(&i.id).await;
        assert!(
            allocated.contains(&s.host),
            "{}: no allocation on its host {}: {allocated:?}",
            i.name,
            s.host
        );
        if let Some(volume) = &i.volume {
            let attachments = records.attachments(volume).await;
            assert_eq!(attachments.len(), 1, "{}: {attachments:?}", i.name);
            assert_eq!(
                attachments[0]["status"], "attached",
                "{}: {attachments:?}",
                i.name
            );
            assert_eq!(attachments[0]["instance"], i.id.as_str(), "{}", i.name);
            let v = records
                .volume_status(volume, "in-use", Duration::from_secs(5))
                .await;
            assert_eq!(v["attachments"].as_array().map(Vec::len), Some(1), "{v}");
            assert_eq!(
                v["attachments"][0]["host_name"],
                s.host.as_str(),
                "{}: {v}",
                i.name
            );
        }
    }
}

/// Brings `host`'s nova-compute back (it destroys the evacuated guests and
/// settles its `done` evacuations), puts it back in service, and checks
/// that Placement then holds each instance on its new host only.
pub async fn restore(records: &Records, stack: &Stack, host: &str, instances: &[Instance]) {
    let process = format!("nova-{host}");
    stack.start(&process).await;
    records.restore_compute(host).await;
    for i in instances {
        eventually(
            &format!("{}: allocations on its new host only", i.name),
            Duration::from_secs(60),
            Duration::from_secs(1),
            || async {
                let s = records.server(&i.id).await?;
                let allocated = records.allocation_hosts(&i.id).await;
                if allocated == [s.host.clone()] {
                    Ok(())
                } else {
                    Err(format!("{allocated:?}, on {}", s.host))
                }
            },
        )
        .await;
    }
}
