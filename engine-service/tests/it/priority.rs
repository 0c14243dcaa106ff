//! Evacuation tiers and exclusions end to end: `instance_ha:priority` from
//! metadata or the flavor's extra specs, a segment's default tier
//! (`[[host_failure.segment]]`), and `instance_ha:evacuate=false`.

use std::collections::BTreeMap;
use std::time::Duration;

use instanceha_engine::config::SegmentSelection;
use instanceha_proto::v1 as pb;
use openstack_sim::scenario::{AggregateSpec, FlavorSpec, HostSpec, InstanceSpec};
use openstack_sim::{FaultEffect, FaultRule, FaultService, Scenario};

use instanceha_testkit::check::{assert_status, vmove_status};
use instanceha_testkit::cloud::{Cloud, fast};

const PATIENCE: Duration = Duration::from_secs(30);

fn marked(name: &str, key: &str, value: &str) -> InstanceSpec {
    let mut spec = InstanceSpec::new(name, "compute-01").ha(true);
    spec.metadata.insert(key.into(), value.into());
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiers_are_requested_in_order_and_an_excluded_instance_is_left_alone() {
    let mut cloud = three_tiers_and_an_excluded_instance().await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let (n, vmoves) = cloud.recover_host("compute-01", PATIENCE).await;
    assert_status(&n, pb::NotificationStatus::Finished);
    assert_eq!(vmoves.len(), 7, "every instance but the excluded one");
    assert!(
        vmoves
            .iter()
            .all(|v| vmove_status(v) == pb::VmoveStatus::Succeeded)
    );
    evacuates_came_tier_by_tier(&cloud, 0);
    excluded_was_left_alone(&cloud, &n);
    plan_names_the_tiers(&n);
}

/// A retried notification keeps its instances' tiers: every evacuation
/// refused (a 500 past the outage tolerance), then retried once the cause
/// is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_requests_its_evacuations_tier_by_tier_too() {
    let mut cloud = three_tiers_and_an_excluded_instance().await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let refused = FaultEffect::Error {
        status: 500,
        body: Default::default(),
        message: Some("the conductor is down".to_owned()),
        retry_after: None,
    };
    let rule = FaultRule::new(FaultService::Compute, Some("POST"), None, refused);
    let fault = cloud.sim.inject_fault(rule.action("evacuate")).unwrap();
    let n = cloud.host_fails("compute-01").await;
    let n = cloud.terminal(&n.id, PATIENCE).await;
    assert_status(&n, pb::NotificationStatus::Failed);
    assert!(cloud.sim.delete_fault(fault));
    let before = cloud.sim.request_log(None).last().map_or(0, |r| r.seq);
    cloud
        .notifications
        .retry_notification(pb::RetryNotificationRequest { id: n.id.clone() })
        .await
        .expect("a failed notification can be retried");
    let n = cloud.terminal(&n.id, PATIENCE).await;
    assert_status(&n, pb::NotificationStatus::Finished);
    evacuates_came_tier_by_tier(&cloud, before);
    assert_eq!(
        cloud.server("left-alone").host.as_deref(),
        Some("compute-01")
    );
}

/// Tier 1 by flavor and by metadata, tier 2 by metadata, tier 3 the
/// segment's default, and one instance excluded; listed with the last
/// tiers first, so that the order is the engine's.
async fn three_tiers_and_an_excluded_instance() -> Cloud {
    let gold = FlavorSpec {
        name: "gold".into(),
        vcpus: 1,
        ram_mb: 1024,
        extra_specs: BTreeMap::from([("instance_ha:priority".into(), "1".into())]),
        ..FlavorSpec::default()
    };
    let mut builder = Scenario::builder()
        .flavor(gold)
        .host(HostSpec::new("compute-01"))
        .host(HostSpec::new("compute-02"));
    let instances = [
        InstanceSpec::new("unmarked-1", "compute-01").ha(true),
        marked("second-1", "instance_ha:priority", "2"),
        InstanceSpec::new("unmarked-2", "compute-01").ha(true),
        marked("first-by-metadata", "instance_ha:priority", "1"),
        marked("second-2", "instance_ha:priority", "2"),
        InstanceSpec::new("first-by-flavor", "compute-01")
            .ha(true)
            .flavor("gold"),
        marked("left-alone", "instance_ha:evacuate", "false"),
        marked("second-3", "instance_ha:priority", "2"),
    ];
    for spec in instances {
        builder = builder.instance(spec);
    }
    Cloud::start_with(
        fast(builder),
        |engine| {
            // The test segment's unmarked instances go in tier 3.
            engine.host_failure.segment.push(SegmentSelection {
                name: "rack-a".into(),
                default_priority: Some(3),
                ..SegmentSelection::default()
            });
        },
        |_| {},
    )
    .await
}

/// The simulator's request log after `after`: every evacuate of a tier
/// before any of the next tier's.
fn evacuates_came_tier_by_tier(cloud: &Cloud, after: u64) {
    let tier_of = |name: &str| match name {
        "first-by-metadata" | "first-by-flavor" => 1,
        n if n.starts_with("second") => 2,
        _ => 3,
    };
    let names: BTreeMap<String, String> = [
        "unmarked-1",
        "unmarked-2",
        "first-by-metadata",
        "first-by-flavor",
        "second-1",
        "second-2",
        "second-3",
        "left-alone",
    ]
    .into_iter()
    .map(|name| (cloud.server(name).id, name.to_owned()))
    .collect();
    let log = cloud.sim.request_log(None);
    let evacuated: Vec<(u64, &str)> = log
        .iter()
        .filter(|r| r.seq > after && r.action.as_deref() == Some("evacuate"))
        .map(|r| {
            let id = r.instance_id.as_deref().unwrap_or_default();
            (r.seq, names[id].as_str())
        })
        .collect();
    assert_eq!(evacuated.len(), 7, "{evacuated:?}");
    assert!(
        evacuated
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && tier_of(w[0].1) <= tier_of(w[1].1)),
        "every evacuate of a tier before the next tier's: {evacuated:?}"
    );
}

