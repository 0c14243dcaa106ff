//! Evacuation: preconditions, per-microversion bodies, the state walk, end states, failure
//! modes, volume moves (the rebuilds themselves: `nova_rebuilds`).

use openstack_sim::EvacuationFailure;
use openstack_sim::Scenario;
use openstack_sim::scenario::{HostGroupSpec, HostSpec, InstanceGroupSpec};
use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{Harness, manual_settings, start, two_hosts};

pub(crate) async fn migration(h: &Harness, token: &str, server: &str) -> Value {
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
    a.body["migrations"][0].clone()
}

#[tokio::test]
async fn refused_while_the_source_is_up_and_other_preconditions() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let web = h.id_of("web-1");
    let a = h.evacuate(&admin, "2.53", &web, json!({})).await;
    assert_eq!(a.status, 400);
    assert_eq!(
        a.body["badRequest"]["message"],
        "Compute service of compute-01 is still in use."
    );
    h.sim.power_off("compute-01").unwrap();
    h.sim.advance(30.0);
    assert_eq!(
        h.evacuate(&admin, "2.53", &web, json!({})).await.status,
        400,
        "still within service_down_time"
    );
    h.sim.advance(31.0);
    let member = h.token("demo", "secret", "demo").await;
    let a = h.evacuate(&member, "2.53", &web, json!({})).await;
    assert_eq!(a.status, 403);
    assert!(
        a.body["forbidden"]["message"]
            .as_str()
            .unwrap()
            .contains("os-evacuate")
    );
    let a = h
        .evacuate(&admin, "2.53", &web, json!({"host": "compute-99"}))
        .await;
    assert_eq!(a.status, 404);
    assert_eq!(
        a.body["itemNotFound"]["message"],
        "Compute host compute-99 not found."
    );
    let a = h
        .evacuate(&admin, "2.53", &web, json!({"host": "compute-01"}))
        .await;
    assert_eq!(a.status, 400);
    assert_eq!(
        a.body["badRequest"]["message"],
        "The target host can't be the same one."
    );
    let a = h
        .evacuate(
            &admin,
            "2.53",
            "00000000-0000-0000-0000-000000000000",
            json!({}),
        )
        .await;
    assert_eq!(a.status, 404);
    let a = h.evacuate(&admin, "2.53", &web, json!({})).await;
    assert_eq!(a.status, 200, "down after service_down_time: {}", a.text);
    assert!(a.text.is_empty(), ">= 2.14 answers with an empty body");
    let again = h.evacuate(&admin, "2.53", &web, json!({})).await;
    assert_eq!(again.status, 409);
    assert_eq!(
        again.body["conflictingRequest"]["message"],
        format!("Cannot 'evacuate' instance {web} while it is in task_state rebuilding")
    );
}

#[tokio::test]
async fn bodies_follow_each_microversion_schema() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    h.fail_host(&admin, "compute-01").await;
    let web = h.id_of("web-1");
    let cases = [
        (
            "2.1",
            json!({}),
            400,
            "onSharedStorage is required before 2.14",
        ),
        (
            "2.13",
            json!({"onSharedStorage": true, "adminPass": "x"}),
            400,
            "adminPass with shared storage",
        ),
        (
            "2.14",
            json!({"onSharedStorage": false}),
            400,
            "onSharedStorage rejected from 2.14",
        ),
        ("2.28", json!({"force": false}), 400, "force only from 2.29"),
        ("2.29", json!({"force": true}), 400, "force without host"),
        (
            "2.67",
            json!({"force": "maybe", "host": "compute-02"}),
            400,
            "force must be boolean",
        ),
        (
            "2.68",
            json!({"host": "compute-02", "force": false}),
            400,
            "force rejected from 2.68",
        ),
        (
            "2.95",
            json!({"host": "compute 02"}),
            400,
            "host must be a hostname",
        ),
        (
            "2.95",
            json!({"unknown": 1}),
            400,
            "additionalProperties false",
        ),
    ];
    for (version, body, status, why) in cases {
        let a = h.evacuate(&admin, version, &web, body).await;
        assert_eq!(a.status, status, "{why}: {}", a.text);
        assert_eq!(a.body["badRequest"]["code"], 400, "{why}");
    }
    let a = h
        .evacuate(
            &admin,
            "2.13",
            &web,
            json!({"onSharedStorage": "False", "host": "compute-02"}),
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    assert_eq!(
        a.body["adminPass"].as_str().unwrap().len(),
        12,
        "before 2.14 the password is returned"
    );
    let db = h.id_of("app-1");
    let a = h
        .evacuate(
            &admin,
            "2.1",
            &db,
            json!({"onSharedStorage": false, "adminPass": "s3cret"}),
        )
        .await;
    assert_eq!(a.body["adminPass"], "s3cret");
}

