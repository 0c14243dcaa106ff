//! The store: the only module that talks to the database (sea-orm over
//! SQLite, PostgreSQL or MySQL/MariaDB). It maps rows to domain types and
//! runs every multi-step change in one transaction; the rules that decide
//! what may change are passed in by the service layer as closures, so they
//! stay plain Rust.

pub mod entity;
mod events;
mod health;
mod hosts;
mod intake;
mod notifications;
mod run_state;
mod runs;
mod schema;
mod segments;
mod trace;
mod vmoves;

use std::str::FromStr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use instanceha_runtime::backoff::Backoff;
use instanceha_runtime::clock::Clock;
use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
use sea_orm::{
    ConnectOptions, Database, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr,
    IsolationLevel, SqlErr, TransactionOptions, TransactionTrait,
};

pub use events::Applied;
pub use intake::{Intake, IntakeWindows};
pub use notifications::Unfinished;
pub use runs::Resolved;
pub use schema::SchemaVersion;

/// Errors of the store, classified here: no database driver type leaves
/// this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{kind} {id} not found")]
    NotFound { kind: &'static str, id: String },
    /// A compare-and-set lost: the row changed since it was read.
    #[error("{0}")]
    Stale(String),
    /// A run's event that the plan or the status rules refuse.
    #[error("{0}")]
    Rejected(String),
    /// The status rules refuse the change.
    #[error(transparent)]
    Illegal(#[from] crate::status::IllegalTransition),
    /// A unique constraint refused the write.
    #[error("{0}")]
    Conflict(String),
    /// A row holds a value this version cannot read.
    #[error("{table}.{column} holds {value:?}, which is not a value this version knows")]
    Corrupt {
        table: &'static str,
        column: &'static str,
        value: String,
    },
    /// The database does not answer (no connection, or none free in time).
    #[error("the database does not answer: {0}")]
    Unavailable(String),
    /// The database aborted the transaction to break a deadlock or a
    /// serialization conflict (SQLSTATE 40001, PostgreSQL's 40P01), or
    /// SQLite stayed busy: trying again may succeed.
    #[error("the database aborted the change: {0}")]
    Contention(String),
    #[error("cannot open the database at {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("cannot migrate the database: {0}")]
    Migrate(String),
    /// `database.migrate_on_start = false` and migrations are missing.
    #[error(
        "the database is behind: {} of this version's migrations not applied (the last, {}): run `instanceha-api db sync` (database.migrate_on_start = false)",
        .0.pending.len(), .0.latest
    )]
    Behind(SchemaVersion),
    /// The database cannot write: its disk is full, it is read-only, or
    /// its storage fails (SQLite's FULL, IOERR, READONLY; PostgreSQL's
    /// 53100, 58030, 25006; MySQL's 1021, 1114, 1290). Nothing was stored.
    #[error("the database cannot write: {0}")]
    Unwritable(String),
    /// Anything else the database reported.
    #[error("database error: {0}")]
    Database(String),
}

impl From<DbErr> for Error {
    fn from(err: DbErr) -> Self {
        if matches!(err, DbErr::Conn(_) | DbErr::ConnectionAcquire(_)) {
            return Self::Unavailable(err.to_string());
        }
        if aborted_by_database(&err) || sqlite_busy(&err) {
            return Self::Contention(err.to_string());
        }
        if health::cannot_write(&err) {
            return Self::Unwritable(err.to_string());
        }
        Self::Database(err.to_string())
    }
}

impl Error {
    fn not_found(kind: &'static str, id: impl ToString) -> Self {
        Self::NotFound {
            kind,
            id: id.to_string(),
        }
    }

    /// The error for `err`, or a conflict naming `what` if it is a unique
    /// constraint violation.
    fn unique(err: DbErr, what: impl FnOnce() -> String) -> Self {
        match err.sql_err() {
            Some(SqlErr::UniqueConstraintViolation(_)) => Self::Conflict(what()),
            _ => Self::from(err),
        }
    }

    /// Whether the change lost to a concurrent one and may succeed if
    /// tried again: a unique violation, or a transaction the database
    /// aborted.
    pub fn is_contention(&self) -> bool {
        matches!(self, Self::Conflict(_) | Self::Contention(_))
    }

    /// Whether the database failed for a passing reason: it did not answer,
    /// or it aborted the change. Trying again later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Unavailable(_) | Self::Contention(_) | Self::Unwritable(_)
        )
    }
}

