//! The three kinds of failure, on a healthy control plane.

use std::time::{Duration, Instant};

use instanceha_conformance::system::System;
use instanceha_proto::v1 as pb;
use instanceha_testkit::eventually;

use crate::clean_stack;
use instanceha_conformance::workload::{
    assert_recovered, assert_restarted, boot, compute_process, instance_failed, restore,
};

/// A host failure takes Nova seconds; ten times the ideal is generous.
pub const PATIENCE: Duration = Duration::from_secs(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(no_real_openstack, ignore = "set INSTANCEHA_REAL_OPENSTACK_CTL to run")]
async fn a_failed_host_with_ten_instances_is_recovered() {
    let Some((stack, records, _guard)) =
        clean_stack("a_failed_host_with_ten_instances_is_recovered").await
    else {
        return;
    };
    let computes = stack.computes();
    let failed = computes[0].as_str();
    let instances = boot(&records, &stack, failed, 10, 2, 1).await;
    let mut system = System::start(&stack, |_| {}).await;
    system.segment(&computes).await;

    stack.kill(&format!("nova-{failed}")).await;
    let started = Instant::now();
    let n = system.host_fenced(failed).await;
    let (n, vmoves) = system.terminal(&n.id, PATIENCE).await;
    eprintln!(
        "host failure, 10 instances: report to {:?} in {:.1} s",
        pb::NotificationStatus::try_from(n.status),
        started.elapsed().as_secs_f64()
    );
    assert_recovered(&records, failed, &instances, &n, &vmoves).await;
    let service = records.compute_service(failed).await;
    assert!(service.forced_down && !service.enabled, "{service:?}");
    restore(&records, &stack, failed, &instances).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(no_real_openstack, ignore = "set INSTANCEHA_REAL_OPENSTACK_CTL to run")]
async fn a_failed_instance_is_stopped_and_started() {
    let Some((stack, records, _guard)) =
        clean_stack("a_failed_instance_is_stopped_and_started").await
    else {
        return;
    };
    let computes = stack.computes();
    let host = computes[1].as_str();
    let instances = boot(&records, &stack, host, 1, 0, 0).await;
    let mut system = System::start(&stack, |_| {}).await;
    system.segment(&computes).await;

    let id = instances[0].id.as_str();
    let n = system
        .report(pb::NotificationType::Vm, host, &instance_failed(id))
        .await;
    let (n, vmoves) = system.terminal(&n.id, PATIENCE).await;
    assert_restarted(&records, host, id, &n, &vmoves).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(no_real_openstack, ignore = "set INSTANCEHA_REAL_OPENSTACK_CTL to run")]
async fn a_stopped_compute_process_is_disabled_and_enabled_when_it_starts() {
    let Some((stack, records, _guard)) =
        clean_stack("a_stopped_compute_process_is_disabled_and_enabled_when_it_starts").await
    else {
        return;
    };
    let computes = stack.computes();
    let host = computes[2].as_str();
    // Masakari leaves the service disabled on STARTED; instance-ha can
    // enable it again (process_failure.enable_on_started).
    let mut system = System::start(&stack, |s| s.process_failure.enable_on_started = true).await;
    system.segment(&computes).await;

    // Nova still believes the killed compute up for up to a minute.
    stack.kill(&format!("nova-{host}")).await;
    let started = Instant::now();
    let n = system
        .report(
            pb::NotificationType::Process,
            host,
            &compute_process("STOPPED"),
        )
        .await;
    let (n, _) = system.terminal(&n.id, PATIENCE).await;
    eprintln!(
        "process STOPPED: {:?} in {:.1} s",
        pb::NotificationStatus::try_from(n.status),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        pb::NotificationStatus::try_from(n.status),
        Ok(pb::NotificationStatus::Finished),
        "{}",
        n.message
    );
    let service = records.compute_service(host).await;
    assert!(!service.enabled, "{service:?}");

    stack.start(&format!("nova-{host}")).await;
    let n = system
        .report(
            pb::NotificationType::Process,
            host,
            &compute_process("STARTED"),
        )
        .await;
    let (n, _) = system.terminal(&n.id, PATIENCE).await;
    assert_eq!(
        pb::NotificationStatus::try_from(n.status),
        Ok(pb::NotificationStatus::Finished),
        "{}",
        n.message
    );
    let service = records.compute_service(host).await;
    assert!(service.enabled && !service.forced_down, "{service:?}");
    eventually(
        &format!("{host} up"),
        Duration::from_secs(60),
        Duration::from_secs(1),
        || async {
            let s = records.compute_service(host).await;
            if s.up { Ok(()) } else { Err(format!("{s:?}")) }
        },
    )
    .await;
}
