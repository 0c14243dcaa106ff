//! Clusters of three agent processes on loopback, heartbeating every
//! 500 ms with a 3 s window, against a real `instanceha-api` (static
//! tokens) and real BMC emulators: sushy-tools for compute-1 and -2,
//! pyghmi's fake BMC for compute-3.

use std::time::Duration;

use instanceha_proto::v1 as pb;
use instanceha_testkit::eventually;
use nix::sys::signal::Signal;

use crate::support::{self, AgentProcess, Api, ClusterConfig, FakeBmc, POLL, Sushy, Tools};

const HOSTS: [&str; 3] = ["compute-1", "compute-2", "compute-3"];

struct Cluster {
    api: Api,
    sushy: Sushy,
    ipmi: FakeBmc,
    agents: Vec<AgentProcess>,
    dir: tempfile::TempDir,
}

impl Cluster {
    async fn start(tools: &Tools) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let api = Api::start(dir.path()).await;
        api.segment("segment-a", &HOSTS).await;
        let sushy = Sushy::start(
            tools,
            "127.0.0.1",
            &[("compute-1", "On"), ("compute-2", "On")],
        );
        let ipmi = FakeBmc::start(tools).await;
        let redfish_pw =
            support::password_file(dir.path(), "redfish.pw", support::REDFISH_PASSWORD);
        let ipmi_pw = support::password_file(dir.path(), "ipmi.pw", support::IPMI_PASSWORD);
        let mut fencing = String::from("[fencing]\ntimeout = \"30s\"\npoll_interval = \"250ms\"\n");
        for (i, host) in HOSTS[..2].iter().enumerate() {
            fencing.push_str(&format!(
                "[fencing.devices.{host}]\ndriver = \"redfish\"\nurl = \"{}\"\nsystem = \"00000000-0000-4000-8000-{i:012}\"\n\
                 username = \"{}\"\npassword = {{ file = \"{}\" }}\n",
                sushy.url,
                support::REDFISH_USER,
                redfish_pw.display()
            ));
        }
        fencing.push_str(&format!(
            "[fencing.devices.compute-3]\ndriver = \"ipmi\"\naddress = \"127.0.0.1\"\nport = {}\nusername = \"{}\"\n\
             password = {{ file = \"{}\" }}\n",
            ipmi.port,
            support::IPMI_USER,
            ipmi_pw.display()
        ));
        let members: Vec<(String, String)> = HOSTS
            .iter()
            .map(|h| {
                (
                    (*h).to_owned(),
                    format!("127.0.0.1:{}", support::free_udp_port("127.0.0.1")),
                )
            })
            .collect();
        let url = api.url();
        let config = ClusterConfig {
            api_url: &url,
            dir: dir.path(),
            members: &members,
            fencing: &fencing,
            detect_after: "3s",
        };
        let agents: Vec<AgentProcess> = HOSTS
            .iter()
            .map(|h| AgentProcess::spawn(dir.path(), h, &config.for_member(h), None))
            .collect();
        let cluster = Self {
            api,
            sushy,
            ipmi,
            agents,
            dir,
        };
        for agent in &cluster.agents {
            eventually(
                "every agent in a quorate partition",
                Duration::from_secs(20),
                POLL,
                || async { agent.logged("partition has a quorum") },
            )
            .await;
        }
        cluster
    }

    fn agent(&mut self, name: &str) -> &mut AgentProcess {
        self.agents.iter_mut().find(|a| a.name == name).unwrap()
    }

    fn log_of(&self, name: &str) -> &AgentProcess {
        self.agents.iter().find(|a| a.name == name).unwrap()
    }

    fn logs(&self) -> String {
        self.agents
            .iter()
            .map(|a| format!("--- {} ---\n{}", a.name, a.log_text()))
            .collect()
    }

    async fn stopped_reports(&self, host: &str) -> Vec<pb::Notification> {
        self.api
            .notifications()
            .await
            .into_iter()
            .filter(|n| {
                n.hostname == host && n.payload.get("event").map(String::as_str) == Some("STOPPED")
            })
            .collect()
    }
}

