//! Heartbeats recorded before an agent restarts are not taken as new
//! after it: the detector keeps the last heartbeat it took from each peer
//! (0600, beside the spool) and drops anything up to it, and a heartbeat
//! sent longer ago than `host.heartbeat.max_clock_skew` is dropped whatever
//! it remembers. Real UDP on loopback, a fake peer that signs with the
//! segment's key.

use std::time::Duration;

use instanceha_agent::credentials::Secret;
use instanceha_agent::host::Detector as _;
use instanceha_agent::host::heartbeat::{HeartbeatDetector, PeerAddresses, ReplayGuard, seal};
use instanceha_agent::host::membership::{Heartbeat, Membership};
use tokio::net::UdpSocket;

const KEY: &str = "the segment's key";

fn peers() -> Vec<PeerAddresses> {
    ["compute-2", "compute-3"]
        .into_iter()
        .map(|name| PeerAddresses {
            name: name.into(),
            // Heartbeats sent to them go nowhere that matters.
            primary: "127.0.0.1:9".into(),
            second: None,
        })
        .collect()
}

async fn detector(state: &std::path::Path) -> HeartbeatDetector {
    let membership = Membership::new(
        "compute-1",
        "seg",
        "3000-a",
        peers().into_iter().map(|p| p.name),
        Duration::from_secs(6),
    );
    HeartbeatDetector::bind(
        membership,
        "127.0.0.1:0".parse().unwrap(),
        None,
        peers(),
        Duration::from_millis(100),
        Some(Secret::new(KEY)),
        ReplayGuard::new(Duration::from_secs(2), Some(state.to_owned())),
    )
    .await
    .unwrap()
}

/// compute-2's heartbeat number `seq`, sent `ago` before now, sealed.
fn datagram(seq: u64, ago: Duration) -> Vec<u8> {
    let sent_at = chrono::Utc::now().timestamp_millis() - ago.as_millis() as i64;
    let hb = Heartbeat {
        v: 1,
        segment: "seg".into(),
        from: "compute-2".into(),
        incarnation: "2000-b".into(),
        seq,
        suspects: Vec::new(),
        handled: Vec::new(),
        sent_at,
    };
    seal(Some(KEY.as_bytes()), &serde_json::to_vec(&hb).unwrap())
}

/// Whether `detector` hears compute-2 after the datagrams `sent` reach it.
async fn hears(detector: &mut HeartbeatDetector, sent: &[Vec<u8>]) -> bool {
    let peer = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let to = detector.local_addrs()[0];
    for datagram in sent {
        peer.send_to(datagram, to).await.unwrap();
    }
    // Two ticks: what was sent has arrived and been judged.
    detector.next().await.unwrap();
    let view = detector.next().await.unwrap();
    view.alive.contains("compute-2")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_heartbeat_after_a_restart_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("heartbeats.json");
    let recorded: Vec<Vec<u8>> = (1..=3).map(|seq| datagram(seq, Duration::ZERO)).collect();

    let mut before = detector(&state).await;
    assert!(
        hears(&mut before, &recorded).await,
        "the live peer is heard"
    );
    drop(before);
    assert_eq!(
        instanceha_runtime::private::mode_of(&state).unwrap(),
        0o600,
        "the marks are private"
    );

    // The agent restarts; compute-2 is dead. Its recorded heartbeats,
    // replayed at once (well within the clock-skew allowance), are not
    // taken as new.
    let mut after = detector(&state).await;
    assert!(
        !hears(&mut after, &recorded).await,
        "a replay kept compute-2 alive"
    );
    // One it never saw, but sent before the allowance: dropped too.
    let stale = datagram(4, Duration::from_secs(10));
    assert!(
        !hears(&mut after, &[stale]).await,
        "a stale heartbeat was taken"
    );
    // A new one is heard.
    let fresh = datagram(5, Duration::ZERO);
    assert!(
        hears(&mut after, &[fresh]).await,
        "a new heartbeat is heard"
    );
}
