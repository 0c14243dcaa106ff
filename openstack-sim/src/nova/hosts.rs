//! Nova compute services (`os-services` list and updates, 2.53 and legacy forms), hypervisors and
//! aggregates.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Extension, Path, RawQuery, State};
use axum::http::Response;
use serde_json::{Value, json};

use super::{
    NovaCtx, error, forbidden, iso_micro, next_link, parse_body, parse_limit, schema_bool,
    world_error,
};
use crate::clock::SimTime;
use crate::envelope::json_response;
use crate::server::{Shared, query_pairs};
use crate::world::model::Instance;
use crate::world::operations::ServiceUpdate;
use crate::world::{self, World};

fn compute_service_view(world: &World, idx: usize, ctx: &NovaCtx, t: SimTime) -> Value {
    let h = &world.hosts[idx];
    let updated = world
        .last_heartbeat(idx, t)
        .map(|hb| world.wall(hb))
        .unwrap_or(h.service_updated);
    let mut v = json!({
        "id": if ctx.at_least(53) { json!(h.service_uuid) } else { json!(h.service_id) },
        "binary": "nova-compute",
        "host": h.name,
        "zone": world.host_zone(&h.name),
        "status": if h.enabled { "enabled" } else { "disabled" },
        "state": if world.service_is_up(idx, t) { "up" } else { "down" },
        "updated_at": iso_micro(&updated.max(h.service_updated)),
        "disabled_reason": h.disabled_reason,
    });
    if ctx.at_least(11) {
        v["forced_down"] = json!(h.forced_down);
    }
    v
}

fn control_service_views(world: &World, ctx: &NovaCtx, t: SimTime) -> Vec<(String, String, Value)> {
    world
        .control_services
        .iter()
        .map(|s| {
            let mut v = json!({
                "id": if ctx.at_least(53) { json!(s.uuid) } else { json!(s.id) },
                "binary": s.binary,
                "host": s.host,
                "zone": "internal",
                "status": "enabled",
                "state": "up",
                "updated_at": iso_micro(&world.wall(t)),
                "disabled_reason": null,
            });
            if ctx.at_least(11) {
                v["forced_down"] = json!(false);
            }
            (s.binary.to_string(), s.host.to_string(), v)
        })
        .collect()
}

