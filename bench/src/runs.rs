//! The runs a command asks for, each into the report: every scenario's
//! recovery rounds and the intake load on every database, by instance-ha
//! and, when asked, by OpenStack Masakari.

use std::path::Path;
use std::time::Duration;

use anyhow::bail;

use crate::cloud::RunDir;
use crate::db::Backend;
use crate::intake::IntakeSettings;
use crate::masakari::intake::MasakariIntakeSettings;
use crate::procs::Binaries;
use crate::recovery::RecoverySettings;
use crate::report::{Document, MasakariRecoveryEntry, RecoveryEntry};
use crate::scenario::{Scenario, TimingModel};
use crate::{Common, Db, IntakeDb, IntakeTuning, RecoveryTuning};
use crate::{intake, masakari, recovery};

/// What every run needs: the command line's common options, the
/// binaries, and the directory the runs keep their files in.
pub struct Bench<'a> {
    pub common: &'a Common,
    pub binaries: &'a Binaries,
    pub root: &'a Path,
}

impl Bench<'_> {
    /// The directory of one run, created; instance-ha's runs get the
    /// extra environment of the command line, Masakari's none.
    pub fn run_dir(&self, name: &str, ours: bool) -> anyhow::Result<RunDir> {
        let (engine_env, api_env) = if ours {
            (self.common.engine_env.clone(), self.common.api_env.clone())
        } else {
            (Vec::new(), Vec::new())
        };
        let dir = RunDir {
            path: self.root.join(name),
            log_filter: self.common.log_filter.clone(),
            engine_env,
            api_env,
            request_log_capacity: if self.common.keep {
                crate::workdir::KEPT_REQUEST_LOG
            } else {
                crate::workdir::REQUEST_LOG
            },
        };
        std::fs::create_dir_all(&dir.path)?;
        Ok(dir)
    }

    /// Every round of every scenario; false if one of instance-ha's did not
    /// recover everything.
    pub async fn recoveries(
        &self,
        list: Vec<Scenario>,
        tuning: &RecoveryTuning,
        document: &mut Document,
    ) -> anyhow::Result<bool> {
        if tuning.speed <= 0.0 {
            bail!("--speed must be positive");
        }
        let backend = match tuning.database {
            Db::Sqlite => Backend::Sqlite,
            Db::Postgres => Backend::Postgres {
                admin_url: self.common.postgres_url.clone(),
            },
        };
        let mut all_ok = true;
        for scenario in list {
            for round in 1..=tuning.repeat.max(1) {
                if tuning.masakari.theirs() {
                    let entry = self.recovery_by_masakari(&scenario, round, tuning).await?;
                    document.masakari_recovery.push(entry);
                }
                if tuning.masakari.ours() {
                    let entry = self
                        .recovery_by_ours(&scenario, round, tuning, &backend)
                        .await?;
                    all_ok &= entry.measured.ok();
                    document.recovery.push(entry);
                }
            }
        }
        Ok(all_ok)
    }

    /// One round of `scenario` recovered by Masakari (at speed 1), beside
    /// its model.
    async fn recovery_by_masakari(
        &self,
        scenario: &Scenario,
        round: usize,
        tuning: &RecoveryTuning,
    ) -> anyhow::Result<MasakariRecoveryEntry> {
        let dir = self.run_dir(&format!("{}-{round}-masakari", scenario.name), false)?;
        eprintln!(
            "instanceha-bench: recovery {} by Masakari (run {round}, speed 1), in {}",
            scenario.name,
            dir.path.display()
        );
        let timing = TimingModel::default();
        let measured = masakari::recovery::run(
            self.binaries,
            &dir,
            &self.common.masakari(None),
            scenario,
            &timing,
            tuning.seed,
            tuning.timeout.map(Duration::from_secs),
        )
        .await?;
        eprintln!(
            "instanceha-bench: {} by Masakari {}: wall {:.1} s, {} of {} recovered, notifications {:?}",
            scenario.name,
            measured.masakari_version,
            measured.recovery_wall_secs,
            measured.recovered,
            measured.instances,
            measured.notification_statuses
        );
        let model = masakari::model(scenario, &timing, tuning.seed, measured.ideal_makespan_secs);
        Ok(MasakariRecoveryEntry { measured, model })
    }

    /// One round of `scenario` recovered by instance-ha, beside Masakari's
    /// model of it.
    async fn recovery_by_ours(
        &self,
        scenario: &Scenario,
        round: usize,
        tuning: &RecoveryTuning,
        backend: &Backend,
    ) -> anyhow::Result<RecoveryEntry> {
        let dir = self.run_dir(&format!("{}-{round}", scenario.name), true)?;
        eprintln!(
            "instanceha-bench: recovery {} (run {round}, speed {}, {}), in {}",
            scenario.name,
            tuning.speed,
            backend.name(),
            dir.path.display()
        );
        let options = RecoverySettings {
            scenario: scenario.clone(),
            timing: TimingModel::default(),
            speed: tuning.speed,
            seed: tuning.seed,
            backend: backend.clone(),
            timeout: tuning.timeout.map(Duration::from_secs),
        };
        let measured = recovery::run(self.binaries, &dir, &options).await?;
        let model = masakari::model(
            scenario,
            &options.timing,
            tuning.seed,
            measured.ideal_makespan_secs,
        );
        eprintln!(
            "instanceha-bench: {}: wall {:.1} s, ideal {:.1} s, ratio {}, {} problem(s)",
            scenario.name,
            measured.recovery_wall_secs,
            measured.ideal_makespan_secs.unwrap_or(f64::NAN),
            measured
                .ratio_to_ideal
                .map(|r| format!("{r:.3}"))
                .unwrap_or_else(|| "-".into()),
            measured.problems.len()
        );
        if let Some(struck) = measured.outage_calls_struck {
            eprintln!(
                "instanceha-bench: {}: the nova-api outage answered {struck} call(s) 503",
                scenario.name
            );
        }
        Ok(RecoveryEntry {
            measured,
            masakari_model: model,
        })
    }

    /// The intake load on every database asked for (and on Masakari's);
    /// false if instance-ha lost or doubled a report.
    pub async fn intakes(
        &self,
        which: IntakeDb,
        tuning: &IntakeTuning,
        document: &mut Document,
    ) -> anyhow::Result<bool> {
        if tuning.masakari.theirs() {
            let report = self.intake_by_masakari(tuning).await?;
            document.masakari_intake.push(report);
        }
        let mut all_ok = true;
        for backend in self.intake_backends(which, tuning) {
            let dir = self.run_dir(&format!("intake-{}", backend.name()), true)?;
            eprintln!(
                "instanceha-bench: intake on {} ({} reports, {} clients), in {}",
                backend.name(),
                tuning.count,
                tuning.concurrency,
                dir.path.display()
            );
            let options = IntakeSettings {
                backend,
                count: tuning.count,
                warmup: tuning.warmup,
                concurrency: tuning.concurrency,
                connections: tuning.connections,
                hosts: tuning.hosts,
                replay_fraction: tuning.replay_fraction,
                client_threads: tuning.client_threads,
            };
            let report = intake::run(self.binaries, &dir, &options).await?;
            if let Err(e) = intake::check(&report) {
                eprintln!("instanceha-bench: {e}");
                all_ok = false;
            }
            document.intake.push(report);
        }
        Ok(all_ok)
    }

    /// instance-ha's databases to load: none when only Masakari runs.
    fn intake_backends(&self, which: IntakeDb, tuning: &IntakeTuning) -> Vec<Backend> {
        let mut backends = Vec::new();
        if !tuning.masakari.ours() {
            return backends;
        }
        if matches!(which, IntakeDb::Sqlite | IntakeDb::Both) {
            backends.push(Backend::Sqlite);
        }
        if matches!(which, IntakeDb::Postgres | IntakeDb::Both) {
            backends.push(Backend::Postgres {
                admin_url: self.common.postgres_url.clone(),
            });
        }
        backends
    }

    /// The intake load on Masakari's REST API.
    async fn intake_by_masakari(
        &self,
        tuning: &IntakeTuning,
    ) -> anyhow::Result<masakari::intake::MasakariIntakeReport> {
        let dir = self.run_dir("intake-masakari", false)?;
        eprintln!(
            "instanceha-bench: intake by Masakari ({} reports, {} clients), in {}",
            tuning.masakari_count,
            tuning.concurrency,
            dir.path.display()
        );
        let options = MasakariIntakeSettings {
            count: tuning.masakari_count,
            warmup: tuning.masakari_warmup,
            concurrency: tuning.concurrency,
            hosts: tuning.hosts,
            replay_fraction: tuning.replay_fraction,
        };
        let report =
            masakari::intake::run(self.binaries, &dir, &self.common.masakari(None), &options)
                .await?;
        eprintln!(
            "instanceha-bench: intake by Masakari {}: {:.1} notifications/s, answers {:?}",
            report.masakari_version, report.notifications_per_sec, report.answers
        );
        Ok(report)
    }
}
