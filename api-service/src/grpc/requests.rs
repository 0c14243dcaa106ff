//! The public requests in domain form: the one conversion from each
//! generated `instanceha.v1` request message to what the service layer
//! takes. The handlers call these functions, and so does
//! [`decode_request`], which fuzzing and property tests drive with
//! arbitrary bytes. Shape errors name the field; the rules (names, payloads,
//! what exists) are the service layer's, after this.

use instanceha_proto::v1 as pb;
use tonic::Status;

use super::convert;
use crate::auth::Operation;
use crate::domain::{
    HostFilter, HostId, HostUpdate, InvalidField, NewHost, NewNotification, NewSegment,
    NotificationFilter, NotificationId, PageRequest, ReturnToService, SegmentFilter, SegmentId,
    SegmentUpdate, VMoveFilter, VMoveId,
};

/// The kind bound into segment page tokens.
pub(super) const SEGMENTS: &str = "segments";
/// The kind bound into host page tokens.
pub(super) const HOSTS: &str = "hosts";
/// The kind bound into notification page tokens.
pub(super) const NOTIFICATIONS: &str = "notifications";
/// The kind bound into vmove page tokens.
pub(super) const VMOVES: &str = "vmoves";

/// A public request converted to domain types, as its handler passes it
/// to the service layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DomainRequest {
    CreateSegment(NewSegment),
    GetSegment(SegmentId),
    ListSegments(SegmentFilter, PageRequest),
    UpdateSegment(SegmentId, SegmentUpdate),
    DeleteSegment(SegmentId),
    CreateHost(NewHost),
    GetHost(HostId, Option<SegmentId>),
    ListHosts(HostFilter, PageRequest),
    UpdateHost(HostId, Option<SegmentId>, HostUpdate),
    DeleteHost(HostId, Option<SegmentId>),
    RestoreHost(HostId, Option<SegmentId>),
    CreateNotification(NewNotification),
    GetNotification(NotificationId),
    ListNotifications(NotificationFilter, PageRequest),
    WatchNotification(NotificationId),
    RetryNotification(NotificationId),
    GetVmove(NotificationId, VMoveId),
    ListVmoves(NotificationId, VMoveFilter, PageRequest),
}

/// Decodes the protobuf request message of `rpc` from `bytes` and converts
/// it to domain types exactly as the RPC's handler does. Undecodable bytes
/// get what the transport answers for them (INTERNAL, as gRPC's status
/// code guide says for a request that cannot be parsed); a malformed field
/// gets INVALID_ARGUMENT naming it. Size limits are the transport's and
/// are not checked here.
pub fn decode_request(rpc: Operation, bytes: &[u8]) -> Result<DomainRequest, Status> {
    fn decode<M: prost::Message + Default>(bytes: &[u8]) -> Result<M, Status> {
        M::decode(bytes).map_err(|e| Status::internal(e.to_string()))
    }
    let request = match rpc {
        Operation::CreateSegment => DomainRequest::CreateSegment(create_segment(decode(bytes)?)?),
        Operation::GetSegment => DomainRequest::GetSegment(get_segment(decode(bytes)?)?),
        Operation::ListSegments => {
            let (filter, page) = list_segments(decode(bytes)?)?;
            DomainRequest::ListSegments(filter, page)
        }
        Operation::UpdateSegment => {
            let (id, update) = update_segment(decode(bytes)?)?;
            DomainRequest::UpdateSegment(id, update)
        }
        Operation::DeleteSegment => DomainRequest::DeleteSegment(delete_segment(decode(bytes)?)?),
        Operation::CreateHost => DomainRequest::CreateHost(create_host(decode(bytes)?)?),
        Operation::GetHost => {
            let (id, segment) = get_host(decode(bytes)?)?;
            DomainRequest::GetHost(id, segment)
        }
        Operation::ListHosts => {
            let (filter, page) = list_hosts(decode(bytes)?)?;
            DomainRequest::ListHosts(filter, page)
        }
        Operation::UpdateHost => {
            let (id, segment, update) = update_host(decode(bytes)?)?;
            DomainRequest::UpdateHost(id, segment, update)
        }
        Operation::DeleteHost => {
            let (id, segment) = delete_host(decode(bytes)?)?;
            DomainRequest::DeleteHost(id, segment)
        }
        Operation::RestoreHost => {
            let (id, segment) = restore_host(decode(bytes)?)?;
            DomainRequest::RestoreHost(id, segment)
        }
        Operation::CreateNotification => {
            DomainRequest::CreateNotification(create_notification(decode(bytes)?, None)?)
        }
        Operation::GetNotification => {
            DomainRequest::GetNotification(get_notification(decode(bytes)?)?)
        }
        Operation::ListNotifications => {
            let (filter, page) = list_notifications(decode(bytes)?)?;
            DomainRequest::ListNotifications(filter, page)
        }
        Operation::WatchNotification => {
            DomainRequest::WatchNotification(watch_notification(decode(bytes)?)?)
        }
        Operation::RetryNotification => {
            DomainRequest::RetryNotification(retry_notification(decode(bytes)?)?)
        }
        Operation::GetVmove => {
            let (notification, id) = get_vmove(decode(bytes)?)?;
            DomainRequest::GetVmove(notification, id)
        }
        Operation::ListVersions => {
            return Err(Status::unimplemented(
                "ListVersions is an operation of the REST facade only",
            ));
        }
        Operation::ListVmoves => {
            let (notification, filter, page) = list_vmoves(decode(bytes)?)?;
            DomainRequest::ListVmoves(notification, filter, page)
        }
    };
    Ok(request)
}

