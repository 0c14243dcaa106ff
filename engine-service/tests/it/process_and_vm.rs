//! Instance failures (VM) and process failures (PROCESS) end to end.

use std::time::Duration;

use instanceha_proto::v1 as pb;
use openstack_sim::Scenario;
use openstack_sim::scenario::{HostSpec, InstanceSpec};

use instanceha_testkit::check::assert_honest;
use instanceha_testkit::check::assert_status;
use instanceha_testkit::check::status;
use instanceha_testkit::check::vmove_status;
use instanceha_testkit::cloud::Cloud;
use instanceha_testkit::cloud::fast;

const PATIENCE: Duration = Duration::from_secs(30);

fn scenario() -> Scenario {
    fast(
        Scenario::builder()
            .host(HostSpec::new("compute-01"))
            .host(HostSpec::new("compute-02"))
            .instance(InstanceSpec::new("vm-ha", "compute-01").ha(true))
            .instance(InstanceSpec::new("vm-plain", "compute-01"))
            .instance(
                InstanceSpec::new("vm-paused", "compute-01")
                    .ha(true)
                    .vm_state("paused"),
            ),
    )
}

async fn cloud() -> Cloud {
    let mut cloud = Cloud::start(scenario()).await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    cloud
}

async fn vm_failure(
    cloud: &mut Cloud,
    name: &str,
    event: &str,
    domain_event: &str,
) -> pb::Notification {
    let id = cloud.server(name).id;
    let n = cloud
        .report(
            pb::NotificationType::Vm,
            "compute-01",
            &[
                ("instance_uuid", &id),
                ("event", event),
                ("vir_domain_event", domain_event),
            ],
        )
        .await;
    cloud.terminal(&n.id, PATIENCE).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_instance_is_stopped_and_started() {
    let mut cloud = cloud().await;
    let n = vm_failure(&mut cloud, "vm-ha", "LIFECYCLE", "STOPPED_FAILED").await;
    let vmoves = cloud.vmoves(&n.id).await;
    assert_honest(&n, &vmoves);
    assert_status(&n, pb::NotificationStatus::Finished);
    assert_eq!(vmoves.len(), 1);
    assert_eq!(vmoves[0].r#type, pb::VmoveType::Restart as i32);
    assert_eq!(vmove_status(&vmoves[0]), pb::VmoveStatus::Succeeded);
    let actions: Vec<String> = cloud
        .sim
        .request_log(None)
        .into_iter()
        .filter_map(|r| r.action)
        .collect();
    assert_eq!(actions, ["os-stop", "os-start"]);
    assert_eq!(cloud.server("vm-ha").vm_state.as_str(), "active");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_that_need_no_recovery_and_unprotected_instances_are_left_alone() {
    let mut cloud = cloud().await;
    let n = vm_failure(&mut cloud, "vm-ha", "LIFECYCLE", "STOPPED_DESTROYED").await;
    assert_eq!(status(&n), pb::NotificationStatus::Ignored);
    let n = vm_failure(&mut cloud, "vm-plain", "LIFECYCLE", "STOPPED_FAILED").await;
    assert_eq!(status(&n), pb::NotificationStatus::Finished);
    assert!(cloud.vmoves(&n.id).await.is_empty());
    assert!(n.message.contains("not HA-enabled"), "{}", n.message);
    let n = vm_failure(&mut cloud, "vm-paused", "IO_ERROR", "IO_ERROR_REPORT").await;
    let vmoves = cloud.vmoves(&n.id).await;
    assert_eq!(status(&n), pb::NotificationStatus::Finished);
    assert_eq!(vmove_status(&vmoves[0]), pb::VmoveStatus::Ignored);
    assert!(vmoves[0].message.contains("paused"));
    let writes = cloud
        .sim
        .request_log(None)
        .into_iter()
        .filter(|r| r.action.is_some())
        .count();
    assert_eq!(writes, 0, "nothing was stopped or started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nova_compute_stopped_disables_the_service_and_started_enables_it_when_configured() {
    let mut cloud = Cloud::start_with(
        scenario(),
        |engine| engine.process_failure.enable_on_started = true,
        |_| {},
    )
    .await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let process = |event: &'static str| [("process_name", "nova-compute"), ("event", event)];
    let n = cloud
        .report(
            pb::NotificationType::Process,
            "compute-01",
            &process("STOPPED"),
        )
        .await;
    let n = cloud.terminal(&n.id, PATIENCE).await;
    assert_status(&n, pb::NotificationStatus::Finished);
    let host = cloud
        .sim
        .snapshot()
        .host("compute-01")
        .unwrap()
        .host
        .clone();
    assert!(!host.enabled);
    assert!(host.disabled_reason.unwrap().contains("process failed"));
    let on_maintenance = |cloud: &mut Cloud| {
        let mut hosts = cloud.hosts.clone();
        async move {
            hosts
                .list_hosts(pb::ListHostsRequest {
                    name: Some("compute-01".into()),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .hosts[0]
                .on_maintenance
        }
    };
    assert!(on_maintenance(&mut cloud).await);

    // nova-compute is back: a STARTED report is accepted although the host
    // is on maintenance, and with enable_on_started the host returns.
    let n = cloud
        .report(
            pb::NotificationType::Process,
            "compute-01",
            &process("STARTED"),
        )
        .await;
    let n = cloud.terminal(&n.id, PATIENCE).await;
    assert_status(&n, pb::NotificationStatus::Finished);
    assert!(
        cloud
            .sim
            .snapshot()
            .host("compute-01")
            .unwrap()
            .host
            .enabled
    );
    assert!(!on_maintenance(&mut cloud).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_processes_are_not_recovered() {
    let mut cloud = cloud().await;
    let n = cloud
        .report(
            pb::NotificationType::Process,
            "compute-01",
            &[("process_name", "libvirtd"), ("event", "STOPPED")],
        )
        .await;
    let n = cloud.terminal(&n.id, PATIENCE).await;
    assert_eq!(status(&n), pb::NotificationStatus::Finished);
    assert!(n.message.contains("libvirtd"), "{}", n.message);
    assert!(
        cloud
            .sim
            .snapshot()
            .host("compute-01")
            .unwrap()
            .host
            .enabled
    );
}
