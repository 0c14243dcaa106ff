//! The gRPC edge of authorization: a tower layer that authenticates every
//! call to the public services and checks its role against the RPC, before
//! any handler runs. Health and reflection stay open (probes and
//! discovery). What each RPC needs is `auth::Operation`'s table.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::Status;
use tower::{Layer, Service};

use crate::auth::{Guard, grpc_action, token_from_headers};
use crate::service;

#[derive(Clone, Debug)]
pub struct GuardLayer {
    guard: Guard,
}

impl GuardLayer {
    pub fn new(guard: Guard) -> Self {
        Self { guard }
    }
}

impl<S> Layer<S> for GuardLayer {
    type Service = GuardService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GuardService {
            inner,
            guard: self.guard.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct GuardService<S> {
    inner: S,
    guard: Guard,
}

impl<S, B> Service<http::Request<B>> for GuardService<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        // The clone is the one that was polled ready.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let guard = self.guard.clone();
        Box::pin(async move {
            let Some(action) = grpc_action(request.uri().path()) else {
                return inner.call(request).await;
            };
            let token = token_from_headers(request.headers()).map(str::to_owned);
            match guard.check(token.as_deref(), action).await {
                Ok(principal) => {
                    tracing::debug!(caller = %principal.name, path = %request.uri().path(), "call authorized");
                    request.extensions_mut().insert(principal);
                    inner.call(request).await
                }
                Err(err) => {
                    tracing::info!(path = %request.uri().path(), reason = %err, "call refused");
                    Ok(Status::from(service::Error::from(err)).into_http())
                }
            }
        })
    }
}
