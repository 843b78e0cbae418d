//! Crash-safe file writes: temp file → fsync → rename → fsync directory.
//!
//! A reader (or a crash at any instant) sees either the old file or the new one, never a torn one. Temporary
//! files live in the destination directory (so `rename` stays within one filesystem) under a name that starts
//! with [`TEMP_PREFIX`]; they are never visible as a real file name. A writer killed mid-write leaves at most a
//! temp file behind, removed by [`remove_stale_temps`] (the store calls it for incidents whose writer is dead).
//! Files that must agree (an incident's `incident.json` and `report.md`) are staged first ([`stage_bytes`]: temp +
//! fsync, where a full disk fails) and then renamed together ([`commit_together`]), rolled back as one.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Names starting with this are temporary files or directories: never an incident's real content.
pub const TEMP_PREFIX: &str = ".tmp-";
/// Default mode of files the store writes (set explicitly, independent of the umask).
pub const DEFAULT_FILE_MODE: u32 = 0o600;
/// Default mode of directories the store creates.
pub const DEFAULT_DIR_MODE: u32 = 0o700;

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// True for names the store uses for temporary files and directories.
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with(TEMP_PREFIX)
}

/// A name unique within this machine for a temp file next to `final_name`.
pub(crate) fn temp_name(final_name: &str) -> String {
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    // Keep the final name's readable prefix for debugging, bounded so the whole stays under NAME_MAX.
    let stem: String = final_name.chars().take(64).collect();
    format!("{TEMP_PREFIX}{stem}-{}-{n}", std::process::id())
}

/// Write `bytes` to `dir/name` atomically and durably with mode 0600.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    write_atomic_mode(dir, name, bytes, DEFAULT_FILE_MODE)
}

/// Write `bytes` to `dir/name` atomically and durably with an explicit file mode.
pub fn write_atomic_mode(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> Result<()> {
    let mut file = AtomicFile::create(dir, name, mode)?;
    file.write_all(bytes)
        .map_err(Error::io("write", file.temp_path.clone()))?;
    file.commit()
}

/// Write `bytes` to a durable temp file that [`commit_together`] will rename to `dir/name`.
pub fn stage_bytes(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> Result<Staged> {
    let mut file = AtomicFile::create(dir, name, mode)?;
    file.write_all(bytes)
        .map_err(Error::io("write", file.temp_path.clone()))?;
    file.stage()
}

/// A file being written under a temp name; [`AtomicFile::commit`] makes it appear under its real name.
/// Dropped without commit, the temp file is removed.
pub struct AtomicFile {
    file: Option<File>,
    dir: PathBuf,
    temp_path: PathBuf,
    final_path: PathBuf,
}

impl AtomicFile {
    /// Create a temp file in `dir` that will become `dir/name`.
    pub fn create(dir: &Path, name: &str, mode: u32) -> Result<AtomicFile> {
        let temp_path = dir.join(temp_name(name));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&temp_path)
            .map_err(Error::io("create", &temp_path))?;
        // The umask may have cleared bits of `mode`, or a sticky default ACL added some: set it exactly.
        if let Err(err) = file.set_permissions(fs::Permissions::from_mode(mode)) {
            let _ = fs::remove_file(&temp_path);
            return Err(Error::io("chmod", &temp_path)(err));
        }
        Ok(AtomicFile {
            file: Some(file),
            dir: dir.to_path_buf(),
            temp_path,
            final_path: dir.join(name),
        })
    }

    /// fsync the data, rename over the final name, fsync the directory. On failure the temp file is removed.
    pub fn commit(self) -> Result<()> {
        let dir = self.dir.clone();
        self.stage()?.rename_into_place()?;
        fsync_dir(&dir)
    }

    /// fsync the data and close the file: what is left is a rename, which needs no data blocks, so a full disk
    /// shows up here and not halfway through a [`commit_together`].
    pub fn stage(mut self) -> Result<Staged> {
        let file = self.file.take().expect("AtomicFile used after commit");
        let temp_path = std::mem::take(&mut self.temp_path);
        let staged = Staged {
            temp_path,
            final_path: std::mem::take(&mut self.final_path),
        };
        file.sync_all()
            .map_err(Error::io("fsync", &staged.temp_path))?;
        Ok(staged)
    }
}

/// A durable temp file waiting for its rename; dropped without [`Staged::rename_into_place`] it is removed.
#[derive(Debug)]
pub struct Staged {
    temp_path: PathBuf,
    final_path: PathBuf,
}

impl Staged {
    fn rename_into_place(mut self) -> Result<()> {
        fs::rename(&self.temp_path, &self.final_path)
            .map_err(Error::io("rename", &self.final_path))?;
        self.temp_path = PathBuf::new();
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.temp_path.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.temp_path);
        }
    }
}

