//! Host CRUD, segment membership, filters.

use instanceha_proto::v1 as pb;
use tonic::Code;

use crate::backends::Backend;
use crate::helpers::{assert_status, host_request, segment_request, spawn_app};
use crate::on_every_backend;

on_every_backend!(
    create_get_update_delete,
    hosts_belong_to_their_segment,
    deleting_a_segment_deletes_its_hosts
);

async fn create_get_update_delete(backend: Backend) {
    let Some(mut app) = spawn_app(backend).await else {
        return;
    };
    let segment = app
        .segments
        .create_segment(segment_request("rack-a"))
        .await
        .unwrap()
        .into_inner();
    let host = app
        .hosts
        .create_host(host_request(&segment.id, "compute-01"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(host.segment_id, segment.id);
    assert!(!host.reserved && !host.on_maintenance);
    assert_status(
        app.hosts
            .create_host(host_request(&segment.id, "compute-01"))
            .await,
        Code::AlreadyExists,
        "compute-01",
    );

    let updated = app
        .hosts
        .update_host(pb::UpdateHostRequest {
            id: host.id.clone(),
            reserved: Some(true),
            on_maintenance: Some(true),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(updated.reserved && updated.on_maintenance);

    let listed = app
        .hosts
        .list_hosts(pb::ListHostsRequest {
            segment_id: Some(segment.id.clone()),
            reserved: Some(true),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.hosts, vec![updated.clone()]);

    app.hosts
        .delete_host(pb::DeleteHostRequest {
            id: host.id.clone(),
            segment_id: segment.id.clone(),
        })
        .await
        .unwrap();
    assert_status(
        app.hosts
            .get_host(pb::GetHostRequest {
                id: host.id,
                segment_id: String::new(),
            })
            .await,
        Code::NotFound,
        "host",
    );
    app.stop().await;
}

async fn hosts_belong_to_their_segment(backend: Backend) {
    let Some(mut app) = spawn_app(backend).await else {
        return;
    };
    let a = app
        .segments
        .create_segment(segment_request("a"))
        .await
        .unwrap()
        .into_inner();
    let b = app
        .segments
        .create_segment(segment_request("b"))
        .await
        .unwrap()
        .into_inner();
    let host = app
        .hosts
        .create_host(host_request(&a.id, "compute-01"))
        .await
        .unwrap()
        .into_inner();
    // Asked through the wrong segment, the host does not exist.
    assert_status(
        app.hosts
            .get_host(pb::GetHostRequest {
                id: host.id.clone(),
                segment_id: b.id.clone(),
            })
            .await,
        Code::NotFound,
        &b.id,
    );
    assert_status(
        app.hosts
            .delete_host(pb::DeleteHostRequest {
                id: host.id.clone(),
                segment_id: b.id.clone(),
            })
            .await,
        Code::NotFound,
        "host",
    );
    // A host in an unknown segment cannot be created.
    assert_status(
        app.hosts
            .create_host(host_request(
                "6b0d2b6e-4f5f-4f67-9b0a-0a3b6d1d8f00",
                "compute-09",
            ))
            .await,
        Code::NotFound,
        "segment",
    );
    // Listing the hosts of an unknown segment is an error, not an empty list.
    assert_status(
        app.hosts
            .list_hosts(pb::ListHostsRequest {
                segment_id: Some("6b0d2b6e-4f5f-4f67-9b0a-0a3b6d1d8f00".into()),
                ..Default::default()
            })
            .await,
        Code::NotFound,
        "segment",
    );
    app.stop().await;
}

async fn deleting_a_segment_deletes_its_hosts(backend: Backend) {
    let Some(mut app) = spawn_app(backend).await else {
        return;
    };
    let a = app
        .segments
        .create_segment(segment_request("a"))
        .await
        .unwrap()
        .into_inner();
    for name in ["c1", "c2"] {
        app.hosts
            .create_host(host_request(&a.id, name))
            .await
            .unwrap();
    }
    app.segments
        .delete_segment(pb::DeleteSegmentRequest { id: a.id })
        .await
        .unwrap();
    let hosts = app
        .hosts
        .list_hosts(pb::ListHostsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(hosts.hosts.is_empty());
    app.stop().await;
}
