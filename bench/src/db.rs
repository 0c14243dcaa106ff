//! The API's database for a run: a fresh SQLite file in the run's
//! directory, or a fresh PostgreSQL database created (and dropped
//! afterwards) with `psql` on a server where the given user may create
//! databases (the machine's: `postgres@127.0.0.1:5432`, trust auth).

use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, bail};

/// Which database the API runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    /// A server URL with a user that may create databases, e.g.
    /// `postgres://postgres@127.0.0.1:5432/postgres`.
    Postgres {
        admin_url: String,
    },
}

impl Backend {
    pub fn name(&self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres { .. } => "postgresql",
        }
    }
}

/// A database made for one run; a PostgreSQL one is dropped on drop.
pub struct Database {
    pub url: String,
    postgres: Option<(String, String)>,
}

impl Database {
    /// Creates an empty database (the API migrates it at start).
    pub fn create(backend: &Backend, dir: &Path, tag: &str) -> anyhow::Result<Self> {
        match backend {
            Backend::Sqlite => Ok(Self {
                url: format!("sqlite://{}", dir.join(format!("{tag}.db")).display()),
                postgres: None,
            }),
            Backend::Postgres { admin_url } => {
                let name = format!(
                    "instanceha_bench_{}_{}",
                    tag.replace('-', "_"),
                    std::process::id()
                );
                psql(admin_url, &format!("DROP DATABASE IF EXISTS {name}"))?;
                psql(admin_url, &format!("CREATE DATABASE {name}"))?;
                let url = with_database(admin_url, &name)?;
                Ok(Self {
                    url,
                    postgres: Some((admin_url.clone(), name)),
                })
            }
        }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Some((admin_url, name)) = &self.postgres
            && let Err(e) = psql(
                admin_url,
                &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            )
        {
            eprintln!("instanceha-bench: cannot drop database {name}: {e}");
        }
    }
}

/// `admin_url` with its database replaced by `name`.
fn with_database(admin_url: &str, name: &str) -> anyhow::Result<String> {
    let (base, query) = match admin_url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (admin_url, None),
    };
    let Some(scheme_end) = base.find("://") else {
        bail!("{admin_url:?} is not a postgres:// URL");
    };
    let after = &base[scheme_end + 3..];
    let authority = after.split('/').next().unwrap_or(after);
    let mut url = format!("{}://{authority}/{name}", &base[..scheme_end]);
    if let Some(query) = query {
        url.push('?');
        url.push_str(query);
    }
    Ok(url)
}

fn psql(admin_url: &str, sql: &str) -> anyhow::Result<()> {
    let output = Command::new("psql")
        .arg(admin_url)
        .args(["-v", "ON_ERROR_STOP=1", "-qAtc", sql])
        .output()
        .context("running psql (is the PostgreSQL client installed?)")?;
    if !output.status.success() {
        bail!(
            "psql {sql:?}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_is_replaced_in_the_url() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/postgres", "x").unwrap(),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_database("postgres://u:p@h/db?sslmode=disable", "x").unwrap(),
            "postgres://u:p@h/x?sslmode=disable"
        );
        assert_eq!(
            with_database("postgresql://h", "x").unwrap(),
            "postgresql://h/x"
        );
    }
}
