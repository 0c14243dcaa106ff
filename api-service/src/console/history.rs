//! The history page: every notification, newest first, filtered by
//! status, type, host and time, a page at a time on the server (the
//! listing's own keyset paging), so that 5,000 of them cost one page.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};

use super::Console;
use super::error::ConsoleError;
use super::html::{Html, url_component};
use super::layout::{self, Nav, badge};
use super::session::{ClientAddr, Viewer};
use crate::auth::Operation;
use crate::domain::{
    InvalidField, NotificationFilter, NotificationType, PageRequest, PageToken, filter_text,
};
use crate::status::NotificationStatus;

/// Notifications per page.
pub const PAGE_SIZE: u32 = 50;

/// The kind page tokens are bound to (the gRPC listing's).
const KIND: &str = "notifications";

/// What the history shows: the filters as given, and as the listing
/// takes them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistoryQuery {
    pub status: Option<NotificationStatus>,
    pub notification_type: Option<NotificationType>,
    pub host: Option<String>,
    pub since: Option<DateTime<Utc>>,
    /// As typed, to show it back.
    pub since_text: String,
    pub page: Option<PageToken>,
}

/// A time as a form sends it: `2026-12-05`, `2026-12-05T10:30` (a
/// `datetime-local` field) or RFC 3339; without a zone, UTC.
pub fn parse_time(field: &str, text: &str) -> Result<DateTime<Utc>, InvalidField> {
    let text = text.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc));
    }
    for format in ["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M"] {
        if let Ok(at) = NaiveDateTime::parse_from_str(text, format) {
            return Ok(at.and_utc());
        }
    }
    if let Ok(day) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(day.and_hms_opt(0, 0, 0).expect("midnight").and_utc());
    }
    Err(InvalidField::new(
        field,
        format!("{text:?} is not a time (2026-12-05, 2026-12-05T10:30 or RFC 3339)"),
    ))
}

impl HistoryQuery {
    /// Reads the query string; an empty field is no filter; errors name
    /// the field.
    pub fn parse(raw: &HashMap<String, String>) -> Result<Self, InvalidField> {
        let field = |name: &str| raw.get(name).map(|v| v.trim()).filter(|v| !v.is_empty());
        let status = field("status")
            .map(|v| {
                NotificationStatus::parse(v).ok_or_else(|| {
                    InvalidField::new("status", format!("{v:?} is not a notification status"))
                })
            })
            .transpose()?;
        let notification_type = field("type")
            .map(|v| {
                NotificationType::parse(v).ok_or_else(|| {
                    InvalidField::new("type", format!("{v:?} is not a notification type"))
                })
            })
            .transpose()?;
        let host = field("host").map(str::to_owned);
        filter_text("host", host.as_deref())?;
        let since_text = field("since").unwrap_or_default().to_owned();
        let since = field("since").map(|v| parse_time("since", v)).transpose()?;
        let page = field("page")
            .map(|v| PageToken::decode(KIND, v).map_err(|e| InvalidField::new("page", e.reason)))
            .transpose()?;
        Ok(Self {
            status,
            notification_type,
            host,
            since,
            since_text,
            page,
        })
    }

    pub fn filter(&self) -> NotificationFilter {
        NotificationFilter {
            status: self.status,
            notification_type: self.notification_type,
            hostname: self.host.clone(),
            generated_since: self.since,
            ..NotificationFilter::default()
        }
    }

    /// The query string of these filters at page `page`.
    pub fn link(&self, page: Option<PageToken>) -> String {
        let mut parts = Vec::new();
        if let Some(s) = self.status {
            parts.push(format!("status={}", s.as_str()));
        }
        if let Some(t) = self.notification_type {
            parts.push(format!("type={}", t.as_str()));
        }
        if let Some(h) = &self.host {
            parts.push(format!("host={}", url_component(h)));
        }
        if !self.since_text.is_empty() {
            parts.push(format!("since={}", url_component(&self.since_text)));
        }
        if let Some(p) = page {
            parts.push(format!("page={}", p.encode(KIND)));
        }
        if parts.is_empty() {
            "/console/history".to_owned()
        } else {
            format!("/console/history?{}", parts.join("&"))
        }
    }
}

