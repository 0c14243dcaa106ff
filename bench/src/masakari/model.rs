//! A model, not a measurement: what OpenStack Masakari with its default
//! settings would take for the same scenario on the same simulated Nova,
//! computed from its timing model (docs/masakari.md, sections 2, 3, 7 and
//! 10). Seeded Monte Carlo over the same jittered Nova
//! durations; no process runs.
//!
//! Per notification (one per failed host, all reported at once):
//!
//! 1. The API sleeps `uniform(0, notification_delay_max = 5 s)` before it
//!    creates the notification (no coordination backend), then casts it to
//!    the engine.
//! 2. The engine disables nova-compute (one call) and then sleeps a fixed
//!    `wait_period_after_service_update` = 180 s (no force-down).
//! 3. It lists the host's servers (first page only: up to Nova's
//!    `max_limit`, 1000, so every scenario here fits in it), creates the
//!    vmoves and runs them in a `GreenPool(host_failure_recovery_threads =
//!    3)`, in list order.
//! 4. Per instance: `get_server` twice and `lock_server` (three calls), the
//!    vmove's `start_time`, `evacuate`, then one `get_server` per
//!    `verify_interval` = 1 s until the server shows another hypervisor,
//!    for at most `wait_period_after_evacuation` = 90 s; `end_time`, and
//!    `unlock`.
//! 5. Every Nova call builds a new Keystone session (a login, then the
//!    call); the simulated Nova's latencies apply to both.
//!
//! A boot-from-volume server with a stale attachment on the dead host
//! never leaves `rebuild_block_device_mapping` (Masakari neither checks
//! nor clears attachments): its worker times out after 90 s and the vmove
//! fails; the notification goes to ERROR, and its retry meets the same
//! attachment. Such instances are counted as not recovered.
//!
//! In Masakari's favour, the model ignores the engine's RPC executor pool
//! (64 threads by default, so that the 65th and later of 100 simultaneous
//! notifications would wait for a whole earlier recovery), the rebuild
//! queueing at destinations (3 workers per notification stay far below the
//! per-host limit), and any retry of a failed call.

use serde::Serialize;

use crate::scenario::{Scenario, TimingModel};
use crate::stats::Summary;

/// Masakari's defaults that shape recovery time.
#[derive(Clone, Debug, Serialize)]
pub struct MasakariDefaults {
    pub notification_delay_max: f64,
    pub wait_period_after_service_update: f64,
    pub host_failure_recovery_threads: usize,
    pub verify_interval: f64,
    pub wait_period_after_evacuation: f64,
}

impl Default for MasakariDefaults {
    fn default() -> Self {
        Self {
            notification_delay_max: 5.0,
            wait_period_after_service_update: 180.0,
            host_failure_recovery_threads: 3,
            verify_interval: 1.0,
            wait_period_after_evacuation: 90.0,
        }
    }
}

/// The model's figures for one scenario (cloud seconds; like the
/// measurements, from the notification's creation, which in Masakari comes
/// after the API's random delay).
#[derive(Clone, Debug, Serialize)]
pub struct MasakariModel {
    pub defaults: MasakariDefaults,
    /// The first notification's creation to the last one's end.
    pub recovery_wall_secs: f64,
    /// `recovery_wall_secs` over the measured run's ideal, when given.
    pub ratio_to_ideal: Option<f64>,
    /// Creation to the first evacuate request, per notification (ms).
    pub dispatch_latency_ms: Option<Summary>,
    /// Per recovered instance: vmove start to end.
    pub instance_recovery_secs: Option<Summary>,
    /// Per recovered instance: its notification's creation to vmove end.
    pub instance_downtime_secs: Option<Summary>,
    pub recovered: usize,
    pub not_recovered: usize,
    /// Create latency of a report (ms): the random pre-create delay.
    pub create_latency_ms: Summary,
    /// Reports accepted per second by 64 clients sending back to back
    /// (each call waits 2.5 s on average).
    pub intake_per_sec_at_64_clients: f64,
}

/// xorshift64*: a small seeded generator, enough for a model.
struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }

    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    fn jittered(&mut self, base: f64, jitter: f64) -> f64 {
        base * (1.0 + self.uniform(-jitter, jitter))
    }
}

