//! The per-client request budget shared by the public gRPC and REST APIs:
//! a token bucket per remote address (a client may burst, then must wait).
//! One limiter serves both edges, so a client cannot double its rate by
//! switching protocol.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Buckets kept at most; idle ones are dropped first.
const MAX_CLIENTS: usize = 10_000;

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// The shared limiter.
#[derive(Clone, Debug)]
pub struct RateLimiter {
    per_second: f64,
    burst: f64,
    buckets: Arc<Mutex<HashMap<IpAddr, Bucket>>>,
}

impl RateLimiter {
    /// The limiter for `limits.requests_per_second` and `limits.burst`:
    /// none when the rate is 0 (no limit).
    pub fn from_settings(per_second: f64, burst: u32) -> Option<Self> {
        (per_second > 0.0).then(|| Self::new(per_second, burst))
    }

    /// `per_second` requests per client, bursting to `burst`.
    pub fn new(per_second: f64, burst: u32) -> Self {
        Self {
            per_second,
            burst: f64::from(burst.max(1)),
            buckets: Arc::default(),
        }
    }

    /// Takes a token for `client` at `now`; `Err` says how long to wait.
    pub fn take(&self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        let mut buckets = self.buckets.lock().expect("limiter lock");
        if buckets.len() >= MAX_CLIENTS && !buckets.contains_key(&client) {
            let horizon =
                Duration::from_secs_f64(self.burst / self.per_second.max(f64::MIN_POSITIVE));
            buckets.retain(|_, b| now.duration_since(b.last) < horizon);
            if buckets.len() >= MAX_CLIENTS {
                buckets.clear();
            }
        }
        let bucket = buckets.entry(client).or_insert(Bucket {
            tokens: self.burst,
            last: now,
        });
        let elapsed = now.saturating_duration_since(bucket.last).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.per_second).min(self.burst);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - bucket.tokens) / self.per_second,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_bursts_then_waits_and_others_are_unaffected() {
        let limiter = RateLimiter::new(10.0, 3);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(limiter.take(a, t0).is_ok());
        }
        let wait = limiter.take(a, t0).unwrap_err();
        assert!(wait <= Duration::from_millis(100), "{wait:?}");
        assert!(
            limiter.take(b, t0).is_ok(),
            "another client has its own bucket"
        );
        // A tenth of a second refills one token.
        assert!(limiter.take(a, t0 + Duration::from_millis(100)).is_ok());
        assert!(limiter.take(a, t0 + Duration::from_millis(100)).is_err());
    }
}
