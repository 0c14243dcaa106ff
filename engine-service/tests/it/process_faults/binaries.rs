//! The binaries the process-fault tests run (see the parent module's
//! "Where the binaries come from").

use super::*;

pub(super) struct Binaries {
    pub(super) engine: PathBuf,
    pub(super) api: PathBuf,
    pub(super) sim: PathBuf,
}

pub(super) fn binaries() -> &'static Binaries {
    static BINARIES: OnceLock<Result<Binaries, String>> = OnceLock::new();
    match BINARIES.get_or_init(locate) {
        Ok(binaries) => binaries,
        Err(e) => panic!("{e}"),
    }
}

pub(super) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_owned()
}

pub(super) fn locate() -> Result<Binaries, String> {
    let engine = PathBuf::from(env!("CARGO_BIN_EXE_instanceha-engine"));
    let exe = |dir: &Path, name: &str| dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if let Some(dir) = std::env::var_os("INSTANCEHA_TEST_BIN_DIR") {
        let dir = PathBuf::from(dir);
        let binaries = Binaries {
            engine,
            api: exe(&dir, "instanceha-api"),
            sim: exe(&dir, "openstack-sim"),
        };
        for path in [&binaries.api, &binaries.sim] {
            if !path.is_file() {
                return Err(format!(
                    "INSTANCEHA_TEST_BIN_DIR: no {} (build it with `cargo build -p instanceha-api -p openstack-sim`)",
                    path.display()
                ));
            }
        }
        return Ok(binaries);
    }
    let profile_dir = engine
        .parent()
        .ok_or("the engine binary has no directory")?
        .to_owned();
    let binaries = Binaries {
        api: exe(&profile_dir, "instanceha-api"),
        sim: exe(&profile_dir, "openstack-sim"),
        engine,
    };
    let sources = newest_source();
    let fresh = |path: &Path| {
        std::fs::metadata(path)
            .and_then(|m| m.modified())
            .is_ok_and(|built| built >= sources)
    };
    if fresh(&binaries.api) && fresh(&binaries.sim) {
        return Ok(binaries);
    }
    build(&profile_dir)?;
    Ok(binaries)
}

/// The newest modification time of what `instanceha-api` and
/// `openstack-sim` are built from.
pub(super) fn newest_source() -> SystemTime {
    pub(super) fn walk(path: &Path, newest: &mut SystemTime) {
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(path) {
                for entry in entries.flatten() {
                    walk(&entry.path(), newest);
                }
            }
        } else if let Ok(modified) = meta.modified() {
            *newest = (*newest).max(modified);
        }
    }
    let root = workspace();
    let mut newest = SystemTime::UNIX_EPOCH;
    walk(&root.join("Cargo.toml"), &mut newest);
    walk(&root.join("Cargo.lock"), &mut newest);
    for krate in [
        "api-service",
        "openstack-sim",
        "migrations",
        "proto",
        "telemetry",
        "openstack-client",
    ] {
        for part in ["src", "build.rs", "Cargo.toml", "proto"] {
            walk(&root.join(krate).join(part), &mut newest);
        }
    }
    newest
}

/// `cargo build -p instanceha-api -p openstack-sim --bins` into the target
/// directory and profile `profile_dir` belongs to.
pub(super) fn build(profile_dir: &Path) -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("no profile directory")?
        .to_owned();
    let above = profile_dir.parent().ok_or("no target directory")?;
    // target/<profile> or target/<triple>/<profile>: the target directory
    // is the one Cargo marks with CACHEDIR.TAG.
    let (target_dir, triple) = if above.join("CACHEDIR.TAG").is_file() {
        (above.to_owned(), None)
    } else {
        match above.parent() {
            Some(root) if root.join("CACHEDIR.TAG").is_file() => (
                root.to_owned(),
                above.file_name().map(|n| n.to_string_lossy().into_owned()),
            ),
            _ => (above.to_owned(), None),
        }
    };
    let log_path = std::env::temp_dir().join(format!(
        "instanceha-process-tests-build-{}.log",
        std::process::id()
    ));
    let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
    let mut command = Command::new(&cargo);
    command
        .current_dir(workspace())
        .args([
            "build",
            "-p",
            "instanceha-api",
            "-p",
            "openstack-sim",
            "--bins",
        ])
        .arg("--target-dir")
        .arg(&target_dir)
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    match profile.as_str() {
        "debug" => {}
        "release" => {
            command.arg("--release");
        }
        other => {
            command.args(["--profile", other]);
        }
    }
    if let Some(triple) = triple {
        command.args(["--target", &triple]);
    }
    eprintln!(
        "process tests: building instanceha-api and openstack-sim (missing or older than their sources) into {}; log {}",
        target_dir.display(),
        log_path.display()
    );
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", Path::new(&cargo).display()))?;
    let deadline = Instant::now() + Duration::from_secs(20 * 60);
    loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(status) if status.success() => return Ok(()),
            Some(status) => {
                return Err(format!(
                    "building instanceha-api and openstack-sim failed ({status}):\n{}",
                    tail(&log_path, 40)
                ));
            }
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                return Err(format!(
                    "building instanceha-api and openstack-sim took over 20 minutes:\n{}",
                    tail(&log_path, 40)
                ));
            }
            None => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

pub(super) fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
