//! The OpenStack client against the simulated cloud (openstack-sim).

mod tls;
