//! The Pacemaker driver, for sites that keep Pacemaker and Corosync: reads
//! `crm_mon --as-xml` every interval. The partition's quorum is
//! Corosync's (`current_dc with_quorum`); a node is alive when `online`.
//! As masakari-hostmonitor, only a change from online to offline is a
//! failure, and nothing is decided without quorum.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::process::Command;

use super::{Detector, Error, Transitions, View};

/// What `crm_mon --as-xml` says of the cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterState {
    pub quorate: bool,
    pub online: BTreeSet<String>,
    pub nodes: BTreeSet<String>,
}

/// Parses `crm_mon --as-xml` (Pacemaker 1.1's and 2.x's formats).
pub fn parse(xml: &str) -> Result<ClusterState, Error> {
    let doc = roxmltree::Document::parse(xml)
        .map_err(|e| Error::Pacemaker(format!("not crm_mon XML: {e}")))?;
    let mut state = ClusterState::default();
    for node in doc.descendants() {
        match node.tag_name().name() {
            "current_dc" => {
                state.quorate = node.attribute("present") != Some("false")
                    && node.attribute("with_quorum") == Some("true");
            }
            "node"
                if node
                    .parent()
                    .is_some_and(|p| p.tag_name().name() == "nodes") =>
            {
                let Some(name) = node.attribute("name") else {
                    continue;
                };
                state.nodes.insert(name.to_owned());
                if node.attribute("online") == Some("true") {
                    state.online.insert(name.to_owned());
                }
            }
            _ => {}
        }
    }
    if state.nodes.is_empty() {
        return Err(Error::Pacemaker("crm_mon listed no nodes".to_owned()));
    }
    Ok(state)
}

pub struct PacemakerDetector {
    command: Vec<String>,
    interval: tokio::time::Interval,
    transitions: Transitions,
}

impl PacemakerDetector {
    pub fn new(command: Vec<String>, interval: Duration) -> Self {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Self {
            command,
            interval: ticker,
            transitions: Transitions::default(),
        }
    }

    async fn read(&self) -> Result<String, Error> {
        let (program, args) = self
            .command
            .split_first()
            .ok_or_else(|| Error::Pacemaker("host.pacemaker.command is empty".to_owned()))?;
        let output = tokio::time::timeout(
            Duration::from_secs(30),
            Command::new(program).args(args).kill_on_drop(true).output(),
        )
        .await
        .map_err(|_| Error::Pacemaker(format!("{program} timed out")))?
        .map_err(|e| Error::Pacemaker(format!("cannot run {program}: {e}")))?;
        if !output.status.success() {
            return Err(Error::Pacemaker(format!(
                "{program} failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

impl Detector for PacemakerDetector {
    fn name(&self) -> &'static str {
        "pacemaker"
    }

    async fn next(&mut self) -> Result<View, Error> {
        self.interval.tick().await;
        let state = parse(&self.read().await?)?;
        let since = chrono::Utc::now().timestamp_millis();
        Ok(self
            .transitions
            .update(state.quorate, &state.online, &state.nodes, |_| {
                format!("pacemaker-{since}")
            }))
    }

    fn announce(&mut self, _host: &str, _incident: &str) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded from Pacemaker 2.1 (`crm_mon --as-xml`), trimmed.
    const TWO_OF_THREE: &str = r#"<?xml version="1.0"?>
<pacemaker-result api-version="2.30" request="crm_mon --as-xml">
  <summary>
    <stack type="corosync"/>
    <current_dc present="true" version="2.1.5-a3f44794f94" name="compute-01" id="1" with_quorum="true" mixed_version="false"/>
    <last_update time="Wed Dec  2 10:00:00 2026"/>
    <nodes_configured number="3"/>
  </summary>
  <nodes>
    <node name="compute-01" id="1" online="true" standby="false" standby_onfail="false" maintenance="false" pending="false" unclean="false" health="green" feature_set="3.16.2" shutdown="false" expected_up="true" is_dc="true" resources_running="1" type="member"/>
    <node name="compute-02" id="2" online="false" standby="false" standby_onfail="false" maintenance="false" pending="false" unclean="true" health="green" feature_set="3.16.2" shutdown="false" expected_up="true" is_dc="false" resources_running="0" type="member"/>
    <node name="compute-03" id="3" online="true" standby="false" standby_onfail="false" maintenance="false" pending="false" unclean="false" health="green" feature_set="3.16.2" shutdown="false" expected_up="true" is_dc="false" resources_running="1" type="member"/>
  </nodes>
  <resources/>
  <status code="0" message="OK"/>
</pacemaker-result>"#;

    #[test]
    fn crm_mon_xml_gives_quorum_and_online_nodes() {
        let state = parse(TWO_OF_THREE).unwrap();
        assert!(state.quorate);
        assert_eq!(state.nodes.len(), 3);
        assert_eq!(
            state.online.iter().map(String::as_str).collect::<Vec<_>>(),
            ["compute-01", "compute-03"]
        );
        let lost = TWO_OF_THREE.replace("with_quorum=\"true\"", "with_quorum=\"false\"");
        assert!(!parse(&lost).unwrap().quorate);
        assert!(parse("<crm_mon/>").is_err());
        assert!(parse("not xml").is_err());
    }
}
