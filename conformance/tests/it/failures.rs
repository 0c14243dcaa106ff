//! The three kinds of failure, on a healthy control plane.

use std::time::{Duration, Instant};

use instanceha_conformance::stack::eventually;
use instanceha_conformance::system::System;
use instanceha_proto::v1 as pb;
use reqwest::Method;

use crate::clean_stack;
use instanceha_conformance::workload::{assert_recovered, boot, restore};

/// A host failure takes Nova seconds; ten times the ideal is generous.
pub const PATIENCE: Duration = Duration::from_secs(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
        .report(
            pb::NotificationType::Vm,
            host,
            &[
                ("instance_uuid", id),
                ("event", "LIFECYCLE"),
                ("vir_domain_event", "STOPPED_FAILED"),
            ],
        )
        .await;
    let (n, vmoves) = system.terminal(&n.id, PATIENCE).await;
    assert_eq!(
        pb::NotificationStatus::try_from(n.status),
        Ok(pb::NotificationStatus::Finished),
        "{}",
        n.message
    );
    assert_eq!(vmoves.len(), 1);
    assert_eq!(vmoves[0].status, pb::VmoveStatus::Succeeded as i32);
    let s = records.server(id).await.unwrap();
    assert_eq!(
        (s.status.as_str(), s.host.as_str(), s.locked),
        ("ACTIVE", host, false),
        "{s:?}"
    );
    // Nova's own record of what was done to it: stopped, then started.
    let actions = records
        .nova(
            Method::GET,
            &format!("/servers/{id}/os-instance-actions"),
            None,
        )
        .await
        .unwrap();
    let mut names: Vec<&str> = actions["instanceActions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["action"].as_str())
        .collect();
    names.reverse();
    assert_eq!(names, ["create", "stop", "start"], "{actions}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
    let process = |event: &'static str| [("process_name", "nova-compute"), ("event", event)];

    // Nova still believes the killed compute up for up to a minute.
    stack.kill(&format!("nova-{host}")).await;
    let started = Instant::now();
    let n = system
        .report(pb::NotificationType::Process, host, &process("STOPPED"))
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
        .report(pb::NotificationType::Process, host, &process("STARTED"))
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