/// Make several staged files of one directory appear as one change: each file is either all old or all new.
/// Before the first rename every file that is replaced is hard-linked to a backup name, so that a rename failing
/// halfway puts the earlier ones back; a file that did not exist before is unlinked on rollback. Then one directory
/// fsync. On any failure, temps and backups are removed and the previous files are in place (on a filesystem
/// without hard links, a rename failing halfway cannot be undone for the files it replaced).
pub fn commit_together(dir: &Path, staged: Vec<Staged>) -> Result<()> {
    struct Backup {
        backup: Option<PathBuf>,
        final_path: PathBuf,
        /// No earlier file: rolled back by unlinking the new one.
        was_absent: bool,
    }
    let mut backups: Vec<Backup> = Vec::with_capacity(staged.len());
    let remove_backups = |backups: &[Backup]| {
        for b in backups {
            if let Some(path) = &b.backup {
                let _ = fs::remove_file(path);
            }
        }
    };
    for file in &staged {
        let final_name = file
            .final_path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("file");
        let backup = dir.join(temp_name(&format!("old-{final_name}")));
        match fs::hard_link(&file.final_path, &backup) {
            Ok(()) => backups.push(Backup {
                backup: Some(backup),
                final_path: file.final_path.clone(),
                was_absent: false,
            }),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => backups.push(Backup {
                backup: None,
                final_path: file.final_path.clone(),
                was_absent: true,
            }),
            // Out of space: nothing renamed yet, the caller can retry once space is back.
            Err(err) if matches!(err.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) => {
                remove_backups(&backups);
                return Err(Error::io("link", &backup)(err));
            }
            // A filesystem without hard links (vfat, some FUSE): still staged first, only without the rollback
            // for this file should a later rename fail (renames over an existing name need no space).
            Err(_) => backups.push(Backup {
                backup: None,
                final_path: file.final_path.clone(),
                was_absent: false,
            }),
        }
    }
    let mut renamed = 0;
    let mut failure = None;
    for file in staged {
        match file.rename_into_place() {
            Ok(()) => renamed += 1,
            Err(err) => {
                failure = Some(err);
                break;
            }
        }
    }
    if let Some(err) = failure {
        for b in &backups[..renamed] {
            let _ = match &b.backup {
                Some(backup) => fs::rename(backup, &b.final_path),
                None if b.was_absent => fs::remove_file(&b.final_path),
                None => Ok(()),
            };
        }
        remove_backups(&backups);
        let _ = fsync_dir(dir);
        return Err(err);
    }
    remove_backups(&backups);
    fsync_dir(dir)
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.file.as_mut() {
            Some(file) => file.write(buf),
            None => Err(std::io::Error::other("AtomicFile already committed")),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self.file.as_mut() {
            Some(file) => file.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        // After `stage` the temp path moved into the `Staged`, which owns its removal.
        if !self.temp_path.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.temp_path);
        }
    }
}

/// fsync a directory so that renames and creations inside it are durable.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    let handle = File::open(dir).map_err(Error::io("open directory", dir))?;
    handle.sync_all().map_err(Error::io("fsync directory", dir))
}

/// Create one directory with exactly `mode` (not filtered by the umask). Fails if it exists.
pub fn create_dir_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .mode(mode)
        .create(path)
        .map_err(Error::io("mkdir", path))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(Error::io("chmod", path))
}

