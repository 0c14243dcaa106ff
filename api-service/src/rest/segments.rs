//! `/v1/segments`: Masakari's failover segments over the service layer
//! (`masakari/api/openstack/ha/segments.py`).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::RestState;
use super::body::{JsonBody, resource};
use super::call::Call;
use super::convert::{self, RECOVERY_METHODS, SegmentView};
use super::error::RestError;
use super::listing::{Listing, everything};
use super::query::Params;
use crate::auth::Operation;
use crate::domain::{
    NewSegment, ReturnToService, Segment, SegmentFilter, SegmentId, SegmentUpdate,
};

/// The columns Masakari sorts segments by.
const SORT_KEYS: &[&str] = &[
    "id",
    "uuid",
    "name",
    "description",
    "service_type",
    "recovery_method",
    "enabled",
    "created_at",
    "updated_at",
    "deleted_at",
    "deleted",
];

#[derive(Debug, Deserialize)]
pub struct SegmentPath {
    segment_id: String,
}

/// A segment id from the path; anything else is an unknown segment.
pub fn segment_id(raw: &str) -> Result<SegmentId, RestError> {
    raw.parse()
        .map_err(|_| RestError::NotFound(format!("No failover segment with id {raw}.")))
}

fn views(segments: &[Segment]) -> Vec<Value> {
    segments
        .iter()
        .map(|s| json!(SegmentView::from(s)))
        .collect()
}

#[tracing::instrument(skip_all)]
pub async fn list(
    State(state): State<RestState>,
    call: Call,
    params: Params,
) -> Result<Response, RestError> {
    call.allow(&state, Operation::ListSegments).await?;
    let listing = Listing::from_params(&params, SORT_KEYS)?;
    let api = &state.api;
    // An unknown recovery method matches no segment, as in Masakari.
    let method = params
        .get("recovery_method")
        .map(|m| convert::recovery_method(m).ok_or(()))
        .transpose();
    let filter = SegmentFilter {
        recovery_method: method.unwrap_or_default(),
        service_type: params.get("service_type").map(str::to_owned),
        enabled: params.bool("enabled")?,
        name: None,
    };
    let matching = match method {
        Ok(_) => everything(|page| api.list_segments(filter.clone(), page)).await?,
        Err(()) => Vec::new(),
    };
    let selected = listing
        .select(views(&matching), "uuid", async {
            let all = everything(|page| api.list_segments(SegmentFilter::default(), page)).await?;
            Ok(views(&all))
        })
        .await?;
    Ok(Json(json!({ "segments": selected })).into_response())
}

#[tracing::instrument(skip_all, fields(segment_id = %path.segment_id))]
pub async fn show(
    State(state): State<RestState>,
    call: Call,
    Path(path): Path<SegmentPath>,
) -> Result<Response, RestError> {
    call.allow(&state, Operation::GetSegment).await?;
    let segment = state.api.get_segment(segment_id(&path.segment_id)?).await?;
    Ok(Json(json!({ "segment": SegmentView::from(&segment) })).into_response())
}

/// The properties a body may set at the request's microversion.
fn allowed(call: &Call) -> &'static [&'static str] {
    if call.version.has_segment_enabled() {
        &[
            "name",
            "description",
            "recovery_method",
            "service_type",
            "enabled",
        ]
    } else {
        &["name", "description", "recovery_method", "service_type"]
    }
}

fn method_of(name: &str) -> Result<crate::domain::RecoveryMethod, RestError> {
    convert::recovery_method(name)
        .ok_or_else(|| RestError::invalid("recovery_method", format!("{name:?} is not known")))
}

#[tracing::instrument(skip_all)]
pub async fn create(
    State(state): State<RestState>,
    call: Call,
    JsonBody(body): JsonBody,
) -> Result<Response, RestError> {
    call.allow(&state, Operation::CreateSegment).await?;
    let fields = resource(body, "segment", allowed(&call))?;
    let new = NewSegment {
        name: fields.string("name")?,
        description: fields.nullable_string("description")?.flatten(),
        service_type: fields.string("service_type")?,
        recovery_method: method_of(&fields.one_of("recovery_method", &RECOVERY_METHODS)?)?,
        enabled: fields.optional_bool("enabled")?.unwrap_or(true),
        // Not in Masakari's API: the default, manual; gRPC and the CLI set it.
        return_to_service: ReturnToService::Manual,
    };
    let segment = state.api.create_segment(new).await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "segment": SegmentView::from(&segment) })),
    )
        .into_response())
}

#[tracing::instrument(skip_all, fields(segment_id = %path.segment_id))]
pub async fn update(
    State(state): State<RestState>,
    call: Call,
    Path(path): Path<SegmentPath>,
    JsonBody(body): JsonBody,
) -> Result<Response, RestError> {
    call.allow(&state, Operation::UpdateSegment).await?;
    let id = segment_id(&path.segment_id)?;
    let fields = resource(body, "segment", allowed(&call))?;
    let update = SegmentUpdate {
        name: fields.optional_string("name")?,
        // null clears the description.
        description: fields
            .nullable_string("description")?
            .map(Option::unwrap_or_default),
        service_type: fields.optional_string("service_type")?,
        recovery_method: fields
            .optional_one_of("recovery_method", &RECOVERY_METHODS)?
            .map(|m| method_of(&m))
            .transpose()?,
        enabled: fields.optional_bool("enabled")?,
        return_to_service: None,
    };
    let segment = state.api.update_segment(id, update).await?;
    Ok(Json(json!({ "segment": SegmentView::from(&segment) })).into_response())
}

#[tracing::instrument(skip_all, fields(segment_id = %path.segment_id))]
pub async fn delete(
    State(state): State<RestState>,
    call: Call,
    Path(path): Path<SegmentPath>,
) -> Result<Response, RestError> {
    call.allow(&state, Operation::DeleteSegment).await?;
    state
        .api
        .delete_segment(segment_id(&path.segment_id)?)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
