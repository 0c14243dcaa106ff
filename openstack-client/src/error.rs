//! Errors of the OpenStack client. Every error names the call (service,
//! method, path) and the cause, so a failed recovery step can say exactly
//! what went wrong.

use std::fmt;
use std::time::Duration;

use super::catalog::NoEndpoint;

/// One request: `nova GET /servers/detail`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub service: &'static str,
    pub method: reqwest::Method,
    pub path: String,
}

impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.service, self.method, self.path)
    }
}

fn tries(attempts: u32) -> String {
    if attempts > 1 {
        format!(" (after {attempts} attempts)")
    } else {
        String::new()
    }
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum Error {
    /// The service answered with an error status.
    #[error("{call}: {status} {message}{}{}", tries(*attempts), request_id.as_ref().map(|id| format!(" [{id}]")).unwrap_or_default())]
    Status {
        call: Box<Call>,
        status: u16,
        message: String,
        request_id: Option<String>,
        attempts: u32,
        /// The service's `Retry-After`, if it sent one.
        retry_after: Option<Duration>,
    },
    /// No answer in time. For a non-idempotent call the request may or may
    /// not have been applied.
    #[error("{call}: no answer within {}{}", humantime::format_duration(*timeout), tries(*attempts))]
    Timeout {
        call: Box<Call>,
        timeout: Duration,
        attempts: u32,
    },
    /// The request could not be sent (refused, reset before sending, DNS).
    #[error("{call}: cannot connect: {reason}{}", tries(*attempts))]
    Connect {
        call: Box<Call>,
        reason: String,
        attempts: u32,
    },
    /// The connection broke after the request was sent: the answer is lost
    /// and the request may or may not have been applied.
    #[error("{call}: the connection broke before the answer arrived: {reason}{}", tries(*attempts))]
    Lost {
        call: Box<Call>,
        reason: String,
        attempts: u32,
    },
    /// Keystone refused or failed the login.
    #[error("keystone: {message}")]
    Auth {
        status: Option<u16>,
        message: String,
    },
    /// The answer is not what the API documents.
    #[error("{call}: unexpected answer: {reason}")]
    Decode { call: Box<Call>, reason: String },
    #[error(transparent)]
    NoEndpoint(#[from] NoEndpoint),
    /// The server's microversion range does not include what the engine
    /// needs.
    #[error(
        "{service}: the server supports microversions {server_min} to {server_max}, the engine needs {wanted}"
    )]
    Microversion {
        service: &'static str,
        wanted: String,
        server_min: String,
        server_max: String,
    },
}

impl Error {
    /// The HTTP status, if the service answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Status { status, .. } => Some(*status),
            Self::Auth { status, .. } => *status,
            _ => None,
        }
    }

    /// How long the service asked to wait before trying again
    /// (`Retry-After`), if it did.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Self::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// The service answered 404 about the resource asked for. A failed
    /// login never is: Keystone (or a proxy in front of it) answering 404
    /// says nothing about the instance.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Status { status: 404, .. })
    }

    /// The service answered 409 about the resource asked for (never a
    /// failed login).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Status { status: 409, .. })
    }

    /// The service's own error message, when it answered with one.
    pub fn service_message(&self) -> Option<&str> {
        match self {
            Self::Status { message, .. } => Some(message),
            _ => None,
        }
    }

    /// The request may have been applied although no answer says so (a
    /// timeout, a broken connection after sending, a 500 from a service
    /// that failed midway, a 502 or 504 from a proxy). Calls that are not
    /// safe to repeat must re-read state instead of resending.
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, Self::Timeout { .. } | Self::Lost { .. })
            || matches!(
                self,
                Self::Status {
                    status: 500 | 502 | 504,
                    ..
                }
            )
    }

    /// The request was certainly not applied: it could not be sent
    /// (connection refused), or the service refused to take it (503, 429).
    /// Any request may be sent again.
    pub fn refused(&self) -> bool {
        matches!(self, Self::Connect { .. })
            || matches!(
                self,
                Self::Status {
                    status: 429 | 503,
                    ..
                }
            )
    }

    /// The failure may pass (a service down, overloaded, or slow): another
    /// try later may succeed. Refused, unknown outcomes, and a login that
    /// failed for such a reason.
    pub fn is_transient(&self) -> bool {
        self.refused()
            || self.outcome_unknown()
            || matches!(
                self,
                Self::Auth {
                    status: None | Some(429 | 500 | 502..=504),
                    ..
                }
            )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: u16) -> Error {
        Error::Status {
            call: Box::new(Call {
                service: "nova",
                method: reqwest::Method::GET,
                path: "/servers/1".to_owned(),
            }),
            status,
            message: "no".to_owned(),
            request_id: None,
            attempts: 1,
            retry_after: None,
        }
    }

    #[test]
    fn failures_are_transient_refused_or_of_unknown_outcome() {
        for status in [429, 503] {
            assert!(answered(status).refused() && answered(status).is_transient());
            assert!(!answered(status).outcome_unknown());
        }
        for status in [500, 502, 504] {
            assert!(answered(status).outcome_unknown() && answered(status).is_transient());
            assert!(!answered(status).refused());
        }
        for status in [400, 403, 404, 409] {
            assert!(!answered(status).is_transient(), "{status}");
        }
        let refused = Error::Connect {
            call: Box::new(Call {
                service: "nova",
                method: reqwest::Method::POST,
                path: "/servers/1/action".to_owned(),
            }),
            reason: "connection refused".to_owned(),
            attempts: 1,
        };
        assert!(refused.refused() && refused.is_transient());
        let keystone_down = Error::Auth {
            status: None,
            message: "unreachable".to_owned(),
        };
        assert!(keystone_down.is_transient());
        let bad_password = Error::Auth {
            status: Some(401),
            message: "no".to_owned(),
        };
        assert!(!bad_password.is_transient());
    }

    #[test]
    fn only_the_service_answering_404_or_409_is_not_found_or_a_conflict() {
        assert!(answered(404).is_not_found());
        assert!(answered(409).is_conflict());
        assert!(!answered(500).is_not_found());
        for status in [404, 409] {
            let login = Error::Auth {
                status: Some(status),
                message: "login failed".to_owned(),
            };
            assert_eq!(login.status(), Some(status));
            assert!(!login.is_not_found() && !login.is_conflict());
        }
    }
}
