//! The heartbeat driver: UDP heartbeats (JSON) to every peer every
//! interval, on the management network and optionally a second one;
//! received ones feed the [`Membership`], whose view is yielded once per
//! interval.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::Sha256;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

use instanceha_runtime::clock::Clock;

use super::membership::{Heartbeat, Marks, Membership, within_skew};
use super::{Detector, Error, View};
use crate::credentials::Secret;

const MAC_LEN: usize = 32;

fn mac(key: &[u8]) -> Hmac<Sha256> {
    Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length")
}

/// A datagram for `body`: with a key, its HMAC-SHA256 then the body.
pub fn seal(key: Option<&[u8]>, body: &[u8]) -> Vec<u8> {
    match key {
        None => body.to_vec(),
        Some(key) => {
            let mut m = mac(key);
            m.update(body);
            let mut out = m.finalize().into_bytes().to_vec();
            out.extend_from_slice(body);
            out
        }
    }
}

/// The body of a datagram, if its HMAC is valid (or no key is set).
pub fn open<'a>(key: Option<&[u8]>, datagram: &'a [u8]) -> Option<&'a [u8]> {
    match key {
        None => Some(datagram),
        Some(key) => {
            let (tag, body) = datagram.split_at_checked(MAC_LEN)?;
            let mut m = mac(key);
            m.update(body);
            m.verify_slice(tag).ok().map(|()| body)
        }
    }
}

/// A peer's addresses: the management network's, then the second one's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerAddresses {
    pub name: String,
    pub primary: String,
    pub second: Option<String>,
}

/// The heartbeat detector of one agent.
pub struct HeartbeatDetector {
    membership: Membership,
    sockets: Vec<Arc<UdpSocket>>,
    peers: Vec<PeerAddresses>,
    resolved: BTreeMap<(String, usize), SocketAddr>,
    interval: tokio::time::Interval,
    period: Duration,
    received: mpsc::Receiver<(Heartbeat, Instant)>,
    readers: Vec<tokio::task::JoinHandle<()>>,
    key: Option<Arc<[u8]>>,
    replay: ReplayGuard,
}

/// What keeps recorded heartbeats from being taken as new: the time each
/// carries, and the marks kept across restarts.
#[derive(Debug)]
pub struct ReplayGuard {
    /// How far a heartbeat's time may be from this host's clock.
    pub max_clock_skew: Duration,
    /// Where the marks are kept (`None`: not kept).
    pub state_file: Option<std::path::PathBuf>,
    pub clock: Clock,
    saved: Option<Marks>,
    dropped: u64,
}

impl ReplayGuard {
    pub fn new(max_clock_skew: Duration, state_file: Option<std::path::PathBuf>) -> Self {
        Self {
            max_clock_skew,
            state_file,
            clock: Clock::system(),
            saved: None,
            dropped: 0,
        }
    }

    fn now_ms(&self) -> i64 {
        self.clock.now().timestamp_millis()
    }

    /// The marks of the last run, if any were kept.
    fn load(&mut self) -> Option<Marks> {
        let path = self.state_file.as_ref()?;
        let text = std::fs::read(path).ok()?;
        match serde_json::from_slice::<Marks>(&text) {
            Ok(marks) => {
                self.saved = Some(marks.clone());
                Some(marks)
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read the heartbeat marks: starting without");
                None
            }
        }
    }

    /// Keeps `marks` when they changed.
    fn save(&mut self, marks: Marks) {
        let Some(path) = &self.state_file else { return };
        if self.saved.as_ref() == Some(&marks) {
            return;
        }
        let Ok(json) = serde_json::to_vec(&marks) else {
            return;
        };
        match instanceha_runtime::private::replace(path, &json) {
            Ok(()) => self.saved = Some(marks),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot keep the heartbeat marks")
            }
        }
    }
}

impl Drop for HeartbeatDetector {
    fn drop(&mut self) {
        for r in &self.readers {
            r.abort();
        }
    }
}

