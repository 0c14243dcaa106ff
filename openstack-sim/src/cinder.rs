//! Cinder v3 over HTTP: authentication, microversions, volumes, the attachments API and the
//! volume actions an HA engine and Nova use (force detach, reset status, legacy detach).

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Extension, Path, RawQuery, Request, State};
use axum::http::{HeaderValue, Response};
use axum::middleware::{self, Next};
use axum::routing::{MethodRouter, get, post};
use serde_json::{Value, json};

use crate::envelope::{Api, empty_json_response, empty_response, json_response, service_error};
use crate::identity::Caller;
use crate::microversion::{self, Version};
use crate::server::{LoggedVersion, RequestMeta, Shared, query_pairs};
use crate::world::model::{AttachStatus, Attachment, Volume};
use crate::world::volumes::NewAttachment;
use crate::world::{self, World};

/// The lowest and highest volume microversions served.
pub const MIN_VERSION: Version = Version::new(3, 0);
pub const MAX_VERSION: Version = Version::new(3, 71);

/// What every Cinder handler knows about its call.
#[derive(Clone, Debug)]
pub(crate) struct CinderCtx {
    pub version: Version,
    pub caller: Caller,
    /// `<base>[/internal]/volume/v3/<project_id>`, for links.
    pub endpoint: String,
}

impl CinderCtx {
    fn at_least(&self, minor: u32) -> bool {
        self.version.at_least(minor)
    }

    /// A volume's `self` and `bookmark` links; the bookmark has no
    /// version (`<base>/volume/<project_id>/volumes/<id>`), as Cinder's.
    fn volume_links(&self, id: &str) -> Value {
        let bookmark = match self.endpoint.rsplit_once("/v3/") {
            Some((root, project)) => format!("{root}/{project}"),
            None => self.endpoint.clone(),
        };
        json!([
            {"rel": "self", "href": format!("{}/volumes/{id}", self.endpoint)},
            {"rel": "bookmark", "href": format!("{bookmark}/volumes/{id}")},
        ])
    }
}

fn error(status: u16, message: &str) -> Response<Body> {
    service_error(Api::Volume, status, message, None)
}

fn world_error(e: world::Error) -> Response<Body> {
    error(e.status(), &e.to_string())
}

fn forbidden(policy: &str) -> Response<Body> {
    error(
        403,
        &format!("Policy doesn't allow {policy} to be performed."),
    )
}

fn both(
    router: Router<Arc<Shared>>,
    path: &str,
    method: MethodRouter<Arc<Shared>>,
) -> Router<Arc<Shared>> {
    router
        .route(&format!("/volume/v3/{{project_id}}{path}"), method.clone())
        .route(&format!("/volume/v3{path}"), method)
}

pub(crate) fn routes(shared: Arc<Shared>) -> Router {
    let mut api = Router::new();
    api = both(api, "/volumes", get(list_summary));
    api = both(api, "/volumes/detail", get(list_detail));
    api = both(api, "/volumes/{volume_id}", get(show_volume));
    api = both(api, "/volumes/{volume_id}/action", post(volume_action));
    api = both(
        api,
        "/attachments",
        get(list_attachments).post(create_attachment),
    );
    api = both(api, "/attachments/detail", get(list_attachments_detail));
    api = both(
        api,
        "/attachments/{attachment_id}",
        get(show_attachment)
            .put(update_attachment)
            .delete(delete_attachment),
    );
    api = both(
        api,
        "/attachments/{attachment_id}/action",
        post(attachment_action),
    );
    let api = api
        .route_layer(middleware::from_fn_with_state(shared.clone(), context))
        .with_state(shared.clone());
    let discovery = Router::new()
        .route("/volume", get(versions))
        .route("/volume/", get(versions))
        .route("/volume/v3", get(to_v3))
        .route("/volume/v3/", get(v3))
        .with_state(shared);
    api.merge(discovery)
}

/// The root: the versions, `300 Multiple Choices`.
async fn versions(
    State(shared): State<Arc<Shared>>,
    Extension(meta): Extension<RequestMeta>,
) -> Response<Body> {
    version_list(&shared, &meta, 300)
}

