//! The benchmark's scenarios and timing model, and the simulator scenario
//! file written for each.
//!
//! Every scenario is one failover segment (recovery method `auto`) of
//! compute hosts in two racks: the hosts of rack A fail (power off, then
//! one fenced COMPUTE_HOST report each), rack B's survive and receive the
//! evacuations (Nova's scheduler spreads them by free RAM).

use std::fmt::Write as _;

use serde::Serialize;

/// Simulated Nova's and Cinder's timing (simulated seconds).
///
/// The figures are those of a production cloud, not the simulator's
/// test-friendly defaults: a rebuild takes about half a minute (scheduling
/// 2 s, claim 1 s, volume set-up 4 s, spawn 20 s, two finishing steps of
/// 1 s), each with ±20 % seeded jitter; every Nova and Cinder call answers
/// in 5 ms, a Keystone login in 50 ms; a destination compute rebuilds at
/// most 10 instances at once and queues the rest (Nova's default
/// `max_concurrent_builds`); Nova sees a silent compute down after 60 s
/// (`service_down_time`, heartbeats every 10 s).
#[derive(Clone, Debug, Serialize)]
pub struct TimingModel {
    pub api_latency: f64,
    pub token_issue: f64,
    pub schedule: f64,
    pub claim: f64,
    pub block_device_mapping: f64,
    pub spawn: f64,
    pub finish: f64,
    pub stop: f64,
    pub start: f64,
    pub jitter: f64,
    pub rebuild_concurrency: usize,
    pub service_down_time: f64,
    pub report_interval: f64,
    pub stale_attachment_timeout: f64,
}

impl Default for TimingModel {
    fn default() -> Self {
        Self {
            api_latency: 0.005,
            token_issue: 0.05,
            schedule: 2.0,
            claim: 1.0,
            block_device_mapping: 4.0,
            spawn: 20.0,
            finish: 1.0,
            stop: 5.0,
            start: 5.0,
            jitter: 0.2,
            rebuild_concurrency: 10,
            service_down_time: 60.0,
            report_interval: 10.0,
            stale_attachment_timeout: 780.0,
        }
    }
}

impl TimingModel {
    /// One evacuation from request to `done` without queueing (the mean,
    /// before jitter): what Nova needs per instance.
    pub fn rebuild_secs(&self) -> f64 {
        self.schedule + self.claim + self.block_device_mapping + self.spawn + 2.0 * self.finish
    }
}

/// One of the scenarios of the issue (or a custom one).
#[derive(Clone, Debug, Serialize)]
pub struct Scenario {
    pub name: String,
    /// Hosts that fail together (rack A).
    pub failed_hosts: usize,
    /// HA instances on each failed host.
    pub instances_per_host: usize,
    /// Hosts that survive (rack B) and receive the evacuations.
    pub surviving_hosts: usize,
    /// Share of the instances booted from volume, each with a stale
    /// attachment on its failed host (launchpad bug 2158101).
    pub bfv_fraction: f64,
    /// A nova-api outage (every compute call answered 503) of this many
    /// cloud seconds, from `nova_outage_at` cloud seconds after the reports.
    pub nova_outage_secs: Option<f64>,
    pub nova_outage_at: f64,
}

/// The scenarios `all` runs, in order.
pub const NAMED: [&str; 5] = [
    "one-host-10",
    "one-host-100",
    "one-host-1000",
    "hosts-100x50",
    "hosts-100x50-bfv",
];

impl Scenario {
    /// A scenario by name: `one-host-N` (one host with N instances, 19
    /// survivors), `hosts-HxN` (H hosts with N instances each, as many
    /// survivors), and either with `-bfv` (a quarter boot-from-volume with
    /// stale attachments) and `-outageS[@T]` (nova-api answering 503 for S
    /// seconds from T seconds after the reports, one by default), in that
    /// order.
    pub fn named(name: &str) -> Option<Self> {
        let positive = |s: &str| s.parse::<f64>().ok().filter(|v| v.is_finite() && *v > 0.0);
        let (base, outage, outage_at) = match name.rsplit_once("-outage") {
            Some((base, spec)) => {
                let (secs, at) = match spec.split_once('@') {
                    Some((secs, at)) => (positive(secs)?, positive(at)?),
                    None => (positive(spec)?, 1.0),
                };
                (base, Some(secs), at)
            }
            None => (name, None, 1.0),
        };
        let (base, bfv) = match base.strip_suffix("-bfv") {
            Some(base) => (base, 0.25),
            None => (base, 0.0),
        };
        let (failed, per_host, surviving) = if let Some(n) = base.strip_prefix("one-host-") {
            (1, n.parse().ok()?, 19)
        } else if let Some(spec) = base.strip_prefix("hosts-") {
            let (hosts, per_host) = spec.split_once('x')?;
            let hosts: usize = hosts.parse().ok()?;
            (hosts, per_host.parse().ok()?, hosts)
        } else {
            return None;
        };
        if failed == 0 || per_host == 0 {
            return None;
        }
        Some(Self {
            name: name.to_owned(),
            failed_hosts: failed,
            instances_per_host: per_host,
            surviving_hosts: surviving,
            bfv_fraction: bfv,
            nova_outage_secs: outage,
            nova_outage_at: outage_at,
        })
    }