impl HeartbeatDetector {
    /// Binds `listen` (and `second_listen`) and starts reading heartbeats.
    pub async fn bind(
        membership: Membership,
        listen: SocketAddr,
        second_listen: Option<SocketAddr>,
        peers: Vec<PeerAddresses>,
        interval: Duration,
        key: Option<Secret>,
        mut replay: ReplayGuard,
    ) -> Result<Self, Error> {
        let mut membership = membership;
        if let Some(marks) = replay.load() {
            membership.restore(&marks);
        }
        let key: Option<Arc<[u8]>> = key.map(|k| Arc::from(k.expose().as_bytes()));
        let mut sockets = Vec::new();
        for addr in std::iter::once(listen).chain(second_listen) {
            let socket = UdpSocket::bind(addr)
                .await
                .map_err(|e| Error::Heartbeat(format!("cannot listen on {addr}: {e}")))?;
            tracing::info!(addr = %socket.local_addr().map_err(|e| Error::Heartbeat(e.to_string()))?, "listening for heartbeats");
            sockets.push(Arc::new(socket));
        }
        let (tx, received) = mpsc::channel(1024);
        let readers = sockets
            .iter()
            .map(|socket| {
                let socket = socket.clone();
                let tx = tx.clone();
                let key = key.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 65536];
                    loop {
                        let Ok((len, _from)) = socket.recv_from(&mut buf).await else {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        };
                        let Some(body) = open(key.as_deref(), &buf[..len]) else {
                            tracing::debug!(from = %_from, "heartbeat without a valid hmac: dropped");
                            continue;
                        };
                        match serde_json::from_slice::<Heartbeat>(body) {
                            Ok(hb) => {
                                if tx.send((hb, Instant::now())).await.is_err() {
                                    return;
                                }
                            }
                            Err(e) => tracing::debug!(error = %e, "not a heartbeat"),
                        }
                    }
                })
            })
            .collect();
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Ok(Self {
            membership,
            sockets,
            peers,
            resolved: BTreeMap::new(),
            interval: ticker,
            period: interval,
            received,
            readers,
            key,
            replay,
        })
    }

    /// Takes a received heartbeat, unless it was sent too far from now.
    fn take(&mut self, hb: Heartbeat, at: Instant) {
        let now = self.replay.now_ms();
        if !within_skew(hb.sent_at, now, self.replay.max_clock_skew) {
            self.replay.dropped += 1;
            // A flood of replays must not flood the log.
            if self.replay.dropped % 100 == 1 {
                tracing::warn!(peer = %hb.from, skew_ms = now - hb.sent_at, dropped = self.replay.dropped, "heartbeat dropped: sent further from this host's clock than host.heartbeat.max_clock_skew (a replay, or clocks out of sync)");
            }
            return;
        }
        self.membership.receive(hb, at);
    }

    /// Where heartbeats are received (the first network's address first).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.sockets
            .iter()
            .filter_map(|s| s.local_addr().ok())
            .collect()
    }

    async fn resolve(&mut self, name: &str, network: usize, address: &str) -> Option<SocketAddr> {
        let key = (name.to_owned(), network);
        if let Some(addr) = self.resolved.get(&key) {
            return Some(*addr);
        }
        match tokio::net::lookup_host(address).await {
            Ok(mut addrs) => {
                let addr = addrs.next()?;
                self.resolved.insert(key, addr);
                Some(addr)
            }
            Err(e) => {
                tracing::warn!(peer = %name, address = %address, error = %e, "cannot resolve the peer");
                None
            }
        }
    }

    async fn send(&mut self, now: Instant) {
        let mut hb = self.membership.heartbeat(now);
        hb.sent_at = self.replay.now_ms();
        let Ok(body) = serde_json::to_vec(&hb) else {
            return;
        };
        let bytes = seal(self.key.as_deref(), &body);
        for peer in self.peers.clone() {
            let addresses = std::iter::once(Some(peer.primary.clone()))
                .chain(std::iter::once(peer.second.clone()));
            for (network, address) in addresses.enumerate() {
                let (Some(address), Some(socket)) = (address, self.sockets.get(network).cloned())
                else {
                    continue;
                };
                if let Some(addr) = self.resolve(&peer.name, network, &address).await
                    && let Err(e) = socket.send_to(&bytes, addr).await
                {
                    tracing::debug!(peer = %peer.name, %addr, error = %e, "heartbeat not sent");
                }
            }
        }
    }
}

impl Detector for HeartbeatDetector {
    fn name(&self) -> &'static str {
        "heartbeat"
    }

    async fn next(&mut self) -> Result<View, Error> {
        loop {
            tokio::select! {
                Some((hb, at)) = self.received.recv() => {
                    self.take(hb, at);
                }
                _ = self.interval.tick() => {
                    let now = Instant::now();
                    // Take what arrived meanwhile before judging anyone.
                    while let Ok((hb, at)) = self.received.try_recv() {
                        self.take(hb, at);
                    }
                    let marks = self.membership.marks();
                    self.replay.save(marks);
                    if let Some(stall) = self.membership.tick(now, self.period) {
                        tracing::warn!(stall = ?stall, "this agent stalled: the peers' silence meanwhile is forgiven");
                    }
                    self.send(now).await;
                    return Ok(self.membership.view(now));
                }
            }
        }
    }

    fn announce(&mut self, host: &str, incident: &str) {
        self.membership.announce(host, incident);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_heartbeats_open_only_with_the_key() {
        let body = br#"{"v":1}"#;
        let sealed = seal(Some(b"shared"), body);
        assert_eq!(open(Some(b"shared"), &sealed), Some(&body[..]));
        assert_eq!(open(Some(b"other"), &sealed), None);
        assert_eq!(open(Some(b"shared"), body), None, "unsigned");
        let mut tampered = sealed.clone();
        *tampered.last_mut().unwrap() ^= 1;
        assert_eq!(open(Some(b"shared"), &tampered), None);
        assert_eq!(open(None, body), Some(&body[..]));
        assert_eq!(seal(None, body), body);
    }
}