#[tokio::test]
async fn the_state_walk_changes_the_host_after_task_state_and_before_done() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    h.fail_host(&admin, "compute-01").await;
    let web = h.id_of("web-1");
    let a = h.evacuate(&admin, "2.73", &web, json!({})).await;
    assert_eq!(a.status, 200);
    let request_id = a.header("x-openstack-request-id").unwrap().to_string();

    let step = |task: Option<&str>, host: &str, status: &str, migration: &str| {
        (
            task.map(str::to_string),
            host.to_string(),
            status.to_string(),
            migration.to_string(),
        )
    };
    let observe = |s: Value, m: Value| {
        (
            s["OS-EXT-STS:task_state"].as_str().map(str::to_string),
            s["OS-EXT-SRV-ATTR:host"].as_str().unwrap().to_string(),
            s["status"].as_str().unwrap().to_string(),
            m["status"].as_str().unwrap().to_string(),
        )
    };
    let expected = [
        (
            0.5,
            step(Some("rebuilding"), "compute-01", "REBUILD", "accepted"),
        ),
        (
            1.0,
            step(Some("rebuilding"), "compute-01", "REBUILD", "accepted"),
        ),
        (
            1.0,
            step(
                Some("rebuild_block_device_mapping"),
                "compute-01",
                "REBUILD",
                "pre-migrating",
            ),
        ),
        (
            2.0,
            step(
                Some("rebuild_spawning"),
                "compute-01",
                "REBUILD",
                "pre-migrating",
            ),
        ),
        (3.0, step(None, "compute-01", "ACTIVE", "pre-migrating")),
        (1.0, step(None, "compute-03", "ACTIVE", "pre-migrating")),
        (1.0, step(None, "compute-03", "ACTIVE", "done")),
    ];
    assert_eq!(
        observe(
            h.server(&admin, "2.73", &web).await,
            migration(&h, &admin, &web).await
        )
        .3,
        "accepted"
    );
    for (i, (secs, want)) in expected.into_iter().enumerate() {
        h.sim.advance(secs);
        let got = observe(
            h.server(&admin, "2.73", &web).await,
            migration(&h, &admin, &web).await,
        );
        assert_eq!(got, want, "step {i}");
    }
    let m = migration(&h, &admin, &web).await;
    assert_eq!(m["source_compute"], "compute-01");
    assert_eq!(
        m["dest_compute"], "compute-03",
        "the scheduler picks the most free RAM"
    );
    assert_eq!(m["dest_node"], "compute-03.example.org");
    assert_eq!(m["dest_host"], "192.0.2.3");
    assert_eq!(m["migration_type"], "evacuation");
    assert!(m["user_id"].is_string());
    let server = h.server(&admin, "2.73", &web).await;
    assert_eq!(
        server["OS-EXT-SRV-ATTR:hypervisor_hostname"],
        "compute-03.example.org"
    );

    // the instance action carries the evacuate response's request id
    let actions = h
        .nova(
            &admin,
            "2.84",
            Method::GET,
            &format!("/servers/{web}/os-instance-actions"),
            None,
        )
        .await;
    assert_eq!(actions.body["instanceActions"][0]["action"], "evacuate");
    assert_eq!(
        actions.body["instanceActions"][0]["request_id"],
        request_id.as_str()
    );
    let detail = h
        .nova(
            &admin,
            "2.84",
            Method::GET,
            &format!("/servers/{web}/os-instance-actions/{request_id}"),
            None,
        )
        .await;
    let events = detail.body["instanceAction"]["events"]
        .as_array()
        .unwrap()
        .clone();
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    // Newest first, as Nova lists them.
    assert_eq!(names, ["compute_rebuild_instance", "rebuild_server"]);
    assert!(events.iter().all(|e| e["result"] == "Success"));
    assert_eq!(events[0]["host"], "compute-03");
    assert_eq!(events[0]["hostId"].as_str().unwrap().len(), 56);
    assert!(events[0].get("details").is_some());
    let old = h
        .nova(
            &admin,
            "2.61",
            Method::GET,
            &format!("/servers/{web}/os-instance-actions/{request_id}"),
            None,
        )
        .await;
    assert!(
        old.body["instanceAction"]["events"][0]
            .get("host")
            .is_none(),
        "host/hostId from 2.62"
    );
    let unknown = h
        .nova(
            &admin,
            "2.1",
            Method::GET,
            &format!("/servers/{web}/os-instance-actions/req-nope"),
            None,
        )
        .await;
    assert_eq!(unknown.status, 404);

    let stats = h.sim.stats();
    assert_eq!(stats.done, 1);
    let record = &stats.evacuations[0];
    assert_eq!(record.destination.as_deref(), Some("compute-03"));
    assert!((record.done_at.unwrap() - record.requested_at - 9.0).abs() < 0.01);
    assert!((stats.ideal_makespan.unwrap() - 9.0).abs() < 0.01);
}

