//! The simulated cloud on Tokio's paused clock: at speed 1, with Nova's
//! real timings (a 60 s `service_down_time`, rebuilds of half a minute), a
//! test waits simulated minutes in no real time, because the simulator's
//! clock is Tokio's.

use std::time::Duration;

use instanceha_testkit::eventually;
use openstack_sim::Scenario;
use openstack_sim::scenario::{HostSpec, InstanceSpec, Settings};
use reqwest::Method;
use serde_json::json;

use crate::helpers::start;

fn real_timings() -> Scenario {
    let settings = Settings {
        speed: 1.0,
        seed: 11,
        ..Settings::default()
    };
    Scenario::builder()
        .settings(settings)
        .host(HostSpec::new("compute-01"))
        .host(HostSpec::new("compute-02"))
        .instance(InstanceSpec::new("web-1", "compute-01").ha(true))
        .build()
        .expect("a valid scenario")
}

#[tokio::test(start_paused = true)]
async fn minutes_of_simulated_nova_pass_in_no_real_time() {
    let real = std::time::Instant::now();
    let h = start(real_timings()).await;
    let admin = h.admin().await;
    h.sim.power_off("compute-01").unwrap();
    let state =
        |h: &crate::helpers::Harness| h.sim.snapshot().host("compute-01").unwrap().host.clone();
    let service = || async {
        h.nova(
            &admin,
            "2.53",
            Method::GET,
            "/os-services?binary=nova-compute&host=compute-01",
            None,
        )
        .await
        .body["services"][0]["state"]
            .clone()
    };
    // Nova still believes the host up for `service_down_time` after its
    // last heartbeat.
    assert_eq!(service().await, "up", "{:?}", state(&h));
    // sleep: 75 s of paused time, past Nova's `service_down_time`.
    tokio::time::sleep(Duration::from_secs(75)).await;
    assert_eq!(service().await, "down");

    // An evacuation runs its whole simulated course: rebuilt on compute-02.
    let id = h.id_of("web-1");
    let a = h.evacuate(&admin, "2.29", &id, json!({})).await;
    assert_eq!(a.status, 200, "{}", a.text);
    let asked = tokio::time::Instant::now();
    eventually(
        "the server rebuilt on compute-02",
        Duration::from_secs(600),
        Duration::from_secs(1),
        || async {
            let server = h.server(&admin, "2.29", &id).await;
            if server["OS-EXT-SRV-ATTR:host"] == "compute-02"
                && server["OS-EXT-STS:task_state"].is_null()
            {
                Ok(())
            } else {
                Err(server)
            }
        },
    )
    .await;
    let waited = asked.elapsed();
    assert!(waited >= Duration::from_secs(5), "rebuilt in {waited:?}");
    assert!(h.sim.sim_time() >= 80.0, "{} s simulated", h.sim.sim_time());
    assert!(
        real.elapsed() < Duration::from_secs(20),
        "{:?} of real time for {} simulated seconds",
        real.elapsed(),
        h.sim.sim_time()
    );
}
