//! Bad input gets a clear error naming what is wrong, and changes nothing.

use instanceha_proto::v1 as pb;
use tonic::Code;

use crate::backends::Backend;
use crate::helpers::{
    assert_status, host_down, host_request, payload, segment_request, segment_with_hosts, snapshot,
    spawn_app,
};
use crate::on_every_backend;

on_every_backend!(bad_requests_name_the_field_and_change_nothing);

async fn bad_requests_name_the_field_and_change_nothing(backend: Backend) {
    let Some(mut app) = spawn_app(backend).await else {
        return;
    };
    let segment = segment_with_hosts(&mut app, "rack-a", &["compute-01"]).await;
    app.notifications
        .create_notification(host_down("compute-01"))
        .await
        .unwrap();
    let before = snapshot(&mut app).await;
    let invalid = Code::InvalidArgument;

    // Malformed UUIDs.
    assert_status(
        app.segments
            .get_segment(pb::GetSegmentRequest { id: "x".into() })
            .await,
        invalid,
        "id: \"x\" is not a UUID",
    );
    assert_status(
        app.hosts
            .create_host(host_request("not-a-uuid", "compute-02"))
            .await,
        invalid,
        "segment_id",
    );
    assert_status(
        app.notifications
            .get_notification(pb::GetNotificationRequest { id: String::new() })
            .await,
        invalid,
        "id: is required",
    );
    assert_status(
        app.vmoves
            .list_vmoves(pb::ListVmovesRequest {
                notification_id: "123".into(),
                ..Default::default()
            })
            .await,
        invalid,
        "notification_id",
    );

    // Empty, blank and over-long names.
    assert_status(
        app.segments.create_segment(segment_request("")).await,
        invalid,
        "name: must not be empty",
    );
    assert_status(
        app.segments.create_segment(segment_request("   ")).await,
        invalid,
        "name",
    );
    assert_status(
        app.segments
            .create_segment(segment_request(&"s".repeat(256)))
            .await,
        invalid,
        "name: must be at most 255 characters",
    );
    // Names that would reorder, hide or drive what an operator reads.
    for (name, reason) in [
        ("rack\u{202e}1", "bidirectional or zero-width"),
        ("rack\u{200b}a", "bidirectional or zero-width"),
        ("rack\u{1b}[31m", "control characters"),
        ("rack\nb", "control characters"),
    ] {
        assert_status(
            app.segments.create_segment(segment_request(name)).await,
            invalid,
            &format!("name: must not contain {reason}"),
        );
    }
    let mut hidden_type = host_request(&segment.id, "compute-02");
    hidden_type.r#type = "COMPUTE\u{2066}".into();
    assert_status(
        app.hosts.create_host(hidden_type).await,
        invalid,
        "type: must not contain bidirectional",
    );
    let mut no_type = segment_request("ok");
    no_type.service_type = String::new();
    assert_status(
        app.segments.create_segment(no_type).await,
        invalid,
        "service_type",
    );
    assert_status(
        app.hosts
            .create_host(host_request(&segment.id, "bad host"))
            .await,
        invalid,
        "name: may only contain",
    );
    assert_status(
        app.hosts
            .create_host(host_request(&segment.id, &"h".repeat(256)))
            .await,
        invalid,
        "name",
    );

    // Unknown and missing enum values.
    let mut unknown_method = segment_request("ok");
    unknown_method.recovery_method = 42;
    assert_status(
        app.segments.create_segment(unknown_method).await,
        invalid,
        "recovery_method: 42 is not a known value",
    );
    let mut missing_method = segment_request("ok");
    missing_method.recovery_method = 0;
    assert_status(
        app.segments.create_segment(missing_method).await,
        invalid,
        "recovery_method: is required",
    );
    let mut bad_type = host_down("compute-01");
    bad_type.r#type = 9;
    assert_status(
        app.notifications.create_notification(bad_type).await,
        invalid,
        "type: 9 is not a known value",
    );
    assert_status(
        app.notifications
            .list_notifications(pb::ListNotificationsRequest {
                status: Some(77),
                ..Default::default()
            })
            .await,
        invalid,
        "status",
    );

    // Payloads: wrong keys, wrong values, oversized.
    let mut wrong_event = host_down("compute-01");
    wrong_event
        .payload
        .insert("event".into(), "EXPLODED".into());
    assert_status(
        app.notifications.create_notification(wrong_event).await,
        invalid,
        "payload.event",
    );
    let mut extra = host_down("compute-01");
    extra.payload.insert("color".into(), "red".into());
    assert_status(
        app.notifications.create_notification(extra).await,
        invalid,
        "payload.color: is not allowed",
    );
    let mut oversized = host_down("compute-01");
    oversized.payload.insert("event".into(), "S".repeat(10_000));
    assert_status(
        app.notifications.create_notification(oversized).await,
        invalid,
        "payload.event: must be at most 255",
    );
    // What a monitor sends cannot drive an operator's terminal.
    for (value, reason) in [
        ("nova\u{1b}[2J", "must not contain control characters"),
        ("nova\u{7}", "must not contain control characters"),
        ("nova\u{7f}", "must not contain control characters"),
        ("nova\u{85}", "must not contain control characters"),
        (
            "nova\u{2067}",
            "must not contain bidirectional or zero-width",
        ),
        (
            "nova\u{feff}",
            "must not contain bidirectional or zero-width",
        ),
    ] {
        let process = pb::CreateNotificationRequest {
            r#type: pb::NotificationType::Process as i32,
            payload: payload(&[("process_name", value), ("event", "STOPPED")]),
            ..host_down("compute-01")
        };
        assert_status(
            app.notifications.create_notification(process).await,
            invalid,
            &format!("payload.process_name: {reason}"),
        );
    }
    let many = pb::CreateNotificationRequest {
        payload: (0..100).map(|i| (format!("k{i}"), "v".into())).collect(),
        ..host_down("compute-01")
    };
    assert_status(
        app.notifications.create_notification(many).await,
        invalid,
        "payload: must have at most 16 keys",
    );
    let vm = pb::CreateNotificationRequest {
        r#type: pb::NotificationType::Vm as i32,
        payload: payload(&[
            ("instance_uuid", "nope"),
            ("vir_domain_event", "STOPPED_FAILED"),
            ("event", "LIFECYCLE"),
        ]),
        ..host_down("compute-01")
    };
    assert_status(
        app.notifications.create_notification(vm).await,
        invalid,
        "payload.instance_uuid",
    );
    let mut no_time = host_down("compute-01");
    no_time.generated_time = None;
    assert_status(
        app.notifications.create_notification(no_time).await,
        invalid,
        "generated_time: is required",
    );
    let mut bad_host = host_down("compute-01");
    bad_host.hostname = "compute 01; drop table".into();
    assert_status(
        app.notifications.create_notification(bad_host).await,
        invalid,
        "hostname",
    );
    let mut long_key = host_down("compute-01");
    long_key.idempotency_key = "k".repeat(300);
    assert_status(
        app.notifications.create_notification(long_key).await,
        invalid,
        "idempotency_key",
    );

    // Paging.
    assert_status(
        app.segments
            .list_segments(pb::ListSegmentsRequest {
                page_token: "garbage!".into(),
                ..Default::default()
            })
            .await,
        invalid,
        "page_token",
    );
    let hosts_token = app
        .hosts
        .list_hosts(pb::ListHostsRequest {
            page_size: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    // One host, so no next page; forge a hosts token from a fresh listing of
    // segments instead and present it to another resource.
    assert!(hosts_token.next_page_token.is_empty());
    segment_with_hosts(&mut app, "rack-b", &[]).await;
    let segments_page = app
        .segments
        .list_segments(pb::ListSegmentsRequest {
            page_size: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!segments_page.next_page_token.is_empty());
    assert_status(
        app.notifications
            .list_notifications(pb::ListNotificationsRequest {
                page_token: segments_page.next_page_token,
                ..Default::default()
            })
            .await,
        invalid,
        "page_token: is not a notifications page token",
    );
    assert_status(
        app.hosts
            .list_hosts(pb::ListHostsRequest {
                page_size: -5,
                ..Default::default()
            })
            .await,
        invalid,
        "page_size",
    );
    assert_status(
        app.hosts
            .list_hosts(pb::ListHostsRequest {
                page_size: 5000,
                ..Default::default()
            })
            .await,
        invalid,
        "page_size: must be at most 1000",
    );

    // Updates that set nothing.
    assert_status(
        app.segments
            .update_segment(pb::UpdateSegmentRequest {
                id: segment.id.clone(),
                ..Default::default()
            })
            .await,
        invalid,
        "nothing to change",
    );

    // Unknown ids.
    assert_status(
        app.segments
            .get_segment(pb::GetSegmentRequest {
                id: "6b0d2b6e-4f5f-4f67-9b0a-0a3b6d1d8f00".into(),
            })
            .await,
        Code::NotFound,
        "segment 6b0d2b6e-4f5f-4f67-9b0a-0a3b6d1d8f00 not found",
    );

    // Nothing changed but the one segment this test added on purpose.
    let mut after = snapshot(&mut app).await;
    after.segments.retain(|s| s.name != "rack-b");
    assert_eq!(after, before);
    app.stop().await;
}
