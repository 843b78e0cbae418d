//! The durable incident store: one directory per incident under the output directory.
//!
//! ```text
//! <dir>/20261202T113400Z-gpu01-4242/
//!     incident.json   the model; complete=false until the capture finished
//!     report.md       rendered Markdown of the same state (written by finish, and by every update after it)
//!     ring.bin        copy of the breadcrumb ring (the caller's bytes, or streamed: [`PendingFile`])
//!     samples/…       raw files the caller keeps (stack, status …)
//!     .in-progress    marker, flock-ed by the live writer; removed when the handle is dropped
//! <dir>/dropped.json  what retention removed, newest last (at most 256 entries): id, size, process tree, why
//! ```
//!
//! Bounds: the raw files of one incident (everything but incident.json and report.md) are refused once they would
//! take it over [`MAX_INCIDENT_BYTES`] ([`Error::OverBudget`]); the store's total is held to its quota by
//! retention ([`crate::retention`], rule 5), young wedges included.
//!
//! Every file is written by [`crate::durable`] (temp → fsync → rename → fsync dir). A new incident is assembled in a
//! temp directory with its first `incident.json` and marker, then renamed into place with `RENAME_NOREPLACE`: an
//! incident directory is never visible without a parseable `incident.json`. A writer killed at any instant leaves
//! either no incident or a parseable partial one, plus temp files that [`Store::open`] removes once the flock shows
//! the writer is dead.
//!
//! `incident.json` and `report.md` are one commit ([`durable::commit_together`]): both are staged (temp + fsync,
//! where a full disk fails) before either is renamed, so they never disagree about completeness. Everything read
//! back (listing, loading, bundling) goes through [`capture::untrusted`]: no FIFO, no symlink, bounded sizes; an
//! incident directory that is itself a symlink is refused.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use capture::error::Rejection;
use capture::untrusted::{self, Limits};

use chrono::{DateTime, Utc};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::bundle::{BundleOptions, Bundled};
use crate::durable::{
    self, commit_together, create_dir_mode, fsync_dir, is_temp_name, stage_bytes,
    write_atomic_mode, TEMP_PREFIX,
};
use crate::error::{Error, Result};
use crate::model::{incident_id, EpisodeStatus, Incident, Timestamp, Trigger};
use crate::retention::{self, Candidate, Removal, Retention};

/// The default output directory (the agent's `--dir` default).
pub const DEFAULT_DIR: &str = "/var/lib/wedge-capture/incidents";
/// The model, as JSON.
pub const INCIDENT_FILE: &str = "incident.json";
/// The rendered Markdown.
pub const REPORT_FILE: &str = "report.md";
/// The conventional name for the ring copy (`handle.write_file(RING_FILE, bytes)`).
pub const RING_FILE: &str = "ring.bin";
/// Present (and flock-ed) while a writer works on the incident.
pub const MARKER_FILE: &str = ".in-progress";
/// Largest incident.json a reader accepts.
pub const MAX_INCIDENT_JSON_BYTES: u64 = 256 << 20;
/// Largest single file a bundle takes (a ring copy, a sample); larger ones are an error, not a truncated archive.
pub const MAX_BUNDLED_FILE_BYTES: u64 = 1 << 32;
/// A temp directory without a marker older than this belongs to a writer that died while creating it.
const ORPHAN_TEMP_DIR_AGE: Duration = Duration::from_secs(600);
/// The most one incident's directory may take: its raw files are refused beyond it. The agent's own budgets keep
/// an incident well under it (ring copies ≤ 16 MiB, kernel-log.txt ≤ ~1 MiB, incident.json and report.md).
pub const MAX_INCIDENT_BYTES: u64 = 64 << 20;
/// In the store's directory: what retention removed, newest last ([`DroppedLog`]).
pub const DROPPED_FILE: &str = "dropped.json";
/// Entries `dropped.json` keeps (the oldest go first).
pub const MAX_DROPPED_ENTRIES: usize = 256;
/// Largest `dropped.json` read back (a larger or unreadable one is started afresh).
const MAX_DROPPED_FILE_BYTES: u64 = 1 << 20;
/// Incidents removed while their writer held them, remembered so that its next write says why it fails.
const MAX_REMEMBERED_DROPS: usize = 4096;

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

