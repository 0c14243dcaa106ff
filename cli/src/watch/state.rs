//! What a watcher knows about one notification, updated message by message
//! from `WatchNotification`: no I/O here, so every rule (a snapshot
//! replaces everything, stale changes are dropped, progress events are kept
//! once and in order, the end is a terminal notification status) is tested
//! directly.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::resources::{
    Notification, NotificationStatus, ProgressEvent, Vmove, VmoveStatus, WatchUpdate,
};

/// The notification, its vmoves (in the order they appeared) and its
/// progress events (by sequence).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WatchState {
    notification: Option<Notification>,
    vmoves: Vec<Vmove>,
    progress: Vec<ProgressEvent>,
    snapshots: u32,
}

/// What one update changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Everything was replaced: the first snapshot, or a fresh one after
    /// the watcher fell behind (`resync`).
    Reset { resync: bool },
    /// The notification's status, message or attempts changed.
    Notification { status_changed: bool },
    /// The vmove at this index was added or changed.
    Vmove { index: usize, added: bool },
    /// A progress event was added.
    Progress,
    /// Older than, or the same as, what is already known: nothing changed.
    Stale,
}

/// How a watched notification ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `finished`: every instance was recovered (or needed nothing).
    Finished,
    /// `ignored`: nothing was to be done (for example a disabled segment).
    Ignored,
    /// `failed`: the recovery gave up.
    Failed,
}

impl WatchState {
    pub fn notification(&self) -> Option<&Notification> {
        self.notification.as_ref()
    }

    pub fn vmoves(&self) -> &[Vmove] {
        &self.vmoves
    }

    pub fn progress(&self) -> &[ProgressEvent] {
        &self.progress
    }

    /// The most recent progress event.
    pub fn latest_progress(&self) -> Option<&ProgressEvent> {
        self.progress.last()
    }

    /// How many snapshots arrived (more than one: the watcher fell behind).
    #[cfg(test)]
    fn snapshots(&self) -> u32 {
        self.snapshots
    }

    pub fn apply(&mut self, update: WatchUpdate) -> Applied {
        match update {
            WatchUpdate::Snapshot {
                mut notification,
                vmoves,
            } => {
                let resync = self.snapshots > 0;
                self.snapshots += 1;
                let mut progress = std::mem::take(&mut notification.progress_events);
                progress.sort_by_key(|p| p.sequence);
                progress.dedup_by_key(|p| p.sequence);
                self.progress = progress;
                self.notification = Some(notification);
                self.vmoves = vmoves;
                Applied::Reset { resync }
            }
            WatchUpdate::Notification(mut incoming) => {
                incoming.progress_events.clear();
                match &mut self.notification {
                    Some(known) if is_older(incoming.updated_at, known.updated_at) => {
                        Applied::Stale
                    }
                    Some(known) if *known == incoming => Applied::Stale,
                    Some(known) => {
                        let status_changed = known.status != incoming.status;
                        *known = incoming;
                        Applied::Notification { status_changed }
                    }
                    None => {
                        self.notification = Some(incoming);
                        Applied::Notification {
                            status_changed: true,
                        }
                    }
                }
            }
            WatchUpdate::Vmove(incoming) => {
                match self.vmoves.iter().position(|v| v.id == incoming.id) {
                    Some(index) => {
                        let known = &mut self.vmoves[index];
                        if is_older(incoming.updated_at, known.updated_at) || *known == incoming {
                            return Applied::Stale;
                        }
                        *known = incoming;
                        Applied::Vmove {
                            index,
                            added: false,
                        }
                    }
                    None => {
                        self.vmoves.push(incoming);
                        Applied::Vmove {
                            index: self.vmoves.len() - 1,
                            added: true,
                        }
                    }
                }
            }
            WatchUpdate::Progress(event) => {
                match self
                    .progress
                    .binary_search_by_key(&event.sequence, |p| p.sequence)
                {
                    Ok(_) => Applied::Stale,
                    Err(at) => {
                        self.progress.insert(at, event);
                        Applied::Progress
                    }
                }
            }
        }
    }

    /// True once the notification is finished, failed or ignored.
    pub fn is_terminal(&self) -> bool {
        self.notification
            .as_ref()
            .is_some_and(Notification::is_terminal)
    }

    /// How it ended; `None` while it has not.
    pub fn outcome(&self) -> Option<Outcome> {
        match self.notification.as_ref()?.status? {
            NotificationStatus::Finished => Some(Outcome::Finished),
            NotificationStatus::Ignored => Some(Outcome::Ignored),
            NotificationStatus::Failed => Some(Outcome::Failed),
            NotificationStatus::New | NotificationStatus::Running | NotificationStatus::Error => {
                None
            }
        }
    }