/// `/v3/`: the same list, `200`.
async fn v3(
    State(shared): State<Arc<Shared>>,
    Extension(meta): Extension<RequestMeta>,
) -> Response<Body> {
    version_list(&shared, &meta, 200)
}

/// `/v3` redirects to `/v3/` (a project's endpoint itself,
/// `/v3/{project_id}`, is no document: 404, and clients look at the root).
async fn to_v3(
    State(shared): State<Arc<Shared>>,
    Extension(meta): Extension<RequestMeta>,
) -> Response<Body> {
    let mut response = empty_response(302);
    let target = format!("{}{}/volume/v3/", shared.base_url, meta.interface.prefix());
    if let Ok(v) = HeaderValue::from_str(&target) {
        response.headers_mut().insert("location", v);
    }
    response
}

/// Cinder's version list, answered at 3.0 as its API answers.
fn version_list(shared: &Shared, meta: &RequestMeta, status: u16) -> Response<Body> {
    let base = format!("{}{}/volume", shared.base_url, meta.interface.prefix());
    let mut response = json_response(
        status,
        &json!({"versions": [{
            "id": "v3.0",
            "status": "CURRENT",
            "version": MAX_VERSION.to_string(),
            "min_version": MIN_VERSION.to_string(),
            "updated": "2023-08-31T00:00:00Z",
            "links": [{"rel": "describedby", "type": "text/html", "href": "https://docs.openstack.org/"},
                      {"rel": "self", "href": format!("{base}/v3/")}],
            "media-types": [{"base": "application/json", "type": "application/vnd.openstack.volume+json;version=3"}],
        }]}),
    );
    let h = response.headers_mut();
    h.insert(
        "openstack-api-version",
        HeaderValue::from_static("volume 3.0"),
    );
    h.insert("vary", HeaderValue::from_static("OpenStack-API-Version"));
    response
}

async fn context(
    State(shared): State<Arc<Shared>>,
    Path(params): Path<HashMap<String, String>>,
    mut req: Request,
    next: Next,
) -> Response<Body> {
    let meta = req
        .extensions()
        .get::<RequestMeta>()
        .cloned()
        .unwrap_or_default();
    let headers = req.headers();
    let token = headers.get("x-auth-token").and_then(|v| v.to_str().ok());
    let service_token = headers.get("x-service-token").and_then(|v| v.to_str().ok());
    let caller = token.and_then(|t| shared.world.lock().identity.caller(t, service_token).ok());
    let Some(caller) = caller else {
        let mut response = error(401, "The request you have made requires authentication.");
        if let Ok(v) = HeaderValue::from_str(&format!("Keystone uri=\"{}\"", shared.identity_url()))
        {
            response.headers_mut().insert("www-authenticate", v);
        }
        return response;
    };
    let version = match microversion::negotiate(headers, "volume", None, MIN_VERSION, MAX_VERSION) {
        Ok(v) => v,
        Err(e) => {
            let status = match e {
                microversion::Error::NotAcceptable { .. } => 406,
                microversion::Error::Malformed(_) => 400,
            };
            return error(status, &e.to_string());
        }
    };
    let project = match params.get("project_id") {
        Some(p) => p.clone(),
        None if version.at_least(67) => caller.project_id.clone(),
        None => return error(404, "The resource could not be found."),
    };
    req.extensions_mut().insert(CinderCtx {
        version,
        endpoint: format!(
            "{}{}/volume/v3/{project}",
            shared.base_url,
            meta.interface.prefix()
        ),
        caller,
    });
    let mut response = next.run(req).await;
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("volume {version}")) {
        h.insert("openstack-api-version", v);
    }
    h.insert("vary", HeaderValue::from_static("OpenStack-API-Version"));
    response
        .extensions_mut()
        .insert(LoggedVersion(format!("volume {version}")));
    response
}

fn stamp(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6f").to_string()
}

fn visible_volume<'w>(
    world: &'w World,
    caller: &Caller,
    id: &str,
) -> Result<&'w Volume, world::Error> {
    world
        .volumes
        .get(id)
        .filter(|v| caller.is_admin || v.project_id == caller.project_id)
        .ok_or_else(|| world::Error::NotFound(format!("Volume {id} could not be found.")))
}

