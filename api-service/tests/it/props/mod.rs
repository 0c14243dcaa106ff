//! Property tests of bad input (issue 7): arbitrary, mostly malformed,
//! public requests ([`requests`]) and engine streams ([`engine_stream`])
//! get a clear answer and leave the database as it was.
//!
//! Each property runs one API on SQLite for all its cases (an app per case
//! would be slow) and compares the raw database, every row of every table,
//! before and after each refused request.

mod engine_stream;
mod found;
mod on_servers;
mod requests;

use std::collections::BTreeMap;

use proptest::test_runner::{Config, TestRunner};
use sea_orm::{
    ConnectionTrait, Database, DatabaseConnection, DbBackend, Statement, TransactionTrait,
};

/// A second connection to the app's database, to read every table raw.
pub struct RawDb {
    conn: DatabaseConnection,
    backend: DbBackend,
    /// Every table and its columns.
    tables: Vec<(String, Vec<String>)>,
}

/// Every table: its rows in key order, one line each, every column quoted
/// (NULL as `NULL`).
pub type Dump = BTreeMap<String, String>;

impl RawDb {
    /// Opens the database of a started app (its migrations applied).
    pub async fn open(url: &str) -> Self {
        let conn = Database::connect(url)
            .await
            .expect("open the app's database");
        let backend = conn.get_database_backend();
        let mut db = Self {
            conn,
            backend,
            tables: Vec::new(),
        };
        let (tables, columns) = match backend {
            DbBackend::Sqlite => (
                "SELECT name FROM sqlite_master WHERE type = 'table' \
                 AND name NOT LIKE 'sqlite_%' ORDER BY name",
                "SELECT name FROM pragma_table_info('{t}') ORDER BY cid",
            ),
            DbBackend::Postgres => (
                "SELECT table_name::text FROM information_schema.tables \
                 WHERE table_schema = 'public' ORDER BY 1",
                "SELECT column_name::text FROM information_schema.columns \
                 WHERE table_schema = 'public' AND table_name = '{t}' \
                 ORDER BY ordinal_position",
            ),
            _ => (
                "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
                 WHERE table_schema = DATABASE() ORDER BY 1",
                "SELECT CAST(column_name AS CHAR) FROM information_schema.columns \
                 WHERE table_schema = DATABASE() AND table_name = '{t}' \
                 ORDER BY ordinal_position",
            ),
        };
        let names = db.strings(tables.to_owned()).await;
        // The health probe's row is written every few seconds whatever the
        // requests do: not a change any request made.
        for table in names.into_iter().flatten().filter(|t| t != "health_probe") {
            let columns = db
                .strings(columns.replace("{t}", &table))
                .await
                .into_iter()
                .flatten()
                .collect();
            db.tables.push((table, columns));
        }
        assert!(db.tables.len() >= 5, "the migrations ran: {:?}", db.tables);
        db
    }

    async fn strings(&self, sql: String) -> Vec<Vec<String>> {
        strings(&self.conn, self.backend, sql).await
    }

    /// The whole database.
    pub async fn dump(&self) -> Dump {
        self.dump_masked(&[]).await
    }

    /// The whole database but the `(table, column)`s in `mask`: one
    /// statement in one transaction (one snapshot, and fast in a debug
    /// build), one text per table.
    pub async fn dump_masked(&self, mask: &[(&str, &str)]) -> Dump {
        let per_table: Vec<String> = self
            .tables
            .iter()
            .map(|(table, columns)| self.table_text(table, columns, mask))
            .collect();
        let txn = self.conn.begin().await.expect("begin");
        if self.backend == DbBackend::MySql {
            txn.execute_unprepared("SET SESSION group_concat_max_len = 1073741824")
                .await
                .expect("group_concat_max_len");
        }
        let values = strings(
            &txn,
            self.backend,
            format!("SELECT {}", per_table.join(", ")),
        )
        .await
        .pop()
        .expect("one row");
        txn.rollback().await.expect("rollback");
        assert_eq!(values.len(), self.tables.len(), "every table read as text");
        self.tables
            .iter()
            .map(|(table, _)| table.clone())
            .zip(values)
            .collect()
    }

    /// A scalar subquery giving `table`'s rows as text.
    fn table_text(&self, table: &str, columns: &[String], mask: &[(&str, &str)]) -> String {
        let quoted = |c: &String| {
            if mask.contains(&(table, c.as_str())) {
                return "'masked'".to_owned();
            }
            match self.backend {
                DbBackend::Sqlite => format!("quote(\"{c}\")"),
                DbBackend::Postgres => format!("coalesce(quote_literal(\"{c}\"), 'NULL')"),
                _ => format!("QUOTE(`{c}`)"),
            }
        };
        let cells: Vec<String> = columns.iter().map(quoted).collect();
        let key = &columns[0];
        match self.backend {
            DbBackend::Sqlite => format!(
                "(SELECT coalesce(group_concat(r, char(10)), '') FROM \
                 (SELECT {} AS r FROM \"{table}\" ORDER BY rowid))",
                cells.join(" || ' | ' || ")
            ),
            DbBackend::Postgres => format!(
                "(SELECT coalesce(string_agg({}, E'\\n' ORDER BY \"{key}\"), '') FROM \"{table}\")",
                cells.join(" || ' | ' || ")
            ),
            _ => format!(
                "(SELECT coalesce(GROUP_CONCAT(CONCAT_WS(' | ', {}) ORDER BY `{key}` \
                 SEPARATOR '\\n'), '') FROM `{table}`)",
                cells.join(", ")
            ),
        }
    }

    /// The first column of the first row, which must be text (`CAST` it).
    pub async fn scalar(&self, sql: String) -> Option<String> {
        self.strings(sql).await.into_iter().flatten().next()
    }
}

async fn strings(conn: &impl ConnectionTrait, backend: DbBackend, sql: String) -> Vec<Vec<String>> {
    let rows = conn
        .query_all_raw(Statement::from_string(backend, sql.clone()))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows.iter()
        .map(|row| {
            (0..)
                .map_while(|i| row.try_get_by_index::<String>(i).ok())
                .collect()
        })
        .collect()
}

/// The rows that differ between two dumps, for a readable failure.
pub fn diff(before: &Dump, after: &Dump) -> String {
    let mut out = String::new();
    for (table, rows) in after {
        let old: Vec<&str> = before
            .get(table)
            .map_or(Vec::new(), |r| r.lines().collect());
        let new: Vec<&str> = rows.lines().collect();
        for row in new.iter().filter(|r| !old.contains(r)) {
            out.push_str(&format!("+ {table}: {row}\n"));
        }
        for row in old.iter().filter(|r| !new.contains(r)) {
            out.push_str(&format!("- {table}: {row}\n"));
        }
    }
    out
}

/// A runner with `cases` cases (`PROPTEST_CASES` overrides). Failures are
/// printed shrunk, not saved: the cases run against a live API whose
/// database the earlier cases changed, so a saved seed would not replay.
pub fn runner(cases: u32) -> TestRunner {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    TestRunner::new(Config {
        cases,
        // Each shrink step is a call to a live API: keep shrinking short.
        max_shrink_iters: 256,
        failure_persistence: None,
        ..Config::default()
    })
}

/// A runtime for one property: the app and every case run on it.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}