    /// Instances whose vmove has ended, of all of them.
    pub fn instances_done(&self) -> (usize, usize) {
        let done = self
            .vmoves
            .iter()
            .filter(|v| v.status.is_some_and(VmoveStatus::is_resolved))
            .count();
        (done, self.vmoves.len())
    }

    /// The final table: one row per instance.
    pub fn summary(&self) -> Summary {
        let notification = self.notification.as_ref();
        Summary {
            notification_id: notification.map(|n| n.id.clone()).unwrap_or_default(),
            status: notification.and_then(|n| n.status),
            message: notification.map(|n| n.message.clone()).unwrap_or_default(),
            attempts: notification.map_or(0, |n| n.attempts),
            instances: self.vmoves.iter().map(InstanceSummary::from).collect(),
        }
    }
}

/// `a` is strictly older than `b` (unknown times are never older).
fn is_older(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if a < b)
}

/// The end of a watch, as printed after the last update.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    pub notification_id: String,
    pub status: Option<NotificationStatus>,
    pub message: String,
    pub attempts: u32,
    pub instances: Vec<InstanceSummary>,
}

/// One instance's recovery.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct InstanceSummary {
    pub instance_id: String,
    pub instance_name: String,
    pub source: String,
    pub destination: String,
    pub status: Option<VmoveStatus>,
    /// `end - start`, for example "1m 05s"; "-" while it has not ended.
    pub duration: String,
    pub duration_seconds: Option<f64>,
    pub attempts: u32,
    pub message: String,
}

impl From<&Vmove> for InstanceSummary {
    fn from(v: &Vmove) -> Self {
        let elapsed = match (v.start_time, v.end_time) {
            (Some(start), Some(end)) if end >= start => Some(end - start),
            _ => None,
        };
        Self {
            instance_id: v.instance_id.clone(),
            instance_name: v.instance_name.clone(),
            source: v.source_host.clone(),
            destination: v.dest_host.clone(),
            status: v.status,
            duration: elapsed.map_or_else(|| "-".to_owned(), format_duration),
            duration_seconds: elapsed
                .and_then(|d| d.to_std().ok())
                .map(|d| d.as_secs_f64()),
            attempts: v.attempts,
            message: v.message.clone(),
        }
    }
}

