//! Every public request type, generated arbitrary and mostly malformed
//! (random strings, bad UUIDs, unknown enum values, oversized strings and
//! payload maps, bad page tokens and sizes, out-of-range timestamps), sent
//! through the real gRPC client to one API on SQLite (and on PostgreSQL and
//! MariaDB when their test URLs are set). Each answer is OK or
//! a refusal with a code a client can act on (INVALID_ARGUMENT naming a
//! field of the request, NOT_FOUND, ALREADY_EXISTS, FAILED_PRECONDITION,
//! OUT_OF_RANGE), never INTERNAL or UNKNOWN; a refused request, and any
//! read, leaves every row of the database as it was; and a shape error is
//! exactly what `grpc::decode_request` says for the encoded message.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use instanceha_api::auth::Operation;
use instanceha_api::domain::{
    NotificationId, PlannedInstance, RunEvent, SequencedEvent, VMoveType,
};
use instanceha_api::grpc::decode_request;
use instanceha_proto::v1 as pb;
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::ValueTree as _;
use prost::Message as _;
use tonic::Code;

use super::{RawDb, diff, runner, runtime};
use crate::backends::Backend;
use crate::helpers::{TestApp, host_down, host_request, now, segment_request, spawn_app_with};

/// One request of any public RPC.
#[derive(Clone, Debug)]
enum Call {
    CreateSegment(pb::CreateSegmentRequest),
    GetSegment(pb::GetSegmentRequest),
    ListSegments(pb::ListSegmentsRequest),
    UpdateSegment(pb::UpdateSegmentRequest),
    DeleteSegment(pb::DeleteSegmentRequest),
    CreateHost(pb::CreateHostRequest),
    GetHost(pb::GetHostRequest),
    ListHosts(pb::ListHostsRequest),
    UpdateHost(pb::UpdateHostRequest),
    DeleteHost(pb::DeleteHostRequest),
    RestoreHost(pb::RestoreHostRequest),
    CreateNotification(pb::CreateNotificationRequest),
    GetNotification(pb::GetNotificationRequest),
    ListNotifications(pb::ListNotificationsRequest),
    WatchNotification(pb::WatchNotificationRequest),
    RetryNotification(pb::RetryNotificationRequest),
    GetVmove(pb::GetVmoveRequest),
    ListVmoves(pb::ListVmovesRequest),
}

impl Call {
    fn rpc(&self) -> Operation {
        match self {
            Self::CreateSegment(_) => Operation::CreateSegment,
            Self::GetSegment(_) => Operation::GetSegment,
            Self::ListSegments(_) => Operation::ListSegments,
            Self::UpdateSegment(_) => Operation::UpdateSegment,
            Self::DeleteSegment(_) => Operation::DeleteSegment,
            Self::CreateHost(_) => Operation::CreateHost,
            Self::GetHost(_) => Operation::GetHost,
            Self::ListHosts(_) => Operation::ListHosts,
            Self::UpdateHost(_) => Operation::UpdateHost,
            Self::DeleteHost(_) => Operation::DeleteHost,
            Self::RestoreHost(_) => Operation::RestoreHost,
            Self::CreateNotification(_) => Operation::CreateNotification,
            Self::GetNotification(_) => Operation::GetNotification,
            Self::ListNotifications(_) => Operation::ListNotifications,
            Self::WatchNotification(_) => Operation::WatchNotification,
            Self::RetryNotification(_) => Operation::RetryNotification,
            Self::GetVmove(_) => Operation::GetVmove,
            Self::ListVmoves(_) => Operation::ListVmoves,
        }
    }

    /// The protobuf encoding the client sends.
    fn encoded(&self) -> Vec<u8> {
        match self {
            Self::CreateSegment(r) => r.encode_to_vec(),
            Self::GetSegment(r) => r.encode_to_vec(),
            Self::ListSegments(r) => r.encode_to_vec(),
            Self::UpdateSegment(r) => r.encode_to_vec(),
            Self::DeleteSegment(r) => r.encode_to_vec(),
            Self::CreateHost(r) => r.encode_to_vec(),
            Self::GetHost(r) => r.encode_to_vec(),
            Self::ListHosts(r) => r.encode_to_vec(),
            Self::UpdateHost(r) => r.encode_to_vec(),
            Self::DeleteHost(r) => r.encode_to_vec(),
            Self::RestoreHost(r) => r.encode_to_vec(),
            Self::CreateNotification(r) => r.encode_to_vec(),
            Self::GetNotification(r) => r.encode_to_vec(),
            Self::ListNotifications(r) => r.encode_to_vec(),
            Self::WatchNotification(r) => r.encode_to_vec(),
            Self::RetryNotification(r) => r.encode_to_vec(),
            Self::GetVmove(r) => r.encode_to_vec(),
            Self::ListVmoves(r) => r.encode_to_vec(),
        }
    }

