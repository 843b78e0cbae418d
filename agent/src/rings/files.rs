//! Opening ring files safely, and finding the rings a process holds.
//!
//! A ring path comes from a directory others can write or from a process's fd link: opened through
//! `capture::untrusted` (no symlink followed, no FIFO or device opened, at most [`MAX_RING_BYTES`]) or,
//! for a file no path reaches, through the fd link itself after checking it is the very inode held.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use capture::untrusted::{self, Limits, UntrustedFile};
use capture::{HeldFile, ProcRoot};

use super::{is_ring_name, MAX_RING_BYTES};

/// Most fd links stat'ed per process.
pub const MAX_FDS_STATED: usize = 65_536;
/// Most directory entries looked at per ring directory when a held ring is searched by inode.
const MAX_DIR_ENTRIES_SEARCHED: usize = 100_000;

/// The (dev, inode) of every file `pid` holds open (stat of each `fd/N`, at most [`MAX_FDS_STATED`]);
/// with the fd link path of each.
pub fn held_files(root: &ProcRoot, pid: i32) -> HashMap<(u64, u64), HeldFile> {
    let mut held = HashMap::new();
    for file in root.held_files(pid, MAX_FDS_STATED).unwrap_or_default() {
        held.entry((file.dev, file.ino)).or_insert(file);
    }
    held
}

/// Opens a ring file from a directory others can write (no symlink followed, no FIFO or device
/// opened, at most [`MAX_RING_BYTES`]).
pub fn open_ring(path: &Path) -> capture::Result<UntrustedFile> {
    untrusted::open(path, Limits::max_len(MAX_RING_BYTES))
}

/// A ring file opened for reading, with the name it is reported under.
#[derive(Debug)]
pub struct RingFile {
    pub file: std::fs::File,
    pub path: PathBuf,
}

impl RingFile {
    pub fn from_untrusted(opened: &UntrustedFile) -> std::io::Result<RingFile> {
        Ok(RingFile {
            file: opened.file().try_clone()?,
            path: opened.path().to_path_buf(),
        })
    }
}

/// Opens, through a process's fd link (`/proc/<pid>/fd/N`), the file it holds open: a ring no path
/// reaches any more (unlinked, or in a directory the agent does not see). Only a regular file of at
/// most [`MAX_RING_BYTES`] with the (dev, inode) `held` is opened and kept (the fd could be closed
/// and reused meanwhile); the open never blocks (`O_NONBLOCK`), and the stat before it says regular
/// file, so no FIFO or device is opened.
pub fn open_held(link: &Path, held: (u64, u64)) -> std::io::Result<std::fs::File> {
    open_held_within(link, held, MAX_RING_BYTES)
}

fn open_held_within(link: &Path, held: (u64, u64), max_len: u64) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let is_it = |meta: &std::fs::Metadata| {
        meta.file_type().is_file() && (meta.dev(), meta.ino()) == held && meta.len() <= max_len
    };
    let refused = || std::io::Error::other("not the regular ring file the process holds");
    if !is_it(&std::fs::metadata(link)?) {
        return Err(refused());
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(link)?;
    if !is_it(&file.metadata()?) {
        return Err(refused());
    }
    Ok(file)
}

/// Whether an fd link's text names a ring file: its last component passes [`is_ring_name`], once a
/// trailing ` (deleted)` (an unlinked file) is taken off.
pub fn names_a_ring(target: &Path) -> bool {
    let bytes = target.as_os_str().as_encoded_bytes();
    let path = bytes.strip_suffix(b" (deleted)").unwrap_or(bytes);
    let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    is_ring_name(std::ffi::OsStr::from_bytes(name))
}

/// A path for a log line: the directory as configured, the entry name escaped if it holds control
/// bytes or is not UTF-8 (entry names are chosen by whoever writes the directory).
pub fn printable_path(path: &Path) -> String {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => {
            format!("{}/{}", dir.display(), untrusted::printable_name(name))
        }
        _ => untrusted::printable_name(path.as_os_str()),
    }
}

