//! What the agent's tests run against, all real: sushy-tools' Redfish
//! emulator and pyghmi's fake IPMI BMC (from the venv
//! `INSTANCEHA_TEST_BMC_PYTHON` names, as `agent/ci/install-test-deps`
//! builds it) driven through Debian's `ipmitool`; `instanceha-api`
//! in-process on an SQLite file; and agents as processes of the
//! `instanceha-agent` binary, so that a test can SIGKILL or SIGSTOP them.

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use instanceha_api::config::Settings as ApiSettings;
use instanceha_api::server::Server;
use instanceha_proto::v1 as pb;
use instanceha_testkit::eventually::{eventually, until};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use pb::notification_service_client::NotificationServiceClient;
use sha2_digest::Digest as _;
use tokio::sync::oneshot;
use tonic::transport::Channel;

/// The token the agents present to the API.
pub const TOKEN: &str = "agent-token-for-tests";
/// pyghmi's fakebmc accepts only these.
pub const IPMI_USER: &str = "admin";
pub const IPMI_PASSWORD: &str = "password";
/// The Redfish emulator's basic-auth user in these tests.
pub const REDFISH_USER: &str = "admin";
pub const REDFISH_PASSWORD: &str = "redfish-secret";

/// The BMC emulators' venv and ipmitool, or why they are missing.
pub struct Tools {
    pub bin: PathBuf,
    pub python: PathBuf,
}

impl Tools {
    /// The emulators, or `None` (with a message) when they are missing and
    /// `CI` is unset. Under `CI`, missing emulators fail the test.
    pub fn find() -> Option<Self> {
        let fail = |why: String| {
            let how = "run agent/ci/install-test-deps and set INSTANCEHA_TEST_BMC_PYTHON to the venv's python";
            if std::env::var_os("CI").is_some() {
                panic!("BMC emulators missing under CI: {why} ({how})");
            }
            instanceha_test_env::say_skipped(
                "a test with BMC emulators",
                &format!("{why} ({how})"),
            );
            None
        };
        let Some(python) = std::env::var_os("INSTANCEHA_TEST_BMC_PYTHON").map(PathBuf::from) else {
            return fail("INSTANCEHA_TEST_BMC_PYTHON is unset".to_owned());
        };
        let bin = python.parent().map(Path::to_path_buf).unwrap_or_default();
        for tool in ["sushy-emulator", "fakebmc"] {
            if !bin.join(tool).exists() {
                return fail(format!("{} has no {tool}", bin.display()));
            }
        }
        if Command::new("ipmitool").arg("-V").output().is_err() {
            return fail("ipmitool is not on PATH".to_owned());
        }
        Some(Self { bin, python })
    }
}

/// Kills a child process when dropped.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// sushy-tools' emulator with its fake driver: one Redfish system per
/// host, named after it.
pub struct Sushy {
    _child: Reaped,
    pub url: String,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Sushy {
    /// Serves `systems` (name, initial power "On"/"Off") on `ip`, port 0,
    /// with basic authentication.
    pub fn start(tools: &Tools, ip: &str, systems: &[(&str, &str)]) -> Self {
        instanceha_agent::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let hash = Command::new(&tools.python)
            .args([
                "-c",
                "import bcrypt, sys; print(bcrypt.hashpw(sys.argv[1].encode(), bcrypt.gensalt(4)).decode())",
                REDFISH_PASSWORD,
            ])
            .output()
            .expect("the venv's python runs");
        let htpasswd = dir.path().join("htpasswd");
        std::fs::write(
            &htpasswd,
            format!(
                "{REDFISH_USER}:{}",
                String::from_utf8_lossy(&hash.stdout).trim()
            ),
        )
        .unwrap();
        let fake: Vec<String> = systems
            .iter()
            .enumerate()
            .map(|(i, (name, power))| {
                format!(
                    "{{'uuid': '00000000-0000-4000-8000-{i:012}', 'name': '{name}', 'power_state': '{power}', 'nics': []}}"
                )
            })
            .collect();
        let config = dir.path().join("emulator.conf");
        std::fs::write(
            &config,
            format!(
                "SUSHY_EMULATOR_LISTEN_IP = '{ip}'\nSUSHY_EMULATOR_LISTEN_PORT = 0\nSUSHY_EMULATOR_FAKE_DRIVER = True\n\
                 SUSHY_EMULATOR_STATE_DIR = '{}'\nSUSHY_EMULATOR_AUTH_FILE = '{}'\nSUSHY_EMULATOR_FAKE_SYSTEMS = [{}]\n",
                dir.path().join("state").display(),
                htpasswd.display(),
                fake.join(", ")
            ),
        )
        .unwrap();
        let mut child = Command::new(tools.bin.join("sushy-emulator"))
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sushy-emulator starts");
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("sushy-emulator said where it listens")
                .unwrap();
            if let Some(at) = line.find("Running on http://") {
                let url = line[at + "Running on ".len()..].trim().to_owned();
                break url;
            }
        };
        // Keep draining its log so that it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Self {
            _child: Reaped(child),
            url,
            http: reqwest::Client::new(),
            _dir: dir,
        }
    }

    /// A system's `PowerState`.
    pub async fn power(&self, system: &str) -> String {
        let v: serde_json::Value = self
            .http
            .get(format!("{}/redfish/v1/Systems/{system}", self.url))
            .basic_auth(REDFISH_USER, Some(REDFISH_PASSWORD))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["PowerState"].as_str().unwrap_or_default().to_owned()
    }
}

