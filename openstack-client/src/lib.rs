//! The OpenStack client of instance-ha: Keystone v3 login and token cache,
//! endpoint selection from the catalog, microversion negotiation, retries
//! of transient failures, and typed Nova and Cinder calls.

pub mod catalog;
pub mod cinder;
mod client;
pub mod credentials;
mod error;
mod gate;
pub mod keystone;
mod metrics;
pub mod microversion;
pub mod nova;
pub mod retry;

pub use catalog::ServiceKind;
pub use client::{ClientSettings, OpenStack, ServiceEndpoint};
pub use error::{Call, Error};