/// One entry of `dropped.json`: a [`Removal`] and when it happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dropped {
    pub removed_at: DateTime<Utc>,
    #[serde(flatten)]
    pub removal: Removal,
    /// The removal in words (the retention log line).
    pub why: String,
}

/// The content of `dropped.json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DroppedLog {
    pub dropped: Vec<Dropped>,
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

/// State of an incident's `.in-progress` marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    Absent,
    /// A live writer holds the flock.
    Live,
    /// The marker exists but nobody holds it: its writer died.
    Stale,
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
    /// [`IncidentHandle::finish`], whose results are not returned): evidence is never deleted silently.
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

    /// Remove incidents over the limits by the rules of [`crate::retention`] (never one in progress, never a
    /// wedge under the floor, on-demand ones first); each removal is returned and passed to the removal log.
    pub fn enforce_retention(&self) -> Result<Cleanup> {
        self.require_writable()?;
        if self.retention == Retention::UNLIMITED {
            return Ok(Cleanup::default());
        }
        let now = SystemTime::now();
        let mut candidates = Vec::new();
        let mut facts = self
            .retention_facts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut seen = std::collections::HashSet::new();
        for id in self.incident_ids()? {
            let path = self.dir.join(&id);
            let Ok(dir_meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            let key = (id.clone(), dir_meta.ino());
            let known = match facts.get(&key) {
                Some(known) => known.clone(),
                None => {
                    let head = read_json::<SummaryFields>(&path.join(INCIDENT_FILE)).ok();
                    let known = RetentionFacts {
                        // Unreadable or of an unknown trigger: kept like a wedge.
                        on_demand: head
                            .as_ref()
                            .is_some_and(|h| h.trigger == Trigger::OnDemand),
                        detected: head
                            .as_ref()
                            .and_then(|h| h.detected_at.wall)
                            .map(SystemTime::from),
                        tree: tree_of(head.as_ref(), &id),
                    };
                    // An unreadable file may be one being replaced: asked again next time.
                    if head.is_some() {
                        facts.insert(key.clone(), known.clone());
                    }
                    known
                }
            };
            seen.insert(key);
            let detected = known.detected.or_else(|| dir_meta.modified().ok());
            candidates.push(Candidate {
                bytes: dir_size(&path),
                in_progress: marker_state(&path) == Marker::Live,
                on_demand: known.on_demand,
                // A detection time in the future counts as now.
                age: detected.map(|t| now.duration_since(t).unwrap_or(Duration::ZERO)),
                tree: known.tree,
                id,
            });
        }
        facts.retain(|key, _| seen.contains(key));
        drop(facts);
        candidates.sort_by(|a, b| a.id.cmp(&b.id));
        let free = free_bytes(&self.dir);
        let mut cleanup = Cleanup::default();
        let mut first_error = None;
        for removal in retention::plan(&candidates, &self.retention, free) {
            match self.remove_incident(&removal.id, removal.writer_live) {
                Ok(true) => {
                    if removal.writer_live {
                        self.remember_drop(&removal);
                    }
                    if let Some(log) = &self.removal_log.0 {
                        log(&removal);
                    }
                    cleanup.removed.push(removal);
                }
                Ok(false) => {}
                // One that cannot be removed must not keep the others (already planned) in place.
                Err(err) => {
                    first_error.get_or_insert(err);
                }
            }
        }
        if !cleanup.removed.is_empty() {
            // Best effort: the removals are also in the log (removal_log); a full disk must not undo them.
            let _ = self.record_dropped(&cleanup.removed);
        }
        match first_error {
            Some(err) if cleanup.removed.is_empty() => Err(err),
            _ => Ok(cleanup),
        }
    }

    /// Rename away, then delete. False if a writer took it meanwhile, unless `even_live` (the quota must hold,
    /// [`crate::retention`] rule 5b).
    fn remove_incident(&self, id: &str, even_live: bool) -> Result<bool> {
        let path = self.dir.join(id);
        // Hold the marker's lock (if any) across the rename so a dead writer's marker stays ours.
        let _guard = match lock_marker(&path) {
            MarkerLock::Live if !even_live => return Ok(false),
            other => other,
        };
        let doomed = self
            .dir
            .join(format!("{TEMP_PREFIX}del-{}", durable::temp_name(id)));
        fs::rename(&path, &doomed).map_err(Error::io("rename", &path))?;
        fsync_dir(&self.dir)?;
        fs::remove_dir_all(&doomed).map_err(Error::io("remove", &doomed))?;
        Ok(true)
    }

    /// An incident removed under its live writer: that writer's next write says why it fails.
    fn remember_drop(&self, removal: &Removal) {
        let mut dropped = self
            .dropped
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if dropped.len() >= MAX_REMEMBERED_DROPS {
            dropped.clear();
        }
        dropped.insert(removal.id.clone(), removal.reason.to_string());
    }

    /// Why incident `id` was removed under its writer, if it was.
    fn dropped_error(&self, id: &str) -> Option<Error> {
        let dropped = self
            .dropped
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        dropped.get(id).map(|why| Error::Dropped {
            id: id.to_string(),
            why: why.clone(),
        })
    }

    /// What retention removed, newest last (`dropped.json`; empty when there is none or it cannot be read).
    pub fn dropped(&self) -> DroppedLog {
        let path = self.dir.join(DROPPED_FILE);
        untrusted::read(&path, Limits::max_len(MAX_DROPPED_FILE_BYTES))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default()
    }

    /// Appends `removed` to `dropped.json` (atomically; the oldest entries beyond [`MAX_DROPPED_ENTRIES`] go).
    fn record_dropped(&self, removed: &[Removal]) -> Result<()> {
        // One read-modify-write at a time among this store's clones (capture workers finish concurrently).
        let _serialized = self
            .dropped
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut log = self.dropped();
        let now = Utc::now();
        log.dropped.extend(removed.iter().map(|removal| Dropped {
            removed_at: now,
            removal: removal.clone(),
            why: removal.to_string(),
        }));
        let excess = log.dropped.len().saturating_sub(MAX_DROPPED_ENTRIES);
        log.dropped.drain(..excess);
        let json = serde_json::to_vec_pretty(&log).map_err(Error::Serialize)?;
        write_atomic_mode(&self.dir, DROPPED_FILE, &json, self.modes.file)
    }

    /// Remove what dead writers left: temp files in incidents, half-built or half-removed temp directories.
    fn clean_dead_writers(&self) -> Result<Cleanup> {
        let mut cleanup = Cleanup::default();
        let entries = fs::read_dir(&self.dir).map_err(Error::io("read directory", &self.dir))?;
        for entry in entries.flatten() {
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
            if !is_dir {
                continue;
            }
            let path = entry.path();
            if is_temp_name(&name) {
                let dead = match marker_state(&path) {
                    Marker::Live => false,
                    Marker::Stale => true,
                    Marker::Absent => {
                        is_older_than(&path, ORPHAN_TEMP_DIR_AGE) || name.starts_with(".tmp-del-")
                    }
                };
                if dead {
                    let _ = fs::remove_dir_all(&path);
                }
                continue;
            }
            if name.starts_with('.') {
                continue;
            }
            let guard = lock_marker(&path);
            if matches!(guard, MarkerLock::Live) {
                continue;
            }
            cleanup.removed_temp_files += remove_temps_recursive(&path);
            if let MarkerLock::Held(_) = guard {
                self.reconcile_report(&path);
                let _ = fs::remove_file(path.join(MARKER_FILE));
                let _ = fsync_dir(&path);
            }
        }
        Ok(cleanup)
    }

    /// A writer killed between the two renames of its final commit left a report.md beside the previous,
    /// partial incident.json (the commit point): remove it, so a report.md exists only beside a complete
    /// incident.json, as after any other commit.
    fn reconcile_report(&self, dir: &Path) {
        let report = dir.join(REPORT_FILE);
        if !report.exists() {
            return;
        }
        if read_incident(&dir.join(INCIDENT_FILE)).is_ok_and(|incident| !incident.complete) {
            let _ = fs::remove_file(&report);
        }
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
    // the verdict once per write, in one place (agent/src/watch/incident.rs, set_verdict), so this is not a
    // second computation of it.
    if copy.verdict.is_empty() {
        copy.verdict = crate::verdict::verdict(&copy);
    }
    copy
}

/// Read and parse one incident.json: a regular file (no FIFO, no symlink), bounded in size.
pub fn read_incident(path: &Path) -> Result<Incident> {
    read_json(path)
}

/// The few fields `list` shows: parsing only these skips building samples and stacks.
#[derive(Deserialize, Default)]
#[serde(default)]
struct SummaryFields {
    complete: bool,
    trigger: Trigger,
    verdict: String,
    detected_at: Timestamp,
    process: SummaryProcess,
    host: SummaryHost,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SummaryProcess {
    pid: i32,
    start_time: Option<u64>,
    cgroup: Option<String>,
}

/// An incident's process tree, for the quota ([`Candidate::tree`]): its process's cgroup (the kernel's, not a
/// name the tenant chose for itself: a process cannot join another tenant's cgroup), else the process (pid and
/// start time: a cgroup-less host, or the root cgroup everything shares), else the incident alone.
fn tree_of(head: Option<&SummaryFields>, id: &str) -> String {
    let Some(head) = head else {
        return format!("incident:{id}");
    };
    let process = &head.process;
    match process
        .cgroup
        .as_deref()
        .filter(|c| !c.is_empty() && *c != "/")
    {
        Some(cgroup) => format!("cgroup:{cgroup}"),
        None => match process.start_time {
            Some(start) if process.pid > 0 => format!("process:{}:{start}", process.pid),
            _ => format!("incident:{id}"),
        },
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SummaryHost {
    hostname: String,
}

/// The bytes of an incident.json: a regular file of at most [`MAX_INCIDENT_JSON_BYTES`], opened without following
/// a symlink or blocking on a FIFO.
pub fn read_incident_bytes(path: &Path) -> Result<Vec<u8>> {
    let limits = Limits::max_len(MAX_INCIDENT_JSON_BYTES);
    untrusted::read(path, limits).map_err(|err| untrusted_error(err, path))
}

fn untrusted_error(err: capture::Error, path: &Path) -> Error {
    match err {
        capture::Error::Untrusted {
            why: Rejection::TooLarge { len, limit },
            ..
        } => Error::TooLarge {
            path: path.to_path_buf(),
            size: len,
            limit,
        },
        capture::Error::Io { source, .. } => Error::io("open", path)(source),
        err => Error::from_untrusted(err, path),
    }
}

/// What an incident.json says its episode is: its first fields, `trigger` and `episode` (status and why its
/// outcome is unknown: nothing else of it is parsed).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct IncidentHead {
    pub trigger: Trigger,
    pub episode: EpisodeHead,
}

/// [`IncidentHead::episode`]: the two fields of [`crate::model::Episode`] that say whether it goes on.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct EpisodeHead {
    pub status: EpisodeStatus,
    pub outcome_unknown: Option<String>,
}

/// Prefixes of an incident.json tried for its head before the whole file is read.
const HEAD_PREFIXES: [usize; 2] = [4 << 10, 64 << 10];

/// The head of an incident.json ([`IncidentHead`]) read from as short a prefix of the file as holds it (the store
/// writes `trigger` and `episode` before the samples, so 4 KiB nearly always do), else from the whole file (same
/// checks as [`read_incident`]). A reader that judges thousands of incidents by their episode (npd-check) reads
/// this, not each whole incident. The rest of the file is not checked: a file whose head is readable but whose
/// tail is corrupt still gives its head.
pub fn read_incident_head(path: &Path) -> Result<IncidentHead> {
    let file = untrusted::open(path, Limits::max_len(MAX_INCIDENT_JSON_BYTES))
        .map_err(|err| untrusted_error(err, path))?;
    for prefix in HEAD_PREFIXES {
        if prefix as u64 >= file.len() {
            break;
        }
        let bytes = file
            .read_prefix(prefix)
            .map_err(|err| untrusted_error(err, path))?;
        if let Some(head) = head_of_prefix(&bytes) {
            return Ok(head);
        }
    }
    let bytes = file.read_all().map_err(|err| untrusted_error(err, path))?;
    match head_of_prefix(&bytes) {
        Some(head) => Ok(head),
        None => serde_json::from_slice(&bytes).map_err(|source| Error::Parse {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The head from the first bytes of an incident.json: `Some` once both fields were read, or the whole object was
/// (absent fields default); `None` when the bytes end first or do not parse.
fn head_of_prefix(bytes: &[u8]) -> Option<IncidentHead> {
    use serde::de::{IgnoredAny, MapAccess, Visitor};

    #[derive(Default)]
    struct Seen {
        trigger: Option<Trigger>,
        episode: Option<EpisodeHead>,
        whole: bool,
    }
    struct HeadVisitor<'a>(&'a mut Seen);
    impl<'de> Visitor<'de> for HeadVisitor<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an incident object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "trigger" => self.0.trigger = Some(map.next_value()?),
                    "episode" => self.0.episode = Some(map.next_value()?),
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                if self.0.episode.is_some() {
                    // Stop here: the rest of the bytes may be cut anywhere (the parser's complaint about
                    // the unfinished object is ignored). The store writes `trigger` before `episode`: a file
                    // without one before it has none (schema 1: a wedge).
                    return Ok(());
                }
            }
            self.0.whole = true;
            Ok(())
        }
    }
    let mut seen = Seen::default();
    let mut parser = serde_json::Deserializer::from_slice(bytes);
    let _ = serde::Deserializer::deserialize_map(&mut parser, HeadVisitor(&mut seen));
    let done = seen.whole || seen.episode.is_some();
    done.then(|| IncidentHead {
        trigger: seen.trigger.unwrap_or_default(),
        episode: seen.episode.unwrap_or_default(),
    })
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let bytes = read_incident_bytes(path)?;
    serde_json::from_slice(&bytes).map_err(|source| Error::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// An id names a directory directly under the store: `[A-Za-z0-9._-]`, not hidden, at most 200 bytes.
pub fn validate_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 200
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidId(id.to_string()))
    }
}

const RESERVED_NAMES: &[&str] = &[INCIDENT_FILE, REPORT_FILE, MARKER_FILE];

/// `a/b/c.txt` → (["a", "b"], "c.txt"), refusing anything that could escape, hide or overwrite what the store owns.
fn validate_file_name(name: &str) -> Result<(Vec<&str>, &str)> {
    let bad = |why| Error::InvalidName {
        name: name.to_string(),
        why,
    };
    if RESERVED_NAMES.contains(&name) {
        return Err(bad("reserved for the store"));
    }
    let mut parts = Vec::new();
    for component in Path::new(name).components() {
        match component {
            Component::Normal(part) => {
                let part = part.to_str().ok_or_else(|| bad("not UTF-8"))?;
                if part.starts_with('.') {
                    return Err(bad("hidden names are reserved for temp files"));
                }
                parts.push(part);
            }
            _ => return Err(bad("must be a relative path without `..`")),
        }
    }
    if name.ends_with('/') || name.contains("//") {
        return Err(bad("empty path component"));
    }
    if parts.len() > 4 {
        return Err(bad("nested more than 4 levels"));
    }
    let file = parts.pop().ok_or_else(|| bad("empty"))?;
    if file.len() > 200 {
        return Err(bad("longer than 200 bytes"));
    }
    Ok((parts, file))
}

fn create_dir_all_mode(dir: &Path, mode: u32) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        if !parent.as_os_str().is_empty() {
            create_dir_all_mode(parent, mode)?;
        }
    }
    match create_dir_mode(dir, mode) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::AlreadyExists => {
            Ok(())
        }
        other => other,
    }
}

