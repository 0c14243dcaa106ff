//! One instance's timeline on a recovery's page, decided without I/O:
//! the steps the engine reported (looked up, locked, volumes checked,
//! evacuation requested, migration, state restored, unlocked), the
//! progress events naming the instance (started, settled or failed,
//! reconciled with Nova) and its vmove's record, merged in time order,
//! ending with the verdict once the vmove is resolved.

use chrono::{DateTime, Utc};

use crate::domain::ProgressState;
use crate::status::VMoveStatus;

/// A step the engine reported for the instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepRecord {
    /// The engine's name for it (`lookup`, `lock`, `evacuate`...).
    pub step: String,
    pub message: Option<String>,
    pub at: Option<DateTime<Utc>>,
    /// The run (1 for the first) that reported it, when known.
    pub attempt: Option<u32>,
}

/// A progress event naming the instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRecord {
    pub task: String,
    pub state: ProgressState,
    pub message: String,
    pub at: DateTime<Utc>,
}

/// What the instance's vmove says now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceRecord {
    pub status: VMoveStatus,
    pub dest_host: Option<String>,
    pub end_time: Option<DateTime<Utc>>,
    pub message: Option<String>,
}

/// How an entry reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    /// Done, or passed.
    Done,
    /// Under way now.
    Active,
    /// It failed here.
    Failed,
    /// Neither: started, ignored, a note.
    Info,
}

impl Tone {
    /// The CSS class (`t-done`...).
    pub fn class(self) -> &'static str {
        match self {
            Self::Done => "t-done",
            Self::Active => "t-active",
            Self::Failed => "t-failed",
            Self::Info => "t-info",
        }
    }
}

/// One line of a timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub label: String,
    pub detail: Option<String>,
    pub at: Option<DateTime<Utc>>,
    pub tone: Tone,
}

/// An instance's timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timeline {
    pub entries: Vec<Entry>,
    /// The vmove is resolved: the last entry is its verdict.
    pub ended: bool,
}

/// Steps the status rules name themselves (the events say more).
const LEDGER_STEPS: [&str; 3] = ["started", "done", "reconciled"];

/// What a step is called on the page, once it has passed.
pub fn step_label(step: &str) -> String {
    match step {
        "lookup" => "looked up",
        // The lock itself, taken and given back, is a step of its own
        // (`locked`, `lock released`): these are the asking.
        "lock" => "locking",
        "unlock" => "unlocking",
        "volumes" => "volumes checked",
        "prepare" => "prepared",
        "evacuate" => "evacuation requested",
        "verify" => "migration",
        "restore_state" => "state restored",
        "stop" => "stopped",
        "start" => "started again",
        other => other,
    }
    .to_owned()
}

fn event_entry(event: &EventRecord) -> Entry {
    let (label, tone) = match (event.task.as_str(), event.state) {
        ("recover_instance", ProgressState::Started) => ("recovery started", Tone::Info),
        ("recover_instance", ProgressState::Succeeded) => ("settled", Tone::Done),
        ("recover_instance", ProgressState::Failed) => ("failed", Tone::Failed),
        ("recover_instance", ProgressState::Skipped) => ("ignored", Tone::Info),
        ("reconcile", ProgressState::Failed) => ("reconciled with Nova", Tone::Failed),
        ("reconcile", _) => ("reconciled with Nova", Tone::Info),
        (_, ProgressState::Failed) => (event.task.as_str(), Tone::Failed),
        (_, _) => (event.task.as_str(), Tone::Info),
    };
    // "recovery of NAME (ID) started" says nothing the row does not.
    let restates = event.task == "recover_instance" && event.state == ProgressState::Started;
    Entry {
        label: label.to_owned(),
        detail: Some(event.message.clone()).filter(|m| !m.is_empty() && !restates),
        at: Some(event.at),
        tone,
    }
}

