//! How the simulated nova-compute runs rebuilds: queued beyond the
//! per-host limit, sent to a dead host that is not yet down (waiting for it
//! and running when it starts), and migration records updated only when
//! they change.

use openstack_sim::Scenario;
use openstack_sim::scenario::{HostSpec, InstanceGroupSpec};
use reqwest::Method;
use serde_json::json;

use crate::helpers::{manual_settings, start, two_hosts};
use crate::nova_evacuate::migration;

#[tokio::test]
async fn rebuilds_queue_beyond_the_per_host_limit() {
    let mut settings = manual_settings();
    settings.rebuild_concurrency = 2;
    let scenario = Scenario::builder()
        .settings(settings)
        .host(HostSpec::new("c1"))
        .host(HostSpec::new("c2"))
        .instance_group(InstanceGroupSpec {
            host: "c1".into(),
            count: 6,
            ..InstanceGroupSpec::default()
        })
        .build()
        .unwrap();
    let h = start(scenario).await;
    let admin = h.admin().await;
    h.fail_host(&admin, "c1").await;
    for i in 1..=6 {
        let id = h.id_of(&format!("vm-{i:03}"));
        assert_eq!(h.evacuate(&admin, "2.53", &id, json!({})).await.status, 200);
    }
    h.sim.advance(120.0);
    let stats = h.sim.stats();
    assert_eq!(stats.done, 6);
    let mut starts: Vec<f64> = stats
        .evacuations
        .iter()
        .map(|e| e.rebuild_started_at.unwrap() - e.requested_at)
        .collect();
    starts.sort_by(f64::total_cmp);
    // each rebuild holds a slot for claim + bdm + spawn + 2 finish = 8 s
    let waves: Vec<f64> = starts.iter().map(|s| (s / 8.0).floor()).collect();
    assert_eq!(
        waves,
        vec![0.0, 0.0, 1.0, 1.0, 2.0, 2.0],
        "starts {starts:?}"
    );
    let ideal = stats.ideal_makespan.unwrap();
    assert!(
        (ideal - 25.0).abs() < 0.01,
        "1 s scheduling + three waves of 8 s: {ideal}"
    );
    assert!(stats.makespan.unwrap() >= ideal - 0.01);
}

/// A cast to a nova-compute that is not running waits in its message queue (the scheduler
/// trusted its heartbeat): no compute event, the migration `accepted` with no destination;
/// when the compute starts again it runs the rebuild.
#[tokio::test]
async fn a_rebuild_sent_to_a_dead_but_not_yet_down_host_waits_for_it_and_runs_when_it_starts() {
    let scenario = Scenario::builder()
        .settings(manual_settings())
        .host(HostSpec::new("c1"))
        .host(HostSpec::new("c2"))
        .instance(openstack_sim::scenario::InstanceSpec::new("a", "c1"))
        .build()
        .unwrap();
    let h = start(scenario).await;
    let admin = h.admin().await;
    h.fail_host(&admin, "c1").await;
    h.sim.power_off("c2").unwrap();
    let a = h.id_of("a");
    assert_eq!(h.evacuate(&admin, "2.53", &a, json!({})).await.status, 200);
    h.sim.advance(30.0);
    let server = h.server(&admin, "2.53", &a).await;
    assert_eq!(
        server["OS-EXT-STS:task_state"], "rebuilding",
        "the scheduler trusted c2's heartbeat"
    );
    let m = migration(&h, &admin, &a).await;
    assert_eq!(m["status"], "accepted");
    assert!(m["dest_compute"].is_null(), "{m}");
    let snapshot = h.sim.snapshot();
    assert!(!snapshot.evacuations[0].frozen, "it never reached c2");
    let events: Vec<&str> = snapshot
        .instance_actions
        .iter()
        .filter(|x| x.action == "evacuate")
        .flat_map(|x| x.events.iter().map(|e| e.event.as_str()))
        .collect();
    assert_eq!(events, ["rebuild_server"], "no compute event yet");
    h.sim.power_on("c2").unwrap();
    h.sim.advance(30.0);
    let server = h.server(&admin, "2.53", &a).await;
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], "c2");
    assert_eq!(migration(&h, &admin, &a).await["status"], "done");
}

/// Nova inserts a migration with `updated_at` NULL and writes it on the
/// record's first change; `changes-since` and `changes-before` compare
/// that column, so a migration never updated matches neither.
#[tokio::test]
async fn a_migration_is_not_updated_until_it_changes() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    h.fail_host(&admin, "compute-01").await;
    let web = h.id_of("web-1");
    assert_eq!(
        h.evacuate(&admin, "2.80", &web, json!({})).await.status,
        200
    );
    let accepted = migration(&h, &admin, &web).await;
    assert_eq!(accepted["status"], "accepted");
    assert!(accepted["updated_at"].is_null(), "{accepted}");
    let since = |t: &str| {
        format!(
            "/os-migrations?instance_uuid={web}&changes-since={t}&changes-before=2999-01-01T00:00:00Z"
        )
    };
    let created = accepted["created_at"].as_str().unwrap().to_owned();
    let listed = h
        .nova(
            &admin,
            "2.80",
            Method::GET,
            &since("2000-01-01T00:00:00Z"),
            None,
        )
        .await;
    assert_eq!(listed.status, 200, "{}", listed.text);
    assert_eq!(
        listed.body["migrations"].as_array().unwrap().len(),
        0,
        "a migration never updated is not in changes-since: {}",
        listed.text
    );

    h.sim.advance(3.0);
    let moving = migration(&h, &admin, &web).await;
    assert_eq!(moving["status"], "pre-migrating");
    let updated = moving["updated_at"]
        .as_str()
        .expect("updated once it changes");
    assert!(updated > created.as_str(), "{updated} after {created}");
    let listed = h
        .nova(&admin, "2.80", Method::GET, &since(&created), None)
        .await;
    assert_eq!(listed.body["migrations"].as_array().unwrap().len(), 1);
}
