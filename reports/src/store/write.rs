//! Writing an incident: [`Store::create`] (assembled in a temp directory, renamed into place with
//! `RENAME_NOREPLACE`), [`Store::reopen`], the live writer's [`IncidentHandle`] (incident.json and report.md as one
//! commit) and the raw files beside them ([`IncidentFiles`], bounded by [`MAX_INCIDENT_BYTES`]).

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use capture::error::Rejection;
use capture::untrusted::{self, Limits};
use chrono::Utc;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use super::dirs::dir_size;
use super::pending::PendingFile;
use super::{Modes, Store};
use crate::durable::{
    self, commit_together, create_dir_mode, fsync_dir, stage_bytes, write_atomic_mode,
};
use crate::error::{Error, Result};
use crate::layout::{
    validate_file_name, validate_id, INCIDENT_FILE, MARKER_FILE, MAX_INCIDENT_BYTES, REPORT_FILE,
};
use crate::model::{incident_id, Incident, Timestamp};

impl Store {
    /// Start a new incident: its directory appears atomically with a first `incident.json` (complete=false)
    /// that is durable when this returns. The id is `incident.id` if set and free, else `<UTC time>-<host>-<pid>`
    /// (with `-2`, `-3` … on a clash). Retention runs afterwards; the new incident is protected.
    pub fn create(&self, incident: &Incident) -> Result<IncidentHandle> {
        self.require_writable()?;
        let base_id = if incident.id.is_empty() {
            let wall = incident.detected_at.wall.unwrap_or_else(Utc::now);
            incident_id(wall, &incident.host.hostname, incident.process.pid)
        } else {
            validate_id(&incident.id)?;
            incident.id.clone()
        };

        let temp_dir = self.dir.join(durable::temp_name(&base_id));
        create_dir_mode(&temp_dir, self.modes.dir)?;
        let built = self.build_new_incident(&temp_dir, &base_id, incident);
        let (lock, id) = match built {
            Ok(v) => v,
            Err(err) => {
                let _ = fs::remove_dir_all(&temp_dir);
                return Err(err);
            }
        };
        let handle = IncidentHandle {
            path: self.dir.join(&id),
            id,
            store: self.clone(),
            modes: self.modes,
            finished: false,
            lock: Some(lock),
        };
        // Best effort: a full disk must not prevent the capture that is under way.
        let _ = self.enforce_retention();
        Ok(handle)
    }

    fn build_new_incident(
        &self,
        temp_dir: &Path,
        base_id: &str,
        incident: &Incident,
    ) -> Result<(Flock<File>, String)> {
        let marker_path = temp_dir.join(MARKER_FILE);
        let marker = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(self.modes.file)
            .open(&marker_path)
            .map_err(Error::io("create", &marker_path))?;
        let lock = Flock::lock(marker, FlockArg::LockExclusiveNonblock)
            .map_err(|(_, errno)| Error::errno("flock", &marker_path)(errno))?;

        for attempt in 1..1000u32 {
            let id = if attempt == 1 {
                base_id.to_string()
            } else {
                format!("{base_id}-{attempt}")
            };
            let target = self.dir.join(&id);
            // Skip taken names cheaply; RENAME_NOREPLACE below settles a race with another writer.
            if fs::symlink_metadata(&target).is_ok() {
                continue;
            }
            write_incident_json(temp_dir, &id, incident, false, self.modes.file)?;
            match nix::fcntl::renameat2(
                nix::fcntl::AT_FDCWD,
                temp_dir,
                nix::fcntl::AT_FDCWD,
                &target,
                nix::fcntl::RenameFlags::RENAME_NOREPLACE,
            ) {
                Ok(()) => {
                    fsync_dir(&self.dir)?;
                    return Ok((lock, id));
                }
                Err(Errno::EEXIST) | Err(Errno::ENOTEMPTY) => continue,
                Err(errno) => return Err(Error::errno("rename", &target)(errno)),
            }
        }
        Err(Error::io("create incident", self.dir.join(base_id))(
            std::io::Error::other("999 incidents with this id already exist"),
        ))
    }

