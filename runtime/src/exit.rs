//! The exit codes of the services' processes (`instanceha-api`,
//! `instanceha-engine`): one table, printed by their `--help` and listed
//! in deploy/README.md, so that a script or an init container can tell a
//! wrong setting from a dependency that is down.

use std::process::ExitCode;

/// How a service's process (or one of its commands: `--check`,
/// `db sync`, `db version`) ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// 0: done, or everything checked is fine.
    Success,
    /// 1: failed while running (the server stopped with an error).
    Failure,
    /// 2: a setting is wrong or a file it names cannot be read.
    Configuration,
    /// 3: a dependency does not answer (the database, Keystone).
    Unreachable,
    /// 4: a dependency answers but refuses the credentials.
    Refused,
    /// 5: the database is behind this version's migrations.
    Behind,
}

impl Exit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Self::Success => 0,
            Self::Failure => 1,
            Self::Configuration => 2,
            Self::Unreachable => 3,
            Self::Refused => 4,
            Self::Behind => 5,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code())
    }
}

/// The table for `--help` (clap's `after_help`).
pub const HELP: &str = "\
Exit codes:
  0  done; with --check or `db version`: everything checked is fine
  1  failed while running
  2  bad configuration: a setting is wrong or a file it names cannot be read
  3  a dependency does not answer (the database, Keystone)
  4  a dependency refuses the credentials (Keystone)
  5  the database is behind this version's migrations (`db version`, or a
     start with database.migrate_on_start = false): run `instanceha-api db sync`";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exit_has_its_own_code_and_the_help_lists_it() {
        let all = [
            Exit::Success,
            Exit::Failure,
            Exit::Configuration,
            Exit::Unreachable,
            Exit::Refused,
            Exit::Behind,
        ];
        let codes: std::collections::BTreeSet<u8> = all.iter().map(|e| e.code()).collect();
        assert_eq!(codes.len(), all.len());
        for code in codes {
            assert!(HELP.contains(&format!("\n  {code}  ")), "{code} missing");
        }
    }
}
