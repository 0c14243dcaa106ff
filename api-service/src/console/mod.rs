//! The web console: what operators open in a browser, served by
//! `instanceha-api` itself under `/console/` on the REST listener (so with
//! its TLS), with the APIs' authentication and roles.
//!
//! Pages are rendered on the server ([`html`]: every value escaped); one
//! small script and one style sheet, embedded in the binary ([`assets`]),
//! keep them live over one server-sent-events stream per page ([`live`])
//! and nothing else runs in the page: a strict Content-Security-Policy
//! forbids inline script and style ([`layout`]).
//!
//! * [`overview`]: segments and hosts, the recoveries running now.
//! * [`recovery`]: one recovery: status, runs, trace, and each instance's
//!   [`timeline`].
//! * [`history`]: notifications filtered and paged.
//! * [`actions`]: retry a failed notification, put a host on or off
//!   maintenance, each confirmed first.
//! * [`login`], [`session`]: the token entered once and kept in a cookie;
//!   CSRF tokens for actions.
//! * [`reads`]: what the pages read through the service layer;
//!   [`host_state`]: what a host's records say of it.

pub mod actions;
pub mod assets;
pub mod error;
pub mod history;
pub mod host_state;
pub mod html;
pub mod layout;
pub mod live;
pub mod login;
pub mod overview;
pub mod reads;
pub mod recovery;
pub mod session;
pub mod timeline;
pub mod touched;

use std::sync::Arc;

use axum::Router;
use axum::response::Redirect;
use axum::routing::get;
use instanceha_runtime::clock::Clock;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::auth::Guard;
use crate::grpc::WatchSlots;
use crate::service::Api;
use html::Html;

/// `[console]`: the web console.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleSettings {
    /// Serve it under `/console/` on the REST listener (`[rest]` must be
    /// enabled).
    pub enabled: bool,
    /// A link to the operator's tracing UI for a recovery's trace:
    /// `{trace_id}` is replaced by the trace's id (32 hex digits), as in
    /// `https://jaeger.example/trace/{trace_id}`.
    pub trace_url: Option<String>,
}

impl Default for ConsoleSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            trace_url: None,
        }
    }
}

/// The placeholder of `console.trace_url`.
pub const TRACE_ID: &str = "{trace_id}";

impl ConsoleSettings {
    /// Checks the trace URL template; the error names the setting.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(url) = &self.trace_url
            && (!(url.starts_with("https://") || url.starts_with("http://"))
                || !url.contains(TRACE_ID))
        {
            return Err(format!(
                "console.trace_url: {url:?} must be an http:// or https:// URL with {TRACE_ID} in it"
            ));
        }
        Ok(())
    }
}

/// What the console's handlers share. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Console {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    api: Api,
    guard: Guard,
    settings: ConsoleSettings,
    /// Cookies are `Secure`: the listener is TLS.
    secure: bool,
    slots: WatchSlots,
    clock: Clock,
    /// Cancelled when the server begins to shut down: streams end, new
    /// ones are refused.
    draining: CancellationToken,
    /// Bumped when the console changed a host (overview streams read
    /// their hosts again).
    hosts: watch::Sender<u64>,
}

impl Console {
    /// The console over `api`, checking callers with `guard`; streams
    /// bounded by `slots`; `draining` cancelled at shutdown.
    pub fn new(
        api: Api,
        guard: Guard,
        settings: ConsoleSettings,
        secure: bool,
        slots: WatchSlots,
        draining: CancellationToken,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                api,
                guard,
                settings,
                secure,
                slots,
                clock: Clock::system(),
                draining,
                hosts: watch::channel(0).0,
            }),
        }
    }

    pub fn api(&self) -> &Api {
        &self.inner.api
    }

    pub fn guard(&self) -> &Guard {
        &self.inner.guard
    }

    pub fn secure(&self) -> bool {
        self.inner.secure
    }

    pub fn slots(&self) -> &WatchSlots {
        &self.inner.slots
    }

    pub fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    pub fn draining(&self) -> CancellationToken {
        self.inner.draining.clone()
    }

    /// The link to the tracing UI for `trace_id`, when one is configured.
    pub fn trace_link(&self, trace_id: Option<&str>) -> Option<String> {
        let template = self.inner.settings.trace_url.as_deref()?;
        Some(template.replace(TRACE_ID, trace_id?))
    }

    /// Tells the overview streams that a host changed.
    pub fn hosts_changed(&self) {
        self.inner.hosts.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub fn hosts_watch(&self) -> watch::Receiver<u64> {
        self.inner.hosts.subscribe()
    }
}

/// A digest of the live part of a page as rendered: the page passes it
/// to its stream, which sends nothing until something differs.
pub fn stamp(live: &Html) -> String {
    Sha256::digest(live.as_str().as_bytes())
        .iter()
        .take(12)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The stream URL of a page whose live part is `live`.
pub fn live_url(path: &str, live: &Html) -> String {
    format!("{path}?stamp={}", stamp(live))
}

/// The console's routes, under `/console`; every answer carries the
/// security headers (`layout::secure_headers`). Merge it into the REST
/// router (served with the callers' addresses).
pub fn router(console: Console) -> Router {
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route("/console/", get(overview::page))
        .route("/console/login", get(login::page).post(login::sign_in))
        .route("/console/logout", axum::routing::post(login::sign_out))
        .route("/console/history", get(history::page))
        .route("/console/notifications/{id}", get(recovery::page))
        .route(
            "/console/notifications/{id}/retry",
            get(actions::confirm_retry).post(actions::retry),
        )
        .route(
            "/console/hosts/{id}/maintenance",
            get(actions::confirm_maintenance).post(actions::maintenance),
        )
        .route("/console/live/overview", get(live::overview::stream))
        .route(
            "/console/live/notifications/{id}",
            get(live::recovery::stream),
        )
        .route("/console/assets/{name}", get(assets::serve))
        .with_state(console)
        .layer(axum::middleware::from_fn(layout::secure_headers))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_url_needs_its_placeholder() {
        let mut settings = ConsoleSettings::default();
        assert!(settings.validate().is_ok());
        settings.trace_url = Some("https://jaeger.example/trace/{trace_id}".to_owned());
        assert!(settings.validate().is_ok());
        for bad in [
            "https://jaeger.example/trace/",
            "javascript:alert(1)//{trace_id}",
        ] {
            settings.trace_url = Some(bad.to_owned());
            let err = settings.validate().unwrap_err();
            assert!(err.starts_with("console.trace_url"), "{err}");
        }
    }
}
