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

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;

use crate::driver::{DeviceAttribute, Event, Stream};
use crate::error::{Error, Result};
use crate::pack::{self, PackStore};
use crate::plan::Plan;
use crate::strategy::Uploaded;
use crate::strategy::{
    chunk_failed, free_all, placed_bytes, views_for, Allocation, DeviceMemory, Progress,
    StrategyKind,
};
use crate::trace::{sat_u32, Site, Traced};
use crate::workload::TensorSource;

/// Where pinned staging memory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StagingMemory {
    /// `cuMemHostAlloc`: the driver allocates and page-locks.
    HostAlloc,
    /// An anonymous mapping (2 MiB aligned, `MADV_HUGEPAGE`) page-locked with
    /// `cuMemHostRegister`: fewer, larger pages to pin where transparent huge pages are on.
    Register,
    /// The same mapping, faulted in by the packing threads (a huge page each at a time) and
    /// page-locked by the upload that first needs it, while packing goes on: the first buffer
    /// is locked after one small registration, the rest in doubling groups
    /// ([`registration_groups`]) while the submitter waits for packers. An upload of a stager
    /// made for it alone unlocks each group it no longer needs while it waits for packers.
    Overlap,
}

impl StagingMemory {
    pub fn name(self) -> &'static str {
        match self {
            StagingMemory::HostAlloc => "hostalloc",
            StagingMemory::Register => "register",
            StagingMemory::Overlap => "overlap",
        }
    }
}

/// Where the `pinned` strategy's device arena comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ArenaMemory {
    /// The session's stream-ordered pool ([`Traced::arena_pool`]), which keeps freed arenas
    /// mapped: from the second upload of a process on, copies land in memory the GPU has
    /// already written. Falls back to `cuMemAlloc` where the device has no memory pools.
    Pool,
    /// A fresh `cuMemAlloc` per upload.
    Alloc,
}

impl ArenaMemory {
    pub fn name(self) -> &'static str {
        match self {
            ArenaMemory::Pool => "pool",
            ArenaMemory::Alloc => "alloc",
        }
    }
}

/// Settings of the `pinned` strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PinnedOptions {
    /// Pinned staging buffers (≥ 2 to overlap packing with copying).
    pub buffers: usize,
    /// Bytes per staging buffer (one asynchronous copy each).
    pub buffer_bytes: u64,
    /// Packing threads (the submitting thread does not pack).
    pub threads: usize,
    /// Idle threads spin (true) or sleep (false). Spinning avoids a wake-up per hand-off (tens
    /// of microseconds in a VM) at the cost of CPU while an upload runs.
    pub spin: bool,
    /// Bytes a packing thread claims at a time (rounded up to 64).
    pub piece_bytes: u64,
    /// Plain or non-temporal stores into staging memory, or `Auto`: time both per upload.
    pub store: PackStore,
    /// How staging memory is allocated and page-locked.
    pub staging: StagingMemory,
    /// Where the device arena comes from.
    pub arena: ArenaMemory,
    /// The submitting thread packs pieces while it waits for packers, instead of spinning: one
    /// more packer where packing is the bottleneck, idle where copying is.
    pub submitter_packs: bool,
    /// A stager made for a single upload (`strategy::upload`, the cold path) sizes its ring to
    /// the upload: one buffer per 8 slices, at least 6, at most `buffers`. On the real workload
    /// (53 slices of 4 MiB) 6 buffers lock 24 MiB instead of 32 and beat 8 cold by 2-7 points of
    /// the copy ceiling with writable locks (runs 25-28), level with read-only ones; 4 buffers
    /// lost 4-10 points to waits, and 4 GiB keeps the whole ring (BENCHMARKS.md).
    pub fit_ring: bool,
    /// Page-lock `Register`/`Overlap` staging read-only for the device
    /// (`CU_MEMHOSTREGISTER_READ_ONLY`) where the device supports it: the device only reads
    /// staging, and unlocking read-only pages takes half as long (no page is marked dirty).
    pub read_only_staging: bool,
}

/// The default number of packing threads on a machine with `cpus` CPUs.
pub fn default_packing_threads(cpus: usize) -> usize {
    (cpus * 3 / 4).max(cpus.saturating_sub(2)).clamp(1, 14)
}

impl Default for PinnedOptions {
    fn default() -> Self {
        PinnedOptions {
            buffers: 8,
            buffer_bytes: 4 << 20,
            // All CPUs but two (at least three quarters of them), at most 14: the driver's own
            // threads and the submitting thread need CPUs too. On an H200 host (16 CPUs), 14
            // packers beat 12 in each of 6 same-process comparisons on 217 MB of 772-byte tensors
            // (cold +0.2-4 points of the copy ceiling, reused +1-19), 16 lost to both, and 4 GiB did
            // not change (BENCHMARKS.md, runs 23-24).
            threads: default_packing_threads(
                std::thread::available_parallelism().map_or(1, |p| p.get()),
            ),
            spin: true,
            piece_bytes: 256 << 10,
            // Plain won end to end in every 4 GiB run of the current pipeline (BENCHMARKS.md);
            // `Auto`'s per-piece timing could not tell the two apart on a busy host.
            store: PackStore::Plain,
            // Cold uploads of the real workload: 57-58 % of the copy ceiling against 48-52 % for
            // `Register` in the same processes; reused and 4 GiB unchanged (BENCHMARKS.md, run 25).
            staging: StagingMemory::Overlap,
            // Fresh cuMemAlloc memory filled ~10 ms slower per 4 GiB (BENCHMARKS.md).
            arena: ArenaMemory::Pool,
            submitter_packs: false,
            fit_ring: true,
            read_only_staging: true,
        }
    }
}

impl PinnedOptions {
    pub fn validate(&self) -> Result<()> {
        if self.buffers == 0 || self.buffer_bytes == 0 || self.threads == 0 || self.piece_bytes == 0
        {
            return Err(Error::InvalidOptions(
                "pinned: buffers, buffer size, threads and piece size must be > 0".into(),
            ));
        }
        if self.buffer_bytes > 1 << 40 || self.buffers > 4096 {
            return Err(Error::InvalidOptions(
                "pinned: at most 4096 staging buffers of at most 1 TiB".into(),
            ));
        }
        Ok(())
    }

    /// A compact description, e.g. `8x2MiBx8:spin:streaming:hostalloc:pool:piece=256KiB`.
    pub fn describe(&self) -> String {
        format!(
            "{}x{}x{}:{}:{}:{}:{}:piece={}{}{}{}",
            self.buffers,
            human_bytes(self.buffer_bytes),
            self.threads,
            if self.spin { "spin" } else { "park" },
            self.store.name(),
            self.staging.name(),
            self.arena.name(),
            human_bytes(self.piece_bytes),
            if self.submitter_packs { ":help" } else { "" },
            if self.fit_ring { ":fit" } else { "" },
            if self.read_only_staging {
                ""
            } else {
                ":writable"
            }
        )
    }
}

fn human_bytes(b: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return format!("{}{unit}", b >> shift);
        }
    }
    b.to_string()
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

/// Arena alignment of each chunk inside the pinned strategy's single device allocation.
const CHUNK_ALIGN: u64 = 256;

/// Transparent huge page size the registered mapping is aligned to.
const HUGE_PAGE: usize = 2 << 20;

/// Where a plan's chunks and tensors lie in the pinned strategy's one device allocation: each
/// chunk at the next [`CHUNK_ALIGN`] boundary, its tensors at their planned offsets (ascending:
/// chunks are laid out in order). Per chunk only: a tensor's place is computed when needed, so
/// an upload of many small tensors allocates and fills no per-tensor table before packing.
pub struct ArenaLayout {
    pub(crate) chunk_base: Vec<u64>,
    pub(crate) bytes: u64,
}

