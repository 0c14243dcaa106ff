//! The failures compared, one test each: a host, a host whose volumes have
//! blocking attachments, an instance, a process.

use super::{Failure, compare};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(no_real_openstack, ignore = "set INSTANCEHA_REAL_OPENSTACK_CTL to run")]
async fn the_simulator_answers_the_engine_as_real_openstack_does() {
    compare(
        Failure::Host,
        "the_simulator_answers_the_engine_as_real_openstack_does",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(no_real_openstack, ignore = "set INSTANCEHA_REAL_OPENSTACK_CTL to run")]
async fn the_simulator_answers_the_clearing_of_blocking_attachments_as_real_openstack_does() {
    compare(
        Failure::HostWithBlockedVolumes,
        "the_simulator_answers_the_clearing_of_blocking_attachments_as_real_openstack_does",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(no_real_openstack, ignore = "set INSTANCEHA_REAL_OPENSTACK_CTL to run")]
async fn the_simulator_answers_an_instance_recovery_as_real_openstack_does() {
    compare(
        Failure::Instance,
        "the_simulator_answers_an_instance_recovery_as_real_openstack_does",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(no_real_openstack, ignore = "set INSTANCEHA_REAL_OPENSTACK_CTL to run")]
async fn the_simulator_answers_a_process_recovery_as_real_openstack_does() {
    compare(
        Failure::Process,
        "the_simulator_answers_a_process_recovery_as_real_openstack_does",
    )
    .await;
}