/// Computes the model for `scenario` on the Nova of `timing`.
pub fn model(
    scenario: &Scenario,
    timing: &TimingModel,
    seed: u64,
    ideal: Option<f64>,
) -> MasakariModel {
    let d = MasakariDefaults::default();
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    // A call: a Keystone login, then the call.
    let call = timing.token_issue + 2.0 * timing.api_latency;
    let bfv_every = if scenario.bfv_fraction > 0.0 {
        (1.0 / scenario.bfv_fraction).round().max(1.0) as usize
    } else {
        usize::MAX
    };
    let mut dispatch = Vec::new();
    let mut recovery = Vec::new();
    let mut downtime = Vec::new();
    let (mut recovered, mut not_recovered) = (0, 0);
    let mut first_created = f64::MAX;
    let mut last_end: f64 = 0.0;
    for _ in 0..scenario.failed_hosts {
        let created = rng.uniform(0.0, d.notification_delay_max);
        first_created = first_created.min(created);
        let pages = scenario.instances_per_host.div_ceil(1000).max(1) as f64;
        let ready = created + call + d.wait_period_after_service_update + pages * call;
        let mut workers = vec![ready; d.host_failure_recovery_threads];
        let mut first_evacuate: Option<f64> = None;
        for i in 0..scenario.instances_per_host {
            let stale_bfv = i % bfv_every == bfv_every - 1;
            let (slot, free) = workers
                .iter()
                .copied()
                .enumerate()
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .expect("three workers");
            let start = free + 3.0 * call;
            let requested = start + timing.token_issue + timing.api_latency;
            first_evacuate = Some(first_evacuate.map_or(requested, |f: f64| f.min(requested)));
            let answered = requested + timing.api_latency;
            let end = if stale_bfv {
                not_recovered += 1;
                answered + d.wait_period_after_evacuation
            } else {
                // The hypervisor changes after the first finishing step.
                let moved = requested
                    + rng.jittered(timing.schedule, timing.jitter)
                    + rng.jittered(timing.claim, timing.jitter)
                    + rng.jittered(timing.block_device_mapping, timing.jitter)
                    + rng.jittered(timing.spawn, timing.jitter)
                    + rng.jittered(timing.finish, timing.jitter);
                let polls = ((moved - answered) / d.verify_interval).ceil().max(1.0);
                let seen = answered + polls * d.verify_interval + call;
                recovered += 1;
                recovery.push(seen - start);
                downtime.push(seen - created);
                seen
            };
            workers[slot] = end + call; // unlock
        }
        if let Some(first) = first_evacuate {
            dispatch.push((first - created) * 1000.0);
        }
        let finished = workers.iter().copied().fold(ready, f64::max);
        last_end = last_end.max(finished);
    }
    let wall = (last_end - first_created).max(0.0);
    let delay = Summary {
        count: 0,
        mean: d.notification_delay_max / 2.0 * 1000.0,
        p50: d.notification_delay_max * 0.50 * 1000.0,
        p99: d.notification_delay_max * 0.99 * 1000.0,
        max: d.notification_delay_max * 1000.0,
    };
    MasakariModel {
        recovery_wall_secs: wall,
        ratio_to_ideal: ideal.filter(|i| *i > 0.0).map(|i| wall / i),
        dispatch_latency_ms: Summary::of(&dispatch),
        instance_recovery_secs: Summary::of(&recovery),
        instance_downtime_secs: Summary::of(&downtime),
        recovered,
        not_recovered,
        create_latency_ms: delay,
        intake_per_sec_at_64_clients: 64.0 / (d.notification_delay_max / 2.0),
        defaults: d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_host_is_three_workers_after_three_minutes() {
        let s = Scenario::named("one-host-10").unwrap();
        let t = TimingModel::default();
        let m = model(&s, &t, 1, Some(30.0));
        // ten instances, three workers: four waves of ~29 s after 180 s
        assert!(m.recovery_wall_secs > 180.0 + 3.0 * 25.0, "{m:?}");
        assert!(m.recovery_wall_secs < 185.0 + 4.0 * 40.0, "{m:?}");
        assert_eq!(m.recovered, 10);
        let dispatch = m.dispatch_latency_ms.unwrap();
        assert!(
            dispatch.p50 > 180_000.0 && dispatch.p50 < 181_000.0,
            "{dispatch:?}"
        );
    }

    #[test]
    fn stale_boot_from_volume_instances_are_not_recovered() {
        let s = Scenario::named("hosts-4x8-bfv").unwrap();
        let m = model(&s, &TimingModel::default(), 1, None);
        assert_eq!(m.recovered + m.not_recovered, 32);
        assert_eq!(m.not_recovered, 8);
    }
}
