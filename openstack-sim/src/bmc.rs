//! A Redfish BMC per simulated host, tied to the host's power: `GET
//! /redfish/v1/Systems/{host}` reads its `PowerState`, and
//! `ComputerSystem.Reset` powers it off (`ForceOff`, `GracefulShutdown`,
//! `PushPowerButton` when on) or on (`On`, `ForceOn`), exactly as the
//! control API's power-off and power-on do. Enough of Redfish for a
//! fencing agent: the service root, the systems collection, a system and
//! its reset action. No authentication (any credentials are accepted).

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::Response;
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::envelope::json_response;
use crate::server::Shared;

pub(crate) fn routes(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/redfish/v1", get(service_root))
        .route("/redfish/v1/", get(service_root))
        .route("/redfish/v1/Systems", get(systems))
        .route("/redfish/v1/Systems/{host}", get(system))
        .route(
            "/redfish/v1/Systems/{host}/Actions/ComputerSystem.Reset",
            post(reset),
        )
        .with_state(shared)
}

fn error(status: u16, message: &str) -> Response<Body> {
    json_response(
        status,
        &json!({"error": {"code": "Base.1.0.GeneralError", "message": message}}),
    )
}

async fn service_root() -> Response<Body> {
    json_response(
        200,
        &json!({
            "@odata.id": "/redfish/v1",
            "@odata.type": "#ServiceRoot.v1_5_0.ServiceRoot",
            "Id": "RootService",
            "Name": "openstack-sim BMCs",
            "RedfishVersion": "1.6.0",
            "Systems": {"@odata.id": "/redfish/v1/Systems"},
        }),
    )
}

async fn systems(State(shared): State<Arc<Shared>>) -> Response<Body> {
    let members: Vec<Value> = shared
        .world
        .lock()
        .hosts
        .iter()
        .map(|h| json!({"@odata.id": format!("/redfish/v1/Systems/{}", h.name)}))
        .collect();
    json_response(
        200,
        &json!({
            "@odata.id": "/redfish/v1/Systems",
            "@odata.type": "#ComputerSystemCollection.ComputerSystemCollection",
            "Name": "Computer System Collection",
            "Members@odata.count": members.len(),
            "Members": members,
        }),
    )
}

async fn system(State(shared): State<Arc<Shared>>, Path(host): Path<String>) -> Response<Body> {
    let world = shared.world.lock();
    let Some(found) = world.hosts.iter().find(|h| h.name == host) else {
        return error(404, &format!("no system {host}"));
    };
    let path = format!("/redfish/v1/Systems/{host}");
    json_response(
        200,
        &json!({
            "@odata.id": path,
            "@odata.type": "#ComputerSystem.v1_10_0.ComputerSystem",
            "Id": host,
            "Name": host,
            "HostName": host,
            "PowerState": if found.powered_on { "On" } else { "Off" },
            "Actions": {"#ComputerSystem.Reset": {
                "target": format!("{path}/Actions/ComputerSystem.Reset"),
                "ResetType@Redfish.AllowableValues": ["On", "ForceOn", "ForceOff", "GracefulShutdown", "PushPowerButton"],
            }},
        }),
    )
}

async fn reset(
    State(shared): State<Arc<Shared>>,
    Path(host): Path<String>,
    body: Bytes,
) -> Response<Body> {
    let kind = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("ResetType")?.as_str().map(str::to_owned));
    let mut world = shared.world.lock();
    let Some(on) = world
        .hosts
        .iter()
        .find(|h| h.name == host)
        .map(|h| h.powered_on)
    else {
        return error(404, &format!("no system {host}"));
    };
    let result = match kind.as_deref() {
        Some("ForceOff" | "GracefulShutdown") => world.power_off(&host),
        Some("On" | "ForceOn") => world.power_on(&host),
        Some("PushPowerButton") if on => world.power_off(&host),
        Some("PushPowerButton") => world.power_on(&host),
        Some(other) => return error(400, &format!("ResetType {other} is not supported")),
        None => return error(400, "the body needs a ResetType"),
    };
    match result {
        Ok(()) => {
            tracing::info!(host = %host, reset = ?kind, "bmc reset");
            Response::builder()
                .status(204)
                .body(Body::empty())
                .unwrap_or_default()
        }
        Err(e) => error(500, &e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use crate::Sim;
    use crate::scenario::{HostSpec, Scenario};

    #[tokio::test]
    async fn a_host_bmc_powers_the_simulated_host() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let scenario = Scenario::builder()
            .host(HostSpec::new("compute-01"))
            .host(HostSpec::new("compute-02"))
            .build()
            .unwrap();
        let sim = Sim::start(scenario, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let url = format!("{}/redfish/v1/Systems", sim.base_url());
        let http = reqwest::Client::new();
        let list: serde_json::Value = http.get(&url).send().await.unwrap().json().await.unwrap();
        assert_eq!(list["Members@odata.count"], 2);
        let state = |v: serde_json::Value| v["PowerState"].as_str().unwrap().to_owned();
        let system = format!("{url}/compute-01");
        let v = http
            .get(&system)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(state(v), "On");
        let r = http
            .post(format!("{system}/Actions/ComputerSystem.Reset"))
            .json(&serde_json::json!({"ResetType": "ForceOff"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204);
        let v = http
            .get(&system)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(state(v), "Off");
        assert!(
            !sim.snapshot()
                .hosts
                .iter()
                .find(|h| h.host.name == "compute-01")
                .unwrap()
                .host
                .powered_on
        );
        let r = http
            .post(format!("{system}/Actions/ComputerSystem.Reset"))
            .json(&serde_json::json!({"ResetType": "Nmi"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
    }
}
