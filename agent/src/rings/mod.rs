//! The rings room: everything the agent knows about breadcrumb ring files (format:
//! docs/breadcrumb-ring.md), in one place that `run`, `selftest` and the host daemon all reach down to.
//! It depends on `capture` and `breadcrumb` only — never on `daemon` or `watch`.
//!
//! Map:
//! - here: the environment variables a worker reads ([`ENV_RING_DIR`] and the others, breadcrumb's own
//!   constants), the one size limit ([`MAX_RING_BYTES`], from the format's largest slot and lane
//!   counts: the writer never creates a larger ring, and discovery, trust checks and the reader all
//!   accept every ring up to it), the one "is this a ring file" predicate ([`is_ring_name`]), reading
//!   one in bounded memory ([`read`]), and making a ring directory ([`create_ring_dir`], mode 1777).
//! - [`files`]: opening a ring from a directory others can write or through a process's fd link, and
//!   the rings a process holds ([`files::find_rings`], the capture's `rings` stage).
//! - [`copy`]: a ring's copy beside its incident, written while the ring is read, within a byte budget
//!   (the whole ring, or a valid smaller ring of its newest records).
//! - [`trust`]: a header is a claim; the kernel confirms it before a ring names a target.
//! - [`discovery`]: the ring-directory target source of the agent: inotify plus resumable listing
//!   passes, so every ring is examined within a bounded number of scans whatever surrounds it.

pub mod copy;
pub mod discovery;
pub mod files;
pub mod trust;

use std::ffi::OsStr;
use std::path::Path;

pub use breadcrumb::writer::ENV_RING_DIR;

/// The largest ring file (2^20 slots of 128 bytes in 4096 lanes, with the header and lane table):
/// the one limit of the writer, discovery, trust checks and the reader.
pub const MAX_RING_BYTES: u64 = breadcrumb::format::MAX_RING_BYTES;

/// Mode of a ring directory the agent creates: anyone may create a ring, only a file's owner may
/// remove or rename it (sticky, like /tmp), so non-root workers (pods) can write rings.
pub const RING_DIR_MODE: u32 = 0o1777;

/// Whether a directory entry's name is a ring file: `*.ring`, not hidden (the writer builds a ring
/// under a hidden temporary name and renames it into place, so a hidden name is never a finished
/// ring). The one predicate: directory listings, inotify events and fd links all use it.
pub fn is_ring_name(name: &OsStr) -> bool {
    let bytes = name.as_encoded_bytes();
    bytes.ends_with(b".ring") && !bytes.starts_with(b".")
}

/// Records of a ring an incident keeps (the newest; the calls in flight are found among all of them).
pub const EXCERPT_RECORDS: usize = 256;
/// Calls in flight of a ring an incident lists (the oldest; `in_flight_omitted` counts the others).
pub const EXCERPT_IN_FLIGHT: usize = 256;

/// Reads an opened ring file (two copies of every slot, validated) with the one size limit, keeping the
/// newest [`EXCERPT_RECORDS`] records and the oldest [`EXCERPT_IN_FLIGHT`] calls in flight, and hands
/// its bytes to `copy` as they are read (the incident's ring copy, [`copy::RingCopy`]). Memory is
/// bounded whatever the file holds: 2 MiB of chunks and ≤ ~70 MB of keys for the largest ring full of
/// records (breadcrumb's reader docs), never the file.
pub fn read(
    file: &std::fs::File,
    copy: &mut dyn breadcrumb::RingSink,
) -> breadcrumb::Result<breadcrumb::RingSnapshot> {
    let options = breadcrumb::ReadOptions {
        max_file_bytes: MAX_RING_BYTES,
        keep_records: Some(EXCERPT_RECORDS),
        max_in_flight: Some(EXCERPT_IN_FLIGHT),
        ..breadcrumb::ReadOptions::default()
    };
    breadcrumb::read_ring_into(file, &options, copy)
}

/// Creates a missing ring directory (and its parents) and gives the directory itself
/// [`RING_DIR_MODE`]. A directory that already exists is left as it is: an administrator who chose
/// another mode (e.g. a group-owned 2770 directory, docs/agent.md) keeps it. The mode is set on the
/// directory opened without following a symlink, so a link swapped in cannot redirect the chmod.
pub fn create_ring_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)?;
    opened.set_permissions(std::fs::Permissions::from_mode(RING_DIR_MODE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_one_size_limit_is_the_largest_ring_the_format_allows() {
        use breadcrumb::format::{ring_len, MAX_LANE_COUNT, MAX_SLOT_COUNT};
        assert_eq!(MAX_RING_BYTES, ring_len(MAX_SLOT_COUNT, MAX_LANE_COUNT));
        assert_eq!(breadcrumb::reader::DEFAULT_MAX_FILE_BYTES, MAX_RING_BYTES);
        assert_eq!(ENV_RING_DIR, "WEDGE_CAPTURE_RING_DIR");
    }

    #[test]
    fn a_created_ring_directory_is_sticky_and_world_writable_an_existing_one_is_kept() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let rings = dir.path().join("run/wedge-capture/rings");
        create_ring_dir(&rings).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&rings), 0o1777);
        let chosen = dir.path().join("group");
        std::fs::create_dir(&chosen).unwrap();
        std::fs::set_permissions(&chosen, std::fs::Permissions::from_mode(0o2770)).unwrap();
        create_ring_dir(&chosen).unwrap();
        assert_eq!(mode(&chosen), 0o2770);
    }
}
