//! Opening files from directories that others can write (the ring directory a container writes into, the
//! incident directory, a config path): the one way the agent opens such a file.
//!
//! A hostile writer can put anything there: a FIFO (an ordinary `open` blocks in `fifo_open` forever), a
//! symlink to `/etc/shadow` (an ordinary `open` follows it), a device node, a file of any size. So:
//! 1. `open(O_PATH | O_NOFOLLOW | O_CLOEXEC)`: never follows a final symlink, never opens the object
//!    itself (no FIFO open, no device open side effect);
//! 2. `fstat` that handle: only a regular file of at most `max_len` bytes (and the required owner, if
//!    any) goes on;
//! 3. re-open that very inode for reading through the handle's `/proc/self/fd` link with
//!    `O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC` (no window to swap the file in between), falling
//!    back to an `O_NOFOLLOW | O_NONBLOCK` open and a second `fstat` where `/proc` is not mounted;
//! 4. reads are bounded by `max_len` even when the file grows meanwhile.
//!
//! A [`Rejection`] (in [`crate::error`], beside the error that carries it) says what is wrong with the
//! file (its type, its size, its owner), never what it holds: nothing from a rejected file's content may
//! reach a log.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Rejection, Result};

/// What a caller accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest file accepted, and most bytes ever read.
    pub max_len: u64,
    /// Only files owned by this uid (None: any owner).
    pub owner: Option<u32>,
}

impl Limits {
    pub const fn max_len(max_len: u64) -> Limits {
        Limits {
            max_len,
            owner: None,
        }
    }
}

/// (device, inode, mtime, length): enough to remember a rejected file and notice when it changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileIdentity {
    pub dev: u64,
    pub ino: u64,
    pub mtime_ns: i128,
    pub len: u64,
}

impl FileIdentity {
    pub fn of(meta: &std::fs::Metadata) -> FileIdentity {
        FileIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            len: meta.len(),
        }
    }
}

/// A regular file opened for reading without following links or blocking.
#[derive(Debug)]
pub struct UntrustedFile {
    file: File,
    path: PathBuf,
    identity: FileIdentity,
    uid: u32,
    limit: u64,
}

fn kind_of(mode: u32) -> Option<&'static str> {
    match mode & libc::S_IFMT {
        libc::S_IFREG => None,
        libc::S_IFIFO => Some("a FIFO"),
        libc::S_IFSOCK => Some("a socket"),
        libc::S_IFCHR => Some("a character device"),
        libc::S_IFBLK => Some("a block device"),
        libc::S_IFDIR => Some("a directory"),
        libc::S_IFLNK => Some("a symbolic link"),
        _ => Some("not a regular file"),
    }
}

fn rejected(path: &Path, why: Rejection) -> Error {
    Error::Untrusted {
        path: path.to_path_buf(),
        why,
    }
}

fn io(path: &Path, source: std::io::Error) -> Error {
    if source.raw_os_error() == Some(libc::ELOOP) {
        return rejected(path, Rejection::Symlink);
    }
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Checks what `fstat` says against `limits`.
fn check(path: &Path, meta: &std::fs::Metadata, limits: &Limits) -> Result<()> {
    if let Some(kind) = kind_of(meta.mode()) {
        return Err(rejected(
            path,
            if kind == "a symbolic link" {
                Rejection::Symlink
            } else {
                Rejection::NotRegular(kind)
            },
        ));
    }
    if meta.len() > limits.max_len {
        return Err(rejected(
            path,
            Rejection::TooLarge {
                len: meta.len(),
                limit: limits.max_len,
            },
        ));
    }
    if let Some(expected) = limits.owner {
        if meta.uid() != expected {
            return Err(rejected(
                path,
                Rejection::WrongOwner {
                    uid: meta.uid(),
                    expected,
                },
            ));
        }
    }
    Ok(())
}

/// Opens `path` as described in the module map; a FIFO, socket, device, directory or symlink, a file
/// over `limits.max_len` or of the wrong owner is [`Error::Untrusted`] and nothing of it is read.
pub fn open(path: &Path, limits: Limits) -> Result<UntrustedFile> {
    let handle = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| io(path, e))?;
    let meta = handle.metadata().map_err(|e| io(path, e))?;
    check(path, &meta, &limits)?;
    let file = reopen(&handle)
        .or_else(|_| {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(
                    libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC,
                )
                .open(path)
        })
        .map_err(|e| io(path, e))?;
    // Same inode as the checked handle (the fallback open could have raced a rename).
    let meta = file.metadata().map_err(|e| io(path, e))?;
    check(path, &meta, &limits)?;
    let identity = FileIdentity::of(&meta);
    if identity.ino != handle.metadata().map_err(|e| io(path, e))?.ino() {
        return Err(io(
            path,
            std::io::Error::other("the file was replaced while it was opened"),
        ));
    }
    Ok(UntrustedFile {
        file,
        path: path.to_path_buf(),
        identity,
        uid: meta.uid(),
        limit: limits.max_len,
    })
}