/// SQLSTATE 40001 (serialization failure; MySQL's deadlock too) or
/// PostgreSQL's 40P01 (deadlock detected).
fn aborted_by_database(err: &DbErr) -> bool {
    let (DbErr::Exec(sea_orm::RuntimeErr::SqlxError(e))
    | DbErr::Query(sea_orm::RuntimeErr::SqlxError(e))) = err
    else {
        return false;
    };
    match &**e {
        sea_orm::sqlx::Error::Database(db) => {
            matches!(db.code().as_deref(), Some("40001" | "40P01"))
        }
        _ => false,
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `[database]`: how to reach the database.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSettings {
    /// `sqlite://PATH` (created and migrated at start; WAL mode),
    /// `postgres://USER:PASSWORD@HOST/DB` or `mysql://USER:PASSWORD@HOST/DB`.
    pub url: String,
    /// Connection pool size for PostgreSQL and MySQL (SQLite always uses
    /// one connection: it has one writer).
    pub max_connections: u32,
    /// How long to wait for a connection.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Whether the API applies the migrations when it starts (under a
    /// lock, one replica at a time). With `false` they are a step of the
    /// upgrade (`instanceha-api db sync`, a Kubernetes Job) and the API
    /// refuses to start on a database that is behind.
    pub migrate_on_start: bool,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        Self {
            url: "sqlite://instanceha.db".to_owned(),
            max_connections: 16,
            connect_timeout: Duration::from_secs(10),
            migrate_on_start: true,
        }
    }
}

impl DatabaseSettings {
    /// The default settings for the database at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            ..Self::default()
        }
    }
}

/// The database, migrated and ready.
#[derive(Clone, Debug)]
pub struct Store {
    /// The connection pool; replaced (SQLite) after a transaction failed,
    /// so that no connection stays inside it.
    db: Arc<RwLock<DatabaseConnection>>,
    /// How to open it again.
    settings: Arc<DatabaseSettings>,
    /// Whether the database can write, as the last probe or write found.
    health: Arc<health::StorageHealth>,
    /// Connections in the pool (1 on SQLite).
    pool_size: u32,
    /// Where "now" comes from: the system's clock, or Tokio's in tests.
    clock: Clock,
}

impl Store {
    /// Connects, creating an SQLite file (in WAL mode) if needed, and
    /// applies the migrations.
    ///
    /// SQLite answers "database is locked" at once, without waiting for its
    /// busy timeout, while another connection switches a new file to WAL or
    /// rebuilds its WAL index; replicas opening one file together retry
    /// that until the connect timeout runs out.
    pub async fn open(options: &DatabaseSettings) -> Result<Self> {
        Ok(Self::open_reporting(options).await?.0)
    }

    /// Applies the migrations (`instanceha-api db sync`), under the lock
    /// the API's start takes, whatever `database.migrate_on_start` says;
    /// names those it applied.
    pub async fn sync(options: &DatabaseSettings) -> Result<Vec<String>> {
        let options = DatabaseSettings {
            migrate_on_start: true,
            ..options.clone()
        };
        let (store, applied) = Self::open_reporting(&options).await?;
        store.close().await?;
        Ok(applied)
    }

    /// [`open`](Self::open), naming the migrations it applied.
    pub async fn open_reporting(options: &DatabaseSettings) -> Result<(Self, Vec<String>)> {
        if let Some(path) = sqlite_file(&options.url) {
            make_private(&path).map_err(|e| Error::Connect {
                url: redact_url(&options.url),
                reason: format!("cannot make {} private (0600): {e}", path.display()),
            })?;
        }
        let mut retries = Backoff::new(Duration::from_millis(10), Duration::from_millis(200))
            .retries(None, Some(options.connect_timeout));
        loop {
            // Boxed: the future of every start nests this one, and its
            // layout would otherwise pass the compiler's query depth.
            match Box::pin(Self::open_once(options)).await {
                Ok(store) => return Ok(store),
                Err(OpenFailure::Connect(source) | OpenFailure::Migrate(source))
                    if sqlite_busy(&source) && !retries.spent() =>
                {
                    tracing::debug!(error = %source, "sqlite file busy at open, retrying");
                    retries.wait(None).await;
                }
                Err(OpenFailure::Connect(source)) => {
                    return Err(Error::Connect {
                        url: redact_url(&options.url),
                        reason: source.to_string(),
                    });
                }
                Err(OpenFailure::Migrate(source)) => {
                    return Err(Error::Migrate(source.to_string()));
                }
                Err(OpenFailure::Behind(version)) => return Err(Error::Behind(version)),
            }
        }
    }

