//! The console's one mapping of what went wrong to an answer: a page that
//! says it (with the status code a script sees), or the way to the login
//! page.

use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::html::{Html, url_component};
use super::layout;
use crate::auth::{AuthError, Refusal};
use crate::service;

/// An answer other than the page asked for.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// No session, or its token is no longer valid: to the login page and
    /// back to `next` (`None`: 401, for streams and actions).
    #[error("sign in first: {reason}")]
    SignIn {
        reason: String,
        next: Option<String>,
    },
    /// 403: the role may not, or the request was not this site's.
    #[error("{0}")]
    Forbidden(String),
    /// 404.
    #[error("{0}")]
    NotFound(String),
    /// 400: a field is wrong (named).
    #[error("{0}")]
    BadRequest(String),
    /// 409: the state refuses it (a retry of a notification not failed).
    #[error("{0}")]
    Conflict(String),
    /// 429: over the request budget.
    #[error("{message}")]
    Throttled { message: String, wait: Duration },
    /// 503: the database, Keystone or the stream slots.
    #[error("{0}")]
    Unavailable(String),
    /// 500: details in the log under the reference.
    #[error("{0}")]
    Internal(String),
}

impl ConsoleError {
    /// The guard's refusal; `next` as in [`ConsoleError::SignIn`].
    pub fn refused(refusal: Refusal, next: Option<&str>) -> Self {
        match refusal {
            Refusal::Auth(err @ (AuthError::Missing | AuthError::Invalid)) => Self::SignIn {
                reason: err.to_string(),
                next: next.map(str::to_owned),
            },
            Refusal::Auth(err @ AuthError::Forbidden { .. }) => Self::Forbidden(err.to_string()),
            Refusal::Auth(err @ AuthError::Unavailable(_)) => Self::Unavailable(err.to_string()),
            throttled @ Refusal::Throttled { wait, .. } => Self::Throttled {
                message: throttled.to_string(),
                wait,
            },
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            Self::SignIn { .. } => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::Throttled { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<service::Error> for ConsoleError {
    fn from(err: service::Error) -> Self {
        use service::Error as E;
        match err {
            E::InvalidArgument(field) => Self::BadRequest(field.to_string()),
            e @ E::NotFound { .. } => Self::NotFound(e.to_string()),
            E::AlreadyExists(m) | E::FailedPrecondition(m) => Self::Conflict(m),
            E::Unavailable(m) => Self::Unavailable(m),
            E::Unauthenticated(reason) => Self::SignIn { reason, next: None },
            E::PermissionDenied(m) => Self::Forbidden(m),
            e @ E::Internal { .. } => Self::Internal(e.to_string()),
        }
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        if let Self::SignIn {
            next: Some(next), ..
        } = &self
        {
            let location = format!("/console/login?next={}", url_component(next));
            return (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response();
        }
        let status = self.status();
        let mut body = Html::new();
        body.raw("<h1>")
            .text(status.canonical_reason().unwrap_or("Error"))
            .raw("</h1><p class=\"error\" role=\"alert\">")
            .text(&self.to_string())
            .raw("</p>");
        if matches!(self, Self::SignIn { .. }) {
            body.raw("<p><a href=\"/console/login\">Sign in</a></p>");
        } else {
            body.raw("<p><a href=\"/console/\">Back to the overview</a></p>");
        }
        let mut response = (status, layout::bare_page("Error", &body)).into_response();
        if let Self::Throttled { wait, .. } = &self
            && let Ok(value) = HeaderValue::from_str(&wait.as_secs().max(1).to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        response
    }
}
