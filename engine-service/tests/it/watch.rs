//! Watching a real recovery: several watchers at once, one that joins when
//! it is over, and one that never reads, which must not slow it down.

use std::time::Duration;

use instanceha_proto::v1 as pb;
use openstack_sim::Scenario;
use openstack_sim::scenario::{HostSpec, InstanceGroupSpec};
use pb::notification_update::Update;

use instanceha_testkit::check::status;
use instanceha_testkit::cloud::Cloud;
use instanceha_testkit::cloud::fast;

/// Everything a watcher received, until its stream ended.
async fn watch_to_the_end(
    mut client: pb::notification_service_client::NotificationServiceClient<
        tonic::transport::Channel,
    >,
    id: String,
) -> Vec<Update> {
    let mut stream = client
        .watch_notification(pb::WatchNotificationRequest { id })
        .await
        .expect("watch")
        .into_inner();
    let mut updates = Vec::new();
    while let Some(update) = stream.message().await.expect("the stream") {
        updates.push(update.update.expect("an update"));
    }
    updates
}

fn final_status(updates: &[Update]) -> Option<pb::NotificationStatus> {
    updates.iter().rev().find_map(|u| match u {
        Update::Notification(n) => Some(status(n)),
        Update::Snapshot(s) => s.notification.as_ref().map(status),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_watchers_a_late_joiner_and_a_stalled_one() {
    let mut scenario = fast(
        Scenario::builder()
            .host(HostSpec::new("compute-01"))
            .host(HostSpec::new("compute-02")),
    );
    scenario.instance_groups.push(InstanceGroupSpec {
        host: "compute-01".into(),
        count: 40,
        ..InstanceGroupSpec::default()
    });
    // More updates than a watcher's buffer: the stalled one falls behind.
    scenario.settings.rebuild_concurrency = 40;
    let mut cloud = Cloud::start(scenario).await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    // A watcher that opens its stream and never reads it.
    let mut stalled_client = cloud.notifications.clone();
    let n = cloud.host_fails("compute-01").await;
    let _stalled = stalled_client
        .watch_notification(pb::WatchNotificationRequest { id: n.id.clone() })
        .await
        .expect("watch");
    let watchers: Vec<_> = (0..3)
        .map(|_| tokio::spawn(watch_to_the_end(cloud.notifications.clone(), n.id.clone())))
        .collect();
    let done = cloud.terminal(&n.id, Duration::from_secs(30)).await;
    assert_eq!(
        status(&done),
        pb::NotificationStatus::Finished,
        "{}",
        done.message
    );

    for watcher in watchers {
        let updates = tokio::time::timeout(Duration::from_secs(10), watcher)
            .await
            .expect("the stream ends after the final status")
            .unwrap();
        assert!(
            matches!(updates[0], Update::Snapshot(_)),
            "the current state comes first"
        );
        assert_eq!(
            final_status(&updates),
            Some(pb::NotificationStatus::Finished)
        );
        // Every instance's result arrived, as a change or in a snapshot.
        let succeeded: std::collections::BTreeSet<String> = updates
            .iter()
            .flat_map(|u| match u {
                Update::Vmove(v) => vec![v.clone()],
                Update::Snapshot(s) => s.vmoves.clone(),
                _ => Vec::new(),
            })
            .filter(|v| v.status == pb::VmoveStatus::Succeeded as i32)
            .map(|v| v.instance_id)
            .collect();
        assert_eq!(succeeded.len(), 40, "{updates:?}");
        // Progress events arrive in order, each once.
        let sequences: Vec<u64> = updates
            .iter()
            .filter_map(|u| match u {
                Update::ProgressEvent(p) => Some(p.sequence),
                _ => None,
            })
            .collect();
        assert!(sequences.windows(2).all(|w| w[0] < w[1]), "{sequences:?}");
    }

    // A watcher joining afterwards gets the final state at once, and the
    // stream ends.
    let late = tokio::time::timeout(
        Duration::from_secs(5),
        watch_to_the_end(cloud.notifications.clone(), n.id.clone()),
    )
    .await
    .expect("a late watcher's stream ends");
    assert_eq!(late.len(), 1, "only the snapshot: {late:?}");
    let Update::Snapshot(snapshot) = &late[0] else {
        panic!("not a snapshot: {late:?}");
    };
    assert_eq!(snapshot.vmoves.len(), 40);
    assert!(
        !snapshot
            .notification
            .as_ref()
            .unwrap()
            .progress_events
            .is_empty()
    );
}
