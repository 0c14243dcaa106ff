//! Live pages: one server-sent-events stream per page, fed by the change
//! feed (`crate::changes`), bounded like the gRPC watch streams (a slot
//! per stream, `limits.max_watches_per_caller` per caller and
//! `limits.max_watches` in all, given back when the stream ends), with a
//! heartbeat every 15 s.
//!
//! A stream first compares the page's `stamp` (a digest of the part of
//! the page it keeps up to date, as rendered) with what it reads now: the
//! same, it says `fresh`; otherwise it sends the whole part (`snapshot`),
//! which is also what a page reconnecting after a dropped stream or a
//! restart of the API gets. Then it sends `patch`es, changes gathered for
//! a moment and sent together: rows replaced, added or removed by id,
//! never the whole table. Streams end when the server begins to shut
//! down; the page's EventSource connects again by itself.
//!
//! * [`overview`]: the overview's recoveries and hosts.
//! * [`recovery`]: one recovery's page.

pub mod overview;
pub mod recovery;

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::Console;
use super::error::ConsoleError;
use super::html::Html;
use super::session::{ClientAddr, Viewer};
use crate::grpc::WatchSlot;

/// How long the page's EventSource waits before it connects again.
pub const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// A comment line this often keeps proxies from closing a quiet stream.
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// Events waiting for a slow page before its stream stops reading.
const BUFFER: usize = 64;

/// One change to the page, by element id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Op {
    /// The element replaced (its `outerHTML`), or removed.
    pub id: String,
    /// The new element; `None` removes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
    /// Where to put it when it is not on the page yet: this element's
    /// first (`start`) or last (`end`) child.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<&'static str>,
}

impl Op {
    pub fn replace(id: String, html: Html) -> Self {
        Self {
            id,
            html: Some(html.into_string()),
            parent: None,
            at: None,
        }
    }

    /// Replaces it, or puts it in `parent` at `at` (`start`, `end`).
    pub fn upsert(id: String, html: Html, parent: &str, at: &'static str) -> Self {
        Self {
            id,
            html: Some(html.into_string()),
            parent: Some(parent.to_owned()),
            at: Some(at),
        }
    }

    pub fn remove(id: &str) -> Self {
        Self {
            id: id.to_owned(),
            html: None,
            parent: None,
            at: None,
        }
    }
}

/// A `patch` event: changes and when the server sent them (milliseconds
/// since the epoch: the page measures its update latency from it).
#[derive(Clone, Debug, Serialize)]
struct Patch<'a> {
    sent_at: i64,
    ops: &'a [Op],
}

/// A `snapshot` event: the whole live part of the page.
#[derive(Serialize)]
struct Snapshot<'a> {
    sent_at: i64,
    html: &'a str,
}

/// What a stream task sends to its page.
pub struct Sender {
    tx: mpsc::Sender<Result<Event, Infallible>>,
    console: Console,
}

impl Sender {
    fn now_ms(&self) -> i64 {
        self.console.clock().now().timestamp_millis()
    }

    /// Sends `event`; false once the page has gone.
    async fn send(&self, event: Event) -> bool {
        self.tx.send(Ok(event)).await.is_ok()
    }

    /// `snapshot`, or `fresh` when the page shows it already (`stamp`).
    pub async fn first(&self, live: &Html, stamp: Option<&str>) -> bool {
        if stamp == Some(super::stamp(live).as_str()) {
            return self.fresh().await;
        }
        self.snapshot(live).await
    }

    /// `fresh`: the page is current.
    pub async fn fresh(&self) -> bool {
        self.send(
            Event::default()
                .event("fresh")
                .data("{}")
                .retry(RECONNECT_AFTER),
        )
        .await
    }

    pub async fn snapshot(&self, live: &Html) -> bool {
        let data = Snapshot {
            sent_at: self.now_ms(),
            html: live.as_str(),
        };
        match Event::default()
            .event("snapshot")
            .retry(RECONNECT_AFTER)
            .json_data(data)
        {
            Ok(event) => self.send(event).await,
            Err(_) => false,
        }
    }

    pub async fn patch(&self, ops: &[Op]) -> bool {
        if ops.is_empty() {
            return true;
        }
        let data = Patch {
            sent_at: self.now_ms(),
            ops,
        };
        match Event::default()
            .event("patch")
            .retry(RECONNECT_AFTER)
            .json_data(data)
        {
            Ok(event) => self.send(event).await,
            Err(_) => false,
        }
    }

    /// `end`: nothing more will change; the page closes its stream.
    pub async fn end(&self) {
        let _ = self.send(Event::default().event("end").data("{}")).await;
    }

    /// Completes when the page has gone.
    pub async fn closed(&self) {
        self.tx.closed().await;
    }
}

/// A stream's admission: the viewer, for `operations`; refused while the
/// server shuts down, and beyond the caller's or the server's slots.
pub async fn admit(
    console: &Console,
    headers: &axum::http::HeaderMap,
    client: ClientAddr,
    operations: &[crate::auth::Operation],
) -> Result<(Viewer, WatchSlot), ConsoleError> {
    if console.draining().is_cancelled() {
        return Err(ConsoleError::Unavailable(
            "the server is shutting down: connect again".to_owned(),
        ));
    }
    let viewer = Viewer::admit(console.guard(), headers, client, operations, None).await?;
    let slot = console
        .slots()
        .take(&viewer.stream_owner(client))
        .map_err(|status| ConsoleError::Throttled {
            message: status.message().to_owned(),
            wait: RECONNECT_AFTER,
        })?;
    Ok((viewer, slot))
}

/// Sleeps until `due`; forever without one (the gathering of changes).
pub async fn sleep_until(due: Option<tokio::time::Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The stream's response, and the [`Sender`] its task writes to.
pub fn open(console: &Console) -> (Response, Sender) {
    let (tx, rx) = mpsc::channel(BUFFER);
    let response = Sse::new(ReceiverStream::new(rx))
        .keep_alive(KeepAlive::new().interval(HEARTBEAT))
        .into_response();
    (
        response,
        Sender {
            tx,
            console: console.clone(),
        },
    )
}
