//! The schema's version: applying the migrations one replica at a time
//! (at start, or by `instanceha-api db sync`), and reading which are
//! applied without changing anything (`db version`, `--check`, a start
//! with `database.migrate_on_start = false`).

use std::time::Duration;

use instanceha_migrations::{Migrator, MigratorTrait};
use sea_orm::{
    ConnectOptions, ConnectionTrait, Database, DatabaseConnection, DbBackend, DbErr,
    TransactionOptions, TransactionTrait,
};

use super::{DatabaseSettings, OpenFailure};

/// Which migrations a database has, against this version's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaVersion {
    /// Applied, in order.
    pub applied: Vec<String>,
    /// This version's migrations not applied yet, in order.
    pub pending: Vec<String>,
    /// This version's last migration.
    pub latest: String,
}

impl SchemaVersion {
    /// What `applied` and this version's migrations make: `known` in order.
    fn of(applied: &[String], known: &[String]) -> Self {
        Self {
            applied: known
                .iter()
                .filter(|name| applied.contains(name))
                .cloned()
                .collect(),
            pending: known
                .iter()
                .filter(|name| !applied.contains(name))
                .cloned()
                .collect(),
            latest: known.last().cloned().unwrap_or_default(),
        }
    }

    /// Every migration pending: a database not created yet.
    pub fn empty() -> Self {
        Self::of(&[], &known())
    }

    /// Whether migrations are missing.
    pub fn is_behind(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The last migration applied, if any.
    pub fn current(&self) -> Option<&str> {
        self.applied.last().map(String::as_str)
    }
}

/// This version's migrations, in order.
fn known() -> Vec<String> {
    Migrator::migrations()
        .iter()
        .map(|m| m.name().to_owned())
        .collect()
}

/// The version of the database behind `db`, read without creating
/// anything (not even the migrations' table). A database that applied a
/// migration this version does not know (a newer version's) is an error.
pub(super) async fn version_of(db: &impl ConnectionTrait) -> Result<SchemaVersion, DbErr> {
    let applied: Vec<String> = Migrator::get_applied_migrations_read_only(db)
        .await?
        .iter()
        .map(|m| m.name().to_owned())
        .collect();
    Ok(SchemaVersion::of(&applied, &known()))
}

/// Applies the migrations, one replica at a time, and names those it
/// applied: replicas starting together on PostgreSQL or MySQL take a
/// database lock on one dedicated connection around the migrations, so
/// they do not race to create the same tables; on SQLite, processes
/// sharing the file take its write lock.
pub(super) async fn migrate(
    db: &DatabaseConnection,
    options: &DatabaseSettings,
) -> Result<Vec<String>, OpenFailure> {
    let (lock, unlock) = match db.get_database_backend() {
        DbBackend::Postgres => (
            format!("SELECT pg_advisory_lock({MIGRATION_LOCK})"),
            format!("SELECT pg_advisory_unlock({MIGRATION_LOCK})"),
        ),
        DbBackend::MySql => (
            "SELECT GET_LOCK('instanceha_migrations', 300)".to_owned(),
            "SELECT RELEASE_LOCK('instanceha_migrations')".to_owned(),
        ),
        // SQLite: processes sharing the file take its write lock first.
        _ => {
            let txn = db
                .begin_with_options(TransactionOptions {
                    isolation_level: None,
                    access_mode: None,
                    sqlite_transaction_mode: Some(sea_orm::SqliteTransactionMode::Immediate),
                })
                .await
                .map_err(OpenFailure::Migrate)?;
            let applied = apply(&txn).await.map_err(OpenFailure::Migrate)?;
            txn.commit().await.map_err(OpenFailure::Migrate)?;
            return Ok(applied);
        }
    };
    // A session-level lock needs one session: a pool of one connection.
    let mut connect = ConnectOptions::new(options.url.clone());
    connect
        .max_connections(1)
        .connect_timeout(options.connect_timeout)
        .acquire_timeout(Duration::from_secs(300))
        .sqlx_logging(false);
    let session = Database::connect(connect)
        .await
        .map_err(OpenFailure::Connect)?;
    session
        .execute_unprepared(&lock)
        .await
        .map_err(OpenFailure::Migrate)?;
    let migrated = apply(&session).await.map_err(OpenFailure::Migrate);
    let released = session.execute_unprepared(&unlock).await;
    let _ = session.close().await;
    let applied = migrated?;
    released.map_err(OpenFailure::Migrate)?;
    Ok(applied)
}

/// Applies the pending migrations on `db` (holding the lock) and names
/// them; each is logged.
async fn apply<'c, C>(db: &'c C) -> Result<Vec<String>, DbErr>
where
    C: ConnectionTrait,
    &'c C: sea_orm::IntoDatabaseExecutor<'c>,
{
    let pending: Vec<String> = Migrator::get_pending_migrations(db)
        .await?
        .iter()
        .map(|m| m.name().to_owned())
        .collect();
    Migrator::up(db, None).await?;
    for name in &pending {
        tracing::info!(migration = %name, "migration applied");
    }
    Ok(pending)
}

/// The key of the PostgreSQL advisory lock held while migrating.
const MIGRATION_LOCK: i64 = 0x696e_7374_6861; // "instha"

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn a_database_is_behind_by_the_migrations_it_lacks() {
        let known = names(&["a", "b", "c"]);
        let version = SchemaVersion::of(&names(&["a"]), &known);
        assert_eq!(version.current(), Some("a"));
        assert_eq!(version.pending, names(&["b", "c"]));
        assert_eq!(version.latest, "c");
        assert!(version.is_behind());
        let current = SchemaVersion::of(&known, &known);
        assert!(!current.is_behind());
        assert_eq!(current.current(), Some("c"));
        let empty = SchemaVersion::of(&[], &known);
        assert_eq!(empty.current(), None);
        assert_eq!(empty.pending, known);
    }

    #[test]
    fn this_version_knows_its_latest_migration() {
        let empty = SchemaVersion::empty();
        assert_eq!(empty.latest, *empty.pending.last().unwrap());
        assert!(empty.is_behind());
    }
}
