//! The gRPC edge of authorization: a tower layer that authenticates every
//! call to the public services, checks its role against the RPC and counts
//! it against its caller's budget (`crate::rate_limit`: RESOURCE_EXHAUSTED
//! with when to retry), before any handler runs. Health stays open and
//! unlimited (probes); reflection is open and counted against the source
//! address. What each RPC is comes from `auth::Operation`'s table, who
//! may call it from the policy (`auth::Policy`).

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::Status;
use tower::{Layer, Service};

use crate::auth::{GrpcCall, Guard, Refusal, grpc_call, token_from_headers};
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
        let client = client_of(&request);
        Box::pin(async move {
            let path = request.uri().path();
            let operation = match grpc_call(path) {
                GrpcCall::Open if path.starts_with("/grpc.health.v1.") => {
                    return inner.call(request).await;
                }
                GrpcCall::Open => {
                    return match client.map(|ip| guard.admit_anonymous(ip)) {
                        Some(Err(refused)) => Ok(refusal(path, refused)),
                        _ => inner.call(request).await,
                    };
                }
                GrpcCall::Operation(operation) => Some(operation),
                GrpcCall::Unknown => None,
            };
            let token = token_from_headers(request.headers()).map(str::to_owned);
            match guard.admit(token.as_deref(), operation, client).await {
                Ok(principal) => {
                    tracing::debug!(caller = %principal.name, path = %request.uri().path(), "call authorized");
                    request.extensions_mut().insert(principal);
                    inner.call(request).await
                }
                Err(refused) => Ok(refusal(request.uri().path(), refused)),
            }
        })
    }
}

/// The answer to a call not admitted.
fn refusal(path: &str, refused: Refusal) -> http::Response<tonic::body::Body> {
    match refused {
        Refusal::Auth(err) => {
            tracing::info!(%path, reason = %err, "call refused");
            Status::from(service::Error::from(err)).into_http()
        }
        throttled @ Refusal::Throttled { .. } => {
            tracing::info!(%path, reason = %throttled, "rate limited");
            Status::resource_exhausted(throttled.to_string()).into_http()
        }
    }
}

/// The address the call came from (plain or TLS connections).
fn client_of<B>(request: &http::Request<B>) -> Option<IpAddr> {
    instanceha_runtime::connections::peer_of(request.extensions()).map(|a| a.ip())
}
