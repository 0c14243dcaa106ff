//! How `notification watch` shows a recovery: live bars on a terminal
//! (one line per instance with its step and status, a line for the
//! notification and one for the latest progress event), plain log lines
//! when stdout is not a terminal, or one JSON object (YAML document) per
//! update for scripts; then a final summary.

use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use super::state::{Applied, Summary, WatchState};
use crate::output::{self, Encoding, Format, name_of, shown, text, when};
use crate::resources::{Notification, ProgressEvent, Vmove, VmoveStatus, WatchUpdate};

/// One of the three ways to show a watch.
pub enum WatchDisplay {
    Live(LiveBars),
    Log,
    Encoded(Encoding),
}

impl WatchDisplay {
    /// Bars only for a table on a terminal.
    pub fn choose(format: Format, stdout_is_terminal: bool) -> Self {
        match format.encoding() {
            Some(encoding) => Self::Encoded(encoding),
            None if stdout_is_terminal => Self::Live(LiveBars::new(ProgressDrawTarget::stdout())),
            None => Self::Log,
        }
    }

    /// Shows one update; returns what to print on stdout (nothing for the
    /// live bars, which draw themselves).
    pub fn show(
        &mut self,
        state: &WatchState,
        update: &WatchUpdate,
        applied: Applied,
    ) -> Result<String, output::Error> {
        if applied == Applied::Stale {
            return Ok(String::new());
        }
        match self {
            Self::Live(bars) => {
                bars.refresh(state, applied);
                Ok(String::new())
            }
            Self::Log => Ok(log_lines(state, update, applied)
                .into_iter()
                .map(|line| line + "\n")
                .collect()),
            Self::Encoded(encoding) => encode_line(*encoding, &Line::from(update)),
        }
    }

    /// The final summary; removes the bars first.
    pub fn finish(&mut self, state: &WatchState) -> Result<String, output::Error> {
        let summary = state.summary();
        match self {
            Self::Live(bars) => {
                bars.clear();
                Ok(summary_text(&summary))
            }
            Self::Log => Ok(summary_text(&summary)),
            Self::Encoded(encoding) => encode_line(*encoding, &Line::Summary(&summary)),
        }
    }

    /// Removes the bars after an error, so the message is readable.
    pub fn abandon(&mut self) {
        if let Self::Live(bars) = self {
            bars.clear();
        }
    }
}

// ---- JSON lines / YAML documents ---------------------------------------------------

/// One line of `--format json` output.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Line<'a> {
    Snapshot {
        notification: &'a Notification,
        vmoves: &'a [Vmove],
    },
    Notification {
        notification: &'a Notification,
    },
    Vmove {
        vmove: &'a Vmove,
    },
    ProgressEvent {
        progress_event: &'a ProgressEvent,
    },
    Summary(&'a Summary),
}

impl<'a> From<&'a WatchUpdate> for Line<'a> {
    fn from(update: &'a WatchUpdate) -> Self {
        match update {
            WatchUpdate::Snapshot {
                notification,
                vmoves,
            } => Self::Snapshot {
                notification,
                vmoves,
            },
            WatchUpdate::Notification(notification) => Self::Notification { notification },
            WatchUpdate::Vmove(vmove) => Self::Vmove { vmove },
            WatchUpdate::Progress(progress_event) => Self::ProgressEvent { progress_event },
        }
    }
}

fn encode_line(encoding: Encoding, line: &Line<'_>) -> Result<String, output::Error> {
    Ok(match encoding {
        Encoding::Json => crate::output::json_escaped(&serde_json::to_string(line)?) + "\n",
        Encoding::Yaml => format!("---\n{}", crate::output::yaml_escaped(line)?),
    })
}

// ---- plain log lines ------------------------------------------------------------------

fn notification_line(n: &Notification) -> String {
    let mut line = format!(
        "notification {} {}: {} {} (attempts {})",
        n.id,
        name_of(n.status),
        name_of(n.notification_type),
        n.hostname,
        n.attempts
    );
    if !n.message.is_empty() {
        line.push_str(&format!(" — {}", n.message));
    }
    shown(&line)
}

fn vmove_line(v: &Vmove) -> String {
    let mut line = format!(
        "instance {} {}: step {}, {} -> {}",
        v.instance_label(),
        name_of(v.status),
        text(&v.step),
        v.source_host,
        text(&v.dest_host)
    );
    if v.attempts > 1 {
        line.push_str(&format!(" (attempt {})", v.attempts));
    }
    if !v.message.is_empty() {
        line.push_str(&format!(" — {}", v.message));
    }
    shown(&line)
}

