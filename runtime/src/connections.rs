//! Connections as a budgeted resource, on every TCP listener of a process
//! (the API's gRPC and REST ports, the engine's link, the metrics port):
//!
//! * at most `connections.max_per_address` open connections per source
//!   address and `connections.max_total` in all (never more than the
//!   open-file limit leaves, [`fd_budget`]); a connection over either is
//!   closed as soon as it is accepted, so one stranger cannot take the file
//!   descriptors everyone else needs;
//! * a connection must carry its first request (the HTTP/2 preface and a
//!   first call, or an HTTP/1.1 request) within
//!   `connections.first_request_timeout`: one that says nothing, or
//!   drips its preface, is closed;
//! * a connection that has served and then receives nothing for
//!   `connections.idle_timeout` is closed (HTTP/2 servers ping their
//!   clients more often than that, so a live client is never idle);
//! * the open-file limit is raised to its hard limit at start
//!   ([`raise_open_file_limit`]).
//!
//! The decisions (`Counts::admit`, `Deadline::next`) are pure; the
//! I/O around them is the accepting task and [`Tracked`], the stream that
//! counts itself out when dropped.

mod served;
mod tracked;

pub use served::{Served, ServedLayer, peer_of};
pub use tracked::Tracked;

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

use tracked::{Deadline, Ticket};

/// `[connections]`: the connection budget of every listener of a service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConnectionSettings {
    /// Open connections per source address, across the process's
    /// listeners. Clients behind one NAT or proxy share it.
    pub max_per_address: usize,
    /// Open connections in all (never more than the open-file limit
    /// leaves once the process's own files are counted).
    pub max_total: usize,
    /// A connection that has not sent its first request by then (TLS
    /// handshake and HTTP/2 preface included) is closed.
    #[serde(with = "humantime_serde")]
    pub first_request_timeout: Duration,
    /// A connection that receives nothing for this long after its first
    /// request is closed.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
}

impl Default for ConnectionSettings {
    fn default() -> Self {
        Self {
            max_per_address: 256,
            max_total: 16_384,
            first_request_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
        }
    }
}

impl ConnectionSettings {
    /// Checks what types alone cannot; `section` names the settings.
    pub fn validate(&self, section: &str) -> Result<(), String> {
        if self.max_per_address == 0 || self.max_total == 0 {
            return Err(format!(
                "{section}.max_per_address and {section}.max_total: must be 1 or more"
            ));
        }
        if self.first_request_timeout.is_zero() || self.idle_timeout.is_zero() {
            return Err(format!(
                "{section}.first_request_timeout and {section}.idle_timeout: must be more than 0"
            ));
        }
        Ok(())
    }
}

/// File descriptors kept for what is not a connection (the database pool,
/// outgoing clients, logs, the listeners).
pub const RESERVED_FILES: u64 = 128;

/// How many connections the open-file limit `nofile` leaves room for.
pub fn fd_budget(nofile: u64) -> usize {
    let left = nofile.saturating_sub(RESERVED_FILES).max(nofile / 2);
    usize::try_from(left).unwrap_or(usize::MAX).max(1)
}

/// Raises this process's soft open-file limit to its hard limit (nix's
/// safe `setrlimit`); returns the soft limit in force afterwards.
pub fn raise_open_file_limit() -> io::Result<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(io::Error::from)?;
    if soft >= hard {
        return Ok(soft);
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => {
            tracing::debug!(from = soft, to = hard, "open-file limit raised");
            Ok(hard)
        }
        Err(e) => {
            tracing::warn!(soft, hard, error = %e, "cannot raise the open-file limit");
            Ok(soft)
        }
    }
}

/// The open connections, by source address, and in all.
#[derive(Debug, Default)]
struct Counts {
    per_address: HashMap<IpAddr, usize>,
    total: usize,
}

/// Why a connection was closed at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Its address holds `max_per_address` connections already.
    PerAddress,
    /// The process holds `max_total` connections (or all the files it may).
    Total,
}

impl Counts {
    /// Counts a new connection from `ip` in, or says why not.
    fn admit(&mut self, ip: IpAddr, per_address: usize, total: usize) -> Result<(), Refused> {
        if self.total >= total {
            return Err(Refused::Total);
        }
        let held = self.per_address.entry(ip).or_default();
        if *held >= per_address {
            return Err(Refused::PerAddress);
        }
        *held += 1;
        self.total += 1;
        Ok(())
    }

    fn release(&mut self, ip: IpAddr) {
        if let Some(held) = self.per_address.get_mut(&ip) {
            *held -= 1;
            if *held == 0 {
                self.per_address.remove(&ip);
            }
        }
        self.total = self.total.saturating_sub(1);
    }
}

/// The budget of one process, shared by its listeners and by the layers
/// that tell it a connection carried a request. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ConnectionBudget {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    settings: ConnectionSettings,
    max_total: usize,
    counts: Mutex<Counts>,
    /// Whether each open connection (by peer) has carried a request.
    served: Mutex<HashMap<SocketAddr, Arc<AtomicBool>>>,
}

impl ConnectionBudget {
    /// The budget of `settings`, its total bounded by `nofile`, the
    /// open-file limit in force.
    pub fn new(settings: &ConnectionSettings, nofile: u64) -> Self {
        let max_total = settings.max_total.min(fd_budget(nofile));
        Self {
            inner: Arc::new(Inner {
                settings: settings.clone(),
                max_total,
                counts: Mutex::default(),
                served: Mutex::default(),
            }),
        }
    }

