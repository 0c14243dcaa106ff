//! `spawn_api`: `instanceha-api` in-process with a temporary SQLite
//! database, and `instanceha`, the binary under test, run in an isolated
//! environment (no `INSTANCEHA_*` variables, an empty configuration home).

use std::ffi::OsStr;
use std::process::{Command, Output, Stdio};

use instanceha_api::config::Settings;
use instanceha_api::server::Server;
use instanceha_api::service::Api;
use serde_json::Value;
use tokio::sync::oneshot;

/// A running API and the directory holding its database.
pub struct TestApi {
    pub endpoint: String,
    pub api: Api,
    shutdown: Option<oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
    // Dropped last: the server must be gone before its database.
    _database: tempfile::TempDir,
}

impl Drop for TestApi {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

pub async fn spawn_api() -> TestApi {
    spawn_api_with(|_| {}).await
}

/// [`spawn_api`] with settings of the test's (`tune` runs last).
pub async fn spawn_api_with(tune: impl FnOnce(&mut Settings)) -> TestApi {
    let database = tempfile::tempdir().expect("temporary directory");
    let mut settings = Settings {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Settings::default()
    };
    settings.database.url = format!("sqlite://{}", database.path().join("api.db").display());
    // Masakari's REST port is fixed by default; tests run side by side.
    settings.rest.listen = "127.0.0.1:0".parse().unwrap();
    // No engine here: notifications stay as the API stored them, unless a
    // test moves them on through the store.
    settings.dispatch.enabled = false;
    settings.auth.mode = instanceha_api::auth::AuthMode::None;
    tune(&mut settings);
    let server = Server::bind(&settings).await.expect("the API starts");
    let endpoint = format!("http://{}", server.local_addr());
    let api = server.api().clone();
    let (shutdown, stop) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        server
            .run(async {
                let _ = stop.await;
            })
            .await
            .expect("the API serves");
    });
    TestApi {
        endpoint,
        api,
        shutdown: Some(shutdown),
        server: Some(server),
        _database: database,
    }
}

/// What one run of the binary did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    fn from_output(output: Output) -> Self {
        Self {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Asserts the exit code, showing the output when it differs.
    #[track_caller]
    pub fn expect_exit(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "exit code\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout, self.stderr
        );
        self
    }

    #[track_caller]
    pub fn expect_stderr(&self, needle: &str) -> &Self {
        assert!(
            self.stderr.contains(needle),
            "stderr does not mention {needle:?}:\n{}",
            self.stderr
        );
        self
    }

    #[track_caller]
    pub fn expect_stdout(&self, needle: &str) -> &Self {
        assert!(
            self.stdout.contains(needle),
            "stdout does not mention {needle:?}:\n{}",
            self.stdout
        );
        self
    }

    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }
}

/// A scratch directory used as `HOME` and `XDG_CONFIG_HOME`, so that no
/// configuration file of the machine running the tests is read.
pub struct Home {
    pub dir: tempfile::TempDir,
}

impl Home {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("temporary directory"),
        }
    }

    /// The binary with only `HOME` and `XDG_CONFIG_HOME` set.
    pub fn instanceha<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = Command::new(env!("CARGO_BIN_EXE_instanceha"));
        command
            .env_clear()
            .env("HOME", self.dir.path())
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"))
            .args(args)
            .stdin(Stdio::null());
        command
    }
}

/// Runs `command` to its end off the async runtime.
pub async fn run(mut command: Command) -> Run {
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("the run task")
        .expect("the binary starts");
    Run::from_output(output)
}

impl TestApi {
    /// `instanceha --endpoint <this API> ARGS...`
    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Home::new().instanceha(["--endpoint", &self.endpoint]);
        command.args(args);
        command
    }

    pub async fn run(&self, args: &[&str]) -> Run {
        run(self.command(args)).await
    }

    /// Runs with `--format json`, asserts success and parses stdout.
    #[track_caller]
    pub fn json(&self, args: &[&str]) -> impl std::future::Future<Output = Value> + '_ {
        let mut command = self.command(&["--format", "json"]);
        command.args(args);
        let caller = std::panic::Location::caller();
        async move {
            let run = run(command).await;
            assert_eq!(
                run.code, 0,
                "{caller}: exit code\n--- stdout\n{}\n--- stderr\n{}",
                run.stdout, run.stderr
            );
            run.json()
        }
    }

    /// Creates a segment and returns its ID.
    pub async fn segment(&self, name: &str, extra: &[&str]) -> String {
        let mut args = vec!["segment", "create", name, "--recovery-method", "auto"];
        args.extend_from_slice(extra);
        self.json(&args).await["id"]
            .as_str()
            .expect("an id")
            .to_owned()
    }

    /// Registers a host in `segment` and returns its ID.
    pub async fn host(&self, segment: &str, name: &str, extra: &[&str]) -> String {
        let mut args = vec![
            "host",
            "create",
            name,
            "--segment",
            segment,
            "--type",
            "COMPUTE",
        ];
        args.extend_from_slice(extra);
        self.json(&args).await["id"]
            .as_str()
            .expect("an id")
            .to_owned()
    }

    /// Reports `hostname` down, as a hostmonitor does; returns the
    /// notification.
    pub async fn host_down(&self, hostname: &str) -> Value {
        self.json(&[
            "notification",
            "create",
            "--type",
            "COMPUTE_HOST",
            "--hostname",
            hostname,
            "--payload",
            "event=STOPPED",
            "host_status=NORMAL",
            "cluster_status=OFFLINE",
        ])
        .await
    }
}

/// A report time `minutes` ago, to the second, as the CLI prints it: the
/// API refuses reports older than `dispatch.expire_after`, so tests cannot
/// use fixed dates.
pub fn minutes_ago(minutes: i64) -> String {
    (chrono::Utc::now() - chrono::Duration::minutes(minutes))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
