//! The one error type of the reports crate.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O call failed; `op` says which (e.g. "fsync", "rename").
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file exists but is not a valid incident (corrupt, hostile or from an incompatible writer).
    #[error("{}: not a valid incident file: {source}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot serialize incident: {0}")]
    Serialize(#[source] serde_json::Error),
    /// No incident with that id in the store.
    #[error("no incident `{id}` in {} (looked for {})", dir.display(), path.display())]
    NotFound {
        id: String,
        dir: PathBuf,
        path: PathBuf,
    },
    /// The store directory itself does not exist.
    #[error("incident directory {} does not exist", dir.display())]
    NoStore { dir: PathBuf },
    /// An incident id that could escape the store directory or name a temporary file.
    #[error("invalid incident id `{0}`: expected a name like 20261202T113400Z-gpu01-4242")]
    InvalidId(String),
    /// A file name for `IncidentHandle::write_file` that is absolute, hidden, reserved or escapes the incident.
    #[error("invalid file name `{name}` inside an incident: {why}")]
    InvalidName { name: String, why: &'static str },
    /// A file or directory of the store refused before anything of it was read (a symlink, a FIFO, a device …);
    /// the message says what is wrong with it, never what it holds.
    #[error("{}: {why}", path.display())]
    Untrusted {
        path: PathBuf,
        why: capture::error::Rejection,
    },
    /// A file larger than the reader accepts.
    #[error("{}: {size} bytes is larger than the {limit}-byte limit", path.display())]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    /// A raw file that would take its incident over the per-incident byte budget (not written).
    #[error("{name}: {size} bytes would take incident {id} to {total} bytes, over its {limit}-byte budget")]
    OverBudget {
        id: String,
        name: String,
        size: u64,
        total: u64,
        limit: u64,
    },
    /// The incident was removed by retention (the store's quota) while its writer still held it.
    #[error("incident {id} was removed by retention: {why}")]
    Dropped { id: String, why: String },
}

impl Error {
    pub(crate) fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { op, path, source }
    }

    pub(crate) fn errno(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(nix::errno::Errno) -> Error {
        let path = path.into();
        move |errno| Error::Io {
            op,
            path,
            source: std::io::Error::from(errno),
        }
    }

    /// A read through [`capture::untrusted`], in this crate's terms.
    pub(crate) fn from_untrusted(err: capture::Error, path: &std::path::Path) -> Error {
        match err {
            capture::Error::Untrusted { path, why } => Error::Untrusted { path, why },
            capture::Error::Io { path, source } => Error::Io {
                op: "read",
                path,
                source,
            },
            other => Error::Io {
                op: "read",
                path: path.to_path_buf(),
                source: std::io::Error::other(other.to_string()),
            },
        }
    }
}
