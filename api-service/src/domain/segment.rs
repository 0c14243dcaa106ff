//! Failover segments: groups of compute hosts that recover each other.

use chrono::{DateTime, Utc};

use super::SegmentId;
use super::validation::{InvalidField, bounded_text, filter_text, name};

pub use instanceha_proto::model::{RecoveryMethod, ReturnToService};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub id: SegmentId,
    /// The row's integer key (Masakari's `id`), in creation order.
    pub row_id: i64,
    pub name: String,
    pub description: Option<String>,
    pub service_type: String,
    pub recovery_method: RecoveryMethod,
    pub enabled: bool,
    /// What becomes of a fenced host of the segment that comes back.
    pub return_to_service: ReturnToService,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A segment to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewSegment {
    pub name: String,
    pub description: Option<String>,
    pub service_type: String,
    pub recovery_method: RecoveryMethod,
    pub enabled: bool,
    pub return_to_service: ReturnToService,
}

impl NewSegment {
    pub fn validate(&self) -> Result<(), InvalidField> {
        name("name", &self.name)?;
        if let Some(description) = &self.description {
            bounded_text("description", description, 255)?;
        }
        name("service_type", &self.service_type)?;
        Ok(())
    }
}

/// Changes to a segment; `None` leaves a field as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegmentUpdate {
    pub name: Option<String>,
    /// `Some("")` clears the description.
    pub description: Option<String>,
    pub service_type: Option<String>,
    pub recovery_method: Option<RecoveryMethod>,
    pub enabled: Option<bool>,
    pub return_to_service: Option<ReturnToService>,
}

impl SegmentUpdate {
    pub fn validate(&self) -> Result<(), InvalidField> {
        if let Some(value) = &self.name {
            name("name", value)?;
        }
        if let Some(value) = &self.description {
            bounded_text("description", value, 255)?;
        }
        if let Some(value) = &self.service_type {
            name("service_type", value)?;
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// What to list; `None` matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SegmentFilter {
    pub recovery_method: Option<RecoveryMethod>,
    pub service_type: Option<String>,
    pub enabled: Option<bool>,
    pub name: Option<String>,
}

impl SegmentFilter {
    /// The text filters are values a segment can have.
    pub fn validate(&self) -> Result<(), InvalidField> {
        filter_text("service_type", self.service_type.as_deref())?;
        filter_text("name", self.name.as_deref())
    }
}
