//! The real control plane: its client environment (`stack.py env`) and its
//! processes, which a test kills, stops and starts as an outage would.

use std::collections::BTreeMap;
use std::time::Instant;

/// The variable that names the control, e.g.
/// `python3 conformance/real-openstack/stack.py`.
pub const CTL_VARIABLE: &str = "INSTANCEHA_REAL_OPENSTACK_CTL";

/// A running control plane.
#[derive(Clone, Debug)]
pub struct Stack {
    ctl: Vec<String>,
    /// `OS_*` and `INSTANCEHA_REAL_OPENSTACK_*`, as `stack.py env` prints.
    pub env: BTreeMap<String, String>,
}

impl Stack {
    /// The stack named by [`CTL_VARIABLE`]. Without it: `None` and a line
    /// saying the test did not run; under CI (`CI` set) a panic, since a
    /// conformance run that silently skipped proves nothing.
    pub fn from_env(test: &str) -> Option<Stack> {
        let Some(ctl) = std::env::var(CTL_VARIABLE)
            .ok()
            .filter(|v| !v.trim().is_empty())
        else {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test}: {CTL_VARIABLE} is not set under CI: start the real stack \
                 (python3 conformance/real-openstack/stack.py up) and export \
                 {CTL_VARIABLE}=\"python3 $PWD/conformance/real-openstack/stack.py\""
            );
            eprintln!("{test}: skipped, {CTL_VARIABLE} is not set (no real OpenStack)");
            return None;
        };
        let ctl: Vec<String> = ctl.split_whitespace().map(str::to_owned).collect();
        let out = std::process::Command::new(&ctl[0])
            .args(&ctl[1..])
            .arg("env")
            .output()
            .unwrap_or_else(|e| panic!("{CTL_VARIABLE}={ctl:?} does not run: {e}"));
        assert!(
            out.status.success(),
            "{ctl:?} env: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(Stack {
            ctl,
            env: parse_env(&String::from_utf8_lossy(&out.stdout)),
        })
    }

    /// One variable of the client environment.
    pub fn var(&self, key: &str) -> &str {
        self.env
            .get(key)
            .unwrap_or_else(|| panic!("stack.py env has no {key}"))
    }

    /// Holds the stack for one user at a time, across processes (the
    /// tests of several binaries, the benchmark): an exclusive lock on a
    /// file in its state directory, released when the hold is dropped.
    pub async fn hold(&self) -> Hold {
        let path = std::path::Path::new(self.var("INSTANCEHA_REAL_OPENSTACK_DIR")).join("lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let file = tokio::task::spawn_blocking(move || file.lock().map(|()| file))
            .await
            .expect("the lock task")
            .unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
        Hold { _file: file }
    }

    /// The nova-compute hosts, in order.
    pub fn computes(&self) -> Vec<String> {
        self.var("INSTANCEHA_REAL_OPENSTACK_COMPUTES")
            .split(',')
            .map(str::to_owned)
            .collect()
    }

    /// SIGKILL to `process` (e.g. `nova-compute-1`, `nova-api`, `keystone`).
    pub async fn kill(&self, process: &str) {
        self.control("kill", process).await;
    }

    /// SIGTERM to `process`, waiting for it to end.
    pub async fn stop(&self, process: &str) {
        self.control("stop", process).await;
    }

    /// Starts `process` again and waits for its port, if it has one.
    pub async fn start(&self, process: &str) {
        self.control("start", process).await;
    }

    async fn control(&self, verb: &str, process: &str) {
        let started = Instant::now();
        let out = tokio::process::Command::new(&self.ctl[0])
            .args(&self.ctl[1..])
            .args([verb, process])
            .output()
            .await
            .unwrap_or_else(|e| panic!("stack.py {verb} {process}: {e}"));
        assert!(
            out.status.success(),
            "stack.py {verb} {process}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!(
            "stack: {verb} {process} took {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }

    /// The names of the processes that are not running.
    pub async fn stopped(&self) -> Vec<String> {
        let out = tokio::process::Command::new(&self.ctl[0])
            .args(&self.ctl[1..])
            .arg("status")
            .output()
            .await
            .expect("stack.py status");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.trim_end().ends_with("stopped"))
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect()
    }
}

/// The stack held (see [`Stack::hold`]).
pub struct Hold {
    _file: std::fs::File,
}

/// `export KEY='value'` lines.
fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.trim_matches('\'').to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse_env;

    #[test]
    fn env_lines_are_read() {
        let env =
            parse_env("export OS_AUTH_URL='http://127.0.0.1:25000/v3'\nexport A='b c'\nnoise\n");
        assert_eq!(env["OS_AUTH_URL"], "http://127.0.0.1:25000/v3");
        assert_eq!(env["A"], "b c");
        assert_eq!(env.len(), 2);
    }
}
