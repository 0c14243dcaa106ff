//! The simulator follows reality: each failure (a host with three
//! instances, one booted from a volume; a host whose volume-backed
//! instances hold attachments that block their evacuation; an instance; a
//! nova-compute process stopped and started) recovered on the real stack
//! and on openstack-sim, each time through the same recording proxy
//! between the engine and the cloud
//! (`instanceha_conformance::recorder`); then the engine's calls
//! (per instance and for the cloud, order-insensitive, writes in order)
//! and the shapes of the answers (every key path and its JSON types) are
//! compared. Every difference is either fixed in the simulator or listed
//! in [`STAYING`] with its reason (conformance/README.md has the table).

mod cases;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use instanceha_conformance::compare::{Call, FieldDifference, Owners, Reduced, shape_differences};
use instanceha_conformance::recorder::{Exchange, Recorder};
use instanceha_conformance::records::Records;
use instanceha_conformance::system::{System, engine_settings};
use instanceha_conformance::workload::{
    Blocking, assert_recovered, assert_restarted, block, boot, compute_process, instance_failed,
    restore,
};
use instanceha_engine::config::Settings as EngineSettings;
use instanceha_proto::v1 as pb;
use instanceha_testkit::cloud::{self, Cloud, SPEED};
use instanceha_testkit::eventually;
use instanceha_testkit::settings::loopback;
use openstack_client::OpenStack;
use openstack_sim::scenario::{HostSpec, InstanceSpec};
use openstack_sim::{Scenario, Sim};

use crate::clean_stack;
use crate::failures::PATIENCE;

/// Differences that stay, and why: a difference line containing the first
/// text is accepted for the reason in the second.
pub const STAYING: &[(&str, &str)] = &[(
    "security_groups",
    "the real stack boots its servers without a port (it has no Neutron): Nova \
     omits the key; a server with a port has its groups, as the simulator shows",
)];

/// `settings` with both identities logging in at `auth_url` (the
/// recorder's Keystone).
fn through(settings: &mut EngineSettings, auth_url: &str) {
    settings.openstack.auth.auth_url = Some(auth_url.to_owned());
    if let Some(service) = &mut settings.openstack.service_auth {
        service.auth_url = Some(auth_url.to_owned());
    }
}

/// What the engine reads only when something goes wrong (an evacuation's
/// instance action, a server's evacuations), read with the engine's own
/// client and settings, so that those answers are compared too: every
/// instance's actions and each action, its evacuations, every volume and
/// its attachments.
async fn probe(settings: &EngineSettings, owners: &Owners) {
    let (credentials, service, client) = settings.openstack_client(&Default::default()).unwrap();
    let openstack = OpenStack::new(credentials, service, client).unwrap();
    for id in &owners.instances {
        for action in openstack.instance_actions(id).await.unwrap() {
            openstack
                .instance_action(id, &action.request_id)
                .await
                .unwrap();
        }
        openstack.evacuations_of(id).await.unwrap();
    }
    for volume in owners.volumes() {
        openstack.volume(volume).await.unwrap();
        openstack.volume_attachments(volume).await.unwrap();
    }
}

/// `scheme://host:port` of `url`.
fn origin(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host = rest.split('/').next().unwrap_or(rest);
    format!(
        "{}://{host}",
        url.split_once("://").map_or("http", |(s, _)| s)
    )
}

/// A failure, made alike on both clouds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    /// A fenced host with three HA instances, the first booted from a
    /// volume.
    Host,
    /// A fenced host with two HA instances booted from volumes, each
    /// holding an attachment that blocks its evacuation: the first a stale
    /// one, the second one stuck attaching.
    HostWithBlockedVolumes,
    /// One HA instance's guest stopped on its own (the instance workflow).
    Instance,
    /// nova-compute stopped, then started again, with
    /// `process_failure.enable_on_started` (the process workflow).
    Process,
}

/// How one instance of a scenario boots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Disk {
    Image,
    /// From a volume, with an attachment that blocks its evacuation or
    /// none.
    Volume(Option<Blocking>),
}