/// SIGSTOP for less than the window: nothing happens.
async fn a_short_stall_is_ignored(cluster: &mut Cluster) {
    cluster.agent("compute-3").signal(Signal::SIGSTOP);
    // sleep: the stall lasts 2 s, less than `detect_after`.
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.agent("compute-3").signal(Signal::SIGCONT);
    // sleep: long enough for a wrong report to arrive; none may.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        cluster.api.notifications().await.is_empty(),
        "{}",
        cluster.logs()
    );
    assert!(cluster.ipmi.power().contains("on"));
    assert!(
        !cluster.logs().contains("host failed"),
        "{}",
        cluster.logs()
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(no_bmc_emulators, ignore = "set INSTANCEHA_TEST_BMC_PYTHON to run")]
async fn a_short_stall_is_ignored_and_a_dead_hosts_is_fenced_then_reported_once() {
    let Some(tools) = Tools::find() else { return };
    let mut cluster = Cluster::start(&tools).await;
    a_short_stall_is_ignored(&mut cluster).await;

    // SIGKILL compute-2's agent, its BMC powered on: fenced, then reported once.
    assert_eq!(
        cluster
            .sushy
            .power("00000000-0000-4000-8000-000000000001")
            .await,
        "On"
    );
    let killed_at = tokio::time::Instant::now();
    cluster.agent("compute-2").kill();
    eventually(
        "compute-2 reported",
        Duration::from_secs(45),
        POLL,
        || async { !cluster.stopped_reports("compute-2").await.is_empty() },
    )
    .await;
    let reported_after = killed_at.elapsed();
    // sleep: time for a second report to arrive; none may.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let all = cluster.api.notifications().await;
    assert_eq!(
        all.len(),
        1,
        "exactly one report: {all:?}\n{}",
        cluster.logs()
    );
    let report = &all[0];
    assert_eq!(report.r#type, pb::NotificationType::ComputeHost as i32);
    assert_eq!(
        report.payload["host_status"], "NORMAL",
        "fenced before reported"
    );
    assert_eq!(report.payload["cluster_status"], "OFFLINE");
    assert_eq!(
        cluster
            .sushy
            .power("00000000-0000-4000-8000-000000000001")
            .await,
        "Off"
    );
    let reporter = cluster.agent("compute-1").log_text();
    let fenced = reporter
        .find("host confirmed powered off")
        .expect("compute-1 fenced");
    let stored = reporter
        .find("report stored by the api")
        .expect("compute-1 reported");
    assert!(fenced < stored, "fencing comes before reporting");
    assert!(
        reporter.contains("traceparent=\"00-"),
        "the report's trace starts in the agent:\n{reporter}"
    );
    eventually(
        "the notification followed",
        Duration::from_secs(10),
        POLL,
        || async { cluster.log_of("compute-1").logged("notification watched") },
    )
    .await;
    assert!(
        !cluster.agent("compute-3").logged("host failed"),
        "only the lowest survivor acts"
    );
    eprintln!("compute-2 killed -> fenced and reported in {reported_after:?}");
    drop(cluster.dir);
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(no_bmc_emulators, ignore = "set INSTANCEHA_TEST_BMC_PYTHON to run")]
async fn an_api_outage_during_an_incident_loses_nothing_and_sends_once() {
    let Some(tools) = Tools::find() else { return };
    let mut cluster = Cluster::start(&tools).await;
    let outage = tokio::time::Instant::now();
    cluster.api.stop().await;

    cluster.agent("compute-3").kill();
    eventually(
        "compute-3 fenced and spooled",
        Duration::from_secs(30),
        POLL,
        || async { cluster.log_of("compute-1").logged("host failure spooled") },
    )
    .await;
    assert!(
        cluster.ipmi.power().contains("off"),
        "{}",
        cluster.ipmi.power()
    );
    eventually("a failed send", Duration::from_secs(10), POLL, || async {
        cluster.log_of("compute-1").logged("will retry")
    })
    .await;
    // The reporter itself restarts during the outage: its spool keeps the report.
    cluster.agent("compute-1").kill();
    cluster.agent("compute-1").start();

    let down_for = Duration::from_secs(60);
    // sleep: the API stays down for a minute.
    tokio::time::sleep(down_for.saturating_sub(outage.elapsed())).await;
    assert!(
        !cluster
            .agent("compute-1")
            .logged("report stored by the api")
    );
    cluster.api.restart().await;
    eventually(
        "the spooled report delivered",
        Duration::from_secs(20),
        POLL,
        || async { !cluster.stopped_reports("compute-3").await.is_empty() },
    )
    .await;
    // sleep: time for a second delivery to arrive; none may.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let all = cluster.api.notifications().await;
    assert_eq!(all.len(), 1, "exactly once: {all:?}\n{}", cluster.logs());
    assert_eq!(all[0].hostname, "compute-3");
    assert_eq!(all[0].payload["host_status"], "NORMAL");
    eprintln!("api down for {:?}; report delivered once", outage.elapsed());
}

/// Peers taken from the API's host list of the segment (the hosts are
/// named by loopback addresses, so that `NAME:peer_port` resolves), and no
/// fencing device: the dead host is reported `UNKNOWN`, with the reason in
/// the log, and the engine would leave it alone.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_fencing_device_a_dead_host_is_reported_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start(dir.path()).await;
    let hosts = ["127.0.0.11", "127.0.0.12", "127.0.0.13"];
    api.segment("segment-b", &hosts).await;
    let port = support::free_udp_port("127.0.0.1");
    let token = support::password_file(dir.path(), "token", support::TOKEN);
    let key = support::password_file(dir.path(), "heartbeat-key", "the segment's key");
    let mut agents: Vec<AgentProcess> = hosts
        .iter()
        .map(|h| {
            let config = format!(
                "hostname = \"{h}\"\n[api]\nurl = \"{}\"\ntoken_file = \"{}\"\n\
                 [spool]\npath = \"{}/{h}.redb\"\n\
                 [host]\ndriver = \"heartbeat\"\ndetect_after = \"3s\"\n\
                 [host.heartbeat]\nlisten = \"{h}:{port}\"\ninterval = \"500ms\"\nsegment = \"segment-b\"\npeer_port = {port}\n\
                 key = {{ file = \"{}\" }}\n",
                api.url(),
                token.display(),
                dir.path().display(),
                key.display()
            );
            AgentProcess::spawn(dir.path(), h, &config, None)
        })
        .collect();
    for agent in &agents {
        eventually(
            "a quorum from the API's host list",
            Duration::from_secs(20),
            POLL,
            || async { agent.logged("partition has a quorum") },
        )
        .await;
    }
    agents[2].kill();
    eventually("the report", Duration::from_secs(30), POLL, || async {
        !api.notifications().await.is_empty()
    })
    .await;
    let all = api.notifications().await;
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].hostname, "127.0.0.13");
    assert_eq!(all[0].payload["host_status"], "UNKNOWN");
    assert!(agents[0].logged("no fencing device is configured for 127.0.0.13"));
}
