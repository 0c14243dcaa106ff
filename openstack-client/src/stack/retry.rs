//! The retry layer: a call's tries. After a failed try that is safe to
//! repeat it waits (the one backoff, `instanceha_runtime::backoff`, through
//! the [`RetryPolicy`]: capped, jittered, a server's `Retry-After`
//! honoured up to its cap) and tries again, until the attempts or the
//! budget (the outage tolerance) are spent. The outage gate's probe that
//! a failed try comes back with is held through the wait.

use std::sync::Arc;
use std::task::{Context, Poll};

use tower::{Layer, Service, ServiceExt as _};

use super::{BoxFuture, Failed, Outgoing, Try};
use crate::error::Error;
use crate::request::Response;
use crate::retry::RetryPolicy;

/// Whether a failed try may be sent again. A refused connection or a 429
/// was not processed: any request. A 503 (refused), a 500, 502 or 504, a
/// timeout or a broken connection (outcome unknown) only if the request is
/// safe to repeat: the caller of a write reads Nova first. Anything else
/// (a 4xx, a failed login, an answer that cannot be read) is final.
pub(crate) fn worth_another_try(error: &Error, idempotent: bool) -> bool {
    matches!(
        error,
        Error::Connect { .. } | Error::Status { status: 429, .. }
    ) || (idempotent && (error.refused() || error.outcome_unknown()))
}

/// Tries each call within a [`RetryPolicy`] (see [`Retry`]).
#[derive(Clone, Debug)]
pub(crate) struct RetryLayer {
    policy: Arc<RetryPolicy>,
}

impl RetryLayer {
    pub fn new(policy: RetryPolicy) -> Self {
        Self {
            policy: Arc::new(policy),
        }
    }
}

impl<S> Layer<S> for RetryLayer {
    type Service = Retry<S>;

    fn layer(&self, inner: S) -> Retry<S> {
        Retry {
            policy: self.policy.clone(),
            inner,
        }
    }
}

/// Turns a call into its numbered tries, each with the budget's deadline.
#[derive(Clone, Debug)]
pub(crate) struct Retry<S> {
    policy: Arc<RetryPolicy>,
    inner: S,
}

