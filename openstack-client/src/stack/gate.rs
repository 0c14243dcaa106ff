//! One request at a time to a service that is down: once Nova (or Cinder)
//! answers 502/503/504 or refuses connections, every caller's next try
//! waits for the one probe in flight instead of sending its own, so an
//! outage meets a trickle of probes, not every waiting call of a
//! 5,000-instance recovery at once (and nova-api, coming back, is not met
//! by that crowd). The first answer that is not "unavailable" opens the
//! gate and everyone goes.
//!
//! Two layers share one [`OutageGate`]: [`AdmitLayer`], above the tokens,
//! lets a try through (the probe comes back with a failed try, and the
//! retry layer holds it through its wait); [`ObserveLayer`], next to the
//! transport, tells the gate what every exchange showed, a resend after a
//! 401 included.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tower::{Layer, Service};

use super::{BoxFuture, Failed, Try};
use crate::error::Error;
use crate::request::Response;

/// The outage state of one service, shared by every call to it.
#[derive(Debug)]
pub(crate) struct OutageGate {
    down: AtomicBool,
    probe: Arc<Semaphore>,
}

impl Default for OutageGate {
    fn default() -> Self {
        Self {
            down: AtomicBool::new(false),
            probe: Arc::new(Semaphore::new(1)),
        }
    }
}

/// The right to probe a service that is down; the next caller goes when
/// it is dropped.
#[derive(Debug)]
pub(crate) struct Probe {
    _permit: OwnedSemaphorePermit,
}

#[cfg(test)]
impl Probe {
    /// A probe of another semaphore (the retry layer's tests).
    pub fn holding(permit: OwnedSemaphorePermit) -> Self {
        Self { _permit: permit }
    }
}

impl OutageGate {
    /// Waits until a try may be sent: at once while the service answers;
    /// while it is down, until this caller is the one probe (the permit,
    /// to hold through the try and the wait after a failed one), the
    /// service answers again, or `deadline` (the call's budget) passes —
    /// then the call makes its last try anyway.
    pub async fn pass(&self, deadline: Option<Instant>) -> Option<Probe> {
        if !self.is_down() {
            return None;
        }
        let acquire = self.probe.clone().acquire_owned();
        let permit = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, acquire).await.ok()?,
            None => acquire.await,
        }
        .ok()?;
        // Someone else's probe got an answer while this one waited.
        self.is_down().then_some(Probe { _permit: permit })
    }

    /// The service answered (anything but 502/503/504).
    pub fn answered(&self) {
        if self.down.swap(false, Ordering::AcqRel) {
            tracing::info!("openstack service answers again");
        }
    }

    /// The service refused the connection or answered 502/503/504.
    pub fn unavailable(&self) {
        if !self.down.swap(true, Ordering::AcqRel) {
            tracing::warn!("openstack service unavailable: one probe at a time until it answers");
        }
    }

    /// Learns from one exchange: an answer opens the gate, a refused
    /// connection or a 502/503/504 closes it; a timeout, a broken
    /// connection or a failed login say nothing about the service's
    /// availability.
    pub fn observe(&self, result: &Result<Response, Error>) {
        match result {
            Ok(_) => self.answered(),
            Err(
                Error::Connect { .. }
                | Error::Status {
                    status: 502..=504, ..
                },
            ) => {
                self.unavailable();
            }
            Err(Error::Status { .. }) => self.answered(),
            Err(_) => {}
        }
    }

    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }
}

/// Lets each try through the gate (see [`Admit`]).
#[derive(Clone, Debug)]
pub(crate) struct AdmitLayer {
    gate: Arc<OutageGate>,
}

impl AdmitLayer {
    pub fn new(gate: Arc<OutageGate>) -> Self {
        Self { gate }
    }
}

impl<S> Layer<S> for AdmitLayer {
    type Service = Admit<S>;

    fn layer(&self, inner: S) -> Admit<S> {
        Admit {
            gate: self.gate.clone(),
            inner,
        }
    }
}

/// Waits at the gate before each try (until the try's deadline at most);
/// a failed try comes back with the probe it held, if it was one.
#[derive(Clone, Debug)]
pub(crate) struct Admit<S> {
    gate: Arc<OutageGate>,
    inner: S,
}

impl<S> Service<Try> for Admit<S>
where
    S: Service<Try, Response = Response, Error = Error> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = Response;
    type Error = Failed;
    type Future = BoxFuture<Result<Response, Failed>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Failed>> {
        self.inner.poll_ready(cx).map_err(Failed::from)
    }

    fn call(&mut self, attempt: Try) -> Self::Future {
        // The ready service goes with the call, called after the wait.
        let ready = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, ready);
        let gate = self.gate.clone();
        Box::pin(async move {
            let probe = gate.pass(attempt.deadline).await;
            inner
                .call(attempt)
                .await
                .map_err(|error| Failed { error, probe })
        })
    }
}

/// Tells the gate what each exchange showed (see [`Observe`]).
#[derive(Clone, Debug)]
pub(crate) struct ObserveLayer {
    gate: Arc<OutageGate>,
}

impl ObserveLayer {
    pub fn new(gate: Arc<OutageGate>) -> Self {
        Self { gate }
    }
}

impl<S> Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe {
            gate: self.gate.clone(),
            inner,
        }
    }
}

/// Passes each exchange's outcome to [`OutageGate::observe`].
#[derive(Clone, Debug)]
pub(crate) struct Observe<S> {
    gate: Arc<OutageGate>,
    inner: S,
}

