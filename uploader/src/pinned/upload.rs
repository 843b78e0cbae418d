//! One upload through a [`PinnedStager`]: the submitting thread's side of the pipeline.
//!
//! [`PinnedStager::upload`] allocates the arena, starts the packers and hands the submitting
//! thread's work to a [`Submitter`]: per slice, wait for its pieces (doing chores meanwhile),
//! copy it out, and hand back the buffers whose copies finished.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::thread::{Scope, Thread};
use std::time::Instant;

use super::layout::{ArenaLayout, ViewBuilder};
use super::options::ArenaMemory;
use super::pipeline::{
    Calibration, Pipeline, StopOnDrop, DECIDED_PLAIN, DECIDED_STREAMING, UNDECIDED,
};
use super::stager::PinnedStager;
use super::staging::{register_group, FaultPass, Staging};
use crate::driver::{DevicePtr, Stream};
use crate::error::{chunk_failed, Error, Result};
use crate::outcome::{
    elapsed_ns, free_all, Allocation, DeviceMemory, PinnedStats, Progress, StrategyKind, Uploaded,
};
use crate::pack::PackStore;
use crate::plan::Plan;
use crate::trace::{sat_u32, Site, Traced};
use crate::workload::TensorSource;

impl PinnedStager {
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
        let slices = layout.bytes.div_ceil(self.options.buffer_bytes);
        let chunk_count = plan.chunks.len();
        let mut stats = self.fresh_stats(staging);
        let (allocation, arena_ns) = self.allocate_arena(t, plan, &layout, stream)?;
        stats.arena_ns = arena_ns;
        stats.arena_memory = allocation.memory;
        let arena = allocation.ptr;

        let pipeline = self.pipeline_for(src, plan, &layout, staging, slices);
        let sites = SliceSites {
            plan,
            layout: &layout,
            slice: self.options.buffer_bytes,
            slices,
            chunk_count,
        };
        let mut views = ViewBuilder {
            views: Vec::with_capacity(plan.placements.len()),
            next_chunk: 0,
        };
        let used_buffers = self.used_buffers(slices);
        let used_groups = staging
            .groups
            .partition_point(|g| g.buffers.start < used_buffers);
        let packing = Instant::now();
        let mut finishing = None;
        let outcome = std::thread::scope(|scope| -> Result<()> {
            let mut stop = StopOnDrop {
                stop: &pipeline.stop,
                workers: Vec::with_capacity(self.options.threads),
            };
            self.start_packers(scope, &pipeline, &mut stop)?;
            stats.setup_ns = elapsed_ns(called);
            let mut submitter = Submitter {
                stager: self,
                t,
                staging,
                pipeline: &pipeline,
                sites: &sites,
                stream,
                arena,
                workers: &stop.workers,
                stats: &mut stats,
                views: &mut views,
                in_flight: VecDeque::with_capacity(self.options.buffers),
                used_groups,
                next_group: 0,
                retired_at: 0,
            };
            submitter.submit_every_slice(packing, progress)?;
            submitter.finish_copies()?;
            finishing = Some(Instant::now());
            Ok(())
        });
        record_store_choice(&mut stats, &pipeline);
        if let Err(e) = outcome {
            roll_back(t, stream, allocation);
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

    /// An upload's stats before anything was timed.
    fn fresh_stats(&self, staging: &Staging) -> PinnedStats {
        PinnedStats {
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
        }
    }

    /// The device arena for `layout` (at least one byte), from the session's pool or
    /// `cuMemAlloc` as the options say, and the nanoseconds allocating it took.
    fn allocate_arena(
        &self,
        t: &Traced,
        plan: &Plan,
        layout: &ArenaLayout,
        stream: Stream,
    ) -> Result<(Allocation, u64)> {
        let arena_site = Site {
            unit: "arena",
            index: 0,
            count: 0,
            chunk: 0,
            chunk_count: sat_u32(plan.chunks.len()),
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
        let arena_ns = elapsed_ns(started);
        let allocation = Allocation {
            ptr: arena,
            bytes: arena_bytes,
            memory,
        };
        Ok((allocation, arena_ns))
    }

    /// Buffers an upload of `slices` slices fills.
    fn used_buffers(&self, slices: u64) -> usize {
        usize::try_from(slices)
            .unwrap_or(usize::MAX)
            .min(self.options.buffers)
    }

    /// The shared packing state of one upload of `plan` into `staging`.
    fn pipeline_for<'a>(
        &self,
        src: &'a dyn TensorSource,
        plan: &'a Plan,
        layout: &'a ArenaLayout,
        staging: &'a Staging,
        slices: u64,
    ) -> Pipeline<'a> {
        let slice = self.options.buffer_bytes;
        let piece = self
            .options
            .piece_bytes
            .min(slice)
            .next_multiple_of(64)
            .min(slice.next_multiple_of(64));
        Pipeline {
            src,
            plan,
            layout,
            faults: staging.faults.as_ref(),
            // The pages of the buffers this upload fills (to fault in, for `Overlap`).
            fault_limit: FaultPass::pages(0, self.used_buffers(slices) * staging.stride).end,
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
            decided: AtomicU8::new(
                match self
                    .options
                    .store
                    .for_mean_tensor(plan.tensor_bytes / (plan.placements.len().max(1) as u64))
                {
                    PackStore::Plain | PackStore::BySize => DECIDED_PLAIN,
                    PackStore::Streaming => DECIDED_STREAMING,
                    PackStore::Auto => UNDECIDED,
                },
            ),
            calibration: Mutex::new(Calibration::default()),
            park: !self.options.spin,
            gather: self.options.gather,
            submitter: std::thread::current(),
        }
    }

