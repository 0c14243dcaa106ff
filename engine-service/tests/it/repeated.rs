//! Hosts that fail more than once (issue 25): a host that came back, took
//! instances and fails again is a new incident, recovered and forced down
//! again, not a duplicate of its earlier, finished notification; a host
//! failing again and again is held out of service by the flapping guard.

use std::time::Duration;

use instanceha_proto::v1 as pb;
use openstack_sim::Scenario;
use openstack_sim::scenario::{HostSpec, InstanceSpec};

use instanceha_testkit::check::{assert_status, vmove_status};
use instanceha_testkit::cloud::{Cloud, fast};

const PATIENCE: Duration = Duration::from_secs(60);

/// Two hosts; three HA instances on the first.
fn two_hosts() -> Scenario {
    fast(
        Scenario::builder()
            .host(HostSpec::new("compute-01"))
            .host(HostSpec::new("compute-02"))
            .instance(InstanceSpec::new("web-1", "compute-01").ha(true))
            .instance(InstanceSpec::new("web-2", "compute-01").ha(true))
            .instance(InstanceSpec::new("web-3", "compute-01").ha(true)),
    )
}

fn hosts_of(cloud: &Cloud) -> Vec<(String, Option<String>)> {
    cloud
        .sim
        .snapshot()
        .instances
        .into_iter()
        .map(|i| (i.name, i.host))
        .collect()
}

fn all_on(cloud: &Cloud, host: &str) {
    for (name, on) in hosts_of(cloud) {
        assert_eq!(on.as_deref(), Some(host), "{name}");
    }
}

fn forced_down(cloud: &Cloud, host: &str) -> bool {
    let world = cloud.sim.snapshot();
    let state = world.host(host).expect("a simulated host");
    state.host.forced_down && !state.host.enabled
}

/// compute-01 fails, comes back; compute-02 fails and its instances go to
/// compute-01, which comes back too; then compute-01 fails again, seconds
/// after its first report (within the duplicate window): recovered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_failing_again_after_its_recovery_is_recovered_and_forced_down_again() {
    let mut cloud = Cloud::start(two_hosts()).await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let (first, _) = cloud.recover_host("compute-01", PATIENCE).await;
    assert_status(&first, pb::NotificationStatus::Finished);
    all_on(&cloud, "compute-02");
    cloud.return_host("compute-01", PATIENCE).await;
    let (second, _) = cloud.recover_host("compute-02", PATIENCE).await;
    assert_status(&second, pb::NotificationStatus::Finished);
    all_on(&cloud, "compute-01");
    cloud.return_host("compute-02", PATIENCE).await;
    assert!(!forced_down(&cloud, "compute-01"), "back in service");

    let again = cloud.host_fails("compute-01").await;
    assert_ne!(again.id, first.id, "a new incident, not the earlier one");
    let again = cloud.terminal(&again.id, PATIENCE).await;
    assert_status(&again, pb::NotificationStatus::Finished);
    let vmoves = cloud.vmoves(&again.id).await;
    assert_eq!(vmoves.len(), 3, "the instances it took are recovered");
    for v in &vmoves {
        assert_eq!(vmove_status(v), pb::VmoveStatus::Succeeded, "{v:?}");
    }
    all_on(&cloud, "compute-02");
    assert!(forced_down(&cloud, "compute-01"), "forced down again");
}

/// With the guard at two failures, compute-01's second failure is still
/// recovered, but the host is held: on maintenance as an operator's, with
/// the reason, until an operator clears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_host_is_recovered_and_held_out_of_service() {
    let mut cloud = Cloud::start_with(
        two_hosts(),
        |_| {},
        |api| {
            api.intake.flapping_failures = 2;
        },
    )
    .await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let (first, _) = cloud.recover_host("compute-01", PATIENCE).await;
    assert!(!first.message.contains("flapping"), "{}", first.message);
    cloud.return_host("compute-01", PATIENCE).await;
    cloud.recover_host("compute-02", PATIENCE).await;
    cloud.return_host("compute-02", PATIENCE).await;

    let (held, vmoves) = cloud.recover_host("compute-01", PATIENCE).await;
    assert_status(&held, pb::NotificationStatus::Finished);
    assert_eq!(vmoves.len(), 3, "a flapping host's instances are recovered");
    assert!(held.message.contains("flapping"), "{}", held.message);
    assert!(
        held.message.contains("until an operator clears"),
        "{}",
        held.message
    );
    let host = cloud
        .hosts
        .list_hosts(pb::ListHostsRequest {
            name: Some("compute-01".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .hosts
        .pop()
        .unwrap();
    assert!(host.on_maintenance, "held on maintenance");
    // Its next report is refused while it is held.
    cloud.sim.power_on("compute-01").unwrap();
    let refused = cloud
        .notifications
        .create_notification(pb::CreateNotificationRequest {
            r#type: pb::NotificationType::ComputeHost as i32,
            hostname: "compute-01".into(),
            generated_time: Some(instanceha_testkit::cloud::now()),
            payload: [("event", "STOPPED"), ("host_status", "NORMAL")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            idempotency_key: String::new(),
        })
        .await
        .expect_err("a held host's reports wait for an operator");
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
}
