//! Process-level faults with real processes: `openstack-sim`,
//! `instanceha-engine` and `instanceha-api` run as OS processes started
//! with configuration files written to a temporary directory, and a host
//! recovery of twelve instances is interrupted by
//!
//! * the engine killed (SIGKILL) mid-recovery and started again;
//! * the API killed (SIGKILL) mid-recovery and restarted on the same
//!   SQLite file with the same replica id;
//! * the database server stopped mid-recovery for four seconds and
//!   started again (a private PostgreSQL
//!   cluster of the test's own, made with `initdb` and `pg_ctl` from
//!   `/usr/lib/postgresql/*/bin` on a free port; never the machine's
//!   shared server). Skipped with a notice when those programs are missing;
//! * the network between API and engine cut (a TCP proxy of the test's own
//!   sits between them: it closes every connection and refuses new ones
//!   for a while, then lets them through again).
//!
//! Each must keep the fault matrix's invariants and end `finished`, every
//! instance on the other host and none left locked.
//!
//! Also the orderly stop Kubernetes asks for: SIGTERM to the engine binary
//! (not ready at once, still accepting through the drain delay, liveness
//! SERVING throughout, a clean exit).
//!
//! # Where the binaries come from
//!
//! * `instanceha-engine`: `CARGO_BIN_EXE_instanceha-engine`, built by Cargo
//!   for these tests.
//! * `instanceha-api` and `openstack-sim`: from `INSTANCEHA_TEST_BIN_DIR`
//!   if set; otherwise next to the engine binary (`target/<profile>/`),
//!   where `cargo test --workspace` has just built them, if they are newer
//!   than every source file they are built from (`src`, `build.rs`,
//!   `Cargo.toml` and `.proto` files of api-service, openstack-sim,
//!   migrations, proto, telemetry and openstack-client, and the
//!   workspace's `Cargo.toml` and `Cargo.lock`). If missing or older (as
//!   under `cargo test -p instanceha-engine` after a change), the tests
//!   run `$CARGO build -p instanceha-api -p openstack-sim --bins` into the
//!   same target directory and profile first, once per test binary. That
//!   build resolves features for those two packages alone, so the first
//!   time it recompiles part of the dependency tree (about three minutes
//!   on a 2-core machine); later runs find the binaries fresh.
//!
//! Logs of every process go to files in the test's temporary directory;
//! a failing test prints their ends.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use instanceha_proto::v1 as pb;
use instanceha_testkit::eventually::until;
use openstack_sim::Scenario;
use pb::notification_service_client::NotificationServiceClient;
use pb::vmove_service_client::VmoveServiceClient;
use tonic::transport::Channel;

use crate::fault_matrix::{Server, invariant_violations};

mod binaries;
mod postgres;
mod proxy;

use binaries::*;
use postgres::*;
use proxy::*;

/// A recovery must end within this once the fault is gone.
const PATIENCE: Duration = Duration::from_secs(120);
const INSTANCES: usize = instanceha_testkit::cloud::INTERRUPTIBLE_INSTANCES;
/// The API's replica id: the same after a restart, so that it resumes its
/// own runs.
const REPLICA: &str = "api-process-test";

// ---------------------------------------------------------------------------
// Processes

/// A free TCP port on 127.0.0.1 (free when asked; PostgreSQL binds it
/// right after: it cannot be given port 0 and say which it took).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A child process, killed (SIGKILL) when dropped.
struct Process {
    name: String,
    child: std::process::Child,
    log: PathBuf,
    /// Where it listens, as it printed.
    addr: SocketAddr,
}

