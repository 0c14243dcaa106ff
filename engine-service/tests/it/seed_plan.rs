//! The bug report's test plan, automated: a Nova or Keystone failure during
//! a host recovery that outlasts the outage tolerance and the retry window
//! ends the notification `failed`, with the vmove `failed` with an end
//! time and a message naming the step and what Nova shows, nothing left
//! `pending`, and the instance not left locked.

use std::time::Duration;

use instanceha_proto::v1 as pb;
use openstack_sim::scenario::{HostSpec, InstanceSpec};
use openstack_sim::{ErrorBody, FaultEffect, FaultRule, FaultService, Scenario};

use instanceha_testkit::check::assert_status;
use instanceha_testkit::check::vmove_status;
use instanceha_testkit::cloud::Cloud;
use instanceha_testkit::cloud::fast;
use instanceha_testkit::eventually;

const PATIENCE: Duration = Duration::from_secs(30);

fn scenario() -> Scenario {
    fast(
        Scenario::builder()
            .host(HostSpec::new("compute-01"))
            .host(HostSpec::new("compute-02"))
            .instance(InstanceSpec::new("victim", "compute-01").ha(true))
            .instance(InstanceSpec::new("bystander", "compute-01").ha(true)),
    )
}

fn unavailable() -> FaultEffect {
    FaultEffect::Error {
        status: 503,
        body: ErrorBody::Json,
        message: None,
        retry_after: None,
    }
}

/// Nova answers 503 to the server action `action` on `instance`.
fn action_unavailable(action: &str, instance: &str) -> FaultRule {
    FaultRule::new(
        FaultService::Compute,
        Some("POST"),
        Some("/servers/*/action"),
        unavailable(),
    )
    .action(action)
    .instance(instance)
}

async fn cloud() -> Cloud {
    let mut cloud = Cloud::start(scenario()).await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    cloud
}

