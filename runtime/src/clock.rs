//! The time of day, from one place. Every service reads "now" through a
//! [`Clock`]: the system's in production, Tokio's in tests, so that a test on
//! a paused runtime (`#[tokio::test(start_paused = true)]`, `advance`) moves
//! the time of day of leases, retry windows, expiry and stall judgements
//! together with every `tokio::time::sleep`, and the simulated cloud's
//! timestamps (which follow Tokio's clock too) agree with it.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

/// Where the time of day comes from. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    source: Source,
}

#[derive(Clone, Debug, Default)]
enum Source {
    /// The system's clock.
    #[default]
    System,
    /// The time of day when the clock was made, moved on by Tokio's clock
    /// since.
    Tokio(Arc<Anchor>),
}

#[derive(Debug)]
struct Anchor {
    wall: DateTime<Utc>,
    instant: Instant,
}

impl Clock {
    /// The system's clock (production).
    pub fn system() -> Self {
        Self {
            source: Source::System,
        }
    }

    /// A clock that reads the time of day now and then follows Tokio's
    /// clock: on a paused runtime it stands still until time is advanced
    /// (tests). Must be made inside a Tokio runtime.
    pub fn tokio() -> Self {
        Self {
            source: Source::Tokio(Arc::new(Anchor {
                wall: Utc::now(),
                instant: Instant::now(),
            })),
        }
    }

    /// The time of day.
    pub fn now(&self) -> DateTime<Utc> {
        match &self.source {
            Source::System => Utc::now(),
            Source::Tokio(anchor) => {
                let elapsed = anchor.instant.elapsed();
                anchor.wall + chrono::Duration::from_std(elapsed).unwrap_or(chrono::Duration::MAX)
            }
        }
    }

    /// `now()` plus `duration` (saturating far in the future).
    pub fn after(&self, duration: std::time::Duration) -> DateTime<Utc> {
        plus(self.now(), duration)
    }
}

/// `at` plus `duration`, saturating at the latest time chrono can hold.
pub fn plus(at: DateTime<Utc>, duration: std::time::Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(duration)
        .ok()
        .and_then(|d| at.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// How long from `from` until `to` (zero if `to` has passed).
pub fn until(from: DateTime<Utc>, to: DateTime<Utc>) -> std::time::Duration {
    (to - from).to_std().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_tokio_clock_moves_with_paused_time_only() {
        let clock = Clock::tokio();
        let start = clock.now();
        // sleep: real time passes, paused time does not.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(clock.now(), start, "paused: real time does not move it");
        tokio::time::advance(Duration::from_secs(90)).await;
        assert_eq!(clock.now() - start, chrono::Duration::seconds(90));
        assert_eq!(
            clock.after(Duration::from_secs(10)) - start,
            chrono::Duration::seconds(100)
        );
    }

    #[test]
    fn the_system_clock_is_the_time_of_day() {
        let before = Utc::now();
        let now = Clock::system().now();
        assert!(now >= before && now <= Utc::now());
    }

    #[test]
    fn arithmetic_saturates_and_never_goes_negative() {
        let now = Utc::now();
        assert_eq!(plus(now, Duration::MAX), DateTime::<Utc>::MAX_UTC);
        assert_eq!(
            until(now, now - chrono::Duration::seconds(5)),
            Duration::ZERO
        );
        assert_eq!(
            until(now, now + chrono::Duration::seconds(5)),
            Duration::from_secs(5)
        );
    }
}
