//! The directory a benchmark's runs keep their files in, and what the
//! simulator's request log keeps of each run.

use std::path::PathBuf;

use anyhow::Context as _;

use crate::Common;

/// The calls the simulator's request log keeps in a run (the last ones).
pub const REQUEST_LOG: usize = 1_000;
/// ... and with `--keep`: every call of any run this machine can hold
/// (the simulator's memory grows with it: its figures are not comparable).
pub const KEPT_REQUEST_LOG: usize = 50_000_000;

/// What a kept run directory holds, printed with its path.
const KEPT: &str = "each run's folder holds every configuration and database, each service's \
                    output (instanceha-api.log, instanceha-engine.log, openstack-sim.log) and \
                    every call the simulator served (sim-requests.json)";

/// The directory the runs keep their files in: `--work-dir`, or a
/// temporary one, removed at the end unless `--keep`.
pub struct WorkDir {
    pub root: PathBuf,
    temp: Option<tempfile::TempDir>,
}

impl WorkDir {
    pub fn create(common: &Common) -> anyhow::Result<Self> {
        let (root, temp) = match &common.work_dir {
            Some(dir) => (dir.clone(), None),
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("instanceha-bench-")
                    .tempdir()
                    .context("creating the run directory")?;
                (temp.path().to_owned(), Some(temp))
            }
        };
        std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
        Ok(Self { root, temp })
    }

    /// Removes a temporary directory, or keeps it and says where.
    pub fn finish(self, keep: bool) {
        if !keep {
            return;
        }
        let root = match self.temp {
            Some(temp) => temp.keep(),
            None => self.root,
        };
        eprintln!(
            "instanceha-bench: run directory kept: {}; {KEPT}",
            root.display()
        );
    }
}