#[tokio::test]
async fn end_states_follow_the_original_state_and_2_95() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    h.fail_host(&admin, "compute-01").await;
    let cases = [
        ("batch-1", "2.53", "SHUTOFF"),
        ("broken-1", "2.95", "ACTIVE"),
        ("web-1", "2.95", "SHUTOFF"),
        ("app-1", "2.94", "ACTIVE"),
    ];
    for (name, version, _) in cases {
        let a = h.evacuate(&admin, version, &h.id_of(name), json!({})).await;
        assert_eq!(a.status, 200, "{name}: {}", a.text);
    }
    h.sim.advance(60.0);
    for (name, _, status) in cases {
        let server = h.server(&admin, "2.73", &h.id_of(name)).await;
        assert_eq!(server["status"], status, "{name}");
        assert_ne!(server["OS-EXT-SRV-ATTR:host"], "compute-01", "{name}");
        assert_eq!(
            migration(&h, &admin, &h.id_of(name)).await["status"],
            "done",
            "{name}"
        );
    }
    let broken = h.server(&admin, "2.73", &h.id_of("broken-1")).await;
    assert!(
        broken.get("fault").is_none(),
        "an evacuated error server is active without a fault"
    );
}

#[tokio::test]
async fn failure_modes_leave_the_states_nova_leaves() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    h.fail_host(&admin, "compute-01").await;
    let (web, app, batch) = (h.id_of("web-1"), h.id_of("app-1"), h.id_of("batch-1"));
    h.sim
        .set_evacuation_failure(&web, Some(EvacuationFailure::Scheduling))
        .unwrap();
    h.sim
        .set_evacuation_failure(&app, Some(EvacuationFailure::Claim))
        .unwrap();
    h.sim
        .set_evacuation_failure(&batch, Some(EvacuationFailure::Compute))
        .unwrap();
    for id in [&web, &app, &batch] {
        assert_eq!(h.evacuate(&admin, "2.53", id, json!({})).await.status, 200);
    }
    h.sim.advance(60.0);

    let s = h.server(&admin, "2.53", &web).await;
    assert_eq!(
        (s["status"].as_str(), s["OS-EXT-STS:task_state"].as_str()),
        (Some("ERROR"), None)
    );
    assert!(
        s["fault"]["message"]
            .as_str()
            .unwrap()
            .starts_with("No valid host was found")
    );
    assert_eq!(s["OS-EXT-SRV-ATTR:host"], "compute-01");
    assert_eq!(migration(&h, &admin, &web).await["status"], "error");
    let actions = h
        .nova(
            &admin,
            "2.53",
            Method::GET,
            &format!("/servers/{web}/os-instance-actions"),
            None,
        )
        .await;
    let rid = actions.body["instanceActions"][0]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    let detail = h
        .nova(
            &admin,
            "2.53",
            Method::GET,
            &format!("/servers/{web}/os-instance-actions/{rid}"),
            None,
        )
        .await;
    assert_eq!(
        detail.body["instanceAction"]["events"][0]["event"],
        "rebuild_server"
    );
    assert_eq!(
        detail.body["instanceAction"]["events"][0]["result"],
        "Error"
    );

    let s = h.server(&admin, "2.53", &app).await;
    assert_eq!(
        s["OS-EXT-STS:vm_state"], "active",
        "a failed claim leaves vm_state alone"
    );
    assert!(s["OS-EXT-STS:task_state"].is_null());
    assert_eq!(s["OS-EXT-SRV-ATTR:host"], "compute-01");
    assert_eq!(migration(&h, &admin, &app).await["status"], "failed");

    let s = h.server(&admin, "2.53", &batch).await;
    assert_eq!(s["OS-EXT-STS:vm_state"], "error");
    assert_eq!(s["OS-EXT-SRV-ATTR:host"], "compute-01");
    assert_eq!(migration(&h, &admin, &batch).await["status"], "failed");
    assert_eq!(h.sim.stats().failed, 3);

    // the injected failure is used once: a retry succeeds
    assert_eq!(
        h.evacuate(&admin, "2.53", &app, json!({})).await.status,
        200
    );
    h.sim.advance(60.0);
    assert_ne!(
        h.server(&admin, "2.53", &app).await["OS-EXT-SRV-ATTR:host"],
        "compute-01"
    );
}

