//! The one way this project waits between tries: capped exponential
//! backoff with jitter, bounded by a number of tries, a time budget, or
//! both. The delays come from `backon`'s exponential backoff (a well-kept
//! crate rather than a hand-written sequence); what it does not know — a
//! wall-clock budget that counts the tries' own time, a server's
//! `Retry-After` — is added here.

use std::time::Duration;

use backon::BackoffBuilder as _;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// How long to wait between tries: `initial` after the first failure,
/// doubling up to `max`. With `jitter`, each wait is drawn between half and
/// the whole of it, so that many callers failing together do not retry
/// together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Backoff {
    /// The wait after the first failure.
    #[serde(with = "humantime_serde")]
    pub initial: Duration,
    /// The longest wait.
    #[serde(with = "humantime_serde")]
    pub max: Duration,
    /// Draw each wait between half and the whole of it.
    pub jitter: bool,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(Duration::from_millis(500), Duration::from_secs(8))
    }
}

impl Backoff {
    /// Jittered backoff from `initial` to `max`.
    pub const fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            jitter: true,
        }
    }

    /// The same progression without jitter (waits that must be exact: a
    /// retry scheduled in the database, a message saying when).
    pub const fn exact(self) -> Self {
        Self {
            jitter: false,
            ..self
        }
    }

    /// The wait after failed try number `attempt` (1 for the first),
    /// without jitter: `initial * 2^(attempt-1)`, at most `max`.
    pub fn nominal(&self, attempt: u32) -> Duration {
        let exponent = attempt.saturating_sub(1).min(30);
        self.initial
            .saturating_mul(1u32 << exponent)
            .min(self.max.max(self.initial))
    }

    /// The wait after failed try number `attempt` (1 for the first) when
    /// the tries are counted elsewhere (a spool that outlives the process):
    /// [`Self::nominal`], drawn between half and the whole of it with
    /// jitter.
    pub fn delay(&self, attempt: u32) -> Duration {
        let nominal = self.nominal(attempt);
        if !self.jitter {
            return nominal;
        }
        // backon draws jitter in [d, 2d): one draw from half the wait.
        backon::ConstantBuilder::default()
            .with_delay(nominal / 2)
            .with_jitter()
            .build()
            .next()
            .map_or(nominal, |d| d.min(nominal))
    }

    /// The waits of one sequence of tries, which ends after `max_tries`
    /// tries (the first included) or once `budget` has passed since now,
    /// whichever comes first (`None`: no such bound).
    pub fn retries(&self, max_tries: Option<u32>, budget: Option<Duration>) -> Retries {
        // backon draws jitter in [d, 2d): start from half so that the waits
        // fall in [d/2, d), as documented.
        let (min, max) = if self.jitter {
            (self.initial / 2, self.max.max(self.initial) / 2)
        } else {
            (self.initial, self.max.max(self.initial))
        };
        let mut builder = backon::ExponentialBuilder::default()
            .with_min_delay(min)
            .with_max_delay(max)
            .with_factor(2.0)
            .without_max_times();
        if self.jitter {
            builder = builder.with_jitter();
        }
        Retries {
            delays: builder.build(),
            cap: self.max.max(self.initial),
            deadline: budget.map(|b| Instant::now() + b),
            max_tries,
            tries: 1,
        }
    }
}

/// The waits of one sequence of tries (see [`Backoff::retries`]).
#[derive(Debug)]
pub struct Retries {
    delays: backon::ExponentialBackoff,
    cap: Duration,
    deadline: Option<Instant>,
    max_tries: Option<u32>,
    /// Tries made so far (the first counts as made when the sequence
    /// starts).
    tries: u32,
}

