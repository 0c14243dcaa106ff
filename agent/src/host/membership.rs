//! The heartbeat membership, without I/O: who this agent still hears, whom
//! it suspects, whether its partition has a quorum and which failures a
//! quorum agrees on. Every function takes the time as an argument.
//!
//! The rules:
//!
//! * a peer silent (on every network) for `detect_after` is *suspected*;
//!   a peer never heard since this agent started is neither alive nor
//!   suspected (an agent not deployed yet is never fenced);
//! * the *reachable* members are this agent and the peers heard within
//!   `detect_after`; the partition is *quorate* when they are more than
//!   half of the segment's members. The quorum is counted over the whole
//!   configured segment, not over the members one can reach: otherwise a
//!   lone agent would be its own majority;
//! * a suspect is *failed* when more than half of the segment's members,
//!   among the reachable ones (this agent included), suspect it; each
//!   peer's suspicions travel in its heartbeats;
//! * if this agent itself stalled (its own tick came much later than
//!   due: SIGSTOP, a starved CPU), it forgives everyone the silence it
//!   could not have heard: a stalled agent must not accuse the others.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::View;

/// A new incarnation id: the start time (ms since the epoch, so that a
/// later incarnation of a host compares higher) and a random part.
pub fn incarnation(now: chrono::DateTime<chrono::Utc>) -> String {
    format!(
        "{}-{}",
        now.timestamp_millis(),
        uuid::Uuid::new_v4().simple()
    )
}

/// The start time an incarnation id carries (0 when it carries none).
fn started_at(incarnation: &str) -> i64 {
    incarnation
        .split('-')
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or(0)
}

/// One heartbeat, as sent over UDP (JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// Protocol version.
    pub v: u32,
    pub segment: String,
    pub from: String,
    /// Changes each time the agent starts: a failure is one incarnation's.
    pub incarnation: String,
    pub seq: u64,
    /// The members the sender suspects.
    pub suspects: Vec<String>,
    /// Incidents (host, incarnation) the sender reported.
    pub handled: Vec<(String, String)>,
    /// When it was sent, in milliseconds since the epoch (0 from an agent
    /// that does not say: never within the window).
    #[serde(default)]
    pub sent_at: i64,
}

/// Whether a heartbeat sent at `sent_at` (ms since the epoch) is fresh at
/// `now` (the same), within `max_skew` either way: a replay of an older
/// one is not, whatever this agent remembers.
pub fn within_skew(sent_at: i64, now: i64, max_skew: Duration) -> bool {
    let skew = i64::try_from(max_skew.as_millis()).unwrap_or(i64::MAX);
    now.abs_diff(sent_at) <= skew.unsigned_abs()
}

/// The last heartbeat taken from a peer: its incarnation and number, kept
/// across this agent's restarts.
pub type Marks = BTreeMap<String, (String, u64)>;

#[derive(Clone, Debug, Default)]
struct Peer {
    last_heard: Option<Instant>,
    incarnation: Option<String>,
    last_seq: u64,
    suspects: BTreeSet<String>,
    handled: BTreeSet<(String, String)>,
}

/// The membership state of one agent.
#[derive(Clone, Debug)]
pub struct Membership {
    me: String,
    segment: String,
    incarnation: String,
    members: BTreeSet<String>,
    peers: BTreeMap<String, Peer>,
    detect_after: Duration,
    last_tick: Option<Instant>,
    seq: u64,
    handled: BTreeSet<(String, String)>,
}

impl Membership {
    /// `peers` excludes `me`.
    pub fn new(
        me: &str,
        segment: &str,
        incarnation: &str,
        peers: impl IntoIterator<Item = String>,
        detect_after: Duration,
    ) -> Self {
        let peers: BTreeMap<String, Peer> = peers
            .into_iter()
            .filter(|p| p != me)
            .map(|p| (p, Peer::default()))
            .collect();
        let mut members: BTreeSet<String> = peers.keys().cloned().collect();
        members.insert(me.to_owned());
        Self {
            me: me.to_owned(),
            segment: segment.to_owned(),
            incarnation: incarnation.to_owned(),
            members,
            peers,
            detect_after,
            last_tick: None,
            seq: 0,
            handled: BTreeSet::new(),
        }
    }

    pub fn me(&self) -> &str {
        &self.me
    }

    /// The last heartbeat taken from each peer.
    pub fn marks(&self) -> Marks {
        self.peers
            .iter()
            .filter_map(|(name, p)| Some((name.clone(), (p.incarnation.clone()?, p.last_seq))))
            .collect()
    }