impl Process {
    /// Starts `program` and waits until it prints where it listens (each of
    /// the three does, on stdout, once bound: given port 0 at first start,
    /// they say which port they took, so no other test can take it between
    /// a pick and the bind). stdout and stderr go to `log`.
    fn start(name: &str, program: &Path, args: &[String], log: PathBuf) -> Process {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("a log file");
        let mut child = Command::new(program)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", program.display()));
        let stdout = child.stdout.take().expect("stdout");
        let (ready, first_line) = std::sync::mpsc::channel();
        let copy_to = log.clone();
        std::thread::spawn(move || {
            let mut sink = std::fs::OpenOptions::new().append(true).open(copy_to).ok();
            let mut ready = Some(ready);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // Logs may share stdout: wait for the line saying where it
                // listens.
                if line.contains(" listening on ")
                    && let Some(ready) = ready.take()
                {
                    let _ = ready.send(line.clone());
                }
                if let Some(sink) = sink.as_mut() {
                    let _ = writeln!(sink, "{line}");
                }
            }
        });
        let listening = first_line.recv_timeout(Duration::from_secs(60));
        let Some(addr) = listening.as_deref().ok().and_then(listening_addr) else {
            let status = child.try_wait().ok().flatten();
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{name} did not start ({listening:?}, exit {status:?}):\n{}",
                tail(&log, 30)
            );
        };
        Process {
            name: name.to_owned(),
            child,
            log,
            addr,
        }
    }

    /// SIGTERM, as Kubernetes stops a pod.
    fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill(1)");
        assert!(status.success(), "kill -TERM {}: {status}", self.name);
    }

    /// Its exit status, once it exits by itself within `within`.
    async fn exits_within(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        until(within, Duration::from_millis(50), || {
            let exited = self.child.try_wait().expect("the child's status");
            async move { exited }
        })
        .await
        .ok()
    }

    /// SIGKILL, as a crash would.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address at the end of "NAME listening on ADDR" (ADDR may be a URL,
/// as the simulator's base URL).
fn listening_addr(line: &str) -> Option<SocketAddr> {
    let last = line.split_whitespace().last()?;
    let addr = last.strip_prefix("http://").unwrap_or(last);
    addr.trim_end_matches('/').parse().ok()
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A minimal HTTP/1.1 client for the simulator's control API.
fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, Vec<u8>) {
    let mut stream = TcpStream::connect(addr).expect("the simulator answers");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("an answer");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("HTTP headers");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status");
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    (status, body)
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&raw[..end])
                .split(';')
                .next()
                .unwrap_or("0")
                .trim(),
            16,
        )
        .unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = end + 2;
        out.extend_from_slice(&raw[start..(start + size).min(raw.len())]);
        raw = &raw[(start + size + 2).min(raw.len())..];
    }
    out
}

// ---------------------------------------------------------------------------
// The system as processes

fn scenario() -> Scenario {
    instanceha_testkit::cloud::interruptible_scenario()
}

struct System {
    dir: tempfile::TempDir,
    sim: Process,
    sim_addr: SocketAddr,
    engine: Process,
    engine_port: u16,
    api: Process,
    api_port: u16,
    /// Where the API reaches the engine (the engine, or a proxy).
    engine_url: String,
    database_url: String,
    client: Client,
}

