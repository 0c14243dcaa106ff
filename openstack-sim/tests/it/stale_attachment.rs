//! The stale-attachment mode from the field bug: a rebuild stalls while the dead source host
//! holds a volume session Nova does not know, until it is cleared or the timeout fails it.

use reqwest::Method;
use serde_json::{Value, json};

use crate::helpers::{Harness, manual_settings, start, two_hosts};

struct Stale {
    server: String,
    volume: String,
    bdm_attachment: String,
    stale_attachment: String,
}

fn stale_of(h: &Harness, name: &str) -> Stale {
    let snapshot = h.sim.snapshot();
    let inst = snapshot.instance_by_name(name).unwrap();
    let volume = snapshot.volume(&inst.bdms[0].volume_id).unwrap();
    let bdm_attachment = inst.bdms[0].attachment_id.clone().unwrap();
    let stale_attachment = volume
        .attachments
        .iter()
        .find(|a| a.id != bdm_attachment)
        .unwrap()
        .id
        .clone();
    Stale {
        server: inst.id.clone(),
        volume: volume.id.clone(),
        bdm_attachment,
        stale_attachment,
    }
}

async fn task_state(h: &Harness, token: &str, id: &str) -> Value {
    h.server(token, "2.73", id).await["OS-EXT-STS:task_state"].clone()
}

async fn stalled(h: &Harness, token: &str) -> Stale {
    h.fail_host(token, "compute-01").await;
    let s = stale_of(h, "db-1");
    assert_eq!(
        h.evacuate(token, "2.53", &s.server, json!({})).await.status,
        200
    );
    h.sim.advance(100.0);
    assert_eq!(
        task_state(h, token, &s.server).await,
        "rebuild_block_device_mapping",
        "stalled"
    );
    s
}

#[tokio::test]
async fn a_healthy_volume_never_blocks() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    h.fail_host(&admin, "compute-01").await;
    let app = h.id_of("app-1");
    assert_eq!(
        h.evacuate(&admin, "2.53", &app, json!({})).await.status,
        200
    );
    h.sim.advance(20.0);
    assert_eq!(h.sim.stats().done, 1);
    assert_eq!(h.sim.stats().evacuations[0].stalled_secs, 0.0);
}

#[tokio::test]
async fn deleting_the_stale_attachment_as_admin_resumes_the_rebuild() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let s = stalled(&h, &admin).await;
    // the BDM's attachment: a plain admin is refused, Nova's rule
    let refused = h
        .cinder(
            &admin,
            "3.44",
            Method::DELETE,
            &format!("/attachments/{}", s.bdm_attachment),
            None,
        )
        .await;
    assert_eq!(refused.status, 409);
    assert_eq!(
        refused.body["conflictingRequest"]["message"],
        format!(
            "Detach volume from instance {} using the Compute API",
            s.server
        )
    );
    // the stale one: allowed without a service token
    let a = h
        .cinder(
            &admin,
            "3.44",
            Method::DELETE,
            &format!("/attachments/{}", s.stale_attachment),
            None,
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    let remaining = a.body["attachments"].as_array().unwrap();
    assert_eq!(remaining.len(), 1);
    assert_eq!(remaining[0]["id"], s.bdm_attachment.as_str());
    h.sim.advance(20.0);
    let server = h.server(&admin, "2.53", &s.server).await;
    assert_eq!(server["status"], "ACTIVE");
    assert_ne!(server["OS-EXT-SRV-ATTR:host"], "compute-01");
    let stats = h.sim.stats();
    assert!(
        (stats.evacuations[0].stalled_secs - 98.0).abs() < 0.5,
        "{}",
        stats.evacuations[0].stalled_secs
    );
    let v = h
        .cinder(
            &admin,
            "3.44",
            Method::GET,
            &format!("/volumes/{}", s.volume),
            None,
        )
        .await;
    assert_eq!(
        v.body["volume"]["attachments"][0]["host_name"],
        server["OS-EXT-SRV-ATTR:host"]
    );
}

#[tokio::test]
async fn a_service_token_may_delete_the_bdm_attachment_but_the_stale_one_still_blocks() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let nova = h.token("nova", "secret", "service").await;
    let s = stalled(&h, &admin).await;
    let a = h
        .cinder_with(
            &admin,
            "3.44",
            Method::DELETE,
            &format!("/attachments/{}", s.bdm_attachment),
            None,
            &[("X-Service-Token", &nova)],
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.text);
    h.sim.advance(20.0);
    assert_eq!(
        task_state(&h, &admin, &s.server).await,
        "rebuild_block_device_mapping"
    );
    // a service token that lacks the service role does not count
    let reader = h.token("reader", "secret", "demo").await;
    let a = h
        .cinder_with(
            &admin,
            "3.44",
            Method::POST,
            &format!("/volumes/{}/action", s.volume),
            Some(json!({"os-force_detach": {"attachment_id": s.stale_attachment}})),
            &[("X-Service-Token", &reader)],
        )
        .await;
    assert_eq!(
        a.status, 202,
        "the stale attachment is not Nova's: no service token needed"
    );
    h.sim.advance(20.0);
    assert_eq!(
        h.server(&admin, "2.53", &s.server).await["status"],
        "ACTIVE"
    );
}