fn progress_line(p: &ProgressEvent) -> String {
    let mut line = format!(
        "progress #{} {} {} {}",
        p.sequence,
        when(p.time),
        p.task,
        p.state
    );
    if !p.instance_id.is_empty() {
        line.push_str(&format!(" instance {}", p.instance_id));
    }
    if !p.message.is_empty() {
        line.push_str(&format!(": {}", p.message));
    }
    shown(&line)
}

/// The log lines for one applied update.
pub fn log_lines(state: &WatchState, update: &WatchUpdate, applied: Applied) -> Vec<String> {
    match (update, applied) {
        (_, Applied::Stale) => Vec::new(),
        (_, Applied::Reset { resync }) => {
            let mut lines = Vec::new();
            if resync {
                lines.push("resynchronised: the watch fell behind; current state:".to_owned());
            }
            lines.extend(state.notification().map(notification_line));
            if !resync {
                lines.extend(state.progress().iter().map(progress_line));
            } else {
                lines.extend(state.latest_progress().map(progress_line));
            }
            lines.extend(state.vmoves().iter().map(vmove_line));
            lines
        }
        (WatchUpdate::Notification(n), _) => vec![notification_line(n)],
        (WatchUpdate::Vmove(v), _) => vec![vmove_line(v)],
        (WatchUpdate::Progress(p), _) => vec![progress_line(p)],
        (WatchUpdate::Snapshot { .. }, _) => Vec::new(),
    }
}

// ---- the summary ----------------------------------------------------------------------

/// The final table and the notification's final status and message.
pub fn summary_text(summary: &Summary) -> String {
    let mut table = output::new_table(&[
        "instance",
        "source",
        "destination",
        "status",
        "duration",
        "message",
    ]);
    for row in &summary.instances {
        let instance = if row.instance_name.is_empty() {
            row.instance_id.clone()
        } else {
            row.instance_name.clone()
        };
        table.add_row(output::shown_row(vec![
            instance,
            row.source.clone(),
            text(&row.destination),
            name_of(row.status),
            row.duration.clone(),
            text(&row.message),
        ]));
    }
    let mut out = format!("{table}\n");
    out.push_str(&format!(
        "notification {} {}",
        summary.notification_id,
        name_of(summary.status)
    ));
    if !summary.message.is_empty() {
        out.push_str(&format!(": {}", shown(&summary.message)));
    }
    out.push('\n');
    out
}

// ---- live bars ------------------------------------------------------------------------

const TICK: Duration = Duration::from_millis(120);

/// The terminal display: a notification line with a bar of instances
/// done, a line with the latest progress event, and one spinner per
/// instance.
pub struct LiveBars {
    multi: MultiProgress,
    header: ProgressBar,
    latest: ProgressBar,
    instances: Vec<ProgressBar>,
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
        .progress_chars("=> ")
}

fn header_style(instances: u64) -> ProgressStyle {
    if instances == 0 {
        style("{spinner:.green} notification {prefix} {msg:.bold}  {elapsed}")
    } else {
        style(
            "{spinner:.green} notification {prefix} {msg:.bold} [{bar:24.cyan/blue}] {pos}/{len} \
             instances done  {elapsed}",
        )
    }
}

fn instance_style() -> ProgressStyle {
    style("  {spinner:.cyan} {prefix:32!} {msg}")
}

fn instance_done_style() -> ProgressStyle {
    style("    {prefix:32!} {msg}")
}

fn instance_message(v: &Vmove) -> String {
    let mark = match v.status {
        Some(VmoveStatus::Succeeded) => "✔ ",
        Some(VmoveStatus::Failed) => "✘ ",
        Some(VmoveStatus::Ignored) => "– ",
        _ => "",
    };
    let mut message = format!(
        "{mark}{:<9} {:<24} {} → {}",
        name_of(v.status),
        text(&v.step),
        v.source_host,
        text(&v.dest_host)
    );
    if !v.message.is_empty() {
        message.push_str(&format!("  {}", v.message));
    }
    shown(&message)
}

impl LiveBars {
    pub fn new(target: ProgressDrawTarget) -> Self {
        let multi = MultiProgress::with_draw_target(target);
        let header = multi.add(ProgressBar::new(0).with_style(header_style(0)));
        header.enable_steady_tick(TICK);
        let latest = multi.add(ProgressBar::new_spinner().with_style(style("  {msg}")));
        Self {
            multi,
            header,
            latest,
            instances: Vec::new(),
        }
    }

    fn add_instance(&mut self, vmove: &Vmove) {
        let bar = self.multi.add(
            ProgressBar::new_spinner()
                .with_style(instance_style())
                .with_prefix(vmove.instance_label().to_owned()),
        );
        bar.enable_steady_tick(TICK);
        self.instances.push(bar);
    }