    async fn open_once(options: &DatabaseSettings) -> Result<(Self, Vec<String>), OpenFailure> {
        let db = connect(options).await.map_err(OpenFailure::Connect)?;
        let applied = if options.migrate_on_start {
            schema::migrate(&db, options).await?
        } else {
            let version = schema::version_of(&db)
                .await
                .map_err(OpenFailure::Migrate)?;
            if version.is_behind() {
                let _ = db.close().await;
                return Err(OpenFailure::Behind(version));
            }
            Vec::new()
        };
        let pool_size = if options.url.starts_with("sqlite:") {
            1
        } else {
            options.max_connections.max(1)
        };
        let store = Self {
            db: Arc::new(RwLock::new(db)),
            settings: Arc::new(options.clone()),
            health: Arc::default(),
            pool_size,
            clock: Clock::system(),
        };
        Ok((store, applied))
    }

    /// The database's schema version, read without changing anything: an
    /// SQLite file is opened read-only and not created (a missing one has
    /// every migration pending), and no migrations' table is made.
    pub async fn schema_version(options: &DatabaseSettings) -> Result<SchemaVersion> {
        let unreachable = |source: DbErr| Error::Connect {
            url: redact_url(&options.url),
            reason: source.to_string(),
        };
        let mut connect = ConnectOptions::new(options.url.clone());
        connect
            .max_connections(1)
            .connect_timeout(options.connect_timeout)
            .acquire_timeout(options.connect_timeout)
            .sqlx_logging(false);
        if options.url.starts_with("sqlite:") {
            // Without a `-wal` file no connection has the database open
            // and the file holds everything: read it as immutable, which
            // makes no `-wal` or `-shm` beside it. With one, a reader joins
            // the WAL that exists.
            let mut wal_exists = false;
            if let Some(path) = sqlite_file(&options.url) {
                if !path.exists() {
                    return Ok(SchemaVersion::empty());
                }
                let mut wal = path.into_os_string();
                wal.push("-wal");
                wal_exists = std::path::Path::new(&wal).exists();
            }
            connect.map_sqlx_sqlite_opts(move |o| {
                o.create_if_missing(false)
                    .read_only(true)
                    .immutable(!wal_exists)
            });
        }
        let db = Database::connect(connect).await.map_err(unreachable)?;
        let version = schema::version_of(&db)
            .await
            .map_err(|e| Error::Migrate(e.to_string()));
        let _ = db.close().await;
        version
    }

    /// The connection pool as it is now.
    fn db(&self) -> DatabaseConnection {
        self.db.read().expect("the pool lock").clone()
    }
}

/// A connection pool for `options`.
async fn connect(options: &DatabaseSettings) -> std::result::Result<DatabaseConnection, DbErr> {
    {
        let mut connect = ConnectOptions::new(options.url.clone());
        connect
            .connect_timeout(options.connect_timeout)
            .acquire_timeout(options.connect_timeout)
            .sqlx_logging(false);
        if options.url.starts_with("sqlite:") {
            connect
                .max_connections(1)
                .min_connections(1)
                .map_sqlx_sqlite_opts(|o| {
                    o.create_if_missing(true)
                        .journal_mode(SqliteJournalMode::Wal)
                        .synchronous(SqliteSynchronous::Normal)
                        .busy_timeout(Duration::from_secs(10))
                        .foreign_keys(true)
                });
        } else {
            connect.max_connections(options.max_connections.max(1));
        }
        Database::connect(connect).await
    }
}

impl Store {
    /// The store reading the time from `clock` (tests pass Tokio's).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The current time at the precision every backend stores
    /// (microseconds).
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now().trunc_subsecs(6)
    }

    /// Connections in the pool: how many statements can run at once.
    pub fn pool_size(&self) -> u32 {
        self.pool_size
    }

    pub fn backend(&self) -> DbBackend {
        self.db().get_database_backend()
    }

    /// Checks that the database answers.
    pub async fn ping(&self) -> Result<()> {
        Ok(self.db().ping().await?)
    }

    pub async fn close(self) -> Result<()> {
        Ok(self.db().close().await?)
    }

    /// A transaction for a read-check-write sequence: `BEGIN IMMEDIATE` on
    /// SQLite (take the write lock first), READ COMMITTED elsewhere so that
    /// each statement sees what other transactions committed.
    async fn begin_transaction(&self) -> Result<DatabaseTransaction> {
        let options = match self.backend() {
            DbBackend::Sqlite => TransactionOptions {
                isolation_level: None,
                access_mode: None,
                sqlite_transaction_mode: Some(sea_orm::SqliteTransactionMode::Immediate),
            },
            _ => TransactionOptions {
                isolation_level: Some(IsolationLevel::ReadCommitted),
                access_mode: None,
                sqlite_transaction_mode: None,
            },
        };
        Ok(self.db().begin_with_options(options).await?)
    }
}

