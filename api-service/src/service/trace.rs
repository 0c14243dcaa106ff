//! A notification's trace: the W3C trace id its recovery is recorded
//! under, for the console's link to the operator's tracing UI.

use super::{Api, Error};
use crate::domain::NotificationId;

impl Api {
    /// The trace id (32 hex digits) of notification `id`'s recovery, if
    /// it was created under a trace.
    #[tracing::instrument(skip(self))]
    pub async fn trace_id(&self, id: NotificationId) -> Result<Option<String>, Error> {
        Ok(self
            .store
            .trace_context(id)
            .await?
            .as_deref()
            .and_then(trace_id_of))
    }
}

/// The trace id of a `traceparent` (`00-<trace id>-<span id>-<flags>`);
/// `None` for one that is malformed or all zeros.
pub fn trace_id_of(traceparent: &str) -> Option<String> {
    let mut fields = traceparent.trim().split('-');
    let (_version, trace_id) = (fields.next()?, fields.next()?);
    (trace_id.len() == 32
        && trace_id.bytes().all(|b| b.is_ascii_hexdigit())
        && trace_id.bytes().any(|b| b != b'0'))
    .then(|| trace_id.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_id_is_the_second_field() {
        assert_eq!(
            trace_id_of("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert_eq!(
            trace_id_of("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
            None
        );
        assert_eq!(trace_id_of("00-xyz-00f067aa0ba902b7-01"), None);
        assert_eq!(trace_id_of(""), None);
    }
}
