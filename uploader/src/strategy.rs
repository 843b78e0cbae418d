//! The upload strategies. All three produce the same result: every planned tensor on the
//! device, with a [`View`] (chunk, offset, length, device pointer) per tensor.
//!
//! - `ztensor`: ztensor's path, reproduced: per chunk one `cuMemAlloc`, one freshly allocated
//!   pageable staging buffer packed on the host, one synchronous `cuMemcpyHtoD`.
//! - `managed`: per chunk one `cuMemAllocManaged`, packed by the host directly into it, then
//!   prefetched to the device. Runs only where the device reports concurrent managed access,
//!   and only if the whole upload fits in the memory the device reports free (minus headroom).
//! - `pinned`: one device allocation for all chunks, a few pinned staging buffers filled by
//!   packing threads while earlier buffers are copied asynchronously on a stream; an event per
//!   buffer says when it may be refilled.
//!
//! Failure is all-or-nothing for every strategy: if chunk k fails, work in flight is waited
//! for and every device allocation this upload made is freed before the error
//! ([`Error::ChunkFailed`]) is returned. (ztensor itself leaves chunks 0..k uploaded.)

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::Serialize;

use crate::driver::{DeviceAttribute, DevicePtr, Event, Stream};
use crate::error::{Error, Result};
use crate::plan::{Placement, Plan};
use crate::trace::{sat_u32, Site, Traced};
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

/// Settings of the `pinned` strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PinnedOptions {
    /// Pinned staging buffers (≥ 2 for overlap).
    pub buffers: usize,
    /// Bytes per staging buffer (one asynchronous copy each).
    pub buffer_bytes: u64,
    /// Packing threads (this thread included).
    pub threads: usize,
    /// Idle packing threads spin (true) or sleep (false) between slices. Spinning avoids a
    /// wake-up per thread per slice (tens of microseconds each in a VM) at the cost of CPU.
    pub spin: bool,
}

impl Default for PinnedOptions {
    fn default() -> Self {
        PinnedOptions {
            buffers: 4,
            buffer_bytes: 4 << 20,
            // Half the CPUs, at most 8: the driver's own threads need CPUs too.
            threads: (std::thread::available_parallelism().map_or(1, |p| p.get()) / 2).clamp(1, 8),
            spin: true,
        }
    }
}

/// Settings of the `managed` strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ManagedOptions {
    /// Prefetch each chunk to the device after packing it (so the upload is really done).
    pub prefetch: bool,
    /// Device memory that must stay free: max(this, 5 % of free).
    pub headroom_bytes: u64,
}

impl Default for ManagedOptions {
    fn default() -> Self {
        ManagedOptions {
            prefetch: true,
            headroom_bytes: 512 << 20,
        }
    }
}

/// A strategy and its settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Strategy {
    pub kind: StrategyKind,
    pub pinned: PinnedOptions,
    pub managed: ManagedOptions,
}

impl Strategy {
    pub fn new(kind: StrategyKind) -> Strategy {
        Strategy {
            kind,
            pinned: PinnedOptions::default(),
            managed: ManagedOptions::default(),
        }
    }
}

/// One device allocation made by an upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Allocation {
    pub ptr: DevicePtr,
    pub bytes: u64,
    pub managed: bool,
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
}

impl Uploaded {
    /// Frees every allocation (all are attempted; the first error is returned).
    pub fn free(self, t: &Traced) -> Result<()> {
        free_all(t, &self.allocations, &Site::plain("free"))
    }
}

