//! `instanceha-engine`: runs recovery workflows against OpenStack and
//! streams every instance's result back to `instanceha-api`.

/// The OpenStack client (its own crate, shared with the API's Keystone
/// token validation).
pub use openstack_client as openstack;

pub mod config;
pub mod link;
pub mod recovery;
pub mod server;
pub mod workflow;
