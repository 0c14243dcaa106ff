//! The agent's integration tests, one binary: fencing against real BMC
//! emulators, clusters of agent processes against a real `instanceha-api`
//! (a SIGKILLed host fenced and reported once, a SIGSTOP shorter than the
//! window ignored, an API outage, a network partition in namespaces), and
//! the process monitor against real processes, heartbeats replayed after a
//! restart, and the private files.

mod binary;
mod cluster;
mod fencing;
mod partition;
mod process;
mod replay;
mod support;
