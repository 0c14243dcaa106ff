//! Return to service (issue 29): a fenced, recovered host that comes back
//! is brought back (forced up, enabled, off maintenance) by its STARTED
//! report when its segment says `auto`, only once its nova-compute
//! reports; with `manual` it waits for an operator's `RestoreHost`; a host
//! the flapping guard holds is never brought back by a report, only by an
//! operator.

use std::time::Duration;

use instanceha_proto::v1 as pb;
use openstack_sim::Scenario;
use openstack_sim::scenario::{HostSpec, InstanceSpec};

use instanceha_testkit::check::assert_status;
use instanceha_testkit::cloud::{Cloud, TWO_HOSTS, fast};

const PATIENCE: Duration = Duration::from_secs(60);

fn two_hosts() -> Scenario {
    fast(
        Scenario::builder()
            .host(HostSpec::new("compute-01"))
            .host(HostSpec::new("compute-02"))
            .instance(InstanceSpec::new("web-1", "compute-01").ha(true)),
    )
}

/// The API's record of `host`.
async fn record(cloud: &mut Cloud, host: &str) -> pb::Host {
    cloud
        .hosts
        .list_hosts(pb::ListHostsRequest {
            name: Some(host.into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .hosts
        .pop()
        .expect("a registered host")
}

/// What Nova and the API say of `host`: (forced down, disabled, on
/// maintenance).
async fn out_of_service(cloud: &mut Cloud, host: &str) -> (bool, bool, bool) {
    let world = cloud.sim.snapshot();
    let state = &world.host(host).expect("a simulated host").host;
    let (forced_down, disabled) = (state.forced_down, !state.enabled);
    (
        forced_down,
        disabled,
        record(cloud, host).await.on_maintenance,
    )
}

async fn started(cloud: &mut Cloud, host: &str) -> pb::Notification {
    let n = cloud
        .report(
            pb::NotificationType::ComputeHost,
            host,
            &[
                ("event", "STARTED"),
                ("host_status", "NORMAL"),
                ("cluster_status", "ONLINE"),
            ],
        )
        .await;
    cloud.terminal(&n.id, PATIENCE).await
}

/// An operator's restore of `host`: the notification that brings it back.
async fn restore(cloud: &mut Cloud, host: &str) -> pb::Notification {
    let id = record(cloud, host).await.id;
    cloud
        .hosts
        .restore_host(pb::RestoreHostRequest {
            id,
            segment_id: String::new(),
        })
        .await
        .expect("an operator restores a host whose notifications ended")
        .into_inner()
}

async fn segment(cloud: &mut Cloud, returns: pb::ReturnToService) {
    let segment = cloud.segment(pb::RecoveryMethod::Auto, &TWO_HOSTS).await;
    cloud
        .segments
        .update_segment(pb::UpdateSegmentRequest {
            id: segment.id,
            return_to_service: Some(returns as i32),
            ..Default::default()
        })
        .await
        .expect("the segment takes its return_to_service");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auto_a_started_host_returns_only_once_its_nova_compute_reports() {
    let mut cloud = Cloud::start(two_hosts()).await;
    segment(&mut cloud, pb::ReturnToService::Auto).await;
    let (failed, _) = cloud.recover_host("compute-01", PATIENCE).await;
    assert_status(&failed, pb::NotificationStatus::Finished);
    assert_eq!(
        out_of_service(&mut cloud, "compute-01").await,
        (true, true, true)
    );

    // Still powered off: its nova-compute does not report, nothing changes.
    let early = started(&mut cloud, "compute-01").await;
    assert_status(&early, pb::NotificationStatus::Failed);
    assert!(
        early.message.contains("has not reported since"),
        "{}",
        early.message
    );
    assert_eq!(
        out_of_service(&mut cloud, "compute-01").await,
        (true, true, true)
    );

    cloud.sim.power_on("compute-01").unwrap();
    let back = started(&mut cloud, "compute-01").await;
    assert_status(&back, pb::NotificationStatus::Finished);
    assert!(
        back.message.contains("returned to service"),
        "{}",
        back.message
    );
    assert_eq!(
        out_of_service(&mut cloud, "compute-01").await,
        (false, false, false)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_manual_a_started_host_waits_for_the_operators_restore() {
    let mut cloud = Cloud::start(two_hosts()).await;
    segment(&mut cloud, pb::ReturnToService::Manual).await;
    cloud.recover_host("compute-01", PATIENCE).await;
    cloud.sim.power_on("compute-01").unwrap();
    let noted = started(&mut cloud, "compute-01").await;
    assert_status(&noted, pb::NotificationStatus::Finished);
    assert!(
        noted.message.contains("not returned to service"),
        "{}",
        noted.message
    );
    assert_eq!(
        out_of_service(&mut cloud, "compute-01").await,
        (true, true, true)
    );

    let restore = restore(&mut cloud, "compute-01").await;
    assert_eq!(
        restore.payload.get("restored_by").map(String::as_str),
        Some("operator")
    );
    let restored = cloud.terminal(&restore.id, PATIENCE).await;
    assert_status(&restored, pb::NotificationStatus::Finished);
    assert_eq!(
        out_of_service(&mut cloud, "compute-01").await,
        (false, false, false)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_host_is_not_brought_back_by_its_report_only_by_an_operator() {
    let mut cloud = Cloud::start_with(
        two_hosts(),
        |_| {},
        |api| {
            // Every failure holds the host: the guard at its tightest.
            api.intake.flapping_failures = 1;
        },
    )
    .await;
    segment(&mut cloud, pb::ReturnToService::Auto).await;
    let (held, _) = cloud.recover_host("compute-01", PATIENCE).await;
    assert!(held.message.contains("flapping"), "{}", held.message);
    cloud.sim.power_on("compute-01").unwrap();
    let noted = started(&mut cloud, "compute-01").await;
    assert!(
        noted.message.contains("not returned to service"),
        "{}",
        noted.message
    );
    assert_eq!(
        out_of_service(&mut cloud, "compute-01").await,
        (true, true, true)
    );

    let restore = restore(&mut cloud, "compute-01").await;
    let restored = cloud.terminal(&restore.id, PATIENCE).await;
    assert_status(&restored, pb::NotificationStatus::Finished);
    assert_eq!(
        out_of_service(&mut cloud, "compute-01").await,
        (false, false, false)
    );
}