enum MarkerLock {
    Absent,
    Live,
    /// We hold the (stale) marker's lock.
    Held(#[allow(dead_code)] Flock<File>),
    /// The marker exists but could not be opened or locked (permissions): treat as not ours to judge.
    Unknown,
}

fn lock_marker(dir: &Path) -> MarkerLock {
    let path = dir.join(MARKER_FILE);
    // Never block on a FIFO planted under the marker's name, never follow a symlink.
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(&path)
    {
        Ok(f) => f,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return MarkerLock::Absent,
        Err(_) => return MarkerLock::Unknown,
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return MarkerLock::Unknown;
    }
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => MarkerLock::Held(lock),
        Err((_, Errno::EWOULDBLOCK)) => MarkerLock::Live,
        Err(_) => MarkerLock::Unknown,
    }
}

fn marker_state(dir: &Path) -> Marker {
    match lock_marker(dir) {
        MarkerLock::Absent => Marker::Absent,
        // Unknown is treated as live: never delete what we cannot judge.
        MarkerLock::Live | MarkerLock::Unknown => Marker::Live,
        MarkerLock::Held(_) => Marker::Stale,
    }
}

fn remove_temps_recursive(dir: &Path) -> usize {
    let mut removed = durable::remove_stale_temps(dir).unwrap_or(0);
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
            if is_dir {
                removed += remove_temps_recursive(&entry.path());
            }
        }
    }
    removed
}

