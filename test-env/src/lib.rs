//! The environments some tests need, decided when their crate is built, so
//! that a test without its environment is *ignored* (libtest's summary
//! counts it, `N ignored`, and lists it with the reason), not a test that
//! returned early and counted as passed.
//!
//! A crate with such tests calls [`declare`] from its `build.rs` with the
//! environments they need. For each one whose variable is unset (or
//! empty), the crate is built with the cfg [`Environment::cfg`]
//! (`no_postgres`...), and its tests carry, after `#[test]` or
//! `#[tokio::test]`:
//!
//! ```text
//! #[cfg_attr(no_postgres, ignore = "set INSTANCEHA_TEST_POSTGRES_URL to run")]
//! ```
//!
//! Under CI (`CI` set, as `.ci/run` sets it) no cfg is ever emitted: every
//! such test runs, and one whose environment is missing fails, naming its
//! variable, instead of being ignored. Setting or clearing a variable
//! rebuilds the crate (Cargo reruns the build script).
//!
//! What cannot be known at build time (root, an installed browser) stays a
//! skip at run time, said past libtest's capture by [`say_skipped`].

/// An environment that tests need, named by one variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Environment {
    /// A PostgreSQL server to create test databases on.
    Postgres,
    /// A MySQL/MariaDB server to create test databases on.
    Mysql,
    /// A Python with openstacksdk, python-masakariclient and
    /// python-openstackclient.
    PythonClients,
    /// A real OpenStack control plane (conformance/real-openstack).
    RealOpenstack,
    /// The BMC emulators, sushy-tools and pyghmi (agent/ci/install-test-deps).
    BmcEmulators,
}

impl Environment {
    /// Every environment.
    pub const ALL: [Self; 5] = [
        Self::Postgres,
        Self::Mysql,
        Self::PythonClients,
        Self::RealOpenstack,
        Self::BmcEmulators,
    ];

    /// The variable that provides it.
    pub fn variable(self) -> &'static str {
        match self {
            Self::Postgres => "INSTANCEHA_TEST_POSTGRES_URL",
            Self::Mysql => "INSTANCEHA_TEST_MYSQL_URL",
            Self::PythonClients => "INSTANCEHA_TEST_PYTHON",
            Self::RealOpenstack => "INSTANCEHA_REAL_OPENSTACK_CTL",
            Self::BmcEmulators => "INSTANCEHA_TEST_BMC_PYTHON",
        }
    }

    /// The cfg set when it is missing.
    pub fn cfg(self) -> &'static str {
        match self {
            Self::Postgres => "no_postgres",
            Self::Mysql => "no_mysql",
            Self::PythonClients => "no_python_clients",
            Self::RealOpenstack => "no_real_openstack",
            Self::BmcEmulators => "no_bmc_emulators",
        }
    }
}

/// Says on the test run's standard error, past libtest's capture (which
/// hides what a passing test prints), that `test` did not do its work,
/// for the skips only known at run time (root for a tmpfs, Chromium
/// installed): `SKIPPED test: reason`.
pub fn say_skipped(test: &str, reason: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {reason}");
}

/// The build script's instructions for `environments`, given how to read
/// a variable: for each, rerun when its variable (or `CI`) changes,
/// declare its cfg, and set it when the variable is missing outside CI.
pub fn instructions(
    environments: &[Environment],
    var: impl Fn(&str) -> Option<String>,
) -> Vec<String> {
    let present = |name: &str| var(name).is_some_and(|v| !v.trim().is_empty());
    let under_ci = var("CI").is_some();
    let mut out = vec!["cargo::rerun-if-env-changed=CI".to_owned()];
    for environment in environments {
        out.push(format!(
            "cargo::rerun-if-env-changed={}",
            environment.variable()
        ));
        out.push(format!("cargo::rustc-check-cfg=cfg({})", environment.cfg()));
        if !under_ci && !present(environment.variable()) {
            out.push(format!("cargo::rustc-cfg={}", environment.cfg()));
        }
    }
    out
}

/// Prints [`instructions`] for the process's environment: call it from a
/// `build.rs`.
pub fn declare(environments: &[Environment]) {
    for line in instructions(environments, |name| std::env::var(name).ok()) {
        println!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    fn cfgs(lines: &[String]) -> Vec<&str> {
        lines
            .iter()
            .filter_map(|l| l.strip_prefix("cargo::rustc-cfg="))
            .collect()
    }

    #[test]
    fn a_missing_or_empty_variable_sets_its_cfg() {
        let lines = instructions(
            &[
                Environment::Postgres,
                Environment::Mysql,
                Environment::PythonClients,
            ],
            with(&[
                ("INSTANCEHA_TEST_MYSQL_URL", "mysql://x"),
                ("INSTANCEHA_TEST_PYTHON", " "),
            ]),
        );
        assert_eq!(cfgs(&lines), ["no_postgres", "no_python_clients"]);
        assert!(
            lines.contains(&"cargo::rerun-if-env-changed=INSTANCEHA_TEST_POSTGRES_URL".to_owned())
        );
        assert!(lines.contains(&"cargo::rustc-check-cfg=cfg(no_mysql)".to_owned()));
        assert!(lines.contains(&"cargo::rerun-if-env-changed=CI".to_owned()));
    }

    #[test]
    fn under_ci_nothing_is_ignored() {
        let lines = instructions(&Environment::ALL, with(&[("CI", "1")]));
        assert_eq!(cfgs(&lines), Vec::<&str>::new());
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.contains("rustc-check-cfg"))
                .count(),
            Environment::ALL.len()
        );
    }

    #[test]
    fn names_are_distinct() {
        for (i, a) in Environment::ALL.iter().enumerate() {
            for b in &Environment::ALL[i + 1..] {
                assert_ne!(a.variable(), b.variable());
                assert_ne!(a.cfg(), b.cfg());
            }
        }
    }
}
