//! The openstack-sim integration tests: one binary, one module per area.

mod binary;
mod cinder;
mod conformance;
mod control;
mod determinism;
mod disruptions;
mod faults;
mod helpers;
mod keystone;
mod nova_admin;
mod nova_boot;
mod nova_evacuate;
mod nova_rebuilds;
mod nova_servers;
mod paused_time;
mod scale;
mod stale_attachment;
