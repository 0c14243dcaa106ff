//! The plain enums of instance-ha's model, one definition for the API, the
//! engine and the CLI: each with its Masakari name (stored in the database,
//! shown by REST and the CLI), and its one conversion to and from the wire
//! enum, where an unspecified or unknown value is a [`ConversionError`]
//! naming the field.
//!
//! What may happen to a status (the state machines) is not here: only the
//! API's status rules decide that.

use std::fmt;

use crate::ConversionError;
use crate::v1 as wire;

/// Declares a plain enum with its names and its wire conversion.
macro_rules! model_enum {
    (
        $(#[$doc:meta])*
        $name:ident => $wire:ident {
            $( $(#[doc = $vdoc:literal])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[doc = $vdoc])* $variant, )+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: [$name; [$(stringify!($variant)),+].len()] = [$(Self::$variant),+];

            /// Masakari's name (also stored in the database).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)+
                }
            }

            /// What the value means (its doc comment, one line; empty for
            /// a value that needs none): the CLI's help for it.
            pub fn meaning(self) -> &'static str {
                match self {
                    $(Self::$variant => concat!("" $(, $vdoc)*).trim_ascii(),)+
                }
            }

            /// The value named `s` (exactly, as [`Self::as_str`] writes it).
            pub fn parse(s: &str) -> Option<Self> {
                Self::ALL.into_iter().find(|v| v.as_str() == s)
            }

            /// The value of the wire enum `value` read from `field`.
            pub fn from_wire(field: &'static str, value: i32) -> Result<Self, ConversionError> {
                match wire::$wire::try_from(value) {
                    $(Ok(wire::$wire::$variant) => Ok(Self::$variant),)+
                    Ok(wire::$wire::Unspecified) | Err(_) => {
                        Err(ConversionError::UnexpectedEnumVariant { field, value })
                    }
                }
            }
        }

        impl From<$name> for wire::$wire {
            fn from(value: $name) -> Self {
                match value {
                    $($name::$variant => Self::$variant,)+
                }
            }
        }

        impl From<$name> for i32 {
            fn from(value: $name) -> Self {
                wire::$wire::from(value) as i32
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        #[cfg(feature = "clap")]
        impl clap::ValueEnum for $name {
            fn value_variants<'a>() -> &'a [Self] {
                &Self::ALL
            }

            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                let value = clap::builder::PossibleValue::new(self.as_str());
                Some(match self.meaning() {
                    "" => value,
                    meaning => value.help(meaning.trim_end_matches('.')),
                })
            }
        }
    };
}

model_enum! {
    /// How a failover segment recovers a failed host's instances
    /// (Masakari's `recovery_method`).
    RecoveryMethod => RecoveryMethod {
        /// Evacuate to any host Nova's scheduler picks.
        Auto = "auto",
        /// Evacuate to the segment's reserved hosts.
        ReservedHost = "reserved_host",
        /// `auto`, then `reserved_host` if that fails.
        AutoPriority = "auto_priority",
        /// `reserved_host`, then `auto` if that fails.
        RhPriority = "rh_priority",
    }
}

impl RecoveryMethod {
    /// Whether the method may evacuate to reserved hosts.
    pub fn uses_reserved_hosts(self) -> bool {
        !matches!(self, Self::Auto)
    }
}

model_enum! {
    /// What becomes of a segment's fenced host that comes back healthy.
    ReturnToService => ReturnToService {
        /// It stays out of service until an operator restores it.
        Manual = "manual",
        /// Its STARTED report brings it back once its nova-compute reports.
        Auto = "auto",
    }
}

model_enum! {
    /// What a monitoring agent reports.
    NotificationType => NotificationType {
        /// A compute host failed (hostmonitor).
        ComputeHost = "COMPUTE_HOST",
        /// A process, nova-compute in practice, failed (processmonitor).
        Process = "PROCESS",
        /// One instance failed (instancemonitor).
        Vm = "VM",
    }
}

model_enum! {
    /// new → running → finished | failed | ignored; running → error →
    /// running. The transitions are the API's status rules.
    NotificationStatus => NotificationStatus {
        New = "new",
        Running = "running",
        Error = "error",
        Failed = "failed",
        Ignored = "ignored",
        Finished = "finished",
    }
}

impl NotificationStatus {
    /// The statuses that count as unfinished.
    pub const UNFINISHED: [NotificationStatus; 3] = [Self::New, Self::Running, Self::Error];

    /// `finished`, `failed` and `ignored` are final: nothing but an
    /// operator's retry of a failed one leaves them.
    pub fn is_terminal(self) -> bool {
        match self {
            Self::Failed | Self::Ignored | Self::Finished => true,
            Self::New | Self::Running | Self::Error => false,
        }
    }

    /// Unfinished notifications block changes to their segment and hosts.
    pub fn is_unfinished(self) -> bool {
        !self.is_terminal()
    }
}

model_enum! {
    /// pending → ongoing → succeeded | failed | ignored; a retry puts an
    /// unresolved vmove back to pending.
    VMoveStatus => VmoveStatus {
        Pending = "pending",
        Ongoing = "ongoing",
        Succeeded = "succeeded",
        Failed = "failed",
        Ignored = "ignored",
    }
}

impl VMoveStatus {
    /// The statuses of an instance still without a result.
    pub const UNRESOLVED: [VMoveStatus; 2] = [Self::Pending, Self::Ongoing];

    /// `succeeded`, `failed` and `ignored`: the instance has its result.
    pub fn is_resolved(self) -> bool {
        match self {
            Self::Succeeded | Self::Failed | Self::Ignored => true,
            Self::Pending | Self::Ongoing => false,
        }
    }
}

model_enum! {
    /// How an instance is recovered. Masakari writes only `evacuation`; an
    /// instance-failure recovery (stop, start) is `restart`.
    VMoveType => VmoveType {
        Evacuation = "evacuation",
        Migration = "migration",
        LiveMigration = "live_migration",
        /// An instance-failure recovery: stop, start, confirm active.
        Restart = "restart",
    }
}

model_enum! {
    /// The state a progress event reports.
    ProgressState => ProgressState {
        Started = "started",
        Succeeded = "succeeded",
        Failed = "failed",
        Skipped = "skipped",
        Info = "info",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_means_what_its_doc_says_on_one_line() {
        assert_eq!(
            RecoveryMethod::AutoPriority.meaning(),
            "`auto`, then `reserved_host` if that fails."
        );
        assert_eq!(
            VMoveType::Restart.meaning(),
            "An instance-failure recovery: stop, start, confirm active."
        );
        // Undocumented values mean nothing more than their name.
        assert_eq!(NotificationStatus::New.meaning(), "");
    }

    #[test]
    fn every_value_round_trips_its_name_and_the_wire() {
        fn check<T>(all: &[T], name: fn(T) -> &'static str, parse: fn(&str) -> Option<T>)
        where
            T: Copy + PartialEq + fmt::Debug,
        {
            for &v in all {
                assert_eq!(parse(name(v)), Some(v));
            }
            assert_eq!(parse("no such value"), None);
        }
        check(
            &RecoveryMethod::ALL,
            RecoveryMethod::as_str,
            RecoveryMethod::parse,
        );
        check(
            &NotificationType::ALL,
            NotificationType::as_str,
            NotificationType::parse,
        );
        check(
            &NotificationStatus::ALL,
            NotificationStatus::as_str,
            NotificationStatus::parse,
        );
        check(&VMoveStatus::ALL, VMoveStatus::as_str, VMoveStatus::parse);
        check(&VMoveType::ALL, VMoveType::as_str, VMoveType::parse);
        check(
            &ProgressState::ALL,
            ProgressState::as_str,
            ProgressState::parse,
        );
        for v in VMoveType::ALL {
            assert_eq!(VMoveType::from_wire("t", i32::from(v)), Ok(v));
        }
        for v in NotificationStatus::ALL {
            assert_eq!(NotificationStatus::from_wire("s", i32::from(v)), Ok(v));
        }
    }

    #[test]
    fn an_unspecified_or_unknown_wire_value_names_the_field() {
        assert_eq!(
            NotificationType::from_wire("notification.type", 0),
            Err(ConversionError::UnexpectedEnumVariant {
                field: "notification.type",
                value: 0
            })
        );
        assert!(RecoveryMethod::from_wire("segment.recovery_method", 42).is_err());
    }

    #[test]
    fn names_are_masakaris() {
        assert_eq!(NotificationType::ComputeHost.to_string(), "COMPUTE_HOST");
        assert_eq!(VMoveType::LiveMigration.as_str(), "live_migration");
        assert_eq!(
            serde_json::to_string(&RecoveryMethod::RhPriority).unwrap(),
            "\"rh_priority\""
        );
        assert!(NotificationStatus::Failed.is_terminal());
        assert!(!VMoveStatus::Ongoing.is_resolved());
    }
}
