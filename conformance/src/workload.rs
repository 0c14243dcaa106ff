//! The HA instances a scenario boots on the host that will fail, the
//! volume attachments that would block their evacuation, and the
//! invariants of their recovery as Nova, Cinder and Placement record it.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::records::Records;
use crate::stack::Stack;
use instanceha_proto::v1 as pb;
use instanceha_testkit::eventually::{eventually, until};
use reqwest::Method;
use serde_json::json;
use tokio::task::JoinSet;

/// One booted instance.
#[derive(Clone, Debug)]
pub struct Instance {
    pub name: String,
    pub id: String,
    /// Its boot volume, when it boots from one.
    pub volume: Option<String>,
    /// Stopped before the failure (it must stay stopped).
    pub stopped: bool,
}

/// Boots `count` HA instances on `host`: the first `bfv` from a volume,
/// the last `stopped` stopped. All at once, as a cloud fills.
pub async fn boot(
    records: &Records,
    stack: &Stack,
    host: &str,
    count: usize,
    bfv: usize,
    stopped: usize,
) -> Vec<Instance> {
    let image = stack.var("INSTANCEHA_REAL_OPENSTACK_IMAGE").to_owned();
    // The flavor once, before the boots race to create it.
    records.flavor().await;
    let mut set = JoinSet::new();
    for i in 0..count {
        let (records, host, image) = (records.clone(), host.to_owned(), image.clone());
        set.spawn(async move {
            let name = format!("ha-{host}-{i:02}");
            let volume = if i < bfv {
                Some(records.volume(&format!("{name}-root")).await)
            } else {
                None
            };
            let id = records
                .boot(&name, &host, &image, volume.as_deref(), true)
                .await;
            let stopped = i >= count - stopped;
            if stopped {
                records.stop_server(&id).await;
            }
            Instance {
                name,
                id,
                volume,
                stopped,
            }
        });
    }
    let mut instances: Vec<Instance> = set.join_all().await;
    instances.sort_by(|a, b| a.name.cmp(&b.name));
    instances
}

/// Every instance recovered off `failed`, as Nova, Cinder and Placement
/// say, and as the API's records say (`vmoves`: one succeeded per
/// instance).
pub async fn assert_recovered(
    records: &Records,
    failed: &str,
    instances: &[Instance],
    notification: &pb::Notification,
    vmoves: &[pb::Vmove],
) {
    if notification.status != pb::NotificationStatus::Finished as i32 {
        print_nova_view(records, instances, vmoves).await;
    }
    assert_eq!(
        pb::NotificationStatus::try_from(notification.status),
        Ok(pb::NotificationStatus::Finished),
        "{}",
        notification.message
    );
    assert_moved(records, failed, instances, vmoves).await;
}

/// What Nova shows of each of `instances` (the server, its evacuation
/// migrations) beside its vmove: printed when a recovery did not finish, so
/// that a failure on a shared machine can be explained from its log alone.
async fn print_nova_view(records: &Records, instances: &[Instance], vmoves: &[pb::Vmove]) {
    for i in instances {
        let vmove = vmoves.iter().find(|v| v.instance_id == i.id);
        eprintln!(
            "{}: vmove {:?}: {}",
            i.name,
            vmove.map(|v| pb::VmoveStatus::try_from(v.status)),
            vmove.map(|v| v.message.as_str()).unwrap_or("none")
        );
        match records
            .nova(Method::GET, &format!("/servers/{}", i.id), None)
            .await
        {
            Ok(v) => {
                let s = &v["server"];
                eprintln!(
                    "  server: status {} vm_state {} task_state {} host {} fault {}",
                    s["status"],
                    s["OS-EXT-STS:vm_state"],
                    s["OS-EXT-STS:task_state"],
                    s["OS-EXT-SRV-ATTR:host"],
                    s["fault"]
                );
            }
            Err(e) => eprintln!("  server: unreadable: {e}"),
        }
        for m in records.evacuations(&i.id).await {
            eprintln!("  evacuation: {m}");
        }
    }
}

