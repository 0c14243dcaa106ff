//! Recovery that survives what operators meet: an engine in a crash loop,
//! two reports for one host, a notification retried on demand once its
//! cause is gone. Each ends with every instance Nova moved `succeeded`,
//! none locked, each evacuated once, one recovery per host.

use std::time::Duration;

use instanceha_proto::v1 as pb;
use openstack_sim::{FaultEffect, FaultRule, FaultService};

use instanceha_testkit::check::{assert_honest, assert_status, vmove_status};
use instanceha_testkit::cloud::{Cloud, INTERRUPTIBLE_INSTANCES, engine_settings, now};
use instanceha_testkit::eventually;
use instanceha_testkit::process::start_engine;

const PATIENCE: Duration = Duration::from_secs(90);
const FAILED_HOST: &str = "compute-01";

/// Every instance on the spare host, unlocked, evacuated exactly once;
/// every vmove agrees with Nova.
fn assert_all_moved_once(cloud: &Cloud, vmoves: &[pb::Vmove]) {
    for server in cloud.sim.snapshot().instances {
        assert_eq!(
            server.host.as_deref(),
            Some("compute-02"),
            "{}",
            server.name
        );
        assert!(!server.locked, "{} left locked", server.name);
        assert_eq!(
            cloud.accepted_evacuations(&server.id),
            1,
            "{} evacuated once",
            server.name
        );
    }
    for v in vmoves {
        assert_eq!(
            vmove_status(v),
            pb::VmoveStatus::Succeeded,
            "{}: Nova moved it ({})",
            v.instance_name,
            v.message
        );
        assert!(!v.locked, "{} recorded as locked", v.instance_name);
    }
}

/// Waits until `n` of the notification's vmoves succeeded.
async fn until_succeeded(cloud: &Cloud, id: &str, n: usize) {
    let what = format!("{n} vmoves succeeded");
    eventually(&what, PATIENCE, Duration::from_millis(20), || async {
        let done = cloud
            .vmoves(id)
            .await
            .iter()
            .filter(|v| vmove_status(v) == pb::VmoveStatus::Succeeded)
            .count();
        if done >= n {
            Ok(())
        } else {
            Err(format!("{done} of {n}"))
        }
    })
    .await;
}

/// Issue 14: "an engine killed three times during one 50-instance
/// recovery: all 50 vmoves failed while all 50 servers were ACTIVE on
/// other hosts, and all still locked".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_in_a_crash_loop_leaves_every_moved_instance_succeeded_and_unlocked() {
    let mut cloud = Cloud::start(instanceha_testkit::cloud::interruptible_scenario()).await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let n = cloud.host_fails(FAILED_HOST).await;
    let addr = cloud.engine.addr;
    for kill in 1..=3 {
        until_succeeded(&cloud, &n.id, kill * 2).await;
        cloud.engine.kill();
        // sleep: down for a moment, as a crash-looping pod is.
        tokio::time::sleep(Duration::from_millis(300)).await;
        cloud.engine = start_engine(engine_settings(&cloud.sim, addr))
            .await
            .expect("the engine starts again");
    }
    let n = cloud.terminal(&n.id, PATIENCE).await;
    let vmoves = cloud.vmoves(&n.id).await;
    assert_honest(&n, &vmoves);
    assert_status(&n, pb::NotificationStatus::Finished);
    assert_eq!(vmoves.len(), INTERRUPTIBLE_INSTANCES);
    assert_all_moved_once(&cloud, &vmoves);
}

