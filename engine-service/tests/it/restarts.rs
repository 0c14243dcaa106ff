//! Nothing is lost when processes die: an engine killed mid-recovery, and
//! an API restarted mid-recovery.

use std::time::Duration;

use instanceha_proto::v1 as pb;
use openstack_sim::Scenario;
use openstack_sim::scenario::{HostSpec, InstanceSpec};

use instanceha_testkit::check::assert_honest;
use instanceha_testkit::check::assert_status;
use instanceha_testkit::check::vmove_status;
use instanceha_testkit::cloud::Cloud;
use instanceha_testkit::cloud::api_settings;
use instanceha_testkit::cloud::engine_settings;
use instanceha_testkit::eventually;
use instanceha_testkit::process::start_api;
use instanceha_testkit::process::start_engine;

const PATIENCE: Duration = Duration::from_secs(60);

fn scenario() -> Scenario {
    instanceha_testkit::cloud::interruptible_scenario()
}

async fn until_some_succeeded(cloud: &Cloud, id: &str) {
    let every = Duration::from_millis(20);
    eventually("some vmoves succeeded", PATIENCE, every, || async {
        let vmoves = cloud.vmoves(id).await;
        let done = vmoves
            .iter()
            .filter(|v| vmove_status(v) == pb::VmoveStatus::Succeeded)
            .count();
        assert!(
            done < vmoves.len() || vmoves.is_empty(),
            "finished before the fault"
        );
        (done >= 2).then_some(()).ok_or(format!("{done} succeeded"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_killed_mid_recovery_is_replaced_and_the_rest_recovered() {
    let mut cloud = Cloud::start(scenario()).await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let n = cloud.host_fails("compute-01").await;
    until_some_succeeded(&cloud, &n.id).await;
    let addr = cloud.engine.addr;
    cloud.engine.kill();
    // A second engine comes up where the first one was.
    cloud.engine = start_engine(engine_settings(&cloud.sim, addr))
        .await
        .expect("the engine starts");
    let n = cloud.terminal(&n.id, PATIENCE).await;
    let vmoves = cloud.vmoves(&n.id).await;
    assert_honest(&n, &vmoves);
    assert_status(&n, pb::NotificationStatus::Finished);
    assert_eq!(vmoves.len(), 12);
    assert!(n.attempts >= 2, "a second run recovered the rest");
    assert!(
        vmoves.iter().any(|v| v.attempts >= 2),
        "unresolved instances were retried"
    );
    for server in cloud.sim.snapshot().instances {
        assert_eq!(
            server.host.as_deref(),
            Some("compute-02"),
            "{}",
            server.name
        );
        assert!(!server.locked, "{} left locked", server.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_restarted_mid_recovery_resumes_it() {
    let mut cloud = Cloud::start(scenario()).await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let n = cloud.host_fails("compute-01").await;
    until_some_succeeded(&cloud, &n.id).await;
    let addr = cloud.api.addr;
    cloud.api.kill();
    cloud.api = start_api(api_settings(&cloud.database_url, cloud.engine.addr, addr))
        .await
        .expect("the API starts");
    cloud.reconnect().await;
    let n = cloud.terminal(&n.id, PATIENCE).await;
    let vmoves = cloud.vmoves(&n.id).await;
    assert_honest(&n, &vmoves);
    assert_status(&n, pb::NotificationStatus::Finished);
    assert_eq!(vmoves.len(), 12);
    for server in cloud.sim.snapshot().instances {
        assert_eq!(
            server.host.as_deref(),
            Some("compute-02"),
            "{}",
            server.name
        );
        assert!(!server.locked, "{} left locked", server.name);
    }
}

/// Between the end of a rebuild and Nova's `finish_evacuation` the server
/// shows active, no task, still on the failed host; only its migration
/// says it is on its way. A run that starts in that window (the engine
/// that asked was killed) must follow that evacuation, not ask for a
/// second one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evacuation_between_rebuild_and_finish_is_followed_not_repeated() {
    // A clock that barely moves unless the test advances it, and a long
    // finish so that the window stays open.
    let mut scenario = Scenario::builder()
        .speed(0.001)
        .seed(3)
        .host(HostSpec::new("compute-01"))
        .host(HostSpec::new("compute-02"))
        .instance(InstanceSpec::new("app-1", "compute-01").ha(true))
        .build()
        .unwrap();
    scenario.settings.durations.finish = 100.0;
    let mut cloud = Cloud::start(scenario).await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let id = cloud.server("app-1").id;
    let n = cloud.host_fails("compute-01").await;
    eventually(
        "an evacuation",
        PATIENCE,
        Duration::from_millis(5),
        || async { cloud.accepted_evacuations(&id) > 0 },
    )
    .await;
    let addr = cloud.engine.addr;
    cloud.engine.kill();

    // Rebuilt, not yet moved: what a retry's listing finds.
    cloud.sim.advance(20.0);
    let server = cloud.server("app-1");
    assert_eq!(server.host.as_deref(), Some("compute-01"));
    assert_eq!(server.vm_state.as_str(), "active");
    assert!(server.task_state.is_none(), "{:?}", server.task_state);

    cloud.engine = start_engine(engine_settings(&cloud.sim, addr))
        .await
        .expect("the engine starts");
    // Wait until the second run follows the evacuation (or asks again).
    eventually(
        "a second run",
        PATIENCE,
        Duration::from_millis(20),
        || async {
            let vmoves = cloud.vmoves(&n.id).await;
            let following = vmoves.iter().any(|v| v.attempts >= 2 && v.step == "verify");
            following || cloud.accepted_evacuations(&id) > 1
        },
    )
    .await;
    cloud.sim.advance(250.0);
    let n = cloud.terminal(&n.id, PATIENCE).await;
    let vmoves = cloud.vmoves(&n.id).await;
    assert_honest(&n, &vmoves);
    assert_eq!(
        cloud.accepted_evacuations(&id),
        1,
        "nova was asked to evacuate app-1 again"
    );
    assert_status(&n, pb::NotificationStatus::Finished);
    let server = cloud.server("app-1");
    assert_eq!(server.host.as_deref(), Some("compute-02"));
    assert!(!server.locked, "left locked");
}

/// The server of a `POST /servers/{id}/action` call.
fn action_server(record: &openstack_sim::RequestRecord) -> Option<&str> {
    record
        .path
        .split('/')
        .skip_while(|part| *part != "servers")
        .nth(1)
}

/// Issue 25: "an API restart unlocks instances mid-evacuation: the engine
/// cancels the run, unlocks every instance still rebuilding and locks them
/// again 1–4 s later". The lock stays with the notification until its
/// instance settles: an instance whose evacuation was asked for before the
/// restart is unlocked once, at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_restart_never_unlocks_an_instance_nova_is_still_evacuating() {
    let mut cloud = Cloud::start(scenario()).await;
    cloud
        .segment(
            pb::RecoveryMethod::Auto,
            &instanceha_testkit::cloud::TWO_HOSTS,
        )
        .await;
    let n = cloud.host_fails("compute-01").await;
    until_some_succeeded(&cloud, &n.id).await;
    let addr = cloud.api.addr;
    cloud.api.kill();
    let asked_before: Vec<String> = cloud
        .sim
        .request_log(None)
        .iter()
        .filter(|r| r.action.as_deref() == Some("evacuate"))
        .filter_map(|r| action_server(r).map(str::to_owned))
        .collect();
    cloud.api = start_api(api_settings(&cloud.database_url, cloud.engine.addr, addr))
        .await
        .expect("the API starts");
    cloud.reconnect().await;
    let n = cloud.terminal(&n.id, PATIENCE).await;
    let vmoves = cloud.vmoves(&n.id).await;
    assert_honest(&n, &vmoves);
    assert_status(&n, pb::NotificationStatus::Finished);
    assert!(
        !asked_before.is_empty(),
        "evacuations were asked before the restart"
    );
    let log = cloud.sim.request_log(None);
    for server in &asked_before {
        let unlocks = log
            .iter()
            .filter(|r| r.action.as_deref() == Some("unlock"))
            .filter(|r| action_server(r) == Some(server.as_str()))
            .count();
        assert_eq!(unlocks, 1, "{server} unlocked {unlocks} times");
    }
    for server in cloud.sim.snapshot().instances {
        assert!(!server.locked, "{} left locked", server.name);
    }
}
