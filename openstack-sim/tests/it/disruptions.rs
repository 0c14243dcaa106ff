//! Failures inside the cloud that make Nova lose evacuations it accepted, with the records Nova
//! 34 leaves: the message bus stopped under nova-conductor, a destination nova-compute killed
//! and started again, a destination host losing power mid-rebuild; and what brings them back
//! (reset the state, evacuate again), as an operator does.

use openstack_sim::scenario::{HostSpec, InstanceSpec};
use openstack_sim::{MessageBusOutage, Scenario, WorldSnapshot};
use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{Harness, manual_settings, start};

/// A failed host c1 with `n` servers, two destinations.
fn scenario(n: usize) -> Scenario {
    let mut builder = Scenario::builder()
        .settings(manual_settings())
        .host(HostSpec::new("c1"))
        .host(HostSpec::new("c2"))
        .host(HostSpec::new("c3"));
    for i in 1..=n {
        builder = builder.instance(InstanceSpec::new(&format!("vm-{i}"), "c1").ha(true));
    }
    builder.build().expect("valid scenario")
}

async fn migrations(h: &Harness, token: &str, server: &str) -> Vec<Value> {
    let a = h
        .nova(
            token,
            "2.80",
            Method::GET,
            &format!("/os-migrations?instance_uuid={server}&migration_type=evacuation"),
            None,
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    a.body["migrations"].as_array().unwrap().clone()
}

/// The events of the server's newest `evacuate` action, oldest first: (event, result, host).
fn evacuate_events(world: &WorldSnapshot, server: &str) -> Vec<(String, Option<String>, String)> {
    world
        .instance_actions
        .iter()
        .rfind(|a| a.instance_uuid == server && a.action == "evacuate")
        .map(|a| {
            a.events
                .iter()
                .map(|e| {
                    (
                        e.event.clone(),
                        e.result.clone(),
                        e.host.clone().unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn task(server: &Value) -> &str {
    server["OS-EXT-STS:task_state"].as_str().unwrap_or("none")
}

#[tokio::test]
async fn a_message_bus_outage_under_nova_conductor_loses_its_evacuations_for_good() {
    let h = start(scenario(3)).await;
    let admin = h.admin().await;
    h.fail_host(&admin, "c1").await;
    let ids: Vec<String> = (1..=3).map(|i| h.id_of(&format!("vm-{i}"))).collect();
    for id in &ids[..2] {
        assert_eq!(h.evacuate(&admin, "2.53", id, json!({})).await.status, 200);
    }
    // The bus stops right after: both are in flight in nova-conductor (scheduled at 1 s).
    let now = h.sim.sim_time();
    h.sim
        .message_bus_outage(
            MessageBusOutage::from_next_evacuation(30.0)
                .at(now)
                .conductor_error_after(80.0),
        )
        .unwrap();
    // A request made during the outage reaches the conductor once the bus is back.
    h.sim.advance(10.0);
    assert_eq!(
        h.evacuate(&admin, "2.53", &ids[2], json!({})).await.status,
        200
    );
    // Its cast waits in nova-api: nova-conductor has not got it (no event yet).
    assert!(evacuate_events(&h.sim.snapshot(), &ids[2]).is_empty());
    // The scheduling call times out 80 s after the conductor's step (at 1 s).
    let ended = |h: &Harness| {
        let world = h.sim.snapshot();
        evacuate_events(&world, &ids[0])[0].1.clone()
    };
    h.sim.advance(70.5);
    assert_eq!(ended(&h), None, "still scheduling");
    h.sim.advance(1.0);
    assert_eq!(ended(&h).as_deref(), Some("Error"));
    h.sim.advance(3600.0);
    for id in &ids[..2] {
        assert_dropped_by_the_conductor(&h, &admin, id).await;
    }
    let late = h.server(&admin, "2.53", &ids[2]).await;
    assert_ne!(late["OS-EXT-SRV-ATTR:host"], "c1", "{late}");
    assert_eq!(migrations(&h, &admin, &ids[2]).await[0]["status"], "done");
    let stats = h.sim.stats();
    assert_eq!((stats.lost, stats.done, stats.in_progress), (2, 1, 0));

    // What brings them back: reset the state, evacuate again.
    for id in &ids[..2] {
        reset_and_evacuate(&h, &admin, id).await;
    }
    h.sim.advance(30.0);
    for id in &ids[..2] {
        let server = h.server(&admin, "2.53", id).await;
        assert_eq!(server["status"], "ACTIVE");
        assert_ne!(server["OS-EXT-SRV-ATTR:host"], "c1");
        let statuses: Vec<Value> = migrations(&h, &admin, id)
            .await
            .iter()
            .map(|m| m["status"].clone())
            .collect();
        assert_eq!(statuses, [json!("done"), json!("accepted")]);
    }
}

/// The records Nova 34 leaves of an evacuation nova-conductor dropped.
async fn assert_dropped_by_the_conductor(h: &Harness, admin: &str, id: &str) {
    let server = h.server(admin, "2.53", id).await;
    assert_eq!(server["status"], "REBUILD", "{server}");
    assert_eq!(task(&server), "rebuilding");
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], "c1");
    let m = &migrations(h, admin, id).await[0];
    assert_eq!(m["status"], "accepted", "{m}");
    assert!(m["dest_compute"].is_null(), "{m}");
    assert!(m["updated_at"].is_null(), "never updated: {m}");
    let world = h.sim.snapshot();
    assert_eq!(
        evacuate_events(&world, id),
        [(
            "rebuild_server".to_owned(),
            Some("Error".to_owned()),
            "controller".to_owned()
        )]
    );
    let action = world
        .instance_actions
        .iter()
        .find(|a| a.instance_uuid == id && a.action == "evacuate")
        .unwrap();
    assert_eq!(action.message.as_deref(), Some("Error"));
    let error = &action.events[0];
    assert!(
        error
            .traceback
            .as_deref()
            .is_some_and(|t| t.contains("MessagingTimeout")),
        "{error:?}"
    );
}

/// An operator's repair of a stuck evacuation: reset the state to active,
/// evacuate again.
async fn reset_and_evacuate(h: &Harness, admin: &str, id: &str) {
    let reset = h
        .nova(
            admin,
            "2.53",
            Method::POST,
            &format!("/servers/{id}/action"),
            Some(json!({"os-resetState": {"state": "active"}})),
        )
        .await;
    assert_eq!(reset.status, 202, "{}", reset.text);
    assert_eq!(h.evacuate(admin, "2.53", id, json!({})).await.status, 200);
}

#[tokio::test]
async fn an_outage_that_misses_the_conductor_loses_nothing() {
    let h = start(scenario(1)).await;
    let admin = h.admin().await;
    h.fail_host(&admin, "c1").await;
    let id = h.id_of("vm-1");
    assert_eq!(h.evacuate(&admin, "2.53", &id, json!({})).await.status, 200);
    // Scheduled at 1 s: the outage opens after it, under the compute's steps.
    h.sim
        .message_bus_outage(MessageBusOutage::from_next_evacuation(20.0).at(2.5))
        .unwrap();
    h.sim.advance(10.0);
    let during = h.server(&admin, "2.53", &id).await;
    assert_eq!(during["OS-EXT-SRV-ATTR:host"], "c1", "its writes wait");
    h.sim.advance(30.0);
    let server = h.server(&admin, "2.53", &id).await;
    assert_eq!(server["status"], "ACTIVE");
    assert_ne!(server["OS-EXT-SRV-ATTR:host"], "c1");
    assert_eq!(h.sim.stats().lost, 0);
}

/// Measured: the destination's nova-compute killed under rebuilds and started again 20 s
/// later: `compute_rebuild_instance` started with no finish; migrations `accepted` or
/// `pre-migrating`; servers `rebuilding` / `rebuild_block_device_mapping` (or, past the spawn,
/// no task); never resumed. Its service never goes down (it came back within
/// service_down_time); casts that reached it while it was dead run when it starts.
#[tokio::test]
async fn a_killed_destination_compute_freezes_its_rebuilds_for_good() {
    let h = start(scenario(2)).await;
    let admin = h.admin().await;
    h.fail_host(&admin, "c1").await;
    let (a, b) = (h.id_of("vm-1"), h.id_of("vm-2"));
    let to_c2 = json!({"host": "c2"});
    assert_eq!(
        h.evacuate(&admin, "2.53", &a, to_c2.clone()).await.status,
        200
    );
    // Scheduled at 1 s, claimed at 2 s: block-device mapping until 4 s.
    h.sim.advance(3.0);
    h.sim.kill_compute("c2", Some(20.0)).unwrap();
    // Sent while c2's compute is dead: it waits in its queue.
    assert_eq!(h.evacuate(&admin, "2.53", &b, to_c2).await.status, 200);
    h.sim.advance(5.0);
    let services = h
        .nova(
            &admin,
            "2.53",
            Method::GET,
            "/os-services?binary=nova-compute&host=c2",
            None,
        )
        .await;
    assert_eq!(
        services.body["services"][0]["state"], "up",
        "{}",
        services.text
    );
    h.sim.advance(3600.0);

    let frozen = h.server(&admin, "2.53", &a).await;
    assert_eq!(task(&frozen), "rebuild_block_device_mapping");
    assert_eq!(frozen["OS-EXT-SRV-ATTR:host"], "c1");
    assert_eq!(frozen["OS-EXT-STS:power_state"], 0, "no guest yet");
    let m = &migrations(&h, &admin, &a).await[0];
    assert_eq!(m["status"], "pre-migrating");
    assert_eq!(m["dest_compute"], "c2");
    let world = h.sim.snapshot();
    assert_eq!(
        evacuate_events(&world, &a),
        [
            (
                "rebuild_server".to_owned(),
                Some("Success".to_owned()),
                "controller".to_owned()
            ),
            ("compute_rebuild_instance".to_owned(), None, "c2".to_owned()),
        ]
    );
    assert!(
        world
            .evacuations
            .iter()
            .any(|e| e.instance_id == a && e.frozen)
    );

    let queued = h.server(&admin, "2.53", &b).await;
    assert_eq!(queued["OS-EXT-SRV-ATTR:host"], "c2", "ran when c2 started");
    assert_eq!(migrations(&h, &admin, &b).await[0]["status"], "done");

    // The operator's repair: reset, evacuate again.
    reset_and_evacuate(&h, &admin, &a).await;
    h.sim.advance(30.0);
    let repaired = h.server(&admin, "2.53", &a).await;
    assert_eq!(repaired["status"], "ACTIVE");
    assert_ne!(repaired["OS-EXT-SRV-ATTR:host"], "c1");
    assert_eq!(
        migrations(&h, &admin, &a).await[1]["status"],
        "pre-migrating"
    );
}

#[tokio::test]
async fn a_killed_compute_goes_down_only_after_the_service_down_time() {
    let h = start(scenario(1)).await;
    let admin = h.admin().await;
    h.sim.kill_compute("c2", None).unwrap();
    let state = |h: &Harness| {
        h.sim
            .snapshot()
            .host("c2")
            .map(|s| s.service_state.clone())
            .unwrap()
    };
    h.sim.advance(45.0);
    assert_eq!(state(&h), "up");
    h.sim.advance(30.0);
    assert_eq!(state(&h), "down");
    h.sim.start_compute("c2").unwrap();
    assert_eq!(state(&h), "up");
    let _ = admin;
}

/// The cascade: the destination loses power under the rebuild (its own guests die too); the
/// freeze outlasts its return.
#[tokio::test]
async fn a_destination_losing_power_mid_spawn_freezes_the_rebuild_for_good() {
    let scenario = Scenario::builder()
        .settings(manual_settings())
        .host(HostSpec::new("c1"))
        .host(HostSpec::new("c2"))
        .host(HostSpec::new("c3"))
        .instance(InstanceSpec::new("moving", "c1").ha(true))
        .instance(InstanceSpec::new("resident", "c2").ha(true))
        .build()
        .unwrap();
    let h = start(scenario).await;
    let admin = h.admin().await;
    h.fail_host(&admin, "c1").await;
    let moving = h.id_of("moving");
    assert_eq!(
        h.evacuate(&admin, "2.53", &moving, json!({"host": "c2"}))
            .await
            .status,
        200
    );
    // Claimed at 2 s, volumes until 4 s, spawning until 7 s.
    h.sim.advance(5.0);
    h.sim.power_off("c2").unwrap();
    h.sim.advance(3600.0);
    let frozen = h.server(&admin, "2.53", &moving).await;
    assert_eq!(task(&frozen), "rebuild_spawning");
    assert_eq!(
        migrations(&h, &admin, &moving).await[0]["status"],
        "pre-migrating"
    );
    h.sim.power_on("c2").unwrap();
    h.sim.advance(3600.0);
    let still = h.server(&admin, "2.53", &moving).await;
    assert_eq!(task(&still), "rebuild_spawning", "never resumed");
    let resident = h.server(&admin, "2.53", &h.id_of("resident")).await;
    assert_eq!(resident["status"], "SHUTOFF", "its own guest died with it");
    assert_eq!(h.sim.stats().lost, 1);
}

/// Every task-state write of a rebuild expects the state it left: reset under a live rebuild,
/// the rebuild stops at its next write: migration `failed`, and Nova saves the server in error
/// with the task state that write carried (`_error_out_instance_on_exception` saves the
/// pending change).
#[tokio::test]
async fn a_reset_under_a_live_rebuild_stops_it_at_its_next_write() {
    let h = start(scenario(1)).await;
    let admin = h.admin().await;
    h.fail_host(&admin, "c1").await;
    let id = h.id_of("vm-1");
    assert_eq!(h.evacuate(&admin, "2.53", &id, json!({})).await.status, 200);
    h.sim.advance(3.0);
    let reset = h
        .nova(
            &admin,
            "2.53",
            Method::POST,
            &format!("/servers/{id}/action"),
            Some(json!({"os-resetState": {"state": "active"}})),
        )
        .await;
    assert_eq!(reset.status, 202);
    h.sim.advance(30.0);
    let server = h.server(&admin, "2.53", &id).await;
    assert_eq!(server["OS-EXT-STS:vm_state"], "error", "{server}");
    assert_eq!(task(&server), "rebuild_spawning");
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], "c1");
    assert_eq!(migrations(&h, &admin, &id).await[0]["status"], "failed");
}

#[tokio::test]
async fn the_control_api_kills_and_starts_computes_and_stops_the_bus() {
    let h = start(scenario(1)).await;
    let kill = h
        .send(
            Method::POST,
            "/sim/hosts/c2/compute/kill",
            &[],
            Some(json!({"restart_after_secs": 20})),
        )
        .await;
    assert_eq!(kill.status, 200, "{}", kill.text);
    assert!(
        h.sim
            .snapshot()
            .host("c2")
            .unwrap()
            .host
            .heartbeat_origin
            .is_none()
    );
    h.sim.advance(21.0);
    assert!(
        h.sim
            .snapshot()
            .host("c2")
            .unwrap()
            .host
            .heartbeat_origin
            .is_some()
    );
    let start = h
        .send(Method::POST, "/sim/hosts/c3/compute/start", &[], None)
        .await;
    assert_eq!(start.status, 200, "{}", start.text);
    let unknown = h
        .send(Method::POST, "/sim/hosts/nope/compute/kill", &[], None)
        .await;
    assert_eq!(unknown.status, 404);
    let outage = h
        .send(
            Method::POST,
            "/sim/message-bus/outage",
            &[],
            Some(json!({"for_secs": 30, "conductor_error_after_secs": 90})),
        )
        .await;
    assert_eq!(outage.status, 201, "{}", outage.text);
    assert_eq!(outage.body["for_secs"], 30.0);
    let bad = h
        .send(
            Method::POST,
            "/sim/message-bus/outage",
            &[],
            Some(json!({"for_secs": -1})),
        )
        .await;
    assert_eq!(bad.status, 400);
    assert!(bad.text.contains("for_secs"), "{}", bad.text);
}
