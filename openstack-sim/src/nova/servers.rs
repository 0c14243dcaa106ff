//! Nova servers: `GET /servers`, `/servers/detail` (filters, paging) and `/servers/{id}`, with
//! the fields each microversion and role shows.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Extension, Path, RawQuery, State};
use axum::http::Response;
use regex::Regex;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha224};

use super::{NovaCtx, error, iso_micro, iso_z, next_link, parse_limit, strict_bool, world_error};
use crate::clock::SimTime;
use crate::envelope::json_response;
use crate::server::{Shared, query_pairs};
use crate::world::World;
use crate::world::model::{Instance, server_status};

/// Nova's `hostId`: sha224 of project id and host.
pub(crate) fn host_id(project_id: &str, host: Option<&str>) -> String {
    match host {
        Some(h) if !h.is_empty() => {
            let mut hasher = Sha224::new();
            hasher.update(project_id.as_bytes());
            hasher.update(h.as_bytes());
            hasher
                .finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        }
        _ => String::new(),
    }
}

fn links(ctx: &NovaCtx, kind: &str, id: &str) -> Value {
    json!([
        {"rel": "self", "href": format!("{}/{kind}/{id}", ctx.endpoint)},
        {"rel": "bookmark", "href": format!("{}/{kind}/{id}", ctx.bookmark)},
    ])
}

