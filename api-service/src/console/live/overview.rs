//! The overview's stream: the change feed, read from before the overview
//! is (so nothing committed in between is missed), moves each recovery's
//! progress and status row by row; a recovery seen for the first time is
//! read and added at the top. Hosts are not in the change feed: a host's
//! row is read again when a change names it (its notifications, the
//! host-level steps of its recovery, a console action), and every host is
//! read again every [`HOSTS_EVERY`] for changes made through the APIs;
//! only rows that changed are sent, and the whole part only when segments
//! or hosts were added or removed.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use super::{Op, Sender, admit, open, sleep_until};
use crate::auth::Operation;
use crate::changes::Change;
use crate::console::Console;
use crate::console::error::ConsoleError;
use crate::console::html::Html;
use crate::console::overview::{
    OPERATIONS, host_row, host_row_id, live_region, recovery_row, recovery_row_id,
};
use crate::console::reads::{self, Overview, RecoveryView, SegmentView};
use crate::console::session::{ClientAddr, Viewer};
use crate::domain::{HostId, NotificationId};
use crate::grpc::WatchSlot;
use crate::service::{Api, Error};

/// How long changes are gathered before they are sent together.
pub const GATHER: Duration = Duration::from_millis(250);

/// How often every host is read again.
pub const HOSTS_EVERY: Duration = Duration::from_secs(15);

/// `GET /console/live/overview?stamp=...`.
pub async fn stream(
    State(console): State<Console>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    client: ClientAddr,
) -> Result<Response, ConsoleError> {
    let mut operations = vec![Operation::WatchNotification];
    operations.extend(OPERATIONS);
    let (viewer, slot) = admit(&console, &headers, client, &operations).await?;
    let (response, sender) = open(&console);
    let stamp = query.get("stamp").cloned();
    tokio::spawn(async move {
        let task = Follow {
            console,
            viewer,
            sender,
            _slot: slot,
        };
        if let Err(err) = task.run(stamp.as_deref()).await {
            tracing::info!(error = %err, "console overview stream ended");
        }
    });
    Ok(response)
}

/// What the page shows, kept as the changes come.
pub struct OverviewModel {
    recoveries: HashMap<NotificationId, RecoveryView>,
    more_running: bool,
    segments: Vec<SegmentView>,
    /// Each host row as last sent.
    host_rows: HashMap<HostId, Html>,
    host_ids: HashMap<String, HostId>,
}

/// What changed since the last patch.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Dirty {
    /// Shown recoveries that changed.
    pub recoveries: BTreeSet<NotificationId>,
    /// Recoveries not shown yet: read and added at the top.
    pub unseen: BTreeSet<NotificationId>,
    /// Hosts to read again, by name.
    pub hosts: BTreeSet<String>,
}

impl Dirty {
    pub fn is_empty(&self) -> bool {
        self.recoveries.is_empty() && self.unseen.is_empty() && self.hosts.is_empty()
    }
}

/// The segments and their hosts, as far as the page's frame goes: a
/// change here needs the whole part sent again.
fn frame(segments: &[SegmentView]) -> Vec<(String, Vec<HostId>)> {
    segments
        .iter()
        .map(|s| {
            (
                format!(
                    "{}/{}/{}/{}",
                    s.segment.id, s.segment.name, s.segment.enabled, s.segment.recovery_method
                ),
                s.hosts.iter().map(|h| h.host.id).collect(),
            )
        })
        .collect()
}

impl OverviewModel {
    pub fn new(overview: Overview, viewer: &Viewer) -> Self {
        let mut model = Self {
            recoveries: overview
                .recoveries
                .into_iter()
                .map(|r| (r.notification.id, r))
                .collect(),
            more_running: overview.more_running,
            segments: Vec::new(),
            host_rows: HashMap::new(),
            host_ids: HashMap::new(),
        };
        model.set_segments(overview.segments, viewer);
        model
    }

    fn set_segments(&mut self, segments: Vec<SegmentView>, viewer: &Viewer) {
        self.host_rows.clear();
        self.host_ids.clear();
        for view in segments.iter().flat_map(|s| &s.hosts) {
            self.host_rows.insert(view.host.id, host_row(view, viewer));
            self.host_ids.insert(view.host.name.clone(), view.host.id);
        }
        self.segments = segments;
    }

    /// What the page shows now.
    pub fn overview(&self) -> Overview {
        let mut recoveries: Vec<RecoveryView> = self.recoveries.values().cloned().collect();
        recoveries.sort_by_key(|r| std::cmp::Reverse(r.notification.row_id));
        Overview {
            segments: self.segments.clone(),
            recoveries,
            more_running: self.more_running,
        }
    }

    /// Notes what `change` touches.
    pub fn apply(&mut self, change: &Change, dirty: &mut Dirty) {
        match change {
            Change::Notification(n) => {
                dirty.hosts.insert(n.hostname.clone());
                match self.recoveries.get_mut(&n.id) {
                    Some(shown) => {
                        shown.notification = n.clone();
                        dirty.recoveries.insert(n.id);
                    }
                    None => {
                        dirty.unseen.insert(n.id);
                    }
                }
            }
            Change::VMove(v) => {
                if let Some(shown) = self.recoveries.get_mut(&v.notification_id) {
                    shown.resolved.insert(v.id, v.status().is_resolved());
                    dirty.recoveries.insert(v.notification_id);
                }
            }
            // The vmove's own change moves the row.
            Change::Step(_) => {}
            Change::Progress {
                notification_id,
                event,
            } => {
                if event.instance_id.is_none()
                    && let Some(shown) = self.recoveries.get(notification_id)
                {
                    dirty.hosts.insert(shown.notification.hostname.clone());
                }
            }
        }
    }

