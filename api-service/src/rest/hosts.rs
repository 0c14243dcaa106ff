//! `/v1/segments/{segment_id}/hosts`: Masakari's hosts over the service
//! layer (`masakari/api/openstack/ha/hosts.py`). A host is found only under
//! its own segment; each shows that segment in full.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::RestState;
use super::body::{JsonBody, resource};
use super::call::Call;
use super::convert::HostView;
use super::error::RestError;
use super::listing::{Listing, everything};
use super::query::Params;
use super::segments::segment_id;
use crate::auth::Operation;
use crate::domain::{Host, HostFilter, HostId, HostUpdate, NewHost, Segment};

/// The columns Masakari sorts hosts by.
const SORT_KEYS: &[&str] = &[
    "id",
    "uuid",
    "name",
    "failover_segment_id",
    "type",
    "reserved",
    "control_attributes",
    "on_maintenance",
    "created_at",
    "updated_at",
    "deleted_at",
    "deleted",
];

/// The properties a host body may have.
const FIELDS: &[&str] = &[
    "name",
    "type",
    "control_attributes",
    "reserved",
    "on_maintenance",
];

#[derive(Debug, Deserialize)]
pub struct SegmentPath {
    segment_id: String,
}

#[derive(Debug, Deserialize)]
pub struct HostPath {
    segment_id: String,
    host_id: String,
}

fn host_id(raw: &str) -> Result<HostId, RestError> {
    raw.parse()
        .map_err(|_| RestError::NotFound(format!("No host with id {raw}.")))
}

fn views(hosts: &[Host], segment: &Segment) -> Vec<Value> {
    hosts
        .iter()
        .map(|h| json!(HostView::new(h, segment)))
        .collect()
}

fn one(host: &Host, segment: &Segment) -> Value {
    json!({ "host": HostView::new(host, segment) })
}

#[tracing::instrument(skip_all, fields(segment_id = %path.segment_id))]
pub async fn list(
    State(state): State<RestState>,
    call: Call,
    Path(path): Path<SegmentPath>,
    params: Params,
) -> Result<Response, RestError> {
    call.allow(&state, Operation::ListHosts).await?;
    let listing = Listing::from_params(&params, SORT_KEYS)?;
    let filter = HostFilter {
        segment_id: Some(segment_id(&path.segment_id)?),
        host_type: params.get("type").map(str::to_owned),
        reserved: params.bool("reserved")?,
        on_maintenance: params.bool("on_maintenance")?,
        name: params.get("name").map(str::to_owned),
    };
    let api = &state.api;
    let segment = api.get_segment(segment_id(&path.segment_id)?).await?;
    let matching = everything(|page| api.list_hosts(filter.clone(), page)).await?;
    let selected = listing
        .select(views(&matching, &segment), "uuid", async {
            let all = HostFilter {
                segment_id: Some(segment.id),
                ..HostFilter::default()
            };
            let all = everything(|page| api.list_hosts(all.clone(), page)).await?;
            Ok(views(&all, &segment))
        })
        .await?;
    Ok(Json(json!({ "hosts": selected })).into_response())
}

#[tracing::instrument(skip_all, fields(segment_id = %path.segment_id, host_id = %path.host_id))]
pub async fn show(
    State(state): State<RestState>,
    call: Call,
    Path(path): Path<HostPath>,
) -> Result<Response, RestError> {
    call.allow(&state, Operation::GetHost).await?;
    let segment = segment_id(&path.segment_id)?;
    let host = state
        .api
        .get_host(host_id(&path.host_id)?, Some(segment))
        .await?;
    let segment = state.api.get_segment(segment).await?;
    Ok(Json(one(&host, &segment)).into_response())
}

#[tracing::instrument(skip_all, fields(segment_id = %path.segment_id))]
pub async fn create(
    State(state): State<RestState>,
    call: Call,
    Path(path): Path<SegmentPath>,
    JsonBody(body): JsonBody,
) -> Result<Response, RestError> {
    call.allow(&state, Operation::CreateHost).await?;
    let segment = segment_id(&path.segment_id)?;
    let fields = resource(body, "host", FIELDS)?;
    // Masakari requires all three, though `type` and `control_attributes`
    // may be null.
    fields.required_present(&["name", "type", "control_attributes"])?;
    let new = NewHost {
        segment_id: segment,
        name: fields.string("name")?,
        host_type: fields
            .nullable_string("type")?
            .flatten()
            .unwrap_or_default(),
        control_attributes: fields
            .nullable_string("control_attributes")?
            .flatten()
            .unwrap_or_default(),
        reserved: fields.optional_bool("reserved")?.unwrap_or(false),
        on_maintenance: fields.optional_bool("on_maintenance")?.unwrap_or(false),
    };
    let host = state.api.create_host(new).await?;
    let segment = state.api.get_segment(segment).await?;
    Ok((StatusCode::CREATED, Json(one(&host, &segment))).into_response())
}

#[tracing::instrument(skip_all, fields(segment_id = %path.segment_id, host_id = %path.host_id))]
pub async fn update(
    State(state): State<RestState>,
    call: Call,
    Path(path): Path<HostPath>,
    JsonBody(body): JsonBody,
) -> Result<Response, RestError> {
    call.allow(&state, Operation::UpdateHost).await?;
    let segment = segment_id(&path.segment_id)?;
    let id = host_id(&path.host_id)?;
    let fields = resource(body, "host", FIELDS)?;
    let update = HostUpdate {
        name: fields.optional_string("name")?,
        host_type: fields
            .nullable_string("type")?
            .map(Option::unwrap_or_default),
        control_attributes: fields
            .nullable_string("control_attributes")?
            .map(Option::unwrap_or_default),
        reserved: fields.optional_bool("reserved")?,
        on_maintenance: fields.optional_bool("on_maintenance")?,
    };
    let host = state.api.update_host(id, Some(segment), update).await?;
    let segment = state.api.get_segment(segment).await?;
    Ok(Json(one(&host, &segment)).into_response())
}

#[tracing::instrument(skip_all, fields(segment_id = %path.segment_id, host_id = %path.host_id))]
pub async fn delete(
    State(state): State<RestState>,
    call: Call,
    Path(path): Path<HostPath>,
) -> Result<Response, RestError> {
    call.allow(&state, Operation::DeleteHost).await?;
    let segment = segment_id(&path.segment_id)?;
    state
        .api
        .delete_host(host_id(&path.host_id)?, Some(segment))
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