impl ArenaLayout {
    pub fn new(plan: &Plan) -> ArenaLayout {
        let mut chunk_base = Vec::with_capacity(plan.chunks.len());
        let mut end = 0u64;
        for c in &plan.chunks {
            let base = end.div_ceil(CHUNK_ALIGN) * CHUNK_ALIGN;
            chunk_base.push(base);
            end = base + c.bytes;
        }
        ArenaLayout {
            chunk_base,
            bytes: end,
        }
    }

    /// Bytes of the arena (the end of its last chunk).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Arena offset of `plan`'s placement `i` (`None` past the last).
    pub fn start(&self, plan: &Plan, i: usize) -> Option<u64> {
        let p = plan.placements.get(i)?;
        Some(self.chunk_base[p.chunk as usize] + p.offset)
    }

    /// Placements overlapping arena range `[from, to)`.
    fn overlapping(&self, plan: &Plan, from: u64, to: u64) -> std::ops::Range<usize> {
        let start = |p: &crate::plan::Placement| self.chunk_base[p.chunk as usize] + p.offset;
        // Placements are in arena order, so their starts ascend: binary searches.
        let starting_before = |at: u64| plan.placements.partition_point(|p| start(p) < at);
        let first = starting_before(from);
        // The tensor before `first` may straddle `from`.
        let first = if first > 0
            && start(&plan.placements[first - 1]) + plan.placements[first - 1].bytes > from
        {
            first - 1
        } else {
            first
        };
        let last = starting_before(to);
        first..last.max(first)
    }
}

/// Buffers registered by one `cuMemHostRegister` each, in ring order: `[0]`, `[1]`, `[2, 3]`,
/// `[4..8)`, … (boundaries at powers of two, the last group cut at `buffers`). Filled lazily
/// (`Overlap`), the first buffer is page-locked after one small registration, so the first copy
/// starts early, and the ring needs only about log2(buffers) + 1 calls (each costs a fixed
/// ~60 µs on top of ~30 µs per MiB on an H200 host).
pub fn registration_groups(buffers: usize) -> Vec<std::ops::Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0;
    while start < buffers {
        let end = if start == 0 { 1 } else { start * 2 }.min(buffers);
        groups.push(start..end);
        start = end;
    }
    groups
}

/// Consecutive staging buffers page-locked (or not yet) by one registration.
#[derive(Debug)]
struct Registration {
    buffers: std::ops::Range<usize>,
    /// Page-locked now. Only the submitting thread registers and unregisters.
    registered: AtomicBool,
}

/// `Overlap` staging's page faults, taken by the packing threads of the stager's first
/// uploads before they pack: each claims the next huge page of the mapping (in ring order, so
/// the first buffers are ready first) and writes to it. Nothing is packed into a page, and no
/// group is registered, before its fault is done: registering touched memory is ~7× faster
/// than letting `cuMemHostRegister` fault it in on one thread, and the zeroing write must not
/// race a packer's bytes. `Register` staging's [`prefault`] takes the same faults before it
/// registers, from threads of its own.
#[derive(Debug)]
struct FaultPass {
    /// The mapping's address (as an integer: the pass is shared between threads).
    base: usize,
    /// Next huge page to claim.
    next: AtomicUsize,
    /// Per huge page: faulted in.
    done: Vec<AtomicBool>,
}

impl FaultPass {
    fn new(base: *mut u8, len: usize) -> FaultPass {
        FaultPass {
            base: base as usize,
            next: AtomicUsize::new(0),
            done: (0..len.div_ceil(HUGE_PAGE))
                .map(|_| AtomicBool::new(false))
                .collect(),
        }
    }

    /// Huge pages holding mapping offsets `[from, to)`.
    fn pages(from: usize, to: usize) -> std::ops::Range<usize> {
        from / HUGE_PAGE..to.div_ceil(HUGE_PAGE)
    }

    /// Claims the next page below `limit` and faults it in; false when every page below
    /// `limit` is claimed (some may still be faulting on other threads).
    fn fault_next(&self, limit: usize) -> bool {
        let limit = limit.min(self.done.len());
        let mut page = self.next.load(Ordering::Relaxed);
        loop {
            if page >= limit {
                return false;
            }
            match self.next.compare_exchange_weak(
                page,
                page + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => page = now,
            }
        }
        for at in (page * HUGE_PAGE..(page + 1) * HUGE_PAGE).step_by(4096) {
            // SAFETY: inside the mapping (`page < done.len()`, and the mapping's length is a
            // multiple of HUGE_PAGE), readable and writable. Only this thread claimed the page,
            // and until `done[page]` is set nobody else reads or writes it (packers and the
            // registering submitter wait for it).
            unsafe { std::ptr::write_volatile((self.base + at) as *mut u8, 0) };
        }
        // Release: the faulted, zeroed page is the packers' from here on.
        self.done[page].store(true, Ordering::Release);
        true
    }

    /// Every page holding mapping offsets `[from, to)` is faulted in.
    fn is_done(&self, from: usize, to: usize) -> bool {
        self.done[Self::pages(from, to)]
            .iter()
            .all(|d| d.load(Ordering::Acquire))
    }
}

/// Pinned staging memory: one allocation holding every buffer.
#[derive(Debug)]
struct Staging {
    base: *mut u8,
    /// Bytes allocated.
    len: usize,
    /// Distance between buffers (the buffer size rounded up to a page).
    stride: usize,
    memory: StagingMemory,
    /// The buffers' registrations: one group of all of them, page-locked at creation, but for
    /// `Overlap` staging ([`registration_groups`], each locked by the upload that first needs it).
    groups: Vec<Registration>,
    /// `Overlap`: the page faults still to take (by packing threads).
    faults: Option<FaultPass>,
    /// Page-locked read-only for the device (`CU_MEMHOSTREGISTER_READ_ONLY`).
    read_only: bool,
}

impl Staging {
    /// The registration group holding buffer `b`.
    fn group_of(&self, b: usize) -> usize {
        self.groups.partition_point(|g| g.buffers.end <= b)
    }

    /// Mapping offsets `[from, to)` of group `g`'s buffers.
    fn group_span(&self, g: usize) -> (usize, usize) {
        let buffers = &self.groups[g].buffers;
        (buffers.start * self.stride, buffers.end * self.stride)
    }

    /// Every page of group `g` is faulted in (always, but for `Overlap` staging).
    fn group_faulted(&self, g: usize) -> bool {
        let (from, to) = self.group_span(g);
        self.faults.as_ref().is_none_or(|f| f.is_done(from, to))
    }
}

/// Pinned staging buffers, their events and the copy stream. Create once and reuse across
/// uploads to keep page-locking out of the hot path; [`crate::strategy::upload`] makes a
/// fresh one per call.
#[derive(Debug)]
pub struct PinnedStager {
    options: PinnedOptions,
    staging: Option<Staging>,
    events: Vec<Event>,
    stream: Option<Stream>,
    /// Time `create` took (reported in the first upload's stats by `upload`).
    created_ns: u64,
    /// Of that, `cuMemHostRegister` (`Register` staging).
    created_register_ns: u64,
    /// Made for one upload ([`PinnedStager::create_one_shot`]).
    one_shot: bool,
}

