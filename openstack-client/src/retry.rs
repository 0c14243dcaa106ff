//! The retry policy for transient failures: a call keeps trying through
//! refused connections, timeouts and 5xx answers for a time budget (the
//! outage the engine rides out), with capped, jittered backoff
//! (`instanceha_runtime::backoff`), honouring `Retry-After` (capped).

use std::time::Duration;

use instanceha_runtime::backoff::{Backoff, Retries};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryPolicy {
    /// Tries per call at most, the first included; 0 leaves only `budget`
    /// to bound them.
    pub max_attempts: u32,
    /// The wait after the first failure; it doubles with each try.
    #[serde(with = "humantime_serde")]
    pub initial_backoff: Duration,
    /// The longest wait between tries (a call that failed during an
    /// outage tries again within this once the service is back).
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
    /// The longest `Retry-After` honoured; longer ones are cut to this.
    #[serde(with = "humantime_serde")]
    pub max_retry_after: Duration,
    /// How long one call keeps trying, from its first try. Not a setting of
    /// its own: the engine sets it from `recovery.outage_tolerance`.
    #[serde(skip)]
    pub budget: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(4),
            max_retry_after: Duration::from_secs(30),
            budget: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The waits between tries.
    pub fn backoff(&self) -> Backoff {
        Backoff::new(self.initial_backoff, self.max_backoff)
    }

    /// The waits of one call's tries, bounded by the attempts (if any) and
    /// the budget.
    pub fn retries(&self) -> Retries {
        self.backoff().retries(
            (self.max_attempts > 0).then_some(self.max_attempts),
            Some(self.budget),
        )
    }

    /// A server's `Retry-After`, capped.
    pub fn retry_after(&self, requested: Option<Duration>) -> Option<Duration> {
        requested.map(|after| after.min(self.max_retry_after))
    }
}

/// Parses a `Retry-After` header: delay-seconds or an HTTP date.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let delta = at.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(delta.to_std().unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_capped() {
        let policy = RetryPolicy::default();
        assert_eq!(
            policy.retry_after(Some(Duration::from_secs(5))),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            policy.retry_after(Some(Duration::from_secs(3600))),
            Some(Duration::from_secs(30))
        );
        assert_eq!(policy.retry_after(None), None);
    }

    #[tokio::test(start_paused = true)]
    async fn without_an_attempt_limit_the_budget_bounds_the_tries() {
        let policy = RetryPolicy {
            max_attempts: 0,
            budget: Duration::from_secs(600),
            ..RetryPolicy::default()
        };
        let started = tokio::time::Instant::now();
        let mut retries = policy.retries();
        while retries.wait(None).await {}
        let elapsed = started.elapsed();
        assert!(
            elapsed >= Duration::from_secs(599) && elapsed <= Duration::from_secs(601),
            "{elapsed:?}"
        );
        // Waits of at most 4 s: about 150 tries in ten minutes.
        assert!(retries.tries() > 140, "{}", retries.tries());
    }

    #[test]
    fn retry_after_forms() {
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon"), None);
    }
}
