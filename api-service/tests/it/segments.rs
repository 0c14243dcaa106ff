//! Segment CRUD, filters and paging.

use instanceha_proto::v1 as pb;
use tonic::Code;

use crate::backends::Backend;
use crate::helpers::{assert_status, segment_request, spawn_app};
use crate::on_every_backend;

on_every_backend!(
    create_get_update_delete,
    names_are_unique,
    list_filters_and_pages
);

async fn create_get_update_delete(backend: Backend) {
    let Some(mut app) = spawn_app(backend).await else {
        return;
    };
    let created = app
        .segments
        .create_segment(pb::CreateSegmentRequest {
            name: "rack-a".into(),
            description: Some("rack A".into()),
            service_type: "COMPUTE".into(),
            recovery_method: pb::RecoveryMethod::ReservedHost as i32,
            enabled: None,
            return_to_service: None,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(created.name, "rack-a");
    assert!(created.enabled, "segments are enabled by default");
    assert_eq!(
        created.recovery_method,
        pb::RecoveryMethod::ReservedHost as i32
    );
    uuid::Uuid::parse_str(&created.id).expect("a UUID id");

    let got = app
        .segments
        .get_segment(pb::GetSegmentRequest {
            id: created.id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got, created);

    let updated = app
        .segments
        .update_segment(pb::UpdateSegmentRequest {
            id: created.id.clone(),
            recovery_method: Some(pb::RecoveryMethod::RhPriority as i32),
            enabled: Some(false),
            description: Some(String::new()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        updated.recovery_method,
        pb::RecoveryMethod::RhPriority as i32
    );
    assert!(!updated.enabled);
    assert_eq!(updated.description, "");
    assert_eq!(updated.name, "rack-a");
    let seconds = |t: &Option<prost_types::Timestamp>| {
        let t = t.as_ref().unwrap();
        (t.seconds, t.nanos)
    };
    assert!(seconds(&updated.updated_at) >= seconds(&created.updated_at));

    app.segments
        .delete_segment(pb::DeleteSegmentRequest {
            id: created.id.clone(),
        })
        .await
        .unwrap();
    assert_status(
        app.segments
            .get_segment(pb::GetSegmentRequest { id: created.id })
            .await,
        Code::NotFound,
        "not found",
    );
    app.stop().await;
}

async fn names_are_unique(backend: Backend) {
    let Some(mut app) = spawn_app(backend).await else {
        return;
    };
    app.segments
        .create_segment(segment_request("one"))
        .await
        .unwrap();
    let other = app
        .segments
        .create_segment(segment_request("two"))
        .await
        .unwrap()
        .into_inner();
    assert_status(
        app.segments.create_segment(segment_request("one")).await,
        Code::AlreadyExists,
        "\"one\"",
    );
    // Renaming onto a taken name is refused too, and changes nothing.
    assert_status(
        app.segments
            .update_segment(pb::UpdateSegmentRequest {
                id: other.id.clone(),
                name: Some("one".into()),
                ..Default::default()
            })
            .await,
        Code::AlreadyExists,
        "already exists",
    );
    let still = app
        .segments
        .get_segment(pb::GetSegmentRequest { id: other.id })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(still.name, "two");
    app.stop().await;
}

async fn list_filters_and_pages(backend: Backend) {
    let Some(mut app) = spawn_app(backend).await else {
        return;
    };
    for i in 0..7 {
        let mut request = segment_request(&format!("seg-{i}"));
        if i % 2 == 0 {
            request.recovery_method = pb::RecoveryMethod::ReservedHost as i32;
        }
        request.enabled = Some(i != 3);
        app.segments.create_segment(request).await.unwrap();
    }
    // Page through 3 at a time: 3 + 3 + 1, in creation order, no repeats.
    let mut names = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = app
            .segments
            .list_segments(pb::ListSegmentsRequest {
                page_size: 3,
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        pages += 1;
        names.extend(page.segments.into_iter().map(|s| s.name));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(pages, 3);
    assert_eq!(
        names,
        (0..7).map(|i| format!("seg-{i}")).collect::<Vec<_>>()
    );

    let reserved = app
        .segments
        .list_segments(pb::ListSegmentsRequest {
            recovery_method: Some(pb::RecoveryMethod::ReservedHost as i32),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reserved.segments.len(), 4);
    let disabled = app
        .segments
        .list_segments(pb::ListSegmentsRequest {
            enabled: Some(false),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(disabled.segments.len(), 1);
    assert_eq!(disabled.segments[0].name, "seg-3");
    let by_name = app
        .segments
        .list_segments(pb::ListSegmentsRequest {
            name: Some("seg-5".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(by_name.segments.len(), 1);
    app.stop().await;
}
