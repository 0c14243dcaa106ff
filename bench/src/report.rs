//! The benchmark's output: tables for people, one JSON document for
//! machines, the machine the figures come from, and the targets
//! judged against what was measured.

use comfy_table::{Table, presets::ASCII_MARKDOWN};
use serde::Serialize;

use crate::intake::IntakeReport;
use crate::masakari::MasakariModel;
use crate::masakari::intake::MasakariIntakeReport;
use crate::masakari::recovery::MasakariRecoveryReport;
use crate::recovery::RecoveryReport;
use crate::stats::Summary;

/// Where the figures were measured.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub memory_mib: u64,
    pub cpu_model: String,
    pub kernel: String,
    /// `/proc/loadavg` when the benchmark started: other work on the
    /// machine skews the figures.
    pub loadavg_at_start: String,
}

impl Machine {
    pub fn read() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_owned())
            .unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_mib = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_default()
            / 1024;
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_owned();
        let loadavg_at_start = std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
            .to_owned();
        Self {
            loadavg_at_start,
            nproc: std::thread::available_parallelism()
                .map(usize::from)
                .unwrap_or(1),
            memory_mib,
            cpu_model,
            kernel,
        }
    }
}

/// A recovery run with Masakari's modelled figures for the same scenario.
#[derive(Clone, Debug, Serialize)]
pub struct RecoveryEntry {
    pub measured: RecoveryReport,
    pub masakari_model: MasakariModel,
}

/// A recovery run by Masakari itself, with the model's figures for the
/// same scenario.
#[derive(Clone, Debug, Serialize)]
pub struct MasakariRecoveryEntry {
    pub measured: MasakariRecoveryReport,
    pub model: MasakariModel,
}

/// A target of the issue and whether the figures meet it.
#[derive(Clone, Debug, Serialize)]
pub struct Target {
    pub target: String,
    pub measured: String,
    /// `None`: not measured in this invocation.
    pub met: Option<bool>,
}

/// Everything one invocation measured.
#[derive(Clone, Debug, Serialize)]
pub struct Document {
    pub command: String,
    pub machine: Machine,
    pub recovery: Vec<RecoveryEntry>,
    pub intake: Vec<IntakeReport>,
    /// Masakari itself on the same scenarios and load.
    pub masakari_recovery: Vec<MasakariRecoveryEntry>,
    pub masakari_intake: Vec<MasakariIntakeReport>,
    pub targets: Vec<Target>,
}

fn f1(v: f64) -> String {
    format!("{v:.1}")
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map(f).unwrap_or_else(|| "-".into())
}

fn pair(s: Option<Summary>, f: impl Fn(f64) -> String) -> String {
    s.map(|s| format!("{} / {}", f(s.p50), f(s.p99)))
        .unwrap_or_else(|| "-".into())
}

fn triple(s: Option<Summary>, f: impl Fn(f64) -> String) -> String {
    s.map(|s| format!("{} / {} / {}", f(s.p50), f(s.p99), f(s.max)))
        .unwrap_or_else(|| "-".into())
}

fn mib(kib: Option<u64>) -> String {
    kib.map(|k| format!("{:.0}", k as f64 / 1024.0))
        .unwrap_or_else(|| "-".into())
}