    fn update_instance(&self, index: usize, vmove: &Vmove) {
        let Some(bar) = self.instances.get(index) else {
            return;
        };
        bar.set_prefix(vmove.instance_label().to_owned());
        let message = instance_message(vmove);
        if vmove.status.is_some_and(VmoveStatus::is_resolved) {
            bar.set_style(instance_done_style());
            bar.finish_with_message(message);
        } else {
            if bar.is_finished() {
                // A retried instance runs again.
                bar.reset();
                bar.set_style(instance_style());
                bar.enable_steady_tick(TICK);
            }
            bar.set_message(message);
        }
    }

    /// Brings the bars in line with `state` after `applied`.
    pub fn refresh(&mut self, state: &WatchState, applied: Applied) {
        match applied {
            Applied::Reset { .. } => {
                for bar in self.instances.drain(..) {
                    bar.finish_and_clear();
                    self.multi.remove(&bar);
                }
                for vmove in state.vmoves() {
                    self.add_instance(vmove);
                }
                for (index, vmove) in state.vmoves().iter().enumerate() {
                    self.update_instance(index, vmove);
                }
            }
            Applied::Vmove { index, added } => {
                if let Some(vmove) = state.vmoves().get(index) {
                    if added {
                        self.add_instance(vmove);
                    }
                    self.update_instance(index, vmove);
                }
            }
            Applied::Notification { .. } | Applied::Progress | Applied::Stale => {}
        }
        if let Some(n) = state.notification() {
            self.header.set_prefix(shown(&n.id));
            let mut status = name_of(n.status);
            if n.attempts > 1 {
                status.push_str(&format!(" (attempt {})", n.attempts));
            }
            self.header.set_message(status);
        }
        let (done, total) = state.instances_done();
        let (done, total) = (done as u64, total as u64);
        if self.header.length() != Some(total) {
            self.header.set_style(header_style(total));
            self.header.set_length(total);
        }
        self.header.set_position(done);
        let latest = match state.latest_progress() {
            Some(p) => format!("latest: {}", progress_line(p)),
            None => "latest: no progress reported yet".to_owned(),
        };
        self.latest.set_message(latest);
    }

    /// How many instance lines are shown.
    #[cfg(test)]
    fn instance_lines(&self) -> usize {
        self.instances.len()
    }

