//! A recovery's page: the notification's status and message, its runs and
//! trace, the instances that failed and why, and one row per instance
//! with its timeline (`timeline`), then the events of the runs. The
//! [`RecoveryModel`] holds what the page shows and tells, for each change
//! the live stream receives, which parts of the page it touched, so the
//! stream sends those alone: a row, not the table.

use std::collections::HashMap;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use super::Console;
use super::error::ConsoleError;
use super::html::Html;
use super::layout::{self, Nav, badge, flag};
use super::reads;
use super::session::{ClientAddr, Viewer};
use super::timeline::{EventRecord, InstanceRecord, StepRecord, timeline};
pub use super::touched::{Since, Touched};
use crate::auth::Operation;
use crate::domain::{InstanceStep, Notification, NotificationId, ProgressEvent, VMove, VMoveId};
use crate::service::WatchUpdate;
use crate::status::{NotificationStatus, VMoveStatus};

/// What a recovery's page reads.
pub const OPERATIONS: [Operation; 2] = [Operation::GetNotification, Operation::ListVmoves];

/// A notification id from a path, or a 400 naming it.
pub fn notification_id(raw: &str) -> Result<NotificationId, ConsoleError> {
    raw.parse()
        .map_err(|_| ConsoleError::BadRequest(format!("notification id: {raw:?} is not a UUID")))
}

/// Everything a recovery's page shows.
#[derive(Clone, Debug)]
pub struct RecoveryModel {
    pub notification: Notification,
    pub trace_id: Option<String>,
    vmoves: Vec<VMove>,
    by_id: HashMap<VMoveId, usize>,
    by_instance: HashMap<String, usize>,
    /// Each instance's progress events, by vmove index.
    instance_events: HashMap<usize, Vec<EventRecord>>,
    /// Each instance's steps, oldest first, by instance id: the step
    /// history read with the model, and each new current step its vmove
    /// reports after.
    steps: HashMap<String, Vec<StepRecord>>,
    /// The newest event sequence of each instance, by vmove index.
    instance_sequence: HashMap<usize, u64>,
    /// The events of no instance (the runs' own), in order.
    run_events: Vec<ProgressEvent>,
    last_sequence: u64,
}

impl RecoveryModel {
    /// The model of `notification`: its events, its vmoves, the steps of
    /// its instances (`(instance id, step)`, oldest first) and its trace.
    pub fn new(
        notification: Notification,
        progress: Vec<ProgressEvent>,
        vmoves: Vec<VMove>,
        steps: Vec<(String, StepRecord)>,
        trace_id: Option<String>,
    ) -> Self {
        let mut by_instance: HashMap<String, Vec<StepRecord>> = HashMap::new();
        for (instance, step) in steps {
            by_instance.entry(instance).or_default().push(step);
        }
        let mut model = Self {
            notification,
            trace_id,
            steps: by_instance,
            vmoves: Vec::new(),
            by_id: HashMap::new(),
            by_instance: HashMap::new(),
            instance_events: HashMap::new(),
            instance_sequence: HashMap::new(),
            run_events: Vec::new(),
            last_sequence: 0,
        };
        for vmove in vmoves {
            model.put_vmove(vmove);
        }
        for event in progress {
            model.put_event(event);
        }
        model
    }

    /// Adds or replaces a vmove; its index and whether it is new.
    fn put_vmove(&mut self, vmove: VMove) -> (usize, bool) {
        if let Some(step) = &vmove.step {
            self.add_step(
                &vmove.instance_id,
                StepRecord {
                    step: step.clone(),
                    message: vmove.step_message.clone(),
                    at: vmove.step_time,
                    attempt: None,
                },
            );
        }
        if let Some(&i) = self.by_id.get(&vmove.id) {
            self.vmoves[i] = vmove;
            return (i, false);
        }
        let i = self.vmoves.len();
        self.by_id.insert(vmove.id, i);
        self.by_instance.insert(vmove.instance_id.clone(), i);
        self.vmoves.push(vmove);
        (i, true)
    }

    /// Adds a step to an instance's timeline, once (a step is known by
    /// its name and time: the step history and its vmove's current step
    /// both name it); false when it was known.
    fn add_step(&mut self, instance_id: &str, step: StepRecord) -> bool {
        let steps = self.steps.entry(instance_id.to_owned()).or_default();
        if steps.iter().any(|s| s.step == step.step && s.at == step.at) {
            return false;
        }
        let at = steps.partition_point(|s| s.at <= step.at);
        steps.insert(at, step);
        true
    }

