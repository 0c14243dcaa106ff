//! Telling the budget that a connection carried a request: a tower layer
//! in front of a server's routes (gRPC or axum), which finds the peer in
//! the request's connection info.

use std::net::SocketAddr;
use std::task::{Context, Poll};

use super::ConnectionBudget;

/// A tower layer telling the budget that a connection carried a request
/// (a gRPC server's outermost layer); the peer comes from tonic's
/// connection info, plain or TLS.
#[derive(Clone, Debug)]
pub struct ServedLayer {
    budget: ConnectionBudget,
}

impl ServedLayer {
    pub fn new(budget: ConnectionBudget) -> Self {
        Self { budget }
    }
}

impl<S> tower::Layer<S> for ServedLayer {
    type Service = Served<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Served {
            inner,
            budget: self.budget.clone(),
        }
    }
}

/// The service of [`ServedLayer`].
#[derive(Clone, Debug)]
pub struct Served<S> {
    inner: S,
    budget: ConnectionBudget,
}

impl<S, B> tower::Service<http::Request<B>> for Served<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if let Some(peer) = peer_of(request.extensions()) {
            self.budget.served(peer);
        }
        self.inner.call(request)
    }
}

/// The peer of a request, from tonic's connection info (plain or TLS) or
/// axum's (`ConnectInfo<SocketAddr>`).
pub fn peer_of(extensions: &http::Extensions) -> Option<SocketAddr> {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
    extensions
        .get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| {
            extensions
                .get::<TlsConnectInfo<TcpConnectInfo>>()
                .and_then(|i| i.get_ref().remote_addr())
        })
        .or_else(|| {
            extensions
                .get::<axum::extract::ConnectInfo<SocketAddr>>()
                .map(|i| i.0)
        })
}
