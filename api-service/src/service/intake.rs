//! The intake queue: failure reports arriving together are stored together,
//! in one transaction per batch (a group commit), by a few writer tasks.
//!
//! A report waits for no timer: a writer takes whatever has queued up while
//! it stored the previous batch, so a lone report is stored at once and a
//! burst (a rack losing power, every agent reporting) costs a few
//! transactions instead of one per report. The rules are the same as for a
//! report alone; earlier reports of a batch count as stored for later ones.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, mpsc, oneshot};
use tracing::Instrument as _;

use super::Error;
use super::IntakeSettings;
use super::notifications::{decide_intake, replay};
use crate::changes::{Change, ChangeFeed};
use crate::domain::{NewNotification, Notification, NotificationPayload};
use crate::metrics::ReportOutcome;
use crate::store::{Intake, IntakeWindows, Store};
use instanceha_runtime::backoff::Backoff;

/// Reports stored in one transaction at most.
const MAX_BATCH: usize = 64;
/// Reports waiting for a writer before callers wait to queue theirs.
const QUEUE_DEPTH: usize = 4096;
/// Times a batch is tried again after losing to a concurrent transaction,
/// and the short, jittered waits between (the winner has committed; the
/// jitter keeps two losers from meeting again).
const CONTENTION_RETRIES: u32 = 3;
const CONTENTION_BACKOFF: Backoff =
    Backoff::new(Duration::from_millis(2), Duration::from_millis(20));

/// A validated report waiting to be stored.
struct Pending {
    new: NewNotification,
    payload: NotificationPayload,
    reply: oneshot::Sender<Result<Notification, Error>>,
}

/// The sending side of the queue; the writers stop when every clone of it
/// is gone.
#[derive(Clone, Debug)]
pub(super) struct IntakeQueue {
    sender: mpsc::Sender<Pending>,
}

impl IntakeQueue {
    /// Starts `writers` writer tasks (one on SQLite, which has one writer
    /// anyway) on the current runtime.
    pub(super) fn start(
        store: Store,
        settings: Arc<IntakeSettings>,
        changes: ChangeFeed,
        writers: usize,
    ) -> Self {
        let (sender, receiver) = mpsc::channel(QUEUE_DEPTH);
        let receiver = Arc::new(Mutex::new(receiver));
        for writer in 0..writers.max(1) {
            let writer_task = Writer {
                store: store.clone(),
                settings: settings.clone(),
                changes: changes.clone(),
                receiver: receiver.clone(),
            };
            tokio::spawn(
                writer_task
                    .run()
                    .instrument(tracing::debug_span!("intake.writer", writer)),
            );
        }
        Self { sender }
    }

    /// Queues a validated report and waits for it to be stored (or
    /// refused). The report is stored even if the caller stops waiting.
    pub(super) async fn submit(
        &self,
        new: NewNotification,
        payload: NotificationPayload,
    ) -> Result<Notification, Error> {
        let (reply, answer) = oneshot::channel();
        let pending = Pending {
            new,
            payload,
            reply,
        };
        if self.sender.send(pending).await.is_err() {
            return Err(Error::Unavailable(
                "the intake is shutting down; retry later".to_owned(),
            ));
        }
        answer.await.unwrap_or_else(|_| {
            Err(Error::internal(
                &"an intake writer stopped before answering",
            ))
        })
    }
}

struct Writer {
    store: Store,
    settings: Arc<IntakeSettings>,
    changes: ChangeFeed,
    receiver: Arc<Mutex<mpsc::Receiver<Pending>>>,
}

impl Writer {
    async fn run(self) {
        loop {
            let batch = {
                let mut receiver = self.receiver.lock().await;
                let Some(first) = receiver.recv().await else {
                    return;
                };
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match receiver.try_recv() {
                        Ok(next) => batch.push(next),
                        Err(_) => break,
                    }
                }
                batch
            };
            let size = batch.len();
            self.store_batch(batch)
                .instrument(tracing::debug_span!("intake.batch", size))
                .await;
        }
    }

    async fn store_batch(&self, batch: Vec<Pending>) {
        let (news, waiting): (Vec<NewNotification>, Vec<_>) = batch
            .into_iter()
            .map(|p| (p.new, (p.payload, p.reply)))
            .unzip();
        let rules = self.settings.rules();
        let windows = IntakeWindows {
            duplicate: rules.duplicate_window,
            flapping: rules.flapping_window,
        };
        let mut retries = CONTENTION_BACKOFF.retries(Some(CONTENTION_RETRIES + 1), None);
        let outcome = loop {
            let stored = self
                .store
                .create_notifications(&news, windows, |i, facts| {
                    decide_intake(&news[i], &waiting[i].0, facts, &rules)
                })
                .await;
            match stored {
                Err(e) if e.is_contention() && !retries.spent() => {
                    tracing::debug!(error = %e, tries = retries.tries(), "intake batch lost to a concurrent change; trying again");
                    retries.wait(None).await;
                }
                other => break other.map_err(Error::from),
            }
        };
        let outcomes = match outcome {
            Ok(outcomes) => outcomes,
            Err(err) => {
                // One error for the batch; each caller gets its own copy.
                for new in &news {
                    crate::metrics::report(new.notification_type.as_str(), ReportOutcome::Failed);
                }
                for (_, reply) in waiting {
                    let _ = reply.send(Err(err.clone()));
                }
                return;
            }
        };
        for outcome in &outcomes {
            if let Intake::CreatedHoldingHost(notification) = outcome {
                tracing::warn!(
                    notification_id = %notification.id,
                    hostname = %notification.hostname,
                    "flapping host held out of service"
                );
                crate::metrics::host_held();
            }
        }
        for ((new, (_, reply)), outcome) in news.iter().zip(waiting).zip(outcomes) {
            let kind = new.notification_type.as_str();
            let answer = match outcome {
                Intake::Created(notification) | Intake::CreatedHoldingHost(notification) => {
                    crate::metrics::report(kind, ReportOutcome::Stored);
                    tracing::info!(
                        notification_id = %notification.id,
                        hostname = %notification.hostname,
                        notification_type = %notification.notification_type,
                        status = %notification.status(),
                        "notification created"
                    );
                    crate::metrics::notification_resolved(&notification);
                    self.changes
                        .publish(Change::Notification(notification.clone()));
                    Ok(notification)
                }
                Intake::KeyUsed(earlier) => {
                    crate::metrics::report(kind, ReportOutcome::Replayed);
                    replay(new, earlier)
                }
                Intake::Refused(refused) => {
                    crate::metrics::report(kind, ReportOutcome::Refused);
                    Err(refused)
                }
            };
            let _ = reply.send(answer);
        }
    }
}
