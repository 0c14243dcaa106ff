//! The API's metrics, recorded through the global OpenTelemetry meter
//! (exported over OTLP and served for Prometheus by the binary; a no-op
//! where none is installed): notifications by type and final status,
//! vmoves by status, recovery durations, the dispatch streams, the
//! instance locks notifications left held when they ended, and the reports
//! the intake stored, replayed, refused or failed to store.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, Histogram, ObservableGauge, UpDownCounter};
use tokio::time::Instant;

use crate::domain::{Notification, VMove};

struct Instruments {
    notifications: Counter<u64>,
    notification_duration: Histogram<f64>,
    vmoves: Counter<u64>,
    vmove_duration: Histogram<f64>,
    streams_open: UpDownCounter<i64>,
    /// Kept so that its callback stays registered.
    _oldest_stream: ObservableGauge<f64>,
    runs: Counter<u64>,
    locks_left: Counter<u64>,
    locks_held: Gauge<u64>,
    hosts_held: Gauge<u64>,
    holds: Counter<u64>,
    reports: Counter<u64>,
}

const SECONDS: [f64; 14] = [
    1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 300.0, 600.0, 900.0, 1800.0, 3600.0,
];

fn instruments() -> &'static Instruments {
    static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
    INSTRUMENTS.get_or_init(|| {
        let meter = opentelemetry::global::meter("instanceha-api");
        Instruments {
            notifications: meter
                .u64_counter("instanceha_notifications")
                .with_description("Notifications that reached a final status, by type and status")
                .build(),
            notification_duration: meter
                .f64_histogram("instanceha_notification_recovery_duration_seconds")
                .with_description("From a notification's creation to its final status")
                .with_unit("s")
                .with_boundaries(SECONDS.to_vec())
                .build(),
            vmoves: meter
                .u64_counter("instanceha_vmoves")
                .with_description(
                    "Instance recoveries that reached a final status, by type and status",
                )
                .build(),
            vmove_duration: meter
                .f64_histogram("instanceha_instance_recovery_duration_seconds")
                .with_description("From an instance recovery's start to its end")
                .with_unit("s")
                .with_boundaries(SECONDS.to_vec())
                .build(),
            streams_open: meter
                .i64_up_down_counter("instanceha_dispatch_streams_open")
                .with_description("Recover streams to the engine open right now")
                .build(),
            _oldest_stream: meter
                .f64_observable_gauge("instanceha_dispatch_oldest_stream_seconds")
                .with_description(
                    "How long the oldest Recover stream this replica has open has been open (0: none): a run going on for longer than expected",
                )
                .with_callback(|gauge| gauge.observe(oldest_stream().as_secs_f64(), &[]))
                .build(),
            runs: meter
                .u64_counter("instanceha_dispatch_runs")
                .with_description(
                    "Recovery runs, by how they ended (done, lost, engine_unreachable)",
                )
                .build(),
            locks_left: meter
                .u64_counter("instanceha_locks_left")
                .with_description(
                    "Instance locks a notification still held when it ended (released later, as soon as Nova answers)",
                )
                .build(),
            locks_held: meter
                .u64_gauge("instanceha_locks_held")
                .with_description("Instance locks ended notifications hold right now")
                .build(),
            hosts_held: meter
                .u64_gauge("instanceha_hosts_held")
                .with_description(
                    "Hosts held out of service for flapping (on maintenance until an operator clears it)",
                )
                .build(),
            holds: meter
                .u64_counter("instanceha_host_holds")
                .with_description("Times the flapping guard held a host out of service")
                .build(),
            reports: meter
                .u64_counter("instanceha_reports")
                .with_description(
                    "Failure reports the intake answered, by type and outcome (stored, replayed, refused by a rule, failed: not stored)",
                )
                .build(),
        }
    })
}

/// Records a notification that has just reached a final status.
pub fn notification_resolved(notification: &Notification) {
    if !notification.status().is_terminal() {
        return;
    }
    let i = instruments();
    i.notifications.add(
        1,
        &[
            KeyValue::new("type", notification.notification_type.as_str()),
            KeyValue::new("status", notification.status().as_str()),
        ],
    );
    let seconds = (notification.updated_at - notification.created_at)
        .to_std()
        .unwrap_or_default()
        .as_secs_f64();
    i.notification_duration.record(
        seconds,
        &[KeyValue::new(
            "type",
            notification.notification_type.as_str(),
        )],
    );
}

