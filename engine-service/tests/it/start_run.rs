//! The `StartRun` the API sends for a compute host's failure (a fenced host
//! monitor's STOPPED report, auto recovery), for the tests that drive the
//! engine without an API.

use instanceha_engine::recovery::{InstanceRef, NotificationType, RunKind, StartRun};
use instanceha_engine::workflow::targets::RecoveryMethod;

/// Run `attempt`, of `kind`, of `host`'s failure, about `instances` (none:
/// the engine plans them).
pub fn host_failure(
    host: &str,
    kind: RunKind,
    attempt: u32,
    instances: Vec<InstanceRef>,
) -> StartRun {
    StartRun {
        run_id: format!("{host}-{attempt}").into(),
        attempt,
        run_kind: kind,
        notification_id: format!("{host}-failure"),
        notification_type: NotificationType::ComputeHost,
        hostname: host.to_owned(),
        payload: instanceha_testkit::cloud::fenced_host_payload(),
        generated_time: Some(chrono::Utc::now()),
        segment_id: "segment-id".to_owned(),
        segment_name: "segment".to_owned(),
        recovery_method: RecoveryMethod::Auto,
        service_type: "COMPUTE".to_owned(),
        reserved_hosts: Vec::new(),
        instances,
        return_to_service: false,
    }
}
