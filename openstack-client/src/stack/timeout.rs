//! The timeout layer: how long one exchange may take, from connecting to
//! the last byte of the answer — the request's own timeout, else the
//! client's `request_timeout`. A try that runs out is a timeout of that
//! try (its outcome unknown: a write may have been applied).

use std::task::{Context, Poll};
use std::time::Duration;

use tower::{Layer, Service};

use super::{BoxFuture, Try};
use crate::error::Error;
use crate::request::Response;

/// Bounds each exchange (see [`Timeout`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TimeoutLayer {
    default: Duration,
}

impl TimeoutLayer {
    /// `default` for requests that do not set their own.
    pub fn new(default: Duration) -> Self {
        Self { default }
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;

    fn layer(&self, inner: S) -> Timeout<S> {
        Timeout {
            default: self.default,
            inner,
        }
    }
}

/// Gives up on an exchange that takes longer than its timeout.
#[derive(Clone, Debug)]
pub(crate) struct Timeout<S> {
    default: Duration,
    inner: S,
}

impl<S> Service<Try> for Timeout<S>
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
        let timeout = attempt.outgoing.request.timeout.unwrap_or(self.default);
        let call = attempt.outgoing.call.clone();
        let attempts = attempt.number;
        let exchange = self.inner.call(attempt);
        Box::pin(async move {
            tokio::time::timeout(timeout, exchange)
                .await
                .unwrap_or_else(|_| {
                    Err(Error::Timeout {
                        call: Box::new(call),
                        timeout,
                        attempts,
                    })
                })
        })
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;
    use tower::ServiceExt as _;

    use super::super::{Outgoing, fake};
    use super::*;
    use crate::catalog::ServiceKind;
    use crate::request::Request;

    /// A service answering after `delay`.
    fn answering_after(
        delay: Duration,
    ) -> impl Service<Try, Response = Response, Error = Error, Future: Send + 'static> + Clone {
        tower::service_fn(move |attempt: Try| async move {
            tokio::time::sleep(delay).await;
            Ok(fake::answer(&attempt.outgoing.call))
        })
    }

    fn outgoing_with_timeout(timeout: Duration) -> std::sync::Arc<Outgoing> {
        fake::outgoing_for(Request::get(ServiceKind::Compute, "/os-services").timeout(timeout))
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_in_time_passes_and_a_late_one_is_a_timeout_of_that_try() {
        let layer = TimeoutLayer::new(Duration::from_secs(30));
        let answer = layer
            .layer(answering_after(Duration::from_secs(29)))
            .oneshot(fake::first_try(true))
            .await;
        assert!(answer.is_ok());

        let started = Instant::now();
        let late = Try::new(fake::outgoing(true), 3, None);
        let error = layer
            .layer(answering_after(Duration::from_secs(31)))
            .oneshot(late)
            .await
            .unwrap_err();
        assert!(
            matches!(
                &error,
                Error::Timeout { timeout, attempts: 3, .. } if *timeout == Duration::from_secs(30)
            ),
            "{error:?}"
        );
        assert!(error.outcome_unknown());
        assert_eq!(started.elapsed(), Duration::from_secs(30), "given up then");
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_with_its_own_timeout_keeps_it() {
        let layer = TimeoutLayer::new(Duration::from_secs(30));
        let service_update = Try::new(outgoing_with_timeout(Duration::from_secs(10)), 1, None);
        let error = layer
            .layer(answering_after(Duration::from_secs(20)))
            .oneshot(service_update)
            .await
            .unwrap_err();
        assert!(
            matches!(&error, Error::Timeout { timeout, .. } if *timeout == Duration::from_secs(10)),
            "{error:?}"
        );

        let patient = Try::new(outgoing_with_timeout(Duration::from_secs(60)), 1, None);
        let answer = layer
            .layer(answering_after(Duration::from_secs(45)))
            .oneshot(patient)
            .await;
        assert!(answer.is_ok(), "longer than the client's default");
    }
}
