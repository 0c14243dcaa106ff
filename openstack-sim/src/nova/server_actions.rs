//! Nova server actions (`evacuate` with its per-microversion schemas, `lock`, `unlock`,
//! `os-stop`, `os-start`, `os-resetState`), a server's volume attachments and instance actions,
//! and `os-server-external-events`.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Extension, Path, RawQuery, State};
use axum::http::Response;
use serde_json::{Map, Value, json};

use super::servers::host_id;
use super::{
    NovaCtx, error, forbidden, iso_micro, next_link, parse_body, parse_limit, schema_bool,
    world_error,
};
use crate::envelope::{empty_json_response, json_response};
use crate::server::{Shared, query_pairs};
use crate::world;
use crate::world::evacuation::EvacuateRequest;
use crate::world::model::{InstanceAction, VmState};

fn additional_properties(
    field: &str,
    body: &Map<String, Value>,
    allowed: &[&str],
) -> Result<(), world::Error> {
    if let Some(extra) = body.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(world::Error::BadRequest(format!(
            "Invalid input for field/attribute {field}. Value: {}. Additional properties are not allowed ('{extra}' was unexpected)",
            Value::Object(body.clone())
        )));
    }
    Ok(())
}

/// Validates an evacuate body for the microversion (`additionalProperties: false`).
fn evacuate_request(
    ctx: &NovaCtx,
    value: &Value,
    enable_password: bool,
) -> Result<(EvacuateRequest, bool), world::Error> {
    let Some(body) = value.as_object() else {
        return Err(world::Error::BadRequest(format!(
            "Invalid input for field/attribute evacuate. Value: {value}. {value} is not of type 'object'"
        )));
    };
    let v = ctx.version;
    let allowed: &[&str] = if !v.at_least(14) {
        &["host", "onSharedStorage", "adminPass"]
    } else if v.at_least(29) && !v.at_least(68) {
        &["host", "adminPass", "force"]
    } else {
        &["host", "adminPass"]
    };
    additional_properties("evacuate", body, allowed)?;
    let host = match body.get("host") {
        None => None,
        Some(Value::Null) if v.at_least(14) => None,
        Some(Value::String(h))
            if !h.is_empty()
                && h.len() <= 255
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)) =>
        {
            Some(h.clone())
        }
        Some(other) => {
            return Err(world::Error::BadRequest(format!(
                "Invalid input for field/attribute host. Value: {other}. {other} does not match '^[a-zA-Z0-9-._]*$'"
            )));
        }
    };
    let admin_pass = match body.get("adminPass") {
        None => None,
        Some(Value::String(p)) => Some(p.clone()),
        Some(other) => {
            return Err(world::Error::BadRequest(format!(
                "Invalid input for field/attribute adminPass. Value: {other}. {other} is not of type 'string'"
            )));
        }
    };
    let mut force = false;
    if !v.at_least(14) {
        let Some(shared_storage) = body.get("onSharedStorage") else {
            return Err(world::Error::BadRequest("Invalid input for field/attribute evacuate. Value: {}. 'onSharedStorage' is a required property".into()));
        };
        let Some(on_shared) = schema_bool(shared_storage) else {
            return Err(world::Error::BadRequest(format!(
                "Invalid input for field/attribute onSharedStorage. Value: {shared_storage}. {shared_storage} is not of type 'boolean', 'string'"
            )));
        };
        if on_shared && admin_pass.is_some() {
            return Err(world::Error::BadRequest(
                "admin password can't be changed on existing disk".into(),
            ));
        }
        // before 2.29 a named host bypasses the scheduler
        force = host.is_some();
    } else if v.at_least(29) && !v.at_least(68) {
        if let Some(f) = body.get("force") {
            force = schema_bool(f).ok_or_else(|| {
                world::Error::BadRequest(format!("Invalid input for field/attribute force. Value: {f}. {f} is not of type 'boolean', 'string'"))
            })?;
        }
        if force && host.is_none() {
            return Err(world::Error::BadRequest(
                "Forced evacuation requires a target host to be specified".into(),
            ));
        }
    }
    let report_password = !v.at_least(14) && enable_password;
    Ok((
        EvacuateRequest {
            host,
            force,
            admin_pass,
            stop_unless_error: v.at_least(95),
        },
        report_password,
    ))
}

