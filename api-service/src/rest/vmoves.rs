//! `/v1/notifications/{id}/vmoves`: the per-instance records of a host
//! recovery (`masakari/api/openstack/ha/vmoves.py`). As in Masakari they
//! are not gated by microversion (openstacksdk asks for them at 1.0), and a
//! notification that is not a COMPUTE_HOST one has none (400).

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::RestState;
use super::call::Call;
use super::convert::{self, VMoveView};
use super::error::RestError;
use super::listing::{Listing, everything};
use super::notifications::notification_id;
use super::query::Params;
use crate::auth::Operation;
use crate::domain::{NotificationId, NotificationType, VMove, VMoveFilter, VMoveId};

/// The columns Masakari sorts vmoves by.
const SORT_KEYS: &[&str] = &[
    "id",
    "uuid",
    "notification_uuid",
    "instance_uuid",
    "instance_name",
    "source_host",
    "dest_host",
    "start_time",
    "end_time",
    "type",
    "status",
    "message",
    "created_at",
    "updated_at",
    "deleted_at",
    "deleted",
];

#[derive(Debug, Deserialize)]
pub struct NotificationPath {
    notification_id: String,
}

#[derive(Debug, Deserialize)]
pub struct VMovePath {
    notification_id: String,
    vmove_id: String,
}

fn views(vmoves: &[VMove]) -> Vec<Value> {
    vmoves.iter().map(|v| json!(VMoveView::from(v))).collect()
}

/// The notification, which must exist and be a host failure.
async fn host_notification(state: &RestState, raw: &str) -> Result<NotificationId, RestError> {
    let id = notification_id(raw)?;
    let (notification, _) = state.api.get_notification(id).await?;
    match notification.notification_type {
        NotificationType::ComputeHost => Ok(id),
        NotificationType::Process | NotificationType::Vm => Err(RestError::BadRequest(format!(
            "This notification {id} without vm moves."
        ))),
    }
}

#[tracing::instrument(skip_all, fields(notification_id = %path.notification_id))]
pub async fn list(
    State(state): State<RestState>,
    call: Call,
    Path(path): Path<NotificationPath>,
    params: Params,
) -> Result<Response, RestError> {
    call.allow(&state, Operation::ListVmoves).await?;
    let listing = Listing::from_params(&params, SORT_KEYS)?;
    let id = host_notification(&state, &path.notification_id).await?;
    // Unknown values match nothing, as Masakari's string comparisons.
    let status = params
        .get("status")
        .map(|s| convert::vmove_status(s).ok_or(()));
    let kind = params.get("type").map(|t| convert::vmove_type(t).ok_or(()));
    let api = &state.api;
    let matching = match (status.transpose(), kind.transpose()) {
        (Ok(status), Ok(vmove_type)) => {
            let filter = VMoveFilter { status, vmove_type };
            everything(|page| api.list_vmoves(id, filter.clone(), page)).await?
        }
        _ => Vec::new(),
    };
    let selected = listing
        .select(views(&matching), "uuid", async {
            let all = everything(|page| api.list_vmoves(id, VMoveFilter::default(), page)).await?;
            Ok(views(&all))
        })
        .await?;
    Ok(Json(json!({ "vmoves": selected })).into_response())
}

#[tracing::instrument(skip_all, fields(notification_id = %path.notification_id, vmove_id = %path.vmove_id))]
pub async fn show(
    State(state): State<RestState>,
    call: Call,
    Path(path): Path<VMovePath>,
) -> Result<Response, RestError> {
    call.allow(&state, Operation::GetVmove).await?;
    let notification = host_notification(&state, &path.notification_id).await?;
    let id: VMoveId = path
        .vmove_id
        .parse()
        .map_err(|_| RestError::NotFound(format!("No vm move with id {}.", path.vmove_id)))?;
    let vmove = state.api.get_vmove(notification, id).await?;
    Ok(Json(json!({ "vmove": VMoveView::from(&vmove) })).into_response())
}