fn free_all(t: &Traced, allocations: &[Allocation], site: &Site) -> Result<()> {
    let mut first_err = None;
    for a in allocations.iter().rev() {
        // SAFETY: each allocation was made by this upload, is freed once (the list is consumed
        // or abandoned by the caller), and the caller synchronized any copy into it.
        if let Err(e) = unsafe { t.mem_free(site, a.ptr, a.bytes) } {
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

/// Uploads every tensor of `plan` from `src` with `strategy`.
pub fn upload(
    t: &Traced,
    strategy: &Strategy,
    src: &dyn TensorSource,
    plan: &Plan,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Uploaded> {
    match strategy.kind {
        StrategyKind::Ztensor => upload_ztensor(t, src, plan, progress),
        StrategyKind::Managed => upload_managed(t, &strategy.managed, src, plan, progress),
        StrategyKind::Pinned => {
            let stager = PinnedStager::create(t, &strategy.pinned)?;
            let result = stager.upload(t, src, plan, progress);
            let destroyed = stager.destroy(t);
            let uploaded = result?;
            if let Err(e) = destroyed {
                let _ = uploaded.free(t);
                return Err(e);
            }
            Ok(uploaded)
        }
    }
}

/// Copies the bytes of the chunk's tensors to their offsets in `dst` (the chunk's image).
fn pack_chunk(src: &dyn TensorSource, placements: &[Placement], dst: &mut [u8]) -> Result<()> {
    for p in placements {
        let bytes = src.bytes(p.tensor);
        if bytes.len() as u64 != p.bytes {
            return Err(Error::InvalidOptions(format!(
                "tensor {} has {} bytes of host data, planned {}",
                p.tensor,
                bytes.len(),
                p.bytes
            )));
        }
        let at = p.offset as usize;
        dst[at..at + bytes.len()].copy_from_slice(bytes);
    }
    Ok(())
}

fn views_for(plan: &Plan, chunk: usize, base: DevicePtr, allocation: usize, views: &mut Vec<View>) {
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

fn chunk_failed(unit: &'static str, index: usize, count: usize, source: Error) -> Error {
    Error::ChunkFailed {
        unit,
        chunk: sat_u32(index),
        count: sat_u32(count),
        source: Box::new(source),
    }
}

fn upload_ztensor(
    t: &Traced,
    src: &dyn TensorSource,
    plan: &Plan,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Uploaded> {
    let count = plan.chunks.len();
    let mut allocations: Vec<Allocation> = Vec::with_capacity(count);
    let mut views = Vec::with_capacity(plan.placements.len());
    let mut done_bytes = 0;
    for (k, chunk) in plan.chunks.iter().enumerate() {
        let site = Site::chunk(plan, k);
        let step = (|| -> Result<()> {
            let ptr = t.mem_alloc(&site, chunk.bytes)?;
            allocations.push(Allocation {
                ptr,
                bytes: chunk.bytes,
                managed: false,
            });
            // A fresh pageable staging buffer per chunk, as ztensor's make([]byte, n).
            let mut staging = vec![0u8; chunk.bytes as usize];
            pack_chunk(src, &plan.placements[chunk.placements()], &mut staging)?;
            // SAFETY: `ptr` is a live allocation of exactly `staging.len()` bytes.
            unsafe { t.memcpy_htod(&site, ptr, &staging) }?;
            views_for(plan, k, ptr, allocations.len() - 1, &mut views);
            Ok(())
        })();
        if let Err(e) = step {
            // All-or-nothing: the copies were synchronous, so nothing is in flight.
            let _ = free_all(t, &allocations, &site);
            return Err(chunk_failed("chunk", k, count, e));
        }
        done_bytes += chunk.bytes;
        progress(&Progress {
            unit: "chunk",
            done: k as u32 + 1,
            count: count as u32,
            bytes_done: done_bytes,
            bytes_total: plan.chunk_bytes(),
        });
    }
    Ok(Uploaded {
        strategy: StrategyKind::Ztensor,
        allocations,
        views,
        chunks: count,
        bytes: plan.tensor_bytes,
    })
}

const MANAGED_GRANULE: u64 = 2 << 20;

fn upload_managed(
    t: &Traced,
    options: &ManagedOptions,
    src: &dyn TensorSource,
    plan: &Plan,
    progress: &mut dyn FnMut(&Progress),
) -> Result<Uploaded> {
    let setup = Site::plain("managed setup");
    let concurrent = t.device_attribute(&setup, DeviceAttribute::ConcurrentManagedAccess)?;
    if concurrent != 1 {
        return Err(Error::Unsupported(
            "the device does not report concurrent managed access \
             (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS = 0); use --strategy pinned"
                .into(),
        ));
    }
    // Never ask for more managed memory than the device has free: over-subscribing managed
    // memory can hang the GPU, not just this process.
    let need: u64 = plan
        .chunks
        .iter()
        .map(|c| c.bytes.div_ceil(MANAGED_GRANULE) * MANAGED_GRANULE)
        .sum();
    let (free, _total) = t.mem_get_info(&setup)?;
    let limit = free.saturating_sub(options.headroom_bytes.max(free / 20));
    if need > limit {
        return Err(Error::InsufficientMemory { need, free, limit });
    }
    let stream = if options.prefetch {
        Some(t.stream_create(&setup)?)
    } else {
        None
    };

    let count = plan.chunks.len();
    let mut allocations: Vec<Allocation> = Vec::with_capacity(count);
    let mut views = Vec::with_capacity(plan.placements.len());
    let mut done_bytes = 0;
    let mut failure = None;
    for (k, chunk) in plan.chunks.iter().enumerate() {
        let site = Site::chunk(plan, k);
        let step = (|| -> Result<()> {
            let ptr = t.mem_alloc_managed(&site, chunk.bytes)?;
            allocations.push(Allocation {
                ptr,
                bytes: chunk.bytes,
                managed: true,
            });
            // SAFETY: managed memory is host-addressable; `ptr` is a fresh allocation of
            // `chunk.bytes` bytes that nothing else references, and no prefetch of it has been
            // issued yet.
            let dst = unsafe {
                std::slice::from_raw_parts_mut(ptr as usize as *mut u8, chunk.bytes as usize)
            };
            pack_chunk(src, &plan.placements[chunk.placements()], dst)?;
            if let Some(stream) = stream {
                // SAFETY: `ptr..ptr+bytes` is managed memory of ours; the stream is live.
                unsafe { t.mem_prefetch_to_device(&site, ptr, chunk.bytes, stream) }?;
            }
            views_for(plan, k, ptr, allocations.len() - 1, &mut views);
            Ok(())
        })();
        if let Err(e) = step {
            failure = Some(chunk_failed("chunk", k, count, e));
            break;
        }
        done_bytes += chunk.bytes;
        progress(&Progress {
            unit: "chunk",
            done: k as u32 + 1,
            count: count as u32,
            bytes_done: done_bytes,
            bytes_total: plan.chunk_bytes(),
        });
    }
    let end = Site::plain("managed finish");
    if let Some(stream) = stream {
        // SAFETY: the stream is live; destroyed once, after the synchronize.
        let synced = unsafe { t.stream_synchronize(&end, stream) };
        // SAFETY: as above.
        let destroyed = unsafe { t.stream_destroy(&end, stream) };
        if failure.is_none() {
            if let Err(e) = synced.and(destroyed) {
                failure = Some(e);
            }
        }
    }
    if let Some(e) = failure {
        let _ = free_all(t, &allocations, &end);
        return Err(e);
    }
    Ok(Uploaded {
        strategy: StrategyKind::Managed,
        allocations,
        views,
        chunks: count,
        bytes: plan.tensor_bytes,
    })
}

/// Pinned staging buffers, their events and the copy stream. Create once and reuse across
/// uploads to keep page-locking out of the hot path; [`upload`] makes a fresh one per call.
#[derive(Debug)]
pub struct PinnedStager {
    options: PinnedOptions,
    buffers: Vec<*mut u8>,
    events: Vec<Event>,
    stream: Option<Stream>,
}

/// Arena alignment of each chunk inside the pinned strategy's single device allocation.
const CHUNK_ALIGN: u64 = 256;

/// A contiguous range of the arena image for one packing thread.
#[derive(Debug, Clone, Copy)]
struct PackJob {
    /// Destination address in a staging buffer for arena offset `from`.
    dst: usize,
    from: u64,
    to: u64,
}

/// Arena offsets of each placement (ascending: chunks are laid out in order).
struct ArenaLayout {
    chunk_base: Vec<u64>,
    starts: Vec<u64>,
    bytes: u64,
}

impl ArenaLayout {
    fn new(plan: &Plan) -> ArenaLayout {
        let mut chunk_base = Vec::with_capacity(plan.chunks.len());
        let mut end = 0u64;
        for c in &plan.chunks {
            let base = end.div_ceil(CHUNK_ALIGN) * CHUNK_ALIGN;
            chunk_base.push(base);
            end = base + c.bytes;
        }
        let starts = plan
            .placements
            .iter()
            .map(|p| chunk_base[p.chunk as usize] + p.offset)
            .collect();
        ArenaLayout {
            chunk_base,
            starts,
            bytes: end,
        }
    }

    /// Placements overlapping arena range `[from, to)`.
    fn overlapping(&self, plan: &Plan, from: u64, to: u64) -> std::ops::Range<usize> {
        let first = self.starts.partition_point(|&s| s < from);
        // The tensor before `first` may straddle `from`.
        let first = if first > 0 && self.starts[first - 1] + plan.placements[first - 1].bytes > from
        {
            first - 1
        } else {
            first
        };
        let last = self.starts.partition_point(|&s| s < to);
        first..last.max(first)
    }
}

/// Copies arena bytes `[job.from, job.to)` of the tensors into the staging buffer.
fn pack_range(
    src: &dyn TensorSource,
    plan: &Plan,
    layout: &ArenaLayout,
    job: PackJob,
) -> Result<()> {
    for i in layout.overlapping(plan, job.from, job.to) {
        let p = &plan.placements[i];
        let bytes = src.bytes(p.tensor);
        if bytes.len() as u64 != p.bytes {
            return Err(Error::InvalidOptions(format!(
                "tensor {} has {} bytes of host data, planned {}",
                p.tensor,
                bytes.len(),
                p.bytes
            )));
        }
        let start = layout.starts[i];
        let lo = start.max(job.from);
        let hi = (start + p.bytes).min(job.to);
        if lo >= hi {
            continue;
        }
        let piece = &bytes[(lo - start) as usize..(hi - start) as usize];
        // SAFETY: `job.dst` addresses arena offset `job.from` inside a live pinned staging
        // buffer that holds the whole job range (`to - from` ≤ buffer size); `lo..hi` lies in
        // the job range, so the write stays inside the buffer. Jobs of one slice cover disjoint
        // ranges, and the buffer's previous copy completed (its event was synchronized) before
        // the slice was published, so nothing else reads or writes these bytes meanwhile.
        unsafe {
            std::ptr::copy_nonoverlapping(
                piece.as_ptr(),
                (job.dst + (lo - job.from) as usize) as *mut u8,
                piece.len(),
            );
        }
    }
    Ok(())
}

/// The packing threads' shared state for one upload: the current slice (published by bumping
/// `generation`), a completion count and the first error.
#[derive(Default)]
struct PackShared {
    generation: AtomicU64,
    dst: AtomicUsize,
    from: AtomicU64,
    to: AtomicU64,
    part: AtomicU64,
    done: AtomicUsize,
    stop: AtomicBool,
    error: Mutex<Option<Error>>,
    /// Sleep instead of spinning when idle (see [`PinnedOptions::spin`]).
    park: bool,
    /// The thread that publishes slices (woken by the last worker to finish, in park mode).
    main: Option<std::thread::Thread>,
}

/// Sets the stop flag and wakes every worker when dropped (also on unwinding), so the scope's
/// join never waits on a sleeping worker.
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

impl PackShared {
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
}

impl PackShared {
    fn record(&self, result: Result<()>) {
        if let Err(e) = result {
            self.error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(e);
        }
    }

    /// Packs part `index` of the published slice.
    fn pack_part(&self, index: usize, src: &dyn TensorSource, plan: &Plan, layout: &ArenaLayout) {
        let (dst, from, to, part) = (
            self.dst.load(Ordering::Relaxed),
            self.from.load(Ordering::Relaxed),
            self.to.load(Ordering::Relaxed),
            self.part.load(Ordering::Relaxed),
        );
        let a = from + index as u64 * part;
        if a >= to {
            return;
        }
        let job = PackJob {
            dst: dst + (a - from) as usize,
            from: a,
            to: (a + part).min(to),
        };
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pack_range(src, plan, layout, job)
        }))
        .unwrap_or_else(|_| Err(Error::Worker("packing thread panicked".into())));
        self.record(result);
    }

    fn worker(
        &self,
        index: usize,
        threads: usize,
        src: &dyn TensorSource,
        plan: &Plan,
        layout: &ArenaLayout,
    ) {
        let mut seen = 0u64;
        loop {
            let mut spins = 0u32;
            let generation = loop {
                if self.stop.load(Ordering::Acquire) {
                    return;
                }
                let g = self.generation.load(Ordering::Acquire);
                if g != seen {
                    break g;
                }
                self.idle(&mut spins);
            };
            seen = generation;
            self.pack_part(index, src, plan, layout);
            let finished = self.done.fetch_add(1, Ordering::AcqRel) + 1;
            if self.park && finished == threads - 1 {
                if let Some(main) = &self.main {
                    main.unpark();
                }
            }
        }
    }

    /// Publishes slice `[from, to)` → staging buffer `dst`, packs part 0 here, waits for the rest.
    #[allow(clippy::too_many_arguments)]
    fn pack_slice(
        &self,
        workers: &[std::thread::Thread],
        threads: usize,
        dst: usize,
        from: u64,
        to: u64,
        src: &dyn TensorSource,
        plan: &Plan,
        layout: &ArenaLayout,
    ) -> Result<()> {
        let part = (to - from).div_ceil(threads as u64).div_ceil(64) * 64;
        self.dst.store(dst, Ordering::Relaxed);
        self.from.store(from, Ordering::Relaxed);
        self.to.store(to, Ordering::Relaxed);
        self.part.store(part, Ordering::Relaxed);
        // Every worker finished the previous slice (we waited), so resetting is race-free.
        self.done.store(0, Ordering::Relaxed);
        // Release: the job fields above are visible to a worker that sees the new generation.
        self.generation.fetch_add(1, Ordering::Release);
        if self.park {
            for w in workers {
                w.unpark();
            }
        }
        self.pack_part(0, src, plan, layout);
        let mut spins = 0u32;
        while self.done.load(Ordering::Acquire) < threads - 1 {
            self.idle(&mut spins);
        }
        match self.error.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl PinnedStager {
    /// Allocates the staging buffers, one event per buffer and the copy stream.
    pub fn create(t: &Traced, options: &PinnedOptions) -> Result<PinnedStager> {
        if options.buffers == 0 || options.buffer_bytes == 0 || options.threads == 0 {
            return Err(Error::InvalidOptions(
                "pinned: buffers, buffer size and threads must be > 0".into(),
            ));
        }
        let mut stager = PinnedStager {
            options: *options,
            buffers: Vec::new(),
            events: Vec::new(),
            stream: None,
        };
        let site = Site::plain("pinned setup");
        let made = (|| -> Result<()> {
            stager.stream = Some(t.stream_create(&site)?);
            for _ in 0..options.buffers {
                stager
                    .buffers
                    .push(t.host_alloc_pinned(&site, options.buffer_bytes)?);
                stager.events.push(t.event_create(&site)?);
            }
            Ok(())
        })();
        match made {
            Ok(()) => Ok(stager),
            Err(e) => {
                let _ = stager.destroy(t);
                Err(e)
            }
        }
    }

    /// Frees buffers, events and stream (after waiting for the stream).
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
        for &b in &self.buffers {
            // SAFETY: our pinned buffers, freed once, no copy in flight (stream synchronized).
            if let Err(err) = unsafe { t.host_free_pinned(&site, b, self.options.buffer_bytes) } {
                first_err.get_or_insert(err);
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

    /// Uploads `plan` into one device allocation through the staging buffers.
    pub fn upload(
        &self,
        t: &Traced,
        src: &dyn TensorSource,
        plan: &Plan,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<Uploaded> {
        let stream = self
            .stream
            .ok_or_else(|| Error::InvalidOptions("pinned stager has no stream".into()))?;
        let layout = ArenaLayout::new(plan);
        let slice = self.options.buffer_bytes;
        let slices = layout.bytes.div_ceil(slice) as usize;
        let chunk_count = plan.chunks.len();
        let arena_site = Site {
            unit: "arena",
            index: 0,
            count: 0,
            chunk: 0,
            chunk_count: sat_u32(chunk_count),
            tensor_first: plan.placements.first().map_or(0, |p| sat_u32(p.tensor)),
            tensor_count: sat_u32(plan.placements.last().map_or(0, |p| p.tensor + 1)),
        };
        let arena = t.mem_alloc(&arena_site, layout.bytes.max(1))?;
        let allocation = Allocation {
            ptr: arena,
            bytes: layout.bytes.max(1),
            managed: false,
        };

        let threads = self.options.threads;
        let shared = PackShared {
            park: !self.options.spin,
            main: Some(std::thread::current()),
            ..PackShared::default()
        };
        let outcome = std::thread::scope(|scope| -> Result<()> {
            // Workers 1..threads wait on `shared.generation`; this thread packs part 0 itself.
            let mut stop = StopOnDrop {
                stop: &shared.stop,
                workers: Vec::with_capacity(threads),
            };
            for worker in 1..threads {
                let (shared, layout) = (&shared, &layout);
                let handle = scope.spawn(move || shared.worker(worker, threads, src, plan, layout));
                stop.workers.push(handle.thread().clone());
            }

            let mut in_use = vec![false; self.buffers.len()];
            let mut done_bytes = 0;
            for s in 0..slices {
                let from = s as u64 * slice;
                let to = (from + slice).min(layout.bytes);
                let range = layout.overlapping(plan, from, to);
                let chunk = plan.placements.get(range.start).map_or(0, |p| p.chunk);
                let site = Site {
                    unit: "slice",
                    index: s as u32,
                    count: sat_u32(slices),
                    chunk,
                    chunk_count: sat_u32(chunk_count),
                    tensor_first: plan
                        .placements
                        .get(range.start)
                        .map_or(0, |p| sat_u32(p.tensor)),
                    tensor_count: sat_u32(range.len()),
                };
                let step = (|| -> Result<()> {
                    let b = s % self.buffers.len();
                    if in_use[b] {
                        // SAFETY: our live event, recorded after the last copy out of buffer b.
                        unsafe { t.event_synchronize(&site, self.events[b]) }?;
                        in_use[b] = false;
                    }
                    let buffer = self.buffers[b] as usize;
                    let len = to - from;
                    shared.pack_slice(
                        &stop.workers,
                        threads,
                        buffer,
                        from,
                        to,
                        src,
                        plan,
                        &layout,
                    )?;
                    // SAFETY: destination `arena+from .. arena+to` lies in the arena; the source
                    // is staging buffer b, which is not written again until `events[b]`
                    // (recorded right after) has been synchronized.
                    unsafe {
                        t.memcpy_htod_async(
                            &site,
                            arena + from,
                            buffer as *const u8,
                            len as usize,
                            stream,
                        )
                    }?;
                    // SAFETY: live event and stream.
                    unsafe { t.event_record(&site, self.events[b], stream) }?;
                    in_use[b] = true;
                    Ok(())
                })();
                step.map_err(|e| chunk_failed("slice", s, slices, e))?;
                done_bytes += to - from;
                progress(&Progress {
                    unit: "slice",
                    done: s as u32 + 1,
                    count: slices as u32,
                    bytes_done: done_bytes,
                    bytes_total: layout.bytes,
                });
            }
            let end = Site {
                unit: "slice",
                index: sat_u32(slices.saturating_sub(1)),
                count: sat_u32(slices),
                chunk: sat_u32(chunk_count.saturating_sub(1)),
                chunk_count: sat_u32(chunk_count),
                tensor_first: 0,
                tensor_count: 0,
            };
            // SAFETY: our live stream.
            unsafe { t.stream_synchronize(&end, stream) }
                .map_err(|e| chunk_failed("slice", slices.saturating_sub(1), slices, e))
        });
        if let Err(e) = outcome {
            let site = Site::plain("pinned rollback");
            // SAFETY: our live stream; wait for copies into the arena before freeing it.
            let _ = unsafe { t.stream_synchronize(&site, stream) };
            let _ = free_all(t, &[allocation], &site);
            return Err(e);
        }
        let mut views = Vec::with_capacity(plan.placements.len());
        for (k, base) in layout.chunk_base.iter().enumerate() {
            views_for(plan, k, arena + base, 0, &mut views);
        }
        Ok(Uploaded {
            strategy: StrategyKind::Pinned,
            allocations: vec![allocation],
            views,
            chunks: chunk_count,
            bytes: plan.tensor_bytes,
        })
    }
}
