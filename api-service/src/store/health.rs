//! Whether the database can write, and that no acknowledgement is given
//! without its commit. A write transaction is a [`Write`]: one that fails
//! or is dropped uncommitted marks the store, and on SQLite the connection
//! is replaced before the next transaction (a COMMIT that fails on a full
//! disk can leave SQLite and its driver disagreeing about whether a
//! transaction is open, and every later "commit" on that connection would
//! then commit nothing). A write probe ([`Store::probe_write`]) tells
//! whether the database can write again; until then health is NOT_SERVING.

use std::ops::Deref;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, DatabaseTransaction, DbBackend, DbErr, EntityTrait, QueryFilter};

use super::entity::health_probe;
use super::{Result, Store};

/// What the store knows of its database's ability to write.
#[derive(Debug, Default)]
pub(super) struct StorageHealth {
    /// A write transaction failed or was abandoned: replace the SQLite
    /// connection before the next one.
    poisoned: AtomicBool,
    /// Why the database cannot write, as the last probe found (`None`:
    /// it can).
    unwritable: Mutex<Option<String>>,
    /// Woken by a failed write transaction: probe now.
    suspect: tokio::sync::Notify,
    /// Held by a SQLite write transaction from before its start until its
    /// failure is marked: the next one cannot begin on the connection a
    /// failed COMMIT handed back to the pool (still inside its transaction)
    /// before the pool is replaced. SQLite takes one writer at a time
    /// anyway.
    writer: tokio::sync::Mutex<()>,
}

impl StorageHealth {
    fn failed(&self) {
        self.poisoned.store(true, Ordering::Release);
        self.suspect.notify_one();
    }
}

/// Whether `err` says the database cannot write: a full disk, a read-only
/// database, or failing storage.
pub(super) fn cannot_write(err: &DbErr) -> bool {
    let (DbErr::Exec(sea_orm::RuntimeErr::SqlxError(e))
    | DbErr::Query(sea_orm::RuntimeErr::SqlxError(e))
    | DbErr::Conn(sea_orm::RuntimeErr::SqlxError(e))) = err
    else {
        return false;
    };
    let sea_orm::sqlx::Error::Database(db) = &**e else {
        return matches!(&**e, sea_orm::sqlx::Error::Io(_));
    };
    if db
        .try_downcast_ref::<sea_orm::sqlx::sqlite::SqliteError>()
        .is_some()
    {
        // SQLITE_READONLY (8), SQLITE_IOERR (10), SQLITE_FULL (13), with
        // any extended code.
        return db
            .code()
            .and_then(|code| code.parse::<i32>().ok())
            .is_some_and(|code| matches!(code & 0xff, 8 | 10 | 13));
    }
    if let Some(mysql) = db.try_downcast_ref::<sea_orm::sqlx::mysql::MySqlDatabaseError>() {
        // Disk full (1021), table full (1114), read-only (1290, 1836),
        // error writing a file (3).
        return matches!(mysql.number(), 3 | 1021 | 1114 | 1290 | 1836);
    }
    // PostgreSQL: disk full (53100), out of resources (53000), I/O error
    // (58030), a read-only transaction (25006).
    matches!(
        db.code().as_deref(),
        Some("53100" | "53000" | "58030" | "25006")
    )
}

/// A write transaction of the store: committed with [`Write::commit`];
/// dropped without it, or failing to commit, it marks the store so that a
/// SQLite connection is not reused inside a transaction it may still hold.
pub(super) struct Write<'s> {
    txn: Option<DatabaseTransaction>,
    store: &'s Store,
    /// SQLite's writer turn, let go after the transaction and its
    /// marking (fields drop after [`Drop::drop`], in this order).
    _turn: Option<tokio::sync::MutexGuard<'s, ()>>,
}

impl<'s> Write<'s> {
    fn new(
        store: &'s Store,
        txn: DatabaseTransaction,
        turn: Option<tokio::sync::MutexGuard<'s, ()>>,
    ) -> Self {
        Self {
            txn: Some(txn),
            store,
            _turn: turn,
        }
    }

    /// Commits; a failure marks the store.
    pub(super) async fn commit(mut self) -> Result<()> {
        let txn = self.txn.take().expect("a transaction commits once");
        match txn.commit().await {
            Ok(()) => Ok(()),
            Err(e) => {
                self.store.health.failed();
                Err(e.into())
            }
        }
    }

    /// Ends the transaction without writing (nothing to change after all).
    pub(super) async fn rollback(mut self) -> Result<()> {
        let txn = self.txn.take().expect("a transaction ends once");
        txn.rollback().await.map_err(|e| {
            self.store.health.failed();
            e.into()
        })
    }
}

impl Deref for Write<'_> {
    type Target = DatabaseTransaction;

    fn deref(&self) -> &DatabaseTransaction {
        self.txn.as_ref().expect("an open transaction")
    }
}

impl Drop for Write<'_> {
    fn drop(&mut self) {
        if self.txn.is_some() {
            // An error left it: rolled back by the driver, but the
            // connection is not trusted any more.
            self.store.health.failed();
        }
    }
}

impl Store {
    /// Begins a write transaction; on SQLite, in turn, on a connection no
    /// failed transaction left open.
    pub(super) async fn begin_write(&self) -> Result<Write<'_>> {
        let turn = match self.backend() {
            DbBackend::Sqlite => Some(self.health.writer.lock().await),
            _ => None,
        };
        self.reset_if_poisoned().await;
        let txn = self.begin_transaction().await?;
        Ok(Write::new(self, txn, turn))
    }

    /// Replaces the SQLite connection if a write transaction failed since
    /// the last one (PostgreSQL and MySQL roll back on the same
    /// connection reliably).
    pub(super) async fn reset_if_poisoned(&self) {
        if !self.health.poisoned.swap(false, Ordering::AcqRel) {
            return;
        }
        if self.backend() != DbBackend::Sqlite {
            return;
        }
        match super::connect(&self.settings).await {
            Ok(fresh) => {
                // The old pool is dropped, not closed: a call still using
                // it finishes, and its connection (with whatever it holds
                // open) is closed when the last user lets go.
                drop(std::mem::replace(
                    &mut *self.db.write().expect("the pool lock"),
                    fresh,
                ));
                tracing::warn!("a write transaction failed: the database connection is replaced");
            }
            Err(e) => {
                // Tried again before the next transaction.
                self.health.poisoned.store(true, Ordering::Release);
                tracing::warn!(error = %e, "cannot replace the database connection yet");
            }
        }
    }

    /// Writes the probe row and commits: whether the database can write
    /// now. Remembered for [`Store::unwritable`].
    pub async fn probe_write(&self) -> Result<()> {
        let result = self.write_probe().await;
        let reason = match &result {
            Ok(()) => None,
            Err(e) => Some(e.to_string()),
        };
        *self.health.unwritable.lock().expect("the health lock") = reason;
        result
    }

    async fn write_probe(&self) -> Result<()> {
        let txn = self.begin_write().await?;
        health_probe::Entity::update_many()
            .col_expr(health_probe::Column::At, Expr::value(self.now()))
            .filter(health_probe::Column::Id.eq(1))
            .exec(&*txn)
            .await?;
        txn.commit().await
    }

    /// Waits until a write transaction fails (time to probe).
    pub async fn write_failed(&self) {
        self.health.suspect.notified().await;
    }

    /// Why the database could not write at the last probe, if it could
    /// not.
    pub fn unwritable(&self) -> Option<String> {
        self.health
            .unwritable
            .lock()
            .expect("the health lock")
            .clone()
    }
}
