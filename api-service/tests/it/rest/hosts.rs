//! `/v1/segments/{id}/hosts`: Masakari's host bodies (with the segment
//! inside), codes, filters and paging, and that a host is found only under
//! its own segment.

use serde_json::{Value, json};

use super::{Rest, uuids};
use crate::backends::Backend;
use crate::helpers::spawn_app;

async fn hosts_are_created_shown_updated_and_deleted(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let rest = Rest::new(&app);
    let segment = rest.segment("rack-a").await;
    let seg = segment["uuid"].as_str().unwrap().to_owned();
    let created = rest
        .post(
            &format!("/v1/segments/{seg}/hosts"),
            json!({"host": {"name": "compute-1", "type": "COMPUTE", "control_attributes": "SSH", "reserved": "True"}}),
        )
        .await;
    let host = created.expect(201)["host"].clone();
    let uuid = host["uuid"].as_str().unwrap().to_owned();
    assert!(host["id"].as_i64().unwrap() > 0);
    assert_eq!(host["name"], "compute-1");
    assert_eq!(host["type"], "COMPUTE");
    assert_eq!(host["control_attributes"], "SSH");
    assert_eq!(host["reserved"], true);
    assert_eq!(host["on_maintenance"], false);
    assert_eq!(host["failover_segment_id"], seg.as_str());
    assert_eq!(host["failover_segment"], segment, "the segment, in full");
    assert_eq!(host["deleted"], false);
    assert_eq!(host["updated_at"], Value::Null);

    let shown = rest.get(&format!("/v1/segments/{seg}/hosts/{uuid}")).await;
    assert_eq!(shown.expect(200)["host"], host);

    let updated = rest
        .put(
            &format!("/v1/segments/{seg}/hosts/{uuid}"),
            json!({"host": {"on_maintenance": true, "reserved": "False"}}),
        )
        .await;
    let updated = updated.expect(200)["host"].clone();
    assert_eq!(updated["on_maintenance"], true);
    assert_eq!(updated["reserved"], false);
    assert!(updated["updated_at"].is_string());

    // Under another segment the host does not exist.
    let other = rest.segment("rack-b").await;
    let other = other["uuid"].as_str().unwrap();
    for reply in [
        rest.get(&format!("/v1/segments/{other}/hosts/{uuid}"))
            .await,
        rest.put(
            &format!("/v1/segments/{other}/hosts/{uuid}"),
            json!({"host": {"reserved": true}}),
        )
        .await,
        rest.delete(&format!("/v1/segments/{other}/hosts/{uuid}"))
            .await,
    ] {
        assert!(reply.fault("itemNotFound").starts_with("No host with id"));
    }

    // Host names are unique across segments.
    let dup = rest
        .post(
            &format!("/v1/segments/{other}/hosts"),
            json!({"host": {"name": "compute-1", "type": "COMPUTE", "control_attributes": ""}}),
        )
        .await;
    assert_eq!(dup.status, 409);
    dup.fault("conflictingRequest");

    rest.delete(&format!("/v1/segments/{seg}/hosts/{uuid}"))
        .await
        .expect(204);
    assert_eq!(
        rest.get(&format!("/v1/segments/{seg}/hosts/{uuid}"))
            .await
            .status,
        404
    );
    // An unknown segment is a 404 for every host call.
    let nowhere = "6b6b6b6b-0000-4000-8000-000000000000";
    let reply = rest.get(&format!("/v1/segments/{nowhere}/hosts")).await;
    assert_eq!(
        reply.fault("itemNotFound"),
        format!("No failover segment with id {nowhere}.")
    );
    let reply = rest
        .post(
            &format!("/v1/segments/{nowhere}/hosts"),
            json!({"host": {"name": "h", "type": "COMPUTE", "control_attributes": ""}}),
        )
        .await;
    assert_eq!(reply.status, 404);
    assert_eq!(
        rest.get("/v1/segments/not-a-uuid/hosts/also-not")
            .await
            .status,
        404
    );
}