/// An anonymous private mapping of `len` bytes (a multiple of [`HUGE_PAGE`]) aligned to
/// [`HUGE_PAGE`], advised for transparent huge pages.
fn map_huge_aligned(len: usize) -> Result<*mut u8> {
    let span = len
        .checked_add(HUGE_PAGE)
        .ok_or_else(|| Error::InvalidOptions("staging size overflows".into()))?;
    // SAFETY: a fresh anonymous mapping; no existing memory is affected.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(Error::Os {
            what: "mmap of pinned staging memory",
            source: std::io::Error::last_os_error(),
        });
    }
    let raw = raw.cast::<u8>();
    let lead = raw.align_offset(HUGE_PAGE);
    let trail = span - lead - len;
    // SAFETY: `raw..raw+span` is our mapping; we unmap its unaligned head and tail, keeping
    // `raw+lead .. raw+lead+len` (page-aligned: mmap returns pages and HUGE_PAGE is a multiple).
    unsafe {
        if lead > 0 {
            libc::munmap(raw.cast(), lead);
        }
        if trail > 0 {
            libc::munmap(raw.add(lead + len).cast(), trail);
        }
    }
    // SAFETY: inside the mapping just created (the kept part).
    let base = unsafe { raw.add(lead) };
    // Best effort: without transparent huge pages the registration still works, on 4 KiB pages.
    // SAFETY: advice on our own mapping.
    unsafe { libc::madvise(base.cast(), len, libc::MADV_HUGEPAGE) };
    Ok(base)
}

/// Faults in (and so zeroes) `base..base+len`, a fresh mapping of ours whose length is a
/// multiple of [`HUGE_PAGE`], from up to `threads` threads. `cuMemHostRegister` would otherwise
/// fault every page in itself, on one thread: on an H200 host, registering 32 MiB took 6.8 ms
/// untouched against 1.0 ms touched, and one thread faults 32 MiB in 4.6 ms.
fn prefault(base: *mut u8, len: usize, threads: usize) {
    let faults = FaultPass::new(base, len);
    let fault_all = || while faults.fault_next(usize::MAX) {};
    std::thread::scope(|scope| {
        for _ in 1..threads.clamp(1, faults.done.len().max(1)) {
            if std::thread::Builder::new()
                .spawn_scoped(scope, fault_all)
                .is_err()
            {
                // No thread to spare: this thread faults the rest.
                break;
            }
        }
        fault_all();
    });
}

/// Page-locks group `g` of `Overlap` staging unless it is locked; its pages must be faulted
/// in. Returns the nanoseconds the registration took (0 if there was none).
fn register_group(t: &Traced, site: &Site, s: &Staging, g: usize) -> Result<u64> {
    let group = &s.groups[g];
    if group.registered.load(Ordering::Acquire) {
        return Ok(0);
    }
    let (from, to) = s.group_span(g);
    let started = Instant::now();
    // SAFETY: the group's buffers lie in our mapping and start on a page (the stride is a
    // multiple of 4096); they are registered once (the flag is set right after, and only the
    // submitting thread registers) and unregistered by `unregister_group` before the unmap;
    // registered read-only only if nothing on the device writes staging (it is only ever a
    // copy's source); every page was faulted in by a write (`FaultPass`), so a read-only pin
    // holds the pages the packers write, not the shared zero page.
    unsafe {
        t.host_register(
            site,
            s.base.wrapping_add(from),
            (to - from) as u64,
            s.read_only,
        )
    }?;
    group.registered.store(true, Ordering::Release);
    Ok(elapsed_ns(started))
}

/// Unlocks group `g` of `Overlap` staging if it is locked; returns the nanoseconds it took.
///
/// # Safety
/// No copy out of the group's buffers may be in flight.
unsafe fn unregister_group(t: &Traced, site: &Site, s: &Staging, g: usize) -> Result<u64> {
    let group = &s.groups[g];
    if !group.registered.load(Ordering::Acquire) {
        return Ok(0);
    }
    let (from, to) = s.group_span(g);
    let started = Instant::now();
    // SAFETY: registered once by `register_group` at this address; no copy in flight (the
    // caller's contract). Still registered if this fails, so teardown tries again.
    unsafe { t.host_unregister(site, s.base.wrapping_add(from), (to - from) as u64) }?;
    group.registered.store(false, Ordering::Release);
    Ok(elapsed_ns(started))
}

impl PinnedStager {
    /// Allocates the staging memory, one event per buffer and the copy stream.
    pub fn create(t: &Traced, options: &PinnedOptions) -> Result<PinnedStager> {
        options.validate()?;
        let started = Instant::now();
        let mut stager = PinnedStager {
            options: *options,
            staging: None,
            events: Vec::new(),
            stream: None,
            created_ns: 0,
            created_register_ns: 0,
            one_shot: false,
        };
        let site = Site::plain("pinned setup");
        // Every buffer in one group, locked at creation (`HostAlloc`, `Register`).
        let locked_at_once = || {
            vec![Registration {
                buffers: 0..options.buffers,
                registered: AtomicBool::new(true),
            }]
        };
        let made = (|| -> Result<()> {
            stager.stream = Some(t.stream_create(&site)?);
            // A device that cannot say (an older driver) cannot take the flag either.
            let read_only = options.read_only_staging
                && options.staging != StagingMemory::HostAlloc
                && t.device_attribute(&site, DeviceAttribute::ReadOnlyHostRegisterSupported)
                    .is_ok_and(|supported| supported != 0);
            let stride = usize::try_from(options.buffer_bytes)
                .ok()
                .and_then(|b| b.checked_next_multiple_of(4096))
                .ok_or_else(|| Error::InvalidOptions("staging buffer too large".into()))?;
            let total = stride
                .checked_mul(options.buffers)
                .ok_or_else(|| Error::InvalidOptions("staging memory too large".into()))?;
            stager.staging = Some(match options.staging {
                StagingMemory::HostAlloc => Staging {
                    base: t.host_alloc_pinned(&site, total as u64)?,
                    len: total,
                    stride,
                    memory: StagingMemory::HostAlloc,
                    groups: locked_at_once(),
                    faults: None,
                    read_only: false,
                },
                StagingMemory::Overlap => {
                    let len = total.next_multiple_of(HUGE_PAGE);
                    let base = map_huge_aligned(len)?;
                    Staging {
                        base,
                        len,
                        stride,
                        memory: StagingMemory::Overlap,
                        groups: registration_groups(options.buffers)
                            .into_iter()
                            .map(|buffers| Registration {
                                buffers,
                                registered: AtomicBool::new(false),
                            })
                            .collect(),
                        faults: Some(FaultPass::new(base, len)),
                        read_only,
                    }
                }
                StagingMemory::Register => {
                    let len = total.next_multiple_of(HUGE_PAGE);
                    let base = map_huge_aligned(len)?;
                    prefault(base, len, options.threads);
                    let registering = Instant::now();
                    // SAFETY: our own fresh mapping of `len` bytes, page-aligned, unmapped only
                    // after unregistering (destroy); registered read-only only if nothing on the
                    // device writes it (staging is only ever a copy's source), and `prefault`
                    // wrote every page, so the pin holds the pages the packers write.
                    let registered_now =
                        unsafe { t.host_register(&site, base, len as u64, read_only) };
                    stager.created_register_ns = elapsed_ns(registering);
                    if let Err(e) = registered_now {
                        // SAFETY: our mapping, never registered, nothing refers to it.
                        unsafe { libc::munmap(base.cast(), len) };
                        return Err(e);
                    }
                    Staging {
                        base,
                        len,
                        stride,
                        memory: StagingMemory::Register,
                        groups: locked_at_once(),
                        faults: None,
                        read_only,
                    }
                }
            });
            for _ in 0..options.buffers {
                stager.events.push(t.event_create(&site)?);
            }
            Ok(())
        })();
        match made {
            Ok(()) => {
                stager.created_ns = elapsed_ns(started);
                Ok(stager)
            }
            Err(e) => {
                let _ = stager.destroy(t);
                Err(e)
            }
        }
    }

