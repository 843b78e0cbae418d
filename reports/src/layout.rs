//! Where an incident lives on disk: the store's directory layout, the names of the files the store owns, the
//! bounds of what it writes and reads back, and the rules for an incident id and a raw file's name. A leaf: the
//! store, the bundle and the agent read it; it reads nothing.
//!
//! ```text
//! <dir>/20261202T113400Z-gpu01-4242/
//!     incident.json   the model; complete=false until the capture finished
//!     report.md       rendered Markdown of the same state (written by finish, and by every update after it)
//!     ring.bin        copy of the breadcrumb ring (the caller's bytes, or streamed: `store::pending::PendingFile`)
//!     samples/…       raw files the caller keeps (stack, status …)
//!     .in-progress    marker, flock-ed by the live writer; removed when the handle is dropped
//! <dir>/dropped.json  what retention removed, newest last (at most 256 entries): id, size, process tree, why
//! ```

use std::path::{Component, Path};

use crate::error::{Error, Result};

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
/// The most one incident's directory may take: its raw files are refused beyond it. The agent's own budgets keep
/// an incident well under it (ring copies ≤ 16 MiB, kernel-log.txt ≤ ~1 MiB, incident.json and report.md).
pub const MAX_INCIDENT_BYTES: u64 = 64 << 20;
/// In the store's directory: what retention removed, newest last ([`crate::store::removal::DroppedLog`]).
pub const DROPPED_FILE: &str = "dropped.json";
/// Entries `dropped.json` keeps (the oldest go first).
pub const MAX_DROPPED_ENTRIES: usize = 256;

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
pub(crate) fn validate_file_name(name: &str) -> Result<(Vec<&str>, &str)> {
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