fn lock_reason(ctx: &NovaCtx, value: &Value) -> Result<Option<String>, world::Error> {
    if !ctx.at_least(73) {
        return Ok(None);
    }
    match value {
        Value::Null => Ok(None),
        Value::Object(body) => {
            additional_properties("lock", body, &["locked_reason"])?;
            match body.get("locked_reason") {
                None => Ok(None),
                Some(Value::String(r)) if !r.is_empty() && r.chars().count() <= 255 => {
                    Ok(Some(r.clone()))
                }
                Some(other) => Err(world::Error::BadRequest(format!(
                    "Invalid input for field/attribute locked_reason. Value: {other}. It must be a string of 1 to 255 characters"
                ))),
            }
        }
        other => Err(world::Error::BadRequest(format!(
            "Invalid input for field/attribute lock. Value: {other}. {other} is not of type 'object', 'null'"
        ))),
    }
}

pub(crate) async fn action(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    Path(server_id): Path<String>,
    body: Bytes,
) -> Response<Body> {
    let body = match parse_body(&body) {
        Ok(b) => b,
        Err(e) => return world_error(e),
    };
    let Some((name, value)) = body.as_object().and_then(|o| o.iter().next()) else {
        return error(400, "Malformed request body");
    };
    let caller = &ctx.caller;
    match name.as_str() {
        "evacuate" => {
            let enable_password = shared.world.lock().settings.enable_instance_password;
            let (request, report_password) = match evacuate_request(&ctx, value, enable_password) {
                Ok(r) => r,
                Err(e) => return world_error(e),
            };
            let mut world = shared.world.lock();
            if let Err(e) = world.visible_instance(caller, &server_id) {
                return world_error(e);
            }
            if !caller.is_admin {
                return forbidden("os_compute_api:os-evacuate");
            }
            match world.evacuate(caller, &server_id, request, &ctx.request_id) {
                Ok(password) if report_password => {
                    json_response(200, &json!({"adminPass": password}))
                }
                Ok(_) => empty_json_response(200),
                Err(e) => world_error(e),
            }
        }
        "lock" => {
            let reason = match lock_reason(&ctx, value) {
                Ok(r) => r,
                Err(e) => return world_error(e),
            };
            let mut world = shared.world.lock();
            match world.lock(caller, &server_id, reason, &ctx.request_id) {
                Ok(()) => empty_json_response(202),
                Err(e) => world_error(e),
            }
        }
        "unlock" => match shared
            .world
            .lock()
            .unlock(caller, &server_id, &ctx.request_id)
        {
            Ok(()) => empty_json_response(202),
            Err(e) => world_error(e),
        },
        "os-stop" | "os-start" => {
            let stop = name == "os-stop";
            match shared
                .world
                .lock()
                .power_action(caller, &server_id, stop, &ctx.request_id)
            {
                Ok(()) => empty_json_response(202),
                Err(e) => world_error(e),
            }
        }
        "os-resetState" => {
            let state = value.get("state").and_then(Value::as_str);
            let extra = value
                .as_object()
                .is_some_and(|o| o.keys().any(|k| k != "state"));
            let vm_state = match state {
                Some("active") if !extra => VmState::Active,
                Some("error") if !extra => VmState::Error,
                _ => {
                    return error(
                        400,
                        &format!(
                            "Invalid input for field/attribute os-resetState. Value: {value}. 'state' must be one of ['active', 'error']"
                        ),
                    );
                }
            };
            let mut world = shared.world.lock();
            if let Err(e) = world.visible_instance(caller, &server_id) {
                return world_error(e);
            }
            if !caller.is_admin {
                return forbidden("os_compute_api:os-admin-actions:reset_state");
            }
            match world.reset_state(&server_id, vm_state) {
                Ok(()) => empty_json_response(202),
                Err(e) => world_error(e),
            }
        }
        other => error(400, &format!("There is no such action: {other}")),
    }
}