    /// Frees staging memory, events and stream (after waiting for the stream).
    pub fn destroy(self, t: &Traced) -> Result<()> {
        let site = Site::plain("pinned teardown");
        let mut first_err: Option<Error> = None;
        if let Some(stream) = self.stream {
            // SAFETY: our live stream; synchronized before anything it uses is freed.
            if let Err(e) = unsafe { t.stream_synchronize(&site, stream) } {
                first_err.get_or_insert(e);
            }
        }
        for &e in &self.events {
            // SAFETY: our live events, destroyed once.
            if let Err(err) = unsafe { t.event_destroy(&site, e) } {
                first_err.get_or_insert(err);
            }
        }
        if let Some(s) = &self.staging {
            match s.memory {
                StagingMemory::HostAlloc => {
                    // SAFETY: our pinned allocation, freed once, no copy in flight (stream
                    // synchronized above).
                    if let Err(err) = unsafe { t.host_free_pinned(&site, s.base, s.len as u64) } {
                        first_err.get_or_insert(err);
                    }
                }
                StagingMemory::Overlap => {
                    let mut all_unregistered = true;
                    for g in 0..s.groups.len() {
                        // SAFETY: the stream was synchronized above: no copy in flight.
                        if let Err(err) = unsafe { unregister_group(t, &site, s, g) } {
                            all_unregistered = false;
                            first_err.get_or_insert(err);
                        }
                    }
                    if all_unregistered {
                        // SAFETY: our mapping, no part of it registered any more; nothing
                        // refers to it. (Otherwise it leaks, as for `Register` below.)
                        unsafe { libc::munmap(s.base.cast(), s.len) };
                    }
                }
                StagingMemory::Register => {
                    // SAFETY: registered once in `create`, no copy in flight.
                    let unregistered = unsafe { t.host_unregister(&site, s.base, s.len as u64) };
                    match unregistered {
                        // SAFETY: our mapping, no longer registered; nothing refers to it.
                        Ok(()) => unsafe {
                            libc::munmap(s.base.cast(), s.len);
                        },
                        // Still registered as far as we know: leak the mapping rather than
                        // unmap memory the driver may still have pinned.
                        Err(err) => {
                            first_err.get_or_insert(err);
                        }
                    }
                }
            }
        }
        if let Some(stream) = self.stream {
            // SAFETY: our live stream, destroyed once.
            if let Err(e) = unsafe { t.stream_destroy(&site, stream) } {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Nanoseconds `create` took.
    pub fn created_ns(&self) -> u64 {
        self.created_ns
    }

    /// Nanoseconds of `create` spent in `cuMemHostRegister`.
    pub fn created_register_ns(&self) -> u64 {
        self.created_register_ns
    }

    /// A stager for one upload only ([`crate::strategy::upload`]): with `Overlap` staging, that
    /// upload unlocks each group of buffers as soon as it holds no more of its slices, while
    /// it waits for packers or the last copies, instead of in teardown.
    pub(crate) fn create_one_shot(t: &Traced, options: &PinnedOptions) -> Result<PinnedStager> {
        let mut stager = PinnedStager::create(t, options)?;
        stager.one_shot = true;
        Ok(stager)
    }

    /// One-shot `Overlap` stager: unlocks every locked group whose buffers hold no more slices
    /// of the upload (each buffer's last slice is below `released`, so its copy finished).
    /// Returns the nanoseconds it took.
    fn retire(&self, t: &Traced, staging: &Staging, released: u64, slices: u64) -> Result<u64> {
        if staging.memory != StagingMemory::Overlap {
            return Ok(0);
        }
        let buffers = self.options.buffers as u64;
        let last_slice_of = |b: u64| b + (slices - 1 - b) / buffers * buffers;
        let mut spent = 0;
        for (g, group) in staging.groups.iter().enumerate() {
            let finished = group.buffers.clone().all(|b| {
                let b = b as u64;
                b >= slices || last_slice_of(b) < released
            });
            if !finished || !group.registered.load(Ordering::Acquire) {
                continue;
            }
            let site = Site::plain("pinned retire");
            // SAFETY: every slice of the group's buffers was released, so its copy finished
            // (its event was seen complete), and no later slice uses them: this upload is the
            // stager's only one.
            spent += unsafe { unregister_group(t, &site, staging, g) }
                .map_err(|e| chunk_failed("slice", group.buffers.start, slices as usize, e))?;
        }
        Ok(spent)
    }

    /// Uploads `plan` into one device allocation through the staging buffers.
    pub fn upload(
        &self,
        t: &Traced,
        src: &dyn TensorSource,
        plan: &Plan,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<Uploaded> {
        let (Some(stream), Some(staging)) = (self.stream, self.staging.as_ref()) else {
            return Err(Error::InvalidOptions("pinned stager is not set up".into()));
        };
        let called = Instant::now();
        let layout = ArenaLayout::new(plan);
        let slice = self.options.buffer_bytes;
        let slices = layout.bytes.div_ceil(slice);
        let chunk_count = plan.chunks.len();
        let mut stats = PinnedStats {
            staging_ns: 0,
            arena_ns: 0,
            arena_memory: DeviceMemory::Device,
            pack_wait_ns: 0,
            first_slice_ns: 0,
            register_ns: 0,
            setup_ns: 0,
            submit_ns: 0,
            finish_ns: 0,
            copy_wait_ns: 0,
            unregister_ns: 0,
            teardown_ns: 0,
            staging_read_only: staging.read_only,
            store: self.options.store,
            calibration_plain_mbps: 0,
            calibration_streaming_mbps: 0,
        };
        let arena_site = Site {
            unit: "arena",
            index: 0,
            count: 0,
            chunk: 0,
            chunk_count: sat_u32(chunk_count),
            tensor_first: plan.placements.first().map_or(0, |p| sat_u32(p.tensor)),
            tensor_count: sat_u32(plan.placements.last().map_or(0, |p| p.tensor + 1)),
        };
        let started = Instant::now();
        let arena_bytes = layout.bytes.max(1);
        let pool = match self.options.arena {
            ArenaMemory::Pool => t.arena_pool(&arena_site)?,
            ArenaMemory::Alloc => None,
        };
        let (arena, memory) = match pool {
            // SAFETY: the session's live pool and our live stream; every copy into the arena is
            // issued on that stream after this call, and it is synchronized before the arena is
            // used or freed anywhere else.
            Some(pool) => (
                unsafe { t.mem_alloc_from_pool_async(&arena_site, arena_bytes, pool, stream) }?,
                DeviceMemory::Pool,
            ),
            None => (t.mem_alloc(&arena_site, arena_bytes)?, DeviceMemory::Device),
        };
        stats.arena_ns = elapsed_ns(started);
        stats.arena_memory = memory;
        let allocation = Allocation {
            ptr: arena,
            bytes: arena_bytes,
            memory,
        };

        let piece = self
            .options
            .piece_bytes
            .min(slice)
            .next_multiple_of(64)
            .min(slice.next_multiple_of(64));
        // Buffers this upload fills, and the pages they span (to fault in, for `Overlap`).
        let used_buffers = usize::try_from(slices)
            .unwrap_or(usize::MAX)
            .min(self.options.buffers);
        let used_groups = staging
            .groups
            .partition_point(|g| g.buffers.start < used_buffers);
        let pipeline = Pipeline {
            src,
            plan,
            layout: &layout,
            faults: staging.faults.as_ref(),
            fault_limit: FaultPass::pages(0, used_buffers * staging.stride).end,
            staging_base: staging.base as usize,
            stride: staging.stride as u64,
            buffers: self.options.buffers as u64,
            slice,
            piece,
            pieces_per_slice: slice.div_ceil(piece),
            next_piece: AtomicU64::new(0),
            released: AtomicU64::new(0),
            filled: (0..slices).map(|_| AtomicU32::new(0)).collect(),
            stop: AtomicBool::new(false),
            error: Mutex::new(None),
            decided: AtomicU8::new(match self.options.store {
                PackStore::Plain => DECIDED_PLAIN,
                PackStore::Streaming => DECIDED_STREAMING,
                PackStore::Auto => UNDECIDED,
            }),
            calibration: Mutex::new(Calibration::default()),
            park: !self.options.spin,
            submitter: std::thread::current(),
        };
        let site_of = |s: u64| -> Site {
            let from = s * slice;
            let to = (from + slice).min(layout.bytes);
            let range = layout.overlapping(plan, from, to);
            Site {
                unit: "slice",
                index: sat_u32(s as usize),
                count: sat_u32(slices as usize),
                chunk: plan.placements.get(range.start).map_or(0, |p| p.chunk),
                chunk_count: sat_u32(chunk_count),
                tensor_first: plan
                    .placements
                    .get(range.start)
                    .map_or(0, |p| sat_u32(p.tensor)),
                tensor_count: sat_u32(range.len()),
            }
        };

        let mut views = ViewBuilder {
            views: Vec::with_capacity(plan.placements.len()),
            next_chunk: 0,
        };
        let packing = Instant::now();
        let mut finishing = None;
        let outcome = std::thread::scope(|scope| -> Result<()> {
            let mut stop = StopOnDrop {
                stop: &pipeline.stop,
                workers: Vec::with_capacity(self.options.threads),
            };
            for _ in 0..self.options.threads {
                let pipeline = &pipeline;
                // Packers already started are stopped and joined by `stop` and the scope.
                let handle = std::thread::Builder::new()
                    .name("wedge-pack".into())
                    .spawn_scoped(scope, move || pipeline.worker())
                    .map_err(|e| Error::Worker(format!("cannot start a packing thread: {e}")))?;
                stop.workers.push(handle.thread().clone());
            }
            stats.setup_ns = elapsed_ns(called);
            let mut in_flight = std::collections::VecDeque::with_capacity(self.options.buffers);
            let mut done_bytes = 0;
            let register_site = |g: usize| site_of(staging.groups[g].buffers.start as u64);
            let register_failed = |g: usize, e| {
                let s = staging.groups[g].buffers.start;
                chunk_failed("slice", s, slices as usize, e)
            };
            // Groups below this one are page-locked (`Overlap` locks them while it waits).
            let mut next_group = 0;
            // Slices below this were released when finished groups were last looked for.
            let mut retired_at = 0;
            for s in 0..slices {
                let from = s * slice;
                let to = (from + slice).min(layout.bytes);
                let waited = Instant::now();
                // While waiting: lock the next group whose pages are in, retire groups no
                // longer needed, build views.
                let mut chore = || -> Result<bool> {
                    if next_group < used_groups && staging.group_faulted(next_group) {
                        stats.register_ns +=
                            register_group(t, &register_site(next_group), staging, next_group)
                                .map_err(|e| register_failed(next_group, e))?;
                        next_group += 1;
                        return Ok(true);
                    }
                    let released = pipeline.released.load(Ordering::Relaxed);
                    if self.one_shot && released > retired_at {
                        retired_at = released;
                        stats.unregister_ns += self.retire(t, staging, released, slices)?;
                        return Ok(true);
                    }
                    Ok(views.step(plan, &layout, arena))
                };
                pipeline.wait_filled(s, self.options.submitter_packs, &mut chore)?;
                stats.pack_wait_ns += elapsed_ns(waited);
                if s == 0 {
                    stats.first_slice_ns = elapsed_ns(packing);
                }
                let submitting = Instant::now();
                let copy_waited = stats.copy_wait_ns;
                let site = site_of(s);
                let buffer = pipeline.buffer(s);
                let step = (|| -> Result<()> {
                    let b = (s % pipeline.buffers) as usize;
                    let g = staging.group_of(b);
                    if !staging.groups[g].registered.load(Ordering::Acquire) {
                        let registering = Instant::now();
                        pipeline.wait_faulted(staging, g)?;
                        register_group(t, &site, staging, g)?;
                        stats.register_ns += elapsed_ns(registering);
                        next_group = next_group.max(g + 1);
                    }
                    // SAFETY: destination `arena+from .. arena+to` lies in the arena; the source
                    // is staging buffer b, fully packed (every piece published), page-locked,
                    // and not written again until `events[b]` (recorded right after) was waited
                    // for.
                    unsafe {
                        t.memcpy_htod_async(
                            &site,
                            arena + from,
                            buffer as *const u8,
                            (to - from) as usize,
                            stream,
                        )
                    }?;
                    // SAFETY: live event and stream.
                    unsafe { t.event_record(&site, self.events[b], stream) }
                })();
                step.map_err(|e| chunk_failed("slice", s as usize, slices as usize, e))?;
                in_flight.push_back(s);
                // Hand back every buffer whose copy has finished, so packers can run ahead;
                // block only when every buffer holds a submitted copy.
                while let Some(&oldest) = in_flight.front() {
                    let b = (oldest % pipeline.buffers) as usize;
                    let oldest_site = site_of(oldest);
                    let failed = |e| chunk_failed("slice", oldest as usize, slices as usize, e);
                    if in_flight.len() == self.options.buffers {
                        let waited = Instant::now();
                        // SAFETY: our live event, recorded after the copy out of buffer b.
                        unsafe { t.event_synchronize(&oldest_site, self.events[b]) }
                            .map_err(failed)?;
                        stats.copy_wait_ns += elapsed_ns(waited);
                    } else {
                        // SAFETY: as above.
                        let done = unsafe { t.event_query(&oldest_site, self.events[b]) }
                            .map_err(failed)?;
                        if !done {
                            break;
                        }
                    }
                    in_flight.pop_front();
                    pipeline.release(oldest + 1, &stop.workers);
                }
                stats.submit_ns += elapsed_ns(submitting) - (stats.copy_wait_ns - copy_waited);
                done_bytes += to - from;
                progress(&Progress {
                    unit: "slice",
                    done: sat_u32(s as usize + 1),
                    count: sat_u32(slices as usize),
                    bytes_done: done_bytes,
                    bytes_total: layout.bytes,
                });
            }
            let last = slices.saturating_sub(1);
            if self.one_shot {
                // Unlock what is finished while the last copies run.
                while let Some(&oldest) = in_flight.front() {
                    let b = (oldest % pipeline.buffers) as usize;
                    // SAFETY: our live event, recorded after the copy out of buffer b.
                    let done = unsafe { t.event_query(&site_of(oldest), self.events[b]) }
                        .map_err(|e| chunk_failed("slice", oldest as usize, slices as usize, e))?;
                    if !done {
                        break;
                    }
                    in_flight.pop_front();
                    pipeline.release(oldest + 1, &stop.workers);
                }
                let released = pipeline.released.load(Ordering::Relaxed);
                stats.unregister_ns += self.retire(t, staging, released, slices)?;
            }
            let waited = Instant::now();
            // SAFETY: our live stream.
            unsafe { t.stream_synchronize(&site_of(last), stream) }
                .map_err(|e| chunk_failed("slice", last as usize, slices as usize, e))?;
            stats.copy_wait_ns += elapsed_ns(waited);
            finishing = Some(Instant::now());
            Ok(())
        });
        stats.store = pipeline.store_used();
        {
            let c = pipeline
                .calibration
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            stats.calibration_plain_mbps = Calibration::median_mbps(&c.plain);
            stats.calibration_streaming_mbps = Calibration::median_mbps(&c.streaming);
        }
        if let Err(e) = outcome {
            let site = Site::plain("pinned rollback");
            // SAFETY: our live stream; wait for copies into the arena before freeing it.
            let _ = unsafe { t.stream_synchronize(&site, stream) };
            let _ = free_all(t, &[allocation], &site);
            return Err(e);
        }
        while views.step(plan, &layout, arena) {}
        let views = views.views;
        stats.finish_ns = finishing.map_or(0, elapsed_ns);
        Ok(Uploaded {
            strategy: StrategyKind::Pinned,
            allocations: vec![allocation],
            views,
            chunks: chunk_count,
            bytes: plan.tensor_bytes,
            pinned: Some(stats),
        })
    }
}

pub(crate) fn elapsed_ns(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Copies arena bytes `[from, to)` of `plan`'s tensors (laid out by `layout`) to `dst`: the
/// packing threads' inner loop, public so `benches/pack.rs` measures the very same code. Per
/// tensor: one source lookup and one copy. (Looking sources up four tensors ahead and
/// prefetching them measured 5–9 % slower on the H200 host, so it is not done; BENCHMARKS.md.)
///
/// # Safety
/// `dst..dst + (to - from)` must be valid for writes and not read or written by anyone else
/// during the call; `to ≤ layout.bytes()`.
pub unsafe fn pack_range(
    src: &dyn TensorSource,
    plan: &Plan,
    layout: &ArenaLayout,
    store: PackStore,
    dst: *mut u8,
    from: u64,
    to: u64,
) -> Result<()> {
    for p in &plan.placements[layout.overlapping(plan, from, to)] {
        let bytes = placed_bytes(src, p)?;
        let start = layout.chunk_base[p.chunk as usize] + p.offset;
        let lo = start.max(from);
        let hi = (start + p.bytes).min(to);
        if lo >= hi {
            continue;
        }
        let piece = &bytes[(lo - start) as usize..(hi - start) as usize];
        // SAFETY: `lo..hi` lies in `from..to`, so the write of `hi - lo` bytes at `dst + (lo -
        // from)` stays inside the caller's destination (caller contract); `piece` is the
        // tensor's own host memory, a different allocation.
        unsafe {
            pack::copy(
                store,
                piece.as_ptr(),
                dst.add((lo - from) as usize),
                piece.len(),
            )
        };
    }
    Ok(())
}

/// The upload's per-tensor views, built one chunk at a time while the submitting thread waits
/// for packers: for many small tensors they are megabytes of fresh memory to write (page
/// faults included), which after the last copy would add to the upload's time.
struct ViewBuilder {
    views: Vec<crate::strategy::View>,
    next_chunk: usize,
}

impl ViewBuilder {
    /// Adds the next chunk's views; false once every chunk has its views.
    fn step(&mut self, plan: &Plan, layout: &ArenaLayout, arena: crate::DevicePtr) -> bool {
        let Some(&base) = layout.chunk_base.get(self.next_chunk) else {
            return false;
        };
        views_for(plan, self.next_chunk, arena + base, 0, &mut self.views);
        self.next_chunk += 1;
        true
    }
}

/// One upload's shared packing state.
struct Pipeline<'a> {
    src: &'a dyn TensorSource,
    plan: &'a Plan,
    layout: &'a ArenaLayout,
    /// `Overlap` staging's page faults: taken by packers before they pack, waited for before
    /// a piece is written or a group registered.
    faults: Option<&'a FaultPass>,
    /// Huge pages of staging this upload uses (faults beyond are left to later uploads).
    fault_limit: usize,
    staging_base: usize,
    stride: u64,
    buffers: u64,
    slice: u64,
    piece: u64,
    pieces_per_slice: u64,
    /// Next piece to claim (slice = piece / pieces_per_slice).
    next_piece: AtomicU64,
    /// Slices `0..released` were copied out: slice `s` may be packed iff `s < released + buffers`.
    released: AtomicU64,
    /// Pieces packed, per slice.
    filled: Vec<AtomicU32>,
    stop: AtomicBool,
    /// The first packing error and its slice.
    error: Mutex<Option<(u64, Error)>>,
    /// The store in use: [`UNDECIDED`] while `Auto` calibrates.
    decided: AtomicU8,
    calibration: Mutex<Calibration>,
    park: bool,
    submitter: std::thread::Thread,
}

const UNDECIDED: u8 = 0;
const DECIDED_PLAIN: u8 = 1;
const DECIDED_STREAMING: u8 = 2;

/// Calibration samples of `PackStore::Auto` per side before deciding.
const CALIBRATION_SAMPLES: usize = 16;

/// `PackStore::Auto`'s samples: nanoseconds per byte of whole calibration pieces, per store.
/// Medians, not sums, decide: one descheduled thread must not flip the choice.
#[derive(Default)]
struct Calibration {
    plain: Vec<f64>,
    streaming: Vec<f64>,
}

impl Calibration {
    fn median(samples: &[f64]) -> Option<f64> {
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    }

    fn median_mbps(samples: &[f64]) -> u64 {
        Self::median(samples).map_or(0, |ns_per_byte| (1e3 / ns_per_byte) as u64)
    }

    /// The faster store once both sides have enough samples.
    fn decision(&self) -> Option<u8> {
        if self.plain.len() < CALIBRATION_SAMPLES || self.streaming.len() < CALIBRATION_SAMPLES {
            return None;
        }
        let (plain, streaming) = (Self::median(&self.plain)?, Self::median(&self.streaming)?);
        Some(if streaming < plain {
            DECIDED_STREAMING
        } else {
            DECIDED_PLAIN
        })
    }
}

/// Sets the stop flag and wakes every worker when dropped (also on an early return or
/// unwinding), so the scope's join never waits on a sleeping or blocked worker.
struct StopOnDrop<'a> {
    stop: &'a AtomicBool,
    workers: Vec<std::thread::Thread>,
}

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for w in &self.workers {
            w.unpark();
        }
    }
}

impl Pipeline<'_> {
    fn buffer(&self, slice: u64) -> usize {
        self.staging_base + ((slice % self.buffers) * self.stride) as usize
    }