    /// A step the change feed reported (`Change::Step`): the rows it
    /// touched.
    pub fn put_step(&mut self, step: &InstanceStep) -> Touched {
        let mut touched = Touched::default();
        let record = StepRecord {
            step: step.step.clone(),
            message: Some(step.message.clone()).filter(|m| !m.is_empty()),
            at: Some(step.time),
            attempt: Some(step.attempt),
        };
        if self.add_step(&step.instance_id, record)
            && let Some(&i) = self.by_instance.get(&step.instance_id)
        {
            touched.rows.insert(i);
        }
        touched
    }

    /// Adds a progress event (once, by sequence): to its instance's row,
    /// or to the runs' events.
    fn put_event(&mut self, event: ProgressEvent) -> Touched {
        let mut touched = Touched::default();
        if event.sequence <= self.last_sequence {
            return touched;
        }
        self.last_sequence = event.sequence;
        let row = event
            .instance_id
            .as_ref()
            .and_then(|id| self.by_instance.get(id).copied());
        match row {
            Some(i) => {
                self.instance_events
                    .entry(i)
                    .or_default()
                    .push(EventRecord {
                        task: event.task,
                        state: event.state,
                        message: event.message,
                        at: event.time,
                    });
                self.instance_sequence.insert(i, event.sequence);
                touched.rows.insert(i);
            }
            None => {
                touched.run_events.push(self.run_events.len());
                self.run_events.push(event);
            }
        }
        touched
    }

    /// Applies one update of the notification's watch.
    pub fn apply(&mut self, update: WatchUpdate) -> Touched {
        match update {
            WatchUpdate::Snapshot {
                notification,
                progress,
                vmoves,
            } => {
                // The steps seen so far stay: a snapshot has only the
                // current one of each instance.
                let steps = std::mem::take(&mut self.steps)
                    .into_iter()
                    .flat_map(|(id, steps)| steps.into_iter().map(move |s| (id.clone(), s)))
                    .collect();
                *self = Self::new(notification, progress, vmoves, steps, self.trace_id.clone());
                Touched {
                    all: true,
                    ..Touched::default()
                }
            }
            WatchUpdate::Notification(n) => {
                self.notification = n;
                Touched {
                    head: true,
                    ..Touched::default()
                }
            }
            WatchUpdate::VMove(v) => {
                let failure = |v: &VMove| {
                    (v.status() == VMoveStatus::Failed)
                        .then(|| v.record.message().map(str::to_owned))
                };
                let before = self.by_id.get(&v.id).map(|&i| failure(&self.vmoves[i]));
                let after = failure(&v);
                let (i, added) = self.put_vmove(v);
                let mut touched = Touched {
                    counts: true,
                    failures: before.flatten() != after,
                    ..Touched::default()
                };
                if added {
                    touched.new_rows.insert(i);
                } else {
                    touched.rows.insert(i);
                }
                touched
            }
            WatchUpdate::Progress(event) => self.put_event(event),
        }
    }

    pub fn id(&self) -> String {
        self.notification.id.to_string()
    }

    /// Where the page rendered from this model stands.
    pub fn since(&self) -> Since {
        Since {
            notification: self.notification.updated_at.timestamp_micros(),
            vmoves: self
                .vmoves
                .iter()
                .map(|v| v.updated_at.timestamp_micros())
                .max()
                .unwrap_or(i64::MIN),
            sequence: self.last_sequence,
        }
    }

    /// What may have changed since a page stood at `since` (at the same
    /// time is counted as changed: a part sent twice is harmless, one
    /// missed is not).
    pub fn touched_since(&self, since: &Since) -> Touched {
        let mut touched = Touched {
            head: self.notification.updated_at.timestamp_micros() >= since.notification,
            ..Touched::default()
        };
        for (i, v) in self.vmoves.iter().enumerate() {
            let events = self
                .instance_sequence
                .get(&i)
                .is_some_and(|&s| s > since.sequence);
            if v.updated_at.timestamp_micros() >= since.vmoves || events {
                touched.rows.insert(i);
            }
        }
        if !touched.rows.is_empty() {
            touched.counts = true;
            touched.failures = true;
            touched.new_rows = touched.rows.clone();
        }
        touched.run_events = self
            .run_events
            .iter()
            .enumerate()
            .filter(|(_, e)| e.sequence > since.sequence)
            .map(|(i, _)| i)
            .collect();
        touched
    }

    /// Instances by status.
    fn count(&self, status: VMoveStatus) -> usize {
        self.vmoves.iter().filter(|v| v.status() == status).count()
    }

