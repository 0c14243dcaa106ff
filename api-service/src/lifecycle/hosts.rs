//! When a host may change while recoveries are unfinished: a change that
//! only puts the host on or off maintenance waits for the host's own
//! notifications (a repaired host is taken off maintenance while other
//! hosts of its segment recover); any other change (its name, its type,
//! whether it is reserved, its segment's composition) waits for every
//! notification of its segment, as Masakari does, since it would pull the
//! ground from under a running recovery.

use crate::domain::HostUpdate;

/// Whose unfinished notifications a host change waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The host's own.
    Host,
    /// Every notification of the host's segment.
    Segment,
}

/// The scope `update` waits for.
pub fn update_scope(update: &HostUpdate) -> Scope {
    let HostUpdate {
        name,
        host_type,
        control_attributes,
        reserved,
        on_maintenance: _,
    } = update;
    if name.is_none() && host_type.is_none() && control_attributes.is_none() && reserved.is_none() {
        Scope::Host
    } else {
        Scope::Segment
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_maintenance_change_waits_for_the_host_alone() {
        let maintenance = HostUpdate {
            on_maintenance: Some(false),
            ..HostUpdate::default()
        };
        assert_eq!(update_scope(&maintenance), Scope::Host);
        for other in [
            HostUpdate {
                reserved: Some(true),
                ..maintenance.clone()
            },
            HostUpdate {
                name: Some("compute-09".into()),
                ..HostUpdate::default()
            },
            HostUpdate {
                control_attributes: Some("x".into()),
                ..HostUpdate::default()
            },
        ] {
            assert_eq!(update_scope(&other), Scope::Segment, "{other:?}");
        }
    }
}