impl Failure {
    /// The scenario's name (for the dump).
    fn name(self) -> &'static str {
        match self {
            Failure::Host => "host",
            Failure::HostWithBlockedVolumes => "host-blocked-volumes",
            Failure::Instance => "instance",
            Failure::Process => "process",
        }
    }

    /// The compute it concerns, as failures.rs has it: the first fails
    /// with its instances, the second's instance fails, the third's
    /// nova-compute stops.
    fn host(self) -> usize {
        match self {
            Failure::Host | Failure::HostWithBlockedVolumes => 0,
            Failure::Instance => 1,
            Failure::Process => 2,
        }
    }

    /// Its HA instances on that host, those from a volume first.
    fn disks(self) -> &'static [Disk] {
        match self {
            Failure::Host => &[Disk::Volume(None), Disk::Image, Disk::Image],
            Failure::HostWithBlockedVolumes => &[
                Disk::Volume(Some(Blocking::Stale)),
                Disk::Volume(Some(Blocking::Attaching)),
                Disk::Volume(Some(Blocking::Detaching)),
            ],
            Failure::Instance => &[Disk::Image],
            Failure::Process => &[],
        }
    }

    /// How much faster than real time the simulator runs. Ten for the
    /// process failure: a compute Nova still believes up for its
    /// `service_down_time` (60 s) after it was stopped must still be up
    /// when the engine disables it, as on the real stack (0.6 s at 100
    /// is too close to the engine's own pace).
    fn speed(self) -> f64 {
        match self {
            Failure::Process => 10.0,
            _ => SPEED,
        }
    }

    /// The engine's settings besides the defaults.
    fn tune(self, settings: &mut EngineSettings) {
        if self == Failure::Process {
            settings.process_failure.enable_on_started = true;
        }
    }

    /// The writes (call endpoints) the recovery must make on both sides:
    /// what this scenario is there to compare, so that it cannot pass
    /// without them.
    fn compares(self) -> &'static [&'static str] {
        match self {
            Failure::Host => &["compute POST /v2.1/servers/{id}/action [evacuate]"],
            Failure::HostWithBlockedVolumes => &[
                "volume DELETE /v3/{id}/attachments/{id}",
                "compute POST /v2.1/servers/{id}/action [evacuate]",
            ],
            Failure::Instance => &[
                "compute POST /v2.1/servers/{id}/action [os-stop]",
                "compute POST /v2.1/servers/{id}/action [os-start]",
            ],
            Failure::Process => &["compute PUT /v2.1/os-services/{id}"],
        }
    }
}

/// What one side recorded: the engine's calls, and the reads of
/// [`probe`] after them.
struct Recording {
    engine: Vec<Exchange>,
    probes: Vec<Exchange>,
}

/// Recovers `failure` on the real stack, then on the simulator, and fails
/// on any difference not in [`STAYING`].
async fn compare(failure: Failure, test: &str) {
    let started = Instant::now();
    let Some((real, computes)) = on_real(failure, test).await else {
        return;
    };
    let real_took = started.elapsed();
    let started = Instant::now();
    let simulated = on_sim(failure, &computes).await;
    eprintln!(
        "{}: real {:.1} s, simulated {:.1} s",
        failure.name(),
        real_took.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );

    dump(failure, &real, &simulated);
    let reduce = |r: &Recording| {
        let mut reduced = Reduced::of(&r.engine);
        reduced.add_shapes(&r.probes);
        reduced
    };
    let (real, simulated) = (reduce(&real), reduce(&simulated));
    for (side, reduced) in [("real", &real), ("sim", &simulated)] {
        let writes: BTreeSet<String> = reduced
            .cloud_calls
            .iter()
            .chain(reduced.instance_calls.values().flatten())
            .filter(|c| c.writes() && c.status.is_some_and(|s| s < 400))
            .map(Call::endpoint)
            .collect();
        for wanted in failure.compares() {
            assert!(
                writes.contains(*wanted),
                "{}: no {wanted} on the {side} side: {writes:?}",
                failure.name()
            );
        }
    }
    let (differences, timing) = differences(&real, &simulated);
    for line in &timing {
        eprintln!("timing: {line}");
    }
    let mut unexpected = Vec::new();
    let mut seen = BTreeSet::new();
    for line in &differences {
        match STAYING.iter().find(|(text, _)| line.contains(text)) {
            Some((text, reason)) => {
                seen.insert(*text);
                eprintln!("staying: {line} ({reason})");
            }
            None => unexpected.push(line.clone()),
        }
    }
    for (text, _) in STAYING.iter().filter(|(t, _)| !seen.contains(t)) {
        eprintln!("not seen this run: {text}");
    }
    assert!(
        unexpected.is_empty(),
        "{}: the simulator differs from real OpenStack:\n{}",
        failure.name(),
        unexpected.join("\n")
    );
}

