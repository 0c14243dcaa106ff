//! Host failures end to end: the normal recovery, every recovery method,
//! the selection rules, an unfenced host, and a host of 50 instances.

use std::time::{Duration, Instant};

use instanceha_proto::v1 as pb;
use openstack_client::OpenStack;
use openstack_client::nova::ServiceUpdate;
use openstack_sim::Scenario;
use openstack_sim::scenario::{HostSpec, InstanceGroupSpec, InstanceSpec};

use instanceha_testkit::check::assert_honest;
use instanceha_testkit::check::assert_status;
use instanceha_testkit::check::status;
use instanceha_testkit::check::vmove_status;
use instanceha_testkit::cloud::Cloud;
use instanceha_testkit::cloud::engine_settings;
use instanceha_testkit::cloud::fast;
use instanceha_testkit::eventually;

const PATIENCE: Duration = Duration::from_secs(30);

fn two_hosts_and_a_spare() -> openstack_sim::scenario::ScenarioBuilder {
    Scenario::builder()
        .host(HostSpec::new("compute-01"))
        .host(HostSpec::new("compute-02"))
        .host(HostSpec::new("compute-03").disabled("reserved for instance HA"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_host_is_recovered_and_its_services_can_be_restored() {
    let scenario = fast(
        two_hosts_and_a_spare()
            .instance(InstanceSpec::new("web-1", "compute-01").ha(true))
            .instance(
                InstanceSpec::new("batch-1", "compute-01")
                    .ha(true)
                    .vm_state("stopped"),
            )
            .instance(InstanceSpec::new("scratch", "compute-01").ha(false)),
    );
    let mut cloud = Cloud::start(scenario).await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let (n, vmoves) = cloud.recover_host("compute-01", PATIENCE).await;
    assert_status(&n, pb::NotificationStatus::Finished);
    assert_eq!(vmoves.len(), 2, "only the HA instances are recovered");
    for v in &vmoves {
        assert_eq!(vmove_status(v), pb::VmoveStatus::Succeeded);
        assert_eq!(v.dest_host, "compute-02");
        assert!(v.start_time.is_some() && v.end_time.is_some());
    }
    let web = cloud.server("web-1");
    assert_eq!(web.host.as_deref(), Some("compute-02"));
    assert_eq!(web.vm_state.as_str(), "active");
    assert!(!web.locked, "the engine unlocks what it locked");
    let batch = cloud.server("batch-1");
    assert_eq!(
        batch.vm_state.as_str(),
        "stopped",
        "a stopped instance stays stopped"
    );
    assert_eq!(batch.host.as_deref(), Some("compute-02"));
    assert_eq!(cloud.server("scratch").host.as_deref(), Some("compute-01"));

    // Nova was told: forced down and disabled with a reason.
    let world = cloud.sim.snapshot();
    let failed = world.host("compute-01").unwrap();
    assert!(failed.host.forced_down && !failed.host.enabled);
    assert!(
        failed
            .host
            .disabled_reason
            .as_deref()
            .unwrap()
            .contains("instance-ha")
    );
    // The API took the host out of service.
    let hosts = cloud
        .hosts
        .list_hosts(pb::ListHostsRequest {
            name: Some("compute-01".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .hosts;
    assert!(hosts[0].on_maintenance);
    // Progress was recorded in order.
    let tasks: Vec<String> = n.progress_events.iter().map(|p| p.task.clone()).collect();
    assert!(
        tasks.iter().any(|t| t == "disable_compute_service"),
        "{tasks:?}"
    );
    assert!(
        n.progress_events
            .windows(2)
            .all(|w| w[0].sequence < w[1].sequence)
    );

    // The operator can bring the host back: power on, then up and enabled.
    cloud.sim.power_on("compute-01").unwrap();
    let settings = engine_settings(&cloud.sim, "127.0.0.1:0".parse().unwrap());
    let (credentials, service, client) = settings.openstack_client(&Default::default()).unwrap();
    let openstack = OpenStack::new(credentials, service, client).unwrap();
    let every = Duration::from_millis(50);
    eventually("compute-01 back", PATIENCE, every, || async {
        let service = openstack
            .compute_service("compute-01")
            .await
            .unwrap()
            .unwrap();
        let restored = openstack
            .update_service(
                &service,
                &ServiceUpdate {
                    forced_down: Some(false),
                    enabled: Some(true),
                    ..ServiceUpdate::default()
                },
            )
            .await;
        match restored {
            Ok(service) if service.state == "up" && service.status == "enabled" => Ok(()),
            // Nova refuses while the host has not finished its evacuations
            // (it must restart first).
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserved_host_recovers_to_the_spare_and_takes_it_out_of_the_reserve() {
    let scenario = fast(
        two_hosts_and_a_spare()
            .instance(InstanceSpec::new("web-1", "compute-01").ha(true))
            .instance(InstanceSpec::new("web-2", "compute-01").ha(true)),
    );
    let mut cloud = Cloud::start(scenario).await;
    cloud
        .segment(
            pb::RecoveryMethod::ReservedHost,
            &instanceha_testkit::cloud::TWO_HOSTS_AND_A_SPARE,
        )
        .await;
    let (n, vmoves) = cloud.recover_host("compute-01", PATIENCE).await;
    assert_status(&n, pb::NotificationStatus::Finished);
    for v in &vmoves {
        assert_eq!(v.dest_host, "compute-03");
    }
    let world = cloud.sim.snapshot();
    assert!(
        world.host("compute-03").unwrap().host.enabled,
        "the spare is enabled"
    );
    let spare = cloud
        .hosts
        .list_hosts(pb::ListHostsRequest {
            name: Some("compute-03".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .hosts;
    assert!(!spare[0].reserved, "a used spare leaves the reserve");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rh_priority_falls_back_to_the_scheduler_when_the_spare_has_no_room() {
    let scenario = fast(
        Scenario::builder()
            .host(HostSpec::new("compute-01"))
            .host(HostSpec::new("compute-02"))
            .host(
                HostSpec::new("compute-03")
                    .capacity(1, 512)
                    .disabled("spare"),
            )
            .instance(InstanceSpec::new("web-1", "compute-01").ha(true)),
    );
    let mut cloud = Cloud::start(scenario).await;
    cloud
        .segment(
            pb::RecoveryMethod::RhPriority,
            &instanceha_testkit::cloud::TWO_HOSTS_AND_A_SPARE,
        )
        .await;
    let (n, vmoves) = cloud.recover_host("compute-01", PATIENCE).await;
    assert_status(&n, pb::NotificationStatus::Finished);
    assert_eq!(vmoves[0].dest_host, "compute-02");
    // The spare was tried first.
    let evacuations: Vec<String> = cloud
        .sim
        .request_log(None)
        .into_iter()
        .filter(|r| r.action.as_deref() == Some("evacuate"))
        .map(|r| r.status.unwrap_or_default().to_string())
        .collect();
    assert_eq!(evacuations.len(), 2, "{evacuations:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_priority_falls_back_to_the_spare_when_the_scheduler_finds_nothing() {
    let scenario = fast(
        Scenario::builder()
            .host(HostSpec::new("compute-01"))
            .host(HostSpec::new("compute-02").disabled("under repair"))
            .host(HostSpec::new("compute-03").disabled("spare"))
            .instance(InstanceSpec::new("web-1", "compute-01").ha(true)),
    );
    let mut cloud = Cloud::start(scenario).await;
    cloud
        .segment(
            pb::RecoveryMethod::AutoPriority,
            &[("compute-01", false), ("compute-03", true)],
        )
        .await;
    let (n, vmoves) = cloud.recover_host("compute-01", PATIENCE).await;
    assert_status(&n, pb::NotificationStatus::Finished);
    assert_eq!(vmoves[0].dest_host, "compute-03");
    assert_eq!(cloud.server("web-1").vm_state.as_str(), "active");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reserved_host_without_a_spare_fails_every_instance_with_the_reason() {
    let scenario =
        fast(two_hosts_and_a_spare().instance(InstanceSpec::new("web-1", "compute-01").ha(true)));
    let mut cloud = Cloud::start(scenario).await;
    cloud
        .segment(
            pb::RecoveryMethod::ReservedHost,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let (n, vmoves) = cloud.recover_host("compute-01", PATIENCE).await;
    assert_eq!(status(&n), pb::NotificationStatus::Failed);
    assert_eq!(vmoves.len(), 1);
    assert!(
        vmoves[0].message.contains("reserved host"),
        "{}",
        vmoves[0].message
    );
    assert_eq!(cloud.server("web-1").host.as_deref(), Some("compute-01"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selection_takes_all_when_asked_and_skips_error_instances_when_asked() {
    let scenario = fast(
        two_hosts_and_a_spare()
            .instance(InstanceSpec::new("plain", "compute-01"))
            .instance(InstanceSpec::new("ha", "compute-01").ha(true))
            .instance(
                InstanceSpec::new("broken", "compute-01")
                    .ha(true)
                    .vm_state("error"),
            ),
    );
    let mut cloud = Cloud::start_with(
        scenario,
        |engine| {
            engine.host_failure.evacuate_all_instances = true;
            engine.host_failure.ignore_instances_in_error_state = true;
        },
        |_| {},
    )
    .await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let (n, vmoves) = cloud.recover_host("compute-01", PATIENCE).await;
    let mut names: Vec<&str> = vmoves.iter().map(|v| v.instance_name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["ha", "plain"]);
    assert_eq!(cloud.server("broken").host.as_deref(), Some("compute-01"));
    assert!(
        n.progress_events.iter().any(|p| {
            p.state == pb::ProgressState::Skipped as i32 && p.message.contains("broken")
        }),
        "the skip is reported"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfenced_host_is_ignored_and_nova_is_left_alone() {
    let scenario =
        fast(two_hosts_and_a_spare().instance(InstanceSpec::new("web-1", "compute-01").ha(true)));
    let mut cloud = Cloud::start(scenario).await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    cloud.sim.power_off("compute-01").unwrap();
    let n = cloud
        .report(
            pb::NotificationType::ComputeHost,
            "compute-01",
            &[("event", "STOPPED"), ("host_status", "UNKNOWN")],
        )
        .await;
    let n = cloud.terminal(&n.id, PATIENCE).await;
    assert_eq!(status(&n), pb::NotificationStatus::Ignored);
    assert!(n.message.contains("fenced"), "{}", n.message);
    let writes = cloud
        .sim
        .request_log(None)
        .into_iter()
        .filter(|r| r.service == "compute" && r.method != "GET")
        .count();
    assert_eq!(writes, 0, "no write to Nova for an unfenced host");
}

/// 50 HA instances on one host at the simulator's default timings, scaled
/// by the test speed; prints the recovery time for the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_instances_recover_together() {
    let mut scenario = fast(two_hosts_and_a_spare());
    scenario.instance_groups.push(InstanceGroupSpec {
        host: "compute-01".into(),
        count: 50,
        ha_enabled: true,
        ..InstanceGroupSpec::default()
    });
    scenario.settings.rebuild_concurrency = 50;
    let mut cloud = Cloud::start(scenario).await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let started = Instant::now();
    let n = cloud.host_fails("compute-01").await;
    let n = cloud.terminal(&n.id, PATIENCE).await;
    let elapsed = started.elapsed();
    let vmoves = cloud.vmoves(&n.id).await;
    assert_honest(&n, &vmoves);
    assert_status(&n, pb::NotificationStatus::Finished);
    assert_eq!(vmoves.len(), 50);
    let stats = cloud.sim.stats();
    eprintln!(
        "50 instances: recovered in {:.2} s real = {:.1} s simulated at speed {}; nova alone (ideal) {:.1} s simulated",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * instanceha_testkit::cloud::SPEED,
        instanceha_testkit::cloud::SPEED,
        stats.ideal_makespan.unwrap_or_default()
    );
}

/// With `require_fencing` off, a host not reported fenced is still never
/// taken down while Nova sees its nova-compute up: the run is ignored and
/// Nova is left alone. Once Nova sees it down, the same report recovers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfenced_host_nova_sees_up_is_not_taken_down() {
    let scenario =
        fast(two_hosts_and_a_spare().instance(InstanceSpec::new("web-1", "compute-01").ha(true)));
    let mut cloud = Cloud::start_with(
        scenario,
        |engine| engine.host_failure.require_fencing = false,
        |_| {},
    )
    .await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let unfenced = [("event", "STOPPED"), ("host_status", "UNKNOWN")];
    let n = cloud
        .report(pb::NotificationType::ComputeHost, "compute-01", &unfenced)
        .await;
    let n = cloud.terminal(&n.id, PATIENCE).await;
    assert_eq!(status(&n), pb::NotificationStatus::Ignored);
    assert!(
        n.message.contains("up") && n.message.contains("fenced"),
        "{}",
        n.message
    );
    let writes = cloud
        .sim
        .request_log(None)
        .into_iter()
        .filter(|r| r.service == "compute" && r.method != "GET")
        .count();
    assert_eq!(writes, 0, "no write to Nova for a compute Nova sees up");
    assert_eq!(cloud.server("web-1").host.as_deref(), Some("compute-01"));

    // The host dies; once Nova sees its service down, it is recovered.
    cloud.sim.power_off("compute-01").unwrap();
    eventually(
        "nova to see compute-01 down",
        PATIENCE,
        Duration::from_millis(50),
        || async {
            !cloud
                .sim
                .snapshot()
                .hosts
                .iter()
                .any(|h| h.host.name == "compute-01" && h.service_state == "up")
        },
    )
    .await;
    // (Another payload: the same one again would be a duplicate.)
    let n = cloud
        .report(
            pb::NotificationType::ComputeHost,
            "compute-01",
            &[
                ("event", "STOPPED"),
                ("host_status", "UNKNOWN"),
                ("cluster_status", "OFFLINE"),
            ],
        )
        .await;
    let n = cloud.terminal(&n.id, PATIENCE).await;
    assert_status(&n, pb::NotificationStatus::Finished);
    assert_eq!(cloud.server("web-1").host.as_deref(), Some("compute-02"));
}
