//! A network partition, for real: each agent runs in a network namespace
//! this test creates, with one link to a heartbeat bridge and one to a
//! services bridge (the API and the Redfish emulator). Cutting compute-1's
//! heartbeat link leaves it alone, still able to reach the API and the
//! BMCs: the majority (compute-2, -3) must fence and report it, once, and
//! compute-1, the lowest name and so the usual reporter, must do nothing.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use instanceha_testkit::eventually;

use crate::support::{self, AgentProcess, Api, ClusterConfig, POLL, Sushy, Tools};

const HOSTS: [&str; 3] = ["compute-1", "compute-2", "compute-3"];

/// The namespaces and bridges of one test; removed when dropped.
struct Lab {
    prefix: String,
    subnet: u8,
    namespaces: Vec<String>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Lab {
    fn create(n: usize) -> Result<Self, String> {
        let id = std::process::id() % 1000;
        let mut lab = Self {
            prefix: format!("iha{id}"),
            subnet: (id % 200 + 20) as u8,
            namespaces: Vec::new(),
        };
        let p = lab.prefix.clone();
        let s = lab.subnet;
        // What a killed earlier run with the same prefix may have left.
        for k in 1..=n {
            let _ = ip(&["netns", "del", &format!("{p}n{k}")]);
            let _ = ip(&["link", "del", &format!("{p}h{k}")]);
            let _ = ip(&["link", "del", &format!("{p}s{k}")]);
        }
        let _ = ip(&["link", "del", &format!("{p}hb")]);
        let _ = ip(&["link", "del", &format!("{p}sv")]);
        ip(&["link", "add", &format!("{p}hb"), "type", "bridge"])?;
        ip(&["link", "set", &format!("{p}hb"), "up"])?;
        ip(&["link", "add", &format!("{p}sv"), "type", "bridge"])?;
        ip(&[
            "addr",
            "add",
            &format!("10.213.{s}.254/24"),
            "dev",
            &format!("{p}sv"),
        ])?;
        ip(&["link", "set", &format!("{p}sv"), "up"])?;
        for k in 1..=n {
            let ns = format!("{p}n{k}");
            ip(&["netns", "add", &ns])?;
            lab.namespaces.push(ns.clone());
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            for (side, bridge, net, dev) in [("h", "hb", 214, "hb0"), ("s", "sv", 213, "sv0")] {
                let root = format!("{p}{side}{k}");
                ip(&[
                    "link", "add", &root, "type", "veth", "peer", "name", dev, "netns", &ns,
                ])?;
                ip(&[
                    "link",
                    "set",
                    &root,
                    "master",
                    &format!("{p}{bridge}"),
                    "up",
                ])?;
                ip(&[
                    "-n",
                    &ns,
                    "addr",
                    "add",
                    &format!("10.{net}.{s}.{k}/24"),
                    "dev",
                    dev,
                ])?;
                ip(&["-n", &ns, "link", "set", dev, "up"])?;
            }
        }
        Ok(lab)
    }

    fn services_ip(&self) -> String {
        format!("10.213.{}.254", self.subnet)
    }

    fn heartbeat_addr(&self, k: usize) -> String {
        format!("10.214.{}.{k}:15871", self.subnet)
    }

    /// Cuts (or restores) agent `k`'s heartbeat link.
    fn heartbeat_link(&self, k: usize, up: bool) {
        ip(&[
            "link",
            "set",
            &format!("{}h{k}", self.prefix),
            if up { "up" } else { "down" },
        ])
        .unwrap();
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        // A namespace still referenced (sockets closing) keeps its veths:
        // remove their root ends too.
        for k in 1..=self.namespaces.len() {
            for side in ["h", "s"] {
                let _ = ip(&["link", "del", &format!("{}{side}{k}", self.prefix)]);
            }
        }
        let _ = ip(&["link", "del", &format!("{}hb", self.prefix)]);
        let _ = ip(&["link", "del", &format!("{}sv", self.prefix)]);
    }
}

/// The `[fencing]` table: every host's Redfish system on `sushy`, the
/// password in the file `password`.
fn redfish_fencing(sushy: &Sushy, password: &Path) -> String {
    let mut fencing = String::from("[fencing]\ntimeout = \"30s\"\npoll_interval = \"250ms\"\n");
    for (i, host) in HOSTS.iter().enumerate() {
        fencing.push_str(&format!(
            "[fencing.devices.{host}]\ndriver = \"redfish\"\nurl = \"{}\"\nsystem = \"00000000-0000-4000-8000-{i:012}\"\n\
             username = \"{}\"\npassword = {{ file = \"{}\" }}\n",
            sushy.url,
            support::REDFISH_USER,
            password.display()
        ));
    }
    fencing
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(no_bmc_emulators, ignore = "set INSTANCEHA_TEST_BMC_PYTHON to run")]
async fn the_majority_fences_and_reports_the_isolated_member_which_does_nothing() {
    let Some(tools) = Tools::find() else { return };
    let lab = match Lab::create(HOSTS.len()) {
        Ok(lab) => lab,
        Err(e) if std::env::var_os("CI").is_none() => {
            let why = format!("cannot create network namespaces (root and iproute2 needed): {e}");
            return instanceha_test_env::say_skipped("the partition test", &why);
        }
        Err(e) => panic!("cannot create network namespaces under CI: {e}"),
    };
    let dir = tempfile::tempdir().unwrap();
    let api = Api::start_on(dir.path(), &lab.services_ip()).await;
    api.segment("segment-a", &HOSTS).await;
    let sushy = Sushy::start(
        &tools,
        &lab.services_ip(),
        &[
            ("compute-1", "On"),
            ("compute-2", "On"),
            ("compute-3", "On"),
        ],
    );
    let pw = support::password_file(dir.path(), "redfish.pw", support::REDFISH_PASSWORD);
    let fencing = redfish_fencing(&sushy, &pw);
    let members: Vec<(String, String)> = HOSTS
        .iter()
        .enumerate()
        .map(|(i, h)| ((*h).to_owned(), lab.heartbeat_addr(i + 1)))
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
        .enumerate()
        .map(|(i, h)| {
            AgentProcess::spawn(
                dir.path(),
                h,
                &config.for_member(h),
                Some(&lab.namespaces[i]),
            )
        })
        .collect();
    for agent in &agents {
        eventually(
            "a quorum everywhere",
            Duration::from_secs(20),
            POLL,
            || async { agent.logged("partition has a quorum") },
        )
        .await;
    }
    let logs = || {
        agents
            .iter()
            .map(|a| format!("--- {} ---\n{}", a.name, a.log_text()))
            .collect::<String>()
    };

    lab.heartbeat_link(1, false);
    eventually(
        "compute-1 reported by the majority",
        Duration::from_secs(45),
        POLL,
        || async {
            api.notifications()
                .await
                .iter()
                .any(|n| n.hostname == "compute-1")
        },
    )
    .await;
    eventually(
        "compute-1 knows it is alone",
        Duration::from_secs(10),
        POLL,
        || async { agents[0].logged("no quorum") },
    )
    .await;
    // sleep: time for a report from the isolated member to arrive; none may.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let all = api.notifications().await;
    assert_eq!(all.len(), 1, "{all:?}\n{}", logs());
    assert_eq!(all[0].hostname, "compute-1");
    assert_eq!(all[0].payload["host_status"], "NORMAL");
    assert_eq!(
        sushy.power("00000000-0000-4000-8000-000000000000").await,
        "Off"
    );
    assert_eq!(
        sushy.power("00000000-0000-4000-8000-000000000001").await,
        "On"
    );
    assert_eq!(
        sushy.power("00000000-0000-4000-8000-000000000002").await,
        "On"
    );
    assert!(
        agents[1].logged("host confirmed powered off"),
        "compute-2 is the majority's lowest name"
    );
    let isolated = agents[0].log_text();
    assert!(
        !isolated.contains("host failed") && !isolated.contains("spooled"),
        "the isolated member must neither fence nor report:\n{isolated}"
    );
    drop(lab);
}
