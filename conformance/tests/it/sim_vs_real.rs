//! The simulator follows reality: one host failure (three instances, one
//! booted from a volume) recovered on the real stack and on openstack-sim,
//! each time through the same recording proxy between the engine and the
//! cloud (`instanceha_conformance::recorder`); then the engine's calls
//! (per instance and for the cloud, order-insensitive, writes in order)
//! and the shapes of the answers (every key path and its JSON types) are
//! compared. Every difference is either fixed in the simulator or listed
//! in [`STAYING`] with its reason (conformance/README.md has the table).

use std::collections::BTreeSet;
use std::time::Duration;

use instanceha_conformance::compare::{FieldDifference, Owners, Reduced, shape_differences};
use instanceha_conformance::recorder::{Exchange, Recorder};
use instanceha_conformance::system::{System, engine_settings};
use instanceha_conformance::workload::{assert_recovered, boot, restore};
use instanceha_engine::config::Settings as EngineSettings;
use instanceha_proto::v1 as pb;
use instanceha_testkit::cloud::{self, Cloud, SPEED};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_answers_the_engine_as_real_openstack_does() {
    let Some((stack, records, _guard)) =
        clean_stack("the_simulator_answers_the_engine_as_real_openstack_does").await
    else {
        return;
    };
    let computes = stack.computes();
    let failed = computes[0].clone();

    // Real Nova and Cinder.
    let instances = boot(&records, &stack, &failed, 3, 1, 0).await;
    let auth_url = stack.var("OS_AUTH_URL").to_owned();
    let (nova, cinder) = records.endpoints();
    let recorder = Recorder::start(&[
        ("keystone", &origin(&auth_url)),
        ("nova", &origin(nova)),
        ("cinder", &origin(cinder)),
    ])
    .await;
    let proxied = recorder.url(&auth_url);
    let mut system = System::start(&stack, |s| through(s, &proxied)).await;
    system.segment(&computes).await;
    stack.kill(&format!("nova-{failed}")).await;
    let n = system.host_fenced(&failed).await;
    let (n, vmoves) = system.terminal(&n.id, PATIENCE).await;
    assert_recovered(&records, &failed, &instances, &n, &vmoves).await;
    let real = recorder.exchanges();
    drop(system);
    let mut settings = engine_settings(&stack);
    through(&mut settings, &proxied);
    probe(&settings, &Owners::learn(&real)).await;
    let real_probes = recorder.exchanges()[real.len()..].to_vec();
    drop(recorder);
    restore(&records, &stack, &failed, &instances).await;

    // The simulator, the same cloud: three computes, three HA instances
    // on the first, the first booted from a volume.
    let mut builder = Scenario::builder().speed(SPEED).seed(7);
    for host in &computes {
        builder = builder.host(HostSpec::new(host));
    }
    for i in 0..3 {
        let mut spec = InstanceSpec::new(&format!("ha-{failed}-{i:02}"), &failed)
            .ha(true)
            .project("admin");
        if i == 0 {
            spec = spec.boot_from_volume();
        }
        builder = builder.instance(spec);
    }
    let sim = Sim::start(builder.build().unwrap(), "127.0.0.1:0".parse().unwrap())
        .await
        .expect("the simulator starts");
    let recorder = Recorder::start(&[("sim", &sim.base_url())]).await;
    let proxied = recorder.url(&sim.auth_url());
    let mut settings = cloud::engine_settings(&sim, loopback());
    through(&mut settings, &proxied);
    let mut cloud = Cloud::around(
        sim,
        |s| {
            through(s, &proxied);
            // The product's default, as on the real side.
            s.openstack.token_warmup_interval = Duration::from_secs(240);
        },
        |_| {},
    )
    .await;
    let hosts: Vec<(&str, bool)> = computes.iter().map(|h| (h.as_str(), false)).collect();
    cloud.segment(pb::RecoveryMethod::Auto, &hosts).await;
    let (n, _) = cloud.recover_host(&failed, Duration::from_secs(60)).await;
    assert_eq!(
        pb::NotificationStatus::try_from(n.status),
        Ok(pb::NotificationStatus::Finished),
        "{}",
        n.message
    );
    let simulated = recorder.exchanges();
    probe(&settings, &Owners::learn(&simulated)).await;
    let sim_probes = recorder.exchanges()[simulated.len()..].to_vec();
    drop(cloud);

    dump(
        &[real.as_slice(), &real_probes].concat(),
        &[simulated.as_slice(), &sim_probes].concat(),
    );
    let (mut real, mut simulated) = (Reduced::of(&real), Reduced::of(&simulated));
    real.add_shapes(&real_probes);
    simulated.add_shapes(&sim_probes);
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
        "the simulator differs from real OpenStack:\n{}",
        unexpected.join("\n")
    );
}

/// With `INSTANCEHA_SIM_VS_REAL_DUMP` set, both recordings in that
/// directory (`real.json`, `sim.json`), for reading.
fn dump(real: &[Exchange], sim: &[Exchange]) {
    let Some(dir) = std::env::var_os("INSTANCEHA_SIM_VS_REAL_DUMP") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, exchanges) in [("real.json", real), ("sim.json", sim)] {
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

/// Every difference, one line each; and apart, those of nullability alone
/// (one side showed null where the other never did), which depend on when
/// the engine's polls fell (an evacuation still `accepted`, with no
/// destination and never updated, is seen or not).
fn differences(real: &Reduced, sim: &Reduced) -> (Vec<String>, Vec<String>) {
    let mut out = Vec::new();
    let mut timing = Vec::new();
    let sets = |what: &str, r: &BTreeSet<_>, s: &BTreeSet<_>, out: &mut Vec<String>| {
        for call in r.difference(s) {
            out.push(format!("{what}: only real: {call}"));
        }
        for call in s.difference(r) {
            out.push(format!("{what}: only sim: {call}"));
        }
    };
    let cloud = |r: &Reduced| r.cloud_calls.iter().cloned().collect::<BTreeSet<_>>();
    sets("cloud calls", &cloud(real), &cloud(sim), &mut out);
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