impl Document {
    /// The tables, as Markdown.
    pub fn tables(&self) -> String {
        let mut out = String::new();
        if !self.recovery.is_empty() {
            let mut t = Table::new();
            t.load_preset(ASCII_MARKDOWN);
            t.set_header(vec![
                "scenario",
                "db",
                "speed",
                "instances",
                "wall s",
                "ideal s",
                "ratio",
                "dispatch p50/p99 ms",
                "instance p50/p99/max s",
                "BFV / image p50 s",
                "peak RSS api/engine/sim MiB",
                "outcome",
            ]);
            for e in &self.recovery {
                let r = &e.measured;
                t.add_row(vec![
                    r.scenario.name.clone(),
                    r.database.clone(),
                    format!("{}", r.speed),
                    r.instances.to_string(),
                    f1(r.recovery_wall_secs),
                    opt(r.ideal_makespan_secs, f1),
                    opt(r.ratio_to_ideal, |v| format!("{v:.3}")),
                    pair(r.dispatch_latency_ms, f1),
                    triple(r.instance_recovery_secs, f1),
                    match (r.instance_recovery_bfv_secs, r.instance_recovery_image_secs) {
                        (Some(b), Some(i)) => format!("{} / {}", f1(b.p50), f1(i.p50)),
                        (None, Some(i)) => format!("- / {}", f1(i.p50)),
                        _ => "-".into(),
                    },
                    format!(
                        "{} / {} / {}",
                        mib(r.usage.api.as_ref().map(|u| u.peak_rss_kib)),
                        mib(r.usage.engine.as_ref().map(|u| u.peak_rss_kib)),
                        mib(r.usage.sim.as_ref().map(|u| u.peak_rss_kib)),
                    ),
                    if r.ok() {
                        "all recovered".to_owned()
                    } else {
                        format!("{} problem(s)", r.problems.len())
                    },
                ]);
            }
            out.push_str(
                "Recovery (measured; durations in cloud seconds = real seconds x speed)\n\n",
            );
            out.push_str(&t.to_string());
            out.push_str("\n\n");

            let mut m = Table::new();
            m.load_preset(ASCII_MARKDOWN);
            m.set_header(vec![
                "scenario",
                "wall s",
                "ratio",
                "dispatch p50/p99 ms",
                "instance p50/p99/max s",
                "downtime after report p50/p99/max s",
                "recovered",
            ]);
            for (name, x) in self.models() {
                m.add_row(vec![
                    name.to_owned(),
                    f1(x.recovery_wall_secs),
                    opt(x.ratio_to_ideal, |v| format!("{v:.2}")),
                    pair(x.dispatch_latency_ms, |v| format!("{v:.0}")),
                    triple(x.instance_recovery_secs, f1),
                    triple(x.instance_downtime_secs, f1),
                    format!("{} of {}", x.recovered, x.recovered + x.not_recovered),
                ]);
            }
            out.push_str("Masakari, default settings (a MODEL computed from its timing model, not measured)\n\n");
            out.push_str(&m.to_string());
            out.push_str("\n\n");

            let mut d = Table::new();
            d.load_preset(ASCII_MARKDOWN);
            d.set_header(vec![
                "scenario",
                "downtime after report p50/p99/max s",
                "BFV downtime p50/p99 s",
                "image downtime p50/p99 s",
                "CPU api/engine/sim s",
                "run s",
            ]);
            for e in &self.recovery {
                let r = &e.measured;
                let cpu = |u: &Option<crate::procs::Usage>| {
                    u.as_ref()
                        .map(|u| format!("{:.2}", u.cpu_secs))
                        .unwrap_or_else(|| "-".into())
                };
                d.add_row(vec![
                    r.scenario.name.clone(),
                    triple(r.instance_downtime_secs, f1),
                    pair(r.instance_downtime_bfv_secs, f1),
                    pair(r.instance_downtime_image_secs, f1),
                    format!(
                        "{} / {} / {}",
                        cpu(&r.usage.api),
                        cpu(&r.usage.engine),
                        cpu(&r.usage.sim)
                    ),
                    f1(r.run_real_secs),
                ]);
            }
            out.push_str("Recovery details (measured)\n\n");
            out.push_str(&d.to_string());
            out.push_str("\n\n");
        }
        if !self.masakari_recovery.is_empty() {
            out.push_str(&self.masakari_tables());
        }
        if !self.intake.is_empty() {
            let mut t = Table::new();
            t.load_preset(ASCII_MARKDOWN);
            t.set_header(vec![
                "db",
                "clients",
                "reports",
                "notifications/s",
                "create p50/p99 ms",
                "stored / expected",
                "lost or duplicated",
                "API peak RSS MiB",
            ]);
            for r in &self.intake {
                t.add_row(vec![
                    r.database.clone(),
                    format!("{} on {} conn.", r.concurrency, r.connections),
                    format!("{} (+{} warm-up)", r.count, r.warmup),
                    format!("{:.0}", r.notifications_per_sec),
                    pair(r.create_latency_ms, |v| format!("{v:.2}")),
                    format!("{} / {}", r.stored, r.expected),
                    if r.lost_or_duplicated { "YES" } else { "none" }.to_owned(),
                    mib(r.api_usage.as_ref().map(|u| u.peak_rss_kib)),
                ]);
            }
            out.push_str("Intake (measured)\n\n");
            out.push_str(&t.to_string());
            out.push_str("\n\n");
        }
        if !self.masakari_intake.is_empty() {
            let mut t = Table::new();
            t.load_preset(ASCII_MARKDOWN);
            t.set_header(vec![
                "Masakari",
                "db",
                "clients",
                "reports",
                "notifications/s",
                "create p50/p99 ms",
                "answers",
                "stored / expected",
                "duplicated / lost",
                "API peak RSS MiB",
            ]);
            for r in &self.masakari_intake {
                t.add_row(vec![
                    r.masakari_version.clone(),
                    r.database.clone(),
                    r.concurrency.to_string(),
                    format!("{} (+{} warm-up)", r.count, r.warmup),
                    format!("{:.1}", r.notifications_per_sec),
                    pair(r.create_latency_ms, |v| format!("{v:.0}")),
                    r.answers
                        .iter()
                        .map(|(k, v)| format!("{k}: {v}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    format!("{} / {}", r.stored, r.expected),
                    format!("{} / {}", r.duplicated, r.missing),
                    mib(r.api_usage.as_ref().map(|u| u.peak_rss_kib)),
                ]);
            }
            out.push_str("Intake by Masakari (measured, its REST API, its defaults)\n\n");
            out.push_str(&t.to_string());
            out.push_str("\n\n");
        }
        if !self.targets.is_empty() {
            let mut t = Table::new();
            t.load_preset(ASCII_MARKDOWN);
            t.set_header(vec!["target", "measured", "met"]);
            for target in &self.targets {
                t.add_row(vec![
                    target.target.clone(),
                    target.measured.clone(),
                    match target.met {
                        Some(true) => "yes",
                        Some(false) => "NO",
                        None => "not measured",
                    }
                    .to_owned(),
                ]);
            }
            out.push_str("Targets of issue 8\n\n");
            out.push_str(&t.to_string());
            out.push('\n');
        }
        for e in &self.recovery {
            for p in &e.measured.problems {
                out.push_str(&format!("problem in {}: {p}\n", e.measured.scenario.name));
            }
        }
        for e in &self.masakari_recovery {
            for p in &e.measured.problems {
                out.push_str(&format!("Masakari in {}: {p}\n", e.measured.scenario.name));
            }
        }
        out
    }

    /// Masakari's recovery runs, measured, and the model beside them.
    fn masakari_tables(&self) -> String {
        let mut out = String::new();
        let mut t = Table::new();
        t.load_preset(ASCII_MARKDOWN);
        t.set_header(vec![
            "scenario",
            "Masakari",
            "recovered",
            "notifications",
            "wall s",
            "last instance back s",
            "ideal s",
            "ratio",
            "report answered p50/max s",
            "first evacuation p50/p99 s",
            "instance p50/p99/max s",
            "downtime p50/p99/max s",
            "peak RSS api/engine/rabbitmq MiB",
        ]);
        for e in &self.masakari_recovery {
            let r = &e.measured;
            t.add_row(vec![
                r.scenario.name.clone(),
                r.masakari_version.clone(),
                format!("{} of {}", r.recovered, r.recovered + r.not_recovered),
                r.notification_statuses
                    .iter()
                    .map(|(k, v)| format!("{v} {k}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                f1(r.recovery_wall_secs),
                opt(r.last_instance_back_secs, f1),
                opt(r.ideal_makespan_secs, f1),
                opt(r.ratio_to_ideal, |v| format!("{v:.2}")),
                r.create_delay_secs
                    .map(|s| format!("{} / {}", f1(s.p50), f1(s.max)))
                    .unwrap_or_else(|| "-".into()),
                pair(r.dispatch_latency_secs, f1),
                triple(r.instance_recovery_secs, f1),
                triple(r.instance_downtime_secs, f1),
                format!(
                    "{} / {} / {}",
                    mib(r.usage.api.as_ref().map(|u| u.peak_rss_kib)),
                    mib(r.usage.engine.as_ref().map(|u| u.peak_rss_kib)),
                    mib(r.usage.rabbitmq.as_ref().map(|u| u.peak_rss_kib)),
                ),
            ]);
        }
        out.push_str(
            "Recovery by Masakari (measured, its defaults, speed 1; times from the report sent)\n\n",
        );
        out.push_str(&t.to_string());
        out.push_str("\n\n");
        out
    }

    /// The model's figures of every scenario instance-ha ran, and of those
    /// only Masakari ran.
    fn models(&self) -> Vec<(&str, &MasakariModel)> {
        let mut models: Vec<(&str, &MasakariModel)> = self
            .recovery
            .iter()
            .map(|e| (e.measured.scenario.name.as_str(), &e.masakari_model))
            .collect();
        for e in &self.masakari_recovery {
            let name = e.measured.scenario.name.as_str();
            if !models.iter().any(|(n, _)| *n == name) {
                models.push((name, &e.model));
            }
        }
        models
    }

    /// Judges the targets on what this invocation measured.
    pub fn judge(&mut self) {
        let by_name = |name: &str| -> Vec<&RecoveryReport> {
            self.recovery
                .iter()
                .map(|e| &e.measured)
                .filter(|r| r.scenario.name == name)
                .collect()
        };
        let mut targets = Vec::new();
        for (name, limit) in [("one-host-100", 1.10), ("hosts-100x50", 1.25)] {
            let runs = by_name(name);
            let worst = runs
                .iter()
                .filter_map(|r| r.ratio_to_ideal)
                .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))));
            targets.push(Target {
                target: format!("ratio to ideal <= {limit:.2} ({name})"),
                measured: opt(worst, |v| format!("{v:.3}")),
                met: worst.map(|w| w <= limit),
            });
        }
        let wall = |name: &str| {
            by_name(name)
                .iter()
                .map(|r| r.recovery_wall_secs)
                .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))))
        };
        let bfv_ratio = match (wall("hosts-100x50-bfv"), wall("hosts-100x50")) {
            (Some(b), Some(e)) if e > 0.0 => Some(b / e),
            _ => None,
        };
        targets.push(Target {
            target: "boot-from-volume within 1.2x of ephemeral (hosts-100x50-bfv wall / hosts-100x50 wall)".into(),
            measured: opt(bfv_ratio, |v| format!("{v:.3}")),
            met: bfv_ratio.map(|r| r <= 1.2),
        });
        let within = by_name("hosts-100x50-bfv").first().and_then(|r| {
            match (r.instance_downtime_bfv_secs, r.instance_downtime_image_secs) {
                (Some(b), Some(i)) if i.p50 > 0.0 => Some(b.p50 / i.p50),
                _ => None,
            }
        });
        targets.push(Target {
            target:
                "boot-from-volume within 1.2x of ephemeral (same run, downtime p50 BFV / image)"
                    .into(),
            measured: opt(within, |v| format!("{v:.3}")),
            met: within.map(|r| r <= 1.2),
        });
        let dispatch: Vec<f64> = self
            .recovery
            .iter()
            .filter_map(|e| e.measured.dispatch_latency_ms)
            .map(|s| s.p99)
            .collect();
        let worst_dispatch = dispatch
            .iter()
            .copied()
            .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))));
        targets.push(Target {
            target: "dispatch latency p99 < 50 ms (worst run)".into(),
            measured: opt(worst_dispatch, |v| format!("{v:.1} ms")),
            met: worst_dispatch.map(|w| w < 50.0),
        });
        let pg = self.intake.iter().find(|r| r.database == "postgresql");
        targets.push(Target {
            target: "intake on PostgreSQL >= 2000/s, p99 < 25 ms, nothing lost or duplicated"
                .into(),
            measured: pg
                .map(|r| {
                    format!(
                        "{:.0}/s, p99 {} ms, {}",
                        r.notifications_per_sec,
                        opt(r.create_latency_ms.map(|s| s.p99), |v| format!("{v:.1}")),
                        if r.lost_or_duplicated {
                            "LOST OR DUPLICATED"
                        } else {
                            "exactly once"
                        }
                    )
                })
                .unwrap_or_else(|| "-".into()),
            met: pg.map(|r| {
                r.notifications_per_sec >= 2000.0
                    && r.create_latency_ms.is_some_and(|s| s.p99 < 25.0)
                    && !r.lost_or_duplicated
            }),
        });
        let big: Vec<&RecoveryReport> = self
            .recovery
            .iter()
            .map(|e| &e.measured)
            .filter(|r| r.instances >= 5000)
            .collect();
        let peak = big
            .iter()
            .flat_map(|r| [&r.usage.api, &r.usage.engine])
            .filter_map(|u| u.as_ref().map(|u| u.peak_rss_mib()))
            .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))));
        targets.push(Target {
            target: "peak RSS < 150 MiB per service (API, engine) in 5,000-instance runs".into(),
            measured: opt(peak, |v| format!("{v:.0} MiB (largest)")),
            met: peak.map(|p| p < 150.0),
        });
        self.targets = targets;
    }
}
