//! The gRPC edge of authorization: a tower layer that authenticates every
//! call to the public services and checks its role against the RPC, before
//! any handler runs. Health and reflection stay open (probes and
//! discovery). The RPC to action table is here and nowhere else.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::Status;
use tower::{Layer, Service};

use crate::auth::{Action, AuthError, Guard, token_from_headers};

/// What an RPC (`/package.Service/Method`) does; `None` for open services.
pub fn action_of(path: &str) -> Option<Action> {
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let service = parts.next().unwrap_or_default();
    let method = parts.next().unwrap_or_default();
    match service {
        "grpc.health.v1.Health"
        | "grpc.reflection.v1.ServerReflection"
        | "grpc.reflection.v1alpha.ServerReflection" => None,
        "instanceha.v1.SegmentService" | "instanceha.v1.HostService" => Some(match method {
            "GetSegment" | "ListSegments" | "GetHost" | "ListHosts" => Action::Read,
            _ => Action::Administer,
        }),
        "instanceha.v1.NotificationService" => Some(match method {
            "CreateNotification" => Action::CreateNotification,
            "GetNotification" | "ListNotifications" | "WatchNotification" => Action::Read,
            _ => Action::Administer,
        }),
        "instanceha.v1.VmoveService" => Some(Action::Read),
        // Anything unknown needs the most.
        _ => Some(Action::Administer),
    }
}

impl From<AuthError> for Status {
    fn from(err: AuthError) -> Self {
        match err {
            AuthError::Missing | AuthError::Invalid => Status::unauthenticated(err.to_string()),
            AuthError::Forbidden { .. } => Status::permission_denied(err.to_string()),
            AuthError::Unavailable(_) => Status::unavailable(err.to_string()),
        }
    }
}

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
            let Some(action) = action_of(request.uri().path()) else {
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
                    Ok(Status::from(err).into_http())
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rpc_has_its_action() {
        use Action::*;
        let table = [
            (
                "/instanceha.v1.SegmentService/CreateSegment",
                Some(Administer),
            ),
            ("/instanceha.v1.SegmentService/GetSegment", Some(Read)),
            ("/instanceha.v1.SegmentService/ListSegments", Some(Read)),
            (
                "/instanceha.v1.SegmentService/UpdateSegment",
                Some(Administer),
            ),
            (
                "/instanceha.v1.SegmentService/DeleteSegment",
                Some(Administer),
            ),
            ("/instanceha.v1.HostService/CreateHost", Some(Administer)),
            ("/instanceha.v1.HostService/GetHost", Some(Read)),
            ("/instanceha.v1.HostService/ListHosts", Some(Read)),
            ("/instanceha.v1.HostService/UpdateHost", Some(Administer)),
            ("/instanceha.v1.HostService/DeleteHost", Some(Administer)),
            (
                "/instanceha.v1.NotificationService/CreateNotification",
                Some(CreateNotification),
            ),
            (
                "/instanceha.v1.NotificationService/GetNotification",
                Some(Read),
            ),
            (
                "/instanceha.v1.NotificationService/ListNotifications",
                Some(Read),
            ),
            (
                "/instanceha.v1.NotificationService/WatchNotification",
                Some(Read),
            ),
            ("/instanceha.v1.VmoveService/GetVmove", Some(Read)),
            ("/instanceha.v1.VmoveService/ListVmoves", Some(Read)),
            ("/grpc.health.v1.Health/Check", None),
            (
                "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                None,
            ),
            ("/something.Else/Method", Some(Administer)),
        ];
        for (path, action) in table {
            assert_eq!(action_of(path), action, "{path}");
        }
    }
}
