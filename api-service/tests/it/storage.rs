//! When the database cannot write: SQLite on a small tmpfs that fills
//! while reports arrive, and PostgreSQL made read-only under the API. No
//! report is acknowledged that is not committed (another connection and a
//! restart see every acknowledged one), the API answers UNAVAILABLE with
//! the reason (never INTERNAL) and reports NOT_SERVING meanwhile, and it
//! recovers by itself when the database can write again.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use instanceha_proto::v1 as pb;
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement};
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::backends::Backend;
use crate::helpers::{TestApp, host_request, segment_request, spawn_app_with};

/// A tmpfs of its own, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// A tmpfs of `kib` KiB, or `None` when this process may not mount
    /// (not root). Under CI it must.
    fn mount(kib: u64) -> Option<Self> {
        let dir = tempfile::tempdir().expect("a directory");
        let mounted = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={kib}k,mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            assert!(
                std::env::var_os("CI").is_none(),
                "cannot mount a tmpfs: under CI (as root) the full-disk test must run"
            );
            instanceha_test_env::say_skipped(
                "the full-disk test",
                "cannot mount a tmpfs (root needed)",
            );
            return None;
        }
        Some(Self { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Fills the filesystem at `dir` with a ballast file, leaving about
/// `leave` bytes free; returns its path.
fn ballast(dir: &Path, leave: u64) -> PathBuf {
    let path = dir.join("ballast");
    let free = fs2_free(dir);
    let size = free.saturating_sub(leave);
    std::fs::write(&path, vec![0u8; size as usize]).expect("the ballast fits");
    path
}

/// Bytes free on the filesystem at `dir` (`df`, as an operator reads it).
fn fs2_free(dir: &Path) -> u64 {
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(dir)
        .output()
        .expect("df");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .expect("df prints the free bytes")
}

async fn health(app: &TestApp) -> ServingStatus {
    let mut client = HealthClient::new(app.channel.clone());
    let answer = client
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("the health service answers");
    ServingStatus::try_from(answer.into_inner().status).unwrap_or(ServingStatus::Unknown)
}

/// A report for `host`, generated now (with no duplicate window, never
/// another's duplicate).
fn report(host: &str, _n: usize) -> pb::CreateNotificationRequest {
    crate::helpers::host_down(host)
}

/// The notification ids the database holds, read on a connection of its
/// own (not the API's).
async fn committed(url: &str) -> Vec<String> {
    let db: DatabaseConnection = Database::connect(url).await.expect("another connection");
    let rows = db
        .query_all_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT uuid FROM notifications".to_owned(),
        ))
        .await
        .expect("read the notifications");
    let ids = rows
        .iter()
        .map(|r| r.try_get::<String>("", "uuid").expect("a uuid"))
        .collect();
    db.close().await.ok();
    ids
}