/// Records a vmove that has just reached a final status.
pub fn vmove_resolved(vmove: &VMove) {
    if !vmove.status().is_resolved() {
        return;
    }
    let i = instruments();
    let labels = [
        KeyValue::new("type", vmove.vmove_type.as_str()),
        KeyValue::new("status", vmove.status().as_str()),
    ];
    i.vmoves.add(1, &labels);
    if let (Some(start), Some(end)) = (vmove.record.start_time(), vmove.record.end_time()) {
        let seconds = (end - start).to_std().unwrap_or_default().as_secs_f64();
        i.vmove_duration.record(seconds, &labels);
    }
}

/// When each Recover stream open now was opened, by a number.
fn open_streams() -> &'static Mutex<BTreeMap<u64, Instant>> {
    static OPEN: OnceLock<Mutex<BTreeMap<u64, Instant>>> = OnceLock::new();
    OPEN.get_or_init(Mutex::default)
}

/// The age of the oldest stream open now (zero when none is).
fn oldest_stream() -> std::time::Duration {
    let open = open_streams().lock().unwrap_or_else(|e| e.into_inner());
    oldest(open.values().copied(), Instant::now())
}

/// How long before `now` the earliest of `opened` was (zero for none).
fn oldest(opened: impl Iterator<Item = Instant>, now: Instant) -> std::time::Duration {
    opened
        .min()
        .map(|at| now.saturating_duration_since(at))
        .unwrap_or_default()
}

/// A Recover stream open: counted, and its age watched, until dropped
/// (whichever way the run ends).
#[derive(Debug)]
pub struct OpenStream {
    number: u64,
}

impl OpenStream {
    pub fn open() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let number = NEXT.fetch_add(1, Ordering::Relaxed);
        open_streams()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(number, Instant::now());
        instruments().streams_open.add(1, &[]);
        Self { number }
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        open_streams()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.number);
        instruments().streams_open.add(-1, &[]);
    }
}

/// A run ended: `done`, `lost` or `engine_unreachable`.
pub fn run_ended(how: &'static str) {
    instruments().runs.add(1, &[KeyValue::new("end", how)]);
}

/// A notification ended still holding `count` instance locks.
pub fn locks_left(count: usize) {
    if count > 0 {
        instruments().locks_left.add(count as u64, &[]);
    }
}

/// Ended notifications hold `count` instance locks now.
pub fn locks_held(count: u64) {
    instruments().locks_held.record(count, &[]);
}

/// `count` hosts are held out of service for flapping right now.
pub fn hosts_held(count: u64) {
    instruments().hosts_held.record(count, &[]);
}

/// The flapping guard held a host.
pub fn host_held() {
    instruments().holds.add(1, &[]);
}

/// How the intake answered a report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportOutcome {
    /// A new notification.
    Stored,
    /// The answer of an earlier report with the same key.
    Replayed,
    /// Refused by an intake rule (a duplicate, a host on maintenance...).
    Refused,
    /// Not stored: the database failed or the intake is shutting down.
    Failed,
}

impl ReportOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stored => "stored",
            Self::Replayed => "replayed",
            Self::Refused => "refused",
            Self::Failed => "failed",
        }
    }
}

/// The intake answered a report of `kind` so.
pub fn report(kind: &'static str, outcome: ReportOutcome) {
    instruments().reports.add(
        1,
        &[
            KeyValue::new("type", kind),
            KeyValue::new("outcome", outcome.as_str()),
        ],
    );
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_oldest_open_run_is_the_earliest_opened() {
        let now = Instant::now() + Duration::from_secs(3600);
        let opened = [
            now - Duration::from_secs(90),
            now - Duration::from_secs(1900),
            now - Duration::from_secs(5),
        ];
        assert_eq!(oldest(opened.into_iter(), now), Duration::from_secs(1900));
        assert_eq!(oldest(std::iter::empty(), now), Duration::ZERO);
    }

    #[test]
    fn a_stream_is_watched_until_it_closes() {
        let open = OpenStream::open();
        let number = open.number;
        assert!(open_streams().lock().unwrap().contains_key(&number));
        drop(open);
        assert!(!open_streams().lock().unwrap().contains_key(&number));
    }
}
