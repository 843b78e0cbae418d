//! The one error type of the crate.

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
    #[error("ring file is truncated: {len} bytes, the header needs {needed}")]
    Truncated { len: u64, needed: u64 },
    #[error("not a breadcrumb ring: bad magic \"{}\" (expected \"WEDGERNG\")", .found.escape_ascii())]
    BadMagic { found: [u8; 8] },
    #[error("unsupported ring format version {version} (this reader knows version 1)")]
    UnsupportedVersion { version: u32 },
    #[error("bad header size {size} (must be a multiple of 64 between 512 and 4096)")]
    BadHeaderSize { size: u32 },
    #[error("bad slot size {size} (must be a multiple of 64 between 128 and 4096)")]
    BadSlotSize { size: u32 },
    #[error("bad slot count {count} (must be a power of two between 1 and 1048576)")]
    BadSlotCount { count: u32 },
    #[error("unsupported clock id {clock} (version 1 rings use CLOCK_MONOTONIC = 1 or CLOCK_MONOTONIC_COARSE = 6)")]
    BadClock { clock: u32 },
    #[error("cannot create a ring: {0}")]
    Create(String),
}

/// Result with the crate's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
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