    /// Take up incident `id` again (a watcher adopting an episode an earlier one left): its `.in-progress`
    /// marker is created or taken over and flock-ed, as [`Store::create`] does for a new incident. Fails when
    /// a live writer holds the marker (two watchers never write one incident). `complete`: the incident's
    /// capture was finished (later updates keep complete=true and re-render report.md).
    pub fn reopen(&self, id: &str, complete: bool) -> Result<IncidentHandle> {
        self.require_writable()?;
        let path = self.path_of(id)?;
        let marker_path = path.join(MARKER_FILE);
        let marker = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(self.modes.file)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(&marker_path)
            .map_err(Error::io("open", &marker_path))?;
        if !marker.metadata().is_ok_and(|m| m.is_file()) {
            return Err(Error::Untrusted {
                path: marker_path,
                why: Rejection::NotRegular("not a regular file"),
            });
        }
        let lock = Flock::lock(marker, FlockArg::LockExclusiveNonblock)
            .map_err(|(_, errno)| Error::errno("flock", &marker_path)(errno))?;
        fsync_dir(&path)?;
        Ok(IncidentHandle {
            id: id.to_string(),
            store: self.clone(),
            path,
            modes: self.modes,
            finished: complete,
            lock: Some(lock),
        })
    }
}

/// A live incident being written. Dropping it removes the `.in-progress` marker (the incident may then be removed
/// by retention); a writer that dies leaves the marker, which its released flock marks as stale.
#[derive(Debug)]
pub struct IncidentHandle {
    id: String,
    store: Store,
    path: PathBuf,
    modes: Modes,
    finished: bool,
    lock: Option<Flock<File>>,
}

impl IncidentHandle {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The incident's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replace incident.json with a richer version (still complete=false until [`IncidentHandle::finish`]; after
    /// finish, report.md is re-rendered first and the file stays complete=true).
    pub fn update(&self, incident: &Incident) -> Result<()> {
        self.commit(incident, self.finished)
    }

    /// Write a raw file inside the incident (`ring.bin`, `samples/0001-stack.txt` …), atomically. Refused when it
    /// would take the incident over [`MAX_INCIDENT_BYTES`].
    pub fn write_file(&self, name: &str, bytes: &[u8]) -> Result<()> {
        self.files().write_file(name, bytes)
    }

    /// A raw file of the incident written in pieces (a ring copy streamed as the ring is read), named when it is
    /// committed ([`PendingFile::commit`]).
    pub fn pending_file(&self) -> Result<PendingFile> {
        self.files().pending_file()
    }

    /// The incident's raw files, for a writer that must not hold the handle (a capture worker writes the
    /// ring copies while the watch loop keeps the handle and writes incident.json).
    pub fn files(&self) -> IncidentFiles {
        IncidentFiles {
            id: self.id.clone(),
            store: self.store.clone(),
            path: self.path.clone(),
            modes: self.modes,
        }
    }

    /// Write incident.json with complete=true and report.md of the same state, as one commit: on failure (a full
    /// disk) the previous pair stays and no temp file is left. Call it again to retry. Retention then runs again,
    /// now that the incident's size is known (this incident stays protected while the handle lives).
    pub fn finish(&mut self, incident: &Incident) -> Result<()> {
        self.commit(incident, true)?;
        self.finished = true;
        let _ = self.store.enforce_retention();
        Ok(())
    }

    /// incident.json, plus report.md once the capture is complete, rendered from one state and renamed together.
    fn commit(&self, incident: &Incident, complete: bool) -> Result<()> {
        if let Some(err) = self.store.dropped_error(&self.id) {
            return Err(err);
        }
        let state = stored_state(&self.id, incident, complete);
        let json = serde_json::to_vec_pretty(&state).map_err(Error::Serialize)?;
        // incident.json is renamed last: it is the commit point. A writer killed between the renames
        // leaves a new report.md beside the previous, partial incident.json, which the next open of the
        // store removes (`reconcile_report`); never a complete incident.json without its report.md.
        let mut staged = Vec::with_capacity(2);
        if complete {
            let markdown = crate::render::markdown(&state);
            staged.push(stage_bytes(
                &self.path,
                REPORT_FILE,
                markdown.as_bytes(),
                self.modes.file,
            )?);
        }
        staged.push(stage_bytes(
            &self.path,
            INCIDENT_FILE,
            &json,
            self.modes.file,
        )?);
        commit_together(&self.path, staged)
    }
}

impl Drop for IncidentHandle {
    fn drop(&mut self) {
        if let Some(lock) = self.lock.take() {
            // Remove the marker while still holding its lock, so nobody sees it unlocked and judges us dead.
            let _ = fs::remove_file(self.path.join(MARKER_FILE));
            let _ = fsync_dir(&self.path);
            drop(lock);
        }
    }
}

