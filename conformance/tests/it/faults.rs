//! Host failures while the control plane itself fails: nova-api stopped,
//! nova-conductor killed, Keystone restarted. Each ends with every
//! instance recovered, as Nova records it.

use std::time::{Duration, Instant};

use instanceha_conformance::records::Records;
use instanceha_conformance::stack::Stack;
use instanceha_conformance::system::System;
use instanceha_proto::v1 as pb;

use crate::clean_stack;
use crate::failures::PATIENCE;
use crate::workload::{Instance, assert_recovered, boot, restore};

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
async fn nova_api_stopped_for_thirty_seconds_after_the_report() {
    host_failure_with(
        "nova_api_stopped_for_thirty_seconds_after_the_report",
        |stack, _, _| async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            stack.stop("nova-api").await;
            tokio::time::sleep(Duration::from_secs(30)).await;
            stack.start("nova-api").await;
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nova_conductor_killed_mid_recovery() {
    host_failure_with("nova_conductor_killed_mid_recovery", |stack, records, instances| async move {
        // Once the first evacuation is under way, the conductor dies; an
        // operator's supervisor starts it again ten seconds later.
        instanceha_conformance::stack::eventually(
            "an evacuation under way",
            Duration::from_secs(60),
            Duration::from_millis(100),
            || async {
                for i in &instances {
                    if !records.evacuations(&i.id).await.is_empty() {
                        return Ok(());
                    }
                }
                Err("none yet".to_owned())
            },
        )
        .await;
        stack.kill("nova-conductor").await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        stack.start("nova-conductor").await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keystone_restarted_mid_recovery() {
    host_failure_with("keystone_restarted_mid_recovery", |stack, _, _| async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        stack.stop("keystone").await;
        stack.start("keystone").await;
    })
    .await;
}