impl Retries {
    /// The wait before the next try, or `None` when no try is left (the
    /// tries or the budget are spent). `requested` — a server's
    /// `Retry-After` — replaces the backoff's own wait. The last try is
    /// made at the deadline at the latest.
    pub fn next_delay(&mut self, requested: Option<Duration>) -> Option<Duration> {
        if self.max_tries.is_some_and(|max| self.tries >= max) {
            return None;
        }
        let own = self.delays.next().unwrap_or(self.cap).min(self.cap);
        let mut delay = requested.unwrap_or(own);
        if let Some(deadline) = self.deadline {
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            delay = delay.min(deadline - now);
        }
        self.tries += 1;
        Some(delay)
    }

    /// Sleeps until the next try; false when no try is left.
    pub async fn wait(&mut self, requested: Option<Duration>) -> bool {
        match self.next_delay(requested) {
            Some(delay) => {
                tokio::time::sleep(delay).await;
                true
            }
            None => false,
        }
    }

    /// When the budget ends, if it has one.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Tries made so far, the current one included.
    pub fn tries(&self) -> u32 {
        self.tries
    }

    /// Whether the budget allows no further try.
    pub fn spent(&self) -> bool {
        self.max_tries.is_some_and(|max| self.tries >= max)
            || self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nominal_waits_double_up_to_the_cap() {
        let b = Backoff::new(Duration::from_secs(5), Duration::from_secs(120));
        let waits: Vec<u64> = (1..=7).map(|a| b.nominal(a).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 120, 120]);
        assert_eq!(b.nominal(u32::MAX), Duration::from_secs(120));
    }

    #[test]
    fn jittered_waits_fall_between_half_and_the_whole() {
        let b = Backoff::new(Duration::from_millis(400), Duration::from_secs(4));
        let mut retries = b.retries(None, None);
        let mut nominal = Duration::from_millis(400);
        for _ in 0..10 {
            let d = retries.next_delay(None).unwrap();
            assert!(d >= nominal / 2 && d <= nominal, "{d:?} for {nominal:?}");
            nominal = (nominal * 2).min(Duration::from_secs(4));
        }
    }

    #[test]
    fn the_delay_after_a_counted_try_is_its_nominal_wait_jittered() {
        let b = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));
        for attempt in [0, 1, 2, 4, 10, u32::MAX] {
            let nominal = b.nominal(attempt);
            for _ in 0..20 {
                let d = b.delay(attempt);
                assert!(d >= nominal / 2 && d <= nominal, "{d:?} for {nominal:?}");
            }
        }
        assert_eq!(b.exact().delay(3), Duration::from_secs(2));
    }

    #[test]
    fn exact_waits_have_no_jitter() {
        let b = Backoff::new(Duration::from_millis(200), Duration::from_secs(1)).exact();
        let mut retries = b.retries(Some(5), None);
        let waits: Vec<u128> = std::iter::from_fn(|| retries.next_delay(None))
            .map(|d| d.as_millis())
            .collect();
        assert_eq!(waits, [200, 400, 800, 1000]);
        assert_eq!(retries.tries(), 5);
    }

    #[test]
    fn a_requested_wait_replaces_the_backoff() {
        let mut retries = Backoff::default().retries(Some(3), None);
        assert_eq!(
            retries.next_delay(Some(Duration::from_secs(7))),
            Some(Duration::from_secs(7))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_budget_counts_wall_time_and_the_last_try_is_at_the_deadline() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(4)).exact();
        let started = Instant::now();
        let mut retries = b.retries(None, Some(Duration::from_secs(10)));
        // Each try itself takes 2 s (a request timing out).
        let mut tries = 1;
        loop {
            // sleep: the try's own 2 s.
            tokio::time::sleep(Duration::from_secs(2)).await;
            if !retries.wait(None).await {
                break;
            }
            tries += 1;
        }
        // 0+2, wait 1 -> 3+2, wait 2 -> 7+2, wait 1 (cut to the deadline)
        // -> 10+2: spent.
        assert_eq!(tries, 4);
        assert_eq!(started.elapsed(), Duration::from_secs(12));
        assert!(retries.spent());
    }
}
