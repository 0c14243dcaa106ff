//! `[host.heartbeat]`: the heartbeat driver's settings and its own rules:
//! a named management address, a key, a bounded clock-skew allowance.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{CredentialSource, Error, invalid};

/// `[host.heartbeat]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeartbeatSettings {
    /// The UDP address heartbeats are received on: the management
    /// network's, named (not 0.0.0.0 or ::, which would take heartbeats
    /// from every network). Required with the heartbeat driver.
    pub listen: Option<SocketAddr>,
    /// A second network's UDP address: a peer is heard if either network
    /// carries its heartbeats.
    pub second_listen: Option<SocketAddr>,
    /// How often a heartbeat is sent to every peer.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// The failover segment's name: heartbeats of another segment are
    /// ignored, and without `peers` the members are the segment's hosts
    /// in the API.
    pub segment: String,
    /// The segment's other agents. Empty: the hosts of `segment` in the
    /// API, at `HOSTNAME:peer_port`.
    pub peers: Vec<PeerSettings>,
    /// The heartbeat port of peers taken from the API.
    pub peer_port: u16,
    /// A key shared by the segment's agents (file or environment): every
    /// heartbeat carries its HMAC-SHA256, and heartbeats without a valid
    /// one are dropped. Without it, anyone who can send UDP to the
    /// agents could vote a host failed, or keep a dead one alive: the
    /// agent refuses to start without it, unless `insecure_unsigned`.
    pub key: CredentialSource,
    /// Run without a key, taking any datagram as a heartbeat (tests on
    /// one machine only).
    pub insecure_unsigned: bool,
    /// Every heartbeat carries the time it was sent; one further than this
    /// from the receiver's clock (a replay, or a clock that drifted:
    /// agents need NTP) is dropped. At most `host.detect_after`.
    #[serde(with = "humantime_serde")]
    pub max_clock_skew: Duration,
    /// Where the last heartbeat taken from each peer (incarnation and
    /// number) is kept, so that heartbeats recorded before this agent
    /// restarted are not taken as new. Default: `heartbeats.json` beside
    /// the spool.
    pub state_file: Option<PathBuf>,
}

impl Default for HeartbeatSettings {
    fn default() -> Self {
        Self {
            listen: None,
            second_listen: None,
            interval: Duration::from_secs(1),
            segment: String::new(),
            peers: Vec::new(),
            peer_port: 15871,
            key: CredentialSource::default(),
            insecure_unsigned: false,
            max_clock_skew: Duration::from_secs(2),
            state_file: None,
        }
    }
}

/// `[[host.heartbeat.peers]]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerSettings {
    /// The peer's host name, as registered in the API.
    pub name: String,
    /// `HOST:PORT` of its heartbeat listener.
    pub address: String,
    /// `HOST:PORT` on the second network.
    #[serde(default)]
    pub second_address: Option<String>,
}

/// The heartbeat driver's own rules: a named address, a key, a bounded
/// clock-skew allowance.
pub(super) fn validate_heartbeat(
    hb: &HeartbeatSettings,
    detect_after: Duration,
) -> Result<(), Error> {
    let listen = hb.listen.ok_or_else(|| {
        invalid(
            "host.heartbeat.listen",
            "set the management network's address (HOST:PORT) heartbeats are received on",
        )
    })?;
    for (setting, addr) in [
        ("listen", Some(listen)),
        ("second_listen", hb.second_listen),
    ] {
        if let Some(addr) = addr.filter(|a| a.ip().is_unspecified()) {
            return Err(invalid(
                format!("host.heartbeat.{setting}"),
                format!(
                    "{addr} takes heartbeats from every network: name the network's own address"
                ),
            ));
        }
    }
    if hb.key.file.is_none() && hb.key.env.is_none() && !hb.insecure_unsigned {
        return Err(invalid(
            "host.heartbeat.key",
            "set a key the segment's agents share (file or env): without it anyone who can send UDP to the agents could vote a host failed, or keep a dead one alive (host.heartbeat.insecure_unsigned = true runs without, for tests)",
        ));
    }
    if hb.max_clock_skew.is_zero() || hb.max_clock_skew > detect_after {
        return Err(invalid(
            "host.heartbeat.max_clock_skew",
            format!(
                "must be more than 0 and at most host.detect_after ({}): a replay keeps a dead host alive that much longer",
                humantime::format_duration(detect_after)
            ),
        ));
    }
    Ok(())
}