/// Each of `instances` recovered off `failed`, as Nova, Cinder and
/// Placement say ([`moved_problems`] finds nothing), with a succeeded vmove.
pub async fn assert_moved(
    records: &Records,
    failed: &str,
    instances: &[Instance],
    vmoves: &[pb::Vmove],
) {
    let moved: BTreeSet<&str> = vmoves
        .iter()
        .filter(|v| v.status == pb::VmoveStatus::Succeeded as i32)
        .map(|v| v.instance_id.as_str())
        .collect();
    for i in instances {
        assert!(
            moved.contains(i.id.as_str()),
            "no succeeded vmove for {}",
            i.name
        );
        let problems = moved_problems(records, failed, i).await;
        assert!(problems.is_empty(), "{}", problems.join("; "));
    }
}

/// What Nova, Cinder and Placement say is wrong with `i` after it was
/// moved off `failed`; empty when it is recovered: in the state it had
/// (`ACTIVE`, or `SHUTOFF` if it was stopped) with no task, on another
/// host, unlocked, with exactly one settled evacuation and that one to the
/// host it runs on, allocated on that host, and, booted from a volume, that
/// volume `in-use` with one attachment, `attached`, to it, on that host.
/// The one judgement of "recovered" for the conformance tests (which
/// assert it) and the real-stack benchmark (which counts it, for every
/// contender alike).
pub async fn moved_problems(records: &Records, failed: &str, i: &Instance) -> Vec<String> {
    let name = &i.name;
    let s = match records.server(&i.id).await {
        Ok(s) => s,
        Err(e) => return vec![format!("{name}: {e}")],
    };
    let mut problems = Vec::new();
    let wanted = if i.stopped { "SHUTOFF" } else { "ACTIVE" };
    if s.status != wanted || s.task_state.is_some() {
        problems.push(format!(
            "{name} is {} (task {:?}), not {wanted}",
            s.status, s.task_state
        ));
    }
    if s.host == failed {
        problems.push(format!("{name} is still on the failed host {failed}"));
    }
    if s.locked {
        problems.push(format!("{name} is left locked ({:?})", s.locked_reason));
    }
    let evacuations = records.evacuations(&i.id).await;
    let settled: Vec<_> = evacuations
        .iter()
        .filter(|m| m["status"] == "done" || m["status"] == "completed")
        .collect();
    match settled.as_slice() {
        [m] if m["dest_compute"] == s.host.as_str() => {}
        [m] => problems.push(format!(
            "{name} runs on {} but was evacuated to {}",
            s.host, m["dest_compute"]
        )),
        _ => problems.push(format!(
            "{name} has {} settled evacuations, not 1: {evacuations:?}",
            settled.len()
        )),
    }
    let allocated = records.allocation_hosts(&i.id).await;
    if !allocated.contains(&s.host) {
        problems.push(format!(
            "{name} has no allocation on its host {}: {allocated:?}",
            s.host
        ));
    }
    if let Some(volume) = &i.volume {
        let attachments = records.attachments(volume).await;
        let attached_here = matches!(
            attachments.as_slice(),
            [a] if a["status"] == "attached" && a["instance"] == i.id.as_str()
        );
        if !attached_here {
            problems.push(format!("{name}'s volume attachments: {attachments:?}"));
        }
        if let Err(last) = volume_in_use_on(records, volume, &s.host).await {
            problems.push(format!("{name}'s volume {volume}: {last}"));
        }
    }
    problems
}

