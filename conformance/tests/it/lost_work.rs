//! Work Nova accepts and then loses: the destination's nova-compute dies
//! under its evacuations and comes back. Each instance must end recovered
//! on a live compute, with exactly one evacuation Nova settled.

use std::time::{Duration, Instant};

use instanceha_conformance::records::Records;
use instanceha_conformance::system::System;
use instanceha_conformance::workload::{Instance, assert_recovered, boot, restore_host};
use instanceha_proto::v1 as pb;
use instanceha_testkit::eventually::until;

use crate::clean_stack;

/// `recovery.stalled_evacuation_after` in these tests: short, so that a
/// lost evacuation is repaired within the test's patience (the default,
/// 180 s, is for a loaded cloud).
const STALLED_AFTER: Duration = Duration::from_secs(20);

/// The compute an evacuation of one of `instances` was first sent to (its
/// migration names a destination).
async fn first_destination(records: &Records, instances: &[Instance]) -> String {
    until(
        Duration::from_secs(60),
        Duration::from_millis(20),
        || async {
            for i in instances {
                for m in records.evacuations(&i.id).await {
                    if let Some(dest) = m["dest_compute"].as_str() {
                        return Some(dest.to_owned());
                    }
                }
            }
            None
        },
    )
    .await
    .expect("an evacuation reaches a destination within 60 s")
}

/// The destination's nova-compute is SIGKILLed just after the first
/// evacuation reached it and started again twenty seconds later. What it
/// had consumed is lost (Nova leaves those instances `rebuilding` on the
/// failed host, their migrations `accepted` or `pre-migrating`); what waited
/// in its queue runs when it starts. Every instance must end on a live
/// compute, each with one settled evacuation, within the outage, Nova's own
/// time, `stalled_evacuation_after` and some slack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(no_real_openstack, ignore = "set INSTANCEHA_REAL_OPENSTACK_CTL to run")]
async fn destination_compute_killed_for_twenty_seconds_after_its_first_evacuation() {
    let test = "destination_compute_killed_for_twenty_seconds_after_its_first_evacuation";
    let Some((stack, records, _guard)) = clean_stack(test).await else {
        return;
    };
    let computes = stack.computes();
    let failed = computes[0].as_str();
    let instances = boot(&records, &stack, failed, 4, 1, 0).await;
    let mut system = System::start(&stack, |e| {
        e.recovery.stalled_evacuation_after = STALLED_AFTER;
    })
    .await;
    system.segment(&computes).await;

    stack.kill(&format!("nova-{failed}")).await;
    let started = Instant::now();
    let n = system.host_fenced(failed).await;
    let destination = first_destination(&records, &instances).await;
    stack.kill(&format!("nova-{destination}")).await;
    // sleep: the destination's nova-compute stays dead for twenty seconds.
    tokio::time::sleep(Duration::from_secs(20)).await;
    stack.start(&format!("nova-{destination}")).await;
    let (n, vmoves) = system.terminal(&n.id, Duration::from_secs(300)).await;
    let took = started.elapsed();
    eprintln!(
        "{test}: destination {destination}; report to {:?} in {:.1} s: {}",
        pb::NotificationStatus::try_from(n.status),
        took.as_secs_f64(),
        n.message
    );
    assert_recovered(&records, failed, &instances, &n, &vmoves).await;
    for i in &instances {
        let settled: Vec<_> = records
            .evacuations(&i.id)
            .await
            .into_iter()
            .filter(|m| matches!(m["status"].as_str(), Some("done" | "completed")))
            .collect();
        assert_eq!(
            settled.len(),
            1,
            "{}: settled evacuations {settled:?}",
            i.name
        );
    }
    // The outage, Nova's own time (under 30 s for four instances here),
    // one stalled_evacuation_after, and slack for a shared machine.
    let bound = Duration::from_secs(20 + 30 + 30) + STALLED_AFTER;
    assert!(took < bound, "took {took:?}, more than {bound:?}");
    restore_host(&records, &stack, failed).await;
    // Known gap (docs/return-to-service.md): the destination that died
    // keeps the Placement allocation of a claim it made before it died;
    // Nova only warns, and instance-ha does not call Placement yet. Each
    // instance holds its own host, and what else it holds is printed.
    for i in &instances {
        let host = records.server(&i.id).await.unwrap().host;
        let held = records.allocation_hosts(&i.id).await;
        assert!(
            held.contains(&host),
            "{}: on {host}, allocations {held:?}",
            i.name
        );
        if held.len() > 1 {
            eprintln!(
                "{test}: {} on {host} also holds {held:?} (the lost claim)",
                i.name
            );
        }
    }
}
