//! What the bad-input properties found, kept as plain regression tests
//! (each failed before its fix; the properties now generate these inputs
//! too).

use instanceha_proto::v1 as pb;
use tonic::Code;

use crate::backends::Backend;
use crate::helpers::{host_down, segment_with_hosts, snapshot, spawn_app};
use crate::on_every_backend;

on_every_backend!(generated_times_at_the_edges_are_stored_or_refused);

/// A refusal that echoes a long bad value into `grpc-message` makes
/// trailers bigger than HTTP/2 header limits (16 KiB in tonic's client,
/// 8 KiB in gRPC's C core): the client sees RESOURCE_EXHAUSTED "h2
/// protocol error" (or INTERNAL), not INVALID_ARGUMENT naming the field.
/// Found by `every_public_request_gets_a_clear_answer_and_a_refusal_changes_nothing`
/// with a 70,000-character `notification_id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bad_values_are_invalid_arguments_naming_the_field() {
    let mut app = spawn_app(Backend::Sqlite).await.unwrap();
    segment_with_hosts(&mut app, "rack-a", &["compute-01"]).await;
    let before = snapshot(&mut app).await;
    // `grpc::convert::id` quotes the whole value: "id: \"hhh…\" is not a UUID".
    let huge = "h".repeat(20_000);
    let status = app
        .segments
        .get_segment(pb::GetSegmentRequest { id: huge.clone() })
        .await
        .expect_err("not a UUID");
    assert_eq!(
        (status.code(), status.message().get(..4)),
        (Code::InvalidArgument, Some("id: ")),
        "{:?} {:?}",
        status.code(),
        status.message().chars().take(120).collect::<String>()
    );
    // `domain::payload::check_key` quotes the whole key.
    let mut report = host_down("compute-01");
    report.payload.insert(huge, "x".to_owned());
    let status = app
        .notifications
        .create_notification(report)
        .await
        .expect_err("the key is too long");
    assert_eq!(
        (status.code(), status.message().get(..9)),
        (Code::InvalidArgument, Some("payload: ")),
        "{:?} {:?}",
        status.code(),
        status.message().chars().take(120).collect::<String>()
    );
    assert_eq!(snapshot(&mut app).await, before);
    app.stop().await;
}

/// A `generated_time` chrono accepts but the backend cannot store, or that
/// breaks intake, is refused as INVALID_ARGUMENT naming the field, or is
/// stored and read back as sent; never an internal error or a panic.
/// Found by `every_public_request_gets_a_clear_answer_and_a_refusal_changes_nothing`
/// (SQLite) and its `_on_postgres` / `_on_mysql` variants:
///
/// * every backend: within the duplicate window (180 s) of chrono's
///   earliest date (year -262143), `store::create_notification`'s
///   `new.generated_time - duplicate_window` overflows and panics in the
///   handler; the client sees CANCELLED "h2 protocol error";
/// * PostgreSQL: before 4713 BC, INTERNAL ("timestamp out of range");
/// * MariaDB: before 1970-01-01 or after 2038-01-19T03:14:07, INTERNAL
///   (the driver binds the time as a TIMESTAMP, which the server turns
///   into NULL: "Column 'generated_time' cannot be null").
async fn generated_times_at_the_edges_are_stored_or_refused(backend: Backend) {
    let Some(mut app) = spawn_app(backend).await else {
        return;
    };
    let min = chrono::DateTime::<chrono::Utc>::MIN_UTC.timestamp();
    let times = [
        ("chrono's minimum", min),
        ("a minute after chrono's minimum", min + 60),
        ("4714 BC", -210_898_425_600),
        ("1969-12-31T23:59:59", -1),
        ("2038-01-19T03:14:08", 2_147_483_648),
        ("10000-01-01", 253_402_300_800),
    ];
    let hosts: Vec<String> = (0..times.len())
        .map(|i| format!("compute-{i:02}"))
        .collect();
    let names: Vec<&str> = hosts.iter().map(String::as_str).collect();
    segment_with_hosts(&mut app, "rack-a", &names).await;
    let mut wrong = Vec::new();
    for ((what, seconds), host) in times.into_iter().zip(&hosts) {
        let before = snapshot(&mut app).await;
        let sent = prost_types::Timestamp { seconds, nanos: 0 };
        let mut report = host_down(host);
        report.generated_time = Some(sent);
        match app.notifications.create_notification(report).await {
            Ok(created) => {
                let read = app
                    .notifications
                    .get_notification(pb::GetNotificationRequest {
                        id: created.into_inner().id,
                    })
                    .await;
                match read {
                    Ok(n) if n.get_ref().generated_time == Some(sent) => {}
                    // Ahead by more than intake.max_clock_skew: taken at
                    // its received time, the sent time kept.
                    Ok(n) if n.get_ref().payload.contains_key("monitor_generated_time") => {}
                    other => wrong.push(format!("{what}: stored, then read as {other:?}")),
                }
            }
            Err(status)
                if status.code() == Code::InvalidArgument
                    && status.message().starts_with("generated_time: ") =>
            {
                if snapshot(&mut app).await != before {
                    wrong.push(format!("{what}: refused, but the database changed"));
                }
            }
            Err(status) => wrong.push(format!(
                "{what}: {:?} {:?}",
                status.code(),
                status.message()
            )),
        }
    }
    assert!(wrong.is_empty(), "{backend:?}:\n{}", wrong.join("\n"));
    app.stop().await;
}

/// Reports are duplicates when generated within the window *of* an earlier
/// one (`IntakeSettings::duplicate_window`), but intake only bounds the
/// earlier report's time from below (`generated_time >= new - window`):
/// one report stamped in the future by an agent with a wrong clock makes
/// every later report for that host, type and payload a "duplicate",
/// before and after it is recovered. Found while checking the edges of
/// `generated_time` for the property tests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_from_the_future_does_not_swallow_later_ones() {
    let mut app = spawn_app(Backend::Sqlite).await.unwrap();
    segment_with_hosts(&mut app, "rack-a", &["compute-01"]).await;
    let mut future = host_down("compute-01");
    future.generated_time = Some(prost_types::Timestamp {
        seconds: crate::helpers::now().seconds + 10 * 365 * 86_400,
        nanos: 0,
    });
    // Refusing the future report is one fix; not counting it is another.
    let _ = app.notifications.create_notification(future).await;
    let now = app
        .notifications
        .create_notification(host_down("compute-01"))
        .await;
    assert!(
        now.is_ok(),
        "a report of now is a duplicate of one stamped ten years ahead: {:?}",
        now.map_err(|s| s.message().to_owned())
    );
    app.stop().await;
}