fn is_older_than(path: &Path, age: Duration) -> bool {
    fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|d| d > age)
}

/// Bytes of regular files under `dir` (symlinks not followed).
fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let mut total = 0;
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            total += dir_size(&entry.path());
        } else if meta.is_file() {
            total += meta.len();
        }
    }
    total
}

fn free_bytes(dir: &Path) -> Option<u64> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    #[allow(clippy::useless_conversion)] // the field types differ between architectures
    let (avail, frsize) = (
        u64::from(st.blocks_available()),
        u64::from(st.fragment_size()),
    );
    Some(avail.saturating_mul(frsize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::EpisodeStatus;

    fn incident_in(cgroup: &str, pid: i32) -> Incident {
        let mut incident = Incident::new(pid);
        incident.process.cgroup = Some(cgroup.to_string());
        incident
    }

    /// A pending file of `len` bytes (sparse) committed as `name`.
    fn grow(handle: &IncidentHandle, name: &str, len: u64) -> Result<()> {
        let pending = handle.pending_file()?;
        pending.file().set_len(len).unwrap();
        pending.commit(name)
    }

    #[test]
    fn raw_files_over_the_incident_budget_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Retention::UNLIMITED).unwrap();
        let handle = store.create(&Incident::new(1)).unwrap();
        grow(&handle, "ring.bin", 40 << 20).unwrap();
        // Replacing a file counts its new size only.
        grow(&handle, "ring.bin", 50 << 20).unwrap();
        let err = grow(&handle, "ring-2.bin", 20 << 20).unwrap_err();
        assert!(matches!(err, Error::OverBudget { .. }), "{err}");
        assert!(err.to_string().contains("ring-2.bin"), "{err}");
        let err = handle
            .write_file("kernel-log.txt", &vec![b'x'; 15 << 20])
            .unwrap_err();
        assert!(matches!(err, Error::OverBudget { .. }), "{err}");
        handle.write_file("kernel-log.txt", b"small").unwrap();
        // Nothing refused is left behind, not even a temp file.
        let mut names: Vec<String> = fs::read_dir(handle.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [MARKER_FILE, INCIDENT_FILE, "kernel-log.txt", "ring.bin"]
        );
        // incident.json itself is never refused (the evidence is bounded where it is made).
        handle.update(&Incident::new(1)).unwrap();
    }

    /// The quota holds for young wedges: a tenant's older incidents go first, even one its writer still
    /// holds (whose next write then says why it fails); the newest of each tree stays; dropped.json says
    /// what went.
    #[test]
    fn the_quota_removes_a_tenants_older_incidents_first_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Retention {
            max_total_bytes: Some(100 << 20),
            ..Retention::DEFAULT
        };
        let logged = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = logged.clone();
        let store = Store::open(dir.path(), limits)
            .unwrap()
            .log_removals(move |removal| log.lock().unwrap().push(removal.to_string()));
        let mut other = incident_in("/other.scope", 10);
        other.id = "20260101T000000Z-h-10".into();
        let mut handle = store.create(&other).unwrap();
        grow(&handle, "ring.bin", 30 << 20).unwrap();
        handle.finish(&other).unwrap();
        drop(handle);
        let mut live = Vec::new();
        for n in 1..=3 {
            let mut incident = incident_in("/hostile.scope", 100 + n);
            incident.id = format!("20260101T00000{n}Z-h-{}", 100 + n);
            let mut handle = store.create(&incident).unwrap();
            grow(&handle, "ring.bin", 30 << 20).unwrap();
            handle.finish(&incident).unwrap();
            live.push((handle, incident));
        }
        // 4 × 30 MiB over 100 MiB: the hostile tree's oldest (its writer alive) went, nothing else.
        let (first, incident) = &mut live[0];
        assert!(!first.path().exists());
        let err = first.update(incident).unwrap_err();
        assert!(matches!(err, Error::Dropped { .. }), "{err}");
        assert!(err.to_string().contains("quota"), "{err}");
        assert!(first.pending_file().is_err() && first.write_file("x", b"x").is_err());
        for kept in [
            "20260101T000000Z-h-10",
            "20260101T000002Z-h-102",
            "20260101T000003Z-h-103",
        ] {
            assert!(dir.path().join(kept).join(INCIDENT_FILE).exists(), "{kept}");
        }
        let dropped = store.dropped().dropped;
        assert_eq!(dropped.len(), 1);
        assert_eq!(dropped[0].removal.id, "20260101T000001Z-h-101");
        assert_eq!(dropped[0].removal.tree, "cgroup:/hostile.scope");
        assert!(dropped[0].removal.writer_live);
        assert_eq!(logged.lock().unwrap().as_slice(), [dropped[0].why.clone()]);
        let text = fs::read_to_string(dir.path().join(DROPPED_FILE)).unwrap();
        assert!(text.contains("\"limit\": \"quota\""), "{text}");
        // The listing is not confused by dropped.json.
        assert_eq!(store.list().unwrap().len(), 3);
    }

    #[test]
    fn the_process_tree_is_the_cgroup_else_the_process() {
        let head = |cgroup: Option<&str>, start: Option<u64>| SummaryFields {
            process: SummaryProcess {
                pid: 7,
                start_time: start,
                cgroup: cgroup.map(str::to_string),
            },
            ..SummaryFields::default()
        };
        assert_eq!(
            tree_of(Some(&head(Some("/a/b"), Some(5))), "i"),
            "cgroup:/a/b"
        );
        assert_eq!(tree_of(Some(&head(Some("/"), Some(5))), "i"), "process:7:5");
        assert_eq!(tree_of(Some(&head(None, None)), "i"), "incident:i");
        assert_eq!(tree_of(None, "i"), "incident:i");
    }

    #[test]
    fn an_incidents_head_is_read_from_its_first_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Retention::UNLIMITED).unwrap();
        let mut incident = Incident::new(3);
        incident.episode.status = EpisodeStatus::Resolved;
        // A long tail (a big sample would do the same): the head is still in the first 4 KiB.
        incident.timeline = (0..5000)
            .map(|n| crate::model::TimelineEvent {
                at: Timestamp::now(),
                event: format!("event {n}"),
            })
            .collect();
        let mut handle = store.create(&incident).unwrap();
        handle.finish(&incident).unwrap();
        let json = handle.path().join(INCIDENT_FILE);
        assert!(fs::metadata(&json).unwrap().len() > 64 << 10);
        let head = store.load_head(handle.id()).unwrap();
        assert_eq!(head.trigger, Trigger::Wedge);
        assert_eq!(head.episode.status, EpisodeStatus::Resolved);
        // A corrupt tail does not hide the head; a corrupt head is an error; no trigger (schema 1) is a wedge.
        let mut bytes = fs::read(&json).unwrap();
        let len = bytes.len();
        bytes[len - 100..].fill(b'{');
        fs::write(&json, &bytes).unwrap();
        assert_eq!(
            store.load_head(handle.id()).unwrap().episode.status,
            EpisodeStatus::Resolved
        );
        fs::write(&json, b"{\"episode\": {\"status\": ").unwrap();
        assert!(matches!(
            store.load_head(handle.id()),
            Err(Error::Parse { .. })
        ));
        fs::write(
            &json,
            br#"{"id": "x", "episode": {"status": "open"}, "samples": [}"#,
        )
        .unwrap();
        let head = store.load_head(handle.id()).unwrap();
        assert_eq!(
            (head.trigger, head.episode.status),
            (Trigger::Wedge, EpisodeStatus::Open)
        );
        fs::write(&json, br#"{"trigger": "on_demand"}"#).unwrap();
        assert_eq!(
            store.load_head(handle.id()).unwrap().trigger,
            Trigger::OnDemand
        );
    }
}
