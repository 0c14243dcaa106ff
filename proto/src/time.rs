//! Protobuf timestamps and `chrono` times, converted in one place: a time
//! on the wire is checked here (present where required, in range, nanos
//! valid), so that no edge reads a timestamp its own way. Every edge
//! converts through here (the API's and the engine's, the CLI, the agent,
//! the test kit and the benchmark); only tests write a `Timestamp` by hand:
//! a fixed time, or what no edge would send (negative nanos, a time beyond
//! `chrono`).

use chrono::{DateTime, Utc};
use prost_types::Timestamp;

use crate::ConversionError;

/// The wire form of `at`.
pub fn timestamp(at: DateTime<Utc>) -> Timestamp {
    Timestamp {
        seconds: at.timestamp(),
        nanos: at.timestamp_subsec_nanos() as i32,
    }
}

/// The time of a required field: `MissingField` if absent, `InvalidData`
/// if it is not a time (nanos outside 0..1e9, or beyond what `chrono`
/// represents).
pub fn required(
    field: &'static str,
    ts: Option<Timestamp>,
) -> Result<DateTime<Utc>, ConversionError> {
    let ts = ts.ok_or(ConversionError::MissingField(field))?;
    from_timestamp(field, &ts)
}

/// The time of an optional field: `None` if absent.
pub fn optional(
    field: &'static str,
    ts: Option<Timestamp>,
) -> Result<Option<DateTime<Utc>>, ConversionError> {
    ts.map(|ts| from_timestamp(field, &ts)).transpose()
}

fn from_timestamp(field: &'static str, ts: &Timestamp) -> Result<DateTime<Utc>, ConversionError> {
    let nanos = u32::try_from(ts.nanos)
        .ok()
        .filter(|n| *n < 1_000_000_000)
        .ok_or_else(|| ConversionError::InvalidData {
            field,
            reason: format!("nanos {} is not in 0..1000000000", ts.nanos),
        })?;
    DateTime::from_timestamp(ts.seconds, nanos).ok_or_else(|| ConversionError::InvalidData {
        field,
        reason: format!("{} s is not a representable time", ts.seconds),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_and_bad_ones_name_the_field() {
        let at = DateTime::from_timestamp(1_750_000_000, 123_456_789).unwrap();
        assert_eq!(required("t", Some(timestamp(at))), Ok(at));
        assert_eq!(optional("t", None), Ok(None));
        assert_eq!(required("t", None), Err(ConversionError::MissingField("t")));
        let bad_nanos = Timestamp {
            seconds: 0,
            nanos: -1,
        };
        assert!(matches!(
            required("generated_time", Some(bad_nanos)),
            Err(ConversionError::InvalidData {
                field: "generated_time",
                ..
            })
        ));
        let huge = Timestamp {
            seconds: i64::MAX,
            nanos: 0,
        };
        assert!(required("t", Some(huge)).is_err());
    }
}
