//! One upload through a [`PinnedStager`]: the submitting thread's side of the pipeline.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::layout::{ArenaLayout, ViewBuilder};
use super::pipeline::{
    Calibration, Pipeline, StopOnDrop, DECIDED_PLAIN, DECIDED_STREAMING, UNDECIDED,
};
use super::staging::{register_group, FaultPass};
use super::{elapsed_ns, ArenaMemory, PinnedStager, PinnedStats};
use crate::error::{Error, Result};
use crate::pack::PackStore;
use crate::plan::Plan;
use crate::strategy::{
    chunk_failed, free_all, Allocation, DeviceMemory, Progress, StrategyKind, Uploaded,
};
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
