//! `instanceha-engine`: runs recovery workflows against OpenStack and
//! streams every instance's result back to `instanceha-api`.

pub mod check;
pub mod config;
pub mod link;
pub mod recovery;
pub mod server;
pub mod workflow;
