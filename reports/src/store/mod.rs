//! The durable incident store: one directory per incident under the output directory (the layout, file names and
//! bounds: [`crate::layout`]).
//!
//! Bounds: the raw files of one incident (everything but incident.json and report.md) are refused once they would
//! take it over [`crate::layout::MAX_INCIDENT_BYTES`] ([`Error::OverBudget`]); the store's total is held to its
//! quota by retention ([`crate::retention`], rule 5), young wedges included.
//!
//! Every file is written by [`crate::durable`] (temp → fsync → rename → fsync dir). A new incident is assembled in a
//! temp directory with its first `incident.json` and marker, then renamed into place with `RENAME_NOREPLACE`: an
//! incident directory is never visible without a parseable `incident.json`. A writer killed at any instant leaves
//! either no incident or a parseable partial one, plus temp files that [`Store::open`] removes once the flock shows
//! the writer is dead.
//!
//! `incident.json` and `report.md` are one commit ([`crate::durable::commit_together`]): both are staged (temp +
//! fsync, where a full disk fails) before either is renamed, so they never disagree about completeness. Everything
//! read back (listing, loading, bundling) goes through [`capture::untrusted`]: no FIFO, no symlink, bounded sizes;
//! an incident directory that is itself a symlink is refused.
//!
//! Map, one job per file:
//! - this file: [`Store`] (open, list, find, load, bundle);
//! - [`write`]: creating and reopening an incident, its [`write::IncidentHandle`] and [`write::IncidentFiles`];
//! - [`pending`]: a raw file written in pieces ([`pending::PendingFile`]);
//! - [`read`]: incident.json read back, whole, as bytes or as its head;
//! - [`removal`]: retention carried out on the store, and `dropped.json`;
//! - `recovery.rs`: what dead writers left, removed at open; `dirs.rs`: markers, sizes, free space.

mod dirs;
pub mod pending;
pub mod read;
mod recovery;
pub mod removal;
pub mod write;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use capture::error::Rejection;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use dirs::{create_dir_all_mode, dir_size, marker_state, Marker};
use read::{read_incident, read_incident_head, read_json, IncidentHead, SummaryFields};

use crate::bundle::{BundleOptions, Bundled};
use crate::durable;
use crate::error::{Error, Result};
use crate::layout::{validate_id, INCIDENT_FILE};
use crate::model::Incident;
use crate::retention::{Removal, Retention};

/// Modes of what the store creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modes {
    pub file: u32,
    pub dir: u32,
}

impl Default for Modes {
    fn default() -> Self {
        Modes {
            file: durable::DEFAULT_FILE_MODE,
            dir: durable::DEFAULT_DIR_MODE,
        }
    }
}

/// An incident directory.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    retention: Retention,
    modes: Modes,
    writable: bool,
    removal_log: RemovalLog,
    /// What retention needs from each incident.json, which never changes over an incident's life: parsing every
    /// file at every create and finish would cost a signal storm dearly.
    retention_facts: Arc<std::sync::Mutex<HashMap<(String, u64), RetentionFacts>>>,
    /// Incidents the quota removed while a writer of this process held them: id → why (their handles' next
    /// write fails with [`Error::Dropped`]).
    dropped: Arc<std::sync::Mutex<HashMap<String, String>>>,
}

#[derive(Debug, Clone)]
struct RetentionFacts {
    on_demand: bool,
    detected: Option<SystemTime>,
    tree: String,
}

/// Where retention reports each removal (see [`Store::log_removals`]).
#[derive(Clone, Default)]
struct RemovalLog(Option<Arc<RemovalFn>>);

type RemovalFn = dyn Fn(&Removal) + Send + Sync;

impl std::fmt::Debug for RemovalLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "RemovalLog(set)"
        } else {
            "RemovalLog(none)"
        })
    }
}

/// One line of `store.list()`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IncidentSummary {
    pub id: String,
    pub path: PathBuf,
    pub detected_at: Option<DateTime<Utc>>,
    pub pid: i32,
    pub hostname: String,
    pub verdict: String,
    pub complete: bool,
    /// A live writer holds the marker.
    pub in_progress: bool,
    pub bytes: u64,
    /// Why incident.json could not be read, when it could not.
    pub error: Option<String>,
}

/// What `enforce_retention` and `open` cleaned up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cleanup {
    /// Incidents retention removed, oldest first, each with the limit that removed it.
    pub removed: Vec<Removal>,
    pub removed_temp_files: usize,
}

impl Store {
    /// Open (creating it with mode 0700 if missing) a store for writing, and clean up after dead writers.
    pub fn open(dir: impl Into<PathBuf>, retention: Retention) -> Result<Store> {
        Store::open_with_modes(dir, retention, Modes::default())
    }

    /// [`Store::open`] with explicit file and directory modes.
    pub fn open_with_modes(
        dir: impl Into<PathBuf>,
        retention: Retention,
        modes: Modes,
    ) -> Result<Store> {
        let dir = dir.into();
        create_dir_all_mode(&dir, modes.dir)?;
        let store = Store {
            dir,
            retention,
            modes,
            writable: true,
            removal_log: RemovalLog::default(),
            retention_facts: Arc::default(),
            dropped: Arc::default(),
        };
        store.clean_dead_writers()?;
        Ok(store)
    }

