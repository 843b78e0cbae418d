//! What the store sees of a directory: the writer's `.in-progress` marker (live, stale or absent, judged by its
//! flock without ever blocking), sizes, free space, age, and the removal of dead writers' temp files.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::durable::{self, create_dir_mode};
use crate::error::{Error, Result};
use crate::layout::MARKER_FILE;

/// State of an incident's `.in-progress` marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Marker {
    Absent,
    /// A live writer holds the flock.
    Live,
    /// The marker exists but nobody holds it: its writer died.
    Stale,
}

pub(super) enum MarkerLock {
    Absent,
    Live,
    /// We hold the (stale) marker's lock.
    Held(#[allow(dead_code)] Flock<File>),
    /// The marker exists but could not be opened or locked (permissions): treat as not ours to judge.
    Unknown,
}

pub(super) fn lock_marker(dir: &Path) -> MarkerLock {
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

pub(super) fn marker_state(dir: &Path) -> Marker {
    match lock_marker(dir) {
        MarkerLock::Absent => Marker::Absent,
        // Unknown is treated as live: never delete what we cannot judge.
        MarkerLock::Live | MarkerLock::Unknown => Marker::Live,
        MarkerLock::Held(_) => Marker::Stale,
    }
}

pub(super) fn create_dir_all_mode(dir: &Path, mode: u32) -> Result<()> {
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

pub(super) fn remove_temps_recursive(dir: &Path) -> usize {
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

pub(super) fn is_older_than(path: &Path, age: Duration) -> bool {
    fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|d| d > age)
}

/// Bytes of regular files under `dir` (symlinks not followed).
pub(super) fn dir_size(dir: &Path) -> u64 {
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

pub(super) fn free_bytes(dir: &Path) -> Option<u64> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    #[allow(clippy::useless_conversion)] // the field types differ between architectures
    let (avail, frsize) = (
        u64::from(st.blocks_available()),
        u64::from(st.fragment_size()),
    );
    Some(avail.saturating_mul(frsize))
}
