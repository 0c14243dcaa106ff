//! instance-ha against a real OpenStack: Keystone, Placement, Nova and
//! Cinder from PyPI, on loopback (`conformance/real-openstack/stack.py`).
//!
//! * [`stack`]: where the control plane is and a control to kill, stop and
//!   start any of its processes;
//! * [`records`]: a plain REST client, independent of `openstack-client`,
//!   that sets up servers and volumes and reads Nova's, Cinder's and
//!   Placement's own records: the truth the tests check the engine against;
//! * [`system`]: `instanceha-engine` and `instanceha-api` started the one
//!   way tests start them (testkit), configured for the real cloud;
//! * [`recorder`]: a recording reverse proxy between the engine and a cloud,
//!   and [`compare`]: two recordings reduced to what they can share (call
//!   templates, response shapes) and their differences;
//! * [`workload`]: the HA instances a scenario boots on the host that will
//!   fail, the invariants of their recovery, and the failed host's return.
//!
//! The tests (`tests/it`) run when `INSTANCEHA_REAL_OPENSTACK_CTL` names the
//! control (`python3 conformance/real-openstack/stack.py`); without it they
//! are ignored (build.rs), except under CI, where they fail.

pub mod compare;
pub mod recorder;
pub mod records;
pub mod stack;
pub mod system;
pub mod workload;
