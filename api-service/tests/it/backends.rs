//! A fresh database per test on each backend, and the macro that runs a
//! test on every backend.

use sea_orm::{ConnectionTrait, Database};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
    Mysql,
}

impl Backend {
    fn env(self) -> Option<&'static str> {
        match self {
            Self::Sqlite => None,
            Self::Postgres => Some("INSTANCEHA_TEST_POSTGRES_URL"),
            Self::Mysql => Some("INSTANCEHA_TEST_MYSQL_URL"),
        }
    }
}

/// A database that exists for one test and is dropped after it.
pub struct TestDatabase {
    pub url: String,
    cleanup: Option<(String, String)>,
    _dir: Option<tempfile::TempDir>,
}

impl TestDatabase {
    /// A new, empty database, or `None` when the backend is not configured
    /// (PostgreSQL and MySQL run only when their variable is set). Under CI
    /// (`CI` set, as `.ci/run` does) an unset variable fails the test
    /// instead: a suite that silently skips proves nothing.
    pub async fn create(backend: Backend) -> Option<Self> {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temporary directory");
                let url = format!("sqlite://{}", dir.path().join("api.db").display());
                Some(Self {
                    url,
                    cleanup: None,
                    _dir: Some(dir),
                })
            }
            Backend::Postgres | Backend::Mysql => {
                let var = backend.env().expect("server backends have a variable");
                let Ok(admin_url) = std::env::var(var) else {
                    assert!(
                        std::env::var_os("CI").is_none(),
                        "{var} is not set: under CI (CI is set) the {backend:?} tests must run, not skip"
                    );
                    eprintln!("skipped on {backend:?}: {var} is not set");
                    return None;
                };
                let name = format!("ih_test_{}", uuid::Uuid::new_v4().simple());
                let admin = Database::connect(admin_url.as_str())
                    .await
                    .unwrap_or_else(|e| panic!("{var}={admin_url} does not answer: {e}"));
                admin
                    .execute_unprepared(&format!("CREATE DATABASE {name}"))
                    .await
                    .expect("create the test database");
                admin.close().await.ok();
                Some(Self {
                    url: replace_database(&admin_url, &name),
                    cleanup: Some((admin_url, name)),
                    _dir: None,
                })
            }
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let Some((admin_url, name)) = self.cleanup.take() else {
            return;
        };
        // Drop runs outside async code: use a small runtime of our own.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(async {
                let admin = Database::connect(admin_url.as_str()).await?;
                let force = if admin_url.starts_with("postgres") {
                    " WITH (FORCE)"
                } else {
                    ""
                };
                admin
                    .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name}{force}"))
                    .await?;
                admin.close().await
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            eprintln!("could not drop a test database: {dropped:?}");
        }
    }
}

fn replace_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let path_start = base[scheme_end..]
        .find('/')
        .map(|i| i + scheme_end)
        .unwrap_or(base.len());
    let mut out = format!("{}/{name}", &base[..path_start]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// Runs each listed `async fn(Backend)` test on SQLite, PostgreSQL and
/// MySQL/MariaDB; the latter two are ignored, with the variable to set,
/// when it was unset at build time (build.rs).
#[macro_export]
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::backends::Backend::Sqlite).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[cfg_attr(no_postgres, ignore = "set INSTANCEHA_TEST_POSTGRES_URL to run")]
                async fn $name() {
                    super::$name($crate::backends::Backend::Postgres).await;
                }
            )*
        }
        mod mysql {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[cfg_attr(no_mysql, ignore = "set INSTANCEHA_TEST_MYSQL_URL to run")]
                async fn $name() {
                    super::$name($crate::backends::Backend::Mysql).await;
                }
            )*
        }
    };
}

#[test]
fn database_names_are_replaced_in_urls() {
    assert_eq!(
        replace_database("postgres://root@127.0.0.1:5432/test", "x"),
        "postgres://root@127.0.0.1:5432/x"
    );
    assert_eq!(
        replace_database("mysql://root@127.0.0.1:3306/test?ssl-mode=disabled", "x"),
        "mysql://root@127.0.0.1:3306/x?ssl-mode=disabled"
    );
    assert_eq!(
        replace_database("mysql://root@127.0.0.1:3306", "x"),
        "mysql://root@127.0.0.1:3306/x"
    );
}
