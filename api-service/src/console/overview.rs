//! The overview page: the recoveries running now (and the last ended),
//! each with its progress, and every segment with its hosts: up, failed,
//! fenced, on maintenance, reserved, and when a report about each was last
//! received. Rendered whole on the server; the live stream
//! (`live::overview`) replaces its rows one by one.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use super::error::ConsoleError;
use super::host_state::Health;
use super::html::Html;
use super::layout::{self, Nav, badge, flag};
use super::reads::{self, HostView, Overview, RecoveryView, SegmentView};
use super::session::{ClientAddr, Viewer};
use super::{Console, live_url};
use crate::auth::Operation;

/// What the overview reads.
pub const OPERATIONS: [Operation; 3] = [
    Operation::ListSegments,
    Operation::ListHosts,
    Operation::ListNotifications,
];

/// `GET /console/`.
pub async fn page(
    State(console): State<Console>,
    headers: HeaderMap,
    client: ClientAddr,
) -> Result<Response, ConsoleError> {
    let viewer = Viewer::admit(
        console.guard(),
        &headers,
        client,
        &OPERATIONS,
        Some("/console/"),
    )
    .await?;
    let overview = reads::overview(console.api()).await?;
    let live = live_region(&overview, &viewer);
    let mut body = Html::new();
    body.raw("<h1>Overview</h1><div id=\"live\" data-live=\"")
        .text(&live_url("/console/live/overview", &live))
        .raw("\">")
        .html(&live)
        .raw("</div>");
    Ok(layout::page("Overview", &viewer, Nav::Overview, &body).into_response())
}

/// The part of the page the stream keeps up to date.
pub fn live_region(overview: &Overview, viewer: &Viewer) -> Html {
    let mut out = Html::new();
    recoveries(&mut out, &overview.recoveries);
    if overview.more_running {
        out.raw(
            "<p class=\"meta\" id=\"more-running\">More recoveries are running than shown here: ",
        )
        .raw("see the <a href=\"/console/history?status=running\">running</a>, ")
        .raw("<a href=\"/console/history?status=new\">new</a> and ")
        .raw("<a href=\"/console/history?status=error\">error</a> ones in the history.</p>");
    }
    out.raw("<h2 id=\"segments-title\">Segments and hosts</h2>");
    if overview.segments.is_empty() {
        out.raw("<p>No failover segment is registered.</p>");
    }
    for segment in &overview.segments {
        segment_section(&mut out, segment, viewer);
    }
    out
}

fn recoveries(out: &mut Html, recoveries: &[RecoveryView]) {
    out.raw("<section aria-labelledby=\"recoveries-title\"><h2 id=\"recoveries-title\">Recoveries</h2>")
        .raw("<table class=\"grid\" id=\"recoveries\"><caption>Recoveries running now, then the last ended, newest first</caption>")
        .raw("<thead><tr><th scope=\"col\">Host</th><th scope=\"col\">Type</th><th scope=\"col\">Status</th>")
        .raw("<th scope=\"col\">Progress</th><th scope=\"col\">Reported</th><th scope=\"col\">Message</th></tr></thead>")
        .raw("<tbody id=\"recoveries-body\">");
    if recoveries.is_empty() {
        out.raw("<tr id=\"recoveries-none\"><td colspan=\"6\">No recovery yet.</td></tr>");
    }
    for recovery in recoveries {
        out.html(&recovery_row(recovery));
    }
    out.raw("</tbody></table></section>");
}

/// The row id of a recovery.
pub fn recovery_row_id(id: &str) -> String {
    format!("r-{id}")
}

/// `<progress>` with the count beside it.
pub fn progress(out: &mut Html, done: usize, total: usize) {
    if total == 0 {
        out.raw("<progress aria-label=\"instances done\"></progress> <span class=\"count\">no instance planned yet</span>");
        return;
    }
    out.raw("<progress aria-label=\"instances done\" max=\"")
        .num(total)
        .raw("\" value=\"")
        .num(done)
        .raw("\"></progress> <span class=\"count\">")
        .num(done)
        .raw(" of ")
        .num(total)
        .raw(" done</span>");
}

