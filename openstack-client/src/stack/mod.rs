//! The request stack: every call to Nova or Cinder goes through these tower
//! layers, outermost first, each in a file of its own and tested alone:
//!
//! 1. [`retry`]: the call's tries, with the one backoff, within the
//!    [`RetryPolicy`](crate::retry::RetryPolicy) (attempts and the outage
//!    tolerance), honouring `Retry-After`, resending only what is safe;
//! 2. [`gate`] (admission): while the service is unavailable, one probe
//!    at a time, held through its backoff;
//! 3. [`reauth`]: the tokens of the try, and one login and one resend on a
//!    401 per call;
//! 4. [`timeout`]: the per-try timeout;
//! 5. [`gate`] (observation): what the service answered tells the gate
//!    whether it is down;
//! 6. [`transport`]: one HTTP exchange with reqwest (headers,
//!    `traceparent`, the body read in full).
//!
//! The span and the metrics of a call wrap the whole stack
//! (`OpenStack::send`).

#[cfg(test)]
mod fake;
pub(crate) mod gate;
pub(crate) mod reauth;
pub(crate) mod retry;
pub(crate) mod timeout;
pub(crate) mod transport;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tokio::time::Instant;
use tower::ServiceBuilder;
use tower::util::BoxCloneSyncService;

use super::client::ServiceEndpoint;
use super::error::{Call, Error};
use super::keystone::Token;
use super::request::{Request, Response};
use super::retry::RetryPolicy;
use gate::{AdmitLayer, ObserveLayer, OutageGate, Probe};
use reauth::{ReauthLayer, Tokens};
use retry::RetryLayer;
use timeout::TimeoutLayer;
use transport::Transport;

/// One call on its way: the request, where it goes, and the name errors
/// give it. Shared by all its tries.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub request: Request,
    pub endpoint: ServiceEndpoint,
    pub call: Call,
    /// Set once the call has logged in again after a 401: one
    /// re-authentication per call, whatever its tries.
    pub reauthenticated: AtomicBool,
}

impl Outgoing {
    pub fn new(request: Request, endpoint: ServiceEndpoint) -> Arc<Self> {
        Arc::new(Self {
            call: request.call(),
            request,
            endpoint,
            reauthenticated: AtomicBool::new(false),
        })
    }
}

/// One try of a call, as it goes down the stack; each layer fills in what
/// it owns.
#[derive(Clone, Debug)]
pub(crate) struct Try {
    pub outgoing: Arc<Outgoing>,
    /// 1 for the first try (the retry layer counts; a resend after a 401
    /// is the same try).
    pub number: u32,
    /// When the call's retry budget ends (the retry layer): a wait at the
    /// outage gate ends then too.
    pub deadline: Option<Instant>,
    /// The token to send (the reauth layer).
    pub token: Option<Arc<Token>>,
    /// The token to send as `X-Service-Token`, when the request asks for
    /// one and there is one (the reauth layer).
    pub service_token: Option<Arc<Token>>,
}

impl Try {
    pub fn new(outgoing: Arc<Outgoing>, number: u32, deadline: Option<Instant>) -> Self {
        Self {
            outgoing,
            number,
            deadline,
            token: None,
            service_token: None,
        }
    }
}

/// A failed try and what it holds until the next one: the outage gate's
/// probe, which the retry layer keeps through its wait so that the other
/// calls keep waiting.
#[derive(Debug)]
pub(crate) struct Failed {
    pub error: Error,
    pub probe: Option<Probe>,
}

impl From<Error> for Failed {
    fn from(error: Error) -> Self {
        Self { error, probe: None }
    }
}

/// The future of a layer's service.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The stack of one service: a call in, its answer or its error out.
pub(crate) type Stack = BoxCloneSyncService<Arc<Outgoing>, Response, Error>;

/// The stack for one service (its own outage gate), sending with `http`
/// and the tokens of `tokens`.
pub(crate) fn stack<T: Tokens>(
    http: reqwest::Client,
    tokens: T,
    gate: Arc<OutageGate>,
    retry: RetryPolicy,
    request_timeout: Duration,
) -> Stack {
    BoxCloneSyncService::new(
        ServiceBuilder::new()
            .layer(RetryLayer::new(retry))
            .layer(AdmitLayer::new(gate.clone()))
            .layer(ReauthLayer::new(tokens))
            .layer(TimeoutLayer::new(request_timeout))
            .layer(ObserveLayer::new(gate))
            .service(Transport::new(http)),
    )
}