/// `failure` on the real stack, through the recorder; `None` without a
/// stack. Checks the outcome against Nova's and Cinder's records and puts
/// the stack back as it was.
async fn on_real(failure: Failure, test: &str) -> Option<(Recording, Vec<String>)> {
    let (stack, records, _guard) = clean_stack(test).await?;
    let computes = stack.computes();
    let host = computes[failure.host()].clone();
    let disks = failure.disks();
    let from_volume = disks.iter().filter(|d| **d != Disk::Image).count();
    let instances = boot(&records, &stack, &host, disks.len(), from_volume, 0).await;
    for (instance, disk) in instances.iter().zip(disks) {
        if let Disk::Volume(Some(blocking)) = disk {
            let volume = instance.volume.as_deref().expect("booted from a volume");
            block(&records, volume, &instance.id, &host, *blocking).await;
        }
    }

    let auth_url = stack.var("OS_AUTH_URL").to_owned();
    let (nova, cinder) = records.endpoints();
    let recorder = Recorder::start(&[
        ("keystone", &origin(&auth_url)),
        ("nova", &origin(nova)),
        ("cinder", &origin(cinder)),
    ])
    .await;
    let proxied = recorder.url(&auth_url);
    let mut system = System::start(&stack, |s| {
        through(s, &proxied);
        failure.tune(s);
    })
    .await;
    system.segment(&computes).await;
    match failure {
        Failure::Host | Failure::HostWithBlockedVolumes => {
            stack.kill(&format!("nova-{host}")).await;
            let n = system.host_fenced(&host).await;
            let (n, vmoves) = system.terminal(&n.id, PATIENCE).await;
            assert_recovered(&records, &host, &instances, &n, &vmoves).await;
        }
        Failure::Instance => {
            let id = instances[0].id.as_str();
            let n = system
                .report(pb::NotificationType::Vm, &host, &instance_failed(id))
                .await;
            let (n, vmoves) = system.terminal(&n.id, PATIENCE).await;
            assert_restarted(&records, &host, id, &n, &vmoves).await;
        }
        Failure::Process => {
            stack.kill(&format!("nova-{host}")).await;
            let n = system
                .report(
                    pb::NotificationType::Process,
                    &host,
                    &compute_process("STOPPED"),
                )
                .await;
            let (n, _) = system.terminal(&n.id, PATIENCE).await;
            assert_finished(&n);
            let service = records.compute_service(&host).await;
            assert!(!service.enabled, "{service:?}");
            // The monitor reports STARTED once nova-compute runs again:
            // once it heartbeats (as the simulator's side waits for its
            // host to boot), so that Nova's answer to enabling it does not
            // wait on a compute still starting.
            let before = records.compute_service(&host).await.updated_at;
            stack.start(&format!("nova-{host}")).await;
            eventually(
                &format!("nova-compute on {host} heartbeats"),
                Duration::from_secs(60),
                Duration::from_millis(500),
                || async {
                    let s = records.compute_service(&host).await;
                    if s.updated_at != before {
                        Ok(())
                    } else {
                        Err(format!("{s:?}"))
                    }
                },
            )
            .await;
            let n = system
                .report(
                    pb::NotificationType::Process,
                    &host,
                    &compute_process("STARTED"),
                )
                .await;
            let (n, _) = system.terminal(&n.id, PATIENCE).await;
            assert_finished(&n);
            let service = records.compute_service(&host).await;
            assert!(service.enabled && !service.forced_down, "{service:?}");
        }
    }
    let engine = recorder.exchanges();
    drop(system);
    let mut settings = engine_settings(&stack);
    through(&mut settings, &proxied);
    probe(&settings, &Owners::learn(&engine)).await;
    let probes = recorder.exchanges()[engine.len()..].to_vec();
    drop(recorder);
    if matches!(failure, Failure::Host | Failure::HostWithBlockedVolumes) {
        restore(&records, &stack, &host, &instances).await;
    }
    Some((Recording { engine, probes }, computes))
}

