//! Hosts: the nova-compute hosts of a failover segment.

use chrono::{DateTime, Utc};

use super::validation::{InvalidField, bounded_text, filter_text, hostname, name};
use super::{HostId, SegmentId};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    pub id: HostId,
    /// The row's integer key (Masakari's `id`), in creation order.
    pub row_id: i64,
    /// The nova-compute host name.
    pub name: String,
    pub segment_id: SegmentId,
    pub host_type: String,
    pub control_attributes: String,
    pub reserved: bool,
    pub on_maintenance: bool,
    /// The notification whose recovery put the host on maintenance (none
    /// when an operator did).
    pub maintenance_by: Option<super::NotificationId>,
    /// Why the host is held out of service (it was flapping): it stays on
    /// maintenance until an operator clears the flag.
    pub held_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Most text a host's `control_attributes` may hold.
pub const CONTROL_ATTRIBUTES_MAX: usize = 65_535;

/// A host to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewHost {
    pub segment_id: SegmentId,
    pub name: String,
    pub host_type: String,
    pub control_attributes: String,
    pub reserved: bool,
    pub on_maintenance: bool,
}

impl NewHost {
    pub fn validate(&self) -> Result<(), InvalidField> {
        hostname("name", &self.name)?;
        name("type", &self.host_type)?;
        bounded_text(
            "control_attributes",
            &self.control_attributes,
            CONTROL_ATTRIBUTES_MAX,
        )?;
        Ok(())
    }
}

/// Changes to a host; `None` leaves a field as it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostUpdate {
    pub name: Option<String>,
    pub host_type: Option<String>,
    pub control_attributes: Option<String>,
    pub reserved: Option<bool>,
    pub on_maintenance: Option<bool>,
}

impl HostUpdate {
    pub fn validate(&self) -> Result<(), InvalidField> {
        if let Some(value) = &self.name {
            hostname("name", value)?;
        }
        if let Some(value) = &self.host_type {
            name("type", value)?;
        }
        if let Some(value) = &self.control_attributes {
            bounded_text("control_attributes", value, CONTROL_ATTRIBUTES_MAX)?;
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// What to list; `None` matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostFilter {
    pub segment_id: Option<SegmentId>,
    pub host_type: Option<String>,
    pub reserved: Option<bool>,
    pub on_maintenance: Option<bool>,
    pub name: Option<String>,
}

impl HostFilter {
    /// The text filters are values a host can have.
    pub fn validate(&self) -> Result<(), InvalidField> {
        filter_text("type", self.host_type.as_deref())?;
        filter_text("name", self.name.as_deref())
    }
}