    pub fn instances(&self) -> usize {
        self.failed_hosts * self.instances_per_host
    }

    /// The name of failed host `i` (0-based).
    pub fn failed_host(&self, i: usize) -> String {
        format!("rack-a-{:03}", i + 1)
    }

    pub fn surviving_host(&self, i: usize) -> String {
        format!("rack-b-{:03}", i + 1)
    }

    /// Every host of the segment.
    pub fn hosts(&self) -> Vec<String> {
        (0..self.failed_hosts)
            .map(|i| self.failed_host(i))
            .chain((0..self.surviving_hosts).map(|i| self.surviving_host(i)))
            .collect()
    }

    /// The simulator's scenario file (TOML).
    /// `request_log_capacity`: the calls its request log keeps.
    pub fn sim_toml(
        &self,
        timing: &TimingModel,
        speed: f64,
        seed: u64,
        request_log_capacity: usize,
    ) -> String {
        let t = timing;
        let mut s = String::new();
        let _ = writeln!(s, "# instanceha-bench scenario {}", self.name);
        let _ = writeln!(s, "[settings]");
        let _ = writeln!(s, "speed = {speed:?}");
        let _ = writeln!(s, "seed = {seed}");
        let _ = writeln!(s, "service_down_time = {:?}", t.service_down_time);
        let _ = writeln!(s, "report_interval = {:?}", t.report_interval);
        let _ = writeln!(s, "rebuild_concurrency = {}", t.rebuild_concurrency);
        let _ = writeln!(
            s,
            "stale_attachment_timeout = {:?}",
            t.stale_attachment_timeout
        );
        let _ = writeln!(s, "max_limit = 1000");
        let _ = writeln!(s, "request_log_capacity = {request_log_capacity}");
        let _ = writeln!(s, "\n[settings.durations]");
        for (key, value) in [
            ("api_latency", t.api_latency),
            ("token_issue", t.token_issue),
            ("schedule", t.schedule),
            ("claim", t.claim),
            ("block_device_mapping", t.block_device_mapping),
            ("spawn", t.spawn),
            ("finish", t.finish),
            ("stop", t.stop),
            ("start", t.start),
            ("jitter", t.jitter),
        ] {
            let _ = writeln!(s, "{key} = {value:?}");
        }
        // Room for every instance anywhere: placement follows free RAM only.
        // Each hypervisor is named as its host, as Nova shows it when the
        // compute's `host` and the hypervisor's hostname agree (libvirt on
        // an unqualified hostname, the fake driver): Masakari takes a
        // server whose node differs from the failed host's name for
        // evacuated.
        for (prefix, count) in [
            ("rack-a-", self.failed_hosts),
            ("rack-b-", self.surviving_hosts),
        ] {
            let _ = writeln!(s, "\n[[host_groups]]");
            let _ = writeln!(s, "name_prefix = {prefix:?}");
            let _ = writeln!(s, "count = {count}");
            let _ = writeln!(s, "width = 3");
            let _ = writeln!(s, "hypervisor_domain = \"\"");
            let _ = writeln!(s, "vcpus = 4096");
            let _ = writeln!(s, "ram_mb = 8388608");
        }
        let _ = writeln!(s, "\n[[instance_groups]]");
        let _ = writeln!(s, "host = \"rack-a-*\"");
        let _ = writeln!(s, "count = {}", self.instances_per_host);
        let _ = writeln!(s, "name_prefix = \"vm\"");
        let _ = writeln!(s, "flavor = \"m1.small\"");
        let _ = writeln!(s, "ha_enabled = true");
        if self.bfv_fraction > 0.0 {
            let _ = writeln!(s, "boot_from_volume_fraction = {:?}", self.bfv_fraction);
            let _ = writeln!(s, "stale_attachments = true");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse() {
        let s = Scenario::named("hosts-100x50-bfv").unwrap();
        assert_eq!((s.failed_hosts, s.instances_per_host), (100, 50));
        assert_eq!(s.bfv_fraction, 0.25);
        assert_eq!(s.instances(), 5000);
        let s = Scenario::named("one-host-1000").unwrap();
        assert_eq!((s.failed_hosts, s.surviving_hosts), (1, 19));
        assert!(Scenario::named("one-host-0").is_none());
        let s = Scenario::named("hosts-100x50-outage30").unwrap();
        assert_eq!((s.instances(), s.nova_outage_secs), (5000, Some(30.0)));
        assert_eq!(s.bfv_fraction, 0.0);
        let s = Scenario::named("hosts-4x5-bfv-outage2.5").unwrap();
        assert_eq!((s.bfv_fraction, s.nova_outage_secs), (0.25, Some(2.5)));
        assert!(Scenario::named("hosts-4x5-outage0").is_none());
        let s = Scenario::named("hosts-100x50-outage30@60").unwrap();
        assert_eq!((s.nova_outage_secs, s.nova_outage_at), (Some(30.0), 60.0));
        assert!(Scenario::named("hosts-4x5-outage30@").is_none());
        assert!(Scenario::named("hosts-4x5-outagex").is_none());
        assert!(Scenario::named("nope").is_none());
        for name in NAMED {
            assert!(Scenario::named(name).is_some(), "{name}");
        }
    }
}