fn volume_view(ctx: &CinderCtx, v: &Volume) -> Value {
    let privileged = ctx.caller.is_admin || ctx.caller.is_service || ctx.caller.has_role("service");
    let attachments: Vec<Value> = v
        .attachments
        .iter()
        .filter(|a| a.attach_status == AttachStatus::Attached)
        .map(|a| {
            json!({
                "id": v.id,
                "attachment_id": a.id,
                "volume_id": v.id,
                "server_id": a.instance_id,
                "host_name": if privileged { json!(a.host_name) } else { Value::Null },
                "device": a.device,
                "attached_at": a.attached_at.as_ref().map(stamp),
            })
        })
        .collect();
    let mut body = json!({
        "id": v.id,
        "name": v.name,
        "status": v.status,
        "size": v.size,
        "availability_zone": "nova",
        "created_at": stamp(&v.created_at),
        "updated_at": stamp(&v.updated_at),
        "attachments": attachments,
        "description": null,
        "volume_type": v.volume_type,
        "snapshot_id": null,
        "source_volid": null,
        "metadata": {},
        "links": ctx.volume_links(&v.id),
        "user_id": v.user_id,
        "bootable": if v.bootable { "true" } else { "false" },
        "encrypted": false,
        "replication_status": null,
        "consistencygroup_id": null,
        "multiattach": v.multiattach,
    });
    if ctx.caller.is_admin {
        body["migration_status"] = json!(v.migration_status);
        body["os-vol-host-attr:host"] = json!("cinder@lvmdriver-1#lvmdriver-1");
        body["os-vol-tenant-attr:tenant_id"] = json!(v.project_id);
        body["os-vol-mig-status-attr:migstat"] = json!(v.migration_status);
        body["os-vol-mig-status-attr:name_id"] = Value::Null;
    }
    if ctx.at_least(13) {
        body["group_id"] = Value::Null;
    }
    if ctx.at_least(21) && ctx.caller.is_admin {
        body["provider_id"] = Value::Null;
    }
    if ctx.at_least(48) {
        body["shared_targets"] = json!(false);
        body["service_uuid"] = json!("5a8d2f1c-6b3e-4f70-9a1d-2c4e6f8a0b1c");
    }
    if ctx.at_least(63) {
        body["volume_type_id"] = json!("a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d");
    }
    if ctx.at_least(65) {
        body["consumes_quota"] = json!(true);
    }
    body
}

async fn list_detail(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<CinderCtx>,
    RawQuery(query): RawQuery,
) -> Response<Body> {
    list_volumes(&shared, &ctx, query.as_deref(), true)
}

async fn list_summary(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<CinderCtx>,
    RawQuery(query): RawQuery,
) -> Response<Body> {
    list_volumes(&shared, &ctx, query.as_deref(), false)
}