impl<S> Service<Arc<Outgoing>> for Retry<S>
where
    S: Service<Try, Response = Response, Error = Failed> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = Response;
    type Error = Error;
    type Future = BoxFuture<Result<Response, Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        // Each try waits for the inner service to be ready itself.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, outgoing: Arc<Outgoing>) -> Self::Future {
        let mut inner = self.inner.clone();
        let policy = self.policy.clone();
        Box::pin(async move {
            let mut retries = policy.retries();
            let idempotent = outgoing.request.idempotent;
            let mut number = 0;
            loop {
                number += 1;
                let attempt = Try::new(outgoing.clone(), number, retries.deadline());
                let ready = inner.ready().await.map_err(|failed| failed.error)?;
                let failed = match ready.call(attempt).await {
                    Ok(response) => return Ok(response),
                    Err(failed) => failed,
                };
                if !worth_another_try(&failed.error, idempotent) {
                    return Err(failed.error);
                }
                let requested = policy.retry_after(failed.error.retry_after());
                let Some(delay) = retries.next_delay(requested) else {
                    return Err(failed.error);
                };
                tracing::warn!(error = %failed.error, attempt = retries.tries() - 1, delay_ms = delay.as_millis() as u64, "transient openstack failure; retrying");
                tokio::time::sleep(delay).await;
                // Only now, as the next try starts, the failed try's probe
                // of the outage gate (if it was one) is let go.
                drop(failed.probe);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use tokio::sync::Semaphore;
    use tokio::time::Instant;

    use super::super::fake;
    use super::*;

    fn policy(max_attempts: u32, budget: Duration) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            budget,
            ..RetryPolicy::default()
        }
    }

    /// What the fake service saw of each try: its number, when it came,
    /// its deadline.
    type Seen = Arc<Mutex<Vec<(u32, Instant, Option<Instant>)>>>;

    /// How the fake service answers a try.
    #[derive(Clone, Copy, Debug)]
    enum Then {
        Answer,
        Status(u16),
        /// A status with a `Retry-After` of so many seconds.
        StatusAfter(u16, u64),
        Refused,
    }

    /// A service answering each try as the next of `script` says (the last
    /// again once it runs out), recording the tries it sees.
    fn scripted(
        script: Vec<Then>,
    ) -> (
        impl Service<Try, Response = Response, Error = Failed, Future: Send> + Clone + Send + 'static,
        Seen,
    ) {
        let seen: Seen = Arc::default();
        let service = {
            let seen = seen.clone();
            tower::service_fn(move |attempt: Try| {
                let mut log = seen.lock().unwrap();
                log.push((attempt.number, Instant::now(), attempt.deadline));
                let then = script[(log.len() - 1).min(script.len() - 1)];
                let call = attempt.outgoing.call.clone();
                async move {
                    let error = match then {
                        Then::Answer => return Ok(fake::answer(&call)),
                        Then::Status(status) => fake::status(&call, status, None),
                        Then::StatusAfter(status, secs) => {
                            fake::status(&call, status, Some(Duration::from_secs(secs)))
                        }
                        Then::Refused => fake::connect(&call),
                    };
                    Err(Failed::from(error))
                }
            })
        };
        (service, seen)
    }

    #[test]
    fn what_is_sent_again() {
        let call = fake::outgoing(true).call.clone();
        let any = [fake::connect(&call), fake::status(&call, 429, None)];
        let reads_only = [
            fake::status(&call, 503, None),
            fake::status(&call, 500, None),
            fake::status(&call, 502, None),
            fake::status(&call, 504, None),
            fake::timeout(&call),
            fake::lost(&call),
        ];
        let never = [
            fake::status(&call, 400, None),
            fake::status(&call, 401, None),
            fake::status(&call, 404, None),
            fake::status(&call, 409, None),
            fake::login_failed(),
        ];
        for error in &any {
            assert!(worth_another_try(error, true) && worth_another_try(error, false));
        }
        for error in &reads_only {
            assert!(worth_another_try(error, true), "{error}");
            assert!(!worth_another_try(error, false), "{error}");
        }
        for error in &never {
            assert!(!worth_another_try(error, true), "{error}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_is_tried_again_until_it_is_answered() {
        let (service, seen) = scripted(vec![Then::Status(503), Then::Status(503), Then::Answer]);
        let retry = RetryLayer::new(policy(4, Duration::from_secs(60))).layer(service);
        let started = Instant::now();
        retry.oneshot(fake::outgoing(true)).await.expect("answered");
        let seen = seen.lock().unwrap();
        let numbers: Vec<u32> = seen.iter().map(|(n, _, _)| *n).collect();
        assert_eq!(numbers, [1, 2, 3]);
        // Every try carries the budget's deadline; the waits are the
        // policy's jittered backoff: 250-500 ms, then 500 ms-1 s.
        for (_, _, deadline) in seen.iter() {
            assert_eq!(*deadline, Some(started + Duration::from_secs(60)));
        }
        let first_wait = seen[1].1 - seen[0].1;
        let second_wait = seen[2].1 - seen[1].1;
        assert!(
            (Duration::from_millis(250)..=Duration::from_millis(500)).contains(&first_wait),
            "{first_wait:?}"
        );
        assert!(
            (Duration::from_millis(500)..=Duration::from_secs(1)).contains(&second_wait),
            "{second_wait:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_is_sent_again_only_when_it_was_refused_unprocessed() {
        // 503: refused, but the caller of a write reads Nova first.
        let (service, seen) = scripted(vec![Then::Status(503), Then::Answer]);
        let retry = RetryLayer::new(RetryPolicy::default()).layer(service);
        let error = retry.oneshot(fake::outgoing(false)).await.unwrap_err();
        assert_eq!(error.status(), Some(503));
        assert_eq!(seen.lock().unwrap().len(), 1);

        // A refused connection or a 429: nothing was processed.
        let (service, seen) =
            scripted(vec![Then::Refused, Then::StatusAfter(429, 7), Then::Answer]);
        let retry = RetryLayer::new(RetryPolicy::default()).layer(service);
        retry
            .oneshot(fake::outgoing(false))
            .await
            .expect("answered");
        assert_eq!(seen.lock().unwrap().len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_final_answer_is_not_tried_again() {
        let (service, seen) = scripted(vec![Then::Status(404), Then::Answer]);
        let retry = RetryLayer::new(RetryPolicy::default()).layer(service);
        let error = retry.oneshot(fake::outgoing(true)).await.unwrap_err();
        assert!(error.is_not_found());
        assert_eq!(seen.lock().unwrap().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_sets_the_wait_up_to_its_cap() {
        let (service, seen) = scripted(vec![
            Then::StatusAfter(429, 7),
            Then::StatusAfter(429, 3600),
            Then::Answer,
        ]);
        let retry = RetryLayer::new(policy(4, Duration::from_secs(600))).layer(service);
        retry.oneshot(fake::outgoing(true)).await.expect("answered");
        let seen = seen.lock().unwrap();
        assert_eq!(seen[1].1 - seen[0].1, Duration::from_secs(7));
        assert_eq!(
            seen[2].1 - seen[1].1,
            RetryPolicy::default().max_retry_after,
            "an hour is cut to max_retry_after"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_attempts_or_the_budget_end_the_tries() {
        let (service, seen) = scripted(vec![Then::Status(503)]);
        let retry = RetryLayer::new(policy(4, Duration::from_secs(60))).layer(service);
        let error = retry.oneshot(fake::outgoing(true)).await.unwrap_err();
        assert_eq!(error.status(), Some(503));
        assert_eq!(seen.lock().unwrap().len(), 4, "max_attempts");

        let (service, seen) = scripted(vec![Then::Status(503)]);
        let retry = RetryLayer::new(policy(0, Duration::from_secs(300))).layer(service);
        let started = Instant::now();
        retry.oneshot(fake::outgoing(true)).await.unwrap_err();
        let seen = seen.lock().unwrap();
        let (_, last, _) = seen.last().unwrap();
        assert_eq!(
            *last - started,
            Duration::from_secs(300),
            "the last try at the deadline"
        );
        // Waits of at most 4 s (max_backoff) over five minutes.
        assert!(seen.len() > 70, "{} tries", seen.len());
    }

    /// The failed try's probe stays held through the wait after it and is
    /// let go before the next try is sent.
    #[tokio::test(start_paused = true)]
    async fn what_a_failed_try_holds_is_held_through_the_wait() {
        let gate = Arc::new(Semaphore::new(1));
        let held_at_try = Arc::new(Mutex::new(Vec::new()));
        let service = {
            let (gate, held_at_try) = (gate.clone(), held_at_try.clone());
            tower::service_fn(move |attempt: Try| {
                held_at_try
                    .lock()
                    .unwrap()
                    .push(gate.available_permits() == 0);
                let call = attempt.outgoing.call.clone();
                let permit = gate.clone().try_acquire_owned().expect("free at each try");
                async move {
                    if attempt.number < 3 {
                        Err(Failed {
                            error: fake::status(&call, 503, None),
                            probe: Some(super::super::gate::Probe::holding(permit)),
                        })
                    } else {
                        Ok(fake::answer(&call))
                    }
                }
            })
        };
        let retry = RetryLayer::new(RetryPolicy::default()).layer(service);
        let call = tokio::spawn(retry.oneshot(fake::outgoing(true)));
        // Within the first wait (at least 250 ms): the probe is held.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(gate.available_permits(), 0, "held through the wait");
        call.await.unwrap().expect("answered");
        assert_eq!(*held_at_try.lock().unwrap(), [false, false, false]);
        assert_eq!(gate.available_permits(), 1);
    }
}
