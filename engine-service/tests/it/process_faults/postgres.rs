//! A private PostgreSQL cluster of the test's own (`initdb`, `pg_ctl`) on
//! a free port; never the machine's shared server.

use super::*;

pub(super) struct Postgres {
    bin: PathBuf,
    data: PathBuf,
    options: String,
    log: PathBuf,
    /// Run the server as this user (PostgreSQL refuses to run as root).
    as_user: Option<String>,
    pub(super) url: String,
    _dir: tempfile::TempDir,
}

impl Postgres {
    /// A fresh cluster on a free port, or why not.
    pub(super) fn start() -> Result<Postgres, String> {
        let bin = postgres_bin().ok_or("no initdb and pg_ctl in /usr/lib/postgresql/*/bin")?;
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let root = command_output("id", &["-u"]).map_err(|e| format!("id -u: {e}"))? == "0";
        let as_user = if root {
            // The package's own user, if there is one to switch to.
            let uid = command_output("id", &["-u", "postgres"]).map_err(
                |_| "running as root and there is no postgres user to run the server as",
            )?;
            let gid = command_output("id", &["-g", "postgres"]).map_err(|e| e.to_string())?;
            let (uid, gid): (u32, u32) = (
                uid.parse().map_err(|_| "a uid")?,
                gid.parse().map_err(|_| "a gid")?,
            );
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .map_err(|e| format!("chown {}: {e}", dir.path().display()))?;
            if !Path::new("/usr/sbin/runuser").is_file() && !Path::new("/sbin/runuser").is_file() {
                return Err("running as root and runuser is missing".to_owned());
            }
            Some("postgres".to_owned())
        } else {
            None
        };
        let data = dir.path().join("data");
        let log = dir.path().join("postgres.log");
        let port = free_port();
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off",
            dir.path().display()
        );
        let pg = Postgres {
            bin,
            data,
            options,
            log,
            as_user,
            url: format!("postgres://ha@127.0.0.1:{port}/postgres"),
            _dir: dir,
        };
        pg.run(
            "initdb",
            &[
                "-D",
                &pg.data.display().to_string(),
                "-U",
                "ha",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        )?;
        pg.start_server()?;
        Ok(pg)
    }

    pub(super) fn run(&self, program: &str, args: &[&str]) -> Result<(), String> {
        let program = self.bin.join(program);
        let mut command = match &self.as_user {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&program);
                c
            }
            None => Command::new(&program),
        };
        let output = command
            .args(args)
            .current_dir(self._dir.path())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("{}: {e}", program.display()))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{} {args:?} failed: {}{}",
                program.display(),
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }

    pub(super) fn start_server(&self) -> Result<(), String> {
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data.display().to_string(),
                "-l",
                &self.log.display().to_string(),
                "-o",
                &self.options,
                "-w",
                "-t",
                "60",
                "start",
            ],
        )
    }

    pub(super) fn stop_server(&self, mode: &str) -> Result<(), String> {
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data.display().to_string(),
                "-m",
                mode,
                "-w",
                "-t",
                "60",
                "stop",
            ],
        )
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self.stop_server("immediate");
    }
}

pub(super) fn postgres_bin() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("pg_ctl").is_file()).then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

pub(super) fn command_output(program: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}
