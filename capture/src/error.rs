//! The capture library's one error type.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bytes from a /proc file (or a recorded snapshot) that do not have the expected shape.
    #[error("cannot parse {what}: {why}")]
    Parse { what: &'static str, why: String },
    /// The process (not one of its threads) does not exist under the proc root.
    #[error("no such process: {pid} (under {root})")]
    NoSuchProcess { pid: i32, root: PathBuf },
    /// The task vanished while it was being read (ENOENT/ESRCH): a marker, not a failure.
    #[error("{path}: gone (the task exited while it was read)")]
    Gone { path: PathBuf },
    /// EACCES/EPERM; `needs` names the missing privilege.
    #[error("{path}: permission denied (needs {needs})")]
    PermissionDenied { path: PathBuf, needs: &'static str },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file larger than any real /proc file of its kind (a hostile fake tree).
    #[error("{path}: larger than {limit} bytes")]
    TooLarge { path: PathBuf, limit: usize },
    /// A file from a directory others can write, refused before any of its bytes were read
    /// ([`crate::untrusted`]); the message says what is wrong with it, never what it holds.
    #[error("{path}: {why}")]
    Untrusted { path: PathBuf, why: Rejection },
    /// A netlink request (taskstats, the proc connector) the kernel refused or could not answer.
    #[error("{what}: {source}")]
    Netlink {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// The BPF task iterator ([`crate::task_iter`]) cannot be used here; the text says why (privilege,
    /// kernel BTF, the verifier, the kernel's age, the pid namespace) for the start line and `doctor`.
    #[error("{0}")]
    TaskIterUnavailable(String),
    /// A `bpf(2)` call or an iterator read failed (the process watched is usually gone).
    #[error("{what}: {source}")]
    Bpf {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// Setting up a test fixture (frozen filesystem) failed.
    #[error("{0}")]
    Fixture(String),
}

impl Error {
    pub fn is_gone(&self) -> bool {
        matches!(self, Error::Gone { .. })
    }

    pub fn is_permission_denied(&self) -> bool {
        matches!(self, Error::PermissionDenied { .. })
    }
}

/// Why a file was refused before any of its bytes were read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("is a symbolic link (not followed)")]
    Symlink,
    #[error("is {0}, not a regular file")]
    NotRegular(&'static str),
    #[error("is {len} bytes, larger than the {limit}-byte limit for this kind of file")]
    TooLarge { len: u64, limit: u64 },
    #[error("is owned by uid {uid}, not by uid {expected}")]
    WrongOwner { uid: u32, expected: u32 },
}