/// The API on the SQLite file at `url`, every report counting on its own,
/// with a segment of three hosts.
async fn app_with_hosts(url: &str) -> (TestApp, [&'static str; 3]) {
    let app_url = url.to_owned();
    let mut app = spawn_app_with(Backend::Sqlite, move |s| {
        s.database.url = app_url;
        crate::helpers::every_report_counts(s);
    })
    .await
    .expect("sqlite always runs");
    let segment = app
        .segments
        .create_segment(segment_request("rack-a"))
        .await
        .unwrap()
        .into_inner();
    let hosts = ["compute-01", "compute-02", "compute-03"];
    for host in hosts {
        app.hosts
            .create_host(host_request(&segment.id, host))
            .await
            .unwrap();
    }
    (app, hosts)
}

/// Sends reports until the database refuses one; returns the ids
/// acknowledged and the refusal.
async fn until_refused(app: &mut TestApp, hosts: &[&str]) -> (Vec<String>, tonic::Status) {
    let mut acknowledged = Vec::new();
    for n in 0..20_000 {
        let host = hosts[n % hosts.len()];
        match app.notifications.create_notification(report(host, n)).await {
            Ok(created) => acknowledged.push(created.into_inner().id),
            Err(status) => return (acknowledged, status),
        }
    }
    panic!("the disk never filled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_full_disk_no_report_is_acknowledged_without_its_commit() {
    let Some(disk) = Tmpfs::mount(4096) else {
        return;
    };
    let url = format!("sqlite://{}", disk.path().join("api.db").display());
    let (mut app, hosts) = app_with_hosts(&url).await;
    let ballast = ballast(disk.path(), 96 * 1024);

    let (mut acknowledged, refused) = until_refused(&mut app, &hosts).await;
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert!(
        refused.message().contains("cannot write"),
        "the refusal says why: {}",
        refused.message()
    );
    // Every later report is refused too, never acknowledged unwritten.
    for n in 0..20 {
        let again = app
            .notifications
            .create_notification(report("compute-01", 100_000 + n))
            .await;
        match again {
            Ok(created) => acknowledged.push(created.into_inner().id),
            Err(status) => assert_eq!(status.code(), Code::Unavailable, "{status:?}"),
        }
    }
    let mut seen = committed(&url).await;
    seen.sort();
    for id in &acknowledged {
        assert!(
            seen.binary_search(id).is_ok(),
            "notification {id} was acknowledged but another connection does not see it"
        );
    }
    instanceha_testkit::eventually(
        "not serving while the disk is full",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async { health(&app).await == ServingStatus::NotServing },
    )
    .await;

    // Space comes back: the API recovers by itself.
    std::fs::remove_file(&ballast).unwrap();
    instanceha_testkit::eventually(
        "serving again once space came back",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async { health(&app).await == ServingStatus::Serving },
    )
    .await;
    let after = app
        .notifications
        .create_notification(report("compute-02", 200_000))
        .await
        .expect("a report is taken again")
        .into_inner();
    acknowledged.push(after.id);
    app.stop().await;

    // A restart loses nothing that was acknowledged.
    let mut seen = committed(&url).await;
    seen.sort();
    for id in &acknowledged {
        assert!(seen.binary_search(id).is_ok(), "{id} lost across a restart");
    }
}

/// Runs `sql` on PostgreSQL as its administrator.
async fn as_postgres_admin(sql: &str) {
    let url = std::env::var("INSTANCEHA_TEST_POSTGRES_URL").expect("set by the caller");
    let admin = Database::connect(url.as_str())
        .await
        .expect("PostgreSQL answers");
    admin.execute_unprepared(sql).await.expect(sql);
    admin.close().await.ok();
}

/// Makes the test database read-only (or writable again) for every new
/// transaction, and ends the API's connections so that its pool opens new
/// ones under the new default.
async fn postgres_read_only(database: &str, read_only: bool) {
    let on = if read_only { "on" } else { "off" };
    as_postgres_admin(&format!(
        "ALTER DATABASE {database} SET default_transaction_read_only = {on}"
    ))
    .await;
    as_postgres_admin(&format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = '{database}' AND pid <> pg_backend_pid()"
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(no_postgres, ignore = "set INSTANCEHA_TEST_POSTGRES_URL to run")]
async fn a_read_only_postgresql_refuses_reports_as_unavailable_then_recovers() {
    let Some(mut app) =
        spawn_app_with(Backend::Postgres, crate::helpers::every_report_counts).await
    else {
        return;
    };
    let url = app.database_url().to_owned();
    let database = url.rsplit('/').next().unwrap().to_owned();
    let segment = app
        .segments
        .create_segment(segment_request("rack-a"))
        .await
        .unwrap()
        .into_inner();
    app.hosts
        .create_host(host_request(&segment.id, "compute-01"))
        .await
        .unwrap();
    let before = app
        .notifications
        .create_notification(report("compute-01", 0))
        .await
        .unwrap()
        .into_inner();

    postgres_read_only(&database, true).await;
    let refused = app
        .notifications
        .create_notification(report("compute-01", 1))
        .await
        .expect_err("a read-only database stores nothing");
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert!(refused.message().contains("cannot write"), "{refused:?}");
    instanceha_testkit::eventually(
        "not serving while the database is read-only",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || async { health(&app).await == ServingStatus::NotServing },
    )
    .await;

    postgres_read_only(&database, false).await;
    instanceha_testkit::eventually(
        "serving again once the database can write",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async { health(&app).await == ServingStatus::Serving },
    )
    .await;
    let after = app
        .notifications
        .create_notification(report("compute-01", 2))
        .await
        .expect("a report is taken again")
        .into_inner();
    let mut seen = committed(&url).await;
    seen.sort();
    for id in [&before.id, &after.id] {
        assert!(seen.binary_search(id).is_ok(), "{id} is not stored");
    }
    app.stop().await;
}