    /// Starts the packing threads in `scope`, each registered with `stop`.
    fn start_packers<'scope>(
        &self,
        scope: &'scope Scope<'scope, '_>,
        pipeline: &'scope Pipeline<'_>,
        stop: &mut StopOnDrop<'_>,
    ) -> Result<()> {
        for _ in 0..self.options.threads {
            // Packers already started are stopped and joined by `stop` and the scope.
            let handle = std::thread::Builder::new()
                .name("wedge-pack".into())
                .spawn_scoped(scope, move || pipeline.worker())
                .map_err(|e| Error::Worker(format!("cannot start a packing thread: {e}")))?;
            stop.workers.push(handle.thread().clone());
        }
        Ok(())
    }
}

/// The store the upload packed with, and `Auto`'s calibration speeds.
fn record_store_choice(stats: &mut PinnedStats, pipeline: &Pipeline<'_>) {
    stats.store = pipeline.store_used();
    let c = pipeline
        .calibration
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    stats.calibration_plain_mbps = Calibration::median_mbps(&c.plain);
    stats.calibration_streaming_mbps = Calibration::median_mbps(&c.streaming);
}

/// A failed upload frees its arena, once the copies into it are done (errors ignored: the
/// upload's own error is the one to report).
fn roll_back(t: &Traced, stream: Stream, allocation: Allocation) {
    let site = Site::plain("pinned rollback");
    // SAFETY: our live stream; wait for copies into the arena before freeing it.
    let _ = unsafe { t.stream_synchronize(&site, stream) };
    let _ = free_all(t, &[allocation], &site);
}

/// Where each slice of an upload lies, for errors and traces.
struct SliceSites<'a> {
    plan: &'a Plan,
    layout: &'a ArenaLayout,
    slice: u64,
    slices: u64,
    chunk_count: usize,
}