#[tokio::test]
async fn a_disabled_or_full_target_fails_scheduling_but_a_forced_one_is_used() {
    let scenario = Scenario::builder()
        .settings(manual_settings())
        .host(HostSpec::new("c1"))
        .host(HostSpec::new("reserved").disabled("reserved"))
        .host(HostSpec::new("small").capacity(1, 1024))
        .instance(openstack_sim::scenario::InstanceSpec::new("a", "c1"))
        .instance(openstack_sim::scenario::InstanceSpec::new("b", "c1"))
        .instance(openstack_sim::scenario::InstanceSpec::new("c", "c1"))
        .build()
        .unwrap();
    let h = start(scenario).await;
    let admin = h.admin().await;
    h.fail_host(&admin, "c1").await;
    let (a, b, c) = (h.id_of("a"), h.id_of("b"), h.id_of("c"));
    assert_eq!(
        h.evacuate(&admin, "2.53", &a, json!({"host": "reserved"}))
            .await
            .status,
        200
    );
    assert_eq!(
        h.evacuate(&admin, "2.53", &b, json!({"host": "small"}))
            .await
            .status,
        200,
        "m1.small needs 2048 MB"
    );
    assert_eq!(
        h.evacuate(
            &admin,
            "2.29",
            &c,
            json!({"host": "reserved", "force": true})
        )
        .await
        .status,
        200
    );
    h.sim.advance(60.0);
    let snapshot = h.sim.snapshot();
    assert_eq!(snapshot.instance(&a).unwrap().vm_state.as_str(), "error");
    assert_eq!(snapshot.instance(&b).unwrap().vm_state.as_str(), "error");
    assert_eq!(
        snapshot.instance(&c).unwrap().host.as_deref(),
        Some("reserved"),
        "forced hosts skip the scheduler"
    );
}

