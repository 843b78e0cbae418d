//! A raw file of an incident written in pieces (a ring copy streamed as the ring is read): [`PendingFile`].

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::dirs::dir_size;
use crate::durable::{self, fsync_dir};
use crate::error::{Error, Result};
use crate::layout::{validate_file_name, MAX_INCIDENT_BYTES};

/// A raw file of an incident written in pieces: a temp file in the incident's directory (removed if dropped
/// uncommitted), made durable and renamed to its name by [`PendingFile::commit`] — which also checks the
/// incident's byte budget, since only then is its size known.
#[derive(Debug)]
pub struct PendingFile {
    file: File,
    dir: PathBuf,
    temp_path: PathBuf,
}

impl PendingFile {
    /// A new temp file in `dir` (mode `mode`), not yet visible under any name.
    pub fn create(dir: &Path, mode: u32) -> Result<PendingFile> {
        let temp_path = dir.join(durable::temp_name("pending"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp_path)
            .map_err(Error::io("create", &temp_path))?;
        Ok(PendingFile {
            file,
            dir: dir.to_path_buf(),
            temp_path,
        })
    }

    /// The file, to write at any offset (`FileExt::write_all_at`, `set_len`).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Its length so far.
    pub fn len(&self) -> u64 {
        self.file.metadata().map_or(0, |meta| meta.len())
    }

    /// Whether nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// fsync it, rename it to `name` (a plain file name of the incident: no directory), fsync the directory.
    /// Refused, and removed, when it would take the incident over [`MAX_INCIDENT_BYTES`].
    pub fn commit(self, name: &str) -> Result<()> {
        let (parents, file_name) = validate_file_name(name)?;
        if !parents.is_empty() {
            return Err(Error::InvalidName {
                name: name.to_string(),
                why: "a pending file is committed directly in its incident",
            });
        }
        let size = self.len();
        let replaced = fs::symlink_metadata(self.dir.join(file_name))
            .ok()
            .filter(|meta| meta.is_file())
            .map_or(0, |meta| meta.len());
        // dir_size counts this temp file already.
        let total = dir_size(&self.dir).saturating_sub(replaced);
        if total > MAX_INCIDENT_BYTES {
            return Err(Error::OverBudget {
                id: self
                    .dir
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                name: name.to_string(),
                size,
                total,
                limit: MAX_INCIDENT_BYTES,
            });
        }
        self.file
            .sync_all()
            .map_err(Error::io("fsync", &self.temp_path))?;
        let target = self.dir.join(file_name);
        fs::rename(&self.temp_path, &target).map_err(Error::io("rename", &target))?;
        fsync_dir(&self.dir)
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        // After a commit the temp name is gone and this fails harmlessly.
        let _ = fs::remove_file(&self.temp_path);
    }
}
