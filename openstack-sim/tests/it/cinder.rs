//! Cinder v3: volumes, microversions, the attachments API and admin actions.

use reqwest::Method;
use serde_json::json;

use crate::helpers::{Harness, manual_settings, start, two_hosts};

#[tokio::test]
async fn volume_fields_and_visibility() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let snapshot = h.sim.snapshot();
    let volume = snapshot.volume_by_name("app-1-root").unwrap().clone();
    let a = h
        .cinder(
            &admin,
            "3.44",
            Method::GET,
            &format!("/volumes/{}", volume.id),
            None,
        )
        .await;
    assert_eq!(a.status, 200);
    assert_eq!(a.header("openstack-api-version"), Some("volume 3.44"));
    assert_eq!(a.header("vary"), Some("OpenStack-API-Version"));
    assert!(
        a.header("x-openstack-request-id")
            .unwrap()
            .starts_with("req-")
    );
    let v = &a.body["volume"];
    assert_eq!(v["status"], "in-use");
    assert_eq!(v["multiattach"], false);
    assert_eq!(v["bootable"], "true");
    assert_eq!(v["size"], 20);
    assert_eq!(v["attachments"][0]["host_name"], "compute-01");
    assert_eq!(v["attachments"][0]["server_id"], h.id_of("app-1").as_str());
    assert_eq!(v["attachments"][0]["id"], volume.id.as_str());
    assert!(v["attachments"][0]["attached_at"].as_str().unwrap().len() >= 26);
    assert!(v.get("os-vol-host-attr:host").is_some());
    assert!(v.get("migration_status").is_some());

    let member = h.token("demo", "secret", "demo").await;
    let project = h.sim.project_id("demo").unwrap();
    let a = h
        .send(
            Method::GET,
            &format!("/volume/v3/{project}/volumes/{}", volume.id),
            &[("X-Auth-Token", &member)],
            None,
        )
        .await;
    assert_eq!(a.status, 200);
    assert!(
        a.body["volume"]["attachments"][0]["host_name"].is_null(),
        "host_name only for admin or service"
    );
    assert!(a.body["volume"].get("os-vol-host-attr:host").is_none());
    let missing = h
        .cinder(&admin, "3.0", Method::GET, "/volumes/nope", None)
        .await;
    assert_eq!(missing.status, 404);
    assert_eq!(
        missing.body["itemNotFound"]["message"],
        "Volume nope could not be found."
    );

    let listed = h
        .send(
            Method::GET,
            &format!("/volume/v3/{project}/volumes/detail?limit=2"),
            &[("X-Auth-Token", &member)],
            None,
        )
        .await;
    assert_eq!(listed.body["volumes"].as_array().unwrap().len(), 2);
    assert!(
        listed.body["volumes_links"][0]["href"]
            .as_str()
            .unwrap()
            .contains("marker=")
    );
    let all = h
        .cinder(&admin, "3.0", Method::GET, "/volumes?all_tenants=1", None)
        .await;
    assert_eq!(
        all.body["volumes"].as_array().unwrap().len(),
        snapshot.volumes.len()
    );
}

#[tokio::test]
async fn volume_microversions() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let a = h
        .cinder(&admin, "3.72", Method::GET, "/volumes", None)
        .await;
    assert_eq!(a.status, 406);
    assert_eq!(a.body["computeFault"]["code"], 406);
    assert_eq!(
        h.cinder(&admin, "3.x", Method::GET, "/volumes", None)
            .await
            .status,
        400
    );
    let a = h
        .cinder(&admin, "latest", Method::GET, "/volumes", None)
        .await;
    assert_eq!(a.header("openstack-api-version"), Some("volume 3.71"));
    let none = h
        .send(
            Method::GET,
            &format!("/volume/v3/{}/volumes", h.sim.project_id("admin").unwrap()),
            &[("X-Auth-Token", &admin)],
            None,
        )
        .await;
    assert_eq!(none.header("openstack-api-version"), Some("volume 3.0"));
    // attachments need 3.27, os-complete 3.44, no project id in the URL 3.67
    assert_eq!(
        h.cinder(&admin, "3.26", Method::GET, "/attachments", None)
            .await
            .status,
        404
    );
    assert_eq!(
        h.cinder(&admin, "3.27", Method::GET, "/attachments", None)
            .await
            .status,
        200
    );
    let bare = |v: &str| format!("volume {v}");
    let old = h
        .send(
            Method::GET,
            "/volume/v3/volumes",
            &[
                ("X-Auth-Token", &admin),
                ("OpenStack-API-Version", &bare("3.66")),
            ],
            None,
        )
        .await;
    assert_eq!(old.status, 404);
    let new = h
        .send(
            Method::GET,
            "/volume/v3/volumes",
            &[
                ("X-Auth-Token", &admin),
                ("OpenStack-API-Version", &bare("3.67")),
            ],
            None,
        )
        .await;
    assert_eq!(new.status, 200);
    let no_token = h.send(Method::GET, "/volume/v3/volumes", &[], None).await;
    assert_eq!(no_token.status, 401);
}

