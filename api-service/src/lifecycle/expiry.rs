//! When a notification is too old to recover: one not running, generated
//! longer ago than `dispatch.expire_after`, ends. Its retry window closes;
//! if instances are without a result or failed, a reconcile run reads their
//! truth from Nova before the verdict; otherwise it fails at once. A run in
//! progress is never expired.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Ended, RunState, messages};
use crate::domain::RunKind;
use crate::status::{NotificationEvent, NotificationStatus, Transition};

/// Notifications generated before this are too old to recover.
pub fn cutoff(now: DateTime<Utc>, expire_after: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(expire_after)
        .ok()
        .and_then(|age| now.checked_sub_signed(age))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// Why an expired notification ends.
pub fn reason(expire_after: Duration) -> String {
    format!(
        "expired: not recovered within {} of its generation",
        humantime::format_duration(expire_after)
    )
}

/// What an expired notification still has open.
#[derive(Clone, Copy, Debug)]
pub struct Open<'a> {
    /// Its instances without a result or failed.
    pub instances: usize,
    /// The instances whose lock it holds.
    pub locks_held: &'a [String],
}

impl RunState {
    /// Expires the notification (generated before [`cutoff`]), unless a
    /// run of it is in progress or it is already waiting for its last look
    /// at Nova. `None` if nothing changes.
    pub fn expire(
        &self,
        now: DateTime<Utc>,
        expire_after: Duration,
        open: Open<'_>,
    ) -> Option<Ended<()>> {
        if self.status == NotificationStatus::Running {
            return None;
        }
        let failed = self.status.on(NotificationEvent::Expire).ok()?;
        let reason = reason(expire_after);
        if self.retry_until.is_some_and(|until| until <= now)
            && self.next_kind == Some(RunKind::Reconcile)
        {
            // Already waiting for its last look at Nova.
            return None;
        }
        if open.instances > 0 {
            return Some(Ended {
                state: Self {
                    next_kind: Some(RunKind::Reconcile),
                    retry_until: Some(now),
                    next_attempt_at: Some(now),
                    message: Some(format!(
                        "{reason}; reading what nova says of {} instance(s) before the verdict",
                        open.instances
                    )),
                    ..self.clone()
                },
                vmoves: Vec::new(),
                next_at: Some(now),
                locks_held: 0,
            });
        }
        let held = open.locks_held;
        let release_at = (!held.is_empty()).then_some(now);
        Some(Ended {
            state: Self {
                status: failed,
                message: Some(messages::with_note(
                    &messages::with_locks_held(&reason, held),
                    self.note.as_deref(),
                )),
                run: None,
                next_kind: None,
                next_attempt_at: None,
                lock_release_at: release_at,
                ended_at: Some(now),
                ..self.clone()
            },
            vmoves: Vec::new(),
            next_at: release_at,
            locks_held: held.len(),
        })
    }
}
