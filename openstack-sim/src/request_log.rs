//! The request log: a bounded ring buffer of every call the simulator served, so tests can
//! assert exactly which calls a client made.

use std::collections::VecDeque;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Increasing number, assigned when the call is logged.
    pub seq: u64,
    /// When the call arrived.
    pub time: DateTime<Utc>,
    /// Simulated seconds when the call arrived.
    pub sim_time: f64,
    /// identity, compute, volume, control or other.
    pub service: String,
    /// public or internal.
    pub interface: String,
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// Server or volume action name of a `POST .../action`.
    pub action: Option<String>,
    /// The server id in the path, if any.
    pub instance_id: Option<String>,
    /// The negotiated microversion (`compute 2.95`), or the requested one when refused.
    pub microversion: Option<String>,
    /// None when the connection was dropped or the call hung.
    pub status: Option<u16>,
    pub duration_ms: f64,
    /// The request id the service answered with.
    pub request_id: Option<String>,
    /// The client's `X-OpenStack-Request-ID` (global request id).
    pub global_request_id: Option<String>,
    pub traceparent: Option<String>,
    pub has_service_token: bool,
    /// The fault rule that fired, if any.
    pub fault_id: Option<u64>,
    /// response, dropped or hung.
    pub outcome: String,
}

/// The ring buffer.
#[derive(Debug)]
pub struct RequestLog {
    records: VecDeque<RequestRecord>,
    capacity: usize,
    next_seq: u64,
}

impl RequestLog {
    pub fn new(capacity: usize) -> RequestLog {
        RequestLog {
            records: VecDeque::with_capacity(capacity.min(4096)),
            capacity: capacity.max(1),
            next_seq: 1,
        }
    }

    /// Appends a record, numbering it; the oldest is dropped when full.
    pub fn push(&mut self, mut record: RequestRecord) -> u64 {
        record.seq = self.next_seq;
        self.next_seq += 1;
        if self.records.len() == self.capacity {
            self.records.pop_front();
        }
        let seq = record.seq;
        self.records.push_back(record);
        seq
    }

    /// Records with `seq > since` (all when None), oldest first.
    pub fn since(&self, since: Option<u64>) -> Vec<RequestRecord> {
        let after = since.unwrap_or(0);
        let start = self.records.partition_point(|r| r.seq <= after);
        self.records.range(start..).cloned().collect()
    }

    /// The highest seq handed out so far.
    pub fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    pub fn clear(&mut self) {
        self.records.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(path: &str) -> RequestRecord {
        RequestRecord {
            seq: 0,
            time: Utc::now(),
            sim_time: 0.0,
            service: "compute".into(),
            interface: "public".into(),
            method: "GET".into(),
            path: path.into(),
            query: None,
            action: None,
            instance_id: None,
            microversion: None,
            status: Some(200),
            duration_ms: 0.0,
            request_id: None,
            global_request_id: None,
            traceparent: None,
            has_service_token: false,
            fault_id: None,
            outcome: "response".into(),
        }
    }

    #[test]
    fn ring_keeps_the_newest_and_filters_by_seq() {
        let mut log = RequestLog::new(3);
        for i in 0..5 {
            log.push(record(&format!("/{i}")));
        }
        let all = log.since(None);
        assert_eq!(all.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![3, 4, 5]);
        assert_eq!(log.since(Some(4)).len(), 1);
        assert_eq!(log.since(Some(9)).len(), 0);
        assert_eq!(log.last_seq(), 5);
    }
}