impl System {
    /// The simulator and the engine; the API on `database_url` (SQLite in
    /// the temporary directory when None), reaching the engine at
    /// `engine_url(engine port)`.
    async fn start(database_url: Option<String>, engine_url: impl FnOnce(u16) -> String) -> System {
        let binaries = binaries();
        let dir = tempfile::tempdir().unwrap();
        let scenario_path = dir.path().join("scenario.json");
        std::fs::write(
            &scenario_path,
            serde_json::to_string_pretty(&scenario()).unwrap(),
        )
        .unwrap();
        let sim = Process::start(
            "openstack-sim",
            &binaries.sim,
            &[
                "--scenario".into(),
                scenario_path.display().to_string(),
                "--listen".into(),
                "127.0.0.1:0".into(),
            ],
            dir.path().join("sim.log"),
        );
        let sim_addr = sim.addr;

        // The link token, made by whichever starts first, in the test's
        // directory.
        let state_dir = format!("state_dir = {:?}\n", dir.path());
        std::fs::write(
            dir.path().join("engine.toml"),
            state_dir.clone() + &engine_config(&format!("http://{sim_addr}/identity/v3")),
        )
        .unwrap();
        let engine = start_engine(dir.path(), 0);
        let engine_port = engine.addr.port();

        // On a database server of its own, the API waits at most a second
        // for a connection, so that a restart shows as failed queries.
        let database = if database_url.is_some() {
            "[database]\nconnect_timeout = \"1s\"\n\n"
        } else {
            ""
        };
        let database_url = database_url
            .unwrap_or_else(|| format!("sqlite://{}", dir.path().join("api.db").display()));
        let engine_url = engine_url(engine_port);
        std::fs::write(
            dir.path().join("api.toml"),
            format!("{state_dir}{database}[auth]\nmode = \"none\"\n\n[rest]\nenabled = false\n\n[dispatch]\nreplica_id = \"{REPLICA}\"\nretry_delay = \"50ms\"\nmax_retry_delay = \"200ms\"\nscan_interval = \"100ms\"\nlease = \"3s\"\nconnect_timeout = \"1s\"\n"),
        )
        .unwrap();
        let api = start_api(dir.path(), 0, &database_url, &engine_url);
        let api_port = api.addr.port();
        let client = Client::connect(api_port).await;
        let mut system = System {
            dir,
            sim,
            sim_addr,
            engine,
            engine_port,
            api,
            api_port,
            engine_url,
            database_url,
            client,
        };
        system.client.segment().await;
        system
    }

    fn restart_engine(&mut self) {
        self.engine = start_engine(self.dir.path(), self.engine_port);
    }

    async fn restart_api(&mut self) {
        self.api = start_api(
            self.dir.path(),
            self.api_port,
            &self.database_url,
            &self.engine_url,
        );
        self.client = Client::connect(self.api_port).await;
    }

    fn servers(&self) -> Vec<Server> {
        let (status, body) = http(self.sim_addr, "GET", "/sim/state", "");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let state: serde_json::Value = serde_json::from_slice(&body).expect("the world as JSON");
        let servers = Server::from_state(&state);
        assert_eq!(servers.len(), INSTANCES, "the world's servers");
        servers
    }

    /// Powers compute-01 off and reports it fenced.
    async fn host_fails(&mut self) -> String {
        let (status, body) = http(self.sim_addr, "POST", "/sim/hosts/compute-01/power-off", "");
        assert!(
            (200..300).contains(&status),
            "{}",
            String::from_utf8_lossy(&body)
        );
        self.client.host_fails().await
    }