/// Runs a host failure with `faults` installed and checks the honest
/// failure path for `victim`: failed notification, failed vmove with end
/// time and message naming `step`, nothing pending, not left locked.
async fn fails_honestly(mut cloud: Cloud, step: &str, expect_locked: bool) -> Cloud {
    let (n, vmoves) = cloud.recover_host("compute-01", PATIENCE).await;
    assert_status(&n, pb::NotificationStatus::Failed);
    let victim = vmoves
        .iter()
        .find(|v| v.instance_name == "victim")
        .expect("the victim was planned");
    assert_eq!(vmove_status(victim), pb::VmoveStatus::Failed);
    assert!(victim.end_time.is_some());
    assert!(
        victim.message.contains(step),
        "the message names the step {step:?}: {}",
        victim.message
    );
    assert!(
        n.message.contains("victim"),
        "the notification names it: {}",
        n.message
    );
    assert_eq!(
        cloud.server("victim").locked,
        expect_locked,
        "lock state of the victim"
    );
    cloud
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nova_503_on_the_server_read_fails_the_notification_not_finished() {
    let cloud = cloud().await;
    let victim = cloud.server("victim").id;
    // Step 3 of the plan: the server-detail request for that instance
    // answers 503, for longer than any retry budget.
    cloud
        .sim
        .inject_fault(
            FaultRule::new(
                FaultService::Compute,
                Some("GET"),
                Some("/servers/*"),
                unavailable(),
            )
            .instance(&victim),
        )
        .unwrap();
    // The first run fails verifying the evacuation, the retries looking the
    // instance up: the message names where the recovery last failed.
    let mut cloud = fails_honestly(cloud, "lookup", false).await;
    // The other instance is recovered all the same.
    let n = cloud
        .notifications
        .list_notifications(pb::ListNotificationsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .notifications
        .remove(0);
    let bystander = cloud.vmove_of(&n.id, "bystander").await;
    assert_eq!(vmove_status(&bystander), pb::VmoveStatus::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keystone_failure_fails_the_notification_not_finished() {
    let cloud = cloud().await;
    // The engine's token is revoked mid-recovery and Keystone answers 503
    // from then on: the re-authentication after the 401 fails.
    let victim = cloud.server("victim").id;
    cloud
        .sim
        .inject_fault(action_unavailable("lock", &victim).times(1))
        .unwrap();
    cloud.sim.revoke_all_tokens();
    cloud
        .sim
        .inject_fault(FaultRule::new(
            FaultService::Identity,
            Some("POST"),
            Some("/auth/tokens"),
            unavailable(),
        ))
        .unwrap();
    let mut cloud = cloud;
    let (n, _) = cloud.recover_host("compute-01", PATIENCE).await;
    // Nothing can be done without a token: the run fails before or at the
    // first instance step, and says it is Keystone.
    assert_status(&n, pb::NotificationStatus::Failed);
    assert!(n.message.contains("keystone"), "{}", n.message);
    assert!(!cloud.server("victim").locked);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nova_503_on_lock_fails_the_instance() {
    let cloud = cloud().await;
    let victim = cloud.server("victim").id;
    cloud
        .sim
        .inject_fault(action_unavailable("lock", &victim))
        .unwrap();
    fails_honestly(cloud, "lock", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nova_503_on_evacuate_fails_the_instance_without_blind_resends() {
    let cloud = cloud().await;
    let victim = cloud.server("victim").id;
    cloud
        .sim
        .inject_fault(action_unavailable("evacuate", &victim))
        .unwrap();
    let cloud = fails_honestly(cloud, "evacuate", false).await;
    // Every resend (within a run, and by the retries) came after reading
    // Nova's records of the instance again: the server, the host's
    // servers, or the evacuation records.
    let log = cloud.sim.request_log(None);
    let mut evacuates = 0;
    let mut read_since = true;
    let mut seen = Vec::new();
    for r in log.iter().filter(|r| r.service == "compute") {
        let about_victim = r.instance_id.as_deref() == Some(victim.as_str());
        if about_victim && r.action.as_deref() == Some("evacuate") {
            seen.push(format!("evacuate {:?}", r.status));
            assert!(
                read_since,
                "evacuate #{} sent blind after: {seen:?}",
                evacuates + 1
            );
            evacuates += 1;
            read_since = false;
        } else if r.method == "GET"
            && r.status == Some(200)
            && (about_victim
                || r.path.ends_with("/servers/detail")
                || r.path.ends_with("/os-migrations"))
        {
            seen.push(format!("GET {}", r.path));
            read_since = true;
        }
    }
    assert!(evacuates >= 1, "never asked to evacuate");
    assert_eq!(cloud.server("victim").host.as_deref(), Some("compute-01"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nova_503_on_the_progress_poll_fails_the_instance() {
    let cloud = cloud().await;
    let victim = cloud.server("victim").id;
    // Every read that would show the evacuation's progress fails.
    cloud
        .sim
        .inject_fault(FaultRule::new(
            FaultService::Compute,
            Some("GET"),
            Some("/os-migrations"),
            unavailable(),
        ))
        .unwrap();
    cloud
        .sim
        .inject_fault(
            FaultRule::new(
                FaultService::Compute,
                Some("GET"),
                Some("/servers/*"),
                unavailable(),
            )
            .instance(&victim),
        )
        .unwrap();
    fails_honestly(cloud, "lookup", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_read_outage_alone_still_recovers_from_the_server_reads() {
    let mut cloud = cloud().await;
    cloud
        .sim
        .inject_fault(
            FaultRule::new(
                FaultService::Compute,
                Some("GET"),
                Some("/os-migrations"),
                unavailable(),
            )
            .times(40),
        )
        .unwrap();
    let (n, _) = cloud.recover_host("compute-01", PATIENCE).await;
    // The servers still show where the instances went.
    assert_status(&n, pb::NotificationStatus::Finished);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nova_503_on_unlock_recovers_says_the_lock_is_held_and_releases_it_later() {
    let mut cloud = cloud().await;
    let victim = cloud.server("victim").id;
    let fault = cloud
        .sim
        .inject_fault(action_unavailable("unlock", &victim))
        .unwrap();
    // Recovered, and honest about the lock it could not remove yet.
    let (n, vmoves) = cloud.recover_host("compute-01", PATIENCE).await;
    assert_status(&n, pb::NotificationStatus::Finished);
    let held = vmoves
        .iter()
        .find(|v| v.instance_name == "victim")
        .expect("the victim was planned");
    assert_eq!(vmove_status(held), pb::VmoveStatus::Succeeded);
    assert!(held.locked, "the vmove records the lock as held");
    assert!(
        n.message.contains("still locked") && n.message.contains("victim"),
        "the notification names the lock: {}",
        n.message
    );
    assert_eq!(cloud.server("victim").host.as_deref(), Some("compute-02"));
    assert!(cloud.server("victim").locked);

    // Nova answers again: the notification that took the lock releases it.
    cloud.sim.delete_fault(fault);
    let every = Duration::from_millis(50);
    eventually("the lock released", PATIENCE, every, || async {
        !cloud.server("victim").locked
    })
    .await;
    eventually("the lock recorded released", PATIENCE, every, || async {
        !cloud.vmove_of(&n.id, "victim").await.locked
    })
    .await;
    let n = cloud.notification(&n.id).await;
    assert_status(&n, pb::NotificationStatus::Finished);
    assert!(!n.message.contains("still locked"), "{}", n.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_fault_gone_the_same_recovery_finishes() {
    let mut cloud = cloud().await;
    let (n, _) = cloud.recover_host("compute-01", PATIENCE).await;
    assert_status(&n, pb::NotificationStatus::Finished);
    let victim = cloud.server("victim");
    assert_eq!(victim.host.as_deref(), Some("compute-02"));
    assert_eq!(victim.vm_state.as_str(), "active");
    assert!(!victim.locked);
}
