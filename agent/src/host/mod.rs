//! The host monitor: a detection driver (the agents' own heartbeats,
//! Pacemaker, Kubernetes) yields views of the segment; [`plan`] decides,
//! without I/O, what this agent must do about them (nothing in a minority;
//! only the lowest-named surviving member acts; each incident once); the
//! loop carries the actions out: fence the failed host, then spool its
//! report, then tell the other members the incident is handled.

pub mod heartbeat;
pub mod kubernetes;
pub mod membership;
pub mod pacemaker;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;

use chrono::Utc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::config::FencingSettings;
use crate::fence::Device;
use crate::metrics::Metrics;
use crate::report::{Fenced, Report};
use crate::spool::Spool;

/// The segment as a detection driver sees it at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    /// Whether this agent's partition may decide (has a quorum).
    pub quorate: bool,
    /// The members alive, this agent included.
    pub alive: BTreeSet<String>,
    /// Members a quorum agrees have failed, with the incident's id (the
    /// same on every member that knows it).
    pub failed: BTreeMap<String, String>,
    /// Incidents (host, incident) some member announced it reported.
    pub handled: BTreeSet<(String, String)>,
    /// The current incarnation of each alive member, where known.
    pub incarnations: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("heartbeat: {0}")]
    Heartbeat(String),
    #[error("pacemaker: {0}")]
    Pacemaker(String),
    #[error("kubernetes: {0}")]
    Kubernetes(String),
}

/// A source of views of the segment: one trait for every driver.
pub trait Detector: Send {
    /// The driver's name, for logs.
    fn name(&self) -> &'static str;
    /// Waits for the next view (drivers produce one every interval).
    fn next(&mut self) -> impl Future<Output = Result<View, Error>> + Send;
    /// Tells the other members that this one reported `incident` of
    /// `host` (drivers without a channel between agents ignore it).
    fn announce(&mut self, host: &str, incident: &str);
}

/// What this agent must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Fence `host`, then report it STOPPED.
    Fence { host: String, incident: String },
    /// Report `host` STARTED (it failed and is back).
    Started { host: String, incarnation: String },
}

/// What the loop remembers between views.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    /// Failed hosts not back yet, with their incident.
    down: BTreeMap<String, String>,
    /// Incidents this agent acted on.
    acted: BTreeSet<(String, String)>,
}

/// The member that acts for the segment: the lowest-named alive member,
/// other than `about` (a host that is back does not report itself).
pub fn reporter<'a>(alive: &'a BTreeSet<String>, about: &str) -> Option<&'a str> {
    alive.iter().map(String::as_str).find(|m| *m != about)
}

/// Decides what `me` must do about `view`.
pub fn plan(me: &str, memory: &mut Memory, view: &View) -> Vec<Action> {
    let mut actions = Vec::new();
    if !view.quorate {
        return actions;
    }
    for (host, incident) in &view.failed {
        if host == me {
            continue;
        }
        memory.down.insert(host.clone(), incident.clone());
        let key = (host.clone(), incident.clone());
        if view.handled.contains(&key) || memory.acted.contains(&key) {
            continue;
        }
        if reporter(&view.alive, host) == Some(me) {
            memory.acted.insert(key);
            actions.push(Action::Fence {
                host: host.clone(),
                incident: incident.clone(),
            });
        }
    }
    let back: Vec<String> = memory
        .down
        .keys()
        .filter(|h| view.alive.contains(*h) && !view.failed.contains_key(*h))
        .cloned()
        .collect();
    for host in back {
        memory.down.remove(&host);
        if reporter(&view.alive, &host) == Some(me) {
            actions.push(Action::Started {
                incarnation: view.incarnations.get(&host).cloned().unwrap_or_default(),
                host,
            });
        }
    }
    actions
}

/// Turns the snapshots of drivers that only say who is online (Pacemaker,
/// Kubernetes) into failures: a member failed when it was seen online and
/// no longer is.
#[derive(Clone, Debug, Default)]
pub struct Transitions {
    seen_online: BTreeSet<String>,
    offline_since: BTreeMap<String, String>,
}