/// `failure` on the simulator, the same cloud: the stack's computes, the
/// same HA instances (project admin) on the same host, the same blocking
/// attachments made through the same calls.
async fn on_sim(failure: Failure, computes: &[String]) -> Recording {
    let host = computes[failure.host()].clone();
    let speed = failure.speed();
    let mut builder = Scenario::builder().speed(speed).seed(7);
    for compute in computes {
        builder = builder.host(HostSpec::new(compute));
    }
    let names: Vec<String> = (0..failure.disks().len())
        .map(|i| format!("ha-{host}-{i:02}"))
        .collect();
    for (name, disk) in names.iter().zip(failure.disks()) {
        let mut spec = InstanceSpec::new(name, &host).ha(true).project("admin");
        if *disk != Disk::Image {
            spec = spec.boot_from_volume();
        }
        builder = builder.instance(spec);
    }
    let sim = Sim::start(builder.build().unwrap(), "127.0.0.1:0".parse().unwrap())
        .await
        .expect("the simulator starts");
    let admin = Records::login_at(
        &sim.auth_url(),
        ("admin", "secret"),
        "Default",
        ("admin", "Default"),
    )
    .await;
    let world = sim.snapshot();
    let ids: Vec<String> = names
        .iter()
        .map(|n| {
            world
                .instance_by_name(n)
                .expect("a scenario server")
                .id
                .clone()
        })
        .collect();
    for ((name, disk), id) in names.iter().zip(failure.disks()).zip(&ids) {
        if let Disk::Volume(Some(blocking)) = disk {
            let instance = world.instance_by_name(name).expect("a scenario server");
            let volume = &instance.bdms[0].volume_id;
            block(&admin, volume, id, &host, *blocking).await;
        }
    }

    let recorder = Recorder::start(&[("sim", &sim.base_url())]).await;
    let proxied = recorder.url(&sim.auth_url());
    let mut settings = cloud::engine_settings(&sim, loopback());
    through(&mut settings, &proxied);
    failure.tune(&mut settings);
    let mut cloud = Cloud::around(
        sim,
        |s| {
            through(s, &proxied);
            failure.tune(s);
            // The product's default, as on the real side.
            s.openstack.token_warmup_interval = Duration::from_secs(240);
            // The product's wait for a service update, in the simulator's
            // time: disabling a compute Nova still believes up outlasts
            // it (Nova's RPC timeout, 60 s), as on the real side.
            s.openstack.service_update_timeout = Duration::from_secs_f64(
                EngineSettings::default()
                    .openstack
                    .service_update_timeout
                    .as_secs_f64()
                    / speed,
            );
        },
        |_| {},
    )
    .await;
    let hosts: Vec<(&str, bool)> = computes.iter().map(|h| (h.as_str(), false)).collect();
    cloud.segment(pb::RecoveryMethod::Auto, &hosts).await;
    let within = Duration::from_secs(60);
    match failure {
        Failure::Host | Failure::HostWithBlockedVolumes => {
            let (n, vmoves) = cloud.recover_host(&host, within).await;
            assert_finished(&n);
            assert_eq!(vmoves.len(), names.len(), "{vmoves:?}");
            assert!(
                vmoves
                    .iter()
                    .all(|v| v.status == pb::VmoveStatus::Succeeded as i32),
                "{vmoves:?}"
            );
        }
        Failure::Instance => {
            let n = cloud
                .report(pb::NotificationType::Vm, &host, &instance_failed(&ids[0]))
                .await;
            assert_finished(&cloud.terminal(&n.id, within).await);
        }
        Failure::Process => {
            cloud.sim.power_off(&host).unwrap();
            let n = cloud
                .report(
                    pb::NotificationType::Process,
                    &host,
                    &compute_process("STOPPED"),
                )
                .await;
            assert_finished(&cloud.terminal(&n.id, within).await);
            // The monitor reports STARTED once nova-compute runs again:
            // once the simulated host has booted and heartbeats.
            cloud.sim.power_on(&host).unwrap();
            eventually(
                &format!("{host} booted"),
                within,
                Duration::from_millis(20),
                || async {
                    let world = cloud.sim.snapshot();
                    match world.host(&host) {
                        Some(h) if h.host.heartbeat_origin.is_some() => Ok(()),
                        other => Err(format!("{:?}", other.map(|h| &h.service_state))),
                    }
                },
            )
            .await;
            let n = cloud
                .report(
                    pb::NotificationType::Process,
                    &host,
                    &compute_process("STARTED"),
                )
                .await;
            assert_finished(&cloud.terminal(&n.id, within).await);
        }
    }
    let engine = recorder.exchanges();
    probe(&settings, &Owners::learn(&engine)).await;
    let probes = recorder.exchanges()[engine.len()..].to_vec();
    drop(cloud);
    Recording { engine, probes }
}

fn assert_finished(n: &pb::Notification) {
    assert_eq!(
        pb::NotificationStatus::try_from(n.status),
        Ok(pb::NotificationStatus::Finished),
        "{}",
        n.message
    );
}

