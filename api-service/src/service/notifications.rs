//! Notification operations and the intake rules.

use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};

use super::{Api, Error};
use crate::domain::{
    InvalidField, NewNotification, Notification, NotificationFilter, NotificationId,
    NotificationPayload, Page, PageRequest, ProgressEvent,
};
use crate::lifecycle::{
    self,
    intake::{Admitted, IntakeContext, IntakeFacts, IntakeRules, Refused},
};
use crate::status::Transition as _;

/// The intake rules (`lifecycle::intake`) for report `new`, their refusals
/// as the API's errors.
pub fn decide_intake(
    new: &NewNotification,
    payload: &NotificationPayload,
    facts: &IntakeFacts,
    rules: &IntakeRules,
) -> Result<Admitted, Error> {
    let context = IntakeContext {
        new,
        payload,
        facts,
    };
    lifecycle::intake::decide(&context, rules).map_err(|refused| match refused {
        Refused::UnknownHost(reason) => Error::invalid("hostname", reason),
        Refused::Duplicate(reason) => Error::AlreadyExists(reason),
        Refused::OnMaintenance(reason) => Error::FailedPrecondition(reason),
    })
}

pub use crate::lifecycle::intake::MONITOR_GENERATED_TIME;

/// A report from a monitor whose clock is ahead by more than `max_clock_skew`
/// is not refused (masakari-monitors takes a 400 as final, and the failure
/// would be lost): its effective `generated_time` becomes `now`, the time it
/// was received, and the time the monitor sent is kept in the payload under
/// [`MONITOR_GENERATED_TIME`] (and told in its message at intake). Returns
/// whether the time was replaced.
fn take_clock_skew(
    new: &mut NewNotification,
    now: DateTime<Utc>,
    max_clock_skew: Duration,
) -> bool {
    let ahead = (new.generated_time - now).to_std().unwrap_or_default();
    if ahead <= max_clock_skew {
        return false;
    }
    let sent = new
        .generated_time
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    tracing::warn!(
        hostname = %new.hostname,
        generated_time = %sent,
        ahead = %humantime::format_duration(Duration::from_secs(ahead.as_secs())),
        "report from the future taken at its received time"
    );
    new.payload.insert(MONITOR_GENERATED_TIME.to_owned(), sent);
    new.generated_time = now;
    true
}

/// A report's `generated_time` must be a time a monitor can have seen: not
/// before 1970 (nor storable on every backend). One too far in the future
/// is taken at its received time instead (`take_clock_skew`).
fn check_generated_time(generated: DateTime<Utc>) -> Result<(), InvalidField> {
    if generated < DateTime::<Utc>::UNIX_EPOCH {
        return Err(InvalidField::new(
            "generated_time",
            format!("{} is before 1970", generated.to_rfc3339()),
        ));
    }
    Ok(())
}

/// A report generated longer ago than `max_age` (`dispatch.expire_after`)
/// is too old to recover: refused rather than accepted and left to expire
/// while its evacuations run.
fn check_report_age(
    generated: DateTime<Utc>,
    now: DateTime<Utc>,
    max_age: Duration,
) -> Result<(), InvalidField> {
    let age = (now - generated).to_std().unwrap_or_default();
    if age > max_age {
        return Err(InvalidField::new(
            "generated_time",
            format!(
                "{} is {} old, more than dispatch.expire_after ({}): too old to recover",
                generated.to_rfc3339(),
                humantime::format_duration(Duration::from_secs(age.as_secs())),
                humantime::format_duration(max_age)
            ),
        ));
    }
    Ok(())
}

impl Api {
    /// Validates and stores a failure report (with the reports arriving at
    /// the same time: see the `intake` module). A retried request with the
    /// idempotency key of an earlier one returns that earlier notification.
    #[tracing::instrument(skip_all, fields(hostname = %new.hostname, notification_type = %new.notification_type))]
    pub async fn create_notification(
        &self,
        mut new: NewNotification,
    ) -> Result<Notification, Error> {
        let payload = new.validate()?;
        check_generated_time(new.generated_time)?;
        let now = self.now();
        check_report_age(new.generated_time, now, self.intake.max_report_age)?;
        // Stored at microsecond precision; compare replays at the same.
        new.generated_time = new.generated_time.trunc_subsecs(6);
        take_clock_skew(&mut new, now.trunc_subsecs(6), self.intake.max_clock_skew);
        self.intake_queue.submit(new, payload).await
    }