    /// Waits until a few instances are recovered and others are not yet.
    async fn mid_recovery(&mut self, id: &str) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let vmoves = self.client.vmoves(id).await;
            let done = vmoves
                .iter()
                .filter(|v| {
                    instanceha_testkit::check::vmove_status(v) == pb::VmoveStatus::Succeeded
                })
                .count();
            if (2..INSTANCES).contains(&done) {
                return;
            }
            assert!(
                done < INSTANCES,
                "the recovery finished before the fault{}",
                self.logs()
            );
            assert!(Instant::now() < deadline, "no progress{}", self.logs());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits for the end and checks it: the invariants, `finished`, every
    /// instance on compute-02 and unlocked.
    async fn finishes(&mut self, id: &str) -> pb::Notification {
        let deadline = Instant::now() + PATIENCE;
        let n = loop {
            let n = match self.client.notification(id).await {
                Ok(n) => n,
                Err(e) if e.code() == tonic::Code::NotFound => {
                    panic!("the notification is lost: {e}{}", self.logs())
                }
                Err(e) => {
                    // The API may not answer for a moment (its database
                    // restarting); only the bound counts.
                    assert!(
                        Instant::now() < deadline,
                        "the API does not answer: {e}{}",
                        self.logs()
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            if matches!(
                instanceha_testkit::check::status(&n),
                pb::NotificationStatus::Finished
                    | pb::NotificationStatus::Failed
                    | pb::NotificationStatus::Ignored
            ) || Instant::now() >= deadline
            {
                break n;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let vmoves = self.client.vmoves(id).await;
        let servers = self.servers();
        let violations = invariant_violations(&n, &vmoves, &servers);
        assert!(
            violations.is_empty(),
            "invariants violated: {violations:?}{}",
            self.logs()
        );
        assert_eq!(
            instanceha_testkit::check::status(&n),
            pb::NotificationStatus::Finished,
            "{}{}",
            n.message,
            self.logs()
        );
        assert_eq!(vmoves.len(), INSTANCES);
        eprintln!(
            "process fault: {} finished, {} vmoves succeeded, {} run(s), vmove attempts up to {}",
            id,
            vmoves
                .iter()
                .filter(|v| instanceha_testkit::check::vmove_status(v) == pb::VmoveStatus::Succeeded)
                .count(),
            n.attempts,
            vmoves.iter().map(|v| v.attempts).max().unwrap_or(0)
        );
        for server in &servers {
            assert_eq!(
                server.host.as_deref(),
                Some("compute-02"),
                "{} not recovered",
                server.name
            );
            assert!(!server.locked, "{} left locked", server.name);
        }
        n
    }

    fn logs(&self) -> String {
        [&self.sim, &self.engine, &self.api]
            .iter()
            .map(|p| {
                format!(
                    "\n--- {} ({}):\n{}",
                    p.name,
                    p.log.display(),
                    tail(&p.log, 25)
                )
            })
            .collect()
    }
}

/// The engine's configuration file: the simulator's admin and service
/// identities at `auth_url`, fast polling and short retries.
fn engine_config(auth_url: &str) -> String {
    let auth = |user: &str, project: &str| {
        format!(
            "auth_url = \"{auth_url}\"\nusername = \"{user}\"\npassword = \"secret\"\nproject_name = \"{project}\"\nuser_domain_name = \"Default\"\nproject_domain_name = \"Default\"\n"
        )
    };
    format!(
        "[openstack]\ninterfaces = [\"public\"]\nrequest_timeout = \"2s\"\n\n[openstack.retry]\nmax_attempts = 3\ninitial_backoff = \"10ms\"\nmax_backoff = \"40ms\"\nmax_retry_after = \"100ms\"\n\n[openstack.auth]\n{}\n[openstack.service_auth]\n{}\n[recovery]\npoll_interval = \"20ms\"\nevacuation_timeout = \"30s\"\nstalled_evacuation_after = \"10s\"\npower_timeout = \"10s\"\n\n[host_failure]\nservice_down_timeout = \"5s\"\n",
        auth("admin", "admin"),
        auth("nova", "service")
    )
}

fn start_engine(dir: &Path, port: u16) -> Process {
    Process::start(
        "instanceha-engine",
        &binaries().engine,
        &[
            "--config".into(),
            dir.join("engine.toml").display().to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
        ],
        dir.join("engine.log"),
    )
}

fn start_api(dir: &Path, port: u16, database_url: &str, engine_url: &str) -> Process {
    Process::start(
        "instanceha-api",
        &binaries().api,
        &[
            "--config".into(),
            dir.join("api.toml").display().to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--database-url".into(),
            database_url.to_owned(),
            "--engine-url".into(),
            engine_url.to_owned(),
        ],
        dir.join("api.log"),
    )
}

/// The public API's clients.
struct Client {
    channel: Channel,
    notifications: NotificationServiceClient<Channel>,
    vmoves: VmoveServiceClient<Channel>,
}

impl Client {
    async fn connect(port: u16) -> Client {
        let channel = instanceha_testkit::cloud::connect(([127, 0, 0, 1], port).into()).await;
        Client {
            notifications: NotificationServiceClient::new(channel.clone()),
            vmoves: VmoveServiceClient::new(channel.clone()),
            channel,
        }
    }

    async fn segment(&mut self) {
        instanceha_testkit::cloud::auto_segment(
            self.channel.clone(),
            &["compute-01", "compute-02"],
        )
        .await;
    }

    async fn host_fails(&mut self) -> String {
        self.notifications
            .create_notification(pb::CreateNotificationRequest {
                r#type: pb::NotificationType::ComputeHost as i32,
                hostname: "compute-01".into(),
                generated_time: Some(instanceha_testkit::cloud::now()),
                payload: instanceha_testkit::cloud::fenced_host_payload(),
                idempotency_key: String::new(),
            })
            .await
            .expect("the notification is accepted")
            .into_inner()
            .id
    }

    async fn notification(&mut self, id: &str) -> Result<pb::Notification, tonic::Status> {
        self.notifications
            .get_notification(pb::GetNotificationRequest { id: id.into() })
            .await
            .map(|r| r.into_inner())
    }

    /// The vmoves; none while the API does not answer.
    async fn vmoves(&mut self, id: &str) -> Vec<pb::Vmove> {
        self.vmoves
            .list_vmoves(pb::ListVmovesRequest {
                notification_id: id.into(),
                page_size: 1000,
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner().vmoves)
            .unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------
// The faults

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_process_killed_mid_recovery_and_started_again() {
    let mut system = System::start(None, |port| format!("http://127.0.0.1:{port}")).await;
    let id = system.host_fails().await;
    system.mid_recovery(&id).await;
    system.engine.kill();
    tokio::time::sleep(Duration::from_secs(1)).await; // sleep: the engine stays dead a second.
    system.restart_engine();
    let n = system.finishes(&id).await;
    assert!(n.attempts >= 2, "a second run recovered the rest");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_process_killed_mid_recovery_and_restarted_on_the_same_database() {
    let mut system = System::start(None, |port| format!("http://127.0.0.1:{port}")).await;
    let id = system.host_fails().await;
    system.mid_recovery(&id).await;
    system.api.kill();
    tokio::time::sleep(Duration::from_millis(500)).await; // sleep: the API stays dead a moment.
    system.restart_api().await;
    system.finishes(&id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_mid_recovery() {
    let pg = match tokio::task::spawn_blocking(Postgres::start).await.unwrap() {
        Ok(pg) => pg,
        Err(why) => {
            eprintln!("SKIPPED postgres_restarted_mid_recovery: {why}");
            return;
        }
    };
    let mut system = System::start(Some(pg.url.clone()), |port| {
        format!("http://127.0.0.1:{port}")
    })
    .await;
    let id = system.host_fails().await;
    system.mid_recovery(&id).await;
    let pg = tokio::task::spawn_blocking(move || {
        pg.stop_server("fast").expect("PostgreSQL stops");
        std::thread::sleep(Duration::from_secs(4)); // sleep: PostgreSQL stays down four seconds.
        pg.start_server().expect("PostgreSQL starts again");
        pg
    })
    .await
    .unwrap();
    system.finishes(&id).await;
    // The restart was felt: the API's queries failed meanwhile.
    let log = std::fs::read_to_string(&system.api.log).unwrap_or_default();
    let failures = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .filter(|l| {
            ["database", "persist", "lease", "scan"]
                .iter()
                .any(|w| l.contains(w))
        })
        .count();
    eprintln!("postgres restart: the API logged {failures} database warning(s) meanwhile");
    assert!(
        failures > 0,
        "the API never noticed the restart{}",
        system.logs()
    );
    drop(pg);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_between_api_and_engine_cut_mid_recovery() {
    let proxy: Arc<Mutex<Option<Proxy>>> = Arc::default();
    let slot = proxy.clone();
    let mut system = System::start(None, move |port| {
        let started = Proxy::start(([127, 0, 0, 1], port).into());
        let url = format!("http://127.0.0.1:{}", started.port);
        *slot.lock().unwrap() = Some(started);
        url
    })
    .await;
    let id = system.host_fails().await;
    system.mid_recovery(&id).await;
    proxy.lock().unwrap().as_ref().unwrap().cut();
    tokio::time::sleep(Duration::from_secs(3)).await; // sleep: the links stay cut three seconds.
    proxy.lock().unwrap().as_ref().unwrap().restore();
    system.finishes(&id).await;
}

// ---------------------------------------------------------------------------
// Stopping

/// `grpc.health.v1` status of `service`, asked on a new connection (so the
/// listener must still accept).
async fn health_on_a_new_connection(addr: SocketAddr, service: &str) -> Result<i32, String> {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .map(|r| r.into_inner().status)
        .map_err(|e| format!("check {service:?}: {e}"))
}

/// Waits (up to `PATIENCE`) until `service` reports `expected`.
async fn wait_for_health(addr: SocketAddr, service: &str, expected: i32, log: &Path) {
    let reported = until(PATIENCE, Duration::from_millis(50), || async {
        let status = health_on_a_new_connection(addr, service).await;
        if status == Ok(expected) {
            Ok(())
        } else {
            Err(format!("{status:?}"))
        }
    });
    if let Err(last) = reported.await {
        panic!(
            "{service:?} never reported {expected} (last: {last}):\n{}",
            tail(log, 30)
        );
    }
}

/// What Kubernetes does to stop a pod: SIGTERM, and after the grace period
/// SIGKILL. The engine reports not ready at once (readiness probes and the
/// API's balancer stop choosing it), keeps accepting connections through
/// `shutdown.drain_delay`, keeps its liveness service SERVING (no restart
/// while draining), and a second SIGTERM ends the delay: it exits cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_sigterm_reports_not_ready_keeps_accepting_through_the_drain_delay() {
    use tonic_health::pb::health_check_response::ServingStatus;
    let sim = openstack_sim::Sim::start(scenario(), "127.0.0.1:0".parse().unwrap())
        .await
        .expect("the simulator starts");
    let dir = tempfile::tempdir().unwrap();
    // Far longer than the test needs: the second signal must end it.
    std::fs::write(
        dir.path().join("engine.toml"),
        engine_config(&sim.auth_url()) + "\n[shutdown]\ndrain_delay = \"10m\"\n",
    )
    .unwrap();
    let mut engine = Process::start(
        "instanceha-engine",
        Path::new(env!("CARGO_BIN_EXE_instanceha-engine")),
        &[
            "--config".into(),
            dir.path().join("engine.toml").display().to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ],
        dir.path().join("engine.log"),
    );
    let addr = engine.addr;
    let serving = ServingStatus::Serving as i32;
    let not_serving = ServingStatus::NotServing as i32;
    let status = |service: &'static str| health_on_a_new_connection(addr, service);

    // Ready once Keystone and both endpoints answer.
    wait_for_health(addr, "", serving, &engine.log).await;
    assert_eq!(status("liveness").await, Ok(serving));

    engine.terminate();
    wait_for_health(addr, "", not_serving, &engine.log).await;
    // Draining: new connections are still accepted and answered.
    assert_eq!(status("instanceha.engine.v1.Engine").await, Ok(not_serving));
    assert_eq!(
        status("liveness").await,
        Ok(serving),
        "no restart while draining"
    );
    assert!(engine.child.try_wait().unwrap().is_none(), "it still runs");

    engine.terminate();
    let exit = engine.exits_within(PATIENCE).await;
    let log = std::fs::read_to_string(&engine.log).unwrap_or_default();
    assert!(
        exit.is_some_and(|s| s.success()),
        "exit {exit:?} after the second SIGTERM:\n{}",
        tail(&engine.log, 30)
    );
    for line in [
        "not ready: still serving until the drain delay ends",
        "second signal: drain delay cut short",
        "instanceha-engine stopped",
    ] {
        assert!(log.contains(line), "{line:?} not in the log:\n{log}");
    }
    drop(sim);
}
