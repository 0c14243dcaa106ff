//! An evacuation Nova failed: where it left the instance (read again while
//! Nova is still recording the failure) and what follows: asked once more
//! when nothing in Nova acts on it any more, else a failure, one that may
//! pass when a later run can still recover it.

use std::time::Duration;

use super::{Cancelled, Cause, Run, StepFailure};
use crate::workflow::evacuation::{self, LeftAfterFailure};

/// What follows an evacuation Nova failed.
pub(super) enum AfterFailed {
    /// Ask once more on the same target.
    AskAgain,
    /// The instance's failure on this target.
    Fail(StepFailure),
}

impl Run {
    /// What follows an evacuation of `id` that Nova failed (`reason`). On
    /// the last target, when Nova left the instance on the failed host
    /// `source` with no task (nothing runs on its behalf any more: a
    /// MessagingTimeout when nova-conductor or the message bus went away
    /// under it, say), it is asked once more at once; failed so again, or
    /// with Nova still recording the failure, the failure may pass (a later
    /// run asks again, within `dispatch.retry_window`). Anywhere else it is
    /// the target's failure.
    pub(super) async fn after_failed(
        &self,
        id: &str,
        source: &str,
        reason: String,
        last: bool,
        asked_again: bool,
    ) -> Result<AfterFailed, Cancelled> {
        if !last {
            return Ok(AfterFailed::Fail(StepFailure::on_target("verify", reason)));
        }
        let passing = |why: String| {
            AfterFailed::Fail(StepFailure::on_target(
                "verify",
                Cause::transient(format!("{reason}; {why}")),
            ))
        };
        Ok(match self.left_after_failure(id, source).await? {
            Ok(LeftAfterFailure::OnSource) if !asked_again => {
                self.reporter.step(
                    id,
                    "evacuate",
                    format!("{reason}; it is still on {source}: asking once more"),
                );
                AfterFailed::AskAgain
            }
            Ok(LeftAfterFailure::OnSource) => passing(format!(
                "asked once more, Nova failed it again and left it on {source} with no task: a later run asks again"
            )),
            Ok(LeftAfterFailure::Settling(task)) => passing(format!(
                "Nova has not finished recording the failure (still on {source}, task {task}): a later run looks again"
            )),
            Ok(LeftAfterFailure::Elsewhere(_)) => {
                AfterFailed::Fail(StepFailure::on_target("verify", reason))
            }
            Err(e) => passing(format!(
                "Nova could not be read to tell where it left the instance: {e}"
            )),
        })
    }

    /// Where a failed evacuation left `id`, read again while Nova is still
    /// recording the failure, for at most `recovery.stalled_evacuation_after`.
    async fn left_after_failure(
        &self,
        id: &str,
        source: &str,
    ) -> Result<Result<LeftAfterFailure, openstack_client::Error>, Cancelled> {
        let interval = self.settings().poll_interval.max(Duration::from_millis(1));
        let reads =
            (self.settings().stalled_evacuation_after.as_millis() / interval.as_millis()).max(1);
        let mut read = 1;
        loop {
            let server = match self.or_cancel(self.openstack().server(id)).await? {
                Ok(server) => server,
                Err(e) => return Ok(Err(e)),
            };
            match evacuation::left_after_failure(source, &server) {
                LeftAfterFailure::Settling(_) if read < reads => {
                    read += 1;
                    self.pause(interval).await?;
                }
                left => return Ok(Ok(left)),
            }
        }
    }
}