/// Opens the inode behind an `O_PATH` handle for reading, through its magic link.
fn reopen(handle: &File) -> std::io::Result<File> {
    let link = format!("/proc/self/fd/{}\0", handle.as_raw_fd());
    let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: `link` is NUL-terminated and lives across the call; open(2) reads only that string.
    let fd = unsafe { libc::open(link.as_bytes().as_ptr().cast(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: open(2) just returned this descriptor and nothing else owns it.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

impl UntrustedFile {
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// (dev, inode, mtime, length) as of the open.
    pub fn identity(&self) -> FileIdentity {
        self.identity
    }

    pub fn len(&self) -> u64 {
        self.identity.len
    }

    pub fn is_empty(&self) -> bool {
        self.identity.len == 0
    }

    pub fn owner_uid(&self) -> u32 {
        self.uid
    }

    /// Up to `n` bytes from offset 0 (fewer at the end of the file), never more than the limit.
    pub fn read_prefix(&self, n: usize) -> Result<Vec<u8>> {
        self.read_up_to((n as u64).min(self.limit) as usize)
    }

    fn read_up_to(&self, n: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; n];
        let mut filled = 0;
        while filled < n {
            match self.file.read_at(&mut buf[filled..], filled as u64) {
                Ok(0) => break,
                Ok(k) => filled += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(io(&self.path, e)),
            }
        }
        buf.truncate(filled);
        Ok(buf)
    }

    /// The whole file, at most the limit: a file that grew past it since the open is
    /// [`Rejection::TooLarge`].
    pub fn read_all(&self) -> Result<Vec<u8>> {
        use std::io::{Read, Seek};
        let mut reader = &self.file;
        reader.rewind().map_err(|e| io(&self.path, e))?;
        let mut bytes = Vec::with_capacity(self.identity.len.min(self.limit) as usize);
        reader
            .take(self.limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| io(&self.path, e))?;
        if bytes.len() as u64 > self.limit {
            return Err(rejected(
                &self.path,
                Rejection::TooLarge {
                    len: bytes.len() as u64,
                    limit: self.limit,
                },
            ));
        }
        Ok(bytes)
    }
}

/// [`open`] then [`UntrustedFile::read_all`].
pub fn read(path: &Path, limits: Limits) -> Result<Vec<u8>> {
    open(path, limits)?.read_all()
}

/// A name fit for a log line or a report: control characters written out and invalid UTF-8 bytes as `\xNN`
/// ([`crate::escape::lossy`], the workspace's one escaper). Directory entry names are chosen by whoever writes
/// the directory.
pub fn printable_name(name: &std::ffi::OsStr) -> String {
    crate::escape::lossy(name.as_bytes()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_reads_within_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a");
        std::fs::write(&path, b"hello").unwrap();
        let file = open(&path, Limits::max_len(16)).unwrap();
        assert_eq!(file.len(), 5);
        assert_eq!(file.read_prefix(3).unwrap(), b"hel");
        assert_eq!(file.read_all().unwrap(), b"hello");
        assert!(matches!(
            read(&path, Limits::max_len(4)),
            Err(Error::Untrusted {
                why: Rejection::TooLarge { len: 5, limit: 4 },
                ..
            })
        ));
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.ring");
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = open(&path, Limits::max_len(1 << 20)).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Untrusted {
                    why: Rejection::NotRegular("a FIFO"),
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn a_symlink_is_not_followed_and_its_target_never_appears() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, b"root:*:19000:0:99999:7:::").unwrap();
        let link = dir.path().join("s.ring");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let err = open(&link, Limits::max_len(1 << 20)).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("symbolic link"), "{text}");
        assert!(!text.contains("root:"), "{text}");
    }

    #[test]
    fn directories_and_owners_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            open(dir.path(), Limits::max_len(1)),
            Err(Error::Untrusted {
                why: Rejection::NotRegular("a directory"),
                ..
            })
        ));
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let mine = nix::unistd::geteuid().as_raw();
        let limits = Limits {
            max_len: 8,
            owner: Some(mine.wrapping_add(1)),
        };
        assert!(matches!(
            open(&path, limits),
            Err(Error::Untrusted {
                why: Rejection::WrongOwner { .. },
                ..
            })
        ));
        let limits = Limits {
            max_len: 8,
            owner: Some(mine),
        };
        assert_eq!(open(&path, limits).unwrap().owner_uid(), mine);
    }

    #[test]
    fn names_with_control_bytes_are_escaped() {
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(printable_name(std::ffi::OsStr::new("a.ring")), "a.ring");
        let odd = printable_name(std::ffi::OsStr::from_bytes(b"\x1b[31mx\n.ring"));
        assert!(!odd.contains('\x1b') && !odd.contains('\n'), "{odd}");
        let bad = printable_name(std::ffi::OsStr::from_bytes(b"caf\xc3\xa9\xff\x00.ring"));
        assert_eq!(bad, "caf\u{e9}\\xff\\x00.ring");
    }
}