    /// The patch for `dirty`, reading what it needs; `None` when the
    /// frame changed (a host came or went): send the whole part.
    pub async fn patch(
        &mut self,
        api: &Api,
        dirty: Dirty,
        viewer: &Viewer,
    ) -> Result<Option<Vec<Op>>, Error> {
        let mut ops = Vec::new();
        for id in &dirty.unseen {
            let (notification, _) = api.get_notification(*id).await?;
            let view = reads::recovery(api, notification).await?;
            if self.recoveries.is_empty() {
                ops.push(Op::remove("recoveries-none"));
            }
            ops.push(Op::upsert(
                recovery_row_id(&id.to_string()),
                recovery_row(&view),
                "recoveries-body",
                "start",
            ));
            self.recoveries.insert(*id, view);
        }
        for id in dirty.recoveries.difference(&dirty.unseen) {
            if let Some(view) = self.recoveries.get(id) {
                ops.push(Op::replace(
                    recovery_row_id(&id.to_string()),
                    recovery_row(view),
                ));
            }
        }
        for name in &dirty.hosts {
            let known = self.host_ids.get(name).copied();
            let view = reads::host(api, name).await?;
            match (known, view) {
                (None, None) => {}
                (Some(id), Some(view)) if view.host.id == id => {
                    let row = host_row(&view, viewer);
                    if self.host_rows.get(&id) != Some(&row) {
                        ops.push(Op::replace(host_row_id(&id.to_string()), row.clone()));
                        self.host_rows.insert(id, row);
                    }
                }
                _ => return Ok(None),
            }
        }
        Ok(Some(ops))
    }

    /// Every host read again: the rows that changed, or `None` when the
    /// frame did.
    pub fn refresh(&mut self, segments: Vec<SegmentView>, viewer: &Viewer) -> Option<Vec<Op>> {
        if frame(&segments) != frame(&self.segments) {
            self.set_segments(segments, viewer);
            return None;
        }
        let mut ops = Vec::new();
        for view in segments.iter().flat_map(|s| &s.hosts) {
            let row = host_row(view, viewer);
            if self.host_rows.get(&view.host.id) != Some(&row) {
                ops.push(Op::replace(
                    host_row_id(&view.host.id.to_string()),
                    row.clone(),
                ));
                self.host_rows.insert(view.host.id, row);
            }
        }
        self.segments = segments;
        Some(ops)
    }
}

struct Follow {
    console: Console,
    viewer: Viewer,
    sender: Sender,
    /// Given back when the stream ends.
    _slot: WatchSlot,
}

impl Follow {
    async fn run(self, stamp: Option<&str>) -> Result<(), Error> {
        let api = self.console.api().clone();
        let mut feed = api.changes().subscribe();
        let mut hosts_changed = self.console.hosts_watch();
        let mut model = OverviewModel::new(reads::overview(&api).await?, &self.viewer);
        if !self
            .sender
            .first(&live_region(&model.overview(), &self.viewer), stamp)
            .await
        {
            return Ok(());
        }
        let draining = self.console.draining();
        let mut dirty = Dirty::default();
        let mut due: Option<Instant> = None;
        let mut hosts_every = tokio::time::interval_at(Instant::now() + HOSTS_EVERY, HOSTS_EVERY);
        loop {
            let refresh = tokio::select! {
                () = self.sender.closed() => return Ok(()),
                () = draining.cancelled() => return Ok(()),
                received = feed.recv() => match received {
                    Ok(change) => {
                        model.apply(&change, &mut dirty);
                        if !dirty.is_empty() && due.is_none() {
                            due = Some(Instant::now() + GATHER);
                        }
                        false
                    }
                    Err(RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, "console overview lagged; reading it again");
                        model = OverviewModel::new(reads::overview(&api).await?, &self.viewer);
                        dirty = Dirty::default();
                        due = None;
                        if !self.sender.snapshot(&live_region(&model.overview(), &self.viewer)).await {
                            return Ok(());
                        }
                        false
                    }
                    Err(RecvError::Closed) => return Ok(()),
                },
                changed = hosts_changed.changed() => changed.is_ok(),
                _ = hosts_every.tick() => true,
                () = sleep_until(due) => {
                    due = None;
                    let patch = model.patch(&api, std::mem::take(&mut dirty), &self.viewer).await?;
                    if !self.send(&model, patch).await {
                        return Ok(());
                    }
                    false
                }
            };
            if refresh {
                let (segments, _) = reads::segments(&api).await?;
                let patch = model.refresh(segments, &self.viewer);
                if !self.send(&model, patch).await {
                    return Ok(());
                }
            }
        }
    }

    /// Sends a patch, or the whole part when there is none.
    async fn send(&self, model: &OverviewModel, patch: Option<Vec<Op>>) -> bool {
        match patch {
            Some(ops) => self.sender.patch(&ops).await,
            None => {
                self.sender
                    .snapshot(&live_region(&model.overview(), &self.viewer))
                    .await
            }
        }
    }
}