    /// Reads never change the database, even when they succeed.
    fn reads(&self) -> bool {
        matches!(
            self.rpc(),
            Operation::GetSegment
                | Operation::ListSegments
                | Operation::GetHost
                | Operation::ListHosts
                | Operation::GetNotification
                | Operation::ListNotifications
                | Operation::WatchNotification
                | Operation::GetVmove
                | Operation::ListVmoves
        )
    }

    /// The fields an INVALID_ARGUMENT may name (`update`: an update that
    /// sets nothing).
    fn fields(&self) -> &'static [&'static str] {
        match self.rpc() {
            Operation::CreateSegment => &["name", "description", "service_type", "recovery_method"],
            Operation::UpdateSegment => &[
                "id",
                "name",
                "description",
                "service_type",
                "recovery_method",
                "update",
            ],
            Operation::GetSegment | Operation::DeleteSegment => &["id"],
            // Not a gRPC method: `rpc()` never names it.
            Operation::ListVersions => &[],
            Operation::ListSegments => &[
                "page_size",
                "page_token",
                "recovery_method",
                "service_type",
                "name",
            ],
            Operation::CreateHost => &["segment_id", "name", "type", "control_attributes"],
            Operation::UpdateHost => &[
                "id",
                "segment_id",
                "name",
                "type",
                "control_attributes",
                "update",
            ],
            Operation::GetHost | Operation::DeleteHost | Operation::RestoreHost => {
                &["id", "segment_id"]
            }
            Operation::ListHosts => &["page_size", "page_token", "segment_id", "type", "name"],
            Operation::CreateNotification => &[
                "type",
                "hostname",
                "generated_time",
                "payload",
                "idempotency_key",
            ],
            Operation::GetNotification
            | Operation::WatchNotification
            | Operation::RetryNotification => &["id"],
            Operation::ListNotifications => &[
                "page_size",
                "page_token",
                "status",
                "type",
                "hostname",
                "source_host_id",
                "segment_id",
                "generated_since",
            ],
            Operation::GetVmove => &["notification_id", "id"],
            Operation::ListVmoves => &[
                "notification_id",
                "page_size",
                "page_token",
                "status",
                "type",
            ],
        }
    }

    fn names_own_field(&self, message: &str) -> bool {
        let Some((field, reason)) = message.split_once(": ") else {
            return false;
        };
        let payload_key =
            self.rpc() == Operation::CreateNotification && field.starts_with("payload.");
        !reason.trim().is_empty() && (self.fields().contains(&field) || payload_key)
    }

    /// Sends the request; for a watch, also waits for its first update.
    async fn send(self, app: &TestApp) -> Result<(), tonic::Status> {
        match self {
            Self::CreateSegment(r) => app.segments.clone().create_segment(r).await.map(drop),
            Self::GetSegment(r) => app.segments.clone().get_segment(r).await.map(drop),
            Self::ListSegments(r) => app.segments.clone().list_segments(r).await.map(drop),
            Self::UpdateSegment(r) => app.segments.clone().update_segment(r).await.map(drop),
            Self::DeleteSegment(r) => app.segments.clone().delete_segment(r).await.map(drop),
            Self::CreateHost(r) => app.hosts.clone().create_host(r).await.map(drop),
            Self::GetHost(r) => app.hosts.clone().get_host(r).await.map(drop),
            Self::ListHosts(r) => app.hosts.clone().list_hosts(r).await.map(drop),
            Self::UpdateHost(r) => app.hosts.clone().update_host(r).await.map(drop),
            Self::DeleteHost(r) => app.hosts.clone().delete_host(r).await.map(drop),
            Self::RestoreHost(r) => app.hosts.clone().restore_host(r).await.map(drop),
            Self::CreateNotification(r) => app
                .notifications
                .clone()
                .create_notification(r)
                .await
                .map(drop),
            Self::GetNotification(r) => app
                .notifications
                .clone()
                .get_notification(r)
                .await
                .map(drop),
            Self::ListNotifications(r) => app
                .notifications
                .clone()
                .list_notifications(r)
                .await
                .map(drop),
            Self::WatchNotification(r) => {
                let mut updates = app
                    .notifications
                    .clone()
                    .watch_notification(r)
                    .await?
                    .into_inner();
                match tokio::time::timeout(Duration::from_secs(10), updates.message()).await {
                    Ok(Ok(Some(_))) => Ok(()),
                    Ok(Ok(None)) => {
                        Err(tonic::Status::unknown("the watch ended without a snapshot"))
                    }
                    Ok(Err(status)) => Err(status),
                    Err(_) => Err(tonic::Status::unknown("no snapshot within 10 s")),
                }
            }
            Self::RetryNotification(r) => app
                .notifications
                .clone()
                .retry_notification(r)
                .await
                .map(drop),
            Self::GetVmove(r) => app.vmoves.clone().get_vmove(r).await.map(drop),
            Self::ListVmoves(r) => app.vmoves.clone().list_vmoves(r).await.map(drop),
        }
    }
}