async fn host_bodies_are_checked(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let rest = Rest::new(&app);
    let seg = rest.segment("rack").await["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/segments/{seg}/hosts");
    for (body, expected) in [
        (
            json!({"host": {"name": "h", "type": "COMPUTE"}}),
            "'control_attributes' is a required property",
        ),
        (
            json!({"host": {"name": "h", "type": "COMPUTE", "control_attributes": "", "colour": "red"}}),
            "'colour' was unexpected",
        ),
        (
            json!({"host": {"name": "h", "type": "COMPUTE", "control_attributes": "", "reserved": "sometimes"}}),
            "Invalid input for field/attribute reserved",
        ),
        (
            json!({"host": {"name": "bad name!", "type": "COMPUTE", "control_attributes": ""}}),
            "Invalid input for field/attribute name",
        ),
        (json!({"hosts": {}}), "'hosts' was unexpected"),
    ] {
        let reply = rest.post(&path, body.clone()).await;
        let message = reply.fault("badRequest");
        assert!(message.contains(expected), "{body}: {message}");
    }
    assert!(
        uuids(&rest.get(&path).await.body["hosts"], "uuid").is_empty(),
        "nothing was created"
    );
}

async fn hosts_are_listed_filtered_and_paged(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let rest = Rest::new(&app);
    let seg = rest.segment("rack").await["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let other = rest.segment("elsewhere").await["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    rest.host(&other, "far-away").await;
    for (name, reserved, maintenance) in [
        ("c-1", false, false),
        ("c-2", true, false),
        ("c-3", false, true),
        ("c-4", true, true),
    ] {
        rest.post(
            &format!("/v1/segments/{seg}/hosts"),
            json!({"host": {"name": name, "type": "COMPUTE", "control_attributes": "",
                             "reserved": reserved, "on_maintenance": maintenance}}),
        )
        .await
        .expect(201);
    }
    let names = |value: &Value| -> Vec<String> {
        value["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let path = format!("/v1/segments/{seg}/hosts");
    let all = rest.get(&path).await;
    assert_eq!(names(all.expect(200)), ["c-4", "c-3", "c-2", "c-1"]);
    for host in all.body["hosts"].as_array().unwrap() {
        assert_eq!(host["failover_segment"]["uuid"], seg.as_str());
    }
    let reserved = rest.get(&format!("{path}?reserved=True")).await;
    assert_eq!(names(&reserved.body), ["c-4", "c-2"]);
    let mixed = rest
        .get(&format!("{path}?reserved=0&on_maintenance=yes"))
        .await;
    assert_eq!(names(&mixed.body), ["c-3"]);
    let typed = rest.get(&format!("{path}?type=CONTROLLER")).await;
    assert!(names(&typed.body).is_empty());
    let bad = rest.get(&format!("{path}?on_maintenance=often")).await;
    assert!(
        bad.fault("badRequest")
            .starts_with("Invalid value for on_maintenance")
    );
    let page = rest
        .get(&format!("{path}?sort_key=name&sort_dir=asc&limit=3"))
        .await;
    assert_eq!(names(&page.body), ["c-1", "c-2", "c-3"]);
    let marker = page.body["hosts"][2]["id"].as_i64().unwrap();
    let next = rest
        .get(&format!(
            "{path}?sort_key=name&sort_dir=asc&limit=3&marker={marker}"
        ))
        .await;
    assert_eq!(names(&next.body), ["c-4"]);
    let sorted = rest
        .get(&format!(
            "{path}?sort_key=reserved&sort_key=name&sort_dir=desc"
        ))
        .await;
    assert_eq!(names(&sorted.body), ["c-4", "c-2", "c-3", "c-1"]);
    let bad = rest.get(&format!("{path}?sort_key=failover_segment")).await;
    assert_eq!(bad.status, 400);
}

crate::on_every_backend!(
    hosts_are_created_shown_updated_and_deleted,
    host_bodies_are_checked,
    hosts_are_listed_filtered_and_paged,
);