#[tokio::test]
async fn volumes_move_with_new_attachments_on_the_destination() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    h.fail_host(&admin, "compute-01").await;
    let app = h.id_of("app-1");
    let before = h.sim.snapshot();
    let volume_id = before.instance(&app).unwrap().bdms[0].volume_id.clone();
    let old_attachment = before.instance(&app).unwrap().bdms[0]
        .attachment_id
        .clone()
        .unwrap();
    assert_eq!(
        h.evacuate(&admin, "2.95", &app, json!({"host": "compute-02"}))
            .await
            .status,
        200
    );
    h.sim.advance(2.5);
    // BDM step: new attachment for the same server, old one deleted, attaching on the destination
    let v = h
        .cinder(
            &admin,
            "3.44",
            Method::GET,
            &format!("/volumes/{volume_id}"),
            None,
        )
        .await;
    assert_eq!(v.body["volume"]["status"], "attaching");
    assert_eq!(
        v.body["volume"]["attachments"],
        json!([]),
        "only attached attachments are listed"
    );
    let list = h
        .cinder(
            &admin,
            "3.44",
            Method::GET,
            &format!("/attachments?volume_id={volume_id}"),
            None,
        )
        .await;
    let items = list.body["attachments"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_ne!(items[0]["id"], old_attachment.as_str());
    assert_eq!(items[0]["status"], "attaching");
    assert_eq!(items[0]["instance"], app.as_str());
    h.sim.advance(30.0);
    let v = h
        .cinder(
            &admin,
            "3.44",
            Method::GET,
            &format!("/volumes/{volume_id}"),
            None,
        )
        .await;
    assert_eq!(v.body["volume"]["status"], "in-use");
    let attachment = &v.body["volume"]["attachments"][0];
    assert_eq!(attachment["host_name"], "compute-02");
    assert_eq!(attachment["server_id"], app.as_str());
    let nova = h
        .nova(
            &admin,
            "2.89",
            Method::GET,
            &format!("/servers/{app}/os-volume_attachments"),
            None,
        )
        .await;
    let bdm = &nova.body["volumeAttachments"][0];
    assert_eq!(
        bdm["attachment_id"], attachment["attachment_id"],
        "Nova's BDM references Cinder's attachment"
    );
    assert!(bdm.get("id").is_none(), "2.89 drops id");
    assert!(bdm["bdm_uuid"].is_string());
    let older = h
        .nova(
            &admin,
            "2.79",
            Method::GET,
            &format!("/servers/{app}/os-volume_attachments"),
            None,
        )
        .await;
    assert!(
        older.body["volumeAttachments"][0]
            .get("attachment_id")
            .is_none()
    );
    assert_eq!(
        older.body["volumeAttachments"][0]["delete_on_termination"],
        false
    );
}

/// Nova names a server's node by the hypervisor's hostname, which on most computes is the
/// service's host name itself: a host group without a hypervisor domain says so, and the node
/// changes only when the rebuild on the destination has finished, as Masakari's check (node
/// different from the failed host's name) expects.
#[tokio::test]
async fn hypervisor_hostnames_may_be_the_host_names_and_follow_the_evacuation() {
    let scenario = Scenario::builder()
        .settings(manual_settings())
        .host_group(HostGroupSpec {
            name_prefix: "plain-".into(),
            count: 2,
            hypervisor_domain: String::new(),
            ..HostGroupSpec::default()
        })
        .host_group(HostGroupSpec {
            name_prefix: "fqdn-".into(),
            count: 1,
            ..HostGroupSpec::default()
        })
        .instance_group(InstanceGroupSpec {
            host: "plain-01".into(),
            count: 1,
            ..InstanceGroupSpec::default()
        })
        .build()
        .unwrap();
    let h = start(scenario).await;
    let admin = h.admin().await;
    let a = h
        .nova(&admin, "2.53", Method::GET, "/os-hypervisors/detail", None)
        .await;
    let mut names: Vec<&str> = a.body["hypervisors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|hv| hv["hypervisor_hostname"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["fqdn-01.example.org", "plain-01", "plain-02"]);

    let vm = h.id_of("vm-001");
    let node = |s: &Value| s["OS-EXT-SRV-ATTR:hypervisor_hostname"].clone();
    assert_eq!(node(&h.server(&admin, "2.53", &vm).await), "plain-01");
    h.fail_host(&admin, "plain-01").await;
    let a = h
        .evacuate(&admin, "2.53", &vm, json!({"host": "plain-02"}))
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    // scheduled, claimed, block devices set up, spawned: the task is over, the node not yet moved
    h.sim.advance(7.5);
    let s = h.server(&admin, "2.53", &vm).await;
    assert_eq!(node(&s), "plain-01");
    assert!(s["OS-EXT-STS:task_state"].is_null());
    h.sim.advance(1.0);
    let s = h.server(&admin, "2.53", &vm).await;
    assert_eq!(node(&s), "plain-02");
    assert_eq!(s["OS-EXT-SRV-ATTR:host"], "plain-02");
    assert_eq!(migration(&h, &admin, &vm).await["dest_node"], "plain-02");
}