/// The raw files of one incident (beside incident.json), written atomically. Never incident.json or
/// report.md: those are the [`IncidentHandle`]'s alone, so one writer commits the incident's state.
#[derive(Debug, Clone)]
pub struct IncidentFiles {
    id: String,
    store: Store,
    path: PathBuf,
    modes: Modes,
}

impl IncidentFiles {
    /// The incident's directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Write a raw file inside the incident (`ring.bin`, `samples/0001-stack.txt` …), atomically. Refused when it
    /// would take the incident over [`MAX_INCIDENT_BYTES`], and once the store's quota removed the incident.
    pub fn write_file(&self, name: &str, bytes: &[u8]) -> Result<()> {
        if name == INCIDENT_FILE || name == REPORT_FILE {
            return Err(Error::InvalidName {
                name: name.to_string(),
                why: "written by the incident's handle only",
            });
        }
        if let Some(err) = self.store.dropped_error(&self.id) {
            return Err(err);
        }
        let (parents, file) = validate_file_name(name)?;
        self.check_budget(name, bytes.len() as u64)?;
        let mut dir = self.path.clone();
        for parent in parents {
            let next = dir.join(parent);
            match create_dir_mode(&next, self.modes.dir) {
                Ok(()) => fsync_dir(&dir)?,
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(err) => return Err(err),
            }
            dir = next;
        }
        write_atomic_mode(&dir, file, bytes, self.modes.file)
    }

    /// A raw file of the incident written in pieces (a ring copy streamed as the ring is read), named when it is
    /// committed ([`PendingFile::commit`]).
    pub fn pending_file(&self) -> Result<PendingFile> {
        if let Some(err) = self.store.dropped_error(&self.id) {
            return Err(err);
        }
        PendingFile::create(&self.path, self.modes.file)
    }

    /// Refuses `size` more bytes under `name` (replacing a file of that name) when the incident would go over
    /// [`MAX_INCIDENT_BYTES`].
    fn check_budget(&self, name: &str, size: u64) -> Result<()> {
        let replaced = fs::symlink_metadata(self.path.join(name))
            .ok()
            .filter(|meta| meta.is_file())
            .map_or(0, |meta| meta.len());
        let total = dir_size(&self.path)
            .saturating_sub(replaced)
            .saturating_add(size);
        if total > MAX_INCIDENT_BYTES {
            return Err(Error::OverBudget {
                id: self.id.clone(),
                name: name.to_string(),
                size,
                total,
                limit: MAX_INCIDENT_BYTES,
            });
        }
        Ok(())
    }

    /// A small file of the incident (at most `max` bytes), or None when it is absent, not a regular file
    /// or larger.
    pub fn read_small(&self, name: &str, max: u64) -> Option<Vec<u8>> {
        let (parents, file) = validate_file_name(name).ok()?;
        let mut path = self.path.clone();
        for parent in parents {
            path.push(parent);
        }
        path.push(file);
        untrusted::open(&path, Limits::max_len(max))
            .ok()?
            .read_all()
            .ok()
    }
}

fn write_incident_json(
    dir: &Path,
    id: &str,
    incident: &Incident,
    complete: bool,
    mode: u32,
) -> Result<()> {
    let json = serde_json::to_vec_pretty(&stored_state(id, incident, complete))
        .map_err(Error::Serialize)?;
    write_atomic_mode(dir, INCIDENT_FILE, &json, mode)
}

/// The incident exactly as stored: redacted, with its id, completeness, write time, writer and verdict.
fn stored_state(id: &str, incident: &Incident, complete: bool) -> Incident {
    let mut copy = incident.redacted();
    copy.id = id.to_string();
    copy.complete = complete;
    copy.updated_at = Timestamp::now();
    if copy.written_by.is_empty() {
        copy.written_by = format!("wedge-capture reports {}", env!("CARGO_PKG_VERSION"));
    }
    // A default for callers that bring no verdict (tests, fixtures). The agent always brings one: it computes
    // the verdict once per write, in one place (agent/src/watch/incident/writes.rs, set_verdict), so this is not a
    // second computation of it.
    if copy.verdict.is_empty() {
        copy.verdict = crate::verdict::verdict(&copy);
    }
    copy
}