/// The excluded instance: never evacuated, never locked, still there, and
/// named in the progress with the reason.
fn excluded_was_left_alone(cloud: &Cloud, n: &pb::Notification) {
    let log = cloud.sim.request_log(None);
    let left = cloud.server("left-alone");
    assert!(
        log.iter()
            .all(|r| r.instance_id.as_deref() != Some(left.id.as_str()) || r.method == "GET"),
        "nothing but reads touched the excluded instance"
    );
    assert_eq!(left.host.as_deref(), Some("compute-01"));
    assert!(!left.locked);
    assert!(
        n.progress_events.iter().any(|p| {
            p.state == pb::ProgressState::Skipped as i32
                && p.message.contains("left-alone")
                && p.message.contains("instance_ha:evacuate=false")
        }),
        "{:?}",
        n.progress_events
    );
}

/// The plan names each instance's tier.
fn plan_names_the_tiers(n: &pb::Notification) {
    let plan = n
        .progress_events
        .iter()
        .find(|p| p.message.starts_with("evacuated tier by tier"))
        .expect("the tiers in the progress");
    for (name, tier) in [("first-by-flavor", "tier 1"), ("second-3", "tier 2")] {
        let at = plan.message.find(name).unwrap();
        let tier_at = plan.message.find(tier).unwrap();
        assert!(tier_at < at, "{}", plan.message);
    }
    assert!(plan.message.contains("tier 3: "), "{}", plan.message);
}

/// compute-01 fails with a PCI instance, a vGPU instance and a plain one;
/// compute-03 is the segment's reserved host (recovery method
/// auto_priority: the scheduler first); `aggregate` is the hosts of the engine's device aggregate.
async fn devices_cloud(aggregate: &[&str]) -> Cloud {
    let flavor = |name: &str, spec: &str, value: &str| FlavorSpec {
        name: name.into(),
        vcpus: 1,
        ram_mb: 1024,
        extra_specs: BTreeMap::from([(spec.into(), value.into())]),
        ..FlavorSpec::default()
    };
    let scenario = Scenario::builder()
        .flavor(flavor("pci", "pci_passthrough:alias", "a1:1"))
        .flavor(flavor("vgpu", "resources:VGPU", "1"))
        .aggregate(AggregateSpec {
            name: "gpu-reserved".into(),
            availability_zone: None,
            metadata: BTreeMap::new(),
            hosts: aggregate.iter().map(|h| (*h).to_owned()).collect(),
        })
        .host(HostSpec::new("compute-01"))
        .host(HostSpec::new("compute-02"))
        .host(HostSpec::new("compute-03").disabled("reserved for instance HA"))
        .instance(
            InstanceSpec::new("pci-1", "compute-01")
                .ha(true)
                .flavor("pci"),
        )
        .instance(
            InstanceSpec::new("vgpu-1", "compute-01")
                .ha(true)
                .flavor("vgpu"),
        )
        .instance(InstanceSpec::new("plain-1", "compute-01").ha(true));
    let mut cloud = Cloud::start_with(
        fast(scenario),
        |engine| engine.host_failure.device_aggregate = Some("gpu-reserved".into()),
        |_| {},
    )
    .await;
    cloud
        .segment(
            pb::RecoveryMethod::AutoPriority,
            &instanceha_testkit::cloud::TWO_HOSTS_AND_A_SPARE,
        )
        .await;
    cloud
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_instances_go_only_to_the_aggregates_reserved_hosts() {
    let mut cloud = devices_cloud(&["compute-03"]).await;
    let (n, vmoves) = cloud.recover_host("compute-01", PATIENCE).await;
    assert_status(&n, pb::NotificationStatus::Finished);
    assert_eq!(vmoves.len(), 3);
    // The scheduler's pick for the others (the spare is disabled).
    let plain = vmoves
        .iter()
        .find(|v| v.instance_name == "plain-1")
        .unwrap();
    assert_eq!(plain.dest_host, "compute-02");
    for name in ["pci-1", "vgpu-1"] {
        let v = vmoves.iter().find(|v| v.instance_name == name).unwrap();
        assert_eq!(vmove_status(v), pb::VmoveStatus::Succeeded, "{v:?}");
        assert_eq!(v.dest_host, "compute-03", "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_instance_with_no_possible_target_fails_with_that_reason() {
    // The aggregate holds no reserved host of the segment.
    let mut cloud = devices_cloud(&["compute-02"]).await;
    let (_, vmoves) = cloud.recover_host("compute-01", PATIENCE).await;
    let plain = vmoves
        .iter()
        .find(|v| v.instance_name == "plain-1")
        .unwrap();
    assert_eq!(vmove_status(plain), pb::VmoveStatus::Succeeded);
    for name in ["pci-1", "vgpu-1"] {
        let v = vmoves.iter().find(|v| v.instance_name == name).unwrap();
        assert_eq!(vmove_status(v), pb::VmoveStatus::Failed, "{v:?}");
        assert!(
            v.message.contains("needs a device (flavor ")
                && v.message.contains("in host aggregate gpu-reserved"),
            "{}",
            v.message
        );
        // Nova was never asked: no evacuation, no lock.
        let id = cloud.server(name).id;
        assert!(
            cloud
                .sim
                .request_log(None)
                .iter()
                .all(|r| r.instance_id.as_deref() != Some(id.as_str()) || r.method == "GET"),
            "{name}"
        );
        assert_eq!(cloud.server(name).host.as_deref(), Some("compute-01"));
    }
}