// ---- segments ------------------------------------------------------------------

pub(super) fn create_segment(r: pb::CreateSegmentRequest) -> Result<NewSegment, InvalidField> {
    Ok(NewSegment {
        name: r.name,
        description: r.description,
        service_type: r.service_type,
        recovery_method: convert::recovery_method("recovery_method", r.recovery_method)?,
        enabled: r.enabled.unwrap_or(true),
        return_to_service: r
            .return_to_service
            .map(|v| convert::return_to_service("return_to_service", v))
            .transpose()?
            .unwrap_or(ReturnToService::Manual),
    })
}

pub(super) fn get_segment(r: pb::GetSegmentRequest) -> Result<SegmentId, InvalidField> {
    convert::id("id", &r.id)
}

pub(super) fn list_segments(
    r: pb::ListSegmentsRequest,
) -> Result<(SegmentFilter, PageRequest), InvalidField> {
    let page = PageRequest::parse(SEGMENTS, r.page_size, &r.page_token)?;
    let filter = SegmentFilter {
        recovery_method: r
            .recovery_method
            .map(|m| convert::recovery_method("recovery_method", m))
            .transpose()?,
        service_type: r.service_type,
        enabled: r.enabled,
        name: r.name,
    };
    Ok((filter, page))
}

pub(super) fn update_segment(
    r: pb::UpdateSegmentRequest,
) -> Result<(SegmentId, SegmentUpdate), InvalidField> {
    let id = convert::id("id", &r.id)?;
    let update = SegmentUpdate {
        name: r.name,
        description: r.description,
        service_type: r.service_type,
        recovery_method: r
            .recovery_method
            .map(|m| convert::recovery_method("recovery_method", m))
            .transpose()?,
        enabled: r.enabled,
        return_to_service: r
            .return_to_service
            .map(|v| convert::return_to_service("return_to_service", v))
            .transpose()?,
    };
    Ok((id, update))
}

pub(super) fn delete_segment(r: pb::DeleteSegmentRequest) -> Result<SegmentId, InvalidField> {
    convert::id("id", &r.id)
}

// ---- hosts -----------------------------------------------------------------------

pub(super) fn create_host(r: pb::CreateHostRequest) -> Result<NewHost, InvalidField> {
    Ok(NewHost {
        segment_id: convert::id("segment_id", &r.segment_id)?,
        name: r.name,
        host_type: r.r#type,
        control_attributes: r.control_attributes,
        reserved: r.reserved,
        on_maintenance: r.on_maintenance,
    })
}

