//! OpenStack Masakari beside instance-ha: Masakari 22 itself (masakari-api
//! and masakari-engine from PyPI, with their defaults, a private RabbitMQ
//! node and SQLite) run on the same simulated cloud as instance-ha
//! (`recovery`, `intake`), started by `runner` against any Keystone; and
//! the model of its timings (`model`), kept for the scenarios where running
//! it would take hours.

pub mod intake;
pub mod model;
pub mod recovery;
pub mod rest;
pub mod runner;

pub use model::{MasakariModel, model};
