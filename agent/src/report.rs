//! What the agent reports: plain failure reports (host, process, VM) with
//! the payloads Masakari's schemas accept and an idempotency key per
//! incident, built by pure constructors. The protobuf form exists only in
//! `client`.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, SubsecRound, Utc};
use serde::{Deserialize, Serialize};

/// A report's notification type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReportKind {
    ComputeHost,
    Process,
    Vm,
}

impl fmt::Display for ReportKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ComputeHost => "COMPUTE_HOST",
            Self::Process => "PROCESS",
            Self::Vm => "VM",
        })
    }
}

/// One failure report, as spooled and sent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub kind: ReportKind,
    /// The host the report is about.
    pub hostname: String,
    pub payload: BTreeMap<String, String>,
    /// When the agent saw the failure (microseconds, as the API stores it:
    /// a resent report must be the same report).
    pub generated_time: DateTime<Utc>,
    /// The same for every report of one incident, whoever sends it.
    pub idempotency_key: String,
}

/// Whether a host was confirmed powered off before it was reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fenced {
    /// The BMC confirmed the host off: `host_status: NORMAL`.
    Confirmed,
    /// Not confirmed (no device, or fencing failed): `host_status:
    /// UNKNOWN`, which the engine ignores. The reason is logged.
    Unconfirmed(String),
}

fn payload(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Characters an idempotency key may carry here: the API refuses control
/// characters, and a key is at most 255 characters.
fn key(parts: &[&str]) -> String {
    let mut key = String::from("instanceha-agent");
    for part in parts {
        key.push(':');
        key.extend(part.chars().map(|c| if c.is_control() { '_' } else { c }));
    }
    if key.chars().count() > 255 {
        key = key.chars().take(255).collect();
    }
    key
}

fn at(time: DateTime<Utc>) -> DateTime<Utc> {
    time.trunc_subsecs(6)
}

impl Report {
    /// A host found failed by incident `incident`, fenced or not.
    pub fn host_stopped(host: &str, incident: &str, fenced: &Fenced, time: DateTime<Utc>) -> Self {
        let status = match fenced {
            Fenced::Confirmed => "NORMAL",
            Fenced::Unconfirmed(_) => "UNKNOWN",
        };
        Self {
            kind: ReportKind::ComputeHost,
            hostname: host.to_owned(),
            payload: payload(&[
                ("event", "STOPPED"),
                ("host_status", status),
                ("cluster_status", "OFFLINE"),
            ]),
            generated_time: at(time),
            idempotency_key: key(&["host", host, "stopped", incident]),
        }
    }

    /// A failed host that is back (`incident`: its new incarnation).
    pub fn host_started(host: &str, incident: &str, time: DateTime<Utc>) -> Self {
        Self {
            kind: ReportKind::ComputeHost,
            hostname: host.to_owned(),
            payload: payload(&[
                ("event", "STARTED"),
                ("host_status", "NORMAL"),
                ("cluster_status", "ONLINE"),
            ]),
            generated_time: at(time),
            idempotency_key: key(&["host", host, "started", incident]),
        }
    }

    /// A process of `host` that stayed down (`event` STOPPED) or came back
    /// (STARTED). As masakari-processmonitor, the process name is the last
    /// path element.
    pub fn process(
        host: &str,
        process: &str,
        started: bool,
        incident: &str,
        time: DateTime<Utc>,
    ) -> Self {
        let name = process.rsplit('/').next().unwrap_or(process);
        let event = if started { "STARTED" } else { "STOPPED" };
        Self {
            kind: ReportKind::Process,
            hostname: host.to_owned(),
            payload: payload(&[("process_name", name), ("event", event)]),
            generated_time: at(time),
            idempotency_key: key(&["process", host, name, &event.to_lowercase(), incident]),
        }
    }

    /// A libvirt domain event of instance `uuid` on `host`, as
    /// masakari-instancemonitor reports it.
    pub fn vm(
        host: &str,
        uuid: &str,
        event: &str,
        detail: &str,
        incident: &str,
        time: DateTime<Utc>,
    ) -> Self {
        Self {
            kind: ReportKind::Vm,
            hostname: host.to_owned(),
            payload: payload(&[
                ("instance_uuid", uuid),
                ("vir_domain_event", detail),
                ("event", event),
            ]),
            generated_time: at(time),
            idempotency_key: key(&["vm", uuid, event, detail, incident]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_reports_say_whether_the_host_was_fenced() {
        let t = Utc::now();
        let fenced = Report::host_stopped("compute-02", "abc", &Fenced::Confirmed, t);
        assert_eq!(fenced.payload["host_status"], "NORMAL");
        assert_eq!(fenced.payload["event"], "STOPPED");
        assert_eq!(
            fenced.idempotency_key,
            "instanceha-agent:host:compute-02:stopped:abc"
        );
        let unfenced = Report::host_stopped(
            "compute-02",
            "abc",
            &Fenced::Unconfirmed("no fencing device".into()),
            t,
        );
        assert_eq!(unfenced.payload["host_status"], "UNKNOWN");
        assert_eq!(unfenced.idempotency_key, fenced.idempotency_key);
        let back = Report::host_started("compute-02", "def", t);
        assert_eq!(back.payload["event"], "STARTED");
        assert_ne!(back.idempotency_key, fenced.idempotency_key);
    }

    #[test]
    fn process_names_lose_their_path_and_keys_stay_valid() {
        let t = Utc::now();
        let r = Report::process("c1", "/usr/bin/nova-compute", false, "1", t);
        assert_eq!(r.payload["process_name"], "nova-compute");
        let long = "x\n".repeat(300);
        let r = Report::process("c1", &long, true, "1", t);
        assert!(r.idempotency_key.chars().count() <= 255);
        assert!(!r.idempotency_key.chars().any(char::is_control));
        assert_eq!(r.generated_time, r.generated_time.trunc_subsecs(6));
    }
}