impl Transitions {
    /// `online`: the members online now; `all`: every member known;
    /// `incident(member)`: the id of its current failure.
    pub fn update(
        &mut self,
        quorate: bool,
        online: &BTreeSet<String>,
        all: &BTreeSet<String>,
        incident: impl Fn(&str) -> String,
    ) -> View {
        let mut failed = BTreeMap::new();
        for member in all {
            if online.contains(member) {
                self.seen_online.insert(member.clone());
                self.offline_since.remove(member);
            } else if self.seen_online.contains(member) {
                let id = self
                    .offline_since
                    .entry(member.clone())
                    .or_insert_with(|| incident(member))
                    .clone();
                failed.insert(member.clone(), id);
            }
        }
        View {
            quorate,
            alive: online.clone(),
            failed: if quorate { failed } else { BTreeMap::new() },
            handled: BTreeSet::new(),
            incarnations: BTreeMap::new(),
        }
    }
}

/// What the host monitor needs besides its driver.
#[derive(Clone, Debug)]
pub struct Context {
    pub me: String,
    pub devices: Arc<BTreeMap<String, Device>>,
    pub fencing: FencingSettings,
    pub spool: Spool,
    pub metrics: Metrics,
}

/// Runs the host monitor until `shutdown`.
pub async fn run<D: Detector>(mut detector: D, context: Context, shutdown: CancellationToken) {
    let mut memory = Memory::default();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(String, String)>();
    let mut was_quorate = None;
    tracing::info!(driver = detector.name(), me = %context.me, "host monitor started");
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            view = detector.next() => {
                // Incidents handled since the last view, announced from the
                // next heartbeat on (racing them against `next` could
                // interrupt a heartbeat round).
                while let Ok((host, incident)) = done_rx.try_recv() {
                    detector.announce(&host, &incident);
                }
                let view = match view {
                    Ok(view) => view,
                    Err(e) => {
                        tracing::warn!(driver = detector.name(), error = %e, "no view of the segment");
                        continue;
                    }
                };
                if was_quorate != Some(view.quorate) {
                    if view.quorate {
                        tracing::info!(alive = ?view.alive, "this agent's partition has a quorum");
                    } else {
                        tracing::warn!(alive = ?view.alive, "no quorum: this agent neither fences nor reports hosts");
                    }
                    was_quorate = Some(view.quorate);
                }
                for action in plan(&context.me, &mut memory, &view) {
                    match action {
                        Action::Fence { host, incident } => {
                            let context = context.clone();
                            let done = done_tx.clone();
                            tokio::spawn(async move {
                                if handle_failure(&context, &host, &incident).await {
                                    let _ = done.send((host, incident));
                                }
                            });
                        }
                        Action::Started { host, incarnation } => {
                            let report = Report::host_started(&host, &incarnation, Utc::now());
                            tracing::info!(host = %host, "failed host is back: reporting it started");
                            if let Err(e) = context.spool.push(report, None).await {
                                tracing::error!(host = %host, error = %e, "cannot spool the report");
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Fences `host` and spools its report; true once spooled. The report's
/// trace starts here.
pub async fn handle_failure(context: &Context, host: &str, incident: &str) -> bool {
    let span =
        tracing::info_span!(parent: None, "host failure", host = %host, incident = %incident);
    async {
        context.metrics.detection("host");
        let device = context.devices.get(host);
        tracing::warn!(
            host = %host,
            device = device.map_or("none", Device::driver),
            "host failed: fencing it before reporting"
        );
        let fenced = match device {
            None => Fenced::Unconfirmed(format!("no fencing device is configured for {host}")),
            Some(device) => {
                let started = tokio::time::Instant::now();
                match device.fence(&context.fencing).await {
                    Ok(took) => {
                        context.metrics.fence(device.driver(), "confirmed", took);
                        tracing::info!(host = %host, took = ?took, "host confirmed powered off");
                        Fenced::Confirmed
                    }
                    Err(e) => {
                        context.metrics.fence(device.driver(), "failed", started.elapsed());
                        Fenced::Unconfirmed(format!("fencing failed: {e}"))
                    }
                }
            }
        };
        if let Fenced::Unconfirmed(reason) = &fenced {
            tracing::warn!(
                host = %host,
                reason = %reason,
                "host not confirmed off: reporting host_status UNKNOWN, which the engine does not recover"
            );
        }
        let report = Report::host_stopped(host, incident, &fenced, Utc::now());
        let traceparent = instanceha_runtime::propagation::current_traceparent();
        match context.spool.push(report, traceparent).await {
            Ok((entry, new)) => {
                tracing::info!(
                    host = %host,
                    spool_id = entry.id,
                    new,
                    traceparent = entry.traceparent.as_deref().unwrap_or("none"),
                    "host failure spooled for the api"
                );
                true
            }
            Err(e) => {
                tracing::error!(host = %host, error = %e, "cannot spool the report");
                false
            }
        }
    }
    .instrument(span)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    fn view(alive: &[&str], failed: &[(&str, &str)]) -> View {
        View {
            quorate: true,
            alive: set(alive),
            failed: failed
                .iter()
                .map(|(h, i)| ((*h).to_owned(), (*i).to_owned()))
                .collect(),
            handled: BTreeSet::new(),
            incarnations: alive
                .iter()
                .map(|h| ((*h).to_owned(), format!("{h}-2")))
                .collect(),
        }
    }

    #[test]
    fn only_the_lowest_surviving_member_acts_and_only_once() {
        let v = view(&["c1", "c3"], &[("c2", "i1")]);
        let mut m1 = Memory::default();
        let mut m3 = Memory::default();
        assert_eq!(
            plan("c1", &mut m1, &v),
            [Action::Fence {
                host: "c2".into(),
                incident: "i1".into()
            }]
        );
        assert!(plan("c1", &mut m1, &v).is_empty(), "once per incident");
        assert!(plan("c3", &mut m3, &v).is_empty());
    }

    #[test]
    fn the_next_member_takes_over_unless_the_incident_was_announced() {
        let mut m3 = Memory::default();
        assert!(plan("c3", &mut m3, &view(&["c1", "c3", "c4"], &[("c2", "i1")])).is_empty());
        // c1 dies before announcing: c3 is now the lowest survivor.
        let taken = plan(
            "c3",
            &mut m3,
            &view(&["c3", "c4"], &[("c1", "j"), ("c2", "i1")]),
        );
        assert_eq!(taken.len(), 2);
        let mut m4 = Memory::default();
        let mut announced = view(&["c3", "c4"], &[("c2", "i1")]);
        announced.handled.insert(("c2".into(), "i1".into()));
        assert!(plan("c4", &mut m4, &announced).is_empty());
        assert!(plan("c3", &mut Memory::default(), &announced).is_empty());
    }

    #[test]
    fn a_minority_does_nothing() {
        let mut v = view(&["c1"], &[("c2", "i"), ("c3", "i")]);
        v.quorate = false;
        assert!(plan("c1", &mut Memory::default(), &v).is_empty());
    }

    #[test]
    fn a_host_back_is_reported_started_by_another_member() {
        let mut m = Memory::default();
        plan("c2", &mut m, &view(&["c2", "c3"], &[("c1", "i")]));
        let back = plan("c2", &mut m, &view(&["c1", "c2", "c3"], &[]));
        assert_eq!(
            back,
            [Action::Started {
                host: "c1".into(),
                incarnation: "c1-2".into()
            }]
        );
        assert!(plan("c2", &mut m, &view(&["c1", "c2", "c3"], &[])).is_empty());
        // The host back never reports itself, even as the lowest name.
        let mut m1 = Memory::default();
        assert!(plan("c1", &mut m1, &view(&["c1", "c2", "c3"], &[])).is_empty());
    }

    #[test]
    fn snapshot_drivers_fail_members_seen_online_then_offline() {
        let mut t = Transitions::default();
        let all = set(&["a", "b", "c"]);
        let v = t.update(true, &set(&["a", "b"]), &all, |_| "x".into());
        assert!(v.failed.is_empty(), "c was never seen online");
        let v = t.update(true, &set(&["a"]), &all, |m| format!("{m}-1"));
        assert_eq!(v.failed["b"], "b-1");
        let v = t.update(true, &set(&["a"]), &all, |m| format!("{m}-2"));
        assert_eq!(v.failed["b"], "b-1", "one incident while it stays down");
        let v = t.update(false, &set(&["a"]), &all, |m| m.into());
        assert!(v.failed.is_empty(), "no quorum, no failures");
        let v = t.update(true, &set(&["a", "b"]), &all, |m| m.into());
        assert!(v.failed.is_empty());
    }
}
