//! The texts the lifecycle writes into a notification's message, in one
//! place: when the next try is, behind which notification a report waits,
//! which locks a notification still holds.

use chrono::{DateTime, Utc};

use crate::domain::NotificationId;
use crate::status::NotificationStatus;

/// `message` saying when the next recovery run is due.
pub fn with_next_try(message: &str, at: DateTime<Utc>) -> String {
    format!("{message}; next try at {}", at.format("%Y-%m-%dT%H:%M:%SZ"))
}

/// The message of a report waiting behind an earlier notification of its
/// host (one recovery per host at a time).
pub fn queued_behind(
    earlier: NotificationId,
    hostname: &str,
    status: NotificationStatus,
) -> String {
    format!(
        "queued behind notification {earlier} for host {hostname}, which is {status}; it runs when that one ends"
    )
}

/// `message` and what the intake noted, once.
pub fn with_note(message: &str, note: Option<&str>) -> String {
    match note {
        Some(note) if !message.contains(note) => format!("{message}; {note}"),
        _ => message.to_owned(),
    }
}

/// The clause a notification's message ends with while it holds locks.
const LOCKS_HELD: &str = " instance(s) still locked by this notification, released as soon as nova answers and their evacuations have settled: ";
/// How many of the instances still locked a message names.
const LOCKS_NAMED: usize = 10;

/// `message` saying which instances the notification still holds locked:
/// an earlier such clause is replaced; with none held, it says the locks
/// were released (when it had said otherwise).
pub fn with_locks_held(message: &str, held: &[String]) -> String {
    let (base, had) = match message.find(LOCKS_HELD) {
        Some(at) => {
            // Back to the "; N" before the clause.
            let start = message[..at].rfind("; ").unwrap_or(at);
            (&message[..start], true)
        }
        None => (message, false),
    };
    if held.is_empty() {
        return if had {
            format!("{base}; every lock it took is released")
        } else {
            base.to_owned()
        };
    }
    let mut names = held
        .iter()
        .take(LOCKS_NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if held.len() > LOCKS_NAMED {
        names.push_str(&format!(" and {} more", held.len() - LOCKS_NAMED));
    }
    format!("{base}; {}{LOCKS_HELD}{names}", held.len())
}
