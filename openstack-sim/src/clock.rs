//! Simulated time: a clock that runs `speed` times faster than the wall clock and can jump ahead.
//! It reads Tokio's clock, so a test on a paused runtime drives the simulated cloud's time too
//! (`tokio::time::pause`, `advance`): hours of simulated outage cost no real time.

use std::time::Duration;

use tokio::time::Instant;

use chrono::{DateTime, Utc};

/// A point in simulated time, in microseconds since the scenario was loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SimTime(u64);

impl SimTime {
    /// The moment the scenario was loaded.
    pub const ZERO: SimTime = SimTime(0);

    /// A point `secs` simulated seconds after the scenario was loaded (negative values clamp to zero).
    pub fn from_secs_f64(secs: f64) -> SimTime {
        SimTime((secs.max(0.0) * 1e6).round() as u64)
    }

    /// Simulated seconds since the scenario was loaded.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }

    /// This point moved `secs` simulated seconds later.
    pub fn plus_secs(self, secs: f64) -> SimTime {
        SimTime(self.0 + (secs.max(0.0) * 1e6).round() as u64)
    }

    /// Simulated seconds from `earlier` to `self` (zero if `earlier` is later).
    pub fn secs_since(self, earlier: SimTime) -> f64 {
        self.0.saturating_sub(earlier.0) as f64 / 1e6
    }
}

impl serde::Serialize for SimTime {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.as_secs_f64())
    }
}

impl<'de> serde::Deserialize<'de> for SimTime {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SimTime, D::Error> {
        Ok(SimTime::from_secs_f64(f64::deserialize(d)?))
    }
}

/// Maps real time to simulated time and simulated time back to wall-clock timestamps.
#[derive(Debug, Clone)]
pub struct Clock {
    speed: f64,
    real_anchor: Instant,
    sim_anchor: SimTime,
    wall_anchor: DateTime<Utc>,
}

impl Clock {
    /// A clock starting at simulated time zero now, running `speed` times faster than real time.
    pub fn new(speed: f64) -> Clock {
        Clock {
            speed,
            real_anchor: Instant::now(),
            sim_anchor: SimTime::ZERO,
            wall_anchor: Utc::now(),
        }
    }

    /// The speed factor: simulated seconds per real second.
    pub fn speed(&self) -> f64 {
        self.speed
    }

    /// The current simulated time.
    pub fn now(&self) -> SimTime {
        let real = self.real_anchor.elapsed().as_secs_f64();
        // truncate, so simulated time never runs ahead of real time
        SimTime(self.sim_anchor.0 + (real * self.speed * 1e6) as u64)
    }

    /// The wall-clock timestamp of a simulated moment. Moments skipped by [`Clock::advance`]
    /// all map to the wall time of the jump, so timestamps never go backwards.
    pub fn wall(&self, t: SimTime) -> DateTime<Utc> {
        if t <= self.sim_anchor {
            return self.wall_anchor;
        }
        let real = t.secs_since(self.sim_anchor) / self.speed;
        self.wall_anchor + chrono::Duration::microseconds((real * 1e6) as i64)
    }

    /// The current wall-clock time, consistent with [`Clock::wall`].
    pub fn wall_now(&self) -> DateTime<Utc> {
        self.wall(self.now())
    }

    /// Real time that `sim_secs` simulated seconds take.
    pub fn real_duration(&self, sim_secs: f64) -> Duration {
        Duration::from_secs_f64((sim_secs / self.speed).max(0.0))
    }

    /// Real time from now until the simulated moment `t` (zero if it has passed).
    pub fn real_until(&self, t: SimTime) -> Duration {
        self.real_duration(t.secs_since(self.now()))
    }

    /// Jumps simulated time forward by `secs` without waiting for it.
    pub fn advance(&mut self, secs: f64) {
        let now_real = Instant::now();
        let now_sim = self.now();
        let real_elapsed = now_real.duration_since(self.real_anchor);
        let wall_before = self.wall(now_sim);
        self.wall_anchor += chrono::Duration::from_std(real_elapsed).unwrap_or_default();
        // everything stamped before the jump stays at or before the new anchor
        self.wall_anchor = self.wall_anchor.max(wall_before);
        self.real_anchor = now_real;
        self.sim_anchor = now_sim.plus_secs(secs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim_time_round_trips_seconds() {
        let t = SimTime::from_secs_f64(12.5);
        assert_eq!(t.as_secs_f64(), 12.5);
        assert_eq!(t.plus_secs(0.5).secs_since(t), 0.5);
        assert_eq!(t.secs_since(t.plus_secs(3.0)), 0.0);
        assert_eq!(SimTime::from_secs_f64(-3.0), SimTime::ZERO);
    }

    #[test]
    fn advance_jumps_forward_and_keeps_wall_time_monotonic() {
        let mut clock = Clock::new(1.0);
        let before = clock.now();
        let wall_before = clock.wall_now();
        clock.advance(600.0);
        assert!(clock.now().secs_since(before) >= 600.0);
        // a moment inside the skipped interval maps to the jump's wall time, not earlier
        assert!(clock.wall(before.plus_secs(300.0)) >= wall_before);
        assert!(clock.wall_now() >= wall_before);
    }

    #[test]
    fn speed_scales_real_durations() {
        let clock = Clock::new(100.0);
        assert_eq!(clock.real_duration(60.0), Duration::from_millis(600));
    }
}