    /// The part of the page the stream keeps up to date.
    pub fn live_region(&self, viewer: &Viewer, trace_link: Option<&str>) -> Html {
        let mut out = Html::new();
        out.html(&self.head(viewer, trace_link))
            .html(&self.counts())
            .html(&self.failures());
        out.raw("<section aria-labelledby=\"instances-title\"><h2 id=\"instances-title\">Instances</h2>")
            .raw("<table class=\"grid instances\" id=\"instances\"><caption>Each instance and its timeline</caption>")
            .raw("<thead><tr><th scope=\"col\">Instance</th><th scope=\"col\">From</th><th scope=\"col\">Status</th>")
            .raw("<th scope=\"col\">To</th><th scope=\"col\">Timeline</th></tr></thead><tbody id=\"instances-body\">");
        if self.vmoves.is_empty() {
            out.raw(
                "<tr id=\"instances-none\"><td colspan=\"5\">No instance planned yet.</td></tr>",
            );
        }
        for i in 0..self.vmoves.len() {
            out.html(&self.row(i));
        }
        out.raw("</tbody></table></section>")
            .raw("<section aria-labelledby=\"events-title\"><h2 id=\"events-title\">Runs and events</h2>")
            .raw("<table class=\"grid\" id=\"events\"><caption>What the runs reported beside the instances, in order</caption>")
            .raw("<thead><tr><th scope=\"col\">Time</th><th scope=\"col\">Task</th><th scope=\"col\">State</th>")
            .raw("<th scope=\"col\">Message</th></tr></thead><tbody id=\"events-body\">");
        for i in 0..self.run_events.len() {
            out.html(&self.run_event_row(i));
        }
        out.raw("</tbody></table></section>");
        out
    }

    /// The summary: status, message, runs, trace, and the retry action
    /// for those allowed when the notification failed.
    pub fn head(&self, viewer: &Viewer, trace_link: Option<&str>) -> Html {
        let n = &self.notification;
        let id = self.id();
        let mut out = Html::new();
        out.raw("<section id=\"n-head\" aria-labelledby=\"summary-title\"><h2 id=\"summary-title\">Summary</h2><dl class=\"summary\">")
            .raw("<dt>Status</dt><dd id=\"verdict\" data-status=\"")
            .raw(n.status().as_str())
            .raw("\">");
        badge(&mut out, n.status().as_str());
        out.raw("</dd><dt>Message</dt><dd class=\"message\">")
            .text(n.message.as_deref().unwrap_or("–"))
            .raw("</dd><dt>Type</dt><dd>")
            .raw(n.notification_type.as_str())
            .raw("</dd><dt>Reported</dt><dd>")
            .time(n.generated_time)
            .raw("</dd><dt>Runs</dt><dd id=\"runs\">")
            .num(n.attempts)
            .raw("</dd><dt>Notification</dt><dd><code>")
            .text(&id)
            .raw("</code></dd><dt>Trace</dt><dd>");
        match (&self.trace_id, trace_link) {
            (Some(trace), Some(link)) => {
                out.raw("<a href=\"")
                    .text(link)
                    .raw("\" rel=\"noreferrer\">")
                    .text(trace)
                    .raw("</a>");
            }
            (Some(trace), None) => {
                out.raw("<code>").text(trace).raw("</code>");
            }
            (None, _) => {
                out.raw("none recorded");
            }
        }
        out.raw("</dd></dl>");
        if n.status() == NotificationStatus::Failed && viewer.may_retry {
            out.raw("<p><a class=\"action\" id=\"retry\" href=\"/console/notifications/")
                .text(&id)
                .raw("/retry\">Retry this recovery</a></p>");
        }
        out.raw("</section>");
        out
    }

    /// The instances by status.
    pub fn counts(&self) -> Html {
        let mut out = Html::new();
        out.raw("<section id=\"n-counts\" aria-labelledby=\"counts-title\"><h2 id=\"counts-title\">Progress</h2><p>");
        let total = self.vmoves.len();
        let done = self
            .vmoves
            .iter()
            .filter(|v| v.status().is_resolved())
            .count();
        super::overview::progress(&mut out, done, total);
        out.raw("</p><ul class=\"counts\">");
        for status in VMoveStatus::ALL {
            out.raw("<li>");
            badge(&mut out, status.as_str());
            out.raw(" <span data-count=\"")
                .raw(status.as_str())
                .raw("\">")
                .num(self.count(status))
                .raw("</span></li>");
        }
        out.raw("</ul></section>");
        out
    }

    /// The instances that failed, with their cause (an empty element when
    /// none did, so that a patch can fill it).
    pub fn failures(&self) -> Html {
        let mut out = Html::new();
        out.raw("<div id=\"n-failures\">");
        let failed: Vec<&VMove> = self
            .vmoves
            .iter()
            .filter(|v| v.status() == VMoveStatus::Failed)
            .collect();
        if !failed.is_empty() {
            out.raw("<section aria-labelledby=\"failures-title\"><h2 id=\"failures-title\">Failed instances</h2><ul class=\"failures\" id=\"failures\">");
            for v in failed {
                out.raw("<li><a href=\"#")
                    .text(&row_id(&v.id))
                    .raw("\">")
                    .text(&v.instance_name)
                    .raw("</a>: <span class=\"cause\">")
                    .text(v.record.message().unwrap_or("no message"))
                    .raw("</span></li>");
            }
            out.raw("</ul></section>");
        }
        out.raw("</div>");
        out
    }

