//! Host failures while the control plane itself fails: nova-api stopped,
//! nova-conductor killed, Keystone restarted, the message bus stopped.
//! Each ends with every instance recovered, as Nova records it.

use std::time::{Duration, Instant};

use instanceha_conformance::records::{Records, Server};
use instanceha_conformance::stack::Stack;
use instanceha_conformance::system::System;
use instanceha_proto::v1 as pb;
use instanceha_testkit::eventually;

use crate::clean_stack;
use crate::failures::PATIENCE;
use instanceha_conformance::workload::{Instance, assert_moved, assert_recovered, boot, restore};

/// Boots four HA instances (one from a volume) on the first compute, kills
/// that compute and reports it fenced; `during` runs right after the
/// report (the fault); then the recovery must end with every instance
/// recovered.
async fn host_failure_with<F, Fut>(test: &str, during: F)
where
    F: FnOnce(Stack, Records, Vec<Instance>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let Some((stack, records, _guard)) = clean_stack(test).await else {
        return;
    };
    let computes = stack.computes();
    let failed = computes[0].as_str();
    let instances = boot(&records, &stack, failed, 4, 1, 0).await;
    let mut system = System::start(&stack, |_| {}).await;
    system.segment(&computes).await;

    stack.kill(&format!("nova-{failed}")).await;
    let started = Instant::now();
    let n = system.host_fenced(failed).await;
    during(stack.clone(), records.clone(), instances.clone()).await;
    let (n, vmoves) = system.terminal(&n.id, PATIENCE).await;
    eprintln!(
        "{test}: report to {:?} in {:.1} s",
        pb::NotificationStatus::try_from(n.status),
        started.elapsed().as_secs_f64()
    );
    assert_recovered(&records, failed, &instances, &n, &vmoves).await;
    restore(&records, &stack, failed, &instances).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(no_real_openstack, ignore = "set INSTANCEHA_REAL_OPENSTACK_CTL to run")]
async fn nova_api_stopped_for_thirty_seconds_after_the_report() {
    host_failure_with(
        "nova_api_stopped_for_thirty_seconds_after_the_report",
        |stack, _, _| async move {
            // A second after the report, nova-api stops for thirty seconds.
            // sleep: the second after the report.
            tokio::time::sleep(Duration::from_secs(1)).await;
            stack.stop("nova-api").await;
            // sleep: the thirty seconds.
            tokio::time::sleep(Duration::from_secs(30)).await;
            stack.start("nova-api").await;
        },
    )
    .await;
}

/// Waits until Nova has accepted an evacuation of one of `instances` (its
/// migration record exists).
async fn first_evacuation(records: &Records, instances: &[Instance]) {
    eventually(
        "an evacuation accepted",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || async {
            for i in instances {
                if !records.evacuations(&i.id).await.is_empty() {
                    return Ok(());
                }
            }
            Err("none yet".to_owned())
        },
    )
    .await;
}

/// What Nova made of each instance: lost (its evacuation accepted, never
/// scheduled), failed by Nova itself (its rebuild died with the conductor
/// and the instance is in error away from the failed host, which no
/// evacuation can recover), or moved.
async fn what_nova_made_of(
    records: &Records,
    instances: Vec<Instance>,
) -> (Vec<Instance>, Vec<(Instance, Server)>, Vec<Instance>) {
    let mut lost = Vec::new();
    let mut failed_by_nova = Vec::new();
    let mut recovered = Vec::new();
    for i in instances {
        let newest = records.evacuations(&i.id).await.pop();
        let server = records.server(&i.id).await.unwrap();
        if newest
            .as_ref()
            .is_some_and(|m| m["status"] == "accepted" && m["dest_compute"].is_null())
        {
            lost.push(i);
        } else if server.status == "ERROR" {
            failed_by_nova.push((i, server));
        } else {
            recovered.push(i);
        }
    }
    (lost, failed_by_nova, recovered)
}