    fn idle(&self, spins: &mut u32) {
        *spins = spins.saturating_add(1);
        let limit = if self.park { 256 } else { 4096 };
        if *spins < limit {
            std::hint::spin_loop();
        } else if self.park {
            // Spurious or early returns are fine: every caller re-checks its condition.
            std::thread::park_timeout(std::time::Duration::from_millis(10));
        } else {
            std::thread::yield_now();
        }
    }

    fn fail(&self, slice: u64, e: Error) {
        self.error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert((slice, e));
        self.stop.store(true, Ordering::Release);
        self.submitter.unpark();
    }

    /// Packing thread: claim pieces in order until none are left or the upload stops.
    fn worker(&self) {
        if let Some(faults) = self.faults {
            while !self.stop.load(Ordering::Relaxed) {
                if !faults.fault_next(self.fault_limit) {
                    break;
                }
            }
        }
        let total = self.filled.len() as u64 * self.pieces_per_slice;
        loop {
            let k = self.next_piece.fetch_add(1, Ordering::Relaxed);
            if k >= total {
                return;
            }
            let s = k / self.pieces_per_slice;
            let mut spins = 0u32;
            while s >= self.released.load(Ordering::Acquire) + self.buffers {
                if self.stop.load(Ordering::Acquire) {
                    return;
                }
                self.idle(&mut spins);
            }
            if !self.pack_piece(k) {
                return;
            }
        }
    }