    /// Erases the lines, then stops the bars where nothing is drawn (so
    /// that a last tick cannot draw them again).
    fn clear(&mut self) {
        let _ = self.multi.clear();
        self.multi.set_draw_target(ProgressDrawTarget::hidden());
        for bar in self.instances.drain(..) {
            bar.finish_and_clear();
        }
        self.latest.finish_and_clear();
        self.header.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;
    use serde::Deserialize as _;

    use super::*;
    use crate::resources::{NotificationStatus, NotificationType, VmoveType};

    fn notification(status: NotificationStatus) -> Notification {
        Notification {
            id: "n1".into(),
            notification_type: Some(NotificationType::ComputeHost),
            hostname: "compute-1".into(),
            generated_time: DateTime::from_timestamp(1_750_000_000, 0),
            payload: Default::default(),
            status: Some(status),
            source_host_id: "h1".into(),
            segment_id: "s1".into(),
            message: String::new(),
            attempts: 1,
            created_at: None,
            updated_at: DateTime::from_timestamp(1_750_000_000, 0),
            progress_events: vec![],
        }
    }

    fn vmove(id: &str, status: VmoveStatus, updated: i64) -> Vmove {
        Vmove {
            id: id.into(),
            notification_id: "n1".into(),
            instance_id: format!("i-{id}"),
            instance_name: format!("vm-{id}"),
            source_host: "compute-1".into(),
            dest_host: "compute-2".into(),
            vmove_type: Some(VmoveType::Evacuation),
            status: Some(status),
            start_time: None,
            end_time: None,
            message: String::new(),
            attempts: 1,
            step: "evacuate".into(),
            created_at: None,
            updated_at: DateTime::from_timestamp(1_750_000_000 + updated, 0),
        }
    }

    fn snapshot(vmoves: Vec<Vmove>) -> WatchUpdate {
        WatchUpdate::Snapshot {
            notification: notification(NotificationStatus::Running),
            vmoves,
        }
    }

    #[test]
    fn json_lines_are_one_tagged_object_each() {
        let mut display = WatchDisplay::choose(Format::Json, true);
        let mut state = WatchState::default();
        let update = snapshot(vec![vmove("a", VmoveStatus::Ongoing, 1)]);
        let applied = state.apply(update.clone());
        let out = display.show(&state, &update, applied).unwrap();
        assert_eq!(out.lines().count(), 1);
        let line: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(line["kind"], "snapshot");
        assert_eq!(line["notification"]["status"], "running");
        assert_eq!(line["vmoves"][0]["step"], "evacuate");

        let update = WatchUpdate::Vmove(vmove("a", VmoveStatus::Succeeded, 2));
        let applied = state.apply(update.clone());
        let out = display.show(&state, &update, applied).unwrap();
        let line: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(line["kind"], "vmove");
        assert_eq!(line["vmove"]["status"], "succeeded");

        let out = display.finish(&state).unwrap();
        let line: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(line["kind"], "summary");
        assert_eq!(line["instances"][0]["destination"], "compute-2");
    }

    #[test]
    fn stale_updates_print_nothing() {
        let mut display = WatchDisplay::choose(Format::Json, false);
        let mut state = WatchState::default();
        state.apply(snapshot(vec![vmove("a", VmoveStatus::Ongoing, 5)]));
        let update = WatchUpdate::Vmove(vmove("a", VmoveStatus::Pending, 1));
        let applied = state.apply(update.clone());
        assert_eq!(display.show(&state, &update, applied).unwrap(), "");
    }

    #[test]
    fn yaml_output_is_a_stream_of_documents() {
        let mut display = WatchDisplay::choose(Format::Yaml, false);
        let mut state = WatchState::default();
        let update = snapshot(vec![]);
        let applied = state.apply(update.clone());
        let out =
            display.show(&state, &update, applied).unwrap() + &display.finish(&state).unwrap();
        let docs: Vec<serde_json::Value> = serde_yaml_ng::Deserializer::from_str(&out)
            .map(|doc| serde_json::Value::deserialize(doc).unwrap())
            .collect();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0]["kind"], "snapshot");
        assert_eq!(docs[1]["kind"], "summary");
    }

    #[test]
    fn log_lines_tell_the_story() {
        let mut state = WatchState::default();
        let mut n = notification(NotificationStatus::Running);
        n.progress_events = vec![ProgressEvent {
            sequence: 1,
            task: "disable_compute_service".into(),
            state: "succeeded".into(),
            message: String::new(),
            time: None,
            instance_id: String::new(),
        }];
        let update = WatchUpdate::Snapshot {
            notification: n,
            vmoves: vec![vmove("a", VmoveStatus::Ongoing, 1)],
        };
        let applied = state.apply(update.clone());
        let lines = log_lines(&state, &update, applied);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].contains("notification n1 running"), "{lines:?}");
        assert!(lines[1].contains("disable_compute_service"), "{lines:?}");
        assert!(
            lines[2].contains("instance vm-a ongoing: step evacuate"),
            "{lines:?}"
        );

        let update = snapshot(vec![]);
        let applied = state.apply(update.clone());
        let lines = log_lines(&state, &update, applied);
        assert!(lines[0].starts_with("resynchronised"), "{lines:?}");
    }

    #[test]
    fn the_summary_names_each_instance_and_the_final_status() {
        let mut state = WatchState::default();
        let mut n = notification(NotificationStatus::Failed);
        n.message = "instance vm-b: nova returned 503".into();
        let mut failed = vmove("b", VmoveStatus::Failed, 1);
        failed.message = "nova returned 503".into();
        state.apply(WatchUpdate::Snapshot {
            notification: n,
            vmoves: vec![vmove("a", VmoveStatus::Succeeded, 1), failed],
        });
        let text = summary_text(&state.summary());
        for needle in [
            "instance",
            "duration",
            "vm-a",
            "vm-b",
            "succeeded",
            "nova returned 503",
            "notification n1 failed: instance vm-b",
        ] {
            assert!(text.contains(needle), "{needle} missing in\n{text}");
        }
    }

    #[test]
    fn live_bars_follow_snapshots_and_new_instances() {
        let mut bars = LiveBars::new(ProgressDrawTarget::hidden());
        let mut state = WatchState::default();
        let applied = state.apply(snapshot(vec![
            vmove("a", VmoveStatus::Ongoing, 1),
            vmove("b", VmoveStatus::Pending, 1),
        ]));
        bars.refresh(&state, applied);
        assert_eq!(bars.instance_lines(), 2);

        let applied = state.apply(WatchUpdate::Vmove(vmove("c", VmoveStatus::Pending, 2)));
        bars.refresh(&state, applied);
        assert_eq!(bars.instance_lines(), 3);
        let applied = state.apply(WatchUpdate::Vmove(vmove("a", VmoveStatus::Succeeded, 3)));
        bars.refresh(&state, applied);
        assert!(bars.instances[0].is_finished());
        assert!(bars.instances[0].message().contains("succeeded"));
        assert_eq!(bars.header.position(), 1);
        assert_eq!(bars.header.length(), Some(3));

        let applied = state.apply(snapshot(vec![vmove("b", VmoveStatus::Ongoing, 9)]));
        bars.refresh(&state, applied);
        assert_eq!(bars.instance_lines(), 1, "a snapshot rebuilds the lines");
        assert!(bars.instances[0].message().contains("ongoing"));
        bars.clear();
        assert_eq!(bars.instance_lines(), 0);
    }
}
