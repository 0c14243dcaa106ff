//! The one mapping from the service layer's errors to gRPC statuses.

use tonic::{Code, Status};

use crate::domain::InvalidField;
use crate::service::Error;

impl From<Error> for Status {
    fn from(err: Error) -> Self {
        let code = match &err {
            Error::InvalidArgument(_) => Code::InvalidArgument,
            Error::NotFound { .. } => Code::NotFound,
            Error::AlreadyExists(_) => Code::AlreadyExists,
            Error::FailedPrecondition(_) => Code::FailedPrecondition,
            Error::Unavailable(_) => Code::Unavailable,
            Error::Unauthenticated(_) => Code::Unauthenticated,
            Error::PermissionDenied(_) => Code::PermissionDenied,
            Error::Internal { .. } => Code::Internal,
        };
        Status::new(code, bounded(err.to_string()))
    }
}

impl From<InvalidField> for Status {
    fn from(err: InvalidField) -> Self {
        Error::InvalidArgument(err).into()
    }
}

/// The most of a message a status carries: `grpc-message` is a header,
/// and HTTP/2 peers refuse header blocks over 8 to 16 KiB.
const MAX_MESSAGE_BYTES: usize = 2048;

/// `message`, cut at a character boundary to [`MAX_MESSAGE_BYTES`].
fn bounded(mut message: String) -> String {
    if message.len() > MAX_MESSAGE_BYTES {
        let mut end = MAX_MESSAGE_BYTES - 3;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str("...");
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_message_stays_small_whatever_it_quotes() {
        let status = Status::from(Error::AlreadyExists("é".repeat(10_000)));
        assert_eq!(status.code(), Code::AlreadyExists);
        assert!(status.message().len() <= MAX_MESSAGE_BYTES);
        assert!(status.message().ends_with("..."));
        let short = Status::from(Error::AlreadyExists("taken".to_owned()));
        assert_eq!(short.message(), "taken");
    }
}