    /// The budget of `settings` for this process: the open-file limit is
    /// raised to its hard limit first.
    pub fn for_process(settings: &ConnectionSettings) -> Self {
        let nofile = raise_open_file_limit().unwrap_or(1024);
        let budget = Self::new(settings, nofile);
        tracing::info!(
            max_per_address = settings.max_per_address,
            max_total = budget.inner.max_total,
            open_file_limit = nofile,
            "connection budget"
        );
        budget
    }

    /// No limit to speak of (tests that open many connections).
    pub fn unlimited() -> Self {
        Self::new(
            &ConnectionSettings {
                max_per_address: usize::MAX,
                max_total: usize::MAX,
                ..ConnectionSettings::default()
            },
            u64::MAX,
        )
    }

    /// The total in force.
    pub fn max_total(&self) -> usize {
        self.inner.max_total
    }

    /// Open connections now.
    pub fn open(&self) -> usize {
        self.inner.counts.lock().expect("counts").total
    }

    /// Tells the budget that the connection from `peer` carried a request:
    /// from now on only its idleness can close it.
    pub fn served(&self, peer: SocketAddr) {
        if let Some(flag) = self.inner.served.lock().expect("served").get(&peer) {
            flag.store(true, Ordering::Relaxed);
        }
    }

    /// Counts `tcp` in, or refuses it (the caller drops it).
    pub fn admit(&self, tcp: TcpStream, peer: SocketAddr) -> Result<Tracked<TcpStream>, Refused> {
        let s = &self.inner.settings;
        self.inner.counts.lock().expect("counts").admit(
            peer.ip(),
            s.max_per_address,
            self.inner.max_total,
        )?;
        let served = Arc::new(AtomicBool::new(false));
        self.inner
            .served
            .lock()
            .expect("served")
            .insert(peer, served.clone());
        let _ = tcp.set_nodelay(true);
        Ok(Tracked {
            io: tcp,
            deadline: Deadline::new(
                Instant::now(),
                s.first_request_timeout,
                s.idle_timeout,
                served,
            ),
            sleep: None,
            ticket: Ticket {
                budget: self.clone(),
                peer,
            },
        })
    }

    /// Accepts on `listener` for as long as the returned receiver lives:
    /// connections over the budget are closed at once; the others come
    /// out tracked. Accept errors (out of files) pause accepting briefly.
    pub fn accept(
        &self,
        listener: TcpListener,
    ) -> mpsc::Receiver<(Tracked<TcpStream>, SocketAddr)> {
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(accept_loop(self.clone(), listener, tx));
        rx
    }

    /// [`accept`](Self::accept) as the stream of connections a tonic
    /// server serves (`serve_with_incoming*`).
    pub fn incoming(
        &self,
        listener: TcpListener,
    ) -> impl futures::Stream<Item = io::Result<Tracked<TcpStream>>> + Send + 'static {
        let mut accepted = self.accept(listener);
        futures::stream::poll_fn(move |cx| {
            accepted
                .poll_recv(cx)
                .map(|next| next.map(|(tcp, _)| Ok(tcp)))
        })
    }
}

async fn accept_loop(
    budget: ConnectionBudget,
    listener: TcpListener,
    tx: mpsc::Sender<(Tracked<TcpStream>, SocketAddr)>,
) {
    let local = listener.local_addr().ok();
    let mut refused: u64 = 0;
    loop {
        let accepted = tokio::select! {
            () = tx.closed() => return,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors, say: wait rather than spin.
                tracing::warn!(listener = ?local, error = %e, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        match budget.admit(tcp, peer) {
            Ok(tracked) => {
                if tx.send((tracked, peer)).await.is_err() {
                    return;
                }
            }
            Err(why) => {
                refused += 1;
                // One line per 1,000 refusals: a flood must not flood the log.
                if refused % 1000 == 1 {
                    tracing::warn!(listener = ?local, %peer, reason = ?why, refused, "connection refused: over the connection budget (connections.max_per_address, connections.max_total)");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_and_the_process_have_their_limits() {
        let mut counts = Counts::default();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        assert_eq!(counts.admit(a, 2, 3), Ok(()));
        assert_eq!(counts.admit(a, 2, 3), Ok(()));
        assert_eq!(counts.admit(a, 2, 3), Err(Refused::PerAddress));
        assert_eq!(counts.admit(b, 2, 3), Ok(()));
        assert_eq!(counts.admit(b, 2, 3), Err(Refused::Total));
        counts.release(a);
        assert_eq!(counts.admit(b, 2, 3), Ok(()));
        counts.release(a);
        counts.release(b);
        counts.release(b);
        assert_eq!(counts.total, 0);
        assert!(counts.per_address.is_empty(), "no address left behind");
    }

    #[test]
    fn the_open_file_limit_bounds_the_total() {
        assert_eq!(fd_budget(1024), 896);
        assert_eq!(fd_budget(200), 100);
        assert_eq!(fd_budget(0), 1);
        let budget = ConnectionBudget::new(&ConnectionSettings::default(), 512);
        assert_eq!(budget.max_total(), 384);
        let budget = ConnectionBudget::new(&ConnectionSettings::default(), 1 << 20);
        assert_eq!(budget.max_total(), 16_384);
    }

    #[test]
    fn settings_are_checked_naming_them() {
        ConnectionSettings::default()
            .validate("connections")
            .unwrap();
        let zero = ConnectionSettings {
            max_per_address: 0,
            ..ConnectionSettings::default()
        };
        assert!(
            zero.validate("connections")
                .unwrap_err()
                .contains("connections.max_per_address")
        );
    }
}