/// A free UDP port for servers that cannot report the one they bound
/// (agents' heartbeats, pyghmi's BMC). Ports come from one counter per
/// test binary, so tests running side by side never get the same one, and
/// each is checked free on every address.
pub fn free_udp_port(_ip: &str) -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20000 + (std::process::id() % 20000) as u16;
    let _ = NEXT.compare_exchange(0, base, Ordering::SeqCst, Ordering::SeqCst);
    loop {
        let port = NEXT.fetch_add(1, Ordering::SeqCst);
        if port >= 60000 {
            NEXT.store(20000, Ordering::SeqCst);
            continue;
        }
        if port >= 20000 && std::net::UdpSocket::bind(("0.0.0.0", port)).is_ok() {
            return port;
        }
    }
}

/// pyghmi's fake BMC (`fakebmc`), powered on through `ipmitool`.
pub struct FakeBmc {
    _child: Reaped,
    pub port: u16,
}

impl FakeBmc {
    pub async fn start(tools: &Tools) -> Self {
        let port = free_udp_port("0.0.0.0");
        let child = Command::new(tools.bin.join("fakebmc"))
            .args(["--port", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("fakebmc starts");
        let bmc = Self {
            _child: Reaped(child),
            port,
        };
        eventually(
            &format!("fakebmc to answer on port {port}"),
            Duration::from_secs(5),
            Duration::from_millis(100),
            || async { bmc.ipmitool(&["chassis", "power", "on"]).is_some() },
        )
        .await;
        bmc
    }

    pub fn ipmitool(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("ipmitool")
            .args([
                "-I",
                "lanplus",
                "-H",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
            ])
            .args(["-U", IPMI_USER, "-P", IPMI_PASSWORD])
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub fn power(&self) -> String {
        self.ipmitool(&["chassis", "power", "status"])
            .unwrap_or_default()
    }
}

/// `instanceha-api` in-process on an SQLite file, with static tokens;
/// stoppable and restartable on the same port and database.
pub struct Api {
    pub addr: SocketAddr,
    dir: PathBuf,
    running: Option<(oneshot::Sender<()>, tokio::task::JoinHandle<()>)>,
}

impl Api {
    pub async fn start(dir: &Path) -> Self {
        Self::start_on(dir, "127.0.0.1").await
    }

    /// On `ip` (an address of a test network), port 0.
    pub async fn start_on(dir: &Path, ip: &str) -> Self {
        let listen = SocketAddr::new(ip.parse().unwrap(), 0);
        let mut api = Self {
            addr: listen,
            dir: dir.to_owned(),
            running: None,
        };
        api.serve(listen).await;
        api
    }

    async fn serve(&mut self, listen: SocketAddr) {
        let tokens = self.dir.join("tokens.toml");
        let digest: String = sha2_digest::Sha256::digest(TOKEN.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        std::fs::write(
            &tokens,
            format!(
                "[[token]]\nname = \"agents\"\nsha256 = \"{digest}\"\nroles = [\"monitoring_agent\"]\n\
                 [[token]]\nname = \"admin\"\nsha256 = \"{}\"\nroles = [\"admin\"]\n",
                sha2_digest::Sha256::digest(b"admin-token")
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
            ),
        )
        .unwrap();
        let mut settings = ApiSettings {
            listen,
            ..ApiSettings::default()
        };
        settings.database.url = format!("sqlite://{}", self.dir.join("api.db").display());
        settings.rest.enabled = false;
        settings.dispatch.enabled = false;
        settings.auth.mode = instanceha_api::auth::AuthMode::Static;
        settings.auth.static_tokens_file = Some(tokens);
        let server = Server::bind(&settings).await.expect("the API starts");
        self.addr = server.local_addr();
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            server
                .run(async {
                    let _ = rx.await;
                })
                .await
                .expect("the API serves");
        });
        self.running = Some((tx, task));
    }

    /// Stops serving (the port is closed).
    pub async fn stop(&mut self) {
        if let Some((tx, task)) = self.running.take() {
            let _ = tx.send(());
            let _ = task.await;
        }
    }

    /// Serves again on the same port and database.
    pub async fn restart(&mut self) {
        let addr = self.addr;
        // The port may take a moment to be free again; `serve` says so if
        // it never is.
        let _ = until(
            Duration::from_secs(5),
            Duration::from_millis(100),
            || async { std::net::TcpListener::bind(addr).is_ok() },
        )
        .await;
        self.serve(addr).await;
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    async fn channel(&self) -> Channel {
        Channel::from_shared(self.url())
            .unwrap()
            .connect()
            .await
            .expect("connect to the API")
    }

    fn admin<T>(message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request
            .metadata_mut()
            .insert("authorization", "Bearer admin-token".parse().unwrap());
        request
    }

    /// A segment with these hosts.
    pub async fn segment(&self, name: &str, hosts: &[&str]) {
        let channel = self.channel().await;
        let mut segments = pb::segment_service_client::SegmentServiceClient::new(channel.clone());
        let mut host_client = pb::host_service_client::HostServiceClient::new(channel);
        let segment = segments
            .create_segment(Self::admin(pb::CreateSegmentRequest {
                name: name.to_owned(),
                description: None,
                service_type: "COMPUTE".to_owned(),
                recovery_method: pb::RecoveryMethod::Auto as i32,
                enabled: None,
                return_to_service: None,
            }))
            .await
            .unwrap()
            .into_inner();
        for host in hosts {
            host_client
                .create_host(Self::admin(pb::CreateHostRequest {
                    segment_id: segment.id.clone(),
                    name: (*host).to_owned(),
                    r#type: "COMPUTE".to_owned(),
                    control_attributes: String::new(),
                    reserved: false,
                    on_maintenance: false,
                }))
                .await
                .unwrap();
        }
    }

    /// Every notification stored, oldest first.
    pub async fn notifications(&self) -> Vec<pb::Notification> {
        let mut client = NotificationServiceClient::new(self.channel().await);
        let mut all = client
            .list_notifications(Self::admin(pb::ListNotificationsRequest {
                page_size: 1000,
                ..Default::default()
            }))
            .await
            .unwrap()
            .into_inner()
            .notifications;
        all.reverse();
        all
    }
}

/// An `instanceha-agent` process, its log in a file.
pub struct AgentProcess {
    child: Option<Child>,
    pub name: String,
    pub log: PathBuf,
    config: PathBuf,
    netns: Option<String>,
}

impl AgentProcess {
    /// Writes `config` and starts the agent (inside `netns`, if given).
    pub fn spawn(dir: &Path, name: &str, config: &str, netns: Option<&str>) -> Self {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, config).unwrap();
        let mut agent = Self {
            child: None,
            name: name.to_owned(),
            log: dir.join(format!("{name}.log")),
            config: path,
            netns: netns.map(str::to_owned),
        };
        agent.start();
        agent
    }

    /// (Re)starts the process, appending to its log.
    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let binary = env!("CARGO_BIN_EXE_instanceha-agent");
        let mut command = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, binary]);
                c
            }
            None => Command::new(binary),
        };
        let child = command
            .arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("the agent starts");
        self.child = Some(child);
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.as_ref().expect("running").id() as i32)
    }

    pub fn signal(&self, signal: Signal) {
        kill(self.pid(), signal).expect("signal the agent");
    }

    /// SIGKILL, and reap.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn logged(&self, needle: &str) -> bool {
        self.log_text().contains(needle)
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- log of {} ---\n{}", self.name, self.log_text());
        }
        if let Some(child) = &self.child {
            let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
        }
        self.kill();
    }
}