    #[tracing::instrument(skip(self))]
    pub async fn get_notification(
        &self,
        id: NotificationId,
    ) -> Result<(Notification, Vec<ProgressEvent>), Error> {
        let notification = self.store.notification(id).await?;
        let progress = self.store.progress_events(id).await?;
        Ok((notification, progress))
    }

    /// An operator's retry of a `failed` notification: it runs again at
    /// once, with a new retry window, its failed instances back to pending.
    /// FAILED_PRECONDITION for any other status.
    #[tracing::instrument(skip(self))]
    pub async fn retry_notification(&self, id: NotificationId) -> Result<Notification, Error> {
        let current = self.store.notification(id).await?;
        if current
            .status()
            .on(crate::status::NotificationEvent::Reopen)
            .is_err()
        {
            return Err(Error::FailedPrecondition(format!(
                "notification {id} is {}: only a failed notification can be retried",
                current.status()
            )));
        }
        let resolved = self.store.reopen(id).await?;
        tracing::info!(notification_id = %id, vmoves = resolved.vmoves.len(), "retry requested by an operator");
        for vmove in resolved.vmoves {
            self.changes.publish(crate::changes::Change::VMove(vmove));
        }
        self.changes.publish(crate::changes::Change::Notification(
            resolved.notification.clone(),
        ));
        Ok(resolved.notification)
    }

    #[tracing::instrument(skip(self))]
    pub async fn list_notifications(
        &self,
        filter: NotificationFilter,
        page: PageRequest,
    ) -> Result<Page<Notification>, Error> {
        filter.validate()?;
        Ok(self.store.list_notifications(&filter, page).await?)
    }
}

/// The earlier notification for a retried request, if it is the same
/// request.
pub(super) fn replay(new: &NewNotification, earlier: Notification) -> Result<Notification, Error> {
    let same = earlier.notification_type == new.notification_type
        && earlier.hostname == new.hostname
        && earlier.payload == new.payload
        && earlier.generated_time == new.generated_time;
    if same {
        Ok(earlier)
    } else {
        Err(Error::AlreadyExists(format!(
            "idempotency_key {:?} was used for notification {} with a different type, host, payload or generated_time",
            new.idempotency_key.as_deref().unwrap_or_default(),
            earlier.id
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lifecycle::intake::clock_note;

    #[test]
    fn a_report_older_than_the_expiry_is_refused_naming_generated_time() {
        let now = Utc::now();
        let day = Duration::from_secs(24 * 3600);
        assert!(check_report_age(now - chrono::Duration::hours(23), now, day).is_ok());
        let old = check_report_age(now - chrono::Duration::days(2), now, day).unwrap_err();
        assert_eq!(old.field, "generated_time");
        assert!(old.reason.contains("too old"), "{}", old.reason);
        // A clock ahead is the skew rule's business, not this one's.
        assert!(check_report_age(now + chrono::Duration::minutes(5), now, day).is_ok());
    }

    #[test]
    fn a_generated_time_before_1970_is_refused() {
        assert!(check_generated_time(Utc::now()).is_ok());
        assert!(check_generated_time(DateTime::<Utc>::UNIX_EPOCH).is_ok());
        let early = check_generated_time(DateTime::<Utc>::MIN_UTC).unwrap_err();
        assert_eq!(early.field, "generated_time");
        assert!(early.reason.contains("before 1970"), "{}", early.reason);
    }

    #[test]
    fn a_report_from_the_future_is_taken_at_its_received_time_and_keeps_the_sent_one() {
        let now = Utc::now().trunc_subsecs(6);
        let skew = Duration::from_secs(600);
        let report = |generated| NewNotification {
            notification_type: crate::domain::NotificationType::ComputeHost,
            hostname: "compute-01".into(),
            generated_time: generated,
            payload: [("event".to_owned(), "STOPPED".to_owned())].into(),
            idempotency_key: None,
            trace_context: None,
        };
        let mut within = report(now + chrono::Duration::seconds(599));
        assert!(!take_clock_skew(&mut within, now, skew));
        assert_eq!(within.generated_time, now + chrono::Duration::seconds(599));
        assert_eq!(clock_note(&within), None);

        let sent = now + chrono::Duration::days(3650);
        let mut ahead = report(sent);
        assert!(take_clock_skew(&mut ahead, now, skew));
        assert_eq!(ahead.generated_time, now);
        assert_eq!(
            ahead.payload[MONITOR_GENERATED_TIME],
            sent.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
        );
        let note = clock_note(&ahead).unwrap();
        assert!(
            note.contains(&ahead.payload[MONITOR_GENERATED_TIME]),
            "{note}"
        );
        assert!(note.contains("intake.max_clock_skew"), "{note}");
    }
}