#[tokio::test]
async fn the_attachment_lifecycle() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let snapshot = h.sim.snapshot();
    let app = snapshot.instance_by_name("app-1").unwrap().clone();
    let web = h.id_of("web-1");
    let volume = app.bdms[0].volume_id.clone();
    // another server cannot reserve an in-use non-multiattach volume; the same one can
    let other = h
        .cinder(
            &admin,
            "3.44",
            Method::POST,
            "/attachments",
            Some(json!({"attachment": {"instance_uuid": web, "volume_uuid": volume}})),
        )
        .await;
    assert_eq!(other.status, 400);
    let created = h
        .cinder(
            &admin,
            "3.44",
            Method::POST,
            "/attachments",
            Some(json!({"attachment": {"instance_uuid": app.id, "volume_uuid": volume}})),
        )
        .await;
    assert_eq!(created.status, 200, "{}", created.text);
    let new_id = created.body["attachment"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(created.body["attachment"]["status"], "reserved");
    let mode = h
        .cinder(&admin, "3.53", Method::POST, "/attachments", Some(json!({"attachment": {"instance_uuid": app.id, "volume_uuid": volume, "mode": "rw"}})))
        .await;
    assert_eq!(mode.status, 400, "mode needs 3.54");
    // delete the old one as a service (as Nova does)
    let nova = h.token("nova", "secret", "service").await;
    let old = app.bdms[0].attachment_id.clone().unwrap();
    let deleted = h
        .cinder_with(
            &admin,
            "3.44",
            Method::DELETE,
            &format!("/attachments/{old}"),
            None,
            &[("X-Service-Token", &nova)],
        )
        .await;
    assert_eq!(deleted.status, 200);
    assert_eq!(deleted.body["attachments"][0]["id"], new_id.as_str());
    let v = h
        .cinder(
            &admin,
            "3.44",
            Method::GET,
            &format!("/volumes/{volume}"),
            None,
        )
        .await;
    assert_eq!(v.body["volume"]["status"], "reserved");
    let updated = h
        .cinder(
            &admin,
            "3.44",
            Method::PUT,
            &format!("/attachments/{new_id}"),
            Some(
                json!({"attachment": {"connector": {"host": "compute-02", "initiator": "iqn.x"}}}),
            ),
        )
        .await;
    assert_eq!(updated.status, 200);
    assert_eq!(updated.body["attachment"]["status"], "attaching");
    assert_eq!(
        updated.body["attachment"]["connection_info"]["driver_volume_type"],
        "iscsi"
    );
    let v = h
        .cinder(
            &admin,
            "3.44",
            Method::GET,
            &format!("/volumes/{volume}"),
            None,
        )
        .await;
    assert_eq!(v.body["volume"]["status"], "attaching");
    assert_eq!(
        h.cinder(
            &admin,
            "3.43",
            Method::POST,
            &format!("/attachments/{new_id}/action"),
            Some(json!({"os-complete": {}}))
        )
        .await
        .status,
        404
    );
    let done = h
        .cinder(
            &admin,
            "3.44",
            Method::POST,
            &format!("/attachments/{new_id}/action"),
            Some(json!({"os-complete": {}})),
        )
        .await;
    assert_eq!(done.status, 204);
    let v = h
        .cinder(
            &admin,
            "3.44",
            Method::GET,
            &format!("/volumes/{volume}"),
            None,
        )
        .await;
    assert_eq!(v.body["volume"]["status"], "in-use");
    assert_eq!(
        v.body["volume"]["attachments"][0]["host_name"],
        "compute-02"
    );
    let shown = h
        .cinder(
            &admin,
            "3.44",
            Method::GET,
            &format!("/attachments/{new_id}"),
            None,
        )
        .await;
    assert_eq!(shown.body["attachment"]["attach_mode"], "rw");
    assert!(
        shown.body["attachment"]["attached_at"]
            .as_str()
            .unwrap()
            .len()
            > 10
    );
    let detail = h
        .cinder(
            &admin,
            "3.44",
            Method::GET,
            &format!("/attachments/detail?instance_id={}", app.id),
            None,
        )
        .await;
    assert!(
        detail.body["attachments"][0]
            .get("connection_info")
            .is_some()
    );
    let summary = h
        .cinder(
            &admin,
            "3.44",
            Method::GET,
            &format!("/attachments?instance_id={}", app.id),
            None,
        )
        .await;
    assert_eq!(summary.body["attachments"][0].as_object().unwrap().len(), 4);
    assert_eq!(
        h.cinder(&admin, "3.44", Method::GET, "/attachments/nope", None)
            .await
            .status,
        404
    );
    assert_eq!(
        h.cinder(&admin, "3.44", Method::DELETE, "/attachments/nope", None)
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn reset_status_rules_and_quirks() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let snapshot = h.sim.snapshot();
    let free = snapshot.volume_by_name("web-1-data").unwrap().id.clone();
    let path = format!("/volumes/{free}/action");
    let reset = |status: &str| json!({"os-reset_status": {"status": status}});
    assert_eq!(
        h.cinder(&admin, "3.0", Method::POST, &path, Some(reset("deleting")))
            .await
            .status,
        400
    );
    assert_eq!(
        h.cinder(&admin, "3.0", Method::POST, &path, Some(reset("detaching")))
            .await
            .status,
        202
    );
    assert_eq!(
        h.cinder(
            &admin,
            "3.0",
            Method::POST,
            &path,
            Some(reset("error_deleting"))
        )
        .await
        .status,
        202
    );
    assert_eq!(
        h.cinder(&admin, "3.0", Method::POST, &path, Some(reset("bogus")))
            .await
            .status,
        400
    );
    assert_eq!(
        h.cinder(
            &admin,
            "3.0",
            Method::POST,
            &path,
            Some(json!({"os-reset_status": {}}))
        )
        .await
        .status,
        400
    );
    let detach_all =
        json!({"os-reset_status": {"status": "available", "attach_status": "detached"}});
    assert_eq!(
        h.cinder(&admin, "3.0", Method::POST, &path, Some(detach_all))
            .await
            .status,
        202
    );
    let v = h
        .cinder(
            &admin,
            "3.0",
            Method::GET,
            &format!("/volumes/{free}"),
            None,
        )
        .await;
    assert_eq!(v.body["volume"]["status"], "available");
    assert_eq!(v.body["volume"]["attachments"], json!([]));
    let in_use = h
        .cinder(&admin, "3.0", Method::POST, &path, Some(reset("in-use")))
        .await;
    assert_eq!(in_use.status, 400, "in-use without attachments");
    let member = h.token("demo", "secret", "demo").await;
    let project = h.sim.project_id("demo").unwrap();
    let denied = h
        .send(
            Method::POST,
            &format!("/volume/v3/{project}{path}"),
            &[("X-Auth-Token", &member)],
            Some(reset("available")),
        )
        .await;
    assert_eq!(denied.status, 403);
}

/// An attachment given a connector leaves its volume `attaching`, an
/// attached attachment beside it notwithstanding (Cinder's
/// `volume_attached(mark_attached=False)`), so that no other attachment can
/// be reserved until it completes or goes; its device is the connector's
/// mountpoint, `na` without one. Seen on Cinder 29 by the conformance test
/// of the engine's clearing of blocking attachments.
#[tokio::test]
async fn an_attachment_given_a_connector_leaves_the_volume_attaching() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let app = h.sim.snapshot().instance_by_name("app-1").unwrap().clone();
    let volume = app.bdms[0].volume_id.clone();
    let attach = || async {
        h.cinder(
            &admin,
            "3.44",
            Method::POST,
            "/attachments",
            Some(
                json!({"attachment": {"instance_uuid": app.id, "volume_uuid": volume,
                "connector": {"host": "compute-01", "initiator": "iqn.x"}}}),
            ),
        )
        .await
    };
    let status = || volume_status(&h, &admin, &volume);
    assert_eq!(status().await, "in-use");
    let created = attach().await;
    assert_eq!(created.status, 200, "{}", created.text);
    assert_eq!(created.body["attachment"]["status"], "attaching");
    let stuck = created.body["attachment"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(status().await, "attaching");
    let refused = attach().await;
    assert_eq!(refused.status, 400, "{}", refused.text);

    // It goes: the attached one decides again.
    let nova = h.token("nova", "secret", "service").await;
    let detached = h
        .cinder_with(
            &admin,
            "3.44",
            Method::POST,
            &format!("/volumes/{volume}/action"),
            Some(json!({"os-force_detach": {"attachment_id": stuck, "connector": {"host": "compute-01"}}})),
            &[("X-Service-Token", &nova)],
        )
        .await;
    assert_eq!(detached.status, 202, "{}", detached.text);
    assert_eq!(status().await, "in-use");

    // One completed without a mountpoint: attached, device `na`.
    let created = attach().await;
    let id = created.body["attachment"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let done = h
        .cinder(
            &admin,
            "3.44",
            Method::POST,
            &format!("/attachments/{id}/action"),
            Some(json!({"os-complete": null})),
        )
        .await;
    assert_eq!(done.status, 204, "{}", done.text);
    let v = h
        .cinder(
            &admin,
            "3.44",
            Method::GET,
            &format!("/volumes/{volume}"),
            None,
        )
        .await;
    assert_eq!(v.body["volume"]["status"], "in-use");
    let listed = v.body["volume"]["attachments"].as_array().unwrap();
    let ours = listed
        .iter()
        .find(|a| a["attachment_id"] == id.as_str())
        .unwrap_or_else(|| panic!("{listed:?}"));
    assert_eq!(ours["device"], "na");
    assert!(
        listed
            .iter()
            .any(|a| a["attachment_id"] != id.as_str() && a["device"] == "/dev/vda"),
        "{listed:?}"
    );
}

/// Every volume, listed or shown, links to itself and to its bookmark,
/// which has no version (`<root>/<project_id>/volumes/<id>`), as Cinder's.
#[tokio::test]
async fn volumes_link_to_themselves_and_to_a_bookmark() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let project = h.sim.project_id("admin").unwrap();
    let volume = h.sim.snapshot().volumes[0].id.clone();
    let root = format!("{}/volume", h.sim.base_url());
    let wanted = json!([
        {"rel": "self", "href": format!("{root}/v3/{project}/volumes/{volume}")},
        {"rel": "bookmark", "href": format!("{root}/{project}/volumes/{volume}")},
    ]);
    let shown = h
        .cinder(
            &admin,
            "3.44",
            Method::GET,
            &format!("/volumes/{volume}"),
            None,
        )
        .await;
    assert_eq!(shown.body["volume"]["links"], wanted, "{}", shown.text);
    let listed = h
        .cinder(&admin, "3.44", Method::GET, "/volumes?all_tenants=1", None)
        .await;
    let entry = listed.body["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == volume.as_str())
        .unwrap();
    assert_eq!(entry["links"], wanted, "{}", listed.text);
}

/// Cinder's discovery: the root lists the versions (300), `/v3/` the same
/// (200), `/v3` redirects there, and a project's endpoint is no document
/// (404); each answered at 3.0 with both request-id headers, as every
/// Cinder answer carries them.
#[tokio::test]
async fn discovery_and_headers_follow_cinder() {
    let h = start(two_hosts(manual_settings())).await;
    let root = h.send(Method::GET, "/volume/", &[], None).await;
    assert_eq!(root.status, 300, "{}", root.text);
    assert_eq!(root.header("openstack-api-version"), Some("volume 3.0"));
    assert_eq!(root.header("vary"), Some("OpenStack-API-Version"));
    assert!(
        root.header("x-openstack-request-id")
            .unwrap()
            .starts_with("req-")
    );
    assert_eq!(
        root.header("x-compute-request-id"),
        root.header("x-openstack-request-id")
    );
    assert_eq!(root.body["versions"][0]["version"], "3.71");
    let v3 = h.send(Method::GET, "/volume/v3/", &[], None).await;
    assert_eq!(v3.status, 200);
    assert_eq!(v3.body, root.body);
    let plain = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let redirect = plain.get(h.url("/volume/v3")).send().await.unwrap();
    assert_eq!(redirect.status(), 302);
    assert_eq!(
        redirect.headers()["location"],
        h.url("/volume/v3/").as_str()
    );
    let project = h.sim.project_id("admin").unwrap();
    let admin = h.admin().await;
    let endpoint = h
        .send(
            Method::GET,
            &format!("/volume/v3/{project}"),
            &[("X-Auth-Token", &admin)],
            None,
        )
        .await;
    assert_eq!(endpoint.status, 404, "{}", endpoint.text);
    let listed = h
        .cinder(&admin, "3.44", Method::GET, "/volumes", None)
        .await;
    assert_eq!(
        listed.header("x-compute-request-id"),
        listed.header("x-openstack-request-id")
    );
}

#[tokio::test]
async fn a_detach_in_progress_shows_only_in_the_volume_status() {
    let h = start(two_hosts(manual_settings())).await;
    let admin = h.admin().await;
    let snapshot = h.sim.snapshot();
    let volume = snapshot.volume_by_name("web-1-data").unwrap().id.clone();
    let path = format!("/volumes/{volume}/action");
    let action = |name: &str| json!({ name: null });
    let begin = action("os-begin_detaching");
    assert_eq!(
        h.cinder(&admin, "3.0", Method::POST, &path, Some(begin.clone()))
            .await
            .status,
        202
    );
    assert_eq!(volume_status(&h, &admin, &volume).await, "detaching");
    let records = h
        .cinder(
            &admin,
            "3.44",
            Method::GET,
            &format!("/attachments/detail?volume_id={volume}"),
            None,
        )
        .await;
    let records = records.body["attachments"].as_array().unwrap().clone();
    assert!(!records.is_empty());
    assert!(
        records.iter().all(|a| a["status"] == "attached"),
        "{records:?}"
    );
    // Only an in-use volume begins a detach.
    let again = h
        .cinder(&admin, "3.0", Method::POST, &path, Some(begin.clone()))
        .await;
    assert_eq!(again.status, 400);
    assert!(
        again.body["badRequest"]["message"]
            .as_str()
            .unwrap()
            .contains("Volume status must be 'in-use'"),
        "{}",
        again.body
    );
    // Nothing attaches to it meanwhile.
    let attach = h
        .cinder(
            &admin,
            "3.44",
            Method::POST,
            "/attachments",
            Some(json!({"attachment": {"volume_uuid": volume, "instance_uuid": h.id_of("web-1")}})),
        )
        .await;
    assert_eq!(attach.status, 400, "{}", attach.body);
    // Rolled back; a second roll-back, of a volume no longer detaching,
    // changes nothing and is no error.
    for _ in 0..2 {
        let roll = Some(action("os-roll_detaching"));
        let rolled = h.cinder(&admin, "3.0", Method::POST, &path, roll).await;
        assert_eq!(rolled.status, 202);
        assert_eq!(volume_status(&h, &admin, &volume).await, "in-use");
    }
}

async fn volume_status(h: &Harness, admin: &str, volume: &str) -> serde_json::Value {
    h.cinder(
        admin,
        "3.0",
        Method::GET,
        &format!("/volumes/{volume}"),
        None,
    )
    .await
    .body["volume"]["status"]
        .clone()
}
