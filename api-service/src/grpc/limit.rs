//! Per-client rate limiting of the public gRPC API with the shared
//! [`RateLimiter`]: a client over its rate gets RESOURCE_EXHAUSTED with
//! when to retry. Health checks are never limited.

use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use tonic::Status;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tower::{Layer, Service};

use crate::rate_limit::RateLimiter;

#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    limiter: Option<RateLimiter>,
}

impl RateLimitLayer {
    /// Limits with `limiter` (none: no limit).
    pub fn new(limiter: Option<RateLimiter>) -> Self {
        Self { limiter }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimitService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService {
            inner,
            limiter: self.limiter.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct RateLimitService<S> {
    inner: S,
    limiter: Option<RateLimiter>,
}

fn client_of<B>(request: &http::Request<B>) -> Option<IpAddr> {
    let extensions = request.extensions();
    extensions
        .get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| {
            extensions
                .get::<TlsConnectInfo<TcpConnectInfo>>()
                .and_then(|i| i.get_ref().remote_addr())
        })
        .map(|a| a.ip())
}

impl<S, B> Service<http::Request<B>> for RateLimitService<S>
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

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let exempt = request.uri().path().starts_with("/grpc.health.v1.");
        let verdict = match (&self.limiter, client_of(&request)) {
            (Some(limiter), Some(client)) if !exempt => limiter
                .take(client, Instant::now())
                .map_err(|wait| (client, wait)),
            _ => Ok(()),
        };
        Box::pin(async move {
            match verdict {
                Ok(()) => inner.call(request).await,
                Err((client, wait)) => {
                    tracing::info!(%client, path = %request.uri().path(), "rate limited");
                    Ok(Status::resource_exhausted(format!(
                        "too many requests from {client}: retry in {} ms (limits.requests_per_second)",
                        wait.as_millis().max(1)
                    ))
                    .into_http())
                }
            }
        })
    }
}