#[tokio::test]
async fn force_detach_clears_it_and_checks_the_attachment() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let s = stalled(&h, &admin).await;
    let path = format!("/volumes/{}/action", s.volume);
    let unknown = h
        .cinder(
            &admin,
            "3.0",
            Method::POST,
            &path,
            Some(json!({"os-force_detach": {"attachment_id": "nope"}})),
        )
        .await;
    assert_eq!(unknown.status, 400);
    assert_eq!(unknown.body["badRequest"]["code"], 400);
    let nova_owned = h
        .cinder(
            &admin,
            "3.0",
            Method::POST,
            &path,
            Some(json!({"os-force_detach": {"attachment_id": s.bdm_attachment}})),
        )
        .await;
    assert_eq!(nova_owned.status, 409);
    let member = h.token("demo", "secret", "demo").await;
    let project = h.sim.project_id("demo").unwrap();
    let denied = h
        .send(
            Method::POST,
            &format!("/volume/v3/{project}{path}"),
            &[("X-Auth-Token", &member)],
            Some(json!({"os-force_detach": {"attachment_id": s.stale_attachment}})),
        )
        .await;
    assert_eq!(denied.status, 403);
    let a = h
        .cinder(&admin, "3.0", Method::POST, &path, Some(json!({"os-force_detach": {"attachment_id": s.stale_attachment, "connector": {"host": "compute-01"}}})))
        .await;
    assert_eq!(a.status, 202);
    assert!(a.text.is_empty());
    h.sim.advance(20.0);
    assert_eq!(
        h.server(&admin, "2.53", &s.server).await["status"],
        "ACTIVE"
    );
}

#[tokio::test]
async fn powering_the_source_host_on_clears_its_session() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let s = stalled(&h, &admin).await;
    h.sim.power_on("compute-01").unwrap();
    h.sim.advance(5.0);
    assert_eq!(
        task_state(&h, &admin, &s.server).await,
        "rebuild_block_device_mapping",
        "still booting"
    );
    h.sim.advance(30.0);
    let server = h.server(&admin, "2.53", &s.server).await;
    assert_eq!(server["status"], "ACTIVE");
    assert_ne!(server["OS-EXT-SRV-ATTR:host"], "compute-01");
    let snapshot = h.sim.snapshot();
    let m = &snapshot.migrations_of(&s.server)[0];
    assert_eq!(
        m.status.as_str(),
        "done",
        "done after the source came back? it restarted before the rebuild ended"
    );
    let v = snapshot.volume(&s.volume).unwrap();
    assert_eq!(v.attachments.len(), 1);
}

#[tokio::test]
async fn reset_status_clears_it() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let s = stalled(&h, &admin).await;
    let a = h
        .cinder(
            &admin,
            "3.0",
            Method::POST,
            &format!("/volumes/{}/action", s.volume),
            Some(json!({"os-reset_status": {"status": "available"}})),
        )
        .await;
    assert_eq!(a.status, 202);
    h.sim.advance(20.0);
    assert_eq!(
        h.server(&admin, "2.53", &s.server).await["status"],
        "ACTIVE"
    );
}

#[tokio::test]
async fn a_volume_left_detaching_blocks_until_reset() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    h.fail_host(&admin, "compute-01").await;
    let stuck = h.id_of("stuck-1");
    let snapshot = h.sim.snapshot();
    let volume = snapshot.instance(&stuck).unwrap().bdms[0].volume_id.clone();
    assert_eq!(snapshot.volume(&volume).unwrap().status, "detaching");
    assert_eq!(
        h.evacuate(&admin, "2.53", &stuck, json!({})).await.status,
        200
    );
    h.sim.advance(100.0);
    assert_eq!(
        task_state(&h, &admin, &stuck).await,
        "rebuild_block_device_mapping"
    );
    let a = h
        .cinder(
            &admin,
            "3.0",
            Method::POST,
            &format!("/volumes/{volume}/action"),
            Some(json!({"os-reset_status": {"status": "available", "attach_status": "detached"}})),
        )
        .await;
    assert_eq!(a.status, 202);
    h.sim.advance(20.0);
    assert_eq!(h.server(&admin, "2.53", &stuck).await["status"], "ACTIVE");
    let v = h
        .cinder(
            &admin,
            "3.0",
            Method::GET,
            &format!("/volumes/{volume}"),
            None,
        )
        .await;
    assert_eq!(v.body["volume"]["status"], "in-use");
}

#[tokio::test]
async fn the_stall_times_out_into_an_error() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let s = stalled(&h, &admin).await;
    h.sim.advance(600.0);
    assert_eq!(
        task_state(&h, &admin, &s.server).await,
        "rebuild_block_device_mapping",
        "780 s not yet reached"
    );
    h.sim.advance(100.0);
    let server = h.server(&admin, "2.53", &s.server).await;
    assert_eq!(server["status"], "ERROR");
    assert!(
        server["fault"]["message"]
            .as_str()
            .unwrap()
            .contains("volume attachment")
    );
    assert_eq!(server["OS-EXT-SRV-ATTR:host"], "compute-01");
    let snapshot = h.sim.snapshot();
    assert_eq!(
        snapshot.migrations_of(&s.server)[0].status.as_str(),
        "failed"
    );
    let action = snapshot
        .instance_actions
        .iter()
        .find(|a| a.instance_uuid == s.server && a.action == "evacuate")
        .unwrap();
    let event = action
        .events
        .iter()
        .find(|e| e.event == "compute_rebuild_instance")
        .unwrap();
    assert_eq!(event.result.as_deref(), Some("Error"));
}
