//! The binary's one-shot commands: `db sync` and `db version` (the
//! migrations as a step of an upgrade, as OpenStack-Helm's db-sync Jobs
//! run them) and `--check` (the settings, the files they name and the
//! database, changing nothing). Each ends with an [`Exit`], whose codes
//! `--help` lists.

use instanceha_runtime::exit::Exit;

use crate::auth::Guard;
use crate::config::Settings;
use crate::dispatch::{DispatchSettings, Dispatcher};
use crate::store::{self, SchemaVersion, Store, redact_url};

/// The exit for a database that failed: down or refusing the login is
/// "unreachable", behind is "behind", anything else a failure.
pub fn exit_of(err: &store::Error) -> Exit {
    match err {
        store::Error::Connect { .. } | store::Error::Unavailable(_) => Exit::Unreachable,
        store::Error::Behind(_) => Exit::Behind,
        _ => Exit::Failure,
    }
}

/// `db sync`: applies the migrations under the lock the API's start
/// takes and names those it applied.
pub async fn db_sync(settings: &Settings) -> Exit {
    match Store::sync(&settings.database).await {
        Ok(applied) => {
            for name in &applied {
                println!("applied {name}");
            }
            let latest = SchemaVersion::empty().latest;
            match applied.len() {
                0 => println!("nothing to apply: the database is at {latest}, the latest"),
                n => println!("{n} migrations applied: the database is at {latest}, the latest"),
            }
            Exit::Success
        }
        Err(e) => {
            eprintln!("instanceha-api: db sync: {e}");
            exit_of(&e)
        }
    }
}

/// `db version`: the applied and the latest migration, and whether the
/// database is behind ([`Exit::Behind`]).
pub async fn db_version(settings: &Settings) -> Exit {
    match Store::schema_version(&settings.database).await {
        Ok(version) => {
            print!("{}", describe(&version));
            if version.is_behind() {
                Exit::Behind
            } else {
                Exit::Success
            }
        }
        Err(e) => {
            eprintln!("instanceha-api: db version: {e}");
            exit_of(&e)
        }
    }
}

/// What `db version` prints for `version`.
fn describe(version: &SchemaVersion) -> String {
    let total = version.applied.len() + version.pending.len();
    let mut text = format!(
        "applied: {} ({} of {total})\nlatest:  {}\n",
        version.current().unwrap_or("none"),
        version.applied.len(),
        version.latest
    );
    if version.is_behind() {
        text.push_str(&format!(
            "behind: {} pending ({}): run `instanceha-api db sync`\n",
            version.pending.len(),
            version.pending.join(", ")
        ));
    } else {
        text.push_str("up to date\n");
    }
    text
}

/// `--check`: the settings (loaded already), the files they name, and
/// the database reachable, changing nothing on disk: no database file
/// made, no migration applied, no token file made.
pub async fn check(settings: &Settings) -> Exit {
    if let Err(e) = check_files(settings) {
        eprintln!("instanceha-api: {e}");
        return Exit::Configuration;
    }
    println!("settings and the files they name: ok");
    let url = redact_url(&settings.database.url);
    let version = match Store::schema_version(&settings.database).await {
        Ok(version) => version,
        Err(e) => {
            eprintln!("instanceha-api: database {url}: {e}");
            return exit_of(&e);
        }
    };
    println!(
        "database {url}: reachable, {} of {} migrations applied",
        version.applied.len(),
        version.applied.len() + version.pending.len()
    );
    match (version.is_behind(), settings.database.migrate_on_start) {
        (false, _) => Exit::Success,
        (true, true) => {
            println!("the migrations pending are applied at start (database.migrate_on_start)");
            Exit::Success
        }
        (true, false) => {
            eprintln!("instanceha-api: {}", store::Error::Behind(version));
            Exit::Behind
        }
    }
}

/// The authentication's, TLS's and the engine link's files, read as the
/// start reads them, but a link token the start would make is not made.
fn check_files(settings: &Settings) -> Result<(), String> {
    Guard::from_settings(&settings.auth).map_err(|e| format!("configuration: {e}"))?;
    settings
        .tls
        .load("tls")
        .map_err(|e| format!("configuration: {e}"))?;
    settings
        .tls
        .rustls("tls")
        .map_err(|e| format!("configuration: {e}"))?;
    if !settings.dispatch.enabled {
        return Ok(());
    }
    let token_file = settings.engine_token_file();
    let dispatch = if settings.dispatch.engine_token_file.is_none() && !token_file.exists() {
        println!(
            "the engine link's token {} does not exist yet: the first start of the API or the engine makes it",
            token_file.display()
        );
        settings.dispatch.clone()
    } else {
        DispatchSettings {
            engine_token_file: Some(token_file),
            ..settings.dispatch.clone()
        }
    };
    Dispatcher::check_link(&dispatch).map_err(|e| format!("configuration: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn db_version_says_what_is_pending() {
        let empty = SchemaVersion::empty();
        let text = describe(&empty);
        assert!(text.starts_with("applied: none (0 of "), "{text}");
        assert!(
            text.contains(&format!("latest:  {}", empty.latest)),
            "{text}"
        );
        assert!(text.contains("run `instanceha-api db sync`"), "{text}");
        let current = SchemaVersion {
            applied: empty.pending.clone(),
            pending: Vec::new(),
            latest: empty.latest.clone(),
        };
        let text = describe(&current);
        assert!(
            text.contains(&format!("applied: {}", empty.latest)),
            "{text}"
        );
        assert!(text.ends_with("up to date\n"), "{text}");
    }
}