/// A duration for people: "850ms", "12.3s", "4m 05s", "1h 02m 03s".
pub fn format_duration(duration: chrono::TimeDelta) -> String {
    let Ok(duration) = duration.to_std() else {
        return "-".to_owned();
    };
    let millis = duration.as_millis();
    if millis < 1_000 {
        return format!("{millis}ms");
    }
    let secs = duration.as_secs();
    if secs < 60 {
        return format!("{}.{}s", secs, duration.subsec_millis() / 100);
    }
    let (hours, minutes, seconds) = (secs / 3600, secs / 60 % 60, secs % 60);
    if hours == 0 {
        format!("{minutes}m {seconds:02}s")
    } else {
        format!("{hours}h {minutes:02}m {seconds:02}s")
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;
    use crate::resources::{NotificationType, VmoveType};

    fn at(secs: i64) -> Option<DateTime<Utc>> {
        DateTime::from_timestamp(1_750_000_000 + secs, 0)
    }

    fn notification(status: NotificationStatus, updated: i64) -> Notification {
        Notification {
            id: "n1".into(),
            notification_type: Some(NotificationType::ComputeHost),
            hostname: "compute-1".into(),
            generated_time: at(0),
            payload: Default::default(),
            status: Some(status),
            source_host_id: "h1".into(),
            segment_id: "s1".into(),
            message: String::new(),
            attempts: 1,
            created_at: at(0),
            updated_at: at(updated),
            progress_events: vec![],
        }
    }

    fn vmove(id: &str, status: VmoveStatus, updated: i64) -> Vmove {
        Vmove {
            id: id.into(),
            notification_id: "n1".into(),
            instance_id: format!("instance-{id}"),
            instance_name: format!("vm-{id}"),
            source_host: "compute-1".into(),
            dest_host: String::new(),
            vmove_type: Some(VmoveType::Evacuation),
            status: Some(status),
            start_time: None,
            end_time: None,
            message: String::new(),
            attempts: 0,
            step: String::new(),
            created_at: at(0),
            updated_at: at(updated),
        }
    }

    fn event(sequence: u64, task: &str) -> ProgressEvent {
        ProgressEvent {
            sequence,
            task: task.into(),
            state: "started".into(),
            message: String::new(),
            time: at(sequence as i64),
            instance_id: String::new(),
        }
    }

    fn snapshot(n: Notification, vmoves: Vec<Vmove>) -> WatchUpdate {
        WatchUpdate::Snapshot {
            notification: n,
            vmoves,
        }
    }

    #[test]
    fn the_first_snapshot_sets_everything() {
        let mut state = WatchState::default();
        let mut n = notification(NotificationStatus::Running, 1);
        n.progress_events = vec![event(2, "b"), event(1, "a")];
        let applied = state.apply(snapshot(n, vec![vmove("a", VmoveStatus::Pending, 1)]));
        assert_eq!(applied, Applied::Reset { resync: false });
        assert_eq!(state.vmoves().len(), 1);
        let tasks: Vec<_> = state.progress().iter().map(|p| p.task.as_str()).collect();
        assert_eq!(tasks, ["a", "b"], "progress is kept in sequence order");
        assert_eq!(state.latest_progress().map(|p| p.sequence), Some(2));
        assert!(!state.is_terminal());
        assert_eq!(state.outcome(), None);
        assert_eq!(state.snapshots(), 1);
    }

    #[test]
    fn vmove_updates_add_and_replace_and_drop_stale_ones() {
        let mut state = WatchState::default();
        state.apply(snapshot(
            notification(NotificationStatus::Running, 1),
            vec![],
        ));

        let added = state.apply(WatchUpdate::Vmove(vmove("a", VmoveStatus::Pending, 2)));
        assert_eq!(
            added,
            Applied::Vmove {
                index: 0,
                added: true
            }
        );
        let mut ongoing = vmove("a", VmoveStatus::Ongoing, 3);
        ongoing.step = "evacuate".into();
        let changed = state.apply(WatchUpdate::Vmove(ongoing));
        assert_eq!(
            changed,
            Applied::Vmove {
                index: 0,
                added: false
            }
        );
        assert_eq!(state.vmoves()[0].step, "evacuate");

        let stale = state.apply(WatchUpdate::Vmove(vmove("a", VmoveStatus::Pending, 2)));
        assert_eq!(stale, Applied::Stale);
        assert_eq!(state.vmoves()[0].status, Some(VmoveStatus::Ongoing));

        let second = state.apply(WatchUpdate::Vmove(vmove("b", VmoveStatus::Pending, 3)));
        assert_eq!(
            second,
            Applied::Vmove {
                index: 1,
                added: true
            }
        );
        assert_eq!(state.instances_done(), (0, 2));
        state.apply(WatchUpdate::Vmove(vmove("b", VmoveStatus::Succeeded, 4)));
        assert_eq!(state.instances_done(), (1, 2));
    }

    #[test]
    fn progress_events_are_kept_once_in_order() {
        let mut state = WatchState::default();
        state.apply(snapshot(
            notification(NotificationStatus::Running, 1),
            vec![],
        ));
        assert_eq!(
            state.apply(WatchUpdate::Progress(event(2, "b"))),
            Applied::Progress
        );
        assert_eq!(
            state.apply(WatchUpdate::Progress(event(1, "a"))),
            Applied::Progress
        );
        assert_eq!(
            state.apply(WatchUpdate::Progress(event(2, "b"))),
            Applied::Stale
        );
        let seq: Vec<_> = state.progress().iter().map(|p| p.sequence).collect();
        assert_eq!(seq, [1, 2]);
        assert_eq!(state.latest_progress().map(|p| p.task.as_str()), Some("b"));
    }

    #[test]
    fn notification_changes_update_status_and_keep_progress() {
        let mut state = WatchState::default();
        let mut n = notification(NotificationStatus::New, 1);
        n.progress_events = vec![event(1, "a")];
        state.apply(snapshot(n, vec![]));

        let running = state.apply(WatchUpdate::Notification(notification(
            NotificationStatus::Running,
            2,
        )));
        assert_eq!(
            running,
            Applied::Notification {
                status_changed: true
            }
        );
        assert_eq!(state.progress().len(), 1, "an update has no progress");

        let mut attempt = notification(NotificationStatus::Running, 3);
        attempt.attempts = 2;
        assert_eq!(
            state.apply(WatchUpdate::Notification(attempt.clone())),
            Applied::Notification {
                status_changed: false
            }
        );
        assert_eq!(
            state.apply(WatchUpdate::Notification(attempt)),
            Applied::Stale,
            "the same state again changes nothing"
        );
        assert_eq!(
            state.apply(WatchUpdate::Notification(notification(
                NotificationStatus::New,
                1
            ))),
            Applied::Stale
        );
        assert_eq!(
            state.notification().and_then(|n| n.status),
            Some(NotificationStatus::Running)
        );
    }

    #[test]
    fn a_second_snapshot_resets_the_state() {
        let mut state = WatchState::default();
        let mut n = notification(NotificationStatus::Running, 1);
        n.progress_events = vec![event(1, "a"), event(2, "b")];
        state.apply(snapshot(
            n,
            vec![
                vmove("a", VmoveStatus::Ongoing, 1),
                vmove("b", VmoveStatus::Ongoing, 1),
            ],
        ));
        state.apply(WatchUpdate::Progress(event(3, "c")));

        let mut later = notification(NotificationStatus::Running, 9);
        later.progress_events = vec![event(1, "a"), event(2, "b"), event(3, "c"), event(4, "d")];
        let applied = state.apply(snapshot(later, vec![vmove("b", VmoveStatus::Succeeded, 9)]));
        assert_eq!(applied, Applied::Reset { resync: true });
        assert_eq!(state.snapshots(), 2);
        assert_eq!(state.vmoves().len(), 1);
        assert_eq!(state.vmoves()[0].status, Some(VmoveStatus::Succeeded));
        assert_eq!(state.progress().len(), 4);
        // After a reset, earlier events are still recognised as known.
        assert_eq!(
            state.apply(WatchUpdate::Progress(event(4, "d"))),
            Applied::Stale
        );
    }

    #[test]
    fn terminal_statuses_end_the_watch_with_an_outcome() {
        for (status, outcome) in [
            (NotificationStatus::Finished, Some(Outcome::Finished)),
            (NotificationStatus::Ignored, Some(Outcome::Ignored)),
            (NotificationStatus::Failed, Some(Outcome::Failed)),
            (NotificationStatus::Error, None),
            (NotificationStatus::Running, None),
            (NotificationStatus::New, None),
        ] {
            let mut state = WatchState::default();
            state.apply(snapshot(
                notification(NotificationStatus::Running, 1),
                vec![],
            ));
            state.apply(WatchUpdate::Notification(notification(status, 2)));
            assert_eq!(state.outcome(), outcome, "{status}");
            assert_eq!(state.is_terminal(), outcome.is_some(), "{status}");
        }
        assert_eq!(WatchState::default().outcome(), None);
        assert!(!WatchState::default().is_terminal());
    }

    #[test]
    fn the_summary_has_one_row_per_instance_with_its_duration() {
        let mut state = WatchState::default();
        let mut done = vmove("a", VmoveStatus::Succeeded, 5);
        done.start_time = at(10);
        done.end_time = DateTime::from_timestamp(1_750_000_000 + 75, 400_000_000);
        done.dest_host = "compute-2".into();
        let mut failed = vmove("b", VmoveStatus::Failed, 5);
        failed.start_time = at(10);
        failed.message = "nova returned 503".into();
        let mut n = notification(NotificationStatus::Failed, 5);
        n.message = "1 of 2 instances failed".into();
        state.apply(snapshot(n, vec![done, failed]));

        let summary = state.summary();
        assert_eq!(summary.status, Some(NotificationStatus::Failed));
        assert_eq!(summary.message, "1 of 2 instances failed");
        assert_eq!(summary.instances.len(), 2);
        assert_eq!(summary.instances[0].destination, "compute-2");
        assert_eq!(summary.instances[0].duration, "1m 05s");
        assert_eq!(summary.instances[0].duration_seconds, Some(65.4));
        assert_eq!(summary.instances[1].duration, "-");
        assert_eq!(summary.instances[1].duration_seconds, None);
        assert_eq!(summary.instances[1].message, "nova returned 503");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_duration(TimeDelta::milliseconds(850)), "850ms");
        assert_eq!(format_duration(TimeDelta::milliseconds(12_345)), "12.3s");
        assert_eq!(format_duration(TimeDelta::seconds(59)), "59.0s");
        assert_eq!(format_duration(TimeDelta::seconds(60)), "1m 00s");
        assert_eq!(format_duration(TimeDelta::seconds(245)), "4m 05s");
        assert_eq!(format_duration(TimeDelta::seconds(3723)), "1h 02m 03s");
        assert_eq!(format_duration(TimeDelta::seconds(-1)), "-");
    }
}