/// With `INSTANCEHA_SIM_VS_REAL_DUMP` set, both recordings in the
/// scenario's directory below it (`host/real.json`, `host/sim.json`...),
/// for reading.
fn dump(failure: Failure, real: &Recording, sim: &Recording) {
    let Some(dir) = std::env::var_os("INSTANCEHA_SIM_VS_REAL_DUMP") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir).join(failure.name());
    std::fs::create_dir_all(&dir).unwrap();
    let (real, sim) = (
        [real.engine.as_slice(), &real.probes].concat(),
        [sim.engine.as_slice(), &sim.probes].concat(),
    );
    for (name, exchanges) in [("real.json", &real), ("sim.json", &sim)] {
        let list: Vec<serde_json::Value> = exchanges
            .iter()
            .map(|e| {
                serde_json::json!({
                    "upstream": e.upstream, "method": e.method, "path": e.path,
                    "query": e.query, "microversion": e.microversion,
                    "request": e.request, "status": e.status, "response": e.response, "headers": e.response_headers,
                })
            })
            .collect();
        std::fs::write(dir.join(name), serde_json::to_string_pretty(&list).unwrap()).unwrap();
    }
}

/// Every difference, one line each; and apart, those that depend on when
/// the engine's polls fell: nullability alone (one side showed null where
/// the other never did: an evacuation still `accepted`, with no
/// destination and never updated, is seen or not), and a read without an
/// answer on one side only (a poll dropped or timed out).
fn differences(real: &Reduced, sim: &Reduced) -> (Vec<String>, Vec<String>) {
    let mut out = Vec::new();
    let mut timing = Vec::new();
    // A read its caller gave up on (a poll the engine dropped once it had
    // what it needed, or timed out) depends on when it fell.
    let sets = |what: &str,
                r: &BTreeSet<Call>,
                s: &BTreeSet<Call>,
                out: &mut Vec<String>,
                timing: &mut Vec<String>| {
        let only = |side: &str, calls: std::collections::btree_set::Difference<'_, Call>| {
            calls
                .map(|call| {
                    (
                        call.writes() || call.status.is_some(),
                        format!("{what}: only {side}: {call}"),
                    )
                })
                .collect::<Vec<_>>()
        };
        for (counted, line) in only("real", r.difference(s))
            .into_iter()
            .chain(only("sim", s.difference(r)))
        {
            if counted {
                out.push(line);
            } else {
                timing.push(line);
            }
        }
    };
    let cloud = |r: &Reduced| r.cloud_calls.iter().cloned().collect::<BTreeSet<_>>();
    sets(
        "cloud calls",
        &cloud(real),
        &cloud(sim),
        &mut out,
        &mut timing,
    );
    let cloud_writes = |r: &Reduced| instanceha_conformance::compare::writes(&r.cloud_calls);
    if cloud_writes(real) != cloud_writes(sim) {
        out.push(format!(
            "cloud writes: real {:?} / sim {:?}",
            show(&cloud_writes(real)),
            show(&cloud_writes(sim))
        ));
    }
    for (with_volume, kind) in [(true, "volume-backed"), (false, "image-backed")] {
        let what = format!("{kind} instance calls");
        sets(
            &what,
            &real.instance_call_set(with_volume),
            &sim.instance_call_set(with_volume),
            &mut out,
            &mut timing,
        );
        let (rw, sw) = (
            real.instance_writes(with_volume),
            sim.instance_writes(with_volume),
        );
        if rw != sw {
            out.push(format!(
                "{kind} instance writes: real {:?} / sim {:?}",
                rw.iter().map(|w| show(w)).collect::<Vec<_>>(),
                sw.iter().map(|w| show(w)).collect::<Vec<_>>()
            ));
        }
    }
    for (key, real_shape) in &real.shapes {
        let Some(sim_shape) = sim.shapes.get(key) else {
            continue;
        };
        let (endpoint, status) = key;
        for (path, difference) in shape_differences(real_shape, sim_shape) {
            let line = format!(
                "answer of {endpoint} -> {}: {path}: {difference:?}",
                status.map_or("none".to_owned(), |s| s.to_string())
            );
            match difference {
                FieldDifference::Nullable(..) => timing.push(line),
                _ => out.push(line),
            }
        }
    }
    (out, timing)
}

fn show(calls: &[instanceha_conformance::compare::Call]) -> Vec<String> {
    calls.iter().map(ToString::to_string).collect()
}
