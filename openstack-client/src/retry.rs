//! The retry policy for transient failures: bounded attempts, jittered
//! exponential backoff, and `Retry-After` honoured (capped).

use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts per call, the first included.
    pub max_attempts: u32,
    /// Wait before the second attempt; doubles each time.
    #[serde(with = "humantime_serde")]
    pub initial_backoff: Duration,
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
    /// The longest `Retry-After` honoured; longer ones are cut to this.
    #[serde(with = "humantime_serde")]
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 4,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// How long to wait after failed attempt number `attempt` (1-based).
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(after) = retry_after {
            return after.min(self.max_retry_after);
        }
        let exponent = attempt.saturating_sub(1).min(16);
        let base = self
            .initial_backoff
            .saturating_mul(1 << exponent)
            .min(self.max_backoff);
        // Full jitter between half and the whole base spreads retries of
        // many concurrent workers.
        let millis = base.as_millis() as u64;
        if millis < 2 {
            return base;
        }
        Duration::from_millis(rand::rng().random_range(millis / 2..=millis))
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
    fn backoff_grows_is_capped_and_honours_retry_after() {
        let policy = RetryPolicy::default();
        let first = policy.delay(1, None);
        assert!(first >= Duration::from_millis(250) && first <= Duration::from_millis(500));
        let late = policy.delay(10, None);
        assert!(late <= Duration::from_secs(8) && late >= Duration::from_secs(4));
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(5))),
            Duration::from_secs(5)
        );
        assert_eq!(
            policy.delay(1, Some(Duration::from_secs(3600))),
            Duration::from_secs(30)
        );
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
