//! `/v1/notifications` and their vmoves: Masakari's 202 body, the intake's
//! refusals as Masakari's codes (unknown host 400, duplicate and
//! maintenance 409), filters and paging, `recovery_workflow_details` from
//! 1.1, and vmoves only for host failures.

use serde_json::{Value, json};

use super::{Rest, host_down, minutes_ago, now, uuids};
use crate::backends::Backend;
use crate::helpers::spawn_app;

async fn notifications_are_accepted_as_masakari_does(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let rest = Rest::new(&app);
    let segment = rest.segment("rack").await;
    let seg = segment["uuid"].as_str().unwrap().to_owned();
    let host = rest.host(&seg, "compute-1").await;

    // A report older than dispatch.expire_after is refused, naming the field.
    let two_days = minutes_ago(2 * 24 * 60).format("%Y-%m-%d %H:%M:%S");
    let stale = rest
        .post(
            "/v1/notifications",
            host_down("compute-1", &two_days.to_string()),
        )
        .await;
    assert_eq!(stale.status, 400);
    let why = stale.fault("badRequest");
    assert!(
        why.contains("generated_time") && why.contains("too old"),
        "{why}"
    );

    let generated = minutes_ago(10);
    let accepted = rest
        .post(
            "/v1/notifications",
            host_down(
                "compute-1",
                &generated.format("%Y-%m-%d %H:%M:%S").to_string(),
            ),
        )
        .await;
    let n = accepted.expect(202)["notification"].clone();
    assert_eq!(accepted.version_header(), Some("instance-ha 1.0"));
    assert!(n["id"].as_i64().unwrap() > 0);
    assert_eq!(n["type"], "COMPUTE_HOST");
    assert_eq!(n["status"], "new");
    assert_eq!(
        n["generated_time"],
        generated.format("%Y-%m-%dT%H:%M:%S.000000").to_string()
    );
    assert_eq!(n["source_host_uuid"], host["uuid"]);
    assert_eq!(n["failover_segment_uuid"], seg.as_str());
    assert_eq!(
        n["payload"],
        json!({"event": "STOPPED", "host_status": "NORMAL", "cluster_status": "OFFLINE"})
    );
    assert_eq!(n["message"], Value::Null);
    assert_eq!(n["deleted"], false);
    assert!(n.get("recovery_workflow_details").is_none());
    let uuid = n["notification_uuid"].as_str().unwrap().to_owned();

    // The same report again is a duplicate: 409.
    let dup = rest
        .post(
            "/v1/notifications",
            host_down(
                "compute-1",
                &(generated + chrono::Duration::seconds(14)).to_rfc3339(),
            ),
        )
        .await;
    assert_eq!(dup.status, 409);
    assert!(dup.fault("conflictingRequest").contains(&uuid));

    // Shown at 1.0 without, from 1.1 with the workflow details.
    let shown = rest.get(&format!("/v1/notifications/{uuid}")).await;
    let shown = shown.expect(200)["notification"].clone();
    assert_eq!(shown, n);
    let detailed = rest
        .version("1.1")
        .get(&format!("/v1/notifications/{uuid}"))
        .await;
    assert_eq!(
        detailed.expect(200)["notification"]["recovery_workflow_details"],
        json!([])
    );
    let missing = rest
        .get("/v1/notifications/3c3c3c3c-0000-4000-8000-000000000000")
        .await;
    assert_eq!(
        missing.fault("itemNotFound"),
        "No notification with id 3c3c3c3c-0000-4000-8000-000000000000."
    );

    // A host on maintenance refuses reports: 409.
    rest.post(
        &format!("/v1/segments/{seg}/hosts"),
        json!({"host": {"name": "compute-2", "type": "COMPUTE", "control_attributes": "",
                         "on_maintenance": "yes"}}),
    )
    .await
    .expect(201);
    let process = json!({"notification": {
        "type": "PROCESS", "hostname": "compute-2", "generated_time": now(),
        "payload": {"process_name": "nova-compute", "event": "STOPPED"},
    }});
    let on_maintenance = rest.post("/v1/notifications", process).await;
    assert_eq!(on_maintenance.status, 409);
    assert!(
        on_maintenance
            .fault("conflictingRequest")
            .contains("maintenance")
    );
}

