//! Notification intake: per-type payloads, unknown hosts, maintenance,
//! duplicates, idempotency, disabled segments, and the lock that unfinished
//! notifications put on their segment and hosts.

use instanceha_proto::v1 as pb;
use tonic::Code;

use crate::backends::Backend;
use crate::helpers::{
    assert_status, host_down, now, payload, segment_with_hosts, snapshot, spawn_app, spawn_app_with,
};
use crate::on_every_backend;

on_every_backend!(
    each_type_is_accepted_with_its_payload,
    unknown_hosts_are_refused,
    hosts_on_maintenance_refuse_all_but_started_events,
    duplicates_name_the_earlier_notification,
    idempotency_keys_return_the_first_result,
    reports_sent_together_are_kept_exactly_once,
    disabled_segments_store_ignored_notifications,
    unfinished_notifications_lock_their_segment_and_hosts,
    list_newest_first_with_filters
);

async fn each_type_is_accepted_with_its_payload(backend: Backend) {
    let Some(mut app) = spawn_app(backend).await else {
        return;
    };
    let segment = segment_with_hosts(&mut app, "rack-a", &["compute-01"]).await;
    let host = app
        .notifications
        .create_notification(host_down("compute-01"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(host.status, pb::NotificationStatus::New as i32);
    assert_eq!(host.segment_id, segment.id);
    assert_eq!(host.hostname, "compute-01");
    assert_eq!(
        host.payload.get("host_status").map(String::as_str),
        Some("NORMAL")
    );

    let process = app
        .notifications
        .create_notification(pb::CreateNotificationRequest {
            r#type: pb::NotificationType::Process as i32,
            hostname: "compute-01".into(),
            generated_time: Some(now()),
            payload: payload(&[("process_name", "nova-compute"), ("event", "STOPPED")]),
            idempotency_key: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(process.r#type, pb::NotificationType::Process as i32);

    let vm = app
        .notifications
        .create_notification(pb::CreateNotificationRequest {
            r#type: pb::NotificationType::Vm as i32,
            hostname: "compute-01".into(),
            generated_time: Some(now()),
            payload: payload(&[
                ("instance_uuid", "0e12087a-7c87-476a-8f84-7398e991cecc"),
                ("vir_domain_event", "STOPPED_FAILED"),
                ("event", "LIFECYCLE"),
            ]),
            idempotency_key: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    let got = app
        .notifications
        .get_notification(pb::GetNotificationRequest { id: vm.id.clone() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.id, vm.id);
    assert_eq!(got.generated_time, vm.generated_time);
    assert!(got.progress_events.is_empty());
    app.stop().await;
}

async fn unknown_hosts_are_refused(backend: Backend) {
    let Some(mut app) = spawn_app(backend).await else {
        return;
    };
    segment_with_hosts(&mut app, "rack-a", &["compute-01"]).await;
    let before = snapshot(&mut app).await;
    assert_status(
        app.notifications
            .create_notification(host_down("compute-99"))
            .await,
        Code::InvalidArgument,
        "hostname: no host named \"compute-99\"",
    );
    assert_eq!(snapshot(&mut app).await, before);
    app.stop().await;
}

async fn hosts_on_maintenance_refuse_all_but_started_events(backend: Backend) {
    let Some(mut app) = spawn_app(backend).await else {
        return;
    };
    let segment = segment_with_hosts(&mut app, "rack-a", &[]).await;
    let mut request = crate::helpers::host_request(&segment.id, "compute-01");
    request.on_maintenance = true;
    app.hosts.create_host(request).await.unwrap();
    let before = snapshot(&mut app).await;
    assert_status(
        app.notifications
            .create_notification(host_down("compute-01"))
            .await,
        Code::FailedPrecondition,
        "on maintenance",
    );
    assert_eq!(snapshot(&mut app).await, before);
    // A host coming back is news worth hearing, maintenance or not.
    let back = app
        .notifications
        .create_notification(pb::CreateNotificationRequest {
            r#type: pb::NotificationType::Process as i32,
            hostname: "compute-01".into(),
            generated_time: Some(now()),
            payload: payload(&[("process_name", "nova-compute"), ("event", "STARTED")]),
            idempotency_key: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(back.status, pb::NotificationStatus::New as i32);
    app.stop().await;
}

async fn duplicates_name_the_earlier_notification(backend: Backend) {
    let Some(mut app) = spawn_app(backend).await else {
        return;
    };
    segment_with_hosts(&mut app, "rack-a", &["compute-01"]).await;
    let first = app
        .notifications
        .create_notification(host_down("compute-01"))
        .await
        .unwrap()
        .into_inner();
    let status = assert_status(
        app.notifications
            .create_notification(host_down("compute-01"))
            .await,
        Code::AlreadyExists,
        &first.id,
    );
    assert!(status.message().contains("180 s"), "{}", status.message());
    // A different payload is a different report.
    let mut unknown = host_down("compute-01");
    unknown
        .payload
        .insert("host_status".into(), "UNKNOWN".into());
    app.notifications
        .create_notification(unknown)
        .await
        .unwrap();
    // So is the same report outside the window.
    let mut later = host_down("compute-01");
    later.generated_time.as_mut().unwrap().seconds += 181;
    app.notifications.create_notification(later).await.unwrap();
    let all = snapshot(&mut app).await;
    assert_eq!(all.notifications.len(), 3);
    app.stop().await;
}

async fn idempotency_keys_return_the_first_result(backend: Backend) {
    let Some(mut app) = spawn_app(backend).await else {
        return;
    };
    segment_with_hosts(&mut app, "rack-a", &["compute-01", "compute-02"]).await;
    let mut request = host_down("compute-01");
    request.idempotency_key = "agent-7:compute-01:1".into();
    let first = app
        .notifications
        .create_notification(request.clone())
        .await
        .unwrap()
        .into_inner();
    let again = app
        .notifications
        .create_notification(request.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.id, first.id);
    assert_eq!(snapshot(&mut app).await.notifications.len(), 1);
    // The same key for another report is an error, not a silent replay.
    let mut other = host_down("compute-02");
    other.idempotency_key = request.idempotency_key.clone();
    assert_status(
        app.notifications.create_notification(other).await,
        Code::AlreadyExists,
        &first.id,
    );
    app.stop().await;
}

/// A burst, as when a rack loses power: many reports at once, each sent
/// twice at the same moment, half of them with an idempotency key (an
/// agent retrying after a lost answer) and half without (two agents seeing
/// the same failure). Stored together or not, each report is kept once: a
/// keyed pair gets one notification twice, an unkeyed pair one
/// notification and one ALREADY_EXISTS naming it.
async fn reports_sent_together_are_kept_exactly_once(backend: Backend) {
    let Some(mut app) = spawn_app_with(backend, |s| s.limits.requests_per_second = 0.0).await
    else {
        return;
    };
    let hosts: Vec<String> = (1..=6).map(|i| format!("compute-{i:02}")).collect();
    let names: Vec<&str> = hosts.iter().map(String::as_str).collect();
    segment_with_hosts(&mut app, "rack-a", &names).await;
    let reports: Vec<pb::CreateNotificationRequest> = (0..120)
        .map(|i| pb::CreateNotificationRequest {
            r#type: pb::NotificationType::Vm as i32,
            hostname: hosts[i % hosts.len()].clone(),
            generated_time: Some(now()),
            payload: payload(&[
                ("instance_uuid", &format!("00000000-0000-4000-8000-{i:012}")),
                ("vir_domain_event", "STOPPED_FAILED"),
                ("event", "LIFECYCLE"),
            ]),
            idempotency_key: if i % 2 == 0 {
                format!("burst-{i}")
            } else {
                String::new()
            },
        })
        .collect();
    let sends = reports.iter().flat_map(|report| {
        [report.clone(), report.clone()].map(|request| {
            let mut client = app.notifications.clone();
            async move { client.create_notification(request).await }
        })
    });
    let answers = futures::future::join_all(sends).await;
    for (i, pair) in answers.chunks(2).enumerate() {
        let keyed = i % 2 == 0;
        match (&pair[0], &pair[1]) {
            (Ok(a), Ok(b)) if keyed => assert_eq!(a.get_ref().id, b.get_ref().id, "report {i}"),
            (Ok(stored), Err(refused)) | (Err(refused), Ok(stored)) if !keyed => {
                assert_eq!(
                    refused.code(),
                    Code::AlreadyExists,
                    "report {i}: {refused:?}"
                );
                assert!(
                    refused.message().contains(&stored.get_ref().id),
                    "report {i}: {:?} does not name {}",
                    refused.message(),
                    stored.get_ref().id
                );
            }
            other => panic!("report {i} (keyed: {keyed}): {other:?}"),
        }
    }
    let stored = snapshot(&mut app).await.notifications;
    assert_eq!(stored.len(), reports.len());
    let ids: std::collections::HashSet<&str> = stored.iter().map(|n| n.id.as_str()).collect();
    assert_eq!(ids.len(), reports.len(), "an id twice");
    app.stop().await;
}

async fn disabled_segments_store_ignored_notifications(backend: Backend) {
    let Some(mut app) = spawn_app(backend).await else {
        return;
    };
    let segment = segment_with_hosts(&mut app, "rack-a", &["compute-01"]).await;
    app.segments
        .update_segment(pb::UpdateSegmentRequest {
            id: segment.id.clone(),
            enabled: Some(false),
            ..Default::default()
        })
        .await
        .unwrap();
    let n = app
        .notifications
        .create_notification(host_down("compute-01"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(n.status, pb::NotificationStatus::Ignored as i32);
    assert!(n.message.contains("disabled"), "{}", n.message);
    // Ignored is finished: the segment can change again.
    app.segments
        .update_segment(pb::UpdateSegmentRequest {
            id: segment.id,
            enabled: Some(true),
            ..Default::default()
        })
        .await
        .unwrap();
    app.stop().await;
}

async fn unfinished_notifications_lock_their_segment_and_hosts(backend: Backend) {
    let Some(mut app) = spawn_app(backend).await else {
        return;
    };
    let segment = segment_with_hosts(&mut app, "rack-a", &["compute-01", "compute-02"]).await;
    let n = app
        .notifications
        .create_notification(host_down("compute-01"))
        .await
        .unwrap()
        .into_inner();
    let hosts = app
        .hosts
        .list_hosts(pb::ListHostsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .hosts;
    let other_host = hosts.iter().find(|h| h.name == "compute-02").unwrap();
    let before = snapshot(&mut app).await;
    assert_status(
        app.segments
            .update_segment(pb::UpdateSegmentRequest {
                id: segment.id.clone(),
                enabled: Some(false),
                ..Default::default()
            })
            .await,
        Code::FailedPrecondition,
        &n.id,
    );
    assert_status(
        app.segments
            .delete_segment(pb::DeleteSegmentRequest {
                id: segment.id.clone(),
            })
            .await,
        Code::FailedPrecondition,
        "unfinished",
    );
    assert_status(
        app.hosts
            .update_host(pb::UpdateHostRequest {
                id: other_host.id.clone(),
                reserved: Some(true),
                ..Default::default()
            })
            .await,
        Code::FailedPrecondition,
        "unfinished",
    );
    assert_status(
        app.hosts
            .delete_host(pb::DeleteHostRequest {
                id: other_host.id.clone(),
                segment_id: String::new(),
            })
            .await,
        Code::FailedPrecondition,
        "unfinished",
    );
    assert_eq!(snapshot(&mut app).await, before);
    // Maintenance is per host: the host with the unfinished notification
    // keeps its flag, the other host's changes.
    let this_host = hosts.iter().find(|h| h.name == "compute-01").unwrap();
    assert_status(
        app.hosts
            .update_host(pb::UpdateHostRequest {
                id: this_host.id.clone(),
                on_maintenance: Some(true),
                ..Default::default()
            })
            .await,
        Code::FailedPrecondition,
        &n.id,
    );
    let changed = app
        .hosts
        .update_host(pb::UpdateHostRequest {
            id: other_host.id.clone(),
            on_maintenance: Some(true),
            ..Default::default()
        })
        .await
        .expect("a maintenance change waits for the host's own notifications only")
        .into_inner();
    assert!(changed.on_maintenance);
    app.stop().await;
}

async fn list_newest_first_with_filters(backend: Backend) {
    let Some(mut app) = spawn_app(backend).await else {
        return;
    };
    segment_with_hosts(&mut app, "rack-a", &["c1", "c2", "c3"]).await;
    let mut ids = Vec::new();
    for host in ["c1", "c2", "c3"] {
        ids.push(
            app.notifications
                .create_notification(host_down(host))
                .await
                .unwrap()
                .into_inner()
                .id,
        );
    }
    let first = app
        .notifications
        .list_notifications(pb::ListNotificationsRequest {
            page_size: 2,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        first
            .notifications
            .iter()
            .map(|n| n.id.clone())
            .collect::<Vec<_>>(),
        vec![ids[2].clone(), ids[1].clone()]
    );
    let second = app
        .notifications
        .list_notifications(pb::ListNotificationsRequest {
            page_size: 2,
            page_token: first.next_page_token,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(second.notifications.len(), 1);
    assert_eq!(second.notifications[0].id, ids[0]);
    assert!(second.next_page_token.is_empty());

    let c2 = app
        .notifications
        .list_notifications(pb::ListNotificationsRequest {
            hostname: Some("c2".into()),
            status: Some(pb::NotificationStatus::New as i32),
            r#type: Some(pb::NotificationType::ComputeHost as i32),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(c2.notifications.len(), 1);
    assert_eq!(c2.notifications[0].id, ids[1]);
    let finished = app
        .notifications
        .list_notifications(pb::ListNotificationsRequest {
            status: Some(pb::NotificationStatus::Finished as i32),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(finished.notifications.is_empty());
    app.stop().await;
}
