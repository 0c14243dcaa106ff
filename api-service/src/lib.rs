//! `instanceha-api`: the public gRPC API of instance-ha, its persistence,
//! and (with the engine) the dispatch of recoveries and the final status.
//!
//! # Layout
//!
//! * [`auth`]: authentication and the roles' permissions, for every transport.
//! * [`domain`]: plain Rust types and their validation.
//! * [`status`]: the state machines of notifications and vmoves, and the
//!   run ledger (what a run's events change).
//! * [`lifecycle`]: the run lifecycle: every rule of when a run starts,
//!   retries, expires or ends, and what a report becomes, as pure functions.
//! * [`store`]: the database; the only module that uses sea-orm.
//! * [`service`]: every API operation and its rules, over the store.
//! * [`changes`]: the feed of persisted changes.
//! * [`dispatch`]: claiming, running and resolving recoveries with the engine.
//! * [`grpc`]: the `instanceha.v1` edge: handlers, conversions, errors.
//! * [`rest`]: the Masakari-compatible REST edge (API v1, microversions
//!   1.0 to 1.3) over the same service.
//! * [`console`]: the web console, on the REST listener under `/console/`.
//! * [`rate_limit`]: the per-client request budget both edges share.
//! * [`config`], [`server`]: settings and process life cycle.

pub mod auth;
pub mod changes;
pub mod commands;
pub mod config;
pub mod console;
pub mod dispatch;
pub mod domain;
pub mod grpc;
pub mod lifecycle;
pub mod metrics;
pub mod rate_limit;
pub mod rest;
pub mod server;
pub mod service;
pub mod status;
pub mod store;
