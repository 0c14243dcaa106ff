//! `instanceha-agent`: one per compute host. It detects host, process and
//! instance failures, fences a failed host before reporting it, and
//! reports to `instanceha-api` over gRPC through a durable spool.
//!
//! # Layout
//! - [`host`]: the host monitor. [`host::membership`] (heartbeats,
//!   suspicion, quorum) and [`host::plan`] (who acts) decide without I/O;
//!   the drivers ([`host::heartbeat`], [`host::pacemaker`],
//!   [`host::kubernetes`]) implement one [`host::Detector`] trait.
//! - [`fence`]: Redfish and IPMI power-off with confirmation.
//! - [`process`], [`instance`]: the process monitor (masakari-monitors'
//!   `process_list.yaml`) and the instance monitor (libvirt events).
//! - [`report`]: the reports and their idempotency keys; [`spool`]: the
//!   durable queue; [`delivery`]: sending with backoff; [`client`]: the
//!   only module that touches the generated gRPC types.
//! - [`config`], [`credentials`], [`metrics`], [`agent`] (start-up).

pub mod agent;
pub mod client;
pub mod config;
pub mod credentials;
pub mod delivery;
pub mod fence;
pub mod host;
pub mod instance;
pub mod metrics;
pub mod process;
pub mod report;
pub mod spool;

pub use agent::Agent;
pub use config::Settings;

/// Installs ring as rustls' crypto provider (for reqwest and tonic), once
/// per process; later calls do nothing.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
