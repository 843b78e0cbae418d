//! The one error type of the crate. A reader error says what is wrong with a file (its type, its
//! size, which header field is invalid), never the bytes or values found in it: a hostile ring
//! directory can point a `.ring` name at any file, and these messages reach logs.

use std::path::PathBuf;

/// Everything that can go wrong creating, writing or reading a ring.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: no such ring file")]
    NotFound { path: PathBuf },
    #[error("{path}: {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("ring file: {action}: {source}")]
    Read {
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: is a symbolic link; refusing to follow it (strict mode)")]
    Symlink { path: PathBuf },
    #[error("{path}: not a regular file")]
    NotRegular { path: PathBuf },
    #[error("{path}: owned by uid {owner}, expected uid {expected} (strict mode)")]
    WrongOwner {
        path: PathBuf,
        owner: u32,
        expected: u32,
    },
    #[error("ring file is {len} bytes, more than the {cap}-byte limit")]
    TooLarge { len: u64, cap: u64 },
    #[error("ring file is truncated: {len} bytes, shorter than its header requires")]
    Truncated { len: u64 },
    #[error("not a breadcrumb ring: bad magic (the file does not start with \"WEDGERNG\")")]
    BadMagic,
    #[error("unsupported ring format version (this reader knows versions 1 and 2)")]
    UnsupportedVersion,
    #[error("bad header size (must be a multiple of 64 between 512 and 4096)")]
    BadHeaderSize,
    #[error("bad slot size (must be a multiple of 64 between 128 and 4096)")]
    BadSlotSize,
    #[error("bad slot count (must be a power of two between 1 and 1048576)")]
    BadSlotCount,
    #[error(
        "a ring of {slots} slots is too large: at most {max_slots} slots (WEDGE_CAPTURE_RING_SLOTS), \
         a file of at most {max_bytes} bytes, the largest ring the agent reads"
    )]
    RingTooLarge {
        slots: u64,
        max_slots: u32,
        max_bytes: u64,
    },
    #[error("unsupported clock id (rings use CLOCK_MONOTONIC = 1 or CLOCK_MONOTONIC_COARSE = 6)")]
    BadClock,
    #[error(
        "bad lane count (version 2: a power of two between 1 and 4096, at most the slot count)"
    )]
    BadLaneCount,
    #[error("bad counter (version 2: unknown counter kind, or a counter with no frequency)")]
    BadCounter,
    #[error("cannot create a ring: {0}")]
    Create(String),
}

/// Result with the crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn read(action: &'static str, source: std::io::Error) -> Self {
        Error::Read { action, source }
    }

    /// Names the path in an error made while reading an already opened file.
    pub(crate) fn at(self, path: &std::path::Path) -> Self {
        match self {
            Error::Read { action, source } => Error::io(path, action, source),
            Error::NotRegular { .. } => Error::NotRegular { path: path.into() },
            other => other,
        }
    }

    pub(crate) fn io(
        path: impl Into<PathBuf>,
        action: &'static str,
        source: std::io::Error,
    ) -> Self {
        let path = path.into();
        if source.kind() == std::io::ErrorKind::NotFound {
            Error::NotFound { path }
        } else {
            Error::Io {
                path,
                action,
                source,
            }
        }
    }
}