/// The detailed view of a server at this microversion for this caller.
pub(crate) fn server_view(world: &World, inst: &Instance, ctx: &NovaCtx, t: SimTime) -> Value {
    let admin = ctx.caller.is_admin;
    let status = server_status(inst.vm_state, inst.task_state);
    let mut s = Map::new();
    let mut put = |k: &str, v: Value| {
        s.insert(k.to_string(), v);
    };
    put("id", json!(inst.id));
    put("name", json!(inst.name));
    put("status", json!(status));
    put("tenant_id", json!(inst.project_id));
    put("user_id", json!(inst.user_id));
    put("metadata", json!(inst.metadata));
    put(
        "hostId",
        json!(host_id(&inst.project_id, inst.host.as_deref())),
    );
    put(
        "image",
        match &inst.image_id {
            Some(image) => {
                json!({"id": image, "links": [{"rel": "bookmark", "href": format!("{}/images/{image}", ctx.bookmark)}]})
            }
            None => json!(""),
        },
    );
    let f = &inst.flavor;
    put(
        "flavor",
        if ctx.at_least(47) {
            json!({"vcpus": f.vcpus, "ram": f.ram_mb, "disk": f.disk_gb, "ephemeral": 0, "swap": 0,
                   "original_name": f.name, "extra_specs": f.extra_specs})
        } else {
            json!({"id": f.id, "links": [{"rel": "bookmark", "href": format!("{}/flavors/{}", ctx.bookmark, f.id)}]})
        },
    );
    put("created", json!(iso_z(&inst.created)));
    put("updated", json!(iso_z(&inst.updated)));
    put("addresses", json!({}));
    put("accessIPv4", json!(""));
    put("accessIPv6", json!(""));
    put("links", links(ctx, "servers", &inst.id));
    put("OS-DCF:diskConfig", json!("MANUAL"));
    if matches!(
        status,
        "ACTIVE" | "BUILD" | "REBUILD" | "RESIZE" | "VERIFY_RESIZE" | "MIGRATING"
    ) {
        put("progress", json!(0));
    }
    put("key_name", Value::Null);
    put("config_drive", json!(""));
    put("security_groups", json!([{"name": "default"}]));
    let zone = inst
        .host
        .as_deref()
        .map(|h| world.host_zone(h))
        .unwrap_or_default();
    put("OS-EXT-AZ:availability_zone", json!(zone));
    put("OS-EXT-STS:vm_state", json!(inst.vm_state.as_str()));
    put(
        "OS-EXT-STS:task_state",
        json!(inst.task_state.map(|t| t.as_str())),
    );
    put("OS-EXT-STS:power_state", json!(inst.power_state));
    put(
        "OS-SRV-USG:launched_at",
        json!(iso_micro(&inst.launched_at)),
    );
    put("OS-SRV-USG:terminated_at", Value::Null);
    let volumes: Vec<Value> = inst
        .bdms
        .iter()
        .map(|b| {
            if ctx.at_least(3) {
                json!({"id": b.volume_id, "delete_on_termination": b.delete_on_termination})
            } else {
                json!({"id": b.volume_id})
            }
        })
        .collect();
    put("os-extended-volumes:volumes_attached", json!(volumes));
    if admin {
        put("OS-EXT-SRV-ATTR:host", json!(inst.host));
        put("OS-EXT-SRV-ATTR:hypervisor_hostname", json!(inst.node));
        put("OS-EXT-SRV-ATTR:instance_name", json!(inst.instance_name));
        if ctx.at_least(3) {
            put(
                "OS-EXT-SRV-ATTR:reservation_id",
                json!(format!("r-{}", &inst.id[..8])),
            );
            put("OS-EXT-SRV-ATTR:launch_index", json!(0));
            put("OS-EXT-SRV-ATTR:hostname", json!(inst.name));
            put("OS-EXT-SRV-ATTR:kernel_id", json!(""));
            put("OS-EXT-SRV-ATTR:ramdisk_id", json!(""));
            put(
                "OS-EXT-SRV-ATTR:root_device_name",
                json!(
                    inst.bdms
                        .iter()
                        .find(|b| b.boot_index == Some(0))
                        .map(|b| b.device.clone())
                        .unwrap_or_else(|| "/dev/vda".into())
                ),
            );
            put("OS-EXT-SRV-ATTR:user_data", Value::Null);
        }
    } else if ctx.at_least(90) {
        put("OS-EXT-SRV-ATTR:hostname", json!(inst.name));
    }
    if ctx.at_least(9) {
        put("locked", json!(inst.locked));
    }
    if ctx.at_least(16) && admin {
        put(
            "host_status",
            json!(world.host_status(inst.host.as_deref(), t)),
        );
    }
    if ctx.at_least(19) {
        put("description", Value::Null);
    }
    if ctx.at_least(26) {
        put("tags", json!([]));
    }
    if ctx.at_least(63) {
        put("trusted_image_certificates", Value::Null);
    }
    if ctx.at_least(73) {
        put("locked_reason", json!(inst.locked_reason));
    }
    if ctx.at_least(96) {
        put("pinned_availability_zone", Value::Null);
    }
    if matches!(status, "ERROR" | "DELETED")
        && let Some(fault) = &inst.fault
    {
        let mut f =
            json!({"code": fault.code, "created": iso_z(&fault.created), "message": fault.message});
        if admin || fault.code != 500 {
            f["details"] = json!(fault.details);
        }
        put("fault", f);
    }
    Value::Object(s)
}

fn summary_view(inst: &Instance, ctx: &NovaCtx) -> Value {
    json!({"id": inst.id, "name": inst.name, "links": links(ctx, "servers", &inst.id)})
}

pub(crate) async fn list_detail(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    RawQuery(query): RawQuery,
) -> Response<Body> {
    list(&shared, &ctx, query.as_deref(), true)
}

pub(crate) async fn list_summary(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    RawQuery(query): RawQuery,
) -> Response<Body> {
    list(&shared, &ctx, query.as_deref(), false)
}

