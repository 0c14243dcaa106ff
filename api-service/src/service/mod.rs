//! The service layer: every operation of the public API (gRPC today, the
//! Masakari-compatible REST facade later) with its rules, over the store.
//! Transport handlers convert their messages and call [`Api`]; no rule
//! lives in a handler.

mod error;
mod hosts;
mod intake;
mod notifications;
mod runs;
mod segments;
mod trace;
mod vmoves;
mod watch;

use std::sync::Arc;
use std::time::Duration;

pub use error::Error;
pub use notifications::decide_intake;
pub use runs::{Persisted, RunError};
pub use watch::WatchUpdate;

use crate::changes::ChangeFeed;
use crate::store::{Store, Unfinished};
use intake::IntakeQueue;

/// `[intake]`: the rules of the notification intake.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IntakeSettings {
    /// Reports of the same type, host and payload generated within this
    /// window of an earlier one are refused as duplicates (Masakari's
    /// `duplicate_notification_detection_interval`).
    #[serde(with = "humantime_serde")]
    pub duplicate_window: Duration,
    /// A report generated further than this in the future (the monitor's
    /// clock is wrong) is taken at its received time, the time it was sent
    /// kept in its payload (`monitor_generated_time`) and told in its
    /// message: never refused, so never lost.
    #[serde(with = "humantime_serde")]
    pub max_clock_skew: Duration,
    /// A host that fails this many times (this failure counted) within
    /// `flapping_window` is flapping: its instances are still recovered,
    /// but it stays on maintenance and disabled until an operator clears
    /// its `on_maintenance` flag (0: no guard). As vSphere HA's default
    /// for VM resets: 3 within an hour.
    pub flapping_failures: u32,
    #[serde(with = "humantime_serde")]
    pub flapping_window: Duration,
    /// A report generated longer ago than this is refused: too old to
    /// recover (`dispatch.expire_after`, set by the server).
    #[serde(skip)]
    pub max_report_age: Duration,
}

impl IntakeSettings {
    /// The rules the lifecycle applies at intake.
    pub fn rules(&self) -> crate::lifecycle::intake::IntakeRules {
        crate::lifecycle::intake::IntakeRules {
            duplicate_window: self.duplicate_window,
            flapping_failures: self.flapping_failures,
            flapping_window: self.flapping_window,
        }
    }
}

impl Default for IntakeSettings {
    fn default() -> Self {
        Self {
            duplicate_window: Duration::from_secs(180),
            max_clock_skew: Duration::from_secs(600),
            flapping_failures: 3,
            flapping_window: Duration::from_secs(3600),
            max_report_age: Duration::from_secs(24 * 3600),
        }
    }
}

/// The API's operations. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Api {
    store: Store,
    intake: Arc<IntakeSettings>,
    intake_queue: IntakeQueue,
    changes: ChangeFeed,
}

/// Writer tasks of the intake queue at most: half the database pool, up to
/// four (SQLite, with one connection, gets one).
const INTAKE_WRITERS: usize = 4;

impl Api {
    /// The API over `store`; starts the intake's writer tasks, so it must
    /// be called on a Tokio runtime.
    pub fn new(store: Store, intake: IntakeSettings, changes: ChangeFeed) -> Self {
        let intake = Arc::new(intake);
        let writers = (store.pool_size() as usize / 2).clamp(1, INTAKE_WRITERS);
        let intake_queue =
            IntakeQueue::start(store.clone(), intake.clone(), changes.clone(), writers);
        Self {
            store,
            intake,
            intake_queue,
            changes,
        }
    }

    /// The store itself, for tests that look at what was persisted; the
    /// API's own modules go through the service (a tidy test checks).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Whether the database answers.
    pub async fn ping(&self) -> Result<(), Error> {
        Ok(self.store.ping().await?)
    }

    /// Whether the database can write now (a probe row written and
    /// committed).
    pub async fn probe_storage(&self) -> Result<(), Error> {
        Ok(self.store.probe_write().await?)
    }

    /// Waits until a write to the database fails.
    pub async fn write_failed(&self) {
        self.store.write_failed().await;
    }

    /// Whether the database answers and, at the last probe, could write:
    /// what `/healthcheck` says, without a write per check.
    pub async fn ready(&self) -> Result<(), Error> {
        self.ping().await?;
        match self.store.unwritable() {
            None => Ok(()),
            Some(reason) => Err(Error::Unavailable(reason)),
        }
    }

    pub fn changes(&self) -> &ChangeFeed {
        &self.changes
    }
}

/// Refuses a change to `what` while notifications of its segment are
/// unfinished (as Masakari does: it would pull the ground from under a
/// running recovery).
fn refuse_while_unfinished(what: &str, unfinished: &Unfinished) -> Result<(), Error> {
    if unfinished.count == 0 {
        return Ok(());
    }
    let examples: Vec<String> = unfinished
        .examples
        .iter()
        .map(|id| id.to_string())
        .collect();
    Err(Error::FailedPrecondition(format!(
        "{what} has {} unfinished notification(s) (new, running or error): {}{}; retry when they have finished",
        unfinished.count,
        examples.join(", "),
        if unfinished.count as usize > examples.len() {
            ", ..."
        } else {
            ""
        }
    )))
}