pub(crate) async fn volume_attachments(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    Path(server_id): Path<String>,
) -> Response<Body> {
    let world = shared.world.lock();
    match world.visible_instance(&ctx.caller, &server_id) {
        Ok(inst) => {
            let items: Vec<Value> = inst
                .bdms
                .iter()
                .map(|b| attachment_view(&ctx, &server_id, b))
                .collect();
            json_response(200, &json!({"volumeAttachments": items}))
        }
        Err(e) => world_error(e),
    }
}

pub(crate) async fn volume_attachment(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    Path((server_id, volume_id)): Path<(String, String)>,
) -> Response<Body> {
    let world = shared.world.lock();
    match world.visible_instance(&ctx.caller, &server_id) {
        Ok(inst) => match inst.bdms.iter().find(|b| b.volume_id == volume_id) {
            Some(b) => json_response(
                200,
                &json!({"volumeAttachment": attachment_view(&ctx, &server_id, b)}),
            ),
            None => error(
                404,
                &format!("Volume {volume_id} is not attached to the instance {server_id}"),
            ),
        },
        Err(e) => world_error(e),
    }
}

fn attachment_view(
    ctx: &NovaCtx,
    server_id: &str,
    b: &crate::world::model::BlockDeviceMapping,
) -> Value {
    let mut v = json!({"volumeId": b.volume_id, "serverId": server_id, "device": b.device});
    if !ctx.at_least(89) {
        v["id"] = json!(b.volume_id);
    }
    if ctx.at_least(70) {
        v["tag"] = Value::Null;
    }
    if ctx.at_least(79) {
        v["delete_on_termination"] = json!(b.delete_on_termination);
    }
    if ctx.at_least(89) {
        v["attachment_id"] = json!(b.attachment_id);
        v["bdm_uuid"] = json!(b.uuid);
    }
    v
}

fn action_view(ctx: &NovaCtx, a: &crate::world::model::InstanceAction) -> Value {
    let mut v = json!({
        "action": a.action,
        "instance_uuid": a.instance_uuid,
        "request_id": a.request_id,
        "user_id": a.user_id,
        "project_id": a.project_id,
        "start_time": iso_micro(&a.start_time),
        "message": a.message,
    });
    if ctx.at_least(58) {
        v["updated_at"] = json!(iso_micro(&a.updated_at));
    }
    v
}