    /// Takes back the marks of an earlier run: heartbeats up to them are
    /// not new. No peer counts as heard for it.
    pub fn restore(&mut self, marks: &Marks) {
        for (name, (incarnation, seq)) in marks {
            if let Some(peer) = self.peers.get_mut(name) {
                peer.incarnation = Some(incarnation.clone());
                peer.last_seq = *seq;
            }
        }
    }

    /// Members needed for a quorum: more than half of the segment.
    pub fn majority(&self) -> usize {
        self.members.len() / 2 + 1
    }

    /// Takes a received heartbeat; false when it is not for us (another
    /// segment, an unknown sender, ourselves, or older than one seen).
    pub fn receive(&mut self, hb: Heartbeat, now: Instant) -> bool {
        if hb.segment != self.segment || hb.from == self.me {
            return false;
        }
        let Some(peer) = self.peers.get_mut(&hb.from) else {
            return false;
        };
        let same_incarnation = peer.incarnation.as_deref() == Some(hb.incarnation.as_str());
        if same_incarnation && hb.seq <= peer.last_seq {
            // A duplicate over the second network, reordered, or replayed:
            // it proves nothing newer.
            return false;
        }
        if !same_incarnation
            && let Some(known) = peer.incarnation.as_deref()
            && started_at(&hb.incarnation) < started_at(known)
        {
            // An older incarnation's heartbeat (replayed): not the peer now.
            return false;
        }
        peer.last_heard = Some(now);
        peer.incarnation = Some(hb.incarnation);
        peer.last_seq = hb.seq;
        peer.suspects = hb.suspects.into_iter().collect();
        peer.handled = hb.handled.into_iter().collect();
        true
    }

    /// Called every heartbeat interval. Returns the stall this agent
    /// suffered, if its tick came more than `detect_after / 2` late; the
    /// peers' silence during it is forgiven.
    pub fn tick(&mut self, now: Instant, interval: Duration) -> Option<Duration> {
        let stall = self.last_tick.and_then(|last| {
            let gap = now.saturating_duration_since(last);
            let late = gap.saturating_sub(interval);
            (late > self.detect_after / 2).then_some(gap)
        });
        self.last_tick = Some(now);
        if stall.is_some() {
            for peer in self.peers.values_mut() {
                if peer.last_heard.is_some() {
                    peer.last_heard = Some(now);
                }
            }
        }
        stall
    }

    fn heard_within(&self, peer: &Peer, now: Instant) -> bool {
        peer.last_heard
            .is_some_and(|t| now.saturating_duration_since(t) < self.detect_after)
    }

    /// The peers this agent suspects.
    pub fn suspects(&self, now: Instant) -> BTreeSet<String> {
        self.peers
            .iter()
            .filter(|(_, p)| p.last_heard.is_some() && !self.heard_within(p, now))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// This agent and the peers it hears.
    pub fn reachable(&self, now: Instant) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = self
            .peers
            .iter()
            .filter(|(_, p)| self.heard_within(p, now))
            .map(|(n, _)| n.clone())
            .collect();
        out.insert(self.me.clone());
        out
    }

    /// Records an incident this agent reported (announced in heartbeats
    /// until the host is back).
    pub fn announce(&mut self, host: &str, incident: &str) {
        self.handled.insert((host.to_owned(), incident.to_owned()));
    }

    /// The membership as the host monitor sees it.
    pub fn view(&self, now: Instant) -> View {
        let reachable = self.reachable(now);
        let quorate = reachable.len() >= self.majority();
        let mine = self.suspects(now);
        let mut failed = BTreeMap::new();
        if quorate {
            for suspect in &mine {
                let votes = 1 + reachable
                    .iter()
                    .filter(|r| *r != &self.me)
                    .filter(|r| self.peers[*r].suspects.contains(suspect))
                    .count();
                if votes >= self.majority() {
                    let incident = self.peers[suspect].incarnation.clone().unwrap_or_default();
                    failed.insert(suspect.clone(), incident);
                }
            }
        }
        let mut handled = self.handled.clone();
        for name in &reachable {
            if let Some(peer) = self.peers.get(name) {
                handled.extend(peer.handled.iter().cloned());
            }
        }
        let incarnations = reachable
            .iter()
            .filter_map(|n| Some((n.clone(), self.peers.get(n)?.incarnation.clone()?)))
            .collect();
        View {
            quorate,
            alive: reachable,
            failed,
            handled,
            incarnations,
        }
    }

