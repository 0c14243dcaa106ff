//! The integration tests of `instanceha-engine`: recoveries run end to end
//! through `instanceha-api` and the engine against `openstack-sim`.

mod check;
mod fault_matrix;
mod found_bugs;
mod host_failure;
mod lost_work;
mod outage_matrix;
mod phases;
mod priority;
mod process_and_vm;
mod process_faults;
mod repeated;
mod resilience;
mod restarts;
mod return_to_service;
mod security;
mod seed_plan;
mod start_run;
mod telemetry;
mod volumes;
mod watch;
