//! Retention applied to the store: the candidates (each incident's size, age, trigger, process tree and writer),
//! `retention::plan`'s removals carried out, remembered for their live writers ([`crate::Error::Dropped`])
//! and recorded in `dropped.json` ([`DroppedLog`]).

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, SystemTime};

use capture::untrusted::{self, Limits};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::dirs::{dir_size, free_bytes, lock_marker, marker_state, Marker, MarkerLock};
use super::read::{read_json, SummaryFields};
use super::{Cleanup, RetentionFacts, Store};
use crate::durable::{self, fsync_dir, write_atomic_mode, TEMP_PREFIX};
use crate::error::{Error, Result};
use crate::layout::{DROPPED_FILE, INCIDENT_FILE, MAX_DROPPED_ENTRIES};
use crate::model::Trigger;
use crate::retention::{self, Candidate, Removal, Retention};

/// Largest `dropped.json` read back (a larger or unreadable one is started afresh).
const MAX_DROPPED_FILE_BYTES: u64 = 1 << 20;

/// Incidents removed while their writer held them, remembered so that its next write says why it fails.
const MAX_REMEMBERED_DROPS: usize = 4096;

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

impl Store {
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
    pub(super) fn dropped_error(&self, id: &str) -> Option<Error> {
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
}

/// An incident's process tree, for the quota ([`Candidate::tree`]): its process's cgroup (the kernel's, not a
/// name the tenant chose for itself: a process cannot join another tenant's cgroup), else the process (pid and
/// start time: a cgroup-less host, or the root cgroup everything shares), else the incident alone.
pub(super) fn tree_of(head: Option<&SummaryFields>, id: &str) -> String {
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
