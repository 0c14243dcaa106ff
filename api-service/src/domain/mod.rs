//! Plain Rust domain types of the API: segments, hosts, notifications,
//! vmoves and progress events, with the validation of what operators and
//! monitoring agents send. No protobuf, serde or sea-orm types here.

mod host;
mod ids;
mod notification;
mod page;
mod payload;
mod run;
mod segment;
mod validation;
mod vmove;

pub use host::{Host, HostFilter, HostUpdate, NewHost};
pub use ids::{HostId, NotificationId, SegmentId, VMoveId};
pub use notification::{
    NewNotification, Notification, NotificationFields, NotificationFilter, NotificationType,
    ProgressEvent, ProgressState,
};
pub use page::{DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, Page, PageRequest, PageToken};
pub use payload::{ComputeHostPayload, HostEvent, NotificationPayload, ProcessPayload, VmPayload};
pub use run::{
    InstanceId, InstanceRef, InstanceResult, PlannedInstance, PriorState, RunClaim, RunContext,
    RunEvent, RunId, RunKind, SequencedEvent, StartRun,
};
pub use segment::{
    NewSegment, RecoveryMethod, ReturnToService, Segment, SegmentFilter, SegmentUpdate,
};
pub use validation::{
    InvalidField, TextRule, bounded_text, filter_text, hostname, is_invisible_format,
    is_unsafe_to_show, name, quoted, safe_text,
};
pub use vmove::{InstanceStep, VMove, VMoveFilter, VMoveType};
