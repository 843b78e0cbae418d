//! After a crash: what dead writers left (temp files in incidents, half-built or half-removed temp directories,
//! a report.md renamed before its incident.json) is removed when the store is opened for writing.

use std::fs;
use std::path::Path;
use std::time::Duration;

use super::dirs::{
    is_older_than, lock_marker, marker_state, remove_temps_recursive, Marker, MarkerLock,
};
use super::read::read_incident;
use super::{Cleanup, Store};
use crate::durable::{fsync_dir, is_temp_name};
use crate::error::{Error, Result};
use crate::layout::{INCIDENT_FILE, MARKER_FILE, REPORT_FILE};

/// A temp directory without a marker older than this belongs to a writer that died while creating it.
const ORPHAN_TEMP_DIR_AGE: Duration = Duration::from_secs(600);

impl Store {
    /// Remove what dead writers left: temp files in incidents, half-built or half-removed temp directories.
    pub(super) fn clean_dead_writers(&self) -> Result<Cleanup> {
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
}