    /// The element id of vmove `i`'s row.
    pub fn row_id(&self, i: usize) -> String {
        row_id(&self.vmoves[i].id)
    }

    /// The row of vmove `i`.
    pub fn row(&self, i: usize) -> Html {
        let v = &self.vmoves[i];
        let record = InstanceRecord {
            status: v.status(),
            dest_host: v.record.dest_host().map(str::to_owned),
            end_time: v.record.end_time(),
            message: v.record.message().map(str::to_owned),
        };
        let events = self.instance_events.get(&i).map_or(&[][..], Vec::as_slice);
        let steps = self
            .steps
            .get(&v.instance_id)
            .map_or(&[][..], Vec::as_slice);
        let line = timeline(&record, steps, events);
        let mut out = Html::new();
        out.raw("<tr id=\"")
            .text(&row_id(&v.id))
            .raw("\" data-status=\"")
            .raw(v.status().as_str())
            .raw("\"><th scope=\"row\">")
            .text(&v.instance_name)
            .raw("<br><code>")
            .text(&v.instance_id)
            .raw("</code></th><td>")
            .text(&v.source_host)
            .raw("</td><td>");
        badge(&mut out, v.status().as_str());
        if v.locked {
            flag(&mut out, "locked", "lock held");
        }
        if v.record.attempts() > 1 {
            out.raw(" <span class=\"runs\">")
                .num(v.record.attempts())
                .raw(" runs</span>");
        }
        out.raw("</td><td>")
            .text(v.record.dest_host().unwrap_or("–"))
            .raw("</td><td><ol class=\"timeline")
            .raw(if line.ended { " ended" } else { "" })
            .raw("\">");
        for entry in &line.entries {
            out.raw("<li class=\"")
                .raw(entry.tone.class())
                .raw("\"><span class=\"stage\">")
                .text(&entry.label)
                .raw("</span> ");
            if let Some(at) = entry.at {
                out.time(at).raw(" ");
            }
            if let Some(detail) = &entry.detail {
                out.raw("<span class=\"detail\">")
                    .text(detail)
                    .raw("</span>");
            }
            out.raw("</li>");
        }
        out.raw("</ol></td></tr>");
        out
    }

    /// The element id of run event `i`'s row (by its sequence, the same
    /// on every page and stream).
    pub fn run_event_id(&self, i: usize) -> String {
        format!("e-{}", self.run_events[i].sequence)
    }

    /// The row of run event `i`.
    pub fn run_event_row(&self, i: usize) -> Html {
        let e = &self.run_events[i];
        let mut out = Html::new();
        out.raw("<tr id=\"")
            .text(&self.run_event_id(i))
            .raw("\"><td>")
            .time(e.time)
            .raw("</td><td>")
            .text(&e.task)
            .raw("</td><td>");
        badge(&mut out, e.state.as_str());
        out.raw("</td><td class=\"message\">")
            .text(&e.message)
            .raw("</td></tr>");
        out
    }
}

/// The row id of a vmove.
pub fn row_id(id: &VMoveId) -> String {
    format!("v-{id}")
}

/// The model of notification `id`, read now.
pub async fn load(console: &Console, id: NotificationId) -> Result<RecoveryModel, ConsoleError> {
    let api = console.api();
    let (notification, progress) = api.get_notification(id).await?;
    let vmoves = reads::vmoves(api, id).await?;
    let steps = reads::steps(api, id).await?;
    let trace_id = api.trace_id(id).await?;
    Ok(RecoveryModel::new(
        notification,
        progress,
        vmoves,
        steps,
        trace_id,
    ))
}

/// `GET /console/notifications/{id}`.
pub async fn page(
    State(console): State<Console>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    client: ClientAddr,
) -> Result<Response, ConsoleError> {
    let next = format!("/console/notifications/{raw}");
    let viewer = Viewer::admit(console.guard(), &headers, client, &OPERATIONS, Some(&next)).await?;
    let id = notification_id(&raw)?;
    let model = load(&console, id).await?;
    let trace_link = console.trace_link(model.trace_id.as_deref());
    let live = model.live_region(&viewer, trace_link.as_deref());
    let mut body = Html::new();
    body.raw("<h1>Recovery of ")
        .text(&model.notification.hostname)
        .raw("</h1><div id=\"live\" data-live=\"")
        .text(&format!(
            "/console/live/notifications/{id}?since={}",
            model.since().encode()
        ))
        .raw("\">")
        .html(&live)
        .raw("</div>");
    let title = format!("Recovery of {}", model.notification.hostname);
    Ok(layout::page(&title, &viewer, Nav::Other, &body).into_response())
}