    /// The next heartbeat to send. Incidents of hosts alive again are no
    /// longer announced.
    pub fn heartbeat(&mut self, now: Instant) -> Heartbeat {
        let reachable = self.reachable(now);
        self.handled.retain(|(host, incident)| {
            !(reachable.contains(host)
                && self.peers.get(host).and_then(|p| p.incarnation.as_deref()) != Some(incident))
        });
        self.seq += 1;
        Heartbeat {
            v: 1,
            segment: self.segment.clone(),
            from: self.me.clone(),
            incarnation: self.incarnation.clone(),
            seq: self.seq,
            suspects: self.suspects(now).into_iter().collect(),
            handled: self.handled.iter().cloned().collect(),
            sent_at: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const WINDOW: Duration = Duration::from_secs(6);
    const STEP: Duration = Duration::from_secs(1);

    fn names(n: usize) -> Vec<String> {
        (1..=n).map(|i| format!("compute-{i}")).collect()
    }

    /// `n` agents exchanging heartbeats every second for `steps` seconds;
    /// `link(a, b, t)` says whether a's heartbeat at second t reaches b;
    /// `alive(a, t)` whether agent a runs at second t.
    fn simulate(
        n: usize,
        steps: u64,
        link: impl Fn(usize, usize, u64) -> bool,
        alive: impl Fn(usize, u64) -> bool,
        mut check: impl FnMut(u64, &[Membership], Instant),
    ) -> Vec<Membership> {
        let all = names(n);
        let start = Instant::now();
        let mut agents: Vec<Membership> = all
            .iter()
            .map(|me| Membership::new(me, "seg", &format!("{me}-inc"), all.clone(), WINDOW))
            .collect();
        for t in 0..steps {
            let now = start + STEP * t as u32;
            let mut sent = Vec::new();
            for (i, agent) in agents.iter_mut().enumerate() {
                if alive(i, t) {
                    agent.tick(now, STEP);
                    sent.push((i, agent.heartbeat(now)));
                }
            }
            for (from, hb) in sent {
                for (to, agent) in agents.iter_mut().enumerate() {
                    if to != from && alive(to, t) && link(from, to, t) {
                        agent.receive(hb.clone(), now);
                    }
                }
            }
            check(t, &agents, now);
        }
        agents
    }

    #[test]
    fn a_dead_peer_is_failed_once_the_window_passes_and_a_majority_agrees() {
        let agents = simulate(
            3,
            20,
            |_, _, _| true,
            |i, t| !(i == 1 && t >= 5),
            |_, _, _| {},
        );
        let now = Instant::now() + STEP * 19;
        let view = agents[0].view(now);
        assert!(view.quorate);
        assert_eq!(view.failed.keys().collect::<Vec<_>>(), ["compute-2"]);
        assert_eq!(view.failed["compute-2"], "compute-2-inc");
        assert!(!view.alive.contains("compute-2"));
    }

    #[test]
    fn a_short_stall_of_a_peer_is_not_suspected() {
        simulate(
            3,
            30,
            |_, _, _| true,
            |i, t| !(i == 2 && (10..14).contains(&t)),
            |_, agents, now| {
                for a in agents {
                    assert!(a.suspects(now).is_empty(), "{:?}", a.suspects(now));
                }
            },
        );
    }

    #[test]
    fn a_stalled_agent_forgives_the_silence_it_could_not_hear() {
        let all = names(3);
        let start = Instant::now();
        let mut m = Membership::new("compute-1", "seg", "i", all.clone(), WINDOW);
        m.tick(start, STEP);
        for p in &all[1..] {
            m.receive(
                Heartbeat {
                    v: 1,
                    segment: "seg".into(),
                    from: p.clone(),
                    incarnation: "x".into(),
                    seq: 1,
                    suspects: vec![],
                    handled: vec![],
                    sent_at: 0,
                },
                start,
            );
        }
        let later = start + Duration::from_secs(20);
        assert_eq!(m.tick(later, STEP), Some(Duration::from_secs(20)));
        assert!(m.suspects(later).is_empty());
        assert_eq!(m.reachable(later).len(), 3);
    }

    #[test]
    fn a_peer_never_heard_is_not_suspected_and_a_lone_agent_is_not_quorate() {
        let m = Membership::new("compute-1", "seg", "i", names(3), WINDOW);
        let later = Instant::now() + Duration::from_secs(60);
        assert!(m.suspects(later).is_empty());
        let view = m.view(later);
        assert!(!view.quorate);
        assert!(view.failed.is_empty());
    }

    #[test]
    fn replayed_and_older_heartbeats_are_not_proof_of_life() {
        let mut m = Membership::new("compute-1", "seg", "i", names(3), WINDOW);
        let hb = |incarnation: &str, seq: u64| Heartbeat {
            v: 1,
            segment: "seg".into(),
            from: "compute-2".into(),
            incarnation: incarnation.into(),
            seq,
            suspects: vec![],
            handled: vec![],
            sent_at: 0,
        };
        let t0 = Instant::now();
        assert!(m.receive(hb("2000-b", 5), t0));
        assert!(!m.receive(hb("2000-b", 5), t0), "a duplicate");
        assert!(!m.receive(hb("2000-b", 4), t0), "an older one");
        assert!(!m.receive(hb("1000-a", 99), t0), "an earlier incarnation");
        assert!(m.receive(hb("3000-c", 1), t0), "a restart");
        let late = t0 + WINDOW + STEP;
        m.receive(hb("3000-c", 1), late);
        assert!(
            m.suspects(late).contains("compute-2"),
            "a replay keeps no one alive"
        );
        assert!(started_at(&incarnation(chrono::Utc::now())) > 0);
    }

    #[test]
    fn a_replay_after_a_restart_is_not_proof_of_life() {
        let hb = |seq: u64| Heartbeat {
            v: 1,
            segment: "seg".into(),
            from: "compute-2".into(),
            incarnation: "2000-b".into(),
            seq,
            suspects: vec![],
            handled: vec![],
            sent_at: 0,
        };
        let t0 = Instant::now();
        let mut before = Membership::new("compute-1", "seg", "i", names(3), WINDOW);
        for seq in 1..=5 {
            assert!(before.receive(hb(seq), t0));
        }
        // This agent restarts with what it kept; the peer is dead.
        let mut after = Membership::new("compute-1", "seg", "j", names(3), WINDOW);
        after.restore(&before.marks());
        assert!(
            !after.reachable(t0).contains("compute-2"),
            "restored marks hear no one"
        );
        for seq in 1..=5 {
            assert!(!after.receive(hb(seq), t0), "replayed heartbeat {seq}");
        }
        assert!(!after.view(t0).alive.contains("compute-2"));
        assert!(after.receive(hb(6), t0), "a new one is taken");
    }

    #[test]
    fn only_heartbeats_sent_within_the_skew_are_fresh() {
        let skew = Duration::from_secs(2);
        let now = 1_700_000_000_000;
        assert!(within_skew(now, now, skew));
        assert!(within_skew(now - 2000, now, skew));
        assert!(within_skew(now + 2000, now, skew));
        assert!(!within_skew(now - 2001, now, skew), "recorded earlier");
        assert!(!within_skew(now + 2001, now, skew), "a clock ahead");
        assert!(!within_skew(0, now, skew), "no time at all");
    }

    #[test]
    fn other_segments_and_strangers_are_ignored() {
        let mut m = Membership::new("compute-1", "seg", "i", names(3), WINDOW);
        let hb = |segment: &str, from: &str| Heartbeat {
            v: 1,
            segment: segment.into(),
            from: from.into(),
            incarnation: "x".into(),
            seq: 1,
            suspects: vec![],
            handled: vec![],
            sent_at: 0,
        };
        let now = Instant::now();
        assert!(!m.receive(hb("other", "compute-2"), now));
        assert!(!m.receive(hb("seg", "stranger"), now));
        assert!(!m.receive(hb("seg", "compute-1"), now));
        assert!(m.receive(hb("seg", "compute-2"), now));
    }

    proptest! {
        /// Whatever the partition, only members of a group holding a
        /// majority of the segment ever find a failure, and never one of
        /// their own group.
        #[test]
        fn only_a_majority_decides_and_never_against_its_own(
            n in 3usize..=5,
            groups in proptest::collection::vec(0usize..3, 5),
            cut_at in 0u64..15,
        ) {
            let group = |i: usize| groups[i];
            let size = |g: usize| (0..n).filter(|&j| group(j) == g).count();
            simulate(
                n,
                40,
                |a, b, t| t < cut_at || group(a) == group(b),
                |_, _| true,
                |_, agents, now| {
                    for (i, agent) in agents.iter().enumerate() {
                        let view = agent.view(now);
                        if size(group(i)) * 2 <= n {
                            assert!(view.failed.is_empty());
                        }
                        for failed in view.failed.keys() {
                            let j = agents.iter().position(|a| a.me() == failed).unwrap();
                            assert_ne!(group(i), group(j), "{} failed its own group's {}", agent.me(), failed);
                        }
                    }
                },
            );
        }

        /// A peer silent for less than the window is never suspected.
        #[test]
        fn silence_shorter_than_the_window_is_never_suspected(
            n in 3usize..=5,
            victim in 0usize..5,
            from in 2u64..20,
            len in 0u64..5,
        ) {
            let victim = victim % n;
            simulate(
                n,
                30,
                |_, _, _| true,
                |i, t| !(i == victim && (from..from + len).contains(&t)),
                |_, agents, now| {
                    for a in agents {
                        assert!(a.suspects(now).is_empty());
                        assert!(a.view(now).failed.is_empty());
                    }
                },
            );
        }
    }
}
