//! `/v1/segments`: Masakari's bodies and codes for create, show, update,
//! delete and list (filters, sort, limit and marker), `enabled` from 1.2,
//! and the refusals while a notification of the segment is unfinished.

use serde_json::{Value, json};

use super::{Rest, host_down, now, uuids};
use crate::backends::Backend;
use crate::helpers::spawn_app;

fn body(name: &str, method: &str) -> Value {
    json!({"segment": {"name": name, "recovery_method": method, "service_type": "COMPUTE"}})
}

async fn segments_are_created_shown_updated_and_deleted(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let rest = Rest::new(&app);
    let created = rest.post("/v1/segments", body("rack-a", "auto")).await;
    let segment = created.expect(201)["segment"].clone();
    assert!(segment["id"].as_i64().unwrap() > 0, "the integer id");
    let uuid = segment["uuid"].as_str().unwrap().to_owned();
    assert_eq!(segment["name"], "rack-a");
    assert_eq!(segment["recovery_method"], "auto");
    assert_eq!(segment["service_type"], "COMPUTE");
    assert_eq!(segment["description"], Value::Null);
    assert_eq!(segment["enabled"], true);
    assert_eq!(segment["deleted"], false);
    assert_eq!(segment["deleted_at"], Value::Null);
    assert_eq!(segment["updated_at"], Value::Null, "never updated");
    let created_at = segment["created_at"].as_str().unwrap();
    assert_eq!(created_at.len(), "2017-04-21T08:59:53.991030".len());
    assert_eq!(&created_at[10..11], "T");
    assert_eq!(created.version_header(), Some("instance-ha 1.0"));

    let shown = rest.get(&format!("/v1/segments/{uuid}")).await;
    assert_eq!(shown.expect(200)["segment"], segment);

    let updated = rest
        .put(
            &format!("/v1/segments/{uuid}"),
            json!({"segment": {"description": "row 3", "recovery_method": "reserved_host"}}),
        )
        .await;
    let updated = updated.expect(200)["segment"].clone();
    assert_eq!(updated["description"], "row 3");
    assert_eq!(updated["recovery_method"], "reserved_host");
    assert!(updated["updated_at"].is_string());
    // null clears the description.
    let cleared = rest
        .put(
            &format!("/v1/segments/{uuid}"),
            json!({"segment": {"description": null}}),
        )
        .await;
    assert_eq!(cleared.expect(200)["segment"]["description"], Value::Null);

    rest.delete(&format!("/v1/segments/{uuid}"))
        .await
        .expect(204);
    let gone = rest.get(&format!("/v1/segments/{uuid}")).await;
    assert_eq!(
        gone.fault("itemNotFound"),
        format!("No failover segment with id {uuid}.")
    );
    assert_eq!(
        rest.delete(&format!("/v1/segments/{uuid}")).await.status,
        404
    );
    assert_eq!(
        rest.put(
            &format!("/v1/segments/{uuid}"),
            json!({"segment": {"name": "x"}})
        )
        .await
        .status,
        404
    );
    // Not a UUID: no such segment either.
    let bad = rest.get("/v1/segments/42").await;
    assert_eq!(bad.fault("itemNotFound"), "No failover segment with id 42.");
}