fn list_volumes(
    shared: &Shared,
    ctx: &CinderCtx,
    query: Option<&str>,
    detail: bool,
) -> Response<Body> {
    let pairs = query_pairs(query);
    let get = |key: &str| {
        pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let all_tenants = ctx.caller.is_admin
        && get("all_tenants")
            .is_some_and(|v| v.is_empty() || crate::nova::strict_bool(v) == Some(true));
    let mut world = shared.world.lock();
    world.tick();
    let max = world.settings.max_limit;
    let limit = match get("limit").map(str::parse::<usize>) {
        None => max,
        Some(Ok(n)) => n.min(max),
        Some(Err(_)) => return error(400, "limit param must be an integer"),
    };
    let start = match get("marker") {
        None => 0,
        Some(marker) => match world.volume_pos.get(marker) {
            Some(&p) => p + 1,
            None => return error(400, &format!("Marker {marker} could not be found.")),
        },
    };
    let page: Vec<&Volume> = world.volume_order[start.min(world.volume_order.len())..]
        .iter()
        .map(|id| &world.volumes[id])
        .filter(|v| all_tenants || v.project_id == ctx.caller.project_id)
        .filter(|v| get("status").is_none_or(|s| s == v.status))
        .filter(|v| get("name").is_none_or(|n| n == v.name))
        .take(limit)
        .collect();
    let items: Vec<Value> = page
        .iter()
        .map(|v| {
            if detail {
                volume_view(ctx, v)
            } else {
                json!({"id": v.id, "name": v.name, "links": ctx.volume_links(&v.id)})
            }
        })
        .collect();
    let mut body = json!({"volumes": items});
    if limit > 0 && page.len() == limit {
        let path = if detail { "volumes/detail" } else { "volumes" };
        body["volumes_links"] = json!([{"rel": "next", "href": crate::nova::next_link(&format!("{}/{path}", ctx.endpoint), &pairs, &page[limit - 1].id)}]);
    }
    json_response(200, &body)
}

async fn show_volume(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<CinderCtx>,
    Path(params): Path<HashMap<String, String>>,
) -> Response<Body> {
    let mut world = shared.world.lock();
    world.tick();
    let id = params.get("volume_id").cloned().unwrap_or_default();
    match visible_volume(&world, &ctx.caller, &id) {
        Ok(v) => json_response(200, &json!({"volume": volume_view(&ctx, v)})),
        Err(e) => world_error(e),
    }
}

fn parse_json(body: &[u8]) -> Result<Value, world::Error> {
    serde_json::from_slice(body)
        .map_err(|_| world::Error::BadRequest("Malformed request body".into()))
}

async fn volume_action(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<CinderCtx>,
    Path(params): Path<HashMap<String, String>>,
    body: Bytes,
) -> Response<Body> {
    let id = params.get("volume_id").cloned().unwrap_or_default();
    let body = match parse_json(&body) {
        Ok(b) => b,
        Err(e) => return world_error(e),
    };
    let Some((name, value)) = body.as_object().and_then(|o| o.iter().next()) else {
        return error(400, "Malformed request body");
    };
    let mut world = shared.world.lock();
    if let Err(e) = visible_volume(&world, &ctx.caller, &id) {
        return world_error(e);
    }
    let caller = &ctx.caller;
    let result = match name.as_str() {
        "os-force_detach" => {
            if !caller.is_admin {
                return forbidden("volume_extension:volume_admin_actions:force_detach");
            }
            if !(value.is_object() || value.is_null()) {
                return error(
                    400,
                    &format!("Invalid value '{value}' for os-force_detach."),
                );
            }
            let attachment = value.get("attachment_id").and_then(Value::as_str);
            let host = value.pointer("/connector/host").and_then(Value::as_str);
            world.force_detach(caller, &id, attachment, host)
        }
        "os-reset_status" => {
            if !caller.is_admin {
                return forbidden("volume_extension:volume_admin_actions:reset_status");
            }
            let field = |k: &str| {
                value
                    .get(k)
                    .and_then(Value::as_str)
                    .map(str::to_ascii_lowercase)
            };
            world.reset_status(
                &id,
                field("status").as_deref(),
                field("attach_status").as_deref(),
                field("migration_status").as_deref(),
            )
        }
        "os-begin_detaching" => world.begin_detaching(&id),
        "os-roll_detaching" => world.roll_detaching(&id),
        "os-terminate_connection" => {
            let host = value
                .pointer("/connector/host")
                .and_then(Value::as_str)
                .map(str::to_string);
            terminate_connection(&world, caller, &id, host.as_deref())
        }
        "os-detach" => {
            let attachment = value.get("attachment_id").and_then(Value::as_str);
            world.force_detach(
                &Caller {
                    is_service: true,
                    ..caller.clone()
                },
                &id,
                attachment,
                None,
            )
        }
        other => return error(400, &format!("There is no such action: {other}")),
    };
    match result {
        Ok(()) => empty_json_response(202),
        Err(e) => world_error(e),
    }
}

/// The legacy `os-terminate_connection`: only the "use the Compute API" rule is enforced; the
/// export itself is not modelled.
fn terminate_connection(
    world: &World,
    caller: &Caller,
    id: &str,
    host: Option<&str>,
) -> Result<(), world::Error> {
    let volume = world.volume(id)?;
    for a in volume
        .attachments
        .iter()
        .filter(|a| host.is_none_or(|h| a.host_name.as_deref() == Some(h)))
    {
        let used = a
            .instance_id
            .as_deref()
            .and_then(|s| world.instances.get(s))
            .is_some_and(|inst| {
                inst.bdms
                    .iter()
                    .any(|b| b.attachment_id.as_deref() == Some(a.id.as_str()))
            });
        if used && !caller.is_service && a.connection_info.is_some() {
            return Err(world::Error::Conflict(format!(
                "Detach volume from instance {} using the Compute API",
                a.instance_id.as_deref().unwrap_or("")
            )));
        }
    }
    Ok(())
}

fn attachment_summary(a: &Attachment) -> Value {
    json!({"id": a.id, "status": a.attach_status.as_str(), "instance": a.instance_id, "volume_id": a.volume_id})
}

fn attachment_detail(a: &Attachment) -> Value {
    let mut v = attachment_summary(a);
    v["attached_at"] = json!(a.attached_at.as_ref().map(stamp).unwrap_or_default());
    v["detached_at"] = json!(a.detached_at.as_ref().map(stamp).unwrap_or_default());
    v["attach_mode"] = json!(a.mode);
    v["connection_info"] = json!(a.connection_info.clone().unwrap_or_else(|| json!({})));
    v
}

fn needs(ctx: &CinderCtx, minor: u32) -> Result<(), world::Error> {
    if ctx.at_least(minor) {
        Ok(())
    } else {
        Err(world::Error::NotFound(
            "The resource could not be found.".into(),
        ))
    }
}

fn attachments(
    shared: &Shared,
    ctx: &CinderCtx,
    query: Option<&str>,
    detail: bool,
) -> Response<Body> {
    if let Err(e) = needs(ctx, 27) {
        return world_error(e);
    }
    let pairs = query_pairs(query);
    let get = |key: &str| {
        pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let all_tenants = ctx.caller.is_admin && get("all_tenants").is_some();
    let mut world = shared.world.lock();
    world.tick();
    let items: Vec<Value> = world
        .volume_order
        .iter()
        .map(|id| &world.volumes[id])
        .filter(|v| {
            ctx.caller.is_admin
                && (all_tenants || get("volume_id").is_some() || get("instance_id").is_some())
                || v.project_id == ctx.caller.project_id
        })
        .flat_map(|v| v.attachments.iter())
        .filter(|a| get("volume_id").is_none_or(|x| x == a.volume_id))
        .filter(|a| get("instance_id").is_none_or(|x| Some(x) == a.instance_id.as_deref()))
        .filter(|a| {
            get("status")
                .or(get("attach_status"))
                .is_none_or(|x| x == a.attach_status.as_str())
        })
        .map(|a| {
            if detail {
                attachment_detail(a)
            } else {
                attachment_summary(a)
            }
        })
        .collect();
    json_response(200, &json!({"attachments": items}))
}

async fn list_attachments(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<CinderCtx>,
    RawQuery(query): RawQuery,
) -> Response<Body> {
    attachments(&shared, &ctx, query.as_deref(), false)
}

async fn list_attachments_detail(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<CinderCtx>,
    RawQuery(query): RawQuery,
) -> Response<Body> {
    attachments(&shared, &ctx, query.as_deref(), true)
}

fn visible_attachment<'w>(
    world: &'w World,
    caller: &Caller,
    id: &str,
) -> Result<&'w Attachment, world::Error> {
    match world.attachment(id) {
        Ok((v, a)) if caller.is_admin || v.project_id == caller.project_id => Ok(a),
        Ok(_) => Err(world::Error::NotFound(format!(
            "Volume attachment could not be found with filter: attachment_id = {id}."
        ))),
        Err(e) => Err(e),
    }
}

