//! The `pinned` strategy's pipeline: packing threads fill a ring of pinned staging buffers
//! while the submitting thread copies full buffers to the device asynchronously.
//!
//! - The arena: every chunk laid out (256-byte aligned) in one device allocation, by default
//!   from the session's memory pool so later uploads write memory the GPU has already mapped
//!   ([`ArenaMemory`]); the arena image is cut into *slices* of one staging buffer each, and
//!   each slice into *pieces*.
//! - Packing threads claim pieces from one atomic counter, in arena order, with no barrier per
//!   slice: a thread that is descheduled delays only its own piece, and threads run ahead into
//!   the next free buffers. A piece of slice `s` may be written once slice `s - buffers` was
//!   copied out (`released`).
//! - The submitting thread (the one whose context is current; it never packs) waits for a
//!   slice's pieces, issues `cuMemcpyHtoDAsync` and `cuEventRecord`, then hands back every
//!   buffer whose copy has finished (`cuEventQuery`), so packers run up to `buffers - 1` slices
//!   ahead when packing is the bottleneck. Only when every buffer holds a submitted copy does it
//!   block (`cuEventSynchronize` on the oldest): then copying is the bottleneck, and the copy
//!   queue holds `buffers - 1` slices while the packers refill the released buffer.
//! - Staging memory comes from `cuMemHostAlloc`, or from an anonymous mapping advised for
//!   transparent huge pages, faulted in by several threads and registered with
//!   `cuMemHostRegister` ([`StagingMemory`]).
//!
//! [`PinnedStats`] says where an upload's time went (staging, arena, waiting for packers,
//! waiting for copies), so a slow run explains itself.

mod layout;
mod options;
mod pipeline;
mod stager;
mod staging;
mod upload;

use std::time::Instant;

use serde::Serialize;

use crate::pack::PackStore;
use crate::strategy::DeviceMemory;

pub use layout::{pack_range, ArenaLayout};
pub use options::{default_packing_threads, ArenaMemory, PinnedOptions, StagingMemory};
pub use stager::PinnedStager;
pub use staging::registration_groups;

/// Where one pinned upload's time went, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PinnedStats {
    /// Allocating and page-locking staging memory (0 when the stager was reused).
    pub staging_ns: u64,
    /// The arena's allocation.
    pub arena_ns: u64,
    /// What the arena was allocated as (`Pool`, or `Device` for `cuMemAlloc`).
    pub arena_memory: DeviceMemory,
    /// The submitting thread waiting for packers (pack-bound time), the first slice included.
    pub pack_wait_ns: u64,
    /// Of that: from the start of packing until the first slice was packed (start-up latency).
    pub first_slice_ns: u64,
    /// `cuMemHostRegister` of this upload's staging: at setup for a fresh stager (part of
    /// `staging_ns`), inside the upload for `Overlap` buffers used for the first time.
    pub register_ns: u64,
    /// From the call until every packer was started (arena layout, arena, thread starts).
    pub setup_ns: u64,
    /// The submitting thread issuing copies and checking events (waits excluded).
    pub submit_ns: u64,
    /// From the last copy's end until the call returns (joining packers, per-tensor views).
    pub finish_ns: u64,
    /// The submitting thread waiting for copies to finish (copy-bound time).
    pub copy_wait_ns: u64,
    /// `cuMemHostUnregister` inside a one-shot `Overlap` upload: groups of buffers it no longer
    /// needed, unlocked while it waited (the rest is in `teardown_ns`).
    pub unregister_ns: u64,
    /// Staging teardown (0 when the stager was reused).
    pub teardown_ns: u64,
    /// Staging was page-locked read-only for the device ([`PinnedOptions::read_only_staging`]
    /// and the device supports it).
    pub staging_read_only: bool,
    /// The store most pieces were packed with (`Auto` resolved; `Auto` only if the upload was
    /// too small to decide).
    pub store: PackStore,
    /// `Auto`: median per-thread packing speed of the calibration pieces, MB/s (0 if none).
    pub calibration_plain_mbps: u64,
    pub calibration_streaming_mbps: u64,
}

pub(crate) fn elapsed_ns(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}