/// Waits up to 5 s (Cinder settles the volume's own status a moment after
/// the attachment) for `volume` to be `in-use` with one attachment, on
/// `host`; the last answer if it never is.
async fn volume_in_use_on(records: &Records, volume: &str, host: &str) -> Result<(), String> {
    until(
        Duration::from_secs(5),
        Duration::from_millis(300),
        || async {
            let v = records
                .cinder(Method::GET, &format!("/volumes/{volume}"), None)
                .await?;
            let v = &v["volume"];
            let hosts: Vec<_> = v["attachments"]
                .as_array()
                .map(|a| a.iter().map(|a| a["host_name"].clone()).collect())
                .unwrap_or_default();
            if v["status"] == "in-use" && hosts.len() == 1 && hosts[0] == host {
                Ok(())
            } else {
                Err(format!(
                    "status {}, attached on {hosts:?}, not {host}",
                    v["status"]
                ))
            }
        },
    )
    .await
}

/// Brings `host`'s nova-compute back (it destroys the evacuated guests and
/// settles its `done` evacuations), puts it back in service, and checks
/// that Placement then holds each instance on its new host only.
pub async fn restore(records: &Records, stack: &Stack, host: &str, instances: &[Instance]) {
    restore_host(records, stack, host).await;
    for i in instances {
        eventually(
            &format!("{}: allocations on its new host only", i.name),
            Duration::from_secs(60),
            Duration::from_secs(1),
            || async {
                let s = records.server(&i.id).await?;
                let allocated = records.allocation_hosts(&i.id).await;
                if allocated == [s.host.clone()] {
                    Ok(())
                } else {
                    Err(format!("{allocated:?}, on {}", s.host))
                }
            },
        )
        .await;
    }
}

/// The failed `host` back in service: its nova-compute started, Nova's
/// evacuation records away from it completed, the service forced up and
/// enabled.
pub async fn restore_host(records: &Records, stack: &Stack, host: &str) {
    stack.start(&format!("nova-{host}")).await;
    complete_evacuation_records(records, stack, host).await;
    records.restore_compute(host).await;
}

/// Waits until no evacuation away from `host` stays `done`, starting its
/// nova-compute again when one does. Nova refuses to force a host up while
/// one does, and each start of its nova-compute marks at most one
/// evacuation per instance `completed` (`_destroy_evacuated_instances`
/// keys them by instance): an instance whose lost evacuation was repaired
/// has two records, and its host needs a second start.
async fn complete_evacuation_records(records: &Records, stack: &Stack, host: &str) {
    let process = format!("nova-{host}");
    for _ in 0..3 {
        let completed = until(Duration::from_secs(30), Duration::from_secs(1), || async {
            let done = records
                .nova(
                    Method::GET,
                    &format!(
                        "/os-migrations?source_compute={host}&migration_type=evacuation&status=done"
                    ),
                    None,
                )
                .await
                .ok()?;
            done["migrations"]
                .as_array()
                .is_some_and(Vec::is_empty)
                .then_some(())
        })
        .await;
        if completed.is_ok() {
            return;
        }
        stack.kill(&process).await;
        stack.start(&process).await;
    }
}

/// An attachment that holds an evacuation's rebuild until it is cleared:
/// what a host's (or Nova's) crash leaves behind on Cinder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocking {
    /// Attached on the instance's host, but not the attachment Nova's
    /// block-device mapping uses: the backend still holds the dead host's
    /// session. The engine deletes it (`DELETE /attachments/{id}`).
    Stale,
    /// The instance's attachment on its host left `attaching` (its
    /// `os-complete` never came). The engine deletes it (as a service).
    Attaching,
    /// A detach of the volume in progress (`os-begin_detaching`, the first
    /// call of a legacy detach, that the dead host never finished): only
    /// the volume says `detaching`, its attachment stays `attached`. The
    /// engine deletes Nova's attachment (`DELETE /attachments/{id}`, as a
    /// service).
    Detaching,
}

