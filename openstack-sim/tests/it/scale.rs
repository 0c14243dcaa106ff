//! Scale: 100 hosts × 50 servers, paged listing and many concurrent requests, and a whole-host
//! evacuation at high speed.

use std::time::{Duration, Instant};

use instanceha_testkit::eventually;
use openstack_sim::Scenario;
use openstack_sim::scenario::{HostGroupSpec, InstanceGroupSpec, Settings};
use reqwest::Method;
use serde_json::json;

use crate::helpers::{Harness, start};

/// 100 hosts of 50 servers, a fifth of them booted from volume.
fn five_thousand_servers() -> Scenario {
    let settings = Settings {
        speed: 1000.0,
        seed: 3,
        ..Settings::default()
    };
    Scenario::builder()
        .settings(settings)
        .host_group(HostGroupSpec {
            count: 100,
            width: 3,
            vcpus: 256,
            ram_mb: 1_048_576,
            ..HostGroupSpec::default()
        })
        .instance_group(InstanceGroupSpec {
            host: "compute-*".into(),
            count: 50,
            boot_from_volume_fraction: 0.2,
            ..InstanceGroupSpec::default()
        })
        .build()
        .unwrap()
}

/// Every server, listed page by page through `servers_links`; how long it
/// took.
async fn list_every_page(h: &Harness, admin: &str) -> Duration {
    let started = Instant::now();
    let mut path = "/servers/detail?all_tenants=1&limit=1000".to_string();
    let mut total = 0;
    loop {
        let a = h.nova(admin, "2.73", Method::GET, &path, None).await;
        assert_eq!(a.status, 200);
        total += a.body["servers"].as_array().unwrap().len();
        match a.body["servers_links"][0]["href"].as_str() {
            Some(href) => path = href.split("/compute/v2.1").nth(1).unwrap().to_string(),
            None => break,
        }
    }
    assert_eq!(total, 5000);
    let listing = started.elapsed();
    assert!(
        listing < Duration::from_secs(20),
        "listing took {listing:?}"
    );
    listing
}

/// 300 listings of one host's servers at once; how long they took.
async fn concurrent_host_listings(h: &Harness, admin: &str) -> Duration {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..300 {
        let client = h.client.clone();
        let url = h.url(&format!(
            "/compute/v2.1/servers/detail?all_tenants=1&host=compute-{:03}",
            i % 100 + 1
        ));
        let token = admin.to_owned();
        tasks.push(tokio::spawn(async move {
            let resp = client
                .get(url)
                .header("X-Auth-Token", token)
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            let body: serde_json::Value = resp.json().await.unwrap();
            (status, body["servers"].as_array().map_or(0, Vec::len))
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), (200, 50));
    }
    let burst = started.elapsed();
    assert!(
        burst < Duration::from_secs(30),
        "300 concurrent host listings took {burst:?}"
    );
    burst
}

/// A whole host evacuated at 1000x, every evacuation done.
async fn evacuate_a_whole_host(h: &Harness, admin: &str) {
    h.fail_host(admin, "compute-042").await;
    let snapshot = h.sim.snapshot();
    let ids: Vec<String> = snapshot
        .instances_on("compute-042")
        .iter()
        .map(|i| i.id.clone())
        .collect();
    for id in &ids {
        let a = h.evacuate(admin, "2.53", id, json!({})).await;
        assert_eq!(a.status, 200, "{}", a.text);
    }
    eventually(
        "every evacuation done",
        Duration::from_secs(10),
        Duration::from_millis(5),
        || async {
            let s = h.sim.snapshot();
            s.evacuations.len() == 50
                && s.evacuations
                    .iter()
                    .all(|e| e.phase == openstack_sim::EvacuationPhase::Done)
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_servers_serve_paged_and_concurrent_requests() {
    let scenario = five_thousand_servers();
    let built = Instant::now();
    let h = start(scenario).await;
    assert!(
        built.elapsed() < Duration::from_secs(10),
        "built in {:?}",
        built.elapsed()
    );
    let admin = h.admin().await;
    assert_eq!(h.sim.snapshot().instances.len(), 5000);

    let listing = list_every_page(&h, &admin).await;
    let burst = concurrent_host_listings(&h, &admin).await;
    evacuate_a_whole_host(&h, &admin).await;
    let stats = h.sim.stats();
    assert_eq!(stats.done, 50);
    assert!(stats.ideal_makespan.unwrap() <= stats.makespan.unwrap() + 1e-6);
    println!(
        "scale: listing 5000 in {listing:?}, 300 concurrent listings in {burst:?}, makespan {:.1}s (ideal {:.1}s)",
        stats.makespan.unwrap(),
        stats.ideal_makespan.unwrap()
    );
}
