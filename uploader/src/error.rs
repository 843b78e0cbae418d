//! The crate's one error type.

use crate::call_table::CallKind;

/// Everything that can go wrong planning, uploading or verifying.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// libcuda is missing, lacks a symbol we need, or cannot initialise a device. Callers map
    /// this to "no driver" (the agent's exit code 6).
    #[error("CUDA driver unavailable: {0}")]
    NoDriver(String),

    /// A driver call returned an error code.
    #[error("{} failed: {name} ({code})", call.cuda_name())]
    Driver {
        call: CallKind,
        code: i32,
        name: String,
    },

    /// An option is out of range or inconsistent.
    #[error("invalid option: {0}")]
    InvalidOptions(String),

    /// The strategy cannot run on this device (for example managed memory without concurrent
    /// managed access).
    #[error("unsupported here: {0}")]
    Unsupported(String),

    /// The upload would need more device memory than the device reports free.
    #[error("not enough device memory: need {need} bytes, {free} free (limit {limit} bytes)")]
    InsufficientMemory { need: u64, free: u64, limit: u64 },

    /// Chunk `chunk` (0-based) of `count` failed; every allocation made by this upload was freed.
    #[error("upload failed at {unit} {} of {count} (all earlier allocations freed): {source}", chunk + 1)]
    ChunkFailed {
        unit: &'static str,
        chunk: u32,
        count: u32,
        #[source]
        source: Box<Error>,
    },

    /// Read back from the device, a tensor's bytes differ from its host data.
    #[error("verify failed: tensor {tensor} differs at byte {offset} of {bytes}")]
    VerifyMismatch {
        tensor: usize,
        offset: u64,
        bytes: u64,
    },

    /// An operating-system call failed (for example mapping staging memory).
    #[error("{what}: {source}")]
    Os {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },

    /// A packing worker thread panicked or vanished.
    #[error("packing worker failed: {0}")]
    Worker(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The driver result code to record in a breadcrumb's exit (0 would mean success).
    pub fn result_code(&self) -> i64 {
        match self {
            Error::Driver { code, .. } => i64::from(*code),
            Error::ChunkFailed { source, .. } => source.result_code(),
            _ => -1,
        }
    }

    /// True when the cause is a missing or unusable driver (exit code 6 in the agent).
    pub fn is_no_driver(&self) -> bool {
        match self {
            Error::NoDriver(_) => true,
            Error::ChunkFailed { source, .. } => source.is_no_driver(),
            _ => false,
        }
    }
}

/// Chunk (or slice) `index` of `count` failed with `source` (counts saturate at `u32::MAX`).
pub(crate) fn chunk_failed(unit: &'static str, index: usize, count: usize, source: Error) -> Error {
    let saturated = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    Error::ChunkFailed {
        unit,
        chunk: saturated(index),
        count: saturated(count),
        source: Box::new(source),
    }
}
