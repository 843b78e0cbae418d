//! What an upload produces, whatever the strategy: which strategy ran ([`StrategyKind`]), the device
//! allocations and per-tensor [`View`]s of an [`Uploaded`], [`Progress`] reports, and for `pinned`
//! where the time went ([`PinnedStats`]); the helpers every strategy builds them with.

use std::time::Instant;

use serde::Serialize;

use crate::driver::{DevicePtr, Stream};
use crate::error::{Error, Result};
use crate::pack::PackStore;
use crate::plan::{Placement, Plan};
use crate::trace::{Site, Traced};
use crate::workload::TensorSource;

/// Which strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StrategyKind {
    Ztensor,
    Managed,
    Pinned,
}

impl StrategyKind {
    pub const ALL: [StrategyKind; 3] = [
        StrategyKind::Ztensor,
        StrategyKind::Managed,
        StrategyKind::Pinned,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StrategyKind::Ztensor => "ztensor",
            StrategyKind::Managed => "managed",
            StrategyKind::Pinned => "pinned",
        }
    }
}

impl std::str::FromStr for StrategyKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "ztensor" => Ok(StrategyKind::Ztensor),
            "managed" => Ok(StrategyKind::Managed),
            "pinned" => Ok(StrategyKind::Pinned),
            other => Err(Error::InvalidOptions(format!(
                "unknown strategy {other:?} (ztensor, managed, pinned)"
            ))),
        }
    }
}

/// What kind of device memory an allocation is, which decides how it is freed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceMemory {
    /// `cuMemAlloc`, freed with `cuMemFree`.
    Device,
    /// `cuMemAllocManaged`, freed with `cuMemFree`.
    Managed,
    /// `cuMemAllocFromPoolAsync` from the session's arena pool, freed with `cuMemFreeAsync`
    /// (back to the pool, still mapped, for the next upload).
    Pool,
}

/// One device allocation made by an upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Allocation {
    pub ptr: DevicePtr,
    pub bytes: u64,
    pub memory: DeviceMemory,
}

/// Where one tensor lives on the device (ztensor's per-tensor view).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct View {
    pub tensor: usize,
    pub chunk: u32,
    /// Offset inside the chunk.
    pub offset: u64,
    pub bytes: u64,
    pub device_ptr: DevicePtr,
    /// Index into [`Uploaded::allocations`].
    pub allocation: usize,
}

/// A finished upload. Free it with [`Uploaded::free`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Uploaded {
    pub strategy: StrategyKind,
    pub allocations: Vec<Allocation>,
    pub views: Vec<View>,
    pub chunks: usize,
    pub bytes: u64,
    /// `pinned` only: where the time went.
    pub pinned: Option<PinnedStats>,
}

impl Uploaded {
    /// Frees every allocation (all are attempted; the first error is returned).
    pub fn free(self, t: &Traced) -> Result<()> {
        free_all(t, &self.allocations, &Site::plain("free"))
    }
}

pub(crate) fn free_all(t: &Traced, allocations: &[Allocation], site: &Site) -> Result<()> {
    let mut first_err = None;
    for a in allocations.iter().rev() {
        // SAFETY: each allocation was made by this upload, is freed once (the list is consumed
        // or abandoned by the caller), and the caller synchronized any copy into it (so the
        // legacy stream may free a pool allocation at once).
        let freed = unsafe {
            match a.memory {
                DeviceMemory::Device | DeviceMemory::Managed => t.mem_free(site, a.ptr, a.bytes),
                DeviceMemory::Pool => t.mem_free_async(site, a.ptr, Stream::LEGACY, a.bytes),
            }
        };
        if let Err(e) = freed {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// Progress of an upload, reported after each chunk or slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub unit: &'static str,
    pub done: u32,
    pub count: u32,
    pub bytes_done: u64,
    pub bytes_total: u64,
}

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
    /// Staging was page-locked read-only for the device ([`PinnedOptions::read_only_staging`](crate::pinned::PinnedOptions::read_only_staging)
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

/// The host bytes of a placed tensor, checked against the plan (a source whose data does not
/// match its info must fail the upload, not write past the tensor's place).
pub(crate) fn placed_bytes<'s>(src: &'s dyn TensorSource, p: &Placement) -> Result<&'s [u8]> {
    let bytes = src.bytes(p.tensor);
    if bytes.len() as u64 != p.bytes {
        return Err(Error::InvalidOptions(format!(
            "tensor {} has {} bytes of host data, planned {}",
            p.tensor,
            bytes.len(),
            p.bytes
        )));
    }
    Ok(bytes)
}

pub(crate) fn views_for(
    plan: &Plan,
    chunk: usize,
    base: DevicePtr,
    allocation: usize,
    views: &mut Vec<View>,
) {
    let c = &plan.chunks[chunk];
    views.extend(plan.placements[c.placements()].iter().map(|p| View {
        tensor: p.tensor,
        chunk: p.chunk,
        offset: p.offset,
        bytes: p.bytes,
        device_ptr: base + p.offset,
        allocation,
    }));
}
