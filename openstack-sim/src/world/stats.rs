//! Evacuation statistics for benchmarks: every evacuation's record, the makespan from the first
//! request to the last migration done, and what simulated Nova alone would need for the same
//! evacuations (the ideal makespan).

use serde::{Deserialize, Serialize};

use super::World;
use super::evacuation::{Evacuation, EvacuationDurations, EvacuationPhase};
use crate::clock::SimTime;

/// One evacuation as benchmarks see it. Times are simulated seconds since the scenario started.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvacuationRecord {
    pub migration_id: u64,
    pub migration_uuid: String,
    pub instance_id: String,
    pub instance_name: String,
    pub source: String,
    pub destination: Option<String>,
    pub phase: EvacuationPhase,
    pub requested_at: f64,
    pub rebuild_started_at: Option<f64>,
    pub done_at: Option<f64>,
    pub failed_at: Option<f64>,
    pub stalled_secs: f64,
    pub error: Option<String>,
    pub durations: EvacuationDurations,
}

/// Evacuation statistics for benchmarks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EvacuationStats {
    pub sim_time: f64,
    pub evacuations: Vec<EvacuationRecord>,
    pub first_request_at: Option<f64>,
    pub last_done_at: Option<f64>,
    /// From the first evacuate request to the last migration done.
    pub makespan: Option<f64>,
    /// What simulated Nova alone would need for the same finished evacuations (same destinations,
    /// durations and per-host rebuild limit) had all been requested at one instant.
    pub ideal_makespan: Option<f64>,
    pub done: usize,
    pub failed: usize,
    /// Lost by Nova for good: dropped by nova-conductor, or frozen on a destination whose
    /// nova-compute died under it.
    #[serde(default)]
    pub lost: usize,
    pub in_progress: usize,
}

impl World {
    /// Statistics over every evacuation so far.
    pub fn stats(&mut self) -> EvacuationStats {
        let now = self.tick();
        let evacuations: Vec<EvacuationRecord> = self
            .evacuations
            .values()
            .map(|e| EvacuationRecord {
                migration_id: e.migration_id,
                migration_uuid: self.migrations[(e.migration_id - 1) as usize].uuid.clone(),
                instance_id: e.instance_id.clone(),
                instance_name: self
                    .instances
                    .get(&e.instance_id)
                    .map(|i| i.name.clone())
                    .unwrap_or_default(),
                source: e.source.clone(),
                destination: e.dest.clone(),
                phase: e.phase,
                requested_at: e.requested_at.as_secs_f64(),
                rebuild_started_at: e.rebuild_started_at.map(SimTime::as_secs_f64),
                done_at: e.done_at.map(SimTime::as_secs_f64),
                failed_at: e.failed_at.map(SimTime::as_secs_f64),
                stalled_secs: e.stalled_secs
                    + e.stalled_since.map(|s| now.secs_since(s)).unwrap_or(0.0),
                error: e.error.clone(),
                durations: e.durations.clone(),
            })
            .collect();
        let first_request_at = evacuations
            .iter()
            .map(|e| e.requested_at)
            .fold(None, |acc: Option<f64>, x| {
                Some(acc.map_or(x, |a| a.min(x)))
            });
        let last_done_at = evacuations
            .iter()
            .filter_map(|e| e.done_at)
            .fold(None, |acc: Option<f64>, x| {
                Some(acc.map_or(x, |a| a.max(x)))
            });
        let makespan = match (first_request_at, last_done_at) {
            (Some(first), Some(last)) => Some(last - first),
            _ => None,
        };
        let done: Vec<&Evacuation> = self
            .evacuations
            .values()
            .filter(|e| e.phase == EvacuationPhase::Done)
            .collect();
        let ideal_makespan = ideal_makespan(&done, self.settings.rebuild_concurrency);
        let count = |p: EvacuationPhase| evacuations.iter().filter(|e| e.phase == p).count();
        let (done_n, failed_n) = (count(EvacuationPhase::Done), count(EvacuationPhase::Failed));
        let lost_n = self
            .evacuations
            .values()
            .filter(|e| e.frozen || e.phase == EvacuationPhase::Lost)
            .count();
        EvacuationStats {
            sim_time: now.as_secs_f64(),
            in_progress: evacuations.len() - done_n - failed_n - lost_n,
            done: done_n,
            failed: failed_n,
            lost: lost_n,
            evacuations,
            first_request_at,
            last_done_at,
            makespan,
            ideal_makespan,
        }
    }
}

/// Per destination, a `limit`-server FIFO queue fed at once after each job's scheduling time;
/// the makespan is the latest finish.
fn ideal_makespan(done: &[&Evacuation], limit: usize) -> Option<f64> {
    if done.is_empty() {
        return None;
    }
    let mut by_dest: std::collections::BTreeMap<&str, Vec<&Evacuation>> = Default::default();
    for e in done {
        by_dest
            .entry(e.dest.as_deref().unwrap_or(""))
            .or_default()
            .push(e);
    }
    let mut makespan = 0.0f64;
    for jobs in by_dest.values_mut() {
        jobs.sort_by(|a, b| {
            a.durations
                .schedule
                .total_cmp(&b.durations.schedule)
                .then(a.requested_at.cmp(&b.requested_at))
                .then(a.migration_id.cmp(&b.migration_id))
        });
        let mut free_at = vec![0.0f64; limit.max(1)];
        for job in jobs.iter() {
            let d = &job.durations;
            let service = d.claim
                + d.block_device_mapping
                + d.spawn
                + if job.target_stopped { d.stop } else { 0.0 }
                + 2.0 * d.finish;
            let (slot, at) = free_at
                .iter()
                .copied()
                .enumerate()
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .expect("at least one slot");
            let start = at.max(d.schedule);
            free_at[slot] = start + service;
            makespan = makespan.max(start + service);
        }
    }
    Some(makespan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64, dest: &str, schedule: f64, rest: f64) -> Evacuation {
        Evacuation {
            migration_id: id,
            instance_id: format!("i{id}"),
            source: "s".into(),
            dest: Some(dest.into()),
            requested_host: None,
            forced: false,
            target_stopped: false,
            failure: None,
            phase: EvacuationPhase::Done,
            requested_at: SimTime::ZERO,
            scheduled_at: None,
            rebuild_started_at: None,
            done_at: None,
            failed_at: None,
            stalled_since: None,
            stall_id: 0,
            stalled_secs: 0.0,
            durations: EvacuationDurations {
                schedule,
                claim: rest,
                block_device_mapping: 0.0,
                spawn: 0.0,
                stop: 0.0,
                finish: 0.0,
            },
            request_id: String::new(),
            frozen: false,
            error: None,
        }
    }

    #[test]
    fn ideal_makespan_respects_the_per_host_limit() {
        let jobs: Vec<Evacuation> = (1..=4).map(|i| job(i, "d1", 1.0, 5.0)).collect();
        let refs: Vec<&Evacuation> = jobs.iter().collect();
        // two slots: two waves of 5 s after 1 s of scheduling
        assert_eq!(ideal_makespan(&refs, 2), Some(11.0));
        assert_eq!(ideal_makespan(&refs, 4), Some(6.0));
        let spread = [job(1, "d1", 1.0, 5.0), job(2, "d2", 1.0, 7.0)];
        let refs: Vec<&Evacuation> = spread.iter().collect();
        assert_eq!(ideal_makespan(&refs, 1), Some(8.0));
        assert_eq!(ideal_makespan(&[], 1), None);
    }
}