/// `GET /console/history`.
pub async fn page(
    State(console): State<Console>,
    Query(raw): Query<HashMap<String, String>>,
    headers: HeaderMap,
    client: ClientAddr,
) -> Result<Response, ConsoleError> {
    let viewer = Viewer::admit(
        console.guard(),
        &headers,
        client,
        &[Operation::ListNotifications],
        Some("/console/history"),
    )
    .await?;
    let query = HistoryQuery::parse(&raw).map_err(|e| ConsoleError::BadRequest(e.to_string()))?;
    let request = PageRequest {
        size: PAGE_SIZE,
        after: query.page,
    };
    let page = console
        .api()
        .list_notifications(query.filter(), request)
        .await?;
    let mut body = Html::new();
    body.raw("<h1>History</h1>");
    form(&mut body, &query);
    body.raw("<table class=\"grid\" id=\"history\"><caption>Notifications, newest first</caption>")
        .raw("<thead><tr><th scope=\"col\">Reported</th><th scope=\"col\">Host</th><th scope=\"col\">Type</th>")
        .raw("<th scope=\"col\">Status</th><th scope=\"col\">Runs</th><th scope=\"col\">Message</th></tr></thead><tbody>");
    if page.items.is_empty() {
        body.raw("<tr><td colspan=\"6\">No notification matches.</td></tr>");
    }
    for n in &page.items {
        body.raw("<tr><td>")
            .time(n.generated_time)
            .raw("</td><th scope=\"row\"><a href=\"/console/notifications/")
            .text(&n.id.to_string())
            .raw("\">")
            .text(&n.hostname)
            .raw("</a></th><td>")
            .raw(n.notification_type.as_str())
            .raw("</td><td>");
        badge(&mut body, n.status().as_str());
        body.raw("</td><td>")
            .num(n.attempts)
            .raw("</td><td class=\"message\">")
            .text(n.message.as_deref().unwrap_or(""))
            .raw("</td></tr>");
    }
    body.raw("</tbody></table><nav aria-label=\"Pages\" class=\"pages\"><ul>");
    if query.page.is_some() {
        body.raw("<li><a href=\"")
            .text(&query.link(None))
            .raw("\">Newest</a></li>");
    }
    if let Some(next) = page.next {
        body.raw("<li><a id=\"older\" rel=\"next\" href=\"")
            .text(&query.link(Some(next)))
            .raw("\">Older</a></li>");
    }
    body.raw("</ul></nav>");
    Ok(layout::page("History", &viewer, Nav::History, &body).into_response())
}

fn select<T: Copy + PartialEq>(
    out: &mut Html,
    name: &'static str,
    label: &'static str,
    all: &[T],
    chosen: Option<T>,
    text: fn(T) -> &'static str,
) {
    out.raw("<p><label for=\"f-")
        .raw(name)
        .raw("\">")
        .raw(label)
        .raw("</label> <select id=\"f-")
        .raw(name)
        .raw("\" name=\"")
        .raw(name)
        .raw("\"><option value=\"\">any</option>");
    for &value in all {
        out.raw("<option value=\"").raw(text(value)).raw("\"");
        if chosen == Some(value) {
            out.raw(" selected");
        }
        out.raw(">").raw(text(value)).raw("</option>");
    }
    out.raw("</select></p>");
}

fn form(out: &mut Html, query: &HistoryQuery) {
    out.raw("<form class=\"filters\" method=\"get\" action=\"/console/history\" role=\"search\" aria-label=\"Filter the history\">");
    select(
        out,
        "status",
        "Status",
        &NotificationStatus::ALL,
        query.status,
        NotificationStatus::as_str,
    );
    select(
        out,
        "type",
        "Type",
        &NotificationType::ALL,
        query.notification_type,
        NotificationType::as_str,
    );
    out.raw("<p><label for=\"f-host\">Host</label> <input id=\"f-host\" name=\"host\" value=\"")
        .text(query.host.as_deref().unwrap_or(""))
        .raw("\"></p><p><label for=\"f-since\">Reported since (UTC)</label> <input id=\"f-since\" name=\"since\" placeholder=\"2026-12-05T10:30\" value=\"")
        .text(&query.since_text)
        .raw("\"></p><p><button type=\"submit\">Filter</button> <a href=\"/console/history\">Clear</a></p></form>");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> Result<HistoryQuery, InvalidField> {
        HistoryQuery::parse(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn filters_are_read_and_empty_ones_ignored() {
        let q = query(&[
            ("status", "failed"),
            ("type", "COMPUTE_HOST"),
            ("host", " compute-01 "),
            ("since", "2026-12-05"),
            ("page", ""),
        ])
        .unwrap();
        assert_eq!(q.status.map(NotificationStatus::as_str), Some("failed"));
        assert_eq!(q.notification_type, Some(NotificationType::ComputeHost));
        assert_eq!(q.host.as_deref(), Some("compute-01"));
        assert_eq!(q.since.unwrap().to_rfc3339(), "2026-12-05T00:00:00+00:00");
        assert_eq!(q.page, None);
        assert_eq!(query(&[("status", "")]).unwrap(), HistoryQuery::default());
    }

    #[test]
    fn errors_name_the_field() {
        for (name, value) in [
            ("status", "broken"),
            ("type", "DISK"),
            ("since", "yesterday"),
            ("page", "not-a-token"),
            ("host", "bad\u{1b}host"),
        ] {
            let err = query(&[(name, value)]).unwrap_err();
            assert_eq!(err.field, name, "{err}");
        }
    }

    #[test]
    fn times_from_a_form_are_utc() {
        for text in [
            "2026-12-05T10:30",
            "2026-12-05 10:30",
            "2026-12-05T11:30:00+01:00",
        ] {
            assert_eq!(
                parse_time("since", text).unwrap().to_rfc3339(),
                "2026-12-05T10:30:00+00:00",
                "{text}"
            );
        }
    }

    #[test]
    fn links_keep_the_filters() {
        let q = query(&[("status", "failed"), ("host", "compute 01")]).unwrap();
        let link = q.link(Some(PageToken { after: 42 }));
        assert!(link.starts_with("/console/history?status=failed&host=compute%2001&page="));
        let again = query(&[
            ("status", "failed"),
            ("page", link.rsplit_once("page=").unwrap().1),
        ])
        .unwrap();
        assert_eq!(again.page, Some(PageToken { after: 42 }));
        assert_eq!(HistoryQuery::default().link(None), "/console/history");
    }
}