/// Why opening the database failed, before it is classified.
enum OpenFailure {
    Connect(DbErr),
    Migrate(DbErr),
    /// Migrations missing, and the settings say not to apply them.
    Behind(SchemaVersion),
}

/// Whether `err` is SQLite's "database is busy" or "database is locked"
/// (primary result codes 5 and 6, with any extended code).
/// The file of an SQLite URL (`sqlite://PATH`, `sqlite:PATH`), `None`
/// for an in-memory database or another backend.
pub fn sqlite_file(url: &str) -> Option<std::path::PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if path.is_empty() || path == ":memory:" || query.split('&').any(|p| p == "mode=memory") {
        return None;
    }
    Some(std::path::PathBuf::from(path))
}

/// The database file created (or narrowed to) 0600 in a directory made
/// 0700 before SQLite opens it, and its `-wal` and `-shm` files narrowed
/// if they exist: SQLite gives the files it creates beside a database the
/// database's own mode, so all three stay private whatever the umask.
fn make_private(path: &std::path::Path) -> std::io::Result<()> {
    use instanceha_runtime::private;
    private::ensure_file(path)?;
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut beside = path.as_os_str().to_owned();
        beside.push(suffix);
        let beside = std::path::PathBuf::from(beside);
        if beside.exists() {
            private::ensure_file(&beside)?;
        }
    }
    Ok(())
}

fn sqlite_busy(err: &DbErr) -> bool {
    let (DbErr::Conn(sea_orm::RuntimeErr::SqlxError(e))
    | DbErr::Exec(sea_orm::RuntimeErr::SqlxError(e))
    | DbErr::Query(sea_orm::RuntimeErr::SqlxError(e))) = err
    else {
        return false;
    };
    let sea_orm::sqlx::Error::Database(db) = &**e else {
        return false;
    };
    if db
        .try_downcast_ref::<sea_orm::sqlx::sqlite::SqliteError>()
        .is_none()
    {
        return false;
    }
    db.code()
        .and_then(|code| code.parse::<i32>().ok())
        .is_some_and(|code| matches!(code & 0xff, 5 | 6))
}

/// The URL without its password, for messages and logs.
pub fn redact_url(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((credentials, host)) => {
                let user = credentials.split(':').next().unwrap_or_default();
                format!("{scheme}://{user}:***@{host}")
            }
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

fn parse_uuid<T: FromStr>(table: &'static str, column: &'static str, value: &str) -> Result<T> {
    value.parse().map_err(|_| Error::Corrupt {
        table,
        column,
        value: value.to_owned(),
    })
}

fn parse_enum<T>(
    table: &'static str,
    column: &'static str,
    value: &str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<T> {
    parse(value).ok_or_else(|| Error::Corrupt {
        table,
        column,
        value: value.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact_url("postgres://ha:secret@db:5432/ha"),
            "postgres://ha:***@db:5432/ha"
        );
        assert_eq!(
            redact_url("sqlite:///var/lib/ha.db"),
            "sqlite:///var/lib/ha.db"
        );
    }

    #[test]
    fn the_file_of_an_sqlite_url() {
        use std::path::PathBuf;
        assert_eq!(
            sqlite_file("sqlite:///var/lib/ha.db?mode=rwc"),
            Some(PathBuf::from("/var/lib/ha.db"))
        );
        assert_eq!(sqlite_file("sqlite:ha.db"), Some(PathBuf::from("ha.db")));
        assert_eq!(sqlite_file("sqlite::memory:"), None);
        assert_eq!(sqlite_file("sqlite://x.db?mode=memory"), None);
        assert_eq!(sqlite_file("postgres://db/ha"), None);
    }

    #[tokio::test]
    async fn the_database_and_its_wal_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data/ha.db");
        let store = Store::open(&DatabaseSettings::new(format!(
            "sqlite://{}",
            path.display()
        )))
        .await
        .unwrap();
        store.ping().await.unwrap();
        let mode = |p: &std::path::Path| instanceha_runtime::private::mode_of(p).unwrap();
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir.path().join("data")), 0o700);
        for suffix in ["-wal", "-shm"] {
            let beside = dir.path().join(format!("data/ha.db{suffix}"));
            assert!(beside.exists(), "{suffix}");
            assert_eq!(mode(&beside), 0o600, "{suffix}");
        }
    }
}
