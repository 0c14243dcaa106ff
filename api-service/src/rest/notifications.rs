//! `/v1/notifications`: failure reports from monitoring agents, over the
//! service layer (`masakari/api/openstack/ha/notifications.py`). A
//! notification created here goes through the same intake and is recovered
//! like one created over gRPC.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::RestState;
use super::body::{JsonBody, python_repr, resource};
use super::call::Call;
use super::convert::{self, NOTIFICATION_TYPES, NotificationView, shown_workflow_details};
use super::error::RestError;
use super::listing::{Listing, everything};
use super::query::Params;
use crate::auth::Operation;
use crate::domain::{NewNotification, Notification, NotificationFilter, NotificationId};

/// The columns Masakari sorts notifications by.
const SORT_KEYS: &[&str] = &[
    "id",
    "notification_uuid",
    "generated_time",
    "type",
    "payload",
    "source_host_uuid",
    "failover_segment_uuid",
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

pub fn notification_id(raw: &str) -> Result<NotificationId, RestError> {
    raw.parse()
        .map_err(|_| RestError::NotFound(format!("No notification with id {raw}.")))
}

fn views(notifications: &[Notification]) -> Vec<Value> {
    notifications
        .iter()
        .map(|n| json!(NotificationView::from(n)))
        .collect()
}

/// The filters; `None` when a value can match nothing (an unknown status
/// or type, a source host that is not a UUID), as Masakari's string
/// comparisons then find nothing.
fn filter(params: &Params) -> Result<Option<NotificationFilter>, RestError> {
    let mut filter = NotificationFilter::default();
    if let Some(status) = params.get("status") {
        match convert::notification_status(status) {
            Some(status) => filter.status = Some(status),
            None => return Ok(None),
        }
    }
    if let Some(kind) = params.get("type") {
        match convert::notification_type(kind) {
            Some(kind) => filter.notification_type = Some(kind),
            None => return Ok(None),
        }
    }
    if let Some(host) = params.get("source_host_uuid") {
        match host.parse() {
            Ok(host) => filter.source_host_id = Some(host),
            Err(_) => return Ok(None),
        }
    }
    if let Some(since) = params.get("generated-since") {
        filter.generated_since =
            Some(convert::parse_time(since).ok_or_else(|| {
                RestError::BadRequest("Invalid generated-since value".to_owned())
            })?);
    }
    Ok(Some(filter))
}

#[tracing::instrument(skip_all)]
pub async fn list(
    State(state): State<RestState>,
    call: Call,
    params: Params,
) -> Result<Response, RestError> {
    call.allow(&state, Operation::ListNotifications).await?;
    let listing = Listing::from_params(&params, SORT_KEYS)?;
    let api = &state.api;
    let matching = match filter(&params)? {
        Some(filter) => everything(|page| api.list_notifications(filter.clone(), page)).await?,
        None => Vec::new(),
    };
    let selected = listing
        .select(views(&matching), "notification_uuid", async {
            let all =
                everything(|page| api.list_notifications(NotificationFilter::default(), page))
                    .await?;
            Ok(views(&all))
        })
        .await?;
    Ok(Json(json!({ "notifications": selected })).into_response())
}

#[tracing::instrument(skip_all, fields(notification_id = %path.notification_id))]
pub async fn show(
    State(state): State<RestState>,
    call: Call,
    Path(path): Path<NotificationPath>,
) -> Result<Response, RestError> {
    call.allow(&state, Operation::GetNotification).await?;
    let (notification, progress) = state
        .api
        .get_notification(notification_id(&path.notification_id)?)
        .await?;
    let mut view = NotificationView::from(&notification);
    if call.version.has_workflow_details() {
        view.recovery_workflow_details = Some(shown_workflow_details(&notification, &progress));
    }
    Ok(Json(json!({ "notification": view })).into_response())
}

#[tracing::instrument(skip_all)]
pub async fn create(
    State(state): State<RestState>,
    call: Call,
    JsonBody(body): JsonBody,
) -> Result<Response, RestError> {
    call.allow(&state, Operation::CreateNotification).await?;
    let fields = resource(
        body,
        "notification",
        &["type", "hostname", "generated_time", "payload"],
    )?;
    let kind = fields.one_of("type", &NOTIFICATION_TYPES)?;
    let hostname = fields.string("hostname")?;
    let generated = fields.string("generated_time")?;
    let payload = fields.string_map("payload")?;
    let generated_time = convert::parse_time(&generated).ok_or_else(|| {
        let repr = python_repr(&Value::String(generated.clone()));
        RestError::invalid(
            "generated_time",
            format!("Value: {repr}. {repr} is not a 'date-time'"),
        )
    })?;
    let new = NewNotification {
        notification_type: convert::notification_type(&kind)
            .ok_or_else(|| RestError::invalid("type", format!("{kind:?} is not known")))?,
        hostname,
        generated_time,
        payload,
        idempotency_key: None,
        trace_context: call.traceparent(),
    };
    let notification = state.api.create_notification(new).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "notification": NotificationView::from(&notification) })),
    )
        .into_response())
}
