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
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