/// Remove leftover temp files (not directories) in `dir`; returns how many were removed.
/// Call only when no live writer uses `dir`.
pub fn remove_stale_temps(dir: &Path) -> Result<usize> {
    let mut removed = 0;
    let entries = fs::read_dir(dir).map_err(Error::io("read directory", dir))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_temp_name(name) {
            continue;
        }
        let is_file = entry.file_type().map(|t| t.is_file()).unwrap_or(false);
        if is_file && fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        write_atomic(dir.path(), "a.json", b"one").unwrap();
        write_atomic(dir.path(), "a.json", b"two").unwrap();
        assert_eq!(fs::read(dir.path().join("a.json")).unwrap(), b"two");
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("a.json")]);
    }

    #[test]
    fn modes_are_exact_whatever_the_umask() {
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: umask only changes this process's file-creation mask; it has no memory-safety effect.
        let old = unsafe { libc::umask(0o077) };
        write_atomic_mode(dir.path(), "f", b"x", 0o640).unwrap();
        create_dir_mode(&dir.path().join("d"), 0o750).unwrap();
        // SAFETY: as above, restoring the previous mask.
        unsafe { libc::umask(old) };
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&dir.path().join("f")), 0o640);
        assert_eq!(mode(&dir.path().join("d")), 0o750);
    }

    #[test]
    fn dropped_atomic_file_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut f = AtomicFile::create(dir.path(), "x", 0o600).unwrap();
            f.write_all(b"partial").unwrap();
        }
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn files_committed_together_all_change() {
        let dir = tempfile::tempdir().unwrap();
        write_atomic(dir.path(), "a", b"old-a").unwrap();
        let staged = vec![
            stage_bytes(dir.path(), "a", b"new-a", 0o600).unwrap(),
            stage_bytes(dir.path(), "b", b"new-b", 0o600).unwrap(),
        ];
        commit_together(dir.path(), staged).unwrap();
        assert_eq!(fs::read(dir.path().join("a")).unwrap(), b"new-a");
        assert_eq!(fs::read(dir.path().join("b")).unwrap(), b"new-b");
        assert_eq!(names(dir.path()), ["a", "b"]);
    }

    /// The third rename fails (its temp file vanished): the first file is put back, a file that did not exist
    /// before is gone again, and no temp or backup is left.
    #[test]
    fn a_rename_failing_halfway_rolls_back_the_earlier_ones() {
        let dir = tempfile::tempdir().unwrap();
        write_atomic(dir.path(), "a", b"old-a").unwrap();
        let staged = vec![
            stage_bytes(dir.path(), "a", b"new-a", 0o600).unwrap(),
            stage_bytes(dir.path(), "b", b"new-b", 0o600).unwrap(),
            stage_bytes(dir.path(), "c", b"new-c", 0o600).unwrap(),
        ];
        fs::remove_file(&staged[2].temp_path).unwrap();
        let err = commit_together(dir.path(), staged).unwrap_err();
        assert!(err.to_string().starts_with("rename"), "{err}");
        assert_eq!(fs::read(dir.path().join("a")).unwrap(), b"old-a");
        assert_eq!(names(dir.path()), ["a"]);
    }

    /// A name that cannot be replaced (a directory: no hard link to it, no rename over it) leaves the earlier
    /// files as they were.
    #[test]
    fn a_file_that_cannot_be_replaced_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        write_atomic(dir.path(), "a", b"old-a").unwrap();
        fs::create_dir(dir.path().join("c")).unwrap();
        let staged = vec![
            stage_bytes(dir.path(), "a", b"new-a", 0o600).unwrap(),
            stage_bytes(dir.path(), "c", b"new-c", 0o600).unwrap(),
        ];
        assert!(commit_together(dir.path(), staged).is_err());
        assert_eq!(fs::read(dir.path().join("a")).unwrap(), b"old-a");
        assert_eq!(names(dir.path()), ["a", "c"]);
    }

    #[test]
    fn a_failed_commit_removes_its_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("taken")).unwrap();
        fs::write(dir.path().join("taken/keep"), b"x").unwrap();
        assert!(write_atomic(dir.path(), "taken", b"data").is_err());
        assert_eq!(names(dir.path()), ["taken"]);
    }

    #[test]
    fn stale_temps_are_removed_and_real_files_kept() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(".tmp-incident.json-1-2"), b"torn").unwrap();
        fs::write(dir.path().join("incident.json"), b"{}").unwrap();
        assert_eq!(remove_stale_temps(dir.path()).unwrap(), 1);
        assert!(dir.path().join("incident.json").exists());
    }
}