/// Leaves a `blocking` attachment of `instance` on `host` on `volume`
/// (which that instance boots from), through Cinder's attachments API as
/// Nova makes its own (3.27 create with a connector, 3.44 `os-complete`),
/// or a detach in progress through the volume's `os-begin_detaching`: the
/// same calls on the real Cinder and on the simulator, so that both hold
/// the same state. Returns the blocking attachment's id.
pub async fn block(
    records: &Records,
    volume: &str,
    instance: &str,
    host: &str,
    blocking: Blocking,
) -> String {
    match blocking {
        Blocking::Stale => attach(records, volume, instance, host, true).await,
        Blocking::Attaching => attach(records, volume, instance, host, false).await,
        Blocking::Detaching => begin_detaching(records, volume).await,
    }
}

/// A second attachment of `instance` on `host`, completed or left
/// `attaching`.
async fn attach(
    records: &Records,
    volume: &str,
    instance: &str,
    host: &str,
    complete: bool,
) -> String {
    let connector = json!({
        "host": host, "ip": "127.0.0.1", "initiator": format!("iqn.1994-05.com.redhat:{host}"),
        "platform": "x86_64", "os_type": "linux", "multipath": false,
    });
    let created = records
        .cinder(
            Method::POST,
            "/attachments",
            Some(json!({"attachment": {
                "volume_uuid": volume, "instance_uuid": instance, "connector": connector}})),
        )
        .await
        .unwrap_or_else(|e| panic!("attach {volume} to {instance} on {host}: {e}"));
    let id = created["attachment"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no attachment id: {created}"))
        .to_owned();
    if complete {
        records
            .cinder(
                Method::POST,
                &format!("/attachments/{id}/action"),
                Some(json!({"os-complete": null})),
            )
            .await
            .unwrap_or_else(|e| panic!("complete attachment {id}: {e}"));
    }
    let wanted = if complete { "attached" } else { "attaching" };
    eventually(
        &format!("attachment {id} of {volume} {wanted}"),
        Duration::from_secs(30),
        Duration::from_millis(300),
        || async {
            let all = records.attachments(volume).await;
            match all.iter().find(|a| a["id"] == id.as_str()) {
                Some(a) if a["status"] == wanted => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    id
}

/// `volume` `detaching`; returns the attachment it keeps `attached`.
async fn begin_detaching(records: &Records, volume: &str) -> String {
    records
        .cinder(
            Method::POST,
            &format!("/volumes/{volume}/action"),
            Some(json!({"os-begin_detaching": null})),
        )
        .await
        .unwrap_or_else(|e| panic!("begin detaching {volume}: {e}"));
    let detaching = records
        .volume_status(volume, "detaching", Duration::from_secs(30))
        .await;
    let attachments = records.attachments(volume).await;
    assert!(
        attachments.iter().all(|a| a["status"] == "attached"),
        "a detach in progress leaves its attachments attached: {attachments:?}"
    );
    detaching["attachments"][0]["attachment_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no attachment on {volume}: {detaching}"))
        .to_owned()
}

/// An instance failure's recovery as Nova and the API record it: the
/// notification finished, the instance's one vmove succeeded, and the
/// instance active on `host`, unlocked, stopped and started by Nova.
pub async fn assert_restarted(
    records: &Records,
    host: &str,
    id: &str,
    notification: &pb::Notification,
    vmoves: &[pb::Vmove],
) {
    assert_eq!(
        pb::NotificationStatus::try_from(notification.status),
        Ok(pb::NotificationStatus::Finished),
        "{}",
        notification.message
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

/// What masakari-monitors' instance monitor reports when the guest of
/// `instance` stops on its own.
pub fn instance_failed(instance: &str) -> [(&str, &str); 3] {
    [
        ("instance_uuid", instance),
        ("event", "LIFECYCLE"),
        ("vir_domain_event", "STOPPED_FAILED"),
    ]
}

/// What its process monitor reports of nova-compute (`STOPPED`,
/// `STARTED`).
pub fn compute_process(event: &str) -> [(&str, &str); 2] {
    [("process_name", "nova-compute"), ("event", event)]
}