fn list(shared: &Shared, ctx: &NovaCtx, query: Option<&str>, detail: bool) -> Response<Body> {
    let pairs = query_pairs(query);
    let get = |key: &str| {
        pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let all_tenants = match get("all_tenants") {
        None => false,
        Some("") => true,
        Some(v) => match strict_bool(v) {
            Some(b) => b,
            None => return error(400, &format!("Invalid value '{v}' for all_tenants")),
        },
    };
    let admin = ctx.caller.is_admin;
    if all_tenants && !admin {
        return super::forbidden("os_compute_api:servers:index:get_all_tenants");
    }
    let project = if all_tenants {
        get("project_id")
            .or_else(|| get("tenant_id"))
            .map(str::to_string)
    } else {
        Some(ctx.caller.project_id.clone())
    };
    let host = if admin { get("host") } else { None };
    let status = get("status").map(str::to_ascii_uppercase);
    // `name` (alias `display_name`) and `node` are regular expressions,
    // searched anywhere in the value, as Nova's database query does.
    let name = match pattern("name", get("name").or_else(|| get("display_name"))) {
        Ok(p) => p,
        Err(message) => return error(400, &message),
    };
    let node = match pattern("node", if admin { get("node") } else { None }) {
        Ok(p) => p,
        Err(message) => return error(400, &message),
    };
    let mut world = shared.world.lock();
    let t = world.tick();
    let limit = match parse_limit(get("limit"), world.settings.max_limit) {
        Ok(n) => n,
        Err(e) => return world_error(e),
    };
    let start = match get("marker") {
        None => 0,
        Some(marker) => match world.instance_pos.get(marker) {
            Some(&pos) => pos + 1,
            None => return error(400, &format!("marker [{marker}] not found")),
        },
    };
    let mut page = Vec::new();
    for id in &world.instance_order[start.min(world.instance_order.len())..] {
        if page.len() >= limit {
            break;
        }
        let inst = &world.instances[id];
        if project.as_deref().is_some_and(|p| p != inst.project_id)
            || host.is_some_and(|h| inst.host.as_deref() != Some(h))
            || node
                .as_ref()
                .is_some_and(|n| !inst.node.as_deref().is_some_and(|v| n.is_match(v)))
            || status
                .as_deref()
                .is_some_and(|s| s != server_status(inst.vm_state, inst.task_state))
            || name.as_ref().is_some_and(|n| !n.is_match(&inst.name))
        {
            continue;
        }
        page.push(if detail {
            server_view(&world, inst, ctx, t)
        } else {
            summary_view(inst, ctx)
        });
    }
    let mut body = json!({"servers": page});
    if limit > 0 && page_len(&body) == limit {
        let last = body["servers"][limit - 1]["id"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let path = if detail { "servers/detail" } else { "servers" };
        body["servers_links"] = json!([{"rel": "next", "href": next_link(&format!("{}/{path}", ctx.endpoint), &pairs, &last)}]);
    }
    drop(world);
    json_response(200, &body)
}

/// A filter Nova reads as a regular expression: its schema refuses an
/// empty one and one Python's `re` cannot compile (400), and the database
/// searches for it anywhere in the column (PostgreSQL's `~`, MySQL's and
/// SQLite's `REGEXP`). The `regex` crate reads the common syntax alike; a
/// pattern only Python and PostgreSQL know (look-around, back-references)
/// is refused here, where Nova would search with it. `Err`: the 400's
/// message.
fn pattern(key: &str, value: Option<&str>) -> Result<Option<Regex>, String> {
    let Some(value) = value else {
        return Ok(None);
    };
    let refused = || {
        format!(
            "Invalid input for query parameters {key}. Value: {value}. '{value}' is not a 'regex'"
        )
    };
    if value.is_empty() {
        return Err(refused());
    }
    Regex::new(value).map(Some).map_err(|_| refused())
}

fn page_len(body: &Value) -> usize {
    body["servers"].as_array().map_or(0, Vec::len)
}

pub(crate) async fn show(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    Path(server_id): Path<String>,
) -> Response<Body> {
    let mut world = shared.world.lock();
    let t = world.tick();
    match world.visible_instance(&ctx.caller, &server_id) {
        Ok(inst) => {
            let mut server = server_view(&world, inst, &ctx, t);
            // 2.71: a server shown alone names its server groups (none
            // here: the simulator has no server groups).
            if ctx.at_least(71) {
                server["server_groups"] = json!([]);
            }
            let body = json!({ "server": server });
            drop(world);
            json_response(200, &body)
        }
        Err(e) => world_error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::host_id;

    #[test]
    fn host_id_is_sha224_hex_or_empty() {
        let id = host_id("p", Some("compute-01"));
        assert_eq!(id.len(), 56);
        assert_ne!(id, host_id("p", Some("compute-02")));
        assert_eq!(host_id("p", None), "");
    }
}