/// How often the agent tests look again at what they wait for.
pub const POLL: Duration = Duration::from_millis(200);

/// The TOML of one agent of a heartbeat segment.
pub struct ClusterConfig<'a> {
    pub api_url: &'a str,
    pub dir: &'a Path,
    /// (name, heartbeat address) of every member.
    pub members: &'a [(String, String)],
    /// The fencing section, shared by every agent.
    pub fencing: &'a str,
    pub detect_after: &'a str,
}

impl ClusterConfig<'_> {
    pub fn for_member(&self, me: &str) -> String {
        let token = self.dir.join("token");
        std::fs::write(&token, format!("{TOKEN}\n")).unwrap();
        let key = self.dir.join("heartbeat.key");
        std::fs::write(&key, "a key the segment's agents share\n").unwrap();
        let listen = &self.members.iter().find(|(n, _)| n == me).unwrap().1;
        let mut peers = String::new();
        for (name, address) in self.members.iter().filter(|(n, _)| n != me) {
            peers.push_str(&format!(
                "[[host.heartbeat.peers]]\nname = \"{name}\"\naddress = \"{address}\"\n"
            ));
        }
        format!(
            "hostname = \"{me}\"\n\
             [api]\nurl = \"{api}\"\ntoken_file = \"{token}\"\ntimeout = \"2s\"\n\
             [spool]\npath = \"{dir}/{me}.redb\"\nretry_initial = \"200ms\"\nretry_max = \"2s\"\n\
             [host]\ndriver = \"heartbeat\"\ndetect_after = \"{detect}\"\n\
             [host.heartbeat]\nlisten = \"{listen}\"\ninterval = \"500ms\"\nsegment = \"segment-a\"\n\
             key = {{ file = \"{key}\" }}\n{peers}\n\
             {fencing}",
            api = self.api_url,
            token = token.display(),
            key = key.display(),
            dir = self.dir.display(),
            detect = self.detect_after,
            fencing = self.fencing,
        )
    }
}

/// A password file for the BMCs.
pub fn password_file(dir: &Path, name: &str, secret: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("{secret}\n")).unwrap();
    path
}
