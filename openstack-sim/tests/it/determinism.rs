//! Determinism: the same seed and the same calls give the same world; another seed does not.

use openstack_sim::Scenario;
use openstack_sim::scenario::{HostGroupSpec, InstanceGroupSpec};
use serde_json::json;

use crate::helpers::{manual_settings, start};

fn scenario(seed: u64) -> Scenario {
    let mut settings = manual_settings();
    settings.seed = seed;
    settings.durations.jitter = 0.3;
    settings.failure_probability.claim = 0.2;
    Scenario::builder()
        .settings(settings)
        .host_group(HostGroupSpec {
            count: 4,
            ..HostGroupSpec::default()
        })
        .instance_group(InstanceGroupSpec {
            host: "compute-01".into(),
            count: 12,
            boot_from_volume_fraction: 0.5,
            ..InstanceGroupSpec::default()
        })
        .build()
        .unwrap()
}

/// Evacuates every server of compute-01 and returns what happened to each.
async fn run(seed: u64) -> (Vec<String>, Vec<(String, Option<String>, String, u64)>) {
    let h = start(scenario(seed)).await;
    let admin = h.admin().await;
    h.fail_host(&admin, "compute-01").await;
    let snapshot = h.sim.snapshot();
    let ids: Vec<String> = snapshot.instances.iter().map(|i| i.id.clone()).collect();
    for id in ids.iter().rev() {
        assert_eq!(h.evacuate(&admin, "2.53", id, json!({})).await.status, 200);
    }
    h.sim.advance(200.0);
    let stats = h.sim.stats();
    let outcomes = stats
        .evacuations
        .iter()
        .map(|e| {
            let d = &e.durations;
            let total = ((d.schedule + d.claim + d.block_device_mapping + d.spawn) * 1000.0) as u64;
            (
                e.instance_name.clone(),
                e.destination.clone(),
                format!("{:?}", e.phase),
                total,
            )
        })
        .collect();
    (ids, outcomes)
}

#[tokio::test]
async fn the_same_seed_replays_the_same_recovery() {
    let (ids_a, outcomes_a) = run(11).await;
    let (ids_b, outcomes_b) = run(11).await;
    assert_eq!(ids_a, ids_b);
    assert_eq!(outcomes_a, outcomes_b);
    assert!(
        outcomes_a.iter().any(|o| o.2 == "Failed"),
        "a 20 % claim failure rate hits at least one of 12"
    );
    let destinations: std::collections::HashSet<_> =
        outcomes_a.iter().filter_map(|o| o.1.clone()).collect();
    assert!(destinations.len() > 1, "the scheduler spreads by free RAM");
    let (ids_c, outcomes_c) = run(12).await;
    assert_ne!(ids_a, ids_c);
    assert_ne!(
        outcomes_a.iter().map(|o| o.3).collect::<Vec<_>>(),
        outcomes_c.iter().map(|o| o.3).collect::<Vec<_>>()
    );
}