/// What exists when the cases start: ids and names to aim at.
#[derive(Clone, Debug)]
struct Known {
    segments: Vec<String>,
    segment_names: Vec<String>,
    hosts: Vec<String>,
    host_names: Vec<String>,
    notifications: Vec<String>,
    vmoves: Vec<String>,
}

// ---- strategies -----------------------------------------------------------------

mod strategies;

use strategies::*;

fn call(k: &Known) -> BoxedStrategy<Call> {
    let k = k.clone();
    let description = proptest::option::of(prop_oneof![3 => "[a-z ]{0,20}", 2 => junk()]);
    let create_segment = (
        name(&k.segment_names),
        description.clone(),
        prop_oneof![4 => Just("COMPUTE".to_owned()), 2 => junk()],
        enum_value(4),
        any::<Option<bool>>(),
    )
        .prop_map(
            |(name, description, service_type, recovery_method, enabled)| {
                Call::CreateSegment(pb::CreateSegmentRequest {
                    name,
                    description,
                    service_type,
                    recovery_method,
                    enabled,
                    return_to_service: None,
                })
            },
        );
    let update_segment = (
        id(&k.segments),
        proptest::option::of(name(&k.segment_names)),
        proptest::option::of(description.clone()).prop_map(Option::flatten),
        proptest::option::of(prop_oneof![Just("COMPUTE".to_owned()), junk()]),
        proptest::option::of(enum_value(4)),
        any::<Option<bool>>(),
    )
        .prop_map(
            |(id, name, description, service_type, recovery_method, enabled)| {
                Call::UpdateSegment(pb::UpdateSegmentRequest {
                    id,
                    name,
                    description,
                    service_type,
                    recovery_method,
                    enabled,
                    return_to_service: None,
                })
            },
        );
    let list_segments = (
        page_size(),
        page_token(),
        proptest::option::of(enum_value(4)),
        proptest::option::of(prop_oneof![Just("COMPUTE".to_owned()), junk()]),
        any::<Option<bool>>(),
        proptest::option::of(name(&k.segment_names)),
    )
        .prop_map(
            |(page_size, page_token, recovery_method, service_type, enabled, name)| {
                Call::ListSegments(pb::ListSegmentsRequest {
                    page_size,
                    page_token,
                    recovery_method,
                    service_type,
                    enabled,
                    name,
                })
            },
        );
    let host_type = || prop_oneof![4 => Just("COMPUTE".to_owned()), 2 => junk()];
    let control = || {
        prop_oneof![
            4 => Just("SSH".to_owned()),
            2 => junk(),
            1 => (65_534usize..=65_536).prop_map(|n| "c".repeat(n)),
        ]
    };
    let create_host = (
        id(&k.segments),
        name(&k.host_names),
        host_type(),
        control(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(segment_id, name, r#type, control_attributes, reserved, on_maintenance)| {
                Call::CreateHost(pb::CreateHostRequest {
                    segment_id,
                    name,
                    r#type,
                    control_attributes,
                    reserved,
                    on_maintenance,
                })
            },
        );
    let update_host = (
        id(&k.hosts),
        optional_id(&k.segments),
        proptest::option::of(name(&k.host_names)),
        proptest::option::of(host_type()),
        proptest::option::of(control()),
        any::<Option<bool>>(),
        any::<Option<bool>>(),
    )
        .prop_map(
            |(id, segment_id, name, r#type, control_attributes, reserved, on_maintenance)| {
                Call::UpdateHost(pb::UpdateHostRequest {
                    id,
                    segment_id,
                    name,
                    r#type,
                    control_attributes,
                    reserved,
                    on_maintenance,
                })
            },
        );
    let list_hosts = (
        page_size(),
        page_token(),
        proptest::option::of(id(&k.segments)),
        proptest::option::of(host_type()),
        any::<Option<bool>>(),
        any::<Option<bool>>(),
        proptest::option::of(name(&k.host_names)),
    )
        .prop_map(
            |(page_size, page_token, segment_id, r#type, reserved, on_maintenance, name)| {
                Call::ListHosts(pb::ListHostsRequest {
                    page_size,
                    page_token,
                    segment_id,
                    r#type,
                    reserved,
                    on_maintenance,
                    name,
                })
            },
        );
    let kind_and_payload = prop_oneof![
        4 => (1..=3i32).prop_flat_map(|kind| (Just(kind), payload(kind))),
        1 => (enum_value(3), (0..=4i32).prop_flat_map(payload)),
    ];
    let create_notification = (
        kind_and_payload,
        prop_oneof![8 => select(k.host_names.clone()), 1 => "[a-z0-9-]{1,12}", 2 => junk()],
        timestamp(),
        prop_oneof![
            6 => Just(String::new()),
            2 => "key-[0-3]",
            1 => (255usize..=256).prop_map(|n| "k".repeat(n)),
            1 => junk(),
        ],
    )
        .prop_map(
            |((r#type, payload), hostname, generated_time, idempotency_key)| {
                Call::CreateNotification(pb::CreateNotificationRequest {
                    r#type,
                    hostname,
                    generated_time,
                    payload,
                    idempotency_key,
                })
            },
        );
    let list_notifications = (
        (page_size(), page_token()),
        proptest::option::of(enum_value(6)),
        proptest::option::of(enum_value(3)),
        proptest::option::of(name(&k.host_names)),
        proptest::option::of(id(&k.hosts)),
        proptest::option::of(id(&k.segments)),
        prop_oneof![3 => Just(None), 1 => timestamp()],
    )
        .prop_map(
            |(
                (page_size, page_token),
                status,
                r#type,
                hostname,
                source_host_id,
                segment_id,
                generated_since,
            )| {
                Call::ListNotifications(pb::ListNotificationsRequest {
                    page_size,
                    page_token,
                    status,
                    r#type,
                    hostname,
                    source_host_id,
                    segment_id,
                    generated_since,
                })
            },
        );
    // Weighted towards the requests with the most rules behind them.
    prop_oneof![
        2 => create_segment,
        1 => id(&k.segments).prop_map(|id| Call::GetSegment(pb::GetSegmentRequest { id })),
        1 => list_segments,
        2 => update_segment,
        1 => id(&k.segments).prop_map(|id| Call::DeleteSegment(pb::DeleteSegmentRequest { id })),
        2 => create_host,
        1 => (id(&k.hosts), optional_id(&k.segments))
            .prop_map(|(id, segment_id)| Call::GetHost(pb::GetHostRequest { id, segment_id })),
        1 => list_hosts,
        2 => update_host,
        1 => (id(&k.hosts), optional_id(&k.segments)).prop_map(|(id, segment_id)| {
            Call::DeleteHost(pb::DeleteHostRequest { id, segment_id })
        }),
        1 => (id(&k.hosts), optional_id(&k.segments)).prop_map(|(id, segment_id)| {
            Call::RestoreHost(pb::RestoreHostRequest { id, segment_id })
        }),
        4 => create_notification,
        1 => id(&k.notifications)
            .prop_map(|id| Call::GetNotification(pb::GetNotificationRequest { id })),
        1 => list_notifications,
        1 => id(&k.notifications)
            .prop_map(|id| Call::WatchNotification(pb::WatchNotificationRequest { id })),
        1 => id(&k.notifications)
            .prop_map(|id| Call::RetryNotification(pb::RetryNotificationRequest { id })),
        1 => (id(&k.notifications), id(&k.vmoves)).prop_map(|(notification_id, id)| {
            Call::GetVmove(pb::GetVmoveRequest {
                notification_id,
                id,
            })
        }),
        1 => list_vmoves(&k),
    ]
    .boxed()
}

/// ListVmoves: a known or junk notification, paging and filters.
fn list_vmoves(k: &Known) -> BoxedStrategy<Call> {
    (
        id(&k.notifications),
        page_size(),
        page_token(),
        proptest::option::of(enum_value(5)),
        proptest::option::of(enum_value(4)),
    )
        .prop_map(|(notification_id, page_size, page_token, status, r#type)| {
            Call::ListVmoves(pb::ListVmovesRequest {
                notification_id,
                page_size,
                page_token,
                status,
                r#type,
            })
        })
        .boxed()
}

// ---- the fixture ----------------------------------------------------------------

/// Segments `rack-a` (a host on maintenance, a reserved host, and a running
/// notification with vmoves, so it is locked), `rack-b` (disabled, with an
/// ignored notification) and `rack-c` (empty).
async fn fixture(app: &mut TestApp) -> Known {
    let mut segments = Vec::new();
    for (name, enabled) in [("rack-a", true), ("rack-b", false), ("rack-c", true)] {
        let segment = app
            .segments
            .create_segment(pb::CreateSegmentRequest {
                enabled: Some(enabled),
                ..segment_request(name)
            })
            .await
            .expect("create segment")
            .into_inner();
        segments.push(segment);
    }
    let mut hosts = Vec::new();
    for (segment, name, maintenance, reserved) in [
        (0, "compute-01", false, false),
        (0, "compute-02", true, false),
        (0, "compute-03", false, true),
        (1, "compute-04", false, false),
    ] {
        let host = app
            .hosts
            .create_host(pb::CreateHostRequest {
                on_maintenance: maintenance,
                reserved,
                ..host_request(&segments[segment].id, name)
            })
            .await
            .expect("create host")
            .into_inner();
        hosts.push(host);
    }
    let running = app
        .notifications
        .create_notification(host_down("compute-01"))
        .await
        .expect("create notification")
        .into_inner();
    let ignored = app
        .notifications
        .create_notification(host_down("compute-04"))
        .await
        .expect("create notification")
        .into_inner();
    // Run the first one by hand: two vmoves, one of them finished.
    let store = app.api.store();
    let id: NotificationId = running.id.parse().unwrap();
    let (_, run) = store
        .claim(
            id,
            "props",
            &instanceha_api::lifecycle::RunPolicy {
                max_attempts: 3,
                ..instanceha_api::dispatch::DispatchSettings::default().run_policy()
            },
        )
        .await
        .unwrap()
        .expect("claimable");
    let at = chrono::Utc::now();
    let planned = |i: &str| PlannedInstance {
        instance_id: i.into(),
        instance_name: format!("vm-{i}"),
        source_host: "compute-01".to_owned(),
        vmove_type: VMoveType::Evacuation,
        prior_state: None,
    };
    let events = vec![
        RunEvent::Plan(vec![planned("i-1"), planned("i-2")]),
        RunEvent::InstanceStarted {
            instance_id: "i-1".into(),
            at,
        },
        RunEvent::InstanceFinished {
            instance_id: "i-1".into(),
            result: instanceha_api::domain::InstanceResult::Succeeded {
                note: None,
                dest_host: Some("compute-03".to_owned()),
            },
            start: Some(at),
            end: at,
        },
    ];
    let events: Vec<SequencedEvent> = events
        .into_iter()
        .zip(1..)
        .map(|(event, sequence)| SequencedEvent { sequence, event })
        .collect();
    let applied = store
        .apply_run_events(id, &run.run_id, &events, Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(applied.vmoves.len(), 2);
    Known {
        segments: segments.iter().map(|s| s.id.clone()).collect(),
        segment_names: segments.iter().map(|s| s.name.clone()).collect(),
        hosts: hosts.iter().map(|h| h.id.clone()).collect(),
        host_names: hosts.iter().map(|h| h.name.clone()).collect(),
        notifications: vec![running.id, ignored.id],
        vmoves: applied.vmoves.iter().map(|v| v.id.to_string()).collect(),
    }
}

// ---- the property -------------------------------------------------------------

const ALLOWED: [Code; 5] = [
    Code::InvalidArgument,
    Code::NotFound,
    Code::AlreadyExists,
    Code::FailedPrecondition,
    Code::ResourceExhausted,
];

#[test]
fn every_public_request_gets_a_clear_answer_and_a_refusal_changes_nothing() {
    check_requests(Backend::Sqlite, 512);
}

pub(super) fn check_requests(backend: Backend, cases: u32) {
    let rt = runtime();
    let mut url = String::new();
    let Some(mut app) = rt.block_on(spawn_app_with(backend, |settings| {
        url = settings.database.url.clone();
        // Thousands of calls in a few seconds: no rate limit here.
        settings.limits.requests_per_second = 0.0;
    })) else {
        return;
    };
    let known = rt.block_on(fixture(&mut app));
    let db = rt.block_on(RawDb::open(&url));
    // (RPC, code, the field an INVALID_ARGUMENT named): how often.
    let answered: RefCell<HashMap<(Operation, Code, String), u32>> = RefCell::default();

    let check = |call: Call| -> Result<(), TestCaseError> {
        let rpc = call.rpc();
        let decoded = decode_request(rpc, &call.encoded());
        let (before, answer, after) = rt.block_on(async {
            let before = db.dump().await;
            let answer = call.clone().send(&app).await;
            (before, answer, db.dump().await)
        });
        let code = answer.as_ref().err().map_or(Code::Ok, tonic::Status::code);
        let field = match &answer {
            Err(s) if s.code() == Code::InvalidArgument => s
                .message()
                .split(": ")
                .next()
                .unwrap_or_default()
                .to_owned(),
            _ => String::new(),
        };
        *answered.borrow_mut().entry((rpc, code, field)).or_default() += 1;
        if let Err(status) = &answer {
            prop_assert!(
                ALLOWED.contains(&status.code()),
                "{rpc:?} answered {:?}: {:?}",
                status.code(),
                status.message()
            );
            if status.code() == Code::InvalidArgument {
                prop_assert!(
                    call.names_own_field(status.message()),
                    "{rpc:?}: INVALID_ARGUMENT does not name a field of the request: {:?}",
                    status.message()
                );
            }
        }
        if answer.is_err() || call.reads() {
            prop_assert!(
                before == after,
                "{rpc:?} answered {code:?} and changed the database:\n{}",
                diff(&before, &after)
            );
        }
        // A shape error is the handler's, and `decode_request` says it.
        if let Err(shape) = decoded {
            prop_assert_eq!(
                answer.as_ref().map_err(|s| (s.code(), s.message())).err(),
                Some((shape.code(), shape.message())),
                "{:?}: the handler and decode_request disagree",
                rpc
            );
        }
        Ok(())
    };
    let strategy = call(&known);
    let mut runner = runner(cases);
    let mut result = runner.run(&strategy, check).map_err(|e| e.to_string());
    // Every RPC is exercised: one the random cases happened to miss (each
    // has at least 1 in 24 of the weight: missed in 192 cases about once in
    // 300 runs) is drawn until it comes, and checked alike.
    for rpc in Operation::grpc() {
        if result.is_err() || answered.borrow().keys().any(|(r, _, _)| *r == rpc) {
            continue;
        }
        let drawn = (0..100_000)
            .map(|_| strategy.new_tree(&mut runner).expect("a value").current())
            .find(|call| call.rpc() == rpc)
            .unwrap_or_else(|| panic!("{rpc:?} never generated"));
        result = check(drawn.clone())
            .map_err(|e| format!("{e}\nfailing input (drawn for {rpc:?}, not shrunk): {drawn:?}"));
    }
    let answered = answered.into_inner();
    let mut summary: Vec<_> = answered.iter().collect();
    summary
        .sort_by_key(|((rpc, code, field), _)| (format!("{rpc:?}"), *code as i32, field.clone()));
    eprintln!("{backend:?}: answers by RPC, code and field: {summary:?}");
    if let Err(failure) = result {
        panic!("{failure}");
    }
    for rpc in Operation::grpc() {
        assert!(
            answered.keys().any(|(r, _, _)| *r == rpc),
            "{rpc:?} never exercised"
        );
    }
    rt.block_on(app.stop());
}