impl<S> Service<Try> for Observe<S>
where
    S: Service<Try, Response = Response, Error = Error>,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Error;
    type Future = BoxFuture<Result<Response, Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, attempt: Try) -> Self::Future {
        let exchange = self.inner.call(attempt);
        let gate = self.gate.clone();
        Box::pin(async move {
            let result = exchange.await;
            gate.observe(&result);
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use tower::ServiceExt as _;

    use super::super::fake;
    use super::*;

    /// 50 callers retrying every 500 ms through a 60 s outage: without the
    /// gate about 6,000 tries reach the service; with it, one probe per
    /// wait.
    #[tokio::test(start_paused = true)]
    async fn during_an_outage_one_probe_at_a_time_reaches_the_service() {
        let gate = Arc::new(OutageGate::default());
        let sent = Arc::new(AtomicUsize::new(0));
        let back_at = Instant::now() + Duration::from_secs(60);
        gate.unavailable();
        let callers: Vec<_> = (0..50)
            .map(|_| {
                let (gate, sent) = (gate.clone(), sent.clone());
                tokio::spawn(async move {
                    loop {
                        let probe = gate.pass(None).await;
                        sent.fetch_add(1, Ordering::Relaxed);
                        if Instant::now() >= back_at {
                            gate.answered();
                            return;
                        }
                        gate.unavailable();
                        // The caller's wait, the probe held through it.
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        drop(probe);
                    }
                })
            })
            .collect();
        for caller in callers {
            caller.await.unwrap();
        }
        let sent = sent.load(Ordering::Relaxed);
        // 120 waits of 500 ms in the outage, then each caller's one try.
        assert!(
            (100..=200).contains(&sent),
            "{sent} tries reached the service"
        );
        assert!(!gate.is_down());
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_gate_holds_nobody_and_a_deadline_ends_the_wait() {
        let gate = OutageGate::default();
        assert!(gate.pass(None).await.is_none(), "open: no probe needed");
        gate.unavailable();
        let probe = gate.pass(None).await;
        assert!(probe.is_some(), "down: the first caller probes");
        let started = Instant::now();
        let waited = gate
            .pass(Some(Instant::now() + Duration::from_secs(5)))
            .await;
        assert!(waited.is_none());
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(5),
            "until the deadline"
        );
        drop(probe);
        gate.answered();
        assert!(gate.pass(None).await.is_none());
    }

    #[test]
    fn refusals_and_gateway_errors_close_the_gate_and_any_other_answer_opens_it() {
        let call = fake::outgoing(true).call.clone();
        let gate = OutageGate::default();
        for status in [502, 503, 504] {
            gate.answered();
            gate.observe(&Err(fake::status(&call, status, None)));
            assert!(gate.is_down(), "{status}");
        }
        gate.answered();
        gate.observe(&Err(fake::connect(&call)));
        assert!(gate.is_down(), "connection refused");
        for status in [400, 401, 404, 409, 429, 500] {
            gate.unavailable();
            gate.observe(&Err(fake::status(&call, status, None)));
            assert!(!gate.is_down(), "{status}");
        }
        gate.unavailable();
        gate.observe(&Ok(fake::answer(&call)));
        assert!(!gate.is_down(), "an answer");
        // No word on availability: the gate stays as it was.
        for silent in [
            fake::timeout(&call),
            fake::lost(&call),
            fake::login_failed(),
        ] {
            gate.unavailable();
            gate.observe(&Err(silent.clone()));
            assert!(gate.is_down(), "{silent}");
            gate.answered();
            gate.observe(&Err(silent.clone()));
            assert!(!gate.is_down(), "{silent}");
        }
    }

    /// The admission and observation layers around a service that is down:
    /// the first try finds out and keeps the probe with its failure; the
    /// second waits until that failure is dropped.
    #[tokio::test(start_paused = true)]
    async fn while_down_a_try_waits_for_the_probe_held_by_the_failed_one() {
        let gate = Arc::new(OutageGate::default());
        let sent = Arc::new(AtomicUsize::new(0));
        let service = {
            let sent = sent.clone();
            tower::service_fn(move |attempt: Try| {
                sent.fetch_add(1, Ordering::Relaxed);
                let call = attempt.outgoing.call.clone();
                async move { Err::<Response, _>(fake::status(&call, 503, None)) }
            })
        };
        let stack = tower::ServiceBuilder::new()
            .layer(AdmitLayer::new(gate.clone()))
            .layer(ObserveLayer::new(gate.clone()))
            .service(service);

        let first = stack.clone().oneshot(fake::first_try(true)).await;
        let first = first.expect_err("503");
        assert!(first.probe.is_none(), "the gate was open: no probe taken");
        assert!(gate.is_down(), "the 503 closed the gate");

        let probing = stack.clone().oneshot(fake::first_try(true)).await;
        let probing = probing.expect_err("503");
        assert!(probing.probe.is_some(), "the gate was down: a probe");
        assert_eq!(sent.load(Ordering::Relaxed), 2);

        let waiting = tokio::spawn(stack.clone().oneshot(fake::first_try(true)));
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!waiting.is_finished(), "waits while the probe is held");
        assert_eq!(sent.load(Ordering::Relaxed), 2);
        drop(probing);
        let next = waiting.await.unwrap().expect_err("503");
        assert!(next.probe.is_some(), "the next probe");
        assert_eq!(sent.load(Ordering::Relaxed), 3);
    }
}
