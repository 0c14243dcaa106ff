//! The stream of a recovery's page: the notification's watch
//! (`Api::watch_notification`: a snapshot, then every persisted change,
//! a fresh snapshot when it fell behind, until the notification ends),
//! applied to a [`RecoveryModel`], whose touched parts are sent every
//! [`GATHER`]: the summary, the counts, the rows of the instances that
//! changed, the new run events.

use std::collections::HashMap;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;

use super::{Op, Sender, admit, open, sleep_until};
use crate::auth::Operation;
use crate::changes::Change;
use crate::console::Console;
use crate::console::error::ConsoleError;
use crate::console::reads;
use crate::console::recovery::{OPERATIONS, RecoveryModel, Since, Touched, notification_id};
use crate::console::session::{ClientAddr, Viewer};
use crate::grpc::WatchSlot;
use crate::service::{Error, WatchUpdate};

/// How long changes are gathered before they are sent together.
pub const GATHER: Duration = Duration::from_millis(100);

/// `GET /console/live/notifications/{id}?since=...` (`recovery::Since`:
/// where the page stands; the first event is a patch of what changed
/// since, or `fresh`; without it, a snapshot).
pub async fn stream(
    State(console): State<Console>,
    Path(raw): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    client: ClientAddr,
) -> Result<Response, ConsoleError> {
    let mut operations = vec![Operation::WatchNotification];
    operations.extend(OPERATIONS);
    let (viewer, slot) = admit(&console, &headers, client, &operations).await?;
    let id = notification_id(&raw)?;
    // Steps come on the feed (the watch sends each vmove's current step
    // only): subscribed first, so none is missed.
    let feed = console.api().changes().subscribe();
    let updates = console.api().watch_notification(id).await?;
    let trace_id = console.api().trace_id(id).await?;
    let (response, sender) = open(&console);
    let since = query.get("since").and_then(|s| Since::decode(s));
    tokio::spawn(async move {
        let task = Follow {
            console,
            viewer,
            id,
            trace_id,
            sender,
            _slot: slot,
        };
        task.run(updates, feed, since).await;
    });
    Ok(response)
}

struct Follow {
    console: Console,
    viewer: Viewer,
    id: crate::domain::NotificationId,
    trace_id: Option<String>,
    sender: Sender,
    /// Given back when the stream ends.
    _slot: WatchSlot,
}

impl Follow {
    async fn run(
        self,
        mut updates: mpsc::Receiver<Result<WatchUpdate, Error>>,
        mut feed: broadcast::Receiver<Arc<Change>>,
        since: Option<Since>,
    ) {
        let Some(mut model) = self.model(&mut updates).await else {
            return;
        };
        let link = self.console.trace_link(self.trace_id.as_deref());
        let first = self.first(&model, since, link.as_deref()).await;
        if !first || model.notification.status().is_terminal() {
            if first {
                self.sender.end().await;
            }
            return;
        }
        let draining = self.console.draining();
        let mut pending = Touched::default();
        let mut due: Option<Instant> = None;
        loop {
            tokio::select! {
                () = self.sender.closed() => return,
                () = draining.cancelled() => return,
                change = feed.recv() => match change {
                    Ok(change) => {
                        if let Change::Step(step) = change.as_ref()
                            && step.notification_id == self.id
                        {
                            pending.merge(model.put_step(step));
                            if !pending.is_empty() && due.is_none() {
                                due = Some(Instant::now() + GATHER);
                            }
                        }
                    }
                    // A lagging feed only misses steps the vmoves' own
                    // changes and the next page load bring back.
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                update = updates.recv() => match update {
                    Some(Ok(update)) => {
                        pending.merge(model.apply(update));
                        if !pending.is_empty() && due.is_none() {
                            due = Some(Instant::now() + GATHER);
                        }
                    }
                    Some(Err(err)) => {
                        tracing::info!(notification_id = %model.id(), error = %err, "console stream ended");
                        return;
                    }
                    // The notification ended: its last changes, then `end`.
                    None => {
                        self.flush(&model, std::mem::take(&mut pending), link.as_deref()).await;
                        self.sender.end().await;
                        return;
                    }
                },
                () = sleep_until(due) => {
                    due = None;
                    if !self.flush(&model, std::mem::take(&mut pending), link.as_deref()).await {
                        return;
                    }
                }
            }
        }
    }

    /// The model from the watch's first snapshot and the step history.
    async fn model(
        &self,
        updates: &mut mpsc::Receiver<Result<WatchUpdate, Error>>,
    ) -> Option<RecoveryModel> {
        let Some(Ok(WatchUpdate::Snapshot {
            notification,
            progress,
            vmoves,
        })) = updates.recv().await
        else {
            return None;
        };
        match reads::steps(self.console.api(), self.id).await {
            Ok(steps) => Some(RecoveryModel::new(
                notification,
                progress,
                vmoves,
                steps,
                self.trace_id.clone(),
            )),
            Err(err) => {
                tracing::info!(notification_id = %self.id, error = %err, "console stream ended");
                None
            }
        }
    }

    /// The first event: what changed since the page stood at `since`
    /// (`fresh` if nothing), or the whole part without it; false once
    /// the page has gone.
    async fn first(&self, model: &RecoveryModel, since: Option<Since>, link: Option<&str>) -> bool {
        match since {
            Some(since) => {
                let touched = model.touched_since(&since);
                if touched.is_empty() {
                    self.sender.fresh().await
                } else {
                    self.sender
                        .patch(&ops(model, &touched, &self.viewer, link))
                        .await
                }
            }
            None => {
                self.sender
                    .snapshot(&model.live_region(&self.viewer, link))
                    .await
            }
        }
    }

    /// Sends what `touched` names; false once the page has gone.
    async fn flush(&self, model: &RecoveryModel, touched: Touched, link: Option<&str>) -> bool {
        if touched.all {
            return self
                .sender
                .snapshot(&model.live_region(&self.viewer, link))
                .await;
        }
        self.sender
            .patch(&ops(model, &touched, &self.viewer, link))
            .await
    }
}

/// The page's changes for `touched`.
pub fn ops(
    model: &RecoveryModel,
    touched: &Touched,
    viewer: &Viewer,
    link: Option<&str>,
) -> Vec<Op> {
    let mut ops = Vec::new();
    if touched.head {
        ops.push(Op::replace("n-head".to_owned(), model.head(viewer, link)));
    }
    if touched.counts {
        ops.push(Op::replace("n-counts".to_owned(), model.counts()));
    }
    if touched.failures {
        ops.push(Op::replace("n-failures".to_owned(), model.failures()));
    }
    if !touched.new_rows.is_empty() {
        ops.push(Op::remove("instances-none"));
    }
    for &i in touched.rows.union(&touched.new_rows) {
        ops.push(Op::upsert(
            model.row_id(i),
            model.row(i),
            "instances-body",
            "end",
        ));
    }
    for &i in &touched.run_events {
        ops.push(Op::upsert(
            model.run_event_id(i),
            model.run_event_row(i),
            "events-body",
            "end",
        ));
    }
    ops
}
