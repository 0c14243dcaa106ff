//! Private files: the API's SQLite database (and its `-wal` and `-shm`
//! files, which SQLite creates with the database's mode), the agent's
//! spool and heartbeat state, the link token: created 0600, in
//! directories created 0700, whatever the umask (the modes are set
//! explicitly after creation, as the umask can only take bits away). A
//! directory that already exists is left as it is (it may be `/tmp`);
//! an existing file is narrowed to 0600.

use std::fs::{DirBuilder, OpenOptions, Permissions};
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

/// The mode of a private file.
pub const FILE_MODE: u32 = 0o600;
/// The mode of a directory made for private files.
pub const DIR_MODE: u32 = 0o700;

/// Makes `dir` and its missing parents, each 0700.
pub fn create_dir(dir: &Path) -> io::Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dir(parent)?;
    }
    match DirBuilder::new().mode(DIR_MODE).create(dir) {
        Ok(()) => std::fs::set_permissions(dir, Permissions::from_mode(DIR_MODE)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Makes sure `path` exists as a private file: its missing directories
/// made 0700, the file created empty if missing, and 0600 either way.
pub fn ensure_file(path: &Path) -> io::Result<()> {
    if let Some(parent) = path.parent() {
        create_dir(parent)?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(FILE_MODE)
        .open(path)?;
    std::fs::set_permissions(path, Permissions::from_mode(FILE_MODE))
}

/// Writes `content` to `path` as a private file, only if no file is there
/// yet: written to a temporary file beside it, then linked into place
/// (which fails if another process got there first), so that nobody ever
/// reads it half-written. True if this call wrote it.
pub fn create_new(path: &Path, content: &[u8]) -> io::Result<bool> {
    let dir = path.parent().unwrap_or(Path::new("."));
    create_dir(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&temporary)?;
        file.set_permissions(Permissions::from_mode(FILE_MODE))?;
        file.write_all(content)?;
        file.sync_all()
    })();
    let linked = written.and_then(|()| std::fs::hard_link(&temporary, path));
    let _ = std::fs::remove_file(&temporary);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// Writes `content` to `path` as a private file, replacing what is there
/// at once (a temporary file beside it, renamed into place): a reader sees
/// the old content or the new, never half of either.
pub fn replace(path: &Path, content: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    create_dir(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = dir.join(format!(".{name}.{}.new", std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(FILE_MODE)
            .open(&temporary)?;
        file.set_permissions(Permissions::from_mode(FILE_MODE))?;
        file.write_all(content)
    })();
    match written.and_then(|()| std::fs::rename(&temporary, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&temporary);
            Err(e)
        }
    }
}

/// The permission bits of `path`.
pub fn mode_of(path: &Path) -> io::Result<u32> {
    Ok(std::fs::metadata(path)?.permissions().mode() & 0o7777)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_0600_in_directories_made_0700() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("a/b/state.db");
        ensure_file(&file).unwrap();
        assert_eq!(mode_of(&file).unwrap(), 0o600);
        assert_eq!(mode_of(&root.path().join("a")).unwrap(), 0o700);
        assert_eq!(mode_of(&root.path().join("a/b")).unwrap(), 0o700);
        // An existing file is narrowed; its content kept.
        let open = root.path().join("open");
        std::fs::write(&open, "kept").unwrap();
        std::fs::set_permissions(&open, Permissions::from_mode(0o644)).unwrap();
        ensure_file(&open).unwrap();
        assert_eq!(mode_of(&open).unwrap(), 0o600);
        assert_eq!(std::fs::read_to_string(&open).unwrap(), "kept");
        // An existing directory is left alone.
        std::fs::set_permissions(root.path(), Permissions::from_mode(0o755)).unwrap();
        ensure_file(&root.path().join("x")).unwrap();
        assert_eq!(mode_of(root.path()).unwrap(), 0o755);
    }

    #[test]
    fn a_new_file_is_written_once() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("state/token");
        assert!(create_new(&path, b"first").unwrap());
        assert!(!create_new(&path, b"second").unwrap());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "first");
        assert_eq!(mode_of(&path).unwrap(), 0o600);
        assert_eq!(mode_of(&root.path().join("state")).unwrap(), 0o700);
        let left: Vec<_> = std::fs::read_dir(root.path().join("state"))
            .unwrap()
            .collect();
        assert_eq!(left.len(), 1, "no temporary file left behind");
        replace(&path, b"third").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "third");
        assert_eq!(mode_of(&path).unwrap(), 0o600);
    }
}
