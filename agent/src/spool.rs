//! The durable spool: every report is written here (redb, an embedded,
//! crash-safe database: a committed write survives a crash or power loss)
//! before it is sent, and stays pending until the API acknowledges it.
//! A report is kept once per idempotency key, so an incident handled twice
//! is spooled once; a report resent after a crash carries the same key, so
//! the API stores it once.

use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use redb::{Database, ReadableDatabase as _, ReadableTable as _, TableDefinition};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::report::Report;

const REPORTS: TableDefinition<'_, u64, &[u8]> = TableDefinition::new("reports");
const KEYS: TableDefinition<'_, &str, u64> = TableDefinition::new("keys");

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("spool {path}: {message}")]
    Open { path: String, message: String },
    #[error("spool: {0}")]
    Database(String),
    #[error("spool: a stored report cannot be read: {0}")]
    Corrupt(#[from] serde_json::Error),
    #[error("spool: the worker thread failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

fn db<E: std::fmt::Display>(e: E) -> Error {
    Error::Database(e.to_string())
}

/// Where a spooled report stands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum State {
    /// Not acknowledged yet.
    Pending { attempts: u32 },
    /// Stored by the API as this notification.
    Delivered {
        notification_id: String,
        at: DateTime<Utc>,
    },
    /// Refused for good (an unknown host, a host on maintenance, a
    /// duplicate of a stored notification): retrying cannot help.
    Refused { reason: String, at: DateTime<Utc> },
}

/// One spooled report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub id: u64,
    pub report: Report,
    /// The W3C trace context the report's trace started with.
    pub traceparent: Option<String>,
    pub created_at: DateTime<Utc>,
    pub state: State,
}

/// The spool; clones share one database.
#[derive(Clone)]
pub struct Spool {
    db: Arc<Database>,
    wake: Arc<Notify>,
}

impl std::fmt::Debug for Spool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spool").finish_non_exhaustive()
    }
}

impl Spool {
    /// Opens (or creates) the spool at `path`, and its directory.
    pub fn open(path: &Path) -> Result<Self, Error> {
        let open_error = |message: String| Error::Open {
            path: path.display().to_string(),
            message,
        };
        // 0600 in a 0700 directory whatever the umask: reports name hosts
        // and instances.
        instanceha_runtime::private::ensure_file(path).map_err(|e| open_error(e.to_string()))?;
        let db = Database::create(path).map_err(|e| open_error(e.to_string()))?;
        let txn = db.begin_write().map_err(db_err)?;
        {
            txn.open_table(REPORTS).map_err(db_err)?;
            txn.open_table(KEYS).map_err(db_err)?;
        }
        txn.commit().map_err(db_err)?;
        Ok(Self {
            db: Arc::new(db),
            wake: Arc::new(Notify::new()),
        })
    }