    /// Open an existing store to read it: nothing is created, cleaned or removed.
    pub fn open_read_only(dir: impl Into<PathBuf>) -> Result<Store> {
        let dir = dir.into();
        match fs::metadata(&dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(Error::io("open store", &dir)(std::io::Error::other(
                    "not a directory",
                )));
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NoStore { dir })
            }
            Err(err) => return Err(Error::io("open store", &dir)(err)),
        }
        Ok(Store {
            dir,
            retention: Retention::UNLIMITED,
            modes: Modes::default(),
            writable: false,
            removal_log: RemovalLog::default(),
            retention_facts: Arc::default(),
            dropped: Arc::default(),
        })
    }

    /// Call `log` with every incident retention removes (also those removed inside [`Store::create`] and
    /// [`write::IncidentHandle::finish`], whose results are not returned): evidence is never deleted silently.
    pub fn log_removals(mut self, log: impl Fn(&Removal) + Send + Sync + 'static) -> Store {
        self.removal_log = RemovalLog(Some(Arc::new(log)));
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn retention(&self) -> Retention {
        self.retention
    }

    /// Every incident, newest first. A directory whose incident.json cannot be read is listed with `error`.
    pub fn list(&self) -> Result<Vec<IncidentSummary>> {
        let mut out = Vec::new();
        for id in self.incident_ids()? {
            let path = self.dir.join(&id);
            let bytes = dir_size(&path);
            let in_progress = marker_state(&path) == Marker::Live;
            let summary = match read_json::<SummaryFields>(&path.join(INCIDENT_FILE)) {
                Ok(head) => IncidentSummary {
                    id: id.clone(),
                    path,
                    detected_at: head.detected_at.wall,
                    pid: head.process.pid,
                    hostname: head.host.hostname,
                    verdict: head.verdict,
                    complete: head.complete,
                    in_progress,
                    bytes,
                    error: None,
                },
                Err(err) => IncidentSummary {
                    id: id.clone(),
                    path,
                    detected_at: None,
                    pid: 0,
                    hostname: String::new(),
                    verdict: String::new(),
                    complete: false,
                    in_progress,
                    bytes,
                    error: Some(err.to_string()),
                },
            };
            out.push(summary);
        }
        out.sort_by(|a, b| b.id.cmp(&a.id));
        Ok(out)
    }

    /// The directory of incident `id` (which must exist).
    /// An incident directory that is a symlink is refused (it could name any directory of the host).
    pub fn path_of(&self, id: &str) -> Result<PathBuf> {
        validate_id(id)?;
        let path = self.dir.join(id);
        let json = path.join(INCIDENT_FILE);
        let meta = fs::symlink_metadata(&path);
        if meta.as_ref().is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(Error::Untrusted {
                path,
                why: Rejection::Symlink,
            });
        }
        if !meta.is_ok_and(|m| m.is_dir()) {
            return Err(Error::NotFound {
                id: id.to_string(),
                dir: self.dir.clone(),
                path: json,
            });
        }
        Ok(path)
    }

    /// Incident ids, newest first, from the directory's names alone (ids start with the UTC time of detection): no
    /// incident is opened. `until` is called every 1,024 entries; when it says stop, the listing ends with what it
    /// has and `false` (not all read).
    pub fn ids_newest_first(&self, mut until: impl FnMut() -> bool) -> Result<(Vec<String>, bool)> {
        let entries = fs::read_dir(&self.dir).map_err(Error::io("read directory", &self.dir))?;
        let mut ids = Vec::new();
        let mut complete = true;
        for (n, entry) in entries.enumerate() {
            if n % 1024 == 1023 && !until() {
                complete = false;
                break;
            }
            let Ok(entry) = entry else { continue };
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if name.starts_with('.') || validate_id(&name).is_err() {
                continue;
            }
            // The directory entry's type (no stat): a symlink is not an incident.
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                ids.push(name);
            }
        }
        ids.sort_unstable_by(|a, b| b.cmp(a));
        Ok((ids, complete))
    }

    /// The head of incident `id`'s incident.json ([`read_incident_head`]).
    pub fn load_head(&self, id: &str) -> Result<IncidentHead> {
        let path = self.path_of(id)?;
        read_incident_head(&path.join(INCIDENT_FILE))
    }

    /// Whether a live writer holds incident `id` (its `.in-progress` marker is flock-ed, or cannot be judged).
    pub fn writer_alive(&self, id: &str) -> bool {
        validate_id(id).is_ok() && marker_state(&self.dir.join(id)) == Marker::Live
    }

    /// Read incident `id` (complete or partial).
    pub fn load(&self, id: &str) -> Result<Incident> {
        let path = self.path_of(id)?;
        let json = path.join(INCIDENT_FILE);
        match read_incident(&json) {
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Err(Error::NotFound {
                    id: id.to_string(),
                    dir: self.dir.clone(),
                    path: json,
                })
            }
            other => other,
        }
    }

    /// Write a `.tar.gz` of incident `id` (its files under `<id>/`) to `out`, atomically. Returns its size.
    pub fn bundle(&self, id: &str, out: &Path) -> Result<u64> {
        self.bundle_with(id, out, &BundleOptions::default())
            .map(|bundled| bundled.bytes)
    }

    /// [`Store::bundle`] with options (`public`: scrubbed for a public issue); see [`crate::bundle`].
    pub fn bundle_with(&self, id: &str, out: &Path, options: &BundleOptions) -> Result<Bundled> {
        let src = self.path_of(id)?;
        crate::bundle::write(&src, id, out, self.modes.file, options)
    }

    fn incident_ids(&self) -> Result<Vec<String>> {
        let entries = fs::read_dir(&self.dir).map_err(Error::io("read directory", &self.dir))?;
        let mut ids = Vec::new();
        for entry in entries.flatten() {
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            if name.starts_with('.') || validate_id(&name).is_err() {
                continue;
            }
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                ids.push(name);
            }
        }
        Ok(ids)
    }

    fn require_writable(&self) -> Result<()> {
        if self.writable {
            Ok(())
        } else {
            Err(Error::io("write", &self.dir)(std::io::Error::other(
                "store opened read-only",
            )))
        }
    }
}
