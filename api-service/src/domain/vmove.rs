//! VM moves: the per-instance records of a recovery.

use chrono::{DateTime, Utc};

use super::{NotificationId, VMoveId};
use crate::status::{VMoveRecord, VMoveStatus};

pub use instanceha_proto::model::VMoveType;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VMove {
    pub id: VMoveId,
    /// The row's integer key (Masakari's `id`), in creation order.
    pub row_id: i64,
    pub notification_id: NotificationId,
    pub instance_id: String,
    pub instance_name: String,
    pub source_host: String,
    pub vmove_type: VMoveType,
    /// Status, times, message, destination and attempts, which change
    /// together under the status rules.
    pub record: VMoveRecord,
    /// The step the engine reported last, what it said then, and when.
    pub step: Option<String>,
    pub step_message: Option<String>,
    pub step_time: Option<DateTime<Utc>>,
    /// The recovery holds the instance's lock (released as soon as Nova
    /// answers if it was left held).
    pub locked: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl VMove {
    pub fn status(&self) -> VMoveStatus {
        self.record.status()
    }
}

/// What to list; `None` matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VMoveFilter {
    pub status: Option<VMoveStatus>,
    pub vmove_type: Option<VMoveType>,
}

/// One step of an instance's recovery, as its timeline keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceStep {
    pub notification_id: NotificationId,
    pub instance_id: String,
    /// The run (1 for the first) that reported it.
    pub attempt: u32,
    pub step: String,
    pub message: String,
    pub time: DateTime<Utc>,
}