/// The verdict of a resolved vmove, when no event told it.
fn verdict(record: &InstanceRecord) -> Option<Entry> {
    let (label, detail, tone) = match record.status {
        VMoveStatus::Succeeded => (
            "settled",
            record.dest_host.as_ref().map(|d| format!("on {d}")),
            Tone::Done,
        ),
        VMoveStatus::Failed => ("failed", record.message.clone(), Tone::Failed),
        VMoveStatus::Ignored => ("ignored", record.message.clone(), Tone::Info),
        VMoveStatus::Pending | VMoveStatus::Ongoing => return None,
    };
    Some(Entry {
        label: label.to_owned(),
        detail,
        at: record.end_time,
        tone,
    })
}

/// The timeline of one instance: `steps` (oldest first) and `events` (in
/// sequence order) merged by time, the last step `Active` while the vmove
/// is ongoing, and the verdict last once it is resolved (from the events
/// when they tell it; from the record, with the destination, otherwise).
pub fn timeline(record: &InstanceRecord, steps: &[StepRecord], events: &[EventRecord]) -> Timeline {
    let ongoing = record.status == VMoveStatus::Ongoing;
    let mut entries: Vec<Entry> = Vec::with_capacity(steps.len() + events.len() + 1);
    let shown_steps: Vec<&StepRecord> = steps
        .iter()
        .filter(|s| !LEDGER_STEPS.contains(&s.step.as_str()))
        .collect();
    for (i, step) in shown_steps.iter().enumerate() {
        let current = ongoing && i + 1 == shown_steps.len();
        entries.push(Entry {
            label: step_label(&step.step),
            detail: step.message.clone().filter(|m| !m.is_empty()),
            at: step.at,
            tone: if current { Tone::Active } else { Tone::Done },
        });
    }
    entries.extend(events.iter().map(event_entry));
    // Stable: equal times keep steps before the events of the same moment.
    entries.sort_by_key(|e| e.at.unwrap_or(DateTime::<Utc>::MAX_UTC));
    let ended = record.status.is_resolved();
    if ended {
        let told = entries
            .last()
            .is_some_and(|e| matches!(e.label.as_str(), "settled" | "failed" | "ignored"));
        match verdict(record) {
            // The record names the destination; the event's text is kept
            // when the record has none.
            Some(mut last) if told => {
                let event = entries.pop().expect("told means an entry");
                if last.detail.is_none() {
                    last.detail = event.detail;
                }
                last.at = last.at.or(event.at);
                entries.push(last);
            }
            Some(last) => entries.push(last),
            None => {}
        }
    } else if record.status == VMoveStatus::Pending && entries.is_empty() {
        entries.push(Entry {
            label: "waiting".to_owned(),
            detail: Some("not started yet".to_owned()),
            at: None,
            tone: Tone::Info,
        });
    }
    Timeline { entries, ended }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap()
    }

    fn step(name: &str, message: &str, secs: i64) -> StepRecord {
        StepRecord {
            step: name.to_owned(),
            message: Some(message.to_owned()),
            at: Some(at(secs)),
            attempt: Some(1),
        }
    }

    fn event(task: &str, state: ProgressState, message: &str, secs: i64) -> EventRecord {
        EventRecord {
            task: task.to_owned(),
            state,
            message: message.to_owned(),
            at: at(secs),
        }
    }

    /// A status by name (tests read statuses; only the status rules
    /// choose them).
    fn status(name: &str) -> VMoveStatus {
        VMoveStatus::parse(name).unwrap()
    }

    fn record(name: &str) -> InstanceRecord {
        InstanceRecord {
            status: status(name),
            dest_host: None,
            end_time: None,
            message: None,
        }
    }

    fn labels(t: &Timeline) -> Vec<&str> {
        t.entries.iter().map(|e| e.label.as_str()).collect()
    }

    #[test]
    fn a_recovery_reads_in_time_order_and_ends_settled_on_its_destination() {
        let steps = [
            step("lookup", "reading the instance", 1),
            step("lock", "locking the instance", 2),
            step("volumes", "checking the volumes' attachments", 3),
            step("evacuate", "evacuating to compute-02", 4),
            step("verify", "waiting for Nova to rebuild it on compute-02", 5),
            step("unlock", "unlocking the instance", 8),
            step("done", "", 9),
        ];
        let events = [
            event(
                "recover_instance",
                ProgressState::Started,
                "recovery of web-1 started",
                0,
            ),
            event(
                "recover_instance",
                ProgressState::Succeeded,
                "web-1 recovered on compute-02",
                9,
            ),
        ];
        let done = InstanceRecord {
            status: status("succeeded"),
            dest_host: Some("compute-02".to_owned()),
            end_time: Some(at(9)),
            message: None,
        };
        let t = timeline(&done, &steps, &events);
        assert_eq!(
            labels(&t),
            [
                "recovery started",
                "looked up",
                "locking",
                "volumes checked",
                "evacuation requested",
                "migration",
                "unlocking",
                "settled"
            ]
        );
        assert!(t.ended);
        let last = t.entries.last().unwrap();
        assert_eq!(last.detail.as_deref(), Some("on compute-02"));
        assert_eq!(last.tone, Tone::Done);
        assert!(t.entries.iter().all(|e| e.tone != Tone::Active));
    }

    #[test]
    fn the_last_step_of_an_ongoing_instance_is_the_active_one() {
        let steps = [
            step("lookup", "reading the instance", 1),
            step("evacuate", "evacuating to compute-02", 4),
        ];
        let t = timeline(&record("ongoing"), &steps, &[]);
        assert_eq!(t.entries[0].tone, Tone::Done);
        assert_eq!(t.entries[1].tone, Tone::Active);
        assert!(!t.ended);
    }

    #[test]
    fn a_failure_ends_with_its_cause() {
        let failed = InstanceRecord {
            status: status("failed"),
            dest_host: None,
            end_time: Some(at(7)),
            message: Some("evacuate: Nova answered 503".to_owned()),
        };
        let events = [
            event("recover_instance", ProgressState::Started, "started", 0),
            event(
                "recover_instance",
                ProgressState::Failed,
                "web-1 not recovered: evacuate: Nova answered 503",
                6,
            ),
            event(
                "reconcile",
                ProgressState::Failed,
                "web-1: still on compute-01",
                7,
            ),
        ];
        let t = timeline(&failed, &[step("evacuate", "to compute-02", 3)], &events);
        assert_eq!(
            labels(&t),
            [
                "recovery started",
                "evacuation requested",
                "failed",
                "reconciled with Nova",
                "failed"
            ]
        );
        let last = t.entries.last().unwrap();
        assert_eq!(last.tone, Tone::Failed);
        assert_eq!(last.detail.as_deref(), Some("evacuate: Nova answered 503"));
    }

    #[test]
    fn a_resolved_instance_without_events_still_shows_its_verdict() {
        let ignored = InstanceRecord {
            status: status("ignored"),
            dest_host: None,
            end_time: None,
            message: Some("deleted".to_owned()),
        };
        let t = timeline(&ignored, &[], &[]);
        assert_eq!(labels(&t), ["ignored"]);
        assert!(t.ended);
    }

    #[test]
    fn a_pending_instance_is_waiting() {
        let t = timeline(&record("pending"), &[], &[]);
        assert_eq!(labels(&t), ["waiting"]);
        assert!(!t.ended);
    }

    #[test]
    fn steps_the_status_rules_name_are_left_to_the_events() {
        let t = timeline(
            &record("ongoing"),
            &[step("started", "", 1)],
            &[event(
                "recover_instance",
                ProgressState::Started,
                "recovery of web-1 (1) started",
                1,
            )],
        );
        assert_eq!(labels(&t), ["recovery started"]);
        assert_eq!(t.entries[0].detail, None);
    }
}
