//! Faults the fault matrix found handled wrongly: a 404 that does not come
//! from Nova about the instance, or comes once, is taken for "the instance
//! was deleted", its vmove is `ignored`, and the notification ends
//! `finished` although the instance is down. The seed's problem again:
//! operators told that recovery completed while an instance is not
//! running.
//!
//! Both recoveries below evacuate an instance whose rebuild Nova fails
//! (the simulator's `compute` failure: the instance ends in ERROR); the
//! honest outcome is a `failed` vmove and a `failed` notification.

use std::time::Duration;

use instanceha_proto::v1 as pb;
use openstack_sim::scenario::{HostSpec, InstanceSpec, Settings};
use openstack_sim::{ErrorBody, EvacuationFailure, FaultEffect, FaultRule, FaultService, Scenario};

use instanceha_testkit::check::assert_honest;
use instanceha_testkit::check::status;
use instanceha_testkit::check::vmove_status;
use instanceha_testkit::cloud::Cloud;
use instanceha_testkit::eventually::{eventually, until};

const PATIENCE: Duration = Duration::from_secs(30);

fn not_found() -> FaultEffect {
    FaultEffect::Error {
        status: 404,
        body: ErrorBody::Json,
        message: None,
        retry_after: None,
    }
}

/// One instance on compute-01 whose evacuation Nova will fail, at a speed
/// where the rebuild takes about 0.6 s.
async fn cloud(victim: InstanceSpec) -> (Cloud, String) {
    cloud_where(victim, |_| {}).await
}

/// [`cloud`], where Nova fails every evacuation the same way.
async fn cloud_failing_every_time(victim: InstanceSpec) -> (Cloud, String) {
    cloud_where(victim, |s| s.failure_probability.compute = 1.0).await
}

async fn cloud_where(
    victim: InstanceSpec,
    configure: impl FnOnce(&mut Settings),
) -> (Cloud, String) {
    let scenario = Scenario::builder()
        .speed(10.0)
        .seed(5)
        .configure(configure)
        .host(HostSpec::new("compute-01"))
        .host(HostSpec::new("compute-02"))
        .instance(victim)
        .build()
        .unwrap();
    let mut cloud = Cloud::start(scenario).await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let id = cloud.server("victim").id;
    cloud
        .sim
        .set_evacuation_failure(&id, Some(EvacuationFailure::Compute))
        .unwrap();
    (cloud, id)
}

/// Waits until Nova has accepted the evacuation of `id`.
async fn evacuation_requested(cloud: &Cloud, id: &str) {
    eventually(
        "an evacuation",
        PATIENCE,
        Duration::from_millis(2),
        || async { cloud.accepted_evacuations(id) > 0 },
    )
    .await;
}

/// The honest end: the instance that Nova failed to rebuild is reported
/// failed, and so is the notification.
async fn ends_failed(cloud: &mut Cloud, n: &pb::Notification) {
    let n = cloud.terminal(&n.id, PATIENCE).await;
    let vmoves = cloud.vmoves(&n.id).await;
    assert_honest(&n, &vmoves);
    // What Nova makes of the instance once its rebuild has settled.
    let settled = until(PATIENCE, Duration::from_millis(20), || async {
        Some(cloud.server("victim")).filter(|s| s.task_state.is_none())
    });
    let server = settled.await.unwrap_or_else(|_| cloud.server("victim"));
    let victim = &vmoves[0];
    assert_eq!(
        (
            status(&n),
            vmove_status(victim),
            server.vm_state.as_str().to_owned()
        ),
        (
            pb::NotificationStatus::Failed,
            pb::VmoveStatus::Failed,
            "error".to_owned()
        ),
        "notification {:?} ({}); vmove {:?} ({}); Nova has the instance {} on {:?}",
        status(&n),
        n.message,
        vmove_status(victim),
        victim.message,
        server.vm_state.as_str(),
        server.host
    );
}

