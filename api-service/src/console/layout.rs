//! The frame of every console page (landmarks: a banner with the
//! navigation, the main content, a footer with the live status; a link to
//! skip to the content), the headers every console answer carries (a
//! strict Content-Security-Policy: nothing inline, nothing from elsewhere),
//! and the small pieces pages share (status badges).

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, header};
use axum::middleware::Next;
use axum::response::{Html as HtmlResponse, Response};

use super::assets;
use super::html::Html;
use super::session::Viewer;

/// The policy: scripts, styles, images and streams from this origin only;
/// no inline script or style, no framing, forms post here only.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The middleware adding the security headers to every console answer;
/// pages and streams are not cached (assets set their own).
pub async fn secure_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let set = |headers: &mut axum::http::HeaderMap, name: HeaderName, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(
        headers,
        header::CONTENT_SECURITY_POLICY,
        CONTENT_SECURITY_POLICY,
    );
    set(headers, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(headers, header::X_FRAME_OPTIONS, "DENY");
    set(headers, header::REFERRER_POLICY, "same-origin");
    if !headers.contains_key(header::CACHE_CONTROL) {
        set(headers, header::CACHE_CONTROL, "no-store");
    }
    response
}

/// Which navigation entry a page is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nav {
    Overview,
    History,
    /// A recovery's page or an action's: no entry is current.
    Other,
}

fn head(out: &mut Html, title: &str) {
    out.raw("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">")
        .raw("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">")
        .raw("<title>")
        .text(title)
        .raw(" · instance-ha</title><link rel=\"stylesheet\" href=\"")
        .text(&assets::css_path())
        .raw("\"><script src=\"")
        .text(&assets::js_path())
        .raw("\" defer></script>");
}

/// A page for someone signed in.
pub fn page(title: &str, viewer: &Viewer, nav: Nav, body: &Html) -> HtmlResponse<String> {
    let mut out = Html::new();
    head(&mut out, title);
    out.raw("<meta name=\"csrf-token\" content=\"")
        .text(&viewer.csrf)
        .raw("\"></head><body><a class=\"skip\" href=\"#main\">Skip to the content</a>")
        .raw("<header class=\"top\"><p class=\"brand\"><a href=\"/console/\">instance-ha</a></p>")
        .raw("<nav aria-label=\"Console\"><ul>");
    for (entry, href, label) in [
        (Nav::Overview, "/console/", "Overview"),
        (Nav::History, "/console/history", "History"),
    ] {
        out.raw("<li><a href=\"").raw(href).raw("\"");
        if entry == nav {
            out.raw(" aria-current=\"page\"");
        }
        out.raw(">").raw(label).raw("</a></li>");
    }
    out.raw("</ul></nav><div class=\"who\"><span>");
    if viewer.signed_in {
        out.raw("Signed in as <strong>")
            .text(&viewer.principal.name)
            .raw("</strong> (")
            .text(&viewer.roles())
            .raw(")</span><form method=\"post\" action=\"/console/logout\">")
            .raw("<input type=\"hidden\" name=\"csrf\" value=\"")
            .text(&viewer.csrf)
            .raw("\"><button type=\"submit\">Sign out</button></form>");
    } else {
        out.raw("Authentication is off: everyone is admin</span>");
    }
    out.raw("</div></header><main id=\"main\" tabindex=\"-1\">")
        .html(body)
        .raw("</main><footer><p id=\"live-status\" role=\"status\" aria-live=\"polite\"></p></footer></body></html>");
    HtmlResponse(out.into_string())
}

/// A page without a session: the login page, errors.
pub fn bare_page(title: &str, body: &Html) -> HtmlResponse<String> {
    let mut out = Html::new();
    head(&mut out, title);
    out.raw("</head><body><a class=\"skip\" href=\"#main\">Skip to the content</a>")
        .raw("<header class=\"top\"><p class=\"brand\"><a href=\"/console/\">instance-ha</a></p></header>")
        .raw("<main id=\"main\" tabindex=\"-1\">")
        .html(body)
        .raw("</main></body></html>");
    HtmlResponse(out.into_string())
}

/// A status as a badge: its name, in a class of its own (`s-failed`).
pub fn badge(out: &mut Html, status: &'static str) {
    out.raw("<span class=\"badge s-")
        .raw(status)
        .raw("\">")
        .raw(status)
        .raw("</span>");
}

/// A badge for a state that is not a status (`fenced`, `maintenance`).
pub fn flag(out: &mut Html, class: &'static str, label: &'static str) {
    out.raw("<span class=\"badge f-")
        .raw(class)
        .raw("\">")
        .raw(label)
        .raw("</span>");
}
