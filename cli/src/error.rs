//! Everything a command can fail with, and the exit code each failure
//! gives: the codes are a contract with scripts (see `EXIT_CODES`).

use tonic::Code;

use crate::{client, config, login, output};

/// The process exit codes. Scripts may rely on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Ok = 0,
    Other = 1,
    Usage = 2,
    NotFound = 3,
    InvalidArgument = 4,
    AlreadyExists = 5,
    FailedPrecondition = 6,
    Unavailable = 7,
    Unauthenticated = 8,
    RecoveryFailed = 10,
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        Self::from(exit as u8)
    }
}

/// The exit codes as `--help` and the README show them.
pub const EXIT_CODES: &str = "\
Exit codes:
  0   success (watch: the notification ended finished or ignored)
  1   any other error
  2   usage error: bad flags or arguments, a bad configuration file or clouds.yaml
  3   not found
  4   invalid argument (the message names the field)
  5   already exists
  6   failed precondition (refused in the current state)
  7   instanceha-api or Keystone unavailable, or no answer within --timeout
  8   unauthenticated (Keystone refused the login) or permission denied
  10  watch: the notification ended failed";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] config::Error),
    #[error(transparent)]
    Api(#[from] client::Error),
    #[error(transparent)]
    Login(#[from] login::Error),
    #[error(
        "not found: no {kind} is named {name:?} — check the name (`instanceha {kind} list`) or \
         pass the ID"
    )]
    NoSuchName { kind: &'static str, name: String },
    #[error("{count} {kind}s are named {name:?} — pass the ID instead")]
    AmbiguousName {
        kind: &'static str,
        name: String,
        count: usize,
    },
    /// A usage mistake clap cannot see (for example a payload key given
    /// twice).
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Output(#[from] output::Error),
    #[error("cannot write to standard output: {0}")]
    Write(std::io::Error),
    /// The demo's embedded cloud or services could not run.
    #[cfg(feature = "demo")]
    #[error("demo: {0}")]
    Demo(String),
}

impl Error {
    pub fn exit(&self) -> Exit {
        match self {
            Self::Config(_) | Self::Usage(_) => Exit::Usage,
            Self::Api(err) => exit_for_code(err.code()),
            Self::Login(err) => err.exit(),
            Self::NoSuchName { .. } => Exit::NotFound,
            Self::AmbiguousName { .. } => Exit::InvalidArgument,
            Self::Output(output::Error::UnknownColumn { .. }) => Exit::Usage,
            Self::Output(_) | Self::Write(_) => Exit::Other,
            #[cfg(feature = "demo")]
            Self::Demo(_) => Exit::Other,
        }
    }

    /// Stdout was closed early (`instanceha ... | head`): not worth a
    /// message.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, Self::Write(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

pub fn exit_for_code(code: Code) -> Exit {
    match code {
        Code::Ok => Exit::Ok,
        Code::NotFound => Exit::NotFound,
        Code::InvalidArgument | Code::OutOfRange => Exit::InvalidArgument,
        Code::AlreadyExists => Exit::AlreadyExists,
        Code::FailedPrecondition | Code::Aborted => Exit::FailedPrecondition,
        Code::Unavailable | Code::DeadlineExceeded => Exit::Unavailable,
        Code::Unauthenticated | Code::PermissionDenied => Exit::Unauthenticated,
        Code::Cancelled
        | Code::Unknown
        | Code::ResourceExhausted
        | Code::Unimplemented
        | Code::Internal
        | Code::DataLoss => Exit::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_codes_map_to_the_documented_exit_codes() {
        assert_eq!(exit_for_code(Code::NotFound) as u8, 3);
        assert_eq!(exit_for_code(Code::InvalidArgument) as u8, 4);
        assert_eq!(exit_for_code(Code::AlreadyExists) as u8, 5);
        assert_eq!(exit_for_code(Code::FailedPrecondition) as u8, 6);
        assert_eq!(exit_for_code(Code::Unavailable) as u8, 7);
        assert_eq!(exit_for_code(Code::DeadlineExceeded) as u8, 7);
        assert_eq!(exit_for_code(Code::Unauthenticated) as u8, 8);
        assert_eq!(exit_for_code(Code::PermissionDenied) as u8, 8);
        assert_eq!(exit_for_code(Code::Internal) as u8, 1);
    }

    #[test]
    fn every_exit_code_is_documented() {
        for exit in [
            Exit::Ok,
            Exit::Other,
            Exit::Usage,
            Exit::NotFound,
            Exit::InvalidArgument,
            Exit::AlreadyExists,
            Exit::FailedPrecondition,
            Exit::Unavailable,
            Exit::Unauthenticated,
            Exit::RecoveryFailed,
        ] {
            let code = format!("\n  {:<4}", exit as u8);
            assert!(EXIT_CODES.contains(&code), "{exit:?} is not in EXIT_CODES");
        }
    }

    #[test]
    fn name_errors_have_their_own_codes() {
        let none = Error::NoSuchName {
            kind: "segment",
            name: "rack-9".into(),
        };
        assert_eq!(none.exit(), Exit::NotFound);
        assert!(none.to_string().contains("instanceha segment list"));
        let several = Error::AmbiguousName {
            kind: "host",
            name: "x".into(),
            count: 2,
        };
        assert_eq!(several.exit(), Exit::InvalidArgument);
    }
}