/// Issue 14: "two reports for the same host, generated_time 4 min apart,
/// arriving together: both ran; 100 vmoves for 50 instances".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_reports_for_one_host_make_one_recovery() {
    let mut cloud = Cloud::start(instanceha_testkit::cloud::interruptible_scenario()).await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    cloud.sim.power_off(FAILED_HOST).unwrap();
    let report = |minutes_ago: i64| {
        let mut at = now();
        at.seconds -= minutes_ago * 60;
        pb::CreateNotificationRequest {
            r#type: pb::NotificationType::ComputeHost as i32,
            hostname: FAILED_HOST.into(),
            generated_time: Some(at),
            payload: instanceha_testkit::cloud::fenced_host_payload(),
            idempotency_key: String::new(),
        }
    };
    let (mut a, mut b) = (cloud.notifications.clone(), cloud.notifications.clone());
    let (first, second) = tokio::join!(
        a.create_notification(report(4)),
        b.create_notification(report(0))
    );
    let ids: Vec<String> = [first, second]
        .into_iter()
        .filter_map(|r| r.ok().map(|n| n.into_inner().id))
        .collect();
    assert!(!ids.is_empty(), "at least one report is taken");
    let mut vmoves = Vec::new();
    for id in &ids {
        let n = cloud.terminal(id, PATIENCE).await;
        let these = cloud.vmoves(id).await;
        assert_honest(&n, &these);
        assert!(
            matches!(
                pb::NotificationStatus::try_from(n.status),
                Ok(pb::NotificationStatus::Finished)
            ),
            "{id}: {:?} {}",
            n.status,
            n.message
        );
        vmoves.extend(these);
    }
    assert_eq!(
        vmoves.len(),
        INTERRUPTIBLE_INSTANCES,
        "one vmove per instance across both reports"
    );
    assert_all_moved_once(&cloud, &vmoves);
}

/// Issue 14: "after a failed notification the host stays on maintenance
/// and a new report for it is refused as a duplicate": the operator retries
/// it once the cause is gone, and a new report is not a duplicate of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_notification_is_retried_on_demand_once_its_cause_is_gone() {
    let mut cloud = Cloud::start(instanceha_testkit::cloud::interruptible_scenario()).await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    // Every evacuation refused for good (a cause Nova's state does not
    // explain away and the retry window does not outlast).
    let fault = cloud
        .sim
        .inject_fault(
            FaultRule::new(
                FaultService::Compute,
                Some("POST"),
                None,
                FaultEffect::Error {
                    status: 500,
                    body: Default::default(),
                    message: Some("the conductor is down".to_owned()),
                    retry_after: None,
                },
            )
            .action("evacuate"),
        )
        .unwrap();
    let n = cloud.host_fails(FAILED_HOST).await;
    let n = cloud.terminal(&n.id, PATIENCE).await;
    assert_status(&n, pb::NotificationStatus::Failed);
    let attempts = n.attempts;

    // The cause is gone; the operator retries.
    assert!(cloud.sim.delete_fault(fault));
    let retried = cloud
        .notifications
        .retry_notification(pb::RetryNotificationRequest { id: n.id.clone() })
        .await
        .expect("a failed notification can be retried")
        .into_inner();
    assert_ne!(
        pb::NotificationStatus::try_from(retried.status),
        Ok(pb::NotificationStatus::Failed),
        "the retry is under way"
    );
    let n = cloud.terminal(&n.id, PATIENCE).await;
    let vmoves = cloud.vmoves(&n.id).await;
    assert_honest(&n, &vmoves);
    assert_status(&n, pb::NotificationStatus::Finished);
    assert!(n.attempts > attempts, "a new run recovered them");
    assert_eq!(vmoves.len(), INTERRUPTIBLE_INSTANCES);
    assert_all_moved_once(&cloud, &vmoves);

    // A finished notification is not retried.
    let again = cloud
        .notifications
        .retry_notification(pb::RetryNotificationRequest { id: n.id.clone() })
        .await
        .expect_err("only a failed notification is retried");
    assert_eq!(again.code(), tonic::Code::FailedPrecondition, "{again:?}");
}

/// `grpc.health.v1` status of the engine's service (its readiness).
async fn readiness(addr: std::net::SocketAddr) -> i32 {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let channel = instanceha_testkit::cloud::connect(addr).await;
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: "instanceha.engine.v1.Engine".into(),
        })
        .await
        .map(|r| r.into_inner().status)
        .unwrap_or_default()
}

