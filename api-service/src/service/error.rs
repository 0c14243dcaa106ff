//! The service layer's error: what went wrong, in terms a client can act
//! on. `grpc::error` maps it to a `tonic::Status` in one place.

use crate::auth::AuthError;
use crate::domain::InvalidField;
use crate::store;

#[derive(Clone, Debug, thiserror::Error)]
pub enum Error {
    /// The request is malformed; the field is named.
    #[error("{0}")]
    InvalidArgument(#[from] InvalidField),
    #[error("{kind} {id} not found")]
    NotFound { kind: &'static str, id: String },
    #[error("{0}")]
    AlreadyExists(String),
    /// The request is valid but the system's state refuses it.
    #[error("{0}")]
    FailedPrecondition(String),
    /// A dependency (the database, the engine, Keystone) is not answering.
    #[error("{0}")]
    Unavailable(String),
    /// No valid credentials.
    #[error("{0}")]
    Unauthenticated(String),
    /// Valid credentials without the role the operation needs.
    #[error("{0}")]
    PermissionDenied(String),
    /// A bug or corrupt data; details are in the log, not in the answer.
    #[error("internal error (reference {reference})")]
    Internal { reference: String },
}

impl Error {
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::InvalidArgument(InvalidField::new(field, reason))
    }

    /// Logs `detail` with a reference the client sees.
    pub fn internal(detail: &dyn std::fmt::Display) -> Self {
        let reference = uuid::Uuid::new_v4().simple().to_string()[..12].to_owned();
        tracing::error!(reference = %reference, error = %detail, "internal error");
        Self::Internal { reference }
    }
}

impl From<store::Error> for Error {
    fn from(err: store::Error) -> Self {
        match err {
            store::Error::NotFound { kind, id } => Self::NotFound { kind, id },
            store::Error::Conflict(message) => Self::AlreadyExists(message),
            store::Error::Stale(message) | store::Error::Rejected(message) => {
                Self::FailedPrecondition(message)
            }
            store::Error::Illegal(illegal) => Self::FailedPrecondition(illegal.to_string()),
            store::Error::Connect { .. } => Self::Unavailable(err.to_string()),
            store::Error::Unwritable(ref reason) => {
                tracing::warn!(error = %reason, "the database cannot write");
                Self::Unavailable(format!(
                    "the database cannot write ({reason}); nothing was stored: retry later"
                ))
            }
            store::Error::Unavailable(ref reason) | store::Error::Contention(ref reason) => {
                tracing::warn!(error = %reason, "database unavailable");
                Self::Unavailable("the database is not answering; retry later".to_owned())
            }
            store::Error::Corrupt { .. }
            | store::Error::Migrate(_)
            | store::Error::Behind(_)
            | store::Error::Database(_) => Self::internal(&err),
        }
    }
}

impl From<AuthError> for Error {
    fn from(err: AuthError) -> Self {
        match err {
            AuthError::Missing | AuthError::Invalid => Self::Unauthenticated(err.to_string()),
            AuthError::Forbidden { .. } => Self::PermissionDenied(err.to_string()),
            AuthError::Unavailable(_) => Self::Unavailable(err.to_string()),
        }
    }
}
