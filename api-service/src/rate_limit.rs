//! The request budgets of the public gRPC and REST APIs (one limiter for
//! both edges, so a caller cannot double its rate by switching protocol).
//! Callers are authenticated first, then counted:
//!
//! * an authenticated caller has a budget of its own
//!   (`limits.requests_per_second`, `limits.burst`), and its failure reports
//!   (`CreateNotification`) a second one of the same size, so a monitoring
//!   agent's reports never wait behind reads, its own or anyone else's;
//! * a call that could not be authenticated counts against a smaller budget
//!   of its source address (`limits.anonymous_requests_per_second`,
//!   `limits.anonymous_burst`): an anonymous flood from an address does not
//!   take the budget of callers with valid tokens behind the same address
//!   (SNAT, an ingress);
//! * without authentication (`auth.mode = "none"`) each source address is a
//!   caller.
//!
//! Built on `governor`'s keyed GCRA limiters rather than the hand-written
//! bucket map it replaces: lock-free per key, no global reset one client
//! could trigger for everyone, and idle keys dropped by `retain_recent`.

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

/// Every this many calls, the limiters forget idle keys.
const TIDY_EVERY: u64 = 4096;

/// Who a budget belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Caller {
    /// An authenticated caller, by name (user or token name); `reports`:
    /// its failure reports' budget.
    Principal { name: String, reports: bool },
    /// A source address, when authentication is off.
    Address { ip: IpAddr, reports: bool },
}

impl std::fmt::Display for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Principal { name, .. } => write!(f, "caller {name}"),
            Self::Address { ip, .. } => write!(f, "{ip}"),
        }
    }
}

/// Over budget: retry after this.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttled {
    pub wait: Duration,
}

/// The shared limiter. Cheap to clone.
#[derive(Clone)]
pub struct RateLimiter {
    callers: Arc<DefaultKeyedRateLimiter<Caller>>,
    anonymous: Arc<DefaultKeyedRateLimiter<IpAddr>>,
    calls: Arc<AtomicU64>,
}

impl std::fmt::Debug for RateLimiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimiter")
            .field("callers", &self.callers.len())
            .field("anonymous", &self.anonymous.len())
            .finish()
    }
}

impl RateLimiter {
    /// The limiter for `[limits]`: none when `requests_per_second` is 0
    /// (no limit). An `anonymous_requests_per_second` of 0 refuses every
    /// call that could not be authenticated with RESOURCE_EXHAUSTED rather
    /// than its authentication error: it is read as "no budget".
    pub fn from_settings(
        per_second: f64,
        burst: u32,
        anonymous_per_second: f64,
        anonymous_burst: u32,
    ) -> Option<Self> {
        (per_second > 0.0)
            .then(|| Self::new(per_second, burst, anonymous_per_second, anonymous_burst))
    }

    pub fn new(
        per_second: f64,
        burst: u32,
        anonymous_per_second: f64,
        anonymous_burst: u32,
    ) -> Self {
        Self {
            callers: Arc::new(DefaultKeyedRateLimiter::keyed(quota(per_second, burst))),
            anonymous: Arc::new(DefaultKeyedRateLimiter::keyed(quota(
                anonymous_per_second,
                anonymous_burst,
            ))),
            calls: Arc::default(),
        }
    }

    /// Counts a call of an authenticated caller (or, authentication off,
    /// of a source address).
    pub fn caller(&self, caller: &Caller) -> Result<(), Throttled> {
        self.tidy();
        self.callers
            .check_key(caller)
            .map_err(|not_until| Throttled {
                wait: not_until.wait_time_from(DefaultClock::default().now()),
            })
    }

    /// Counts a call that could not be authenticated, by its source.
    pub fn anonymous(&self, ip: IpAddr) -> Result<(), Throttled> {
        self.tidy();
        self.anonymous
            .check_key(&ip)
            .map_err(|not_until| Throttled {
                wait: not_until.wait_time_from(DefaultClock::default().now()),
            })
    }

    fn tidy(&self) {
        if self.calls.fetch_add(1, Ordering::Relaxed) % TIDY_EVERY == TIDY_EVERY - 1 {
            self.callers.retain_recent();
            self.callers.shrink_to_fit();
            self.anonymous.retain_recent();
            self.anonymous.shrink_to_fit();
        }
    }
}

/// `per_second` calls a second, bursting to `burst`; a rate of 0 (or
/// less) allows one call an hour: effectively none.
fn quota(per_second: f64, burst: u32) -> Quota {
    let period = if per_second > 0.0 {
        Duration::from_secs_f64(1.0 / per_second).max(Duration::from_nanos(1))
    } else {
        Duration::from_secs(3600)
    };
    Quota::with_period(period)
        .expect("a positive period")
        .allow_burst(NonZeroU32::new(burst.max(1)).expect("at least one"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agent(reports: bool) -> Caller {
        Caller::Principal {
            name: "monitor".to_owned(),
            reports,
        }
    }

    #[test]
    fn an_anonymous_flood_from_an_address_leaves_the_callers_behind_it_their_budget() {
        let limiter = RateLimiter::new(10.0, 5, 1.0, 2);
        let shared: IpAddr = "192.0.2.1".parse().unwrap();
        let flood = (0..100)
            .filter(|_| limiter.anonymous(shared).is_ok())
            .count();
        assert_eq!(flood, 2, "the anonymous burst, then refusals");
        for _ in 0..5 {
            assert!(limiter.caller(&agent(false)).is_ok());
        }
        let wait = limiter.caller(&agent(false)).unwrap_err().wait;
        assert!(wait <= Duration::from_millis(100), "{wait:?}");
    }

    #[test]
    fn a_callers_reports_do_not_wait_behind_its_reads_or_anyone_elses() {
        let limiter = RateLimiter::new(10.0, 3, 1.0, 1);
        let reader = Caller::Principal {
            name: "dashboard".to_owned(),
            reports: false,
        };
        while limiter.caller(&reader).is_ok() {}
        while limiter.caller(&agent(false)).is_ok() {}
        for _ in 0..3 {
            assert!(
                limiter.caller(&agent(true)).is_ok(),
                "reports have their own budget"
            );
        }
    }

    #[test]
    fn without_authentication_each_address_is_a_caller() {
        let limiter = RateLimiter::new(10.0, 2, 1.0, 1);
        let a = Caller::Address {
            ip: "192.0.2.1".parse().unwrap(),
            reports: false,
        };
        let b = Caller::Address {
            ip: "192.0.2.2".parse().unwrap(),
            reports: false,
        };
        assert!(limiter.caller(&a).is_ok() && limiter.caller(&a).is_ok());
        assert!(limiter.caller(&a).is_err());
        assert!(
            limiter.caller(&b).is_ok(),
            "another address, another budget"
        );
    }
}