async fn show_attachment(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<CinderCtx>,
    Path(params): Path<HashMap<String, String>>,
) -> Response<Body> {
    if let Err(e) = needs(&ctx, 27) {
        return world_error(e);
    }
    let id = params.get("attachment_id").cloned().unwrap_or_default();
    let mut world = shared.world.lock();
    world.tick();
    match visible_attachment(&world, &ctx.caller, &id) {
        Ok(a) => json_response(200, &json!({"attachment": attachment_detail(a)})),
        Err(e) => world_error(e),
    }
}

async fn create_attachment(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<CinderCtx>,
    body: Bytes,
) -> Response<Body> {
    if let Err(e) = needs(&ctx, 27) {
        return world_error(e);
    }
    let body = match parse_json(&body) {
        Ok(b) => b,
        Err(e) => return world_error(e),
    };
    let Some(a) = body.get("attachment") else {
        return error(
            400,
            "Invalid input for field/attribute attachment. 'attachment' is a required property",
        );
    };
    let Some(volume_id) = a.get("volume_uuid").and_then(Value::as_str) else {
        return error(
            400,
            "Invalid input for field/attribute volume_uuid. 'volume_uuid' is a required property",
        );
    };
    let mode = match a.get("mode") {
        Some(_) if !ctx.at_least(54) => {
            return error(400, "Invalid input: 'mode' requires microversion 3.54");
        }
        Some(Value::String(m)) if m == "rw" || m == "ro" => m.clone(),
        Some(other) => {
            return error(
                400,
                &format!("Invalid input for field/attribute mode. Value: {other}."),
            );
        }
        None => "rw".into(),
    };
    let mut world = shared.world.lock();
    if let Err(e) = visible_volume(&world, &ctx.caller, volume_id) {
        return world_error(e);
    }
    let request = NewAttachment {
        volume_id: volume_id.into(),
        instance_id: a
            .get("instance_uuid")
            .and_then(Value::as_str)
            .map(str::to_string),
        connector: a.get("connector").filter(|c| c.is_object()).cloned(),
        mode,
    };
    match world.attachment_create(request) {
        Ok(created) => json_response(200, &json!({"attachment": attachment_detail(&created)})),
        Err(e) => world_error(e),
    }
}

