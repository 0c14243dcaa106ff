//! The engine's side of the run protocol's conversion: numbering its events
//! for the wire. The conversion itself is the protocol's one
//! (`instanceha_proto::run::wire`), shared with the API.

use instanceha_proto::engine::v1 as pb;
use instanceha_proto::run::{RunId, SequencedEvent};

use crate::recovery::RunEvent;

/// The wire form of `event`, numbered `sequence` in run `run_id`.
pub fn event_message(run_id: &RunId, sequence: u64, event: RunEvent) -> pb::RunEvent {
    SequencedEvent { sequence, event }.to_wire(run_id)
}
