//! `POST /servers` and `DELETE /servers/{id}`: the body checked as Nova's
//! schema does (the `server` object, `name`, `flavorRef`, `imageRef`, string
//! metadata, `networks` required from 2.37 as `"auto"`, `"none"` or a list),
//! Nova's 202 with the server's id, links and admin password, and 204 for a
//! delete. The simulator has no Neutron: a list of networks names ones that
//! do not exist (Nova's 400), and servers get no addresses.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Extension, Path, State};
use axum::http::{HeaderValue, Response, header};
use serde_json::{Map, Value, json};

use super::{NovaCtx, parse_body, world_error};
use crate::envelope::{empty_response, json_response};
use crate::server::Shared;
use crate::world::{self, NewServer};

/// The `server` keys Nova's create schema knows (those of the extensions
/// the simulator has no use for are accepted and ignored).
const KNOWN: [&str; 21] = [
    "name",
    "imageRef",
    "flavorRef",
    "adminPass",
    "metadata",
    "networks",
    "availability_zone",
    "key_name",
    "security_groups",
    "user_data",
    "config_drive",
    "min_count",
    "max_count",
    "return_reservation_id",
    "description",
    "tags",
    "hostname",
    "OS-DCF:diskConfig",
    "accessIPv4",
    "accessIPv6",
    "personality",
];

fn invalid(field: &str, value: &Value, why: &str) -> world::Error {
    world::Error::BadRequest(format!(
        "Invalid input for field/attribute {field}. Value: {value}. {why}"
    ))
}

fn required_string(server: &Map<String, Value>, field: &str) -> Result<String, world::Error> {
    match server.get(field) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(other) => Err(invalid(field, other, "is not a non-empty string")),
        None => Err(world::Error::BadRequest(format!(
            "Invalid input for field/attribute server. Value: {}. '{field}' is a required property",
            Value::Object(server.clone())
        ))),
    }
}

fn metadata(server: &Map<String, Value>) -> Result<BTreeMap<String, String>, world::Error> {
    let Some(value) = server.get("metadata") else {
        return Ok(BTreeMap::new());
    };
    let Some(object) = value.as_object() else {
        return Err(invalid("metadata", value, "is not of type 'object'"));
    };
    object
        .iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            other => Err(invalid(k, other, "is not of type 'string'")),
        })
        .collect()
}

/// `networks`: required from 2.37; `"auto"` and `"none"` need no network
/// service, a list names networks this cloud does not have.
fn check_networks(ctx: &NovaCtx, server: &Map<String, Value>) -> Result<(), world::Error> {
    match server.get("networks") {
        None if ctx.at_least(37) => Err(world::Error::BadRequest(format!(
            "Invalid input for field/attribute server. Value: {}. 'networks' is a required property",
            Value::Object(server.clone())
        ))),
        None => Ok(()),
        Some(Value::String(s)) if s == "auto" || s == "none" => Ok(()),
        Some(Value::Array(list)) if list.is_empty() => Ok(()),
        Some(Value::Array(list)) => {
            let first = &list[0];
            let name = first
                .get("uuid")
                .or_else(|| first.get("port"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            Err(world::Error::BadRequest(format!(
                "Network {name} could not be found."
            )))
        }
        Some(other) => Err(invalid(
            "networks",
            other,
            "is not valid under any of the given schemas",
        )),
    }
}

/// The create body, validated.
fn new_server(ctx: &NovaCtx, body: &Value) -> Result<NewServer, world::Error> {
    let Some(server) = body.get("server").and_then(Value::as_object) else {
        return Err(world::Error::BadRequest(format!(
            "Invalid input for field/attribute server. Value: {body}. 'server' is a required property"
        )));
    };
    if let Some(extra) = server.keys().find(|k| !KNOWN.contains(&k.as_str())) {
        return Err(world::Error::BadRequest(format!(
            "Invalid input for field/attribute server. Value: {}. Additional properties are not allowed ('{extra}' was unexpected)",
            Value::Object(server.clone())
        )));
    }
    check_networks(ctx, server)?;
    Ok(NewServer {
        name: required_string(server, "name")?,
        flavor_ref: required_string(server, "flavorRef")?,
        image_ref: required_string(server, "imageRef")?,
        metadata: metadata(server)?,
    })
}

pub(crate) async fn create(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    body: Bytes,
) -> Response<Body> {
    let request = match parse_body(&body).and_then(|b| new_server(&ctx, &b)) {
        Ok(r) => r,
        Err(e) => return world_error(e),
    };
    let created = shared
        .world
        .lock()
        .create_server(&ctx.caller, request, &ctx.request_id);
    let (id, password) = match created {
        Ok(c) => c,
        Err(e) => return world_error(e),
    };
    let href = format!("{}/servers/{id}", ctx.endpoint);
    let body = json!({"server": {
        "id": id,
        "links": [
            {"rel": "self", "href": href},
            {"rel": "bookmark", "href": format!("{}/servers/{id}", ctx.bookmark)},
        ],
        "OS-DCF:diskConfig": "MANUAL",
        "security_groups": [{"name": "default"}],
        "adminPass": password,
    }});
    let mut response = json_response(202, &body);
    if let Ok(location) = HeaderValue::from_str(&href) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

pub(crate) async fn delete(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    Path(server_id): Path<String>,
) -> Response<Body> {
    match shared.world.lock().delete_server(&ctx.caller, &server_id) {
        Ok(()) => empty_response(204),
        Err(e) => world_error(e),
    }
}
