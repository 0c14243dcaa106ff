//! Nova `GET /os-migrations`: filters, 2.59 paging and newest-first order, 2.80 owner fields.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Extension, RawQuery, State};
use axum::http::Response;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{NovaCtx, error, forbidden, iso_micro, next_link, parse_limit, world_error};
use crate::envelope::json_response;
use crate::server::{Shared, query_pairs};
use crate::world::model::Migration;

fn view(ctx: &NovaCtx, m: &Migration) -> Value {
    let mut v = json!({
        "id": m.id,
        "instance_uuid": m.instance_uuid,
        "status": m.status.as_str(),
        "source_compute": m.source_compute,
        "source_node": m.source_node,
        "dest_compute": m.dest_compute,
        "dest_node": m.dest_node,
        "dest_host": m.dest_host,
        "old_instance_type_id": null,
        "new_instance_type_id": null,
        "created_at": iso_micro(&m.created_at),
        "updated_at": m.updated_at.as_ref().map(iso_micro),
    });
    if ctx.at_least(23) {
        v["migration_type"] = json!(m.migration_type);
    }
    if ctx.at_least(59) {
        v["uuid"] = json!(m.uuid);
    }
    if ctx.at_least(80) {
        v["user_id"] = json!(m.user_id);
        v["project_id"] = json!(m.project_id);
    }
    v
}

fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
                .ok()
                .map(|n| n.and_utc())
        })
}

pub(crate) async fn list(
    State(shared): State<Arc<Shared>>,
    Extension(ctx): Extension<NovaCtx>,
    RawQuery(query): RawQuery,
) -> Response<Body> {
    if !ctx.caller.is_admin {
        return forbidden("os_compute_api:os-migrations:index");
    }
    let pairs = query_pairs(query.as_deref());
    let get = |key: &str| {
        pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let mut since = None;
    let mut before = None;
    for (key, slot, min) in [
        ("changes-since", &mut since, 59),
        ("changes-before", &mut before, 66),
    ] {
        if let Some(text) = get(key).filter(|_| ctx.at_least(min)) {
            match parse_time(text) {
                Some(t) => *slot = Some(t),
                None => {
                    return error(
                        400,
                        &format!(
                            "Invalid input for query parameters {key}. Value: {text}. '{text}' is not a 'date-time'"
                        ),
                    );
                }
            }
        }
    }
    let mut world = shared.world.lock();
    world.tick();
    let newest_first = ctx.at_least(59);
    let owner = ctx.at_least(80);
    let matches = |m: &&Migration| {
        get("instance_uuid").is_none_or(|v| v == m.instance_uuid)
            && get("migration_type").is_none_or(|v| v == m.migration_type)
            && get("source_compute").is_none_or(|v| v == m.source_compute)
            && get("status").is_none_or(|v| v == m.status.as_str())
            && get("host")
                .is_none_or(|v| v == m.source_compute || m.dest_compute.as_deref() == Some(v))
            && (!owner || get("user_id").is_none_or(|v| v == m.user_id))
            && (!owner || get("project_id").is_none_or(|v| v == m.project_id))
            // Nova compares the column: a record never updated (NULL)
            // matches neither.
            && since.is_none_or(|s| m.updated_at.is_some_and(|u| u >= s))
            && before.is_none_or(|b| m.updated_at.is_some_and(|u| u <= b))
    };
    let mut ordered: Vec<&Migration> = world.migrations.iter().collect();
    if newest_first {
        ordered.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)));
    }
    let (limit, start) = if newest_first {
        let limit = match parse_limit(get("limit"), world.settings.max_limit) {
            Ok(n) => n,
            Err(e) => return world_error(e),
        };
        let start = match get("marker") {
            None => 0,
            Some(marker) => match ordered.iter().position(|m| m.uuid == marker) {
                Some(pos) => pos + 1,
                None => return error(400, &format!("Marker {marker} could not be found.")),
            },
        };
        (limit, start)
    } else {
        (usize::MAX, 0)
    };
    let page: Vec<&Migration> = ordered[start..]
        .iter()
        .copied()
        .filter(|m| matches(m))
        .take(limit)
        .collect();
    let mut body = json!({"migrations": page.iter().map(|m| view(&ctx, m)).collect::<Vec<_>>()});
    if newest_first && limit > 0 && page.len() == limit {
        let last = &page[limit - 1].uuid;
        body["migrations_links"] = json!([{"rel": "next", "href": next_link(&format!("{}/os-migrations", ctx.endpoint), &pairs, last)}]);
    }
    json_response(200, &body)
}
