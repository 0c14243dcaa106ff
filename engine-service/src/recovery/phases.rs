//! The phases of a host-failure recovery, as the engine's `/metrics` shows
//! them (the same the benchmark reports): from the run's start to its
//! first evacuation requested, the spread from the first to the last, and
//! the tail from the last to the run's end. Times come from the engine's
//! [`Clock`](instanceha_runtime::clock::Clock); an evacuation counts as
//! requested when Nova accepted it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use opentelemetry::metrics::{Histogram, Meter};

/// Seconds, from a few milliseconds (the simulated cloud) to half an hour.
const BOUNDARIES: [f64; 17] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    1800.0,
];

/// The three histograms; cheap to clone.
#[derive(Clone)]
pub(crate) struct PhaseMetrics {
    first: Histogram<f64>,
    spread: Histogram<f64>,
    tail: Histogram<f64>,
}

impl std::fmt::Debug for PhaseMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhaseMetrics").finish_non_exhaustive()
    }
}

impl PhaseMetrics {
    pub(crate) fn from_meter(meter: &Meter) -> Self {
        let histogram = |name: &'static str, description: &'static str| {
            meter
                .f64_histogram(name)
                .with_description(description)
                .with_unit("s")
                .with_boundaries(BOUNDARIES.to_vec())
                .build()
        };
        Self {
            first: histogram(
                "instanceha_engine_first_evacuation_seconds",
                "Host-failure runs: from the run's start in the engine to its first evacuation Nova accepted",
            ),
            spread: histogram(
                "instanceha_engine_evacuation_spread_seconds",
                "Host-failure runs: from the first evacuation Nova accepted to the last",
            ),
            tail: histogram(
                "instanceha_engine_recovery_tail_seconds",
                "Host-failure runs: from the last evacuation Nova accepted to the run's end",
            ),
        }
    }

    /// Records a run's phases, if it requested any evacuation.
    pub(crate) fn record(&self, phases: Option<Phases>) {
        if let Some(phases) = phases {
            self.first.record(phases.first.as_secs_f64(), &[]);
            self.spread.record(phases.spread.as_secs_f64(), &[]);
            self.tail.record(phases.tail.as_secs_f64(), &[]);
        }
    }
}

/// A run's phases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Phases {
    pub first: Duration,
    pub spread: Duration,
    pub tail: Duration,
}

/// When a run's evacuations were requested, shared by its instance
/// workers.
#[derive(Clone, Debug, Default)]
pub(crate) struct EvacuationTimes {
    span: Arc<Mutex<Option<Span>>>,
}

/// The first and the last request.
type Span = (DateTime<Utc>, DateTime<Utc>);

impl EvacuationTimes {
    /// Nova accepted an evacuation at `at`.
    pub(crate) fn requested(&self, at: DateTime<Utc>) {
        let mut span = self.span.lock().unwrap_or_else(|e| e.into_inner());
        *span = Some(match *span {
            None => (at, at),
            Some((first, last)) => (first.min(at), last.max(at)),
        });
    }

    /// The phases of a run started at `started` and ended at `ended`;
    /// `None` without an evacuation.
    pub(crate) fn phases(&self, started: DateTime<Utc>, ended: DateTime<Utc>) -> Option<Phases> {
        let span = *self.span.lock().unwrap_or_else(|e| e.into_inner());
        span.map(|(first, last)| phases(started, first, last, ended))
    }
}

/// The phases from the four instants (a negative difference, from a clock
/// moved back, counts as zero).
fn phases(
    started: DateTime<Utc>,
    first: DateTime<Utc>,
    last: DateTime<Utc>,
    ended: DateTime<Utc>,
) -> Phases {
    use instanceha_runtime::clock::until;
    Phases {
        first: until(started, first),
        spread: until(first, last),
        tail: until(last, ended),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::<Utc>::UNIX_EPOCH + chrono::Duration::milliseconds(ms)
    }

    #[test]
    fn the_phases_run_from_the_start_to_the_first_the_last_and_the_end() {
        let times = EvacuationTimes::default();
        assert_eq!(times.phases(at(0), at(10_000)), None, "no evacuation");
        // Workers report out of order.
        times.requested(at(900));
        times.requested(at(400));
        times.requested(at(2_400));
        assert_eq!(
            times.phases(at(100), at(5_000)),
            Some(Phases {
                first: Duration::from_millis(300),
                spread: Duration::from_millis(2_000),
                tail: Duration::from_millis(2_600),
            })
        );
    }

    #[test]
    fn a_clock_moved_back_gives_zero_not_a_negative_phase() {
        let times = EvacuationTimes::default();
        times.requested(at(1_000));
        let phases = times.phases(at(2_000), at(500)).unwrap();
        assert_eq!(phases.first, Duration::ZERO);
        assert_eq!(phases.tail, Duration::ZERO);
    }
}
