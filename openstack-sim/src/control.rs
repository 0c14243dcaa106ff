//! The control API under `/sim/`: load or reset the scenario, power hosts, kill and start a
//! host's nova-compute, stop the message bus for a while, inject failures and faults, revoke or expire tokens, move the clock, and read the world, the request log and
//! evacuation statistics. No authentication.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::Response;
use axum::routing::{delete, get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::envelope::json_response;
use crate::faults::FaultRule;
use crate::scenario::{MessageBusOutage, Scenario};
use crate::server::{Shared, query_pairs};
use crate::world::model::EvacuationFailure;

pub(crate) fn routes(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/sim/state", get(state))
        .route("/sim/scenario", get(scenario).post(load_scenario))
        .route("/sim/reset", post(reset))
        .route("/sim/hosts/{host}/power-off", post(power_off))
        .route("/sim/hosts/{host}/power-on", post(power_on))
        .route("/sim/hosts/{host}/compute/kill", post(kill_compute))
        .route("/sim/hosts/{host}/compute/start", post(start_compute))
        .route("/sim/message-bus/outage", post(message_bus_outage))
        .route(
            "/sim/instances/{instance_id}/evacuation-failure",
            post(evacuation_failure),
        )
        .route(
            "/sim/faults",
            get(list_faults).post(add_fault).delete(clear_faults),
        )
        .route("/sim/faults/{id}", delete(delete_fault))
        .route("/sim/tokens/revoke", post(revoke_tokens))
        .route("/sim/tokens/expire", post(expire_tokens))
        .route("/sim/requests", get(requests).delete(clear_requests))
        .route("/sim/stats", get(stats))
        .route("/sim/clock", get(clock))
        .route("/sim/clock/advance", post(advance))
        .route("/sim/credentials", get(credentials))
        .with_state(shared)
}

fn problem(status: u16, message: &str) -> Response<Body> {
    json_response(status, &json!({"error": message}))
}

fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, String> {
    let text = if body.is_empty() {
        b"{}".as_slice()
    } else {
        body
    };
    serde_json::from_slice(text).map_err(|e| format!("invalid body: {e}"))
}

async fn state(State(shared): State<Arc<Shared>>) -> Response<Body> {
    let snapshot = shared.world.lock().snapshot();
    json_response(200, &serde_json::to_value(snapshot).unwrap_or(Value::Null))
}

async fn scenario(State(shared): State<Arc<Shared>>) -> Response<Body> {
    let scenario = shared.scenario.lock().clone();
    json_response(200, &serde_json::to_value(scenario).unwrap_or(Value::Null))
}

async fn load_scenario(State(shared): State<Arc<Shared>>, body: Bytes) -> Response<Body> {
    let scenario = match Scenario::from_json_str(&String::from_utf8_lossy(&body)) {
        Ok(s) => s,
        Err(e) => return problem(400, &e.to_string()),
    };
    match crate::load(&shared, scenario) {
        Ok(()) => json_response(200, &json!({"loaded": true})),
        Err(e) => problem(400, &e.to_string()),
    }
}

async fn reset(State(shared): State<Arc<Shared>>) -> Response<Body> {
    let scenario = shared.scenario.lock().clone();
    match crate::load(&shared, scenario) {
        Ok(()) => json_response(200, &json!({"loaded": true})),
        Err(e) => problem(400, &e.to_string()),
    }
}

async fn power_off(State(shared): State<Arc<Shared>>, Path(host): Path<String>) -> Response<Body> {
    match shared.world.lock().power_off(&host) {
        Ok(()) => json_response(200, &json!({"host": host, "powered_on": false})),
        Err(e) => problem(404, &e.to_string()),
    }
}

async fn power_on(State(shared): State<Arc<Shared>>, Path(host): Path<String>) -> Response<Body> {
    match shared.world.lock().power_on(&host) {
        Ok(()) => json_response(200, &json!({"host": host, "powered_on": true})),
        Err(e) => problem(404, &e.to_string()),
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct KillBody {
    /// Start it again after this many simulated seconds; absent: stays down.
    restart_after_secs: Option<f64>,
}

async fn kill_compute(
    State(shared): State<Arc<Shared>>,
    Path(host): Path<String>,
    body: Bytes,
) -> Response<Body> {
    let body: KillBody = match parse(&body) {
        Ok(b) => b,
        Err(e) => return problem(400, &e),
    };
    match shared
        .world
        .lock()
        .kill_compute(&host, body.restart_after_secs)
    {
        Ok(()) => json_response(
            200,
            &json!({"host": host, "compute": "killed", "restart_after_secs": body.restart_after_secs}),
        ),
        Err(e) => problem(e.status(), &e.to_string()),
    }
}

async fn start_compute(
    State(shared): State<Arc<Shared>>,
    Path(host): Path<String>,
) -> Response<Body> {
    match shared.world.lock().start_compute(&host) {
        Ok(()) => json_response(200, &json!({"host": host, "compute": "started"})),
        Err(e) => problem(e.status(), &e.to_string()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OutageBody {
    for_secs: f64,
    /// Opens this many simulated seconds from now; absent: at the next evacuate request.
    in_secs: Option<f64>,
    conductor_error_after_secs: Option<f64>,
}

async fn message_bus_outage(State(shared): State<Arc<Shared>>, body: Bytes) -> Response<Body> {
    let body: OutageBody = match parse(&body) {
        Ok(b) => b,
        Err(e) => return problem(400, &e),
    };
    let mut world = shared.world.lock();
    let now = world.tick().as_secs_f64();
    let mut outage = MessageBusOutage::from_next_evacuation(body.for_secs);
    if let Some(secs) = body.in_secs {
        outage = outage.at(now + secs);
    }
    if let Some(secs) = body.conductor_error_after_secs {
        outage = outage.conductor_error_after(secs);
    }
    match world.message_bus_outage(outage.clone()) {
        Ok(()) => json_response(201, &serde_json::to_value(&outage).unwrap_or(Value::Null)),
        Err(e) => problem(e.status(), &e.to_string()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FailureBody {
    mode: Option<EvacuationFailure>,
}

async fn evacuation_failure(
    State(shared): State<Arc<Shared>>,
    Path(instance_id): Path<String>,
    body: Bytes,
) -> Response<Body> {
    let body: FailureBody = match parse(&body) {
        Ok(b) => b,
        Err(e) => return problem(400, &e),
    };
    match shared
        .world
        .lock()
        .set_evacuation_failure(&instance_id, body.mode)
    {
        Ok(()) => json_response(200, &json!({"instance_id": instance_id, "mode": body.mode})),
        Err(e) => problem(404, &e.to_string()),
    }
}

async fn list_faults(State(shared): State<Arc<Shared>>) -> Response<Body> {
    let now = shared.sim_now();
    let faults = shared.faults.lock().list(now);
    json_response(200, &json!({"faults": faults}))
}

async fn add_fault(State(shared): State<Arc<Shared>>, body: Bytes) -> Response<Body> {
    let rule: FaultRule = match parse(&body) {
        Ok(r) => r,
        Err(e) => return problem(400, &e),
    };
    let now = shared.sim_now();
    match shared.faults.lock().add(rule, now) {
        Ok(id) => json_response(201, &json!({"id": id})),
        Err(e) => problem(400, &e.to_string()),
    }
}

async fn clear_faults(State(shared): State<Arc<Shared>>) -> Response<Body> {
    shared.faults.lock().clear();
    json_response(200, &json!({"cleared": true}))
}

async fn delete_fault(State(shared): State<Arc<Shared>>, Path(id): Path<u64>) -> Response<Body> {
    if shared.faults.lock().remove(id) {
        json_response(200, &json!({"deleted": id}))
    } else {
        problem(404, &format!("fault {id} not found"))
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct TokenBody {
    token: Option<String>,
    #[serde(default)]
    in_secs: f64,
}

async fn revoke_tokens(State(shared): State<Arc<Shared>>, body: Bytes) -> Response<Body> {
    let body: TokenBody = match parse(&body) {
        Ok(b) => b,
        Err(e) => return problem(400, &e),
    };
    let mut world = shared.world.lock();
    let revoked = match &body.token {
        Some(t) => usize::from(world.identity.revoke(t)),
        None => world.identity.revoke_all(),
    };
    json_response(200, &json!({"revoked": revoked}))
}

async fn expire_tokens(State(shared): State<Arc<Shared>>, body: Bytes) -> Response<Body> {
    let body: TokenBody = match parse(&body) {
        Ok(b) => b,
        Err(e) => return problem(400, &e),
    };
    let expired = shared
        .world
        .lock()
        .identity
        .expire(body.token.as_deref(), body.in_secs);
    json_response(200, &json!({"expired": expired}))
}

async fn requests(State(shared): State<Arc<Shared>>, RawQuery(query): RawQuery) -> Response<Body> {
    let pairs = query_pairs(query.as_deref());
    let since = match pairs
        .iter()
        .find(|(k, _)| k == "since")
        .map(|(_, v)| v.parse::<u64>())
    {
        None => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => return problem(400, "since must be an integer"),
    };
    let log = shared.log.lock();
    json_response(
        200,
        &json!({"requests": log.since(since), "last_seq": log.last_seq()}),
    )
}

async fn clear_requests(State(shared): State<Arc<Shared>>) -> Response<Body> {
    shared.log.lock().clear();
    json_response(200, &json!({"cleared": true}))
}

async fn stats(State(shared): State<Arc<Shared>>) -> Response<Body> {
    let stats = shared.world.lock().stats();
    json_response(200, &serde_json::to_value(stats).unwrap_or(Value::Null))
}

async fn clock(State(shared): State<Arc<Shared>>) -> Response<Body> {
    let world = shared.world.lock();
    let now = world.clock.now();
    json_response(
        200,
        &json!({"sim_time": now.as_secs_f64(), "speed": world.clock.speed(), "wall_time": world.clock.wall(now)}),
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AdvanceBody {
    secs: f64,
}

async fn advance(State(shared): State<Arc<Shared>>, body: Bytes) -> Response<Body> {
    let body: AdvanceBody = match parse(&body) {
        Ok(b) => b,
        Err(e) => return problem(400, &e),
    };
    if !(body.secs >= 0.0 && body.secs.is_finite()) {
        return problem(400, "secs must be zero or more");
    }
    let now = shared.world.lock().advance(body.secs);
    json_response(200, &json!({"sim_time": now.as_secs_f64()}))
}

async fn credentials(State(shared): State<Arc<Shared>>) -> Response<Body> {
    let scenario = shared.scenario.lock().clone();
    let users: Vec<Value> = scenario
        .expand()
        .map(|ex| {
            ex.users
                .iter()
                .map(|u| json!({"name": u.name, "password": u.password, "domain": u.domain, "project": u.project, "roles": u.roles}))
                .collect()
        })
        .unwrap_or_default();
    let apps: Vec<Value> = shared
        .world
        .lock()
        .identity
        .application_credentials
        .iter()
        .map(|a| json!({"id": a.id, "name": a.name, "secret": a.secret}))
        .collect();
    json_response(
        200,
        &json!({"auth_url": format!("{}/identity/v3", shared.base_url), "users": users, "application_credentials": apps}),
    )
}