async fn update_attachment(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<CinderCtx>,
    Path(params): Path<HashMap<String, String>>,
    body: Bytes,
) -> Response<Body> {
    if let Err(e) = needs(&ctx, 27) {
        return world_error(e);
    }
    let id = params.get("attachment_id").cloned().unwrap_or_default();
    let body = match parse_json(&body) {
        Ok(b) => b,
        Err(e) => return world_error(e),
    };
    let Some(connector) = body
        .pointer("/attachment/connector")
        .filter(|c| c.is_object())
        .cloned()
    else {
        return error(
            400,
            "Invalid input for field/attribute connector. 'connector' is a required property",
        );
    };
    let mut world = shared.world.lock();
    if let Err(e) = visible_attachment(&world, &ctx.caller, &id) {
        return world_error(e);
    }
    match world.attachment_update(&id, connector) {
        Ok(updated) => json_response(200, &json!({"attachment": attachment_detail(&updated)})),
        Err(e) => world_error(e),
    }
}

async fn delete_attachment(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<CinderCtx>,
    Path(params): Path<HashMap<String, String>>,
) -> Response<Body> {
    if let Err(e) = needs(&ctx, 27) {
        return world_error(e);
    }
    let id = params.get("attachment_id").cloned().unwrap_or_default();
    let mut world = shared.world.lock();
    if let Err(e) = visible_attachment(&world, &ctx.caller, &id) {
        return world_error(e);
    }
    match world.attachment_delete(&ctx.caller, &id) {
        Ok(remaining) => json_response(
            200,
            &json!({"attachments": remaining.iter().map(attachment_summary).collect::<Vec<_>>()}),
        ),
        Err(e) => world_error(e),
    }
}

async fn attachment_action(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<CinderCtx>,
    Path(params): Path<HashMap<String, String>>,
    body: Bytes,
) -> Response<Body> {
    if let Err(e) = needs(&ctx, 44) {
        return world_error(e);
    }
    let id = params.get("attachment_id").cloned().unwrap_or_default();
    let body = match parse_json(&body) {
        Ok(b) => b,
        Err(e) => return world_error(e),
    };
    if body.get("os-complete").is_none() {
        return error(400, "There is no such action");
    }
    let mut world = shared.world.lock();
    if let Err(e) = visible_attachment(&world, &ctx.caller, &id) {
        return world_error(e);
    }
    match world.attachment_complete(&id) {
        Ok(()) => empty_response(204),
        Err(e) => world_error(e),
    }
}