    /// Packs claimed piece `k`, whose buffer is free, and publishes it; false if the upload
    /// stopped or packing failed (then the failure is recorded).
    fn pack_piece(&self, k: u64) -> bool {
        let s = k / self.pieces_per_slice;
        if self.stop.load(Ordering::Acquire) {
            return false;
        }
        let from = s * self.slice + (k % self.pieces_per_slice) * self.piece;
        let to = (from + self.piece)
            .min((s + 1) * self.slice)
            .min(self.layout.bytes);
        if from < to {
            let dst = self.buffer(s) + (from - s * self.slice) as usize;
            if let Some(faults) = self.faults {
                let at = dst - self.staging_base;
                let mut spins = 0u32;
                while !faults.is_done(at, at + (to - from) as usize) {
                    if self.stop.load(Ordering::Acquire) {
                        return false;
                    }
                    if !faults.fault_next(self.fault_limit) {
                        self.idle(&mut spins);
                    }
                }
            }
            let (store, calibrating) = self.store_for(k);
            let started = calibrating.then(Instant::now);
            let packed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.pack(store, dst, from, to)
            }))
            .unwrap_or_else(|_| Err(Error::Worker("packing thread panicked".into())));
            if let Err(e) = packed {
                self.fail(s, e);
                return false;
            }
            pack::publish_fence(store);
            // Only whole pieces are comparable samples.
            if let (Some(started), true) = (started, to - from == self.piece) {
                self.calibrate(store, started, to - from);
            }
        }
        // Release: the piece's bytes are visible to the submitter that sees the count.
        let n = self.filled[s as usize].fetch_add(1, Ordering::Release) + 1;
        if self.park && u64::from(n) == self.pieces_per_slice {
            self.submitter.unpark();
        }
        true
    }

    /// Submitter: claims and packs the next piece if its buffer is free now; false if there is
    /// none to take. It never claims a piece it would have to wait for: only the submitter
    /// frees buffers, so that wait could never end.
    fn help_pack(&self) -> bool {
        let total = self.filled.len() as u64 * self.pieces_per_slice;
        let k = self.next_piece.load(Ordering::Relaxed);
        if k >= total
            || k / self.pieces_per_slice >= self.released.load(Ordering::Acquire) + self.buffers
        {
            return false;
        }
        if self
            .next_piece
            .compare_exchange(k, k + 1, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            // A packer took it: that piece is in hand, which is what waiting is for.
            return true;
        }
        self.pack_piece(k);
        true
    }

    /// The store for piece `k`, and whether the piece is a calibration sample (`Auto`,
    /// undecided: even pieces plain, odd pieces streaming, under the same conditions).
    fn store_for(&self, k: u64) -> (PackStore, bool) {
        match self.decided.load(Ordering::Relaxed) {
            DECIDED_PLAIN => (PackStore::Plain, false),
            DECIDED_STREAMING => (PackStore::Streaming, false),
            _ if k.is_multiple_of(2) => (PackStore::Plain, true),
            _ => (PackStore::Streaming, true),
        }
    }

    fn calibrate(&self, store: PackStore, started: Instant, bytes: u64) {
        let ns_per_byte = started.elapsed().as_nanos() as f64 / bytes as f64;
        let mut c = self.calibration.lock().unwrap_or_else(|p| p.into_inner());
        match store {
            PackStore::Streaming => c.streaming.push(ns_per_byte),
            _ => c.plain.push(ns_per_byte),
        }
        if let Some(choice) = c.decision() {
            // The first decision stands; later samples (pieces already under way) only add to
            // the record.
            let _ = self.decided.compare_exchange(
                UNDECIDED,
                choice,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// The store that packed (or will pack) the rest of the upload.
    fn store_used(&self) -> PackStore {
        match self.decided.load(Ordering::Relaxed) {
            DECIDED_PLAIN => PackStore::Plain,
            DECIDED_STREAMING => PackStore::Streaming,
            _ => PackStore::Auto,
        }
    }

    /// Copies arena bytes `[from, to)` of the tensors to staging address `dst`.
    fn pack(&self, store: PackStore, dst: usize, from: u64, to: u64) -> Result<()> {
        // SAFETY: `dst` addresses arena offset `from` inside a live staging buffer that holds
        // the whole slice, and `from..to` lies in that slice, so every write stays inside the
        // buffer. Pieces are disjoint, and the buffer's previous copy completed (its event was
        // waited for before `released` passed this slice), so nothing else reads or writes
        // these bytes meanwhile.
        unsafe {
            pack_range(
                self.src,
                self.plan,
                self.layout,
                store,
                dst as *mut u8,
                from,
                to,
            )
        }
    }

    /// Submitter: waits until every piece of `slice` is packed, or a packing thread failed.
    /// Meanwhile, rather than spin, it does `chore` (a short piece of other work; false when
    /// there is none left) and, with `help`, packs pieces itself.
    fn wait_filled(
        &self,
        slice: u64,
        help: bool,
        chore: &mut dyn FnMut() -> Result<bool>,
    ) -> Result<()> {
        let mut spins = 0u32;
        loop {
            // Acquire: pairs with the packers' release, so their bytes are visible.
            if u64::from(self.filled[slice as usize].load(Ordering::Acquire))
                == self.pieces_per_slice
            {
                return Ok(());
            }
            self.stopped()?;
            if chore()? || (help && self.help_pack()) {
                continue;
            }
            self.idle(&mut spins);
        }
    }

    /// Submitter: waits until every page of staging group `g` is faulted in, taking faults
    /// itself while any are unclaimed, or a packing thread failed.
    fn wait_faulted(&self, staging: &Staging, g: usize) -> Result<()> {
        let mut spins = 0u32;
        while !staging.group_faulted(g) {
            self.stopped()?;
            let took = self.faults.is_some_and(|f| f.fault_next(self.fault_limit));
            if !took {
                self.idle(&mut spins);
            }
        }
        Ok(())
    }

    /// `Err` with the packers' failure once the upload stopped.
    fn stopped(&self) -> Result<()> {
        if !self.stop.load(Ordering::Acquire) {
            return Ok(());
        }
        let failed = self.error.lock().unwrap_or_else(|p| p.into_inner()).take();
        Err(match failed {
            Some((s, e)) => chunk_failed("slice", s as usize, self.filled.len(), e),
            None => Error::Worker("packing stopped".into()),
        })
    }

    /// Submitter: slices below `upto` were copied out; their buffers may be refilled.
    fn release(&self, upto: u64, workers: &[std::thread::Thread]) {
        self.released.store(upto, Ordering::Release);
        if self.park {
            for w in workers {
                w.unpark();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_packing_threads_leave_two_cpus_and_cap_at_14() {
        let by_cpus: Vec<usize> = [1, 2, 4, 8, 12, 16, 32, 128]
            .iter()
            .map(|&c| default_packing_threads(c))
            .collect();
        assert_eq!(by_cpus, [1, 1, 3, 6, 10, 14, 14, 14]);
    }

    /// Pages of `base..base+len` that are resident (`mincore`).
    fn resident_pages(base: *mut u8, len: usize) -> usize {
        let mut vec = vec![0u8; len.div_ceil(4096)];
        // SAFETY: `base..base+len` is a live mapping of ours; `vec` has one byte per page.
        let rc = unsafe { libc::mincore(base.cast(), len, vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 == 1).count()
    }

    /// The arena image of `plan`: every tensor's bytes at its arena offset, zeros elsewhere.
    fn arena_image(src: &dyn TensorSource, plan: &Plan, layout: &ArenaLayout) -> Vec<u8> {
        let mut image = vec![0u8; layout.bytes() as usize];
        for (i, p) in plan.placements.iter().enumerate() {
            let at = layout.start(plan, i).unwrap() as usize;
            image[at..at + p.bytes as usize].copy_from_slice(src.bytes(p.tensor));
        }
        image
    }

    fn bulk(src: &crate::Workload, options: &crate::PlanOptions) -> Plan {
        match crate::plan(src.infos(), options).unwrap() {
            crate::Planned::Bulk(p) => p,
            other => panic!("{other:?}"),
        }
    }

    /// Any arena range, cut anywhere (inside a tensor, across chunk padding, fewer tensors than
    /// the lookahead, more), packs exactly the arena image's bytes of that range.
    #[test]
    fn pack_range_writes_exactly_the_arena_image_of_any_range() {
        use crate::workload::{Workload, WorkloadSpec};
        let w = Workload::synthetic(&WorkloadSpec {
            samples: 300,
            sample_floats: 193,
            params: 3,
            param_floats: 3000,
            seed: 3,
        });
        let options = crate::PlanOptions {
            chunk_bytes: 10_000,
            chunk_tensors: 7,
            min_eligible: 1,
            alignment: None,
        };
        let plan = bulk(&w, &options);
        let layout = ArenaLayout::new(&plan);
        let image = arena_image(&w, &plan, &layout);
        let mut in_tensor = vec![false; image.len()];
        for (i, p) in plan.placements.iter().enumerate() {
            let at = layout.start(&plan, i).unwrap() as usize;
            in_tensor[at..at + p.bytes as usize].fill(true);
        }
        assert!(in_tensor.contains(&false), "padding between chunks");
        let end = layout.bytes();
        let mut cuts = vec![
            (0, end),
            (0, 1),
            (end - 1, end),
            (771, 773),
            (100, 100 + 772 * 3),
        ];
        for step in [64u64, 1000, 4096, 12_345] {
            cuts.extend(
                (0..end)
                    .step_by(step as usize)
                    .map(|f| (f, (f + step).min(end))),
            );
        }
        for store in [PackStore::Plain, PackStore::Streaming] {
            for &(from, to) in &cuts {
                let mut out = vec![0xa5u8; (to - from) as usize + 64];
                // SAFETY: `out` has `to - from` bytes (and a guard tail), ours alone.
                unsafe { pack_range(&w, &plan, &layout, store, out.as_mut_ptr(), from, to) }
                    .unwrap();
                pack::publish_fence(store);
                let (packed, guard) = out.split_at((to - from) as usize);
                // Padding bytes are not written: compare tensor bytes only.
                for (k, (&got, &want)) in packed
                    .iter()
                    .zip(&image[from as usize..to as usize])
                    .enumerate()
                {
                    let at = from + k as u64;
                    if in_tensor[at as usize] {
                        assert_eq!(got, want, "{store:?} [{from}, {to}) at {at}");
                    } else {
                        assert_eq!(
                            got, 0xa5,
                            "{store:?} [{from}, {to}): padding at {at} written"
                        );
                    }
                }
                assert!(
                    guard.iter().all(|&b| b == 0xa5),
                    "wrote past [{from}, {to})"
                );
            }
        }
    }

    /// A source whose bytes do not match the plan is an error from the packer, not a write
    /// past the tensor's place; ranges without that tensor still pack.
    #[test]
    fn pack_range_refuses_a_source_that_does_not_match_the_plan() {
        use crate::plan::TensorInfo;
        let mut infos = vec![TensorInfo::f32(10); 8];
        infos[6] = TensorInfo::f32(11);
        let data: Vec<Vec<f32>> = (0..8).map(|i| vec![i as f32 + 1.0; 10]).collect();
        let w = crate::Workload::from_parts(infos, data);
        let options = crate::PlanOptions {
            min_eligible: 1,
            ..crate::PlanOptions::default()
        };
        let plan = bulk(&w, &options);
        let layout = ArenaLayout::new(&plan);
        let mut out = vec![0u8; layout.bytes() as usize];
        let mut pack = |from: u64, to: u64| {
            // SAFETY: `out` holds the whole arena and is ours alone.
            unsafe {
                pack_range(
                    &w,
                    &plan,
                    &layout,
                    PackStore::Plain,
                    out.as_mut_ptr(),
                    from,
                    to,
                )
            }
        };
        // Tensor 6 is planned at 240..284.
        assert!(pack(0, 240).is_ok());
        for (from, to) in [(0, 320), (250, 260), (200, 241)] {
            let packed = pack(from, to);
            assert!(
                matches!(packed, Err(Error::InvalidOptions(ref m)) if m.contains("tensor 6")),
                "[{from}, {to}): {packed:?}"
            );
        }
    }

    #[test]
    fn prefault_makes_every_page_of_the_staging_mapping_resident() {
        for (huge_pages, threads) in [(1, 1), (3, 2), (3, 8), (5, 3)] {
            let len = huge_pages * HUGE_PAGE;
            let base = map_huge_aligned(len).unwrap();
            assert_eq!(resident_pages(base, len), 0, "fresh mapping");
            prefault(base, len, threads);
            assert_eq!(
                resident_pages(base, len),
                len / 4096,
                "{huge_pages} × 2 MiB, {threads}"
            );
            // SAFETY: our mapping, unused elsewhere.
            unsafe { libc::munmap(base.cast(), len) };
        }
    }

    #[test]
    fn registration_groups_double_and_cover_the_ring_once() {
        assert!(registration_groups(0).is_empty());
        assert_eq!(
            registration_groups(1),
            vec![std::ops::Range { start: 0, end: 1 }]
        );
        assert_eq!(registration_groups(3), [0..1, 1..2, 2..3]);
        assert_eq!(registration_groups(8), [0..1, 1..2, 2..4, 4..8]);
        assert_eq!(registration_groups(11), [0..1, 1..2, 2..4, 4..8, 8..11]);
        for n in 1..100 {
            let groups = registration_groups(n);
            assert_eq!(groups.first().unwrap().start, 0);
            assert_eq!(groups.last().unwrap().end, n);
            assert!(groups.windows(2).all(|w| w[0].end == w[1].start));
            assert!(groups.len() <= n.ilog2() as usize + 2, "{n}: {groups:?}");
        }
    }

    /// The fault pass hands out each page once, in order, never past the limit (a later, larger
    /// upload takes the rest), and makes exactly the pages it marks done resident.
    #[test]
    fn the_fault_pass_faults_each_page_once_up_to_the_limit() {
        let len = 5 * HUGE_PAGE;
        let base = map_huge_aligned(len).unwrap();
        let faults = FaultPass::new(base, len);
        assert!(!faults.is_done(0, 1));
        let mut taken = 0;
        while faults.fault_next(2) {
            taken += 1;
        }
        assert_eq!(taken, 2);
        assert!(faults.is_done(0, 2 * HUGE_PAGE));
        assert!(!faults.is_done(0, 2 * HUGE_PAGE + 1));
        assert_eq!(resident_pages(base, len), 2 * HUGE_PAGE / 4096);
        // Threads share the rest; a limit past the end stops at the end.
        let taken_by_threads: usize = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        let mut taken = 0;
                        while faults.fault_next(usize::MAX) {
                            taken += 1;
                        }
                        taken
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).sum()
        });
        assert_eq!(taken_by_threads, 3);
        assert!(faults.is_done(0, len));
        assert_eq!(resident_pages(base, len), len / 4096);
        assert!(!faults.fault_next(usize::MAX));
        // SAFETY: our mapping, unused elsewhere.
        unsafe { libc::munmap(base.cast(), len) };
    }
}
