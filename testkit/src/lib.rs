//! The whole of instance-ha on one machine: `openstack-sim`,
//! `instanceha-engine` and `instanceha-api`, started in-process on
//! loopback, each on a Tokio runtime of its own so that a test can kill one
//! as a crashed process dies. The system tests of every crate, the CLI's
//! `demo` and the benchmark start the services through here, in one way.
//!
//! * [`process`]: a service on its own runtime, and starting the engine and
//!   the API from their settings.
//! * [`settings`]: the services' settings for a simulated cloud, paced to
//!   its speed.
//! * [`cloud`]: the three together with clients of the public API, and
//!   what tests ask of them (report a failure, wait for the end).
//! * [`check`]: the invariants every terminal notification must hold.
//! * `pki` (the `pki` feature): a CA and certificates for TLS tests.
//! * [`eventually()`]: the one way a test waits for what it expects. It is
//!   all that is left without the default `system` feature, for the tests
//!   of crates the services are built on.

#[cfg(feature = "system")]
pub mod check;
#[cfg(feature = "system")]
pub mod cloud;
pub mod eventually;
#[cfg(feature = "pki")]
pub mod pki;
#[cfg(feature = "system")]
pub mod process;
#[cfg(feature = "system")]
pub mod settings;
#[cfg(feature = "system")]
pub mod telemetry;

pub use eventually::eventually;
