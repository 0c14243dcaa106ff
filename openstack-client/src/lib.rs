//! The OpenStack client of instance-ha: `clouds.yaml` and the `OS_*`
//! variables (credentials and TLS), Keystone v3 login and token cache,
//! endpoint selection from the catalog, microversion negotiation, the
//! request stack (tower layers: retries of transient failures, the outage
//! gate, re-authentication, timeouts), and typed Nova and Cinder calls.

pub mod catalog;
pub mod cinder;
mod client;
pub mod clouds;
pub mod credentials;
mod error;
pub mod keystone;
mod metrics;
pub mod microversion;
pub mod nova;
mod request;
pub mod retry;
mod stack;
pub mod tls;

pub use catalog::ServiceKind;
pub use client::{ClientSettings, OpenStack, ServiceEndpoint};
pub use error::{Call, Error};