/// nova-conductor dies once the first evacuation is under way and is
/// started again ten seconds later. Real Nova then does one of two things
/// with each evacuation the dead conductor held: the destination's call to
/// the conductor times out and the migration ends `failed` with the
/// instance left on the failed host (the engine asks once more and it is
/// recovered), or the request is lost for good: the migration stays
/// `accepted`, never scheduled, and the instance `rebuilding`. Nothing in
/// Nova tells a lost request from a slow one, so the engine does not
/// guess: such an instance ends failed, its vmove saying so. Real Nova may
/// also end a rebuild in error on the destination (its own call to the dead
/// conductor timed out there), which no evacuation recovers: failed too.
/// Every other instance is recovered, and the notification is `finished`
/// only if all are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(no_real_openstack, ignore = "set INSTANCEHA_REAL_OPENSTACK_CTL to run")]
async fn nova_conductor_killed_mid_recovery() {
    let test = "nova_conductor_killed_mid_recovery";
    let Some((stack, records, _guard)) = clean_stack(test).await else {
        return;
    };
    let computes = stack.computes();
    let failed = computes[0].as_str();
    let instances = boot(&records, &stack, failed, 4, 1, 0).await;
    // A lost request fails after 60 s, and once more after the API's retry
    // (each attempt's reconcile follows it as long).
    let mut system = System::start_tuned(
        &stack,
        |e| e.recovery.evacuation_timeout = Duration::from_secs(60),
        |a| {
            a.dispatch.max_attempts = 2;
            a.dispatch.retry_delay = Duration::from_secs(1);
        },
    )
    .await;
    system.segment(&computes).await;

    stack.kill(&format!("nova-{failed}")).await;
    let started = Instant::now();
    let n = system.host_fenced(failed).await;
    first_evacuation(&records, &instances).await;
    stack.kill("nova-conductor").await;
    // sleep: nova-conductor stays dead for ten seconds.
    tokio::time::sleep(Duration::from_secs(10)).await;
    stack.start("nova-conductor").await;
    let (n, vmoves) = system.terminal(&n.id, Duration::from_secs(900)).await;
    eprintln!(
        "{test}: report to {:?} in {:.1} s: {}",
        pb::NotificationStatus::try_from(n.status),
        started.elapsed().as_secs_f64(),
        n.message
    );
    let (lost, failed_by_nova, recovered) = what_nova_made_of(&records, instances).await;
    eprintln!(
        "{test}: {} lost by nova, {} failed by nova, {} recovered",
        lost.len(),
        failed_by_nova.len(),
        recovered.len()
    );
    assert_moved(&records, failed, &recovered, &vmoves).await;
    let vmove = |id: &str| {
        vmoves
            .iter()
            .find(|v| v.instance_id == id)
            .expect("a vmove")
            .clone()
    };
    for i in &lost {
        let v = vmove(&i.id);
        assert_eq!(v.status, pb::VmoveStatus::Failed as i32, "{v:?}");
        assert!(
            v.message.contains("never scheduled"),
            "{}: {}",
            i.name,
            v.message
        );
    }
    for (i, server) in &failed_by_nova {
        // Honest: failed, and never on the failed host as if recovered.
        let v = vmove(&i.id);
        assert_eq!(
            v.status,
            pb::VmoveStatus::Failed as i32,
            "{}: {v:?}; nova: {server:?}",
            i.name
        );
    }
    let all_recovered = lost.is_empty() && failed_by_nova.is_empty();
    assert_eq!(
        pb::NotificationStatus::try_from(n.status),
        Ok(if all_recovered {
            pb::NotificationStatus::Finished
        } else {
            pb::NotificationStatus::Failed
        }),
        "{}",
        n.message
    );
    restore(&records, &stack, failed, &recovered).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(no_real_openstack, ignore = "set INSTANCEHA_REAL_OPENSTACK_CTL to run")]
async fn keystone_restarted_mid_recovery() {
    host_failure_with(
        "keystone_restarted_mid_recovery",
        |stack, _, _| async move {
            // sleep: Keystone restarts half a second after the report.
            tokio::time::sleep(Duration::from_millis(500)).await;
            stack.stop("keystone").await;
            stack.start("keystone").await;
        },
    )
    .await;
}

/// The message bus (RabbitMQ) stops for thirty seconds as soon as Nova
/// accepted the first evacuation, and starts again empty (Nova's queues
/// are not durable): requests cast meanwhile are lost with it. Every
/// instance must still end recovered: an evacuation Nova accepted and lost
/// is found lost in Nova's records and asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(no_real_openstack, ignore = "set INSTANCEHA_REAL_OPENSTACK_CTL to run")]
async fn message_bus_stopped_for_thirty_seconds_after_the_first_evacuation() {
    host_failure_with(
        "message_bus_stopped_for_thirty_seconds_after_the_first_evacuation",
        |stack, records, instances| async move {
            first_evacuation(&records, &instances).await;
            stack.stop("rabbitmq").await;
            // sleep: the message bus stays down for thirty seconds.
            tokio::time::sleep(Duration::from_secs(30)).await;
            stack.start("rabbitmq").await;
        },
    )
    .await;
}