/// One recovery's row.
pub fn recovery_row(recovery: &RecoveryView) -> Html {
    let n = &recovery.notification;
    let id = n.id.to_string();
    let mut out = Html::new();
    out.raw("<tr id=\"")
        .text(&recovery_row_id(&id))
        .raw("\" data-status=\"")
        .raw(n.status().as_str())
        .raw("\"><th scope=\"row\"><a href=\"/console/notifications/")
        .text(&id)
        .raw("\">")
        .text(&n.hostname)
        .raw("</a></th><td>")
        .raw(n.notification_type.as_str())
        .raw("</td><td>");
    badge(&mut out, n.status().as_str());
    out.raw("</td><td class=\"progress\">");
    progress(&mut out, recovery.done(), recovery.total());
    out.raw("</td><td>")
        .time(n.generated_time)
        .raw("</td><td class=\"message\">")
        .text(n.message.as_deref().unwrap_or(""))
        .raw("</td></tr>");
    out
}

fn segment_section(out: &mut Html, view: &SegmentView, viewer: &Viewer) {
    let s = &view.segment;
    let title = format!("seg-{}", s.id);
    out.raw("<section class=\"segment\" aria-labelledby=\"")
        .text(&title)
        .raw("\"><h3 id=\"")
        .text(&title)
        .raw("\">")
        .text(&s.name)
        .raw("</h3><p class=\"meta\">Recovery method ")
        .raw(s.recovery_method.as_str())
        .raw(" · ")
        .raw(if s.enabled {
            "enabled"
        } else {
            "disabled: reports are ignored"
        })
        .raw("</p><table class=\"grid\"><caption>Hosts of ")
        .text(&s.name)
        .raw("</caption><thead><tr><th scope=\"col\">Host</th><th scope=\"col\">State</th>")
        .raw(
            "<th scope=\"col\">Last report</th><th scope=\"col\">Actions</th></tr></thead><tbody>",
        );
    if view.hosts.is_empty() {
        out.raw("<tr><td colspan=\"4\">No host.</td></tr>");
    }
    for host in &view.hosts {
        out.html(&host_row(host, viewer));
    }
    out.raw("</tbody></table></section>");
}

/// The row id of a host.
pub fn host_row_id(id: &str) -> String {
    format!("h-{id}")
}

/// One host's row; its maintenance action only for those allowed.
pub fn host_row(view: &HostView, viewer: &Viewer) -> Html {
    let (host, state) = (&view.host, &view.state);
    let id = host.id.to_string();
    let mut out = Html::new();
    out.raw("<tr id=\"")
        .text(&host_row_id(&id))
        .raw("\"><th scope=\"row\">")
        .text(&host.name)
        .raw("</th><td class=\"flags\">");
    match state.health {
        Health::Up => flag(&mut out, "up", "up"),
        Health::Recovering => flag(&mut out, "failed", "failed, recovering"),
        Health::Failed => flag(&mut out, "failed", "failed"),
    }
    if state.fenced {
        flag(&mut out, "fenced", "fenced");
    }
    if state.on_maintenance {
        flag(&mut out, "maintenance", "on maintenance");
    }
    if state.reserved {
        flag(&mut out, "reserved", "reserved");
    }
    if let Some(failure) = &state.failure {
        out.raw(" <a href=\"/console/notifications/")
            .text(failure)
            .raw("\">the failure<span class=\"visually-hidden\"> of ")
            .text(&host.name)
            .raw("</span></a>");
    } else if let Some(by) = &state.maintenance_by {
        out.raw(" <a href=\"/console/notifications/")
            .text(by)
            .raw("\">by a recovery<span class=\"visually-hidden\"> of ")
            .text(&host.name)
            .raw("</span></a>");
    }
    out.raw("</td><td>")
        .maybe_time(state.last_report)
        .raw("</td><td>");
    if viewer.may_maintain {
        let (on, label) = if host.on_maintenance {
            ("false", "End maintenance")
        } else {
            ("true", "Put on maintenance")
        };
        out.raw("<a class=\"action\" href=\"/console/hosts/")
            .text(&id)
            .raw("/maintenance?on=")
            .raw(on)
            .raw("\">")
            .raw(label)
            .raw("<span class=\"visually-hidden\"> ")
            .text(&host.name)
            .raw("</span></a>");
    }
    out.raw("</td></tr>");
    out
}
