//! Watching one notification: its current state, then every persisted
//! change, until it is terminal.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use tokio::sync::{broadcast, mpsc};

use super::{Api, Error};
use crate::changes::Change;
use crate::domain::{
    Notification, NotificationId, PageRequest, ProgressEvent, VMove, VMoveFilter, VMoveId,
};

/// What a watcher receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchUpdate {
    /// The whole current state.
    Snapshot {
        notification: Notification,
        progress: Vec<ProgressEvent>,
        vmoves: Vec<VMove>,
    },
    Notification(Notification),
    VMove(VMove),
    Progress(ProgressEvent),
}

/// How many updates may wait for a slow client before the watcher stops
/// reading the feed (it then lags, and catches up with a snapshot).
const BUFFER: usize = 256;

impl Api {
    /// Starts watching `id`. Errors (an unknown notification, a database
    /// failure) arrive on the channel; the channel closes after the
    /// terminal status has been sent.
    pub async fn watch_notification(
        &self,
        id: NotificationId,
    ) -> Result<mpsc::Receiver<Result<WatchUpdate, Error>>, Error> {
        // Subscribe before reading, so nothing committed in between is lost.
        let feed = self.changes.subscribe();
        let snapshot = self.snapshot(id).await?;
        let (tx, rx) = mpsc::channel(BUFFER);
        let api = self.clone();
        tokio::spawn(async move {
            if let Err(e) = api.follow(id, snapshot, feed, &tx).await {
                let _ = tx.send(Err(e)).await;
            }
        });
        Ok(rx)
    }

    async fn snapshot(&self, id: NotificationId) -> Result<WatchUpdate, Error> {
        let (notification, progress) = self.get_notification(id).await?;
        let mut vmoves = Vec::new();
        let mut page = PageRequest::first(crate::domain::MAX_PAGE_SIZE);
        loop {
            let batch = self
                .store
                .list_vmoves(id, &VMoveFilter::default(), page)
                .await?;
            vmoves.extend(batch.items);
            match batch.next {
                Some(next) => page.after = Some(next),
                None => break,
            }
        }
        Ok(WatchUpdate::Snapshot {
            notification,
            progress,
            vmoves,
        })
    }

    async fn follow(
        &self,
        id: NotificationId,
        snapshot: WatchUpdate,
        mut feed: broadcast::Receiver<std::sync::Arc<Change>>,
        tx: &mpsc::Sender<Result<WatchUpdate, Error>>,
    ) -> Result<(), Error> {
        let mut seen = Seen::default();
        let mut next = Some(snapshot);
        loop {
            if let Some(update) = next.take() {
                let fresh = seen.admit(&update);
                let terminal = seen.terminal;
                if fresh && tx.send(Ok(update)).await.is_err() {
                    return Ok(()); // the client left
                }
                if terminal {
                    return Ok(());
                }
            }
            let received = tokio::select! {
                // The client left: end now, not at the next change (a
                // quiet notification would keep this task, its snapshot
                // and its place in the feed until then).
                () = tx.closed() => return Ok(()),
                received = feed.recv() => received,
            };
            match received {
                Ok(change) if change.notification_id() == id => {
                    next = match change.as_ref() {
                        Change::Notification(n) => Some(WatchUpdate::Notification(n.clone())),
                        Change::VMove(v) => Some(WatchUpdate::VMove(v.clone())),
                        Change::Progress { event, .. } => {
                            Some(WatchUpdate::Progress(event.clone()))
                        }
                        // The vmove's own change carries its current step.
                        Change::Step(_) => None,
                    };
                }
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(notification_id = %id, missed, "watcher lagged; sending a snapshot");
                    next = Some(self.snapshot(id).await?);
                }
                Err(broadcast::error::RecvError::Closed) => {
                    return Err(Error::Unavailable("the API is shutting down".to_owned()));
                }
            }
        }
    }
}

/// What a watcher has already sent, so that it never sends an older state
/// after a newer one, nor a progress event twice.
#[derive(Default)]
struct Seen {
    notification: Option<DateTime<Utc>>,
    vmoves: HashMap<VMoveId, DateTime<Utc>>,
    progress: u64,
    terminal: bool,
}

impl Seen {
    /// Records `update`; false if it is older than what was sent.
    fn admit(&mut self, update: &WatchUpdate) -> bool {
        match update {
            WatchUpdate::Snapshot {
                notification,
                progress,
                vmoves,
            } => {
                self.notification = Some(notification.updated_at);
                self.terminal = notification.status().is_terminal();
                for v in vmoves {
                    self.vmoves.insert(v.id, v.updated_at);
                }
                self.progress = progress.iter().map(|p| p.sequence).max().unwrap_or(0);
                true
            }
            WatchUpdate::Notification(n) => {
                if self.notification.is_some_and(|at| n.updated_at < at) {
                    return false;
                }
                self.notification = Some(n.updated_at);
                self.terminal = n.status().is_terminal();
                true
            }
            WatchUpdate::VMove(v) => {
                if self.vmoves.get(&v.id).is_some_and(|at| v.updated_at < *at) {
                    return false;
                }
                self.vmoves.insert(v.id, v.updated_at);
                true
            }
            WatchUpdate::Progress(p) => {
                if p.sequence <= self.progress {
                    return false;
                }
                self.progress = p.sequence;
                true
            }
        }
    }
}
