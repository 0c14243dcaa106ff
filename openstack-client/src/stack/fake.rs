//! What the layers' unit tests send and get back: a call to a Nova that is
//! never reached, its answers and its failures.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use instanceha_runtime::clock::Clock;
use instanceha_runtime::secret::Secret;

use super::{Outgoing, Try};
use crate::catalog::ServiceKind;
use crate::client::ServiceEndpoint;
use crate::error::{Call, Error};
use crate::keystone::Token;
use crate::microversion::Microversion;
use crate::request::{Request, Response};

/// A read (`idempotent`) or a write to Nova.
pub fn outgoing(idempotent: bool) -> Arc<Outgoing> {
    outgoing_for(Request::get(ServiceKind::Compute, "/servers/1").idempotent(idempotent))
}

/// `request`, to an endpoint that is never reached.
pub fn outgoing_for(request: Request) -> Arc<Outgoing> {
    Outgoing::new(
        request,
        ServiceEndpoint {
            url: "http://nova.invalid/v2.1".to_owned(),
            microversion: Microversion::new(2, 95),
        },
    )
}

/// The first try of a fresh call.
pub fn first_try(idempotent: bool) -> Try {
    Try::new(outgoing(idempotent), 1, None)
}

pub fn answer(call: &Call) -> Response {
    Response {
        body: Bytes::from_static(b"{}"),
        request_id: Some("req-1".to_owned()),
        call: call.clone(),
    }
}

pub fn status(call: &Call, status: u16, retry_after: Option<Duration>) -> Error {
    Error::Status {
        call: Box::new(call.clone()),
        status,
        message: "no".to_owned(),
        request_id: None,
        attempts: 1,
        retry_after,
    }
}

pub fn connect(call: &Call) -> Error {
    Error::Connect {
        call: Box::new(call.clone()),
        reason: "connection refused".to_owned(),
        attempts: 1,
    }
}

pub fn timeout(call: &Call) -> Error {
    Error::Timeout {
        call: Box::new(call.clone()),
        timeout: Duration::from_secs(30),
        attempts: 1,
    }
}

pub fn lost(call: &Call) -> Error {
    Error::Lost {
        call: Box::new(call.clone()),
        reason: "connection reset".to_owned(),
        attempts: 1,
    }
}

pub fn login_failed() -> Error {
    Error::Auth {
        status: None,
        message: "login failed: keystone unreachable".to_owned(),
    }
}

pub fn token(value: &str, roles: &[&str]) -> Arc<Token> {
    let now = Clock::system().now();
    Arc::new(Token {
        value: Secret::new(value),
        issued_at: now,
        expires_at: now + chrono::Duration::hours(1),
        catalog: Vec::new(),
        roles: roles.iter().map(|r| (*r).to_owned()).collect(),
        project_id: None,
        project_name: None,
        user_id: None,
        user_name: None,
    })
}