async fn notification_bodies_are_checked(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let rest = Rest::new(&app);
    let seg = rest.segment("rack").await["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    rest.host(&seg, "compute-1").await;
    let report = |kind: &str, host: &str, time: &str, payload: Value| json!({"notification": {"type": kind, "hostname": host, "generated_time": time, "payload": payload}});
    let stopped = json!({"event": "STOPPED", "host_status": "NORMAL"});
    for (body, expected) in [
        (
            report("COMPUTE_HOST", "compute-9", &now(), stopped.clone()),
            "compute-9",
        ),
        (
            report("DISK", "compute-1", &now(), stopped.clone()),
            "is not one of ['COMPUTE_HOST', 'VM', 'PROCESS']",
        ),
        (
            report("COMPUTE_HOST", "compute-1", "yesterday", stopped.clone()),
            "is not a 'date-time'",
        ),
        (
            report(
                "COMPUTE_HOST",
                "compute-1",
                &now(),
                json!({"event": "EXPLODED"}),
            ),
            "payload.event",
        ),
        (
            report(
                "COMPUTE_HOST",
                "compute-1",
                &now(),
                json!({"event": "STOPPED", "extra": "x"}),
            ),
            "payload.extra",
        ),
        (
            report("COMPUTE_HOST", "compute-1", &now(), json!({"event": 1})),
            "Invalid input for field/attribute event",
        ),
        (
            report("PROCESS", "compute-1", &now(), json!({"event": "STOPPED"})),
            "payload.process_name",
        ),
        (
            report(
                "VM",
                "compute-1",
                &now(),
                json!({"instance_uuid": "nope", "vir_domain_event": "STOPPED_FAILED", "event": "LIFECYCLE"}),
            ),
            "payload.instance_uuid",
        ),
        (
            report(
                "PROCESS",
                "compute-1",
                &now(),
                json!({"process_name": "nova\u{1b}]0;owned\u{7}", "event": "STOPPED"}),
            ),
            "payload.process_name. must not contain control characters (found U+001B",
        ),
        (
            report(
                "PROCESS",
                "compute-1",
                &now(),
                json!({"process_name": "nova\u{9b}2J", "event": "STOPPED"}),
            ),
            "payload.process_name",
        ),
        (
            report(
                "PROCESS",
                "compute-1",
                &now(),
                json!({"process_name": "nova\u{202e}etupmoc", "event": "STOPPED"}),
            ),
            "payload.process_name. must not contain bidirectional or zero-width characters",
        ),
        (
            json!({"notification": {"type": "VM", "hostname": "compute-1", "payload": {}}}),
            "'generated_time' is a required property",
        ),
        (
            json!({"notification": {"type": "VM", "hostname": "compute-1", "generated_time": now(), "payload": {}, "id": 4}}),
            "'id' was unexpected",
        ),
    ] {
        let reply = rest.post("/v1/notifications", body.clone()).await;
        let message = reply.fault("badRequest");
        assert!(message.contains(expected), "{body}: {message}");
    }
    assert!(
        rest.get("/v1/notifications").await.body["notifications"]
            .as_array()
            .unwrap()
            .is_empty(),
        "nothing was stored"
    );
}

async fn notifications_are_listed_filtered_and_paged(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let rest = Rest::new(&app);
    let seg = rest.segment("rack").await["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let h1 = rest.host(&seg, "compute-1").await["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    rest.host(&seg, "compute-2").await;
    let send = |kind: &str, host: &str, time: &str, payload: Value| {
        let rest = rest.clone();
        let body = json!({"notification": {"type": kind, "hostname": host, "generated_time": time, "payload": payload}});
        async move {
            rest.post("/v1/notifications", body).await.expect(202)["notification"]
                ["notification_uuid"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let (ta, tb, tc) = (minutes_ago(180), minutes_ago(120), minutes_ago(60));
    let plain = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%dT%H:%M:%S").to_string();
    let a = send(
        "PROCESS",
        "compute-1",
        &plain(ta),
        json!({"process_name": "nova-compute", "event": "STOPPED"}),
    )
    .await;
    let b = send(
        "COMPUTE_HOST",
        "compute-2",
        &plain(tb),
        json!({"event": "STOPPED", "host_status": "UNKNOWN"}),
    )
    .await;
    let c = send(
        "VM",
        "compute-1",
        &plain(tc),
        json!({"instance_uuid": "4d4d4d4d-0000-4000-8000-000000000000",
               "vir_domain_event": "STOPPED_FAILED", "event": "LIFECYCLE"}),
    )
    .await;
    let listed = |query: &str| {
        let rest = rest.clone();
        let path = format!("/v1/notifications{query}");
        async move {
            uuids(
                &rest.get(&path).await.expect(200)["notifications"],
                "notification_uuid",
            )
        }
    };
    assert_eq!(listed("").await, [c.as_str(), b.as_str(), a.as_str()]);
    assert_eq!(listed("?type=VM").await, [c.as_str()]);
    assert_eq!(listed("?type=NOTHING").await, Vec::<String>::new());
    assert_eq!(listed("?status=new").await.len(), 3);
    assert_eq!(listed("?status=finished").await, Vec::<String>::new());
    assert_eq!(
        listed(&format!("?source_host_uuid={h1}")).await,
        [c.as_str(), a.as_str()]
    );
    assert_eq!(
        listed(&format!("?generated-since={}Z", plain(tb))).await,
        [c.as_str(), b.as_str()]
    );
    assert_eq!(
        listed(&format!(
            "?generated-since={}",
            tb.format("%Y-%m-%d%%20%H:%M:%S")
        ))
        .await,
        [c.as_str(), b.as_str()]
    );
    assert_eq!(
        listed("?sort_key=generated_time&sort_dir=asc&limit=2").await,
        [a.as_str(), b.as_str()]
    );
    assert_eq!(
        listed(&format!("?sort_key=generated_time&sort_dir=asc&marker={b}")).await,
        [c.as_str()]
    );
    assert_eq!(
        listed("?sort_key=type&sort_dir=asc").await,
        [b.as_str(), a.as_str(), c.as_str()]
    );
    let bad = rest.get("/v1/notifications?generated-since=someday").await;
    assert_eq!(bad.fault("badRequest"), "Invalid generated-since value");
    let bad = rest.get("/v1/notifications?sort_key=hostname").await;
    assert_eq!(bad.status, 400);
}

async fn vmoves_exist_only_for_host_failures(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let rest = Rest::new(&app);
    let seg = rest.segment("rack").await["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    rest.host(&seg, "compute-1").await;
    let host = rest
        .post("/v1/notifications", host_down("compute-1", &now()))
        .await;
    let host = host.expect(202)["notification"]["notification_uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let process = rest
        .post(
            "/v1/notifications",
            json!({"notification": {"type": "PROCESS", "hostname": "compute-1", "generated_time": now(),
                   "payload": {"process_name": "nova-compute", "event": "STOPPED"}}}),
        )
        .await;
    let process = process.expect(202)["notification"]["notification_uuid"]
        .as_str()
        .unwrap()
        .to_owned();

    // Not gated by microversion, as in Masakari.
    let vmoves = rest.get(&format!("/v1/notifications/{host}/vmoves")).await;
    assert_eq!(vmoves.expect(200)["vmoves"], json!([]));
    let filtered = rest
        .version("1.3")
        .get(&format!(
            "/v1/notifications/{host}/vmoves?status=failed&type=evacuation&sort_key=start_time"
        ))
        .await;
    assert_eq!(filtered.expect(200)["vmoves"], json!([]));
    let bad_sort = rest
        .get(&format!("/v1/notifications/{host}/vmoves?sort_key=colour"))
        .await;
    assert_eq!(bad_sort.status, 400);
    let without = rest
        .get(&format!("/v1/notifications/{process}/vmoves"))
        .await;
    assert_eq!(
        without.fault("badRequest"),
        format!("This notification {process} without vm moves.")
    );
    let without = rest
        .get(&format!(
            "/v1/notifications/{process}/vmoves/5e5e5e5e-0000-4000-8000-000000000000"
        ))
        .await;
    assert_eq!(without.status, 400);
    let unknown = rest
        .get(&format!(
            "/v1/notifications/{host}/vmoves/5e5e5e5e-0000-4000-8000-000000000000"
        ))
        .await;
    assert!(
        unknown
            .fault("itemNotFound")
            .starts_with("No vm move with id")
    );
    let nowhere = rest
        .get("/v1/notifications/6f6f6f6f-0000-4000-8000-000000000000/vmoves")
        .await;
    assert_eq!(nowhere.status, 404);
}

/// masakari-monitors takes a 400 as final: a report from a monitor whose
/// clock is hours ahead is accepted, taken at the time it was received,
/// and the time the monitor sent is kept in its payload and told in its
/// message. A report the monitor resends is still one notification.
async fn a_report_from_a_clock_ahead_is_taken_at_its_received_time(backend: Backend) {
    let Some(app) = spawn_app(backend).await else {
        return;
    };
    let rest = Rest::new(&app);
    let seg = rest.segment("rack").await["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    rest.host(&seg, "compute-1").await;

    let sent = minutes_ago(-180);
    let sent_text = sent.format("%Y-%m-%dT%H:%M:%S").to_string();
    let before = chrono::Utc::now() - chrono::Duration::seconds(1);
    let accepted = rest
        .post("/v1/notifications", host_down("compute-1", &sent_text))
        .await;
    let n = accepted.expect(202)["notification"].clone();
    let effective = chrono::NaiveDateTime::parse_from_str(
        n["generated_time"].as_str().unwrap(),
        "%Y-%m-%dT%H:%M:%S%.f",
    )
    .unwrap()
    .and_utc();
    assert!(
        effective >= before && effective <= chrono::Utc::now(),
        "{effective} is not the received time"
    );
    assert_eq!(
        n["payload"]["monitor_generated_time"],
        sent.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
    );
    assert_eq!(n["payload"]["event"], "STOPPED");
    let message = n["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("intake.max_clock_skew") && message.contains(&sent_text),
        "{message}"
    );

    // The monitor retries the same report: a duplicate, as Masakari says.
    let again = rest
        .post("/v1/notifications", host_down("compute-1", &sent_text))
        .await;
    assert_eq!(again.status, 409, "{:#}", again.body);
}

crate::on_every_backend!(
    a_report_from_a_clock_ahead_is_taken_at_its_received_time,
    notifications_are_accepted_as_masakari_does,
    notification_bodies_are_checked,
    notifications_are_listed_filtered_and_paged,
    vmoves_exist_only_for_host_failures,
);
