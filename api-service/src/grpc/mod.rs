//! The gRPC edge of the API: `instanceha.v1` handlers, conversions between
//! generated messages and domain types, the one error mapping, and the
//! router with health and reflection. Only this module (and the engine
//! link) uses `instanceha_proto`.

mod convert;
mod error;
mod guard;
mod hosts;
mod notifications;
mod requests;
mod segments;
mod size;
mod trace;
mod vmoves;
mod watches;

use instanceha_proto::v1 as pb;
use tonic::service::Routes;

use crate::service::Api;

pub use convert::{notification_status_pb, notification_type_pb, recovery_method_pb, timestamp};
pub use guard::GuardLayer;
pub use requests::{DomainRequest, decode_request};
pub use size::{MAX_HEADER_LIST_BYTES, MAX_METADATA_BYTES, SizeLayer};
pub use trace::TraceLayer;
pub use watches::{WatchSlot, WatchSlots};

/// The default largest request (a notification is a few hundred bytes; a
/// page of 1,000 hosts in a response is well below this).
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// Every public service of the API, plus reflection.
pub fn routes(
    api: &Api,
    max_message_bytes: usize,
    watches: WatchSlots,
) -> Result<Routes, tonic_reflection::server::Error> {
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(instanceha_proto::PUBLIC_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(instanceha_proto::PUBLIC_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    let routes = Routes::new(
        pb::segment_service_server::SegmentServiceServer::new(segments::SegmentHandlers {
            api: api.clone(),
        })
        .max_decoding_message_size(max_message_bytes),
    )
    .add_service(
        pb::host_service_server::HostServiceServer::new(hosts::HostHandlers { api: api.clone() })
            .max_decoding_message_size(max_message_bytes),
    )
    .add_service(
        pb::notification_service_server::NotificationServiceServer::new(
            notifications::NotificationHandlers {
                api: api.clone(),
                watches,
            },
        )
        .max_decoding_message_size(max_message_bytes),
    )
    .add_service(
        pb::vmove_service_server::VmoveServiceServer::new(vmoves::VMoveHandlers {
            api: api.clone(),
        })
        .max_decoding_message_size(max_message_bytes),
    )
    .add_service(reflection_v1)
    .add_service(reflection_v1alpha);
    Ok(routes)
}