    /// Resolves when a report was added or changed state.
    pub fn changed(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Database) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Error> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || work(&db)).await?
    }

    /// Writes `report` durably (unless one with its idempotency key is
    /// spooled already) and returns its entry.
    pub async fn push(
        &self,
        report: Report,
        traceparent: Option<String>,
    ) -> Result<(Entry, bool), Error> {
        let result = self
            .blocking(move |db| {
                let txn = db.begin_write().map_err(db_err)?;
                let result = {
                    let mut keys = txn.open_table(KEYS).map_err(db_err)?;
                    let mut reports = txn.open_table(REPORTS).map_err(db_err)?;
                    let existing = keys
                        .get(report.idempotency_key.as_str())
                        .map_err(db_err)?
                        .map(|v| v.value());
                    if let Some(id) = existing {
                        let bytes = reports.get(id).map_err(db_err)?.map(|v| v.value().to_vec());
                        match bytes {
                            Some(bytes) => (serde_json::from_slice(&bytes)?, false),
                            None => {
                                return Err(Error::Database(format!("key without report {id}")));
                            }
                        }
                    } else {
                        let id = reports
                            .last()
                            .map_err(db_err)?
                            .map(|(k, _)| k.value() + 1)
                            .unwrap_or(1);
                        let entry = Entry {
                            id,
                            report,
                            traceparent,
                            created_at: Utc::now(),
                            state: State::Pending { attempts: 0 },
                        };
                        let bytes = serde_json::to_vec(&entry)?;
                        reports.insert(id, bytes.as_slice()).map_err(db_err)?;
                        keys.insert(entry.report.idempotency_key.as_str(), id)
                            .map_err(db_err)?;
                        (entry, true)
                    }
                };
                txn.commit().map_err(db_err)?;
                Ok(result)
            })
            .await?;
        if result.1 {
            self.wake.notify_one();
        }
        Ok(result)
    }

    /// Every entry, oldest first.
    pub async fn entries(&self) -> Result<Vec<Entry>, Error> {
        self.blocking(|db| {
            let txn = db.begin_read().map_err(db_err)?;
            let reports = txn.open_table(REPORTS).map_err(db_err)?;
            let mut out = Vec::new();
            for row in reports.iter().map_err(db_err)? {
                let (_, v) = row.map_err(db_err)?;
                out.push(serde_json::from_slice(v.value())?);
            }
            Ok(out)
        })
        .await
    }

    /// The entries not acknowledged yet, oldest first.
    pub async fn pending(&self) -> Result<Vec<Entry>, Error> {
        Ok(self
            .entries()
            .await?
            .into_iter()
            .filter(|e| matches!(e.state, State::Pending { .. }))
            .collect())
    }

    /// Sets an entry's state.
    pub async fn set_state(&self, id: u64, state: State) -> Result<(), Error> {
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(db_err)?;
            {
                let mut reports = txn.open_table(REPORTS).map_err(db_err)?;
                let bytes = reports.get(id).map_err(db_err)?.map(|v| v.value().to_vec());
                if let Some(bytes) = bytes {
                    let mut entry: Entry = serde_json::from_slice(&bytes)?;
                    entry.state = state;
                    let bytes = serde_json::to_vec(&entry)?;
                    reports.insert(id, bytes.as_slice()).map_err(db_err)?;
                }
            }
            txn.commit().map_err(db_err)?;
            Ok(())
        })
        .await?;
        self.wake.notify_one();
        Ok(())
    }

    /// Forgets delivered and refused entries older than `before`.
    pub async fn purge(&self, before: DateTime<Utc>) -> Result<usize, Error> {
        self.blocking(move |db| {
            let txn = db.begin_write().map_err(db_err)?;
            let mut removed = 0;
            {
                let mut reports = txn.open_table(REPORTS).map_err(db_err)?;
                let mut keys = txn.open_table(KEYS).map_err(db_err)?;
                let mut old = Vec::new();
                for row in reports.iter().map_err(db_err)? {
                    let (k, v) = row.map_err(db_err)?;
                    let entry: Entry = serde_json::from_slice(v.value())?;
                    let done_at = match &entry.state {
                        State::Pending { .. } => None,
                        State::Delivered { at, .. } | State::Refused { at, .. } => Some(*at),
                    };
                    if done_at.is_some_and(|at| at < before) {
                        old.push((k.value(), entry.report.idempotency_key));
                    }
                }
                for (id, key) in old {
                    reports.remove(id).map_err(db_err)?;
                    keys.remove(key.as_str()).map_err(db_err)?;
                    removed += 1;
                }
            }
            txn.commit().map_err(db_err)?;
            Ok(removed)
        })
        .await
    }
}

fn db_err<E: std::fmt::Display>(e: E) -> Error {
    db(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Fenced;

    fn report(host: &str, incident: &str) -> Report {
        Report::host_stopped(host, incident, &Fenced::Confirmed, Utc::now())
    }

    #[tokio::test]
    async fn reports_survive_a_reopen_and_are_kept_once_per_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/spool.redb");
        {
            let spool = Spool::open(&path).unwrap();
            let (a, new) = spool
                .push(report("c2", "1"), Some("tp".into()))
                .await
                .unwrap();
            assert!(new);
            let (again, new) = spool.push(report("c2", "1"), None).await.unwrap();
            assert!(!new);
            assert_eq!(again.id, a.id);
            spool.push(report("c3", "1"), None).await.unwrap();
            spool
                .set_state(
                    a.id,
                    State::Delivered {
                        notification_id: "n1".into(),
                        at: Utc::now(),
                    },
                )
                .await
                .unwrap();
        }
        let spool = Spool::open(&path).unwrap();
        let all = spool.entries().await.unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].traceparent.as_deref(), Some("tp"));
        let pending = spool.pending().await.unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].report.hostname, "c3");
        // A delivered report's key still dedupes until it is purged.
        let (_, new) = spool.push(report("c2", "1"), None).await.unwrap();
        assert!(!new);
        assert_eq!(
            spool
                .purge(Utc::now() + chrono::Duration::seconds(1))
                .await
                .unwrap(),
            1
        );
        let (_, new) = spool.push(report("c2", "1"), None).await.unwrap();
        assert!(new);
    }
}