async fn segment_bodies_are_checked(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let rest = Rest::new(&app);
    let refused = |reply: super::Reply, expected: &str| {
        let message = reply.fault("badRequest").to_owned();
        assert!(message.contains(expected), "{message:?} lacks {expected:?}");
    };
    refused(
        rest.post(
            "/v1/segments",
            json!({"segment": {"name": "a", "service_type": "COMPUTE"}}),
        )
        .await,
        "'recovery_method' is a required property",
    );
    refused(
        rest.post("/v1/segments", body("a", "fastest")).await,
        "is not one of ['auto', 'reserved_host', 'auto_priority', 'rh_priority']",
    );
    refused(
        rest.post(
            "/v1/segments",
            json!({"segment": {"name": 7, "recovery_method": "auto", "service_type": "C"}}),
        )
        .await,
        "Invalid input for field/attribute name",
    );
    refused(
        rest.post("/v1/segments", body("", "auto")).await,
        "Invalid input for field/attribute name",
    );
    refused(
        rest.post("/v1/segments", body(&"n".repeat(256), "auto"))
            .await,
        "255",
    );
    // `enabled` is a 1.2 property.
    let mut with_enabled = body("b", "auto");
    with_enabled["segment"]["enabled"] = json!(false);
    refused(
        rest.version("1.1")
            .post("/v1/segments", with_enabled.clone())
            .await,
        "'enabled' was unexpected",
    );
    let created = rest.version("1.2").post("/v1/segments", with_enabled).await;
    let uuid = created.expect(201)["segment"]["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(created.body["segment"]["enabled"], false);
    assert_eq!(created.version_header(), Some("instance-ha 1.2"));
    // Booleans may be strings, as Masakari's schema allows.
    let enabled = rest
        .version("1.2")
        .put(
            &format!("/v1/segments/{uuid}"),
            json!({"segment": {"enabled": "True"}}),
        )
        .await;
    assert_eq!(enabled.expect(200)["segment"]["enabled"], true);
    refused(
        rest.version("1.2")
            .put(
                &format!("/v1/segments/{uuid}"),
                json!({"segment": {"enabled": "perhaps"}}),
            )
            .await,
        "Invalid input for field/attribute enabled",
    );
    // An update must change something.
    assert_eq!(
        rest.put(&format!("/v1/segments/{uuid}"), json!({"segment": {}}))
            .await
            .status,
        400
    );

    // Names are unique.
    rest.post("/v1/segments", body("dup", "auto"))
        .await
        .expect(201);
    let dup = rest.post("/v1/segments", body("dup", "auto")).await;
    assert_eq!(dup.status, 409);
    assert!(dup.fault("conflictingRequest").contains("dup"));
}

async fn segments_are_listed_filtered_sorted_and_paged(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let rest = Rest::new(&app).version("1.2");
    let mut made = Vec::new();
    for (name, method, enabled) in [
        ("s-c", "auto", true),
        ("s-a", "reserved_host", true),
        ("s-e", "auto", false),
        ("s-b", "rh_priority", true),
        ("s-d", "auto", true),
    ] {
        let mut b = body(name, method);
        b["segment"]["enabled"] = json!(enabled);
        let created = rest.post("/v1/segments", b).await;
        made.push(created.expect(201)["segment"].clone());
    }
    let names = |reply: &super::Reply| -> Vec<String> {
        reply.body["segments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_owned())
            .collect()
    };
    // Newest first by default.
    let all = rest.get("/v1/segments").await;
    all.expect(200);
    assert_eq!(names(&all), ["s-d", "s-b", "s-e", "s-a", "s-c"]);
    let by_name = rest.get("/v1/segments?sort_key=name&sort_dir=asc").await;
    assert_eq!(names(&by_name), ["s-a", "s-b", "s-c", "s-d", "s-e"]);
    let two_keys = rest
        .get("/v1/segments?sort_key=recovery_method&sort_key=name&sort_dir=asc&sort_dir=desc")
        .await;
    assert_eq!(names(&two_keys), ["s-e", "s-d", "s-c", "s-a", "s-b"]);

    let autos = rest.get("/v1/segments?recovery_method=auto").await;
    assert_eq!(names(&autos), ["s-d", "s-e", "s-c"]);
    let enabled_autos = rest
        .get("/v1/segments?recovery_method=auto&enabled=false")
        .await;
    assert_eq!(names(&enabled_autos), ["s-e"]);
    let none = rest.get("/v1/segments?recovery_method=fastest").await;
    assert_eq!(names(&none), Vec::<String>::new());
    let none = rest.get("/v1/segments?service_type=NETWORK").await;
    assert_eq!(names(&none), Vec::<String>::new());
    let bad = rest.get("/v1/segments?enabled=perhaps").await;
    assert!(
        bad.fault("badRequest")
            .starts_with("Invalid value for enabled")
    );

    // Pages by limit and marker (the integer id, or the uuid).
    let first = rest
        .get("/v1/segments?sort_key=name&sort_dir=asc&limit=2")
        .await;
    assert_eq!(names(&first), ["s-a", "s-b"]);
    let last_id = first.body["segments"][1]["id"].as_i64().unwrap();
    let second = rest
        .get(&format!(
            "/v1/segments?sort_key=name&sort_dir=asc&limit=2&marker={last_id}"
        ))
        .await;
    assert_eq!(names(&second), ["s-c", "s-d"]);
    let last_uuid = second.body["segments"][1]["uuid"].as_str().unwrap();
    let third = rest
        .get(&format!(
            "/v1/segments?sort_key=name&sort_dir=asc&limit=2&marker={last_uuid}"
        ))
        .await;
    assert_eq!(names(&third), ["s-e"]);
    // A marker outside the filter still places the page.
    let disabled_id = made[2]["id"].as_i64().unwrap();
    let after = rest
        .get(&format!(
            "/v1/segments?enabled=true&sort_key=name&sort_dir=asc&marker={disabled_id}"
        ))
        .await;
    assert_eq!(names(&after), Vec::<String>::new());
    let after_a = made[1]["id"].as_i64().unwrap();
    let after = rest
        .get(&format!(
            "/v1/segments?enabled=true&sort_key=name&sort_dir=asc&marker={after_a}"
        ))
        .await;
    assert_eq!(names(&after), ["s-b", "s-c", "s-d"]);
    assert_eq!(
        uuids(
            &rest.get("/v1/segments?limit=0").await.body["segments"],
            "uuid"
        ),
        Vec::<String>::new()
    );

    for (query, expected) in [
        ("marker=999999", "Marker 999999 could not be found."),
        ("sort_key=colour", "Sort key supplied is invalid: colour"),
        ("sort_dir=sideways", "Unknown sort direction"),
        (
            "sort_key=name&sort_dir=asc&sort_dir=asc",
            "Sort direction size exceeds",
        ),
        ("limit=-1", "limit must be >= 0"),
        ("limit=many", "limit must be an integer"),
    ] {
        let reply = rest.get(&format!("/v1/segments?{query}")).await;
        let message = reply.fault("badRequest");
        assert!(message.contains(expected), "{query}: {message}");
    }
}

async fn busy_segments_refuse_changes(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let rest = Rest::new(&app);
    let segment = rest.segment("busy").await;
    let uuid = segment["uuid"].as_str().unwrap();
    rest.host(uuid, "compute-1").await;
    // Without an engine the notification stays new: unfinished.
    rest.post("/v1/notifications", host_down("compute-1", &now()))
        .await
        .expect(202);
    let update = rest
        .put(
            &format!("/v1/segments/{uuid}"),
            json!({"segment": {"description": "x"}}),
        )
        .await;
    assert_eq!(update.status, 409);
    assert!(update.fault("conflictingRequest").contains("unfinished"));
    assert_eq!(
        rest.delete(&format!("/v1/segments/{uuid}")).await.status,
        409
    );
    rest.get(&format!("/v1/segments/{uuid}")).await.expect(200);
}

crate::on_every_backend!(
    segments_are_created_shown_updated_and_deleted,
    segment_bodies_are_checked,
    segments_are_listed_filtered_sorted_and_paged,
    busy_segments_refuse_changes,
);