pub(crate) async fn list_services(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    RawQuery(query): RawQuery,
) -> Response<Body> {
    if !ctx.caller.is_admin {
        return forbidden("os_compute_api:os-services:list");
    }
    let pairs = query_pairs(query.as_deref());
    if ctx.at_least(75)
        && let Some((k, _)) = pairs.iter().find(|(k, _)| k != "binary" && k != "host")
    {
        return error(
            400,
            &format!(
                "Invalid input for query parameters {k}. Additional properties are not allowed ('{k}' was unexpected)"
            ),
        );
    }
    let get = |key: &str| {
        pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let (binary, host) = (get("binary"), get("host"));
    let mut world = shared.world.lock();
    let t = world.tick();
    let mut services: Vec<Value> = control_service_views(&world, &ctx, t)
        .into_iter()
        .filter(|(b, h, _)| {
            binary.as_ref().is_none_or(|x| x == b) && host.as_ref().is_none_or(|x| x == h)
        })
        .map(|(_, _, v)| v)
        .collect();
    if binary.as_deref().is_none_or(|b| b == "nova-compute") {
        for idx in 0..world.hosts.len() {
            if host.as_ref().is_none_or(|h| *h == world.hosts[idx].name) {
                services.push(compute_service_view(&world, idx, &ctx, t));
            }
        }
    }
    json_response(200, &json!({"services": services}))
}

fn is_uuid(text: &str) -> bool {
    uuid::Uuid::parse_str(text).is_ok() && text.len() == 36
}

pub(crate) async fn update_service(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    Path(service_id): Path<String>,
    body: Bytes,
) -> Response<Body> {
    if !ctx.caller.is_admin {
        return forbidden("os_compute_api:os-services:update");
    }
    let body = match parse_body(&body) {
        Ok(b) => b,
        Err(e) => return world_error(e),
    };
    let Some(obj) = body.as_object() else {
        return error(400, "Malformed request body");
    };
    if !ctx.at_least(53) {
        return legacy_update(&shared, &ctx, &service_id, obj).await;
    }
    if !is_uuid(&service_id) {
        return error(400, &format!("Invalid uuid {service_id}"));
    }
    if let Some(extra) = obj
        .keys()
        .find(|k| !["status", "disabled_reason", "forced_down"].contains(&k.as_str()))
    {
        return error(
            400,
            &format!(
                "Invalid input for field/attribute. Additional properties are not allowed ('{extra}' was unexpected)"
            ),
        );
    }
    if obj.is_empty() {
        return error(
            400,
            "No updates were requested. Fields 'status' or 'forced_down' should be specified.",
        );
    }
    let enabled = match obj.get("status") {
        None => None,
        Some(Value::String(s)) if s == "enabled" => Some(true),
        Some(Value::String(s)) if s == "disabled" => Some(false),
        Some(other) => {
            return error(
                400,
                &format!(
                    "Invalid input for field/attribute status. Value: {other}. {other} is not one of ['enabled', 'disabled']"
                ),
            );
        }
    };
    let reason = match obj.get("disabled_reason") {
        None => None,
        Some(Value::String(r)) if !r.is_empty() && r.chars().count() <= 255 => Some(r.clone()),
        Some(other) => {
            return error(
                400,
                &format!(
                    "Invalid input for field/attribute disabled_reason. Value: {other}. It must be a string of 1 to 255 characters"
                ),
            );
        }
    };
    if reason.is_some() && enabled != Some(false) {
        return error(
            400,
            "Specifying 'disabled_reason' with status 'enabled' is invalid.",
        );
    }
    let forced_down = match obj.get("forced_down") {
        None => None,
        Some(v) => match schema_bool(v) {
            Some(b) => Some(b),
            None => {
                return error(
                    400,
                    &format!(
                        "Invalid input for field/attribute forced_down. Value: {v}. {v} is not of type 'boolean'"
                    ),
                );
            }
        },
    };
    if enabled.is_none() && forced_down.is_none() {
        return error(
            400,
            "No updates were requested. Fields 'status' or 'forced_down' should be specified.",
        );
    }
    let (response, blocked) = {
        let mut world = shared.world.lock();
        let Some(idx) = world.host_by_service_uuid(&service_id) else {
            if world.control_services.iter().any(|s| s.uuid == service_id) {
                return error(
                    400,
                    "Updating a nova-compute service is the only supported update; this service's binary is not nova-compute.",
                );
            }
            return error(404, &format!("Service {service_id} could not be found."));
        };
        let outcome = match world.update_service(
            idx,
            &ServiceUpdate {
                enabled,
                disabled_reason: reason,
                forced_down,
            },
        ) {
            Ok(o) => o,
            Err(e) => return world_error(e),
        };
        let t = world.tick();
        let body = json!({"service": compute_service_view(&world, idx, &ctx, t)});
        (body, world.clock.real_duration(outcome.blocked_secs))
    };
    if !blocked.is_zero() {
        tokio::time::sleep(blocked).await;
    }
    json_response(200, &response)
}

async fn legacy_update(
    shared: &Shared,
    ctx: &NovaCtx,
    action: &str,
    obj: &serde_json::Map<String, Value>,
) -> Response<Body> {
    let host = obj
        .get("host")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let binary = obj
        .get("binary")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let update = match action {
        "enable" => ServiceUpdate {
            enabled: Some(true),
            ..ServiceUpdate::default()
        },
        "disable" => ServiceUpdate {
            enabled: Some(false),
            ..ServiceUpdate::default()
        },
        "disable-log-reason" => {
            let reason = obj
                .get("disabled_reason")
                .and_then(Value::as_str)
                .unwrap_or("");
            if reason.is_empty() || reason.chars().count() > 255 {
                return error(
                    400,
                    "Invalid input for field/attribute disabled_reason. It must be a string of 1 to 255 characters",
                );
            }
            ServiceUpdate {
                enabled: Some(false),
                disabled_reason: Some(reason.into()),
                ..ServiceUpdate::default()
            }
        }
        "force-down" if ctx.at_least(11) => match obj.get("forced_down").and_then(schema_bool) {
            Some(b) => ServiceUpdate {
                forced_down: Some(b),
                ..ServiceUpdate::default()
            },
            None => return error(400, "Invalid input for field/attribute forced_down."),
        },
        _ => return error(404, "Unknown action"),
    };
    if binary != "nova-compute" {
        return error(
            400,
            &format!("Invalid input: binary {binary:?} is not nova-compute"),
        );
    }
    let (body, blocked) = {
        let mut world = shared.world.lock();
        let Some(idx) = world.host_idx(&host) else {
            return error(404, &format!("Host '{host}' is not mapped to any cell"));
        };
        let outcome = match world.update_service(idx, &update) {
            Ok(o) => o,
            Err(e) => return world_error(e),
        };
        let h = &world.hosts[idx];
        let mut service = json!({"host": h.name, "binary": "nova-compute"});
        if update.forced_down.is_some() {
            service["forced_down"] = json!(h.forced_down);
        } else {
            service["status"] = json!(if h.enabled { "enabled" } else { "disabled" });
            if action == "disable-log-reason" {
                service["disabled_reason"] = json!(h.disabled_reason);
            }
        }
        (
            json!({"service": service}),
            world.clock.real_duration(outcome.blocked_secs),
        )
    };
    if !blocked.is_zero() {
        tokio::time::sleep(blocked).await;
    }
    json_response(200, &body)
}

fn hypervisor_view(
    world: &World,
    idx: usize,
    ctx: &NovaCtx,
    t: SimTime,
    detail: bool,
    with_servers: bool,
    on_host: &[&Instance],
) -> Value {
    let h = &world.hosts[idx];
    let mut v = json!({
        "id": if ctx.at_least(53) { json!(h.hypervisor_uuid) } else { json!(h.hypervisor_id) },
        "hypervisor_hostname": h.hypervisor_hostname,
        "state": if world.service_is_up(idx, t) { "up" } else { "down" },
        "status": if h.enabled { "enabled" } else { "disabled" },
    });
    if detail {
        v["host_ip"] = json!(h.ip);
        v["hypervisor_type"] = json!("QEMU");
        v["hypervisor_version"] = json!(8002000);
        v["service"] = json!({
            "host": h.name,
            "id": if ctx.at_least(53) { json!(h.service_uuid) } else { json!(h.service_id) },
            "disabled_reason": h.disabled_reason,
        });
        if ctx.at_least(88) {
            v["uptime"] = if world.compute_alive(idx, t) {
                json!(" 10:00:00 up 1 day")
            } else {
                Value::Null
            };
        } else {
            let (used_cpu, used_ram) = world.usage[idx];
            v["vcpus"] = json!(h.vcpus);
            v["memory_mb"] = json!(h.ram_mb);
            v["local_gb"] = json!(h.disk_gb);
            v["vcpus_used"] = json!(used_cpu);
            v["memory_mb_used"] = json!(used_ram);
            v["local_gb_used"] = json!(0);
            v["free_ram_mb"] = json!(h.ram_mb.saturating_sub(used_ram));
            v["free_disk_gb"] = json!(h.disk_gb);
            v["current_workload"] = json!(0);
            v["running_vms"] = json!(on_host.len());
            v["disk_available_least"] = json!(h.disk_gb);
            v["cpu_info"] = json!("{}");
        }
    }
    if with_servers {
        let servers: Vec<Value> = on_host
            .iter()
            .map(|i| json!({"name": i.instance_name, "uuid": i.id}))
            .collect();
        if !servers.is_empty() || ctx.at_least(75) {
            v["servers"] = json!(servers);
        }
    }
    v
}

fn hypervisors(
    shared: &Shared,
    ctx: &NovaCtx,
    query: Option<&str>,
    detail: bool,
) -> Response<Body> {
    if !ctx.caller.is_admin {
        return forbidden("os_compute_api:os-hypervisors:list");
    }
    let pairs = query_pairs(query);
    let get = |key: &str| {
        pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let with_servers = ctx.at_least(53)
        && get("with_servers")
            .and_then(super::strict_bool)
            .unwrap_or(false);
    let pattern = if ctx.at_least(53) {
        get("hypervisor_hostname_pattern")
    } else {
        None
    };
    let mut world = shared.world.lock();
    let t = world.tick();
    let paging = ctx.at_least(33);
    let limit = if paging {
        match parse_limit(get("limit"), world.settings.max_limit) {
            Ok(n) => n,
            Err(e) => return world_error(e),
        }
    } else {
        usize::MAX
    };
    let mut start = 0;
    if paging && let Some(marker) = get("marker") {
        match world
            .hosts
            .iter()
            .position(|h| h.hypervisor_uuid == marker || h.hypervisor_id.to_string() == marker)
        {
            Some(pos) => start = pos + 1,
            None => return error(400, &format!("marker [{marker}] not found")),
        }
    }
    let matching: Vec<usize> = (start..world.hosts.len())
        .filter(|&i| pattern.is_none_or(|p| world.hosts[i].hypervisor_hostname.contains(p)))
        .take(limit)
        .collect();
    if pattern.is_some() && matching.is_empty() {
        return error(
            404,
            &format!(
                "No hypervisor matching '{}' could be found.",
                pattern.unwrap_or("")
            ),
        );
    }
    let by_host = world.servers_by_host();
    let items: Vec<Value> = matching
        .iter()
        .map(|&i| {
            let on_host = by_host
                .get(world.hosts[i].name.as_str())
                .map_or(&[][..], Vec::as_slice);
            hypervisor_view(&world, i, ctx, t, detail, with_servers, on_host)
        })
        .collect();
    let mut body = json!({"hypervisors": items});
    if paging && limit > 0 && matching.len() == limit {
        let last = &world.hosts[*matching.last().expect("non-empty")];
        let marker = if ctx.at_least(53) {
            last.hypervisor_uuid.clone()
        } else {
            last.hypervisor_id.to_string()
        };
        let path = if detail {
            "os-hypervisors/detail"
        } else {
            "os-hypervisors"
        };
        body["hypervisors_links"] = json!([{"rel": "next", "href": next_link(&format!("{}/{path}", ctx.endpoint), &pairs, &marker)}]);
    }
    json_response(200, &body)
}

pub(crate) async fn list_hypervisors(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    RawQuery(query): RawQuery,
) -> Response<Body> {
    hypervisors(&shared, &ctx, query.as_deref(), false)
}

pub(crate) async fn list_hypervisors_detail(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    RawQuery(query): RawQuery,
) -> Response<Body> {
    hypervisors(&shared, &ctx, query.as_deref(), true)
}

pub(crate) async fn show_hypervisor(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
) -> Response<Body> {
    if !ctx.caller.is_admin {
        return forbidden("os_compute_api:os-hypervisors:show");
    }
    let with_servers = ctx.at_least(53)
        && query_pairs(query.as_deref())
            .iter()
            .any(|(k, v)| k == "with_servers" && super::strict_bool(v) == Some(true));
    let mut world = shared.world.lock();
    let t = world.tick();
    let found = world.hosts.iter().position(|h| {
        if ctx.at_least(53) {
            h.hypervisor_uuid == id
        } else {
            h.hypervisor_id.to_string() == id
        }
    });
    match found {
        Some(idx) => json_response(
            200,
            &json!({"hypervisor": hypervisor_view(
                &world,
                idx,
                &ctx,
                t,
                true,
                with_servers,
                world.servers_by_host().get(world.hosts[idx].name.as_str()).map_or(&[][..], Vec::as_slice),
            )}),
        ),
        None => error(404, &format!("Hypervisor with ID {id} could not be found.")),
    }
}

fn aggregate_view(ctx: &NovaCtx, a: &crate::world::model::Aggregate) -> Value {
    let mut v = json!({
        "id": a.id,
        "name": a.name,
        "availability_zone": a.availability_zone,
        "hosts": a.hosts,
        "metadata": a.metadata,
        "created_at": iso_micro(&a.created_at),
        "updated_at": a.updated_at.as_ref().map(iso_micro),
        "deleted_at": null,
        "deleted": false,
    });
    if let Some(zone) = &a.availability_zone {
        v["metadata"]["availability_zone"] = json!(zone);
    }
    if ctx.at_least(41) {
        v["uuid"] = json!(a.uuid);
    }
    v
}

pub(crate) async fn list_aggregates(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
) -> Response<Body> {
    if !ctx.caller.is_admin {
        return forbidden("os_compute_api:os-aggregates:index");
    }
    let world = shared.world.lock();
    let items: Vec<Value> = world
        .aggregates
        .iter()
        .map(|a| aggregate_view(&ctx, a))
        .collect();
    json_response(200, &json!({"aggregates": items}))
}

fn aggregate_id(text: &str) -> Result<u64, world::Error> {
    text.parse::<u64>().map_err(|_| {
        world::Error::BadRequest(format!(
            "Invalid aggregate ID {text}: aggregate ID must be an integer"
        ))
    })
}

pub(crate) async fn show_aggregate(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    Path(id): Path<String>,
) -> Response<Body> {
    if !ctx.caller.is_admin {
        return forbidden("os_compute_api:os-aggregates:show");
    }
    let id = match aggregate_id(&id) {
        Ok(id) => id,
        Err(e) => return world_error(e),
    };
    let world = shared.world.lock();
    match world.aggregates.iter().find(|a| a.id == id) {
        Some(a) => json_response(200, &json!({"aggregate": aggregate_view(&ctx, a)})),
        None => error(404, &format!("Aggregate {id} could not be found.")),
    }
}

pub(crate) async fn aggregate_action(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    Path(id): Path<String>,
    body: Bytes,
) -> Response<Body> {
    if !ctx.caller.is_admin {
        return forbidden("os_compute_api:os-aggregates:add_host");
    }
    let id = match aggregate_id(&id) {
        Ok(id) => id,
        Err(e) => return world_error(e),
    };
    let body = match parse_body(&body) {
        Ok(b) => b,
        Err(e) => return world_error(e),
    };
    let (name, host) = match body.as_object().and_then(|o| o.iter().next()) {
        Some((name, value)) => (
            name.clone(),
            value
                .get("host")
                .and_then(Value::as_str)
                .map(str::to_string),
        ),
        None => return error(400, "Malformed request body"),
    };
    let Some(host) = host else {
        return error(
            400,
            &format!("Invalid input for field/attribute {name}. 'host' is a required property"),
        );
    };
    let mut world = shared.world.lock();
    let result = match name.as_str() {
        "add_host" => world.aggregate_add_host(id, &host),
        "remove_host" => world.aggregate_remove_host(id, &host),
        other => {
            return error(
                400,
                &format!("Invalid request body: unknown aggregate action {other}"),
            );
        }
    };
    match result {
        Ok(idx) => json_response(
            200,
            &json!({"aggregate": aggregate_view(&ctx, &world.aggregates[idx])}),
        ),
        Err(e) => world_error(e),
    }
}