pub(super) fn get_host(r: pb::GetHostRequest) -> Result<(HostId, Option<SegmentId>), InvalidField> {
    let id = convert::id("id", &r.id)?;
    let segment = convert::optional_id("segment_id", &r.segment_id)?;
    Ok((id, segment))
}

pub(super) fn list_hosts(
    r: pb::ListHostsRequest,
) -> Result<(HostFilter, PageRequest), InvalidField> {
    let page = PageRequest::parse(HOSTS, r.page_size, &r.page_token)?;
    let filter = HostFilter {
        segment_id: r
            .segment_id
            .map(|s| convert::id("segment_id", &s))
            .transpose()?,
        host_type: r.r#type,
        reserved: r.reserved,
        on_maintenance: r.on_maintenance,
        name: r.name,
    };
    Ok((filter, page))
}

pub(super) fn update_host(
    r: pb::UpdateHostRequest,
) -> Result<(HostId, Option<SegmentId>, HostUpdate), InvalidField> {
    let id = convert::id("id", &r.id)?;
    let segment = convert::optional_id("segment_id", &r.segment_id)?;
    let update = HostUpdate {
        name: r.name,
        host_type: r.r#type,
        control_attributes: r.control_attributes,
        reserved: r.reserved,
        on_maintenance: r.on_maintenance,
    };
    Ok((id, segment, update))
}

pub(super) fn delete_host(
    r: pb::DeleteHostRequest,
) -> Result<(HostId, Option<SegmentId>), InvalidField> {
    let id = convert::id("id", &r.id)?;
    let segment = convert::optional_id("segment_id", &r.segment_id)?;
    Ok((id, segment))
}

pub(super) fn restore_host(
    r: pb::RestoreHostRequest,
) -> Result<(HostId, Option<SegmentId>), InvalidField> {
    let id = convert::id("id", &r.id)?;
    let segment = convert::optional_id("segment_id", &r.segment_id)?;
    Ok((id, segment))
}

// ---- notifications ---------------------------------------------------------------