pub(crate) async fn instance_actions(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    Path(server_id): Path<String>,
    RawQuery(query): RawQuery,
) -> Response<Body> {
    let mut world = shared.world.lock();
    world.tick();
    if let Err(e) = world.visible_instance(&ctx.caller, &server_id) {
        return world_error(e);
    }
    let newest_first: Vec<&InstanceAction> = world
        .actions
        .get(&server_id)
        .map(|list| list.iter().rev().collect())
        .unwrap_or_default();
    if !ctx.at_least(58) {
        let actions: Vec<Value> = newest_first.iter().map(|a| action_view(&ctx, a)).collect();
        return json_response(200, &json!({"instanceActions": actions}));
    }
    // 2.58: limit and marker (a request id)
    let pairs = query_pairs(query.as_deref());
    let get = |key: &str| {
        pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let limit = match parse_limit(get("limit"), world.settings.max_limit) {
        Ok(n) => n,
        Err(e) => return world_error(e),
    };
    let start = match get("marker") {
        None => 0,
        Some(marker) => match newest_first.iter().position(|a| a.request_id == marker) {
            Some(pos) => pos + 1,
            None => return error(400, &format!("Marker {marker} could not be found.")),
        },
    };
    let page: Vec<&InstanceAction> = newest_first[start..].iter().take(limit).copied().collect();
    let mut body =
        json!({"instanceActions": page.iter().map(|a| action_view(&ctx, a)).collect::<Vec<_>>()});
    if limit > 0 && page.len() == limit {
        let href = next_link(
            &format!("{}/servers/{server_id}/os-instance-actions", ctx.endpoint),
            &pairs,
            &page[limit - 1].request_id,
        );
        body["links"] = json!([{"rel": "next", "href": href}]);
    }
    json_response(200, &body)
}

pub(crate) async fn instance_action(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    Path((server_id, request_id)): Path<(String, String)>,
) -> Response<Body> {
    let mut world = shared.world.lock();
    world.tick();
    if let Err(e) = world.visible_instance(&ctx.caller, &server_id) {
        return world_error(e);
    }
    let Some(action) = world
        .actions
        .get(&server_id)
        .and_then(|list| list.iter().find(|a| a.request_id == request_id))
    else {
        return error(
            404,
            &format!("Action for request_id {request_id} on instance {server_id} not found"),
        );
    };
    let mut v = action_view(&ctx, action);
    if ctx.caller.is_admin {
        // Newest first, as Nova orders them (by creation, descending).
        let events: Vec<Value> = action
            .events
            .iter()
            .rev()
            .map(|e| {
                let mut ev = json!({
                    "event": e.event,
                    "start_time": iso_micro(&e.start_time),
                    "finish_time": e.finish_time.as_ref().map(iso_micro),
                    "result": e.result,
                    "traceback": e.traceback,
                });
                if ctx.at_least(62) {
                    ev["host"] = json!(e.host);
                    ev["hostId"] = json!(host_id(&action.project_id, e.host.as_deref()));
                }
                if ctx.at_least(84) {
                    ev["details"] = json!(e.details);
                }
                ev
            })
            .collect();
        v["events"] = json!(events);
    }
    json_response(200, &json!({"instanceAction": v}))
}

const EVENT_NAMES: &[(&str, u32)] = &[
    ("network-changed", 0),
    ("network-vif-plugged", 0),
    ("network-vif-unplugged", 0),
    ("network-vif-deleted", 0),
    ("volume-extended", 51),
    ("power-update", 76),
    ("accelerator-request-bound", 82),
    ("volume-reimaged", 93),
];

pub(crate) async fn external_events(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    body: Bytes,
) -> Response<Body> {
    let body = match parse_body(&body) {
        Ok(b) => b,
        Err(e) => return world_error(e),
    };
    if !(ctx.caller.is_admin || ctx.caller.is_service || ctx.caller.has_role("service")) {
        return forbidden("os_compute_api:os-server-external-events:create");
    }
    let Some(events) = body
        .get("events")
        .and_then(Value::as_array)
        .filter(|e| !e.is_empty())
    else {
        return error(
            400,
            "Invalid input for field/attribute events. 'events' is a required property",
        );
    };
    let world = shared.world.lock();
    let mut out = Vec::new();
    let mut all_ok = true;
    for event in events {
        let name = event.get("name").and_then(Value::as_str).unwrap_or("");
        let known = EVENT_NAMES
            .iter()
            .any(|(n, since)| *n == name && ctx.at_least(*since));
        let status = event
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("completed");
        if !known || !matches!(status, "completed" | "failed" | "in-progress") {
            return error(
                400,
                &format!("Invalid input for field/attribute name. Value: {name}."),
            );
        }
        let server = event
            .get("server_uuid")
            .and_then(Value::as_str)
            .unwrap_or("");
        let code = match world.instances.get(server) {
            None => 404,
            Some(inst) if inst.host.is_none() => 422,
            Some(_) => 200,
        };
        all_ok &= code == 200;
        let mut echoed = event.clone();
        echoed["status"] = json!(status);
        echoed["code"] = json!(code);
        out.push(echoed);
    }
    json_response(if all_ok { 200 } else { 207 }, &json!({"events": out}))
}
