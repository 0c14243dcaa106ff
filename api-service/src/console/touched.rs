//! What a change touched on a recovery's page ([`Touched`]: the parts its
//! stream sends again), and where a page stands ([`Since`]: what it was
//! rendered from, so that a stream sends only what changed after).

use std::collections::BTreeSet;

/// Where a page's live part stands: what it was rendered from, so that
/// its stream (or a reconnecting one) sends what changed since, row by
/// row, rather than the whole part again. Times in microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Since {
    /// The notification's `updated_at`.
    pub notification: i64,
    /// The newest `updated_at` of its vmoves.
    pub vmoves: i64,
    /// The newest progress event.
    pub sequence: u64,
}

impl Since {
    /// `n.v.s`, as the page's stream URL carries it.
    pub fn encode(self) -> String {
        format!("{}.{}.{}", self.notification, self.vmoves, self.sequence)
    }

    pub fn decode(text: &str) -> Option<Self> {
        let mut parts = text.split('.');
        let since = Self {
            notification: parts.next()?.parse().ok()?,
            vmoves: parts.next()?.parse().ok()?,
            sequence: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(since)
    }
}

/// What a change touched on the page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Touched {
    /// The summary (status, message, runs, retry).
    pub head: bool,
    /// The counts.
    pub counts: bool,
    /// The list of failed instances.
    pub failures: bool,
    /// These rows (vmove indexes); `new_rows` may not be on the page yet.
    pub rows: BTreeSet<usize>,
    pub new_rows: BTreeSet<usize>,
    /// These run events (indexes) are new.
    pub run_events: Vec<usize>,
    /// Everything: a fresh snapshot.
    pub all: bool,
}

impl Touched {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    pub fn merge(&mut self, other: Touched) {
        self.head |= other.head;
        self.counts |= other.counts;
        self.failures |= other.failures;
        self.rows.extend(other.rows);
        self.new_rows.extend(other.new_rows);
        self.run_events.extend(other.run_events);
        self.all |= other.all;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_round_trips_and_refuses_what_it_did_not_write() {
        let since = Since {
            notification: 1_800_000_000_000_001,
            vmoves: i64::MIN,
            sequence: 42,
        };
        assert_eq!(Since::decode(&since.encode()), Some(since));
        for bad in ["", "1.2", "1.2.3.4", "a.b.c", "1.2.-3"] {
            assert_eq!(Since::decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn touched_parts_add_up() {
        let mut touched = Touched::default();
        assert!(touched.is_empty());
        touched.merge(Touched {
            head: true,
            rows: BTreeSet::from([1]),
            ..Touched::default()
        });
        touched.merge(Touched {
            rows: BTreeSet::from([2]),
            run_events: vec![0],
            ..Touched::default()
        });
        assert!(touched.head && !touched.counts);
        assert_eq!(touched.rows, BTreeSet::from([1, 2]));
        assert_eq!(touched.run_events, [0]);
    }
}