/// Issue 14: "with no Cinder in the catalog the engine logs 'openstack not
/// reachable yet' every 30 s and never reports SERVING". It is ready when
/// Keystone and Nova answer, and recovers image-backed instances; the
/// token is kept warm with cheap reads of Nova only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cinder_in_the_catalog_the_engine_is_ready_recovers_and_keeps_its_token_warm() {
    use openstack_sim::Scenario;
    use openstack_sim::scenario::{HostSpec, InstanceSpec};
    const SERVING: i32 = 1;
    let mut builder = Scenario::builder()
        .speed(100.0)
        .seed(5)
        .host(HostSpec::new(FAILED_HOST))
        .host(HostSpec::new("compute-02"))
        .configure(|s| s.block_storage = false);
    for i in 0..4 {
        builder = builder.instance(InstanceSpec::new(&format!("vm-{i}"), FAILED_HOST).ha(true));
    }
    let scenario = builder.build().expect("a valid scenario");
    let mut cloud = Cloud::start_with(
        scenario,
        |engine| engine.openstack.token_warmup_interval = Duration::from_millis(200),
        |_| {},
    )
    .await;
    let (within, every) = (Duration::from_secs(20), Duration::from_millis(50));
    eventually("SERVING without Cinder", within, every, || async {
        readiness(cloud.engine.addr).await == SERVING
    })
    .await;
    // The warm-up: authenticated reads of Nova, nothing of Cinder (there
    // is none to call).
    eventually("the token kept warm", within, every, || async {
        let log = cloud.sim.request_log(None);
        let warm_ups = log
            .iter()
            .filter(|r| r.service == "compute" && r.path.contains("os-services"))
            .filter(|r| r.status == Some(200))
            .count();
        assert!(
            log.iter().all(|r| r.service != "volume"),
            "a call to a Cinder the catalog does not list"
        );
        (warm_ups >= 2)
            .then_some(())
            .ok_or(format!("{warm_ups} reads of nova"))
    })
    .await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let (n, vmoves) = cloud.recover_host(FAILED_HOST, PATIENCE).await;
    assert_status(&n, pb::NotificationStatus::Finished);
    assert_eq!(vmoves.len(), 4);
    assert_all_moved_once(&cloud, &vmoves);
}

/// Issue 14: "a restarted API without `$HOSTNAME` or `replica_id` takes a
/// new random name and leaves its own run `running` with nothing running
/// until the lease expires". An API with neither, killed three times in
/// one recovery, resumes its own run at each start: the recovery ends well
/// within one lease, every moved instance succeeded and unlocked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_in_a_crash_loop_without_a_replica_id_resumes_its_own_run_at_once() {
    const LEASE: Duration = Duration::from_secs(120);
    let mut cloud = Cloud::start_with(
        instanceha_testkit::cloud::interruptible_scenario(),
        |_| {},
        |api| {
            api.dispatch.replica_id = None;
            api.dispatch.lease = LEASE;
        },
    )
    .await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let started = tokio::time::Instant::now();
    let n = cloud.host_fails(FAILED_HOST).await;
    let addr = cloud.api.addr;
    for kill in 1..=3 {
        until_succeeded(&cloud, &n.id, kill * 2).await;
        cloud.api.kill();
        let mut settings =
            instanceha_testkit::cloud::api_settings(&cloud.database_url, cloud.engine.addr, addr);
        settings.dispatch.replica_id = None;
        settings.dispatch.lease = LEASE;
        cloud.api = instanceha_testkit::process::start_api(settings)
            .await
            .expect("the API starts again");
        cloud.reconnect().await;
    }
    let n = cloud.terminal(&n.id, PATIENCE).await;
    assert!(
        started.elapsed() < LEASE,
        "the recovery waited for its lease to expire ({:?})",
        started.elapsed()
    );
    let vmoves = cloud.vmoves(&n.id).await;
    assert_honest(&n, &vmoves);
    assert_status(&n, pb::NotificationStatus::Finished);
    assert_eq!(vmoves.len(), INTERRUPTIBLE_INSTANCES);
    assert_all_moved_once(&cloud, &vmoves);
}