/// Keystone answers 404 to the login the engine makes after its token was
/// revoked (a proxy in front of a restarting Keystone, a wrong path). The
/// engine's client reports it as `Error::Auth { status: Some(404) }`, and
/// `Error::is_not_found()` (openstack-client/src/error.rs) looks at that
/// status too, so the evacuation follower takes the failed login for
/// "the instance was deleted during its recovery".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keystone_404_is_not_taken_for_a_deleted_instance() {
    // Locked by an operator: the engine neither locks nor unlocks it, so
    // no failed unlock turns the result into a failure by chance.
    let (mut cloud, id) = cloud(
        InstanceSpec::new("victim", "compute-01")
            .ha(true)
            .locked(Some("operator maintenance")),
    )
    .await;
    let n = cloud.host_fails("compute-01").await;
    evacuation_requested(&cloud, &id).await;
    cloud.sim.revoke_all_tokens();
    cloud
        .sim
        .inject_fault(FaultRule::new(
            FaultService::Identity,
            Some("POST"),
            Some("/auth/tokens"),
            not_found(),
        ))
        .unwrap();
    ends_failed(&mut cloud, &n).await;
}

/// Nova answers one read of the instance with 404 while its evacuation
/// runs (a load balancer's 404 page, a cell briefly unreachable) and the
/// rebuild then fails. One 404 is enough for the follower
/// (engine-service/src/recovery/evacuate.rs, `follow`) to conclude the
/// instance is gone, although a failed read otherwise counts only after
/// three in a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_spurious_404_on_a_server_read_does_not_end_a_failed_evacuation_finished() {
    let (mut cloud, id) =
        cloud_failing_every_time(InstanceSpec::new("victim", "compute-01").ha(true)).await;
    let n = cloud.host_fails("compute-01").await;
    evacuation_requested(&cloud, &id).await;
    cloud
        .sim
        .inject_fault(
            FaultRule::new(
                FaultService::Compute,
                Some("GET"),
                Some(&format!("/servers/{id}")),
                not_found(),
            )
            .times(1),
        )
        .unwrap();
    ends_failed(&mut cloud, &n).await;
}

/// Nova ends an evacuation `failed` and leaves the instance in error on the
/// failed host (real Nova does so when nova-conductor or the message bus
/// goes away under the rebuild: a MessagingTimeout, see conformance/):
/// nothing acts on it any more, so the engine asks once more at once, and
/// a later run again while `dispatch.retry_window` is open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_evacuation_left_on_the_failed_host_is_asked_again() {
    // Failed once: asked once more, recovered.
    let (mut once, id) = cloud(InstanceSpec::new("victim", "compute-01").ha(true)).await;
    let n = once.host_fails("compute-01").await;
    ends_recovered(&mut once, &n).await;
    assert_eq!(once.accepted_evacuations(&id), 2);

    // Failed twice: the run's failure may pass, and a later run recovers it.
    let (mut twice, id) = cloud(InstanceSpec::new("victim", "compute-01").ha(true)).await;
    let n = twice.host_fails("compute-01").await;
    evacuation_requested(&twice, &id).await;
    twice
        .sim
        .set_evacuation_failure(&id, Some(EvacuationFailure::Compute))
        .unwrap();
    ends_recovered(&mut twice, &n).await;
    assert_eq!(twice.accepted_evacuations(&id), 3);

    // Failed every time: asked in more than one run, then an honest failure
    // once the retry window has closed.
    let (mut always, id) =
        cloud_failing_every_time(InstanceSpec::new("victim", "compute-01").ha(true)).await;
    let n = always.host_fails("compute-01").await;
    ends_failed(&mut always, &n).await;
    let asked = always.accepted_evacuations(&id);
    assert!(asked >= 3, "asked {asked} times");
}

/// The instance recovered: active on compute-02, the notification
/// finished.
async fn ends_recovered(cloud: &mut Cloud, n: &pb::Notification) {
    let n = cloud.terminal(&n.id, PATIENCE).await;
    let vmoves = cloud.vmoves(&n.id).await;
    assert_honest(&n, &vmoves);
    assert_eq!(
        status(&n),
        pb::NotificationStatus::Finished,
        "{}",
        n.message
    );
    let server = cloud.server("victim");
    assert_eq!(
        (server.vm_state.as_str(), server.host.as_deref()),
        ("active", Some("compute-02"))
    );
}
