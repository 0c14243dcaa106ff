//! The recovery workflows' decisions, as pure functions: which instances to
//! recover and in which tier, where to send them, what state to prepare and restore, which
//! volume attachments block an evacuation, what Nova's records say about
//! an evacuation in flight, and whether one Nova accepted was lost (and
//! may safely be asked again). No I/O here; `recovery` performs the
//! steps and calls these to decide.

pub mod evacuation;
pub mod priority;
pub mod selection;
pub mod stall;
pub mod targets;
pub mod vm_events;
pub mod volumes;
