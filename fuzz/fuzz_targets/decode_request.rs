//! Decodes arbitrary bytes as the request of a public RPC and converts it
//! to domain types exactly as the handler does
//! (`instanceha_api::grpc::decode_request`), then runs the service layer's
//! validation on what converted. The first byte picks the RPC.
//!
//! Checked: nothing panics; bytes that are not the RPC's protobuf message
//! get INTERNAL (what tonic answers) and only those; every other refusal is
//! INVALID_ARGUMENT naming a field of the request as `field: reason`.

#![no_main]

use instanceha_api::domain::InvalidField;
use instanceha_api::auth::Operation;
use instanceha_api::grpc::{DomainRequest, decode_request};
use instanceha_proto::v1 as pb;
use libfuzzer_sys::fuzz_target;
use prost::Message;
use tonic::Code;

/// Every field name a refusal may name (payload keys are `payload.<key>`).
const FIELDS: &[&str] = &[
    "id",
    "segment_id",
    "notification_id",
    "source_host_id",
    "name",
    "description",
    "service_type",
    "recovery_method",
    "return_to_service",
    "type",
    "control_attributes",
    "hostname",
    "generated_time",
    "generated_since",
    "payload",
    "idempotency_key",
    "page_size",
    "page_token",
    "status",
];

fn names_a_field(message: &str) -> bool {
    let Some((field, reason)) = message.split_once(": ") else {
        return false;
    };
    !reason.is_empty() && (FIELDS.contains(&field) || field.starts_with("payload."))
}

fn check_refusal(rpc: Operation, bytes: &[u8], code: Code, message: &str) {
    match code {
        Code::InvalidArgument => assert!(
            names_a_field(message),
            "{rpc:?}: INVALID_ARGUMENT without a field: {message:?}"
        ),
        Code::Internal => assert!(
            !decodes(rpc, bytes),
            "{rpc:?}: INTERNAL for a decodable message: {message:?}"
        ),
        other => panic!("{rpc:?}: unexpected code {other:?}: {message:?}"),
    }
}

/// Whether `bytes` is a valid protobuf message of `rpc`'s request type.
fn decodes(rpc: Operation, bytes: &[u8]) -> bool {
    match rpc {
        Operation::CreateSegment => pb::CreateSegmentRequest::decode(bytes).is_ok(),
        Operation::GetSegment => pb::GetSegmentRequest::decode(bytes).is_ok(),
        Operation::ListSegments => pb::ListSegmentsRequest::decode(bytes).is_ok(),
        Operation::UpdateSegment => pb::UpdateSegmentRequest::decode(bytes).is_ok(),
        Operation::DeleteSegment => pb::DeleteSegmentRequest::decode(bytes).is_ok(),
        Operation::CreateHost => pb::CreateHostRequest::decode(bytes).is_ok(),
        Operation::GetHost => pb::GetHostRequest::decode(bytes).is_ok(),
        Operation::ListHosts => pb::ListHostsRequest::decode(bytes).is_ok(),
        Operation::UpdateHost => pb::UpdateHostRequest::decode(bytes).is_ok(),
        Operation::DeleteHost => pb::DeleteHostRequest::decode(bytes).is_ok(),
        Operation::RestoreHost => pb::RestoreHostRequest::decode(bytes).is_ok(),
        Operation::CreateNotification => pb::CreateNotificationRequest::decode(bytes).is_ok(),
        Operation::GetNotification => pb::GetNotificationRequest::decode(bytes).is_ok(),
        Operation::ListNotifications => pb::ListNotificationsRequest::decode(bytes).is_ok(),
        Operation::WatchNotification => pb::WatchNotificationRequest::decode(bytes).is_ok(),
        Operation::RetryNotification => pb::RetryNotificationRequest::decode(bytes).is_ok(),
        Operation::GetVmove => pb::GetVmoveRequest::decode(bytes).is_ok(),
        Operation::ListVmoves => pb::ListVmovesRequest::decode(bytes).is_ok(),
        Operation::ListVersions => false,
    }
}

/// The service layer's validation of what converted: it may refuse, naming
/// a field, and must not panic.
fn validate(request: &DomainRequest) -> Result<(), InvalidField> {
    match request {
        DomainRequest::CreateSegment(new) => new.validate(),
        DomainRequest::UpdateSegment(_, update) => update.validate(),
        DomainRequest::CreateHost(new) => new.validate(),
        DomainRequest::UpdateHost(_, _, update) => update.validate(),
        DomainRequest::CreateNotification(new) => new.validate().map(|_| ()),
        DomainRequest::ListSegments(_, page)
        | DomainRequest::ListHosts(_, page)
        | DomainRequest::ListNotifications(_, page)
        | DomainRequest::ListVmoves(_, _, page) => {
            assert!((1..=1000).contains(&page.size), "page size {}", page.size);
            assert!(page.after.is_none_or(|t| t.after >= 0), "{page:?}");
            Ok(())
        }
        DomainRequest::GetSegment(_)
        | DomainRequest::DeleteSegment(_)
        | DomainRequest::GetHost(..)
        | DomainRequest::DeleteHost(..)
        | DomainRequest::RestoreHost(..)
        | DomainRequest::GetNotification(_)
        | DomainRequest::WatchNotification(_)
        | DomainRequest::RetryNotification(_)
        | DomainRequest::GetVmove(..) => Ok(()),
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, bytes)) = data.split_first() else {
        return;
    };
    let operations: Vec<Operation> = Operation::grpc().collect();
    let rpc = operations[usize::from(selector) % operations.len()];
    match decode_request(rpc, bytes) {
        Ok(request) => {
            if let Err(invalid) = validate(&request) {
                check_refusal(rpc, bytes, Code::InvalidArgument, &invalid.to_string());
            }
        }
        Err(status) => check_refusal(rpc, bytes, status.code(), status.message()),
    }
});