/// `trace_context` is the creating call's W3C `traceparent`, which the
/// recovery joins.
pub(super) fn create_notification(
    r: pb::CreateNotificationRequest,
    trace_context: Option<String>,
) -> Result<NewNotification, InvalidField> {
    Ok(NewNotification {
        notification_type: convert::notification_type("type", r.r#type)?,
        hostname: r.hostname,
        generated_time: convert::from_timestamp("generated_time", r.generated_time)?,
        payload: convert::payload(r.payload),
        idempotency_key: Some(r.idempotency_key).filter(|k| !k.is_empty()),
        trace_context,
    })
}

pub(super) fn get_notification(
    r: pb::GetNotificationRequest,
) -> Result<NotificationId, InvalidField> {
    convert::id("id", &r.id)
}

pub(super) fn list_notifications(
    r: pb::ListNotificationsRequest,
) -> Result<(NotificationFilter, PageRequest), InvalidField> {
    let page = PageRequest::parse(NOTIFICATIONS, r.page_size, &r.page_token)?;
    let filter = NotificationFilter {
        status: r
            .status
            .map(|s| convert::notification_status("status", s))
            .transpose()?,
        notification_type: r
            .r#type
            .map(|t| convert::notification_type("type", t))
            .transpose()?,
        hostname: r.hostname,
        source_host_id: r
            .source_host_id
            .map(|h| convert::id("source_host_id", &h))
            .transpose()?,
        segment_id: r
            .segment_id
            .map(|s| convert::id("segment_id", &s))
            .transpose()?,
        generated_since: r
            .generated_since
            .map(|t| convert::from_timestamp("generated_since", Some(t)))
            .transpose()?,
    };
    Ok((filter, page))
}

pub(super) fn watch_notification(
    r: pb::WatchNotificationRequest,
) -> Result<NotificationId, InvalidField> {
    convert::id("id", &r.id)
}

pub(super) fn retry_notification(
    r: pb::RetryNotificationRequest,
) -> Result<NotificationId, InvalidField> {
    convert::id("id", &r.id)
}

// ---- vmoves ----------------------------------------------------------------------

pub(super) fn get_vmove(r: pb::GetVmoveRequest) -> Result<(NotificationId, VMoveId), InvalidField> {
    let notification = convert::id("notification_id", &r.notification_id)?;
    let id = convert::id("id", &r.id)?;
    Ok((notification, id))
}

pub(super) fn list_vmoves(
    r: pb::ListVmovesRequest,
) -> Result<(NotificationId, VMoveFilter, PageRequest), InvalidField> {
    let notification = convert::id("notification_id", &r.notification_id)?;
    let page = PageRequest::parse(VMOVES, r.page_size, &r.page_token)?;
    let filter = VMoveFilter {
        status: r
            .status
            .map(|s| convert::vmove_status("status", s))
            .transpose()?,
        vmove_type: r
            .r#type
            .map(|t| convert::vmove_type("type", t))
            .transpose()?,
    };
    Ok((notification, filter, page))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn encoded(message: &impl prost::Message) -> Vec<u8> {
        message.encode_to_vec()
    }

    #[test]
    fn every_rpc_decodes_its_default_message_or_names_a_field() {
        for rpc in Operation::grpc() {
            // An empty body is the default message: lists have no required
            // field; everything else needs an id or a name.
            match decode_request(rpc, &[]) {
                Ok(request) => assert!(
                    matches!(
                        request,
                        DomainRequest::ListSegments(..)
                            | DomainRequest::ListHosts(..)
                            | DomainRequest::ListNotifications(..)
                    ),
                    "{rpc:?}: {request:?}"
                ),
                Err(status) => {
                    assert_eq!(status.code(), Code::InvalidArgument, "{rpc:?}: {status:?}");
                    assert!(status.message().contains(": "), "{rpc:?}: {status:?}");
                }
            }
            assert!(
                rpc.grpc_path().unwrap().starts_with("/instanceha.v1."),
                "{rpc:?}"
            );
        }
    }

    #[test]
    fn requests_convert_as_their_handlers_do() {
        let segment = SegmentId::new();
        let bytes = encoded(&pb::CreateHostRequest {
            segment_id: segment.to_string(),
            name: "compute-01".into(),
            r#type: "COMPUTE".into(),
            control_attributes: "SSH".into(),
            reserved: true,
            on_maintenance: false,
        });
        assert_eq!(
            decode_request(Operation::CreateHost, &bytes).unwrap(),
            DomainRequest::CreateHost(NewHost {
                segment_id: segment,
                name: "compute-01".into(),
                host_type: "COMPUTE".into(),
                control_attributes: "SSH".into(),
                reserved: true,
                on_maintenance: false,
            })
        );
        let bytes = encoded(&pb::ListVmovesRequest {
            notification_id: NotificationId::new().to_string(),
            page_size: 1001,
            ..Default::default()
        });
        let status = decode_request(Operation::ListVmoves, &bytes).unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(status.message().starts_with("page_size: "), "{status:?}");
        let bytes = encoded(&pb::CreateSegmentRequest {
            name: "rack-a".into(),
            recovery_method: 42,
            ..Default::default()
        });
        let status = decode_request(Operation::CreateSegment, &bytes).unwrap_err();
        assert_eq!(status.message(), "recovery_method: 42 is not a known value");
    }

    #[test]
    fn undecodable_bytes_are_what_the_transport_answers() {
        // Field 1, length-delimited, longer than the buffer.
        let status = decode_request(Operation::GetSegment, &[0x0a, 0x05, b'x']).unwrap_err();
        assert_eq!(status.code(), Code::Internal);
        // Field 1 as a string that is not UTF-8.
        let status = decode_request(Operation::GetSegment, &[0x0a, 0x01, 0xff]).unwrap_err();
        assert_eq!(status.code(), Code::Internal);
    }
}
