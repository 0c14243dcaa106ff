//! What an operator may do from the console, each asked for confirmation
//! on a page of its own and done through the same service layer as the
//! APIs: retry a failed notification (`Api::retry_notification`, the
//! `RetryNotification` operation) and put a host on or off maintenance
//! (`Api::update_host`, `UpdateHost`). A POST needs the session's CSRF
//! token and this origin, and the role the operation table names; each
//! is logged with who asked (the audit of the APIs' calls).

use std::collections::HashMap;

use axum::Form;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::Console;
use super::error::ConsoleError;
use super::html::Html;
use super::layout::{self, Nav, badge};
use super::recovery::notification_id;
use super::session::{ClientAddr, Viewer, same_origin};
use crate::auth::Operation;
use crate::domain::{HostId, HostUpdate};

/// Where to go once done.
fn see_other(location: String) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response()
}

fn host_id(raw: &str) -> Result<HostId, ConsoleError> {
    raw.parse()
        .map_err(|_| ConsoleError::BadRequest(format!("host id: {raw:?} is not a UUID")))
}

/// `on=true|false`, named when wrong.
fn maintenance_flag(raw: Option<&String>) -> Result<bool, ConsoleError> {
    match raw.map(String::as_str) {
        Some("true") => Ok(true),
        Some("false") => Ok(false),
        other => Err(ConsoleError::BadRequest(format!(
            "on: must be true or false (got {other:?})"
        ))),
    }
}

/// The form's confirmation: a POST to `action` with the CSRF token and
/// `fields`, and a way back.
fn confirm_form(
    out: &mut Html,
    viewer: &Viewer,
    action: &str,
    fields: &[(&'static str, &'static str)],
    confirm: &'static str,
    back: &str,
) {
    out.raw("<form method=\"post\" action=\"")
        .text(action)
        .raw("\"><input type=\"hidden\" name=\"csrf\" value=\"")
        .text(&viewer.csrf)
        .raw("\">");
    for (name, value) in fields {
        out.raw("<input type=\"hidden\" name=\"")
            .raw(name)
            .raw("\" value=\"")
            .raw(value)
            .raw("\">");
    }
    out.raw("<p><button type=\"submit\" id=\"confirm\" autofocus>")
        .raw(confirm)
        .raw("</button> <a href=\"")
        .text(back)
        .raw("\">Cancel</a></p></form>");
}

/// `GET /console/notifications/{id}/retry`: the confirmation.
pub async fn confirm_retry(
    State(console): State<Console>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    client: ClientAddr,
) -> Result<Response, ConsoleError> {
    let next = format!("/console/notifications/{raw}/retry");
    let viewer = Viewer::admit(
        console.guard(),
        &headers,
        client,
        &[Operation::RetryNotification, Operation::GetNotification],
        Some(&next),
    )
    .await?;
    let id = notification_id(&raw)?;
    let (n, _) = console.api().get_notification(id).await?;
    let back = format!("/console/notifications/{id}");
    let mut body = Html::new();
    body.raw("<h1>Retry the recovery of ")
        .text(&n.hostname)
        .raw("?</h1><p>Notification <code>")
        .text(&id.to_string())
        .raw("</code> is ");
    badge(&mut body, n.status().as_str());
    body.raw(": ")
        .text(n.message.as_deref().unwrap_or(""))
        .raw("</p><p>It runs again at once, with a new retry window; its failed instances go back to pending.</p>");
    confirm_form(&mut body, &viewer, &next, &[], "Retry", &back);
    Ok(layout::page("Retry", &viewer, Nav::Other, &body).into_response())
}

/// `POST /console/notifications/{id}/retry`.
pub async fn retry(
    State(console): State<Console>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    client: ClientAddr,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Response, ConsoleError> {
    same_origin(&headers)?;
    let viewer = admit_action(&console, &headers, client, Operation::RetryNotification).await?;
    viewer.check_csrf(form.get("csrf").map_or("", String::as_str))?;
    let id = notification_id(&raw)?;
    let outcome = console.api().retry_notification(id).await;
    audit(
        &viewer,
        "RetryNotification",
        &id.to_string(),
        outcome.is_ok(),
    );
    outcome?;
    Ok(see_other(format!("/console/notifications/{id}")))
}

/// `GET /console/hosts/{id}/maintenance?on=true|false`: the confirmation.
pub async fn confirm_maintenance(
    State(console): State<Console>,
    Path(raw): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    client: ClientAddr,
) -> Result<Response, ConsoleError> {
    let on = maintenance_flag(query.get("on"))?;
    let next = format!("/console/hosts/{raw}/maintenance?on={on}");
    let viewer = Viewer::admit(
        console.guard(),
        &headers,
        client,
        &[Operation::UpdateHost, Operation::GetHost],
        Some(&next),
    )
    .await?;
    let id = host_id(&raw)?;
    let host = console.api().get_host(id, None).await?;
    let mut body = Html::new();
    if on {
        body.raw("<h1>Put ")
            .text(&host.name)
            .raw(" on maintenance?</h1><p>Failure reports for it are refused while it is, except those saying it is back.</p>");
    } else {
        body.raw("<h1>End the maintenance of ")
            .text(&host.name)
            .raw("?</h1><p>Failure reports for it are taken again, and a failure of it is recovered.</p>");
    }
    let action = format!("/console/hosts/{id}/maintenance");
    let fields: &[(&'static str, &'static str)] = if on {
        &[("on", "true")]
    } else {
        &[("on", "false")]
    };
    let confirm = if on {
        "Put on maintenance"
    } else {
        "End maintenance"
    };
    confirm_form(&mut body, &viewer, &action, fields, confirm, "/console/");
    Ok(layout::page("Maintenance", &viewer, Nav::Other, &body).into_response())
}

/// `POST /console/hosts/{id}/maintenance` with `on=true|false`.
pub async fn maintenance(
    State(console): State<Console>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    client: ClientAddr,
    Form(form): Form<HashMap<String, String>>,
) -> Result<Response, ConsoleError> {
    same_origin(&headers)?;
    let viewer = admit_action(&console, &headers, client, Operation::UpdateHost).await?;
    viewer.check_csrf(form.get("csrf").map_or("", String::as_str))?;
    let id = host_id(&raw)?;
    let on = maintenance_flag(form.get("on"))?;
    let update = HostUpdate {
        on_maintenance: Some(on),
        ..HostUpdate::default()
    };
    let outcome = console.api().update_host(id, None, update).await;
    audit(&viewer, "UpdateHost", &id.to_string(), outcome.is_ok());
    outcome?;
    console.hosts_changed();
    Ok(see_other(format!("/console/#h-{id}")))
}

/// Admits an action's session (401 without one), logging a refusal.
async fn admit_action(
    console: &Console,
    headers: &HeaderMap,
    client: ClientAddr,
    operation: Operation,
) -> Result<Viewer, ConsoleError> {
    Viewer::admit(console.guard(), headers, client, &[operation], None)
        .await
        .inspect_err(|err| {
            tracing::info!(operation = ?operation, reason = %err, "console action refused");
        })
}

/// The audit line of an action.
fn audit(viewer: &Viewer, operation: &'static str, target: &str, done: bool) {
    tracing::info!(
        caller = %viewer.principal.name,
        operation,
        target,
        done,
        transport = "console",
        "operator action"
    );
}