/// Ring files that belong to `pid`: files the process holds open (stat of each fd link: no lock taken)
/// whose name passes [`is_ring_name`] — opened by the fd link's path when that path resolves here to
/// the very inode held, else found in `ring_dirs` by that inode (a worker in a container sees the ring
/// under another path than the host does), else (unlinked, or a directory the agent does not watch)
/// through the fd link itself. A ring the process does not hold open never belongs to it, whatever its
/// header claims: a forged ring can never become another process's ring. Sorted by path.
pub fn find_rings(root: &ProcRoot, ring_dirs: &[PathBuf], pid: i32) -> Vec<RingFile> {
    let held = held_files(root, pid);
    let mut found = Vec::new();
    let mut unmatched = HashMap::new();
    for (&inode, file) in &held {
        let Ok(target) = root.fd_link_target(pid, file.fd) else {
            continue;
        };
        if !names_a_ring(&target) {
            continue;
        }
        match open_ring(&target) {
            Ok(file) if (file.identity().dev, file.identity().ino) == inode => {
                found.extend(RingFile::from_untrusted(&file).ok());
            }
            _ => {
                unmatched.insert(inode, (file.link.clone(), target));
            }
        }
    }
    if !unmatched.is_empty() {
        found.extend(search_dirs(ring_dirs, &mut unmatched));
    }
    for (inode, (link, target)) in unmatched {
        if let Ok(file) = open_held(&link, inode) {
            found.push(RingFile { file, path: target });
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}

/// The rings among `dirs`' entries whose (dev, inode) is in `unmatched` (removed from it when found).
fn search_dirs(
    dirs: &[PathBuf],
    unmatched: &mut HashMap<(u64, u64), (PathBuf, PathBuf)>,
) -> Vec<RingFile> {
    let mut found = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten().take(MAX_DIR_ENTRIES_SEARCHED) {
            if unmatched.is_empty() {
                return found;
            }
            if !is_ring_name(&entry.file_name()) {
                continue;
            }
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            let inode = (meta.dev(), meta.ino());
            if !unmatched.contains_key(&inode) {
                continue;
            }
            let Ok(file) = open_ring(&path) else {
                continue;
            };
            if (file.identity().dev, file.identity().ino) == inode {
                if let Ok(ring) = RingFile::from_untrusted(&file) {
                    unmatched.remove(&inode);
                    found.push(ring);
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inode(path: &Path) -> (u64, u64) {
        let meta = std::fs::metadata(path).unwrap();
        (meta.dev(), meta.ino())
    }

    #[test]
    fn a_held_file_opens_through_its_fd_link_only_as_itself() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gone.ring");
        std::fs::write(&path, b"ring bytes").unwrap();
        let held = std::fs::File::open(&path).unwrap();
        let held_inode = inode(&path);
        std::fs::remove_file(&path).unwrap();
        let link = PathBuf::from(format!("/proc/self/fd/{}", held.as_raw_fd()));
        let target = std::fs::read_link(&link).unwrap();
        assert!(names_a_ring(&target), "{}", target.display());
        assert!(!names_a_ring(Path::new("/dev/nvidia0")));
        let opened = open_held_within(&link, held_inode, 1024).unwrap();
        assert_eq!(opened.metadata().unwrap().ino(), held_inode.1);
        // Another inode, a file over the limit, a FIFO: refused (the FIFO without opening it).
        assert!(open_held_within(&link, (held_inode.0, held_inode.1 + 1), 1024).is_err());
        assert!(open_held_within(&link, held_inode, 4).is_err());
        let fifo = dir.path().join("x.ring");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        assert!(open_held_within(&fifo, inode(&fifo), 1024).is_err());
    }

    #[test]
    fn one_predicate_for_names_and_fd_links() {
        for yes in ["/r/1-2.ring", "/r/x.ring (deleted)", "x.ring"] {
            assert!(names_a_ring(Path::new(yes)), "{yes}");
        }
        for no in [
            "/r/.x.ring",
            "/r/.x.ring.tmp-7",
            "/r/x.ring.bak",
            "/r/.ring",
            "/dev/nvidia0",
            "/r/x.ring/ (deleted)",
        ] {
            assert!(!names_a_ring(Path::new(no)), "{no}");
        }
    }
}