impl SliceSites<'_> {
    fn of(&self, s: u64) -> Site {
        let from = s * self.slice;
        let to = (from + self.slice).min(self.layout.bytes);
        let range = self.layout.overlapping(self.plan, from, to);
        Site {
            unit: "slice",
            index: sat_u32(s as usize),
            count: sat_u32(self.slices as usize),
            chunk: self.plan.placements.get(range.start).map_or(0, |p| p.chunk),
            chunk_count: sat_u32(self.chunk_count),
            tensor_first: self
                .plan
                .placements
                .get(range.start)
                .map_or(0, |p| sat_u32(p.tensor)),
            tensor_count: sat_u32(range.len()),
        }
    }

    /// `e`, as the failure of slice `s`.
    fn failed(&self, s: u64, e: Error) -> Error {
        chunk_failed("slice", s as usize, self.slices as usize, e)
    }
}

/// The submitting thread's state during one upload: which slices hold a copy in flight, which
/// registration groups are locked, where its time went.
struct Submitter<'u, 'p> {
    stager: &'u PinnedStager,
    t: &'u Traced<'u>,
    staging: &'u Staging,
    pipeline: &'u Pipeline<'p>,
    sites: &'u SliceSites<'p>,
    stream: Stream,
    arena: DevicePtr,
    /// The packing threads, woken when buffers are released.
    workers: &'u [Thread],
    stats: &'u mut PinnedStats,
    views: &'u mut ViewBuilder,
    /// Slices whose copy was submitted and not yet seen finished, oldest first.
    in_flight: VecDeque<u64>,
    /// Registration groups holding the buffers this upload fills.
    used_groups: usize,
    /// Groups below this one are page-locked (`Overlap` locks them while it waits).
    next_group: usize,
    /// Slices below this were released when finished groups were last looked for.
    retired_at: u64,
}

impl Submitter<'_, '_> {
    /// Waits for, copies out and reports every slice in order.
    fn submit_every_slice(
        &mut self,
        packing: Instant,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<()> {
        let (slice, slices) = (self.sites.slice, self.sites.slices);
        let mut done_bytes = 0;
        for s in 0..slices {
            let from = s * slice;
            let to = (from + slice).min(self.sites.layout.bytes);
            self.wait_packed(s)?;
            if s == 0 {
                self.stats.first_slice_ns = elapsed_ns(packing);
            }
            let submitting = Instant::now();
            let copy_waited = self.stats.copy_wait_ns;
            self.copy_out(s, from, to)
                .map_err(|e| self.sites.failed(s, e))?;
            self.in_flight.push_back(s);
            self.hand_back_finished()?;
            self.stats.submit_ns +=
                elapsed_ns(submitting) - (self.stats.copy_wait_ns - copy_waited);
            done_bytes += to - from;
            progress(&Progress {
                unit: "slice",
                done: sat_u32(s as usize + 1),
                count: sat_u32(slices as usize),
                bytes_done: done_bytes,
                bytes_total: self.sites.layout.bytes,
            });
        }
        Ok(())
    }

    /// Waits until every piece of slice `s` is packed, doing chores meanwhile.
    fn wait_packed(&mut self, s: u64) -> Result<()> {
        let waited = Instant::now();
        let pipeline = self.pipeline;
        let help = self.stager.options.submitter_packs;
        pipeline.wait_filled(s, help, &mut || self.chore())?;
        self.stats.pack_wait_ns += elapsed_ns(waited);
        Ok(())
    }

    /// One short piece of work while waiting for packers: lock the next group whose pages are
    /// in, retire groups no longer needed, build views. False when there was none.
    fn chore(&mut self) -> Result<bool> {
        let (t, staging) = (self.t, self.staging);
        if self.next_group < self.used_groups && staging.group_faulted(self.next_group) {
            let g = self.next_group;
            let first_slice = staging.groups[g].buffers.start as u64;
            self.stats.register_ns += register_group(t, &self.sites.of(first_slice), staging, g)
                .map_err(|e| self.sites.failed(first_slice, e))?;
            self.next_group += 1;
            return Ok(true);
        }
        let released = self.pipeline.released.load(Ordering::Relaxed);
        if self.stager.one_shot && released > self.retired_at {
            self.retired_at = released;
            self.stats.unregister_ns +=
                self.stager
                    .retire(t, staging, released, self.sites.slices)?;
            return Ok(true);
        }
        Ok(self
            .views
            .step(self.sites.plan, self.sites.layout, self.arena))
    }

    /// Copies packed slice `s` (arena bytes `[from, to)`) out of its buffer, locking the
    /// buffer's group first if no chore did, and records the buffer's event after the copy.
    fn copy_out(&mut self, s: u64, from: u64, to: u64) -> Result<()> {
        let (t, staging, pipeline) = (self.t, self.staging, self.pipeline);
        let site = self.sites.of(s);
        let buffer = pipeline.buffer(s);
        let b = (s % pipeline.buffers) as usize;
        let g = staging.group_of(b);
        if !staging.groups[g].registered.load(Ordering::Acquire) {
            let registering = Instant::now();
            pipeline.wait_faulted(staging, g)?;
            register_group(t, &site, staging, g)?;
            self.stats.register_ns += elapsed_ns(registering);
            self.next_group = self.next_group.max(g + 1);
        }
        // SAFETY: destination `arena+from .. arena+to` lies in the arena; the source is staging
        // buffer b, fully packed (every piece published), page-locked, and not written again
        // until `events[b]` (recorded right after) was waited for.
        unsafe {
            t.memcpy_htod_async(
                &site,
                self.arena + from,
                buffer as *const u8,
                (to - from) as usize,
                self.stream,
            )
        }?;
        // SAFETY: live event and stream.
        unsafe { t.event_record(&site, self.stager.events[b], self.stream) }
    }

    /// Hands back every buffer whose copy has finished, so packers can run ahead; blocks only
    /// when every buffer holds a submitted copy.
    fn hand_back_finished(&mut self) -> Result<()> {
        let (t, pipeline) = (self.t, self.pipeline);
        while let Some(&oldest) = self.in_flight.front() {
            let b = (oldest % pipeline.buffers) as usize;
            let oldest_site = self.sites.of(oldest);
            let failed = |e| self.sites.failed(oldest, e);
            let event = self.stager.events[b];
            if self.in_flight.len() == self.stager.options.buffers {
                let waited = Instant::now();
                // SAFETY: our live event, recorded after the copy out of buffer b.
                unsafe { t.event_synchronize(&oldest_site, event) }.map_err(failed)?;
                self.stats.copy_wait_ns += elapsed_ns(waited);
            } else {
                // SAFETY: as above.
                let done = unsafe { t.event_query(&oldest_site, event) }.map_err(failed)?;
                if !done {
                    break;
                }
            }
            self.in_flight.pop_front();
            pipeline.release(oldest + 1, self.workers);
        }
        Ok(())
    }

    /// After the last slice was submitted: a one-shot stager unlocks what is finished while
    /// the last copies run; then wait for every copy.
    fn finish_copies(&mut self) -> Result<()> {
        let (t, pipeline) = (self.t, self.pipeline);
        let last = self.sites.slices.saturating_sub(1);
        if self.stager.one_shot {
            while let Some(&oldest) = self.in_flight.front() {
                let b = (oldest % pipeline.buffers) as usize;
                // SAFETY: our live event, recorded after the copy out of buffer b.
                let done = unsafe { t.event_query(&self.sites.of(oldest), self.stager.events[b]) }
                    .map_err(|e| self.sites.failed(oldest, e))?;
                if !done {
                    break;
                }
                self.in_flight.pop_front();
                pipeline.release(oldest + 1, self.workers);
            }
            let released = pipeline.released.load(Ordering::Relaxed);
            self.stats.unregister_ns +=
                self.stager
                    .retire(t, self.staging, released, self.sites.slices)?;
        }
        let waited = Instant::now();
        // SAFETY: our live stream.
        unsafe { t.stream_synchronize(&self.sites.of(last), self.stream) }
            .map_err(|e| self.sites.failed(last, e))?;
        self.stats.copy_wait_ns += elapsed_ns(waited);
        Ok(())
    }
}
