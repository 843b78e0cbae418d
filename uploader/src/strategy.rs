//! The upload strategies. All three produce the same result: every planned tensor on the
//! device, with a [`View`](crate::outcome::View) (chunk, offset, length, device pointer) per tensor.
//!
//! - `ztensor`: ztensor's path, reproduced: per chunk one `cuMemAlloc`, one freshly allocated
//!   pageable staging buffer packed on the host, one synchronous `cuMemcpyHtoD`.
//! - `managed`: per chunk one `cuMemAllocManaged`, packed by the host directly into it, then
//!   prefetched to the device. Runs only where the device reports concurrent managed access,
//!   and only if the whole upload fits in the memory the device reports free (minus headroom).
//! - `pinned`: one device allocation for all chunks, a ring of pinned staging buffers filled by
//!   packing threads while earlier buffers are copied asynchronously on a stream; an event per
//!   buffer says when it may be refilled ([`crate::pinned`]).
//!
//! Failure is all-or-nothing for every strategy: if chunk k fails, work in flight is waited
//! for and every device allocation this upload made is freed before the error
//! ([`Error::ChunkFailed`]) is returned. (ztensor itself leaves chunks 0..k uploaded.)

use serde::Serialize;

use crate::driver::DeviceAttribute;
use crate::error::{chunk_failed, Error, Result};
use crate::outcome::{
    elapsed_ns, free_all, placed_bytes, views_for, Allocation, DeviceMemory, Progress,
    StrategyKind, Uploaded,
};
use crate::pinned::{PinnedOptions, PinnedStager};
use crate::plan::{Placement, Plan};
use crate::trace::{Site, Traced};
use crate::workload::TensorSource;

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
            let mut options = strategy.pinned;
            let slices = plan
                .tensor_bytes
                .div_ceil(options.buffer_bytes.max(1))
                .max(1);
            options.buffers = one_shot_buffers(&options, slices);
            let stager = PinnedStager::create_one_shot(t, &options)?;
            let created_ns = stager.created_ns();
            let created_register_ns = stager.created_register_ns();
            let result = stager.upload(t, src, plan, progress);
            let teardown = std::time::Instant::now();
            let destroyed = stager.destroy(t);
            let teardown_ns = elapsed_ns(teardown);
            let mut uploaded = result?;
            if let Err(e) = destroyed {
                let _ = uploaded.free(t);
                return Err(e);
            }
            if let Some(stats) = uploaded.pinned.as_mut() {
                stats.staging_ns = created_ns;
                stats.register_ns += created_register_ns;
                stats.teardown_ns = teardown_ns;
            }
            Ok(uploaded)
        }
    }
}

/// With `fit_ring`, a one-shot stager gets at least this many buffers...
const FIT_RING_MIN_BUFFERS: usize = 6;
/// ...and one buffer per this many slices of the upload, up to the configured ring.
const FIT_RING_SLICES_PER_BUFFER: u64 = 8;

/// Buffers of a stager made for one upload of `slices` slices. A ring larger than the upload
/// would only cost page-locking. With `fit_ring`, a small upload also gets a shallower ring:
/// faulting in, page-locking and unlocking a 4 MiB buffer costs about as long as copying it
/// three or four times, so a buffer used fewer than [`FIT_RING_SLICES_PER_BUFFER`] times is
/// mostly setup; below [`FIT_RING_MIN_BUFFERS`] the packers stall on the copies instead
/// (BENCHMARKS.md, "Uploader", measures what that saves and costs).
pub(crate) fn one_shot_buffers(options: &PinnedOptions, slices: u64) -> usize {
    let cap = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    let mut buffers = options.buffers.min(cap(slices));
    if options.fit_ring {
        let fitted = cap(slices / FIT_RING_SLICES_PER_BUFFER).max(FIT_RING_MIN_BUFFERS);
        buffers = buffers.min(fitted);
    }
    // 0 stays 0: `create` refuses it.
    buffers
}

/// Copies the bytes of the chunk's tensors to their offsets in `dst` (the chunk's image).
fn pack_chunk(src: &dyn TensorSource, placements: &[Placement], dst: &mut [u8]) -> Result<()> {
    for p in placements {
        let bytes = placed_bytes(src, p)?;
        let at = p.offset as usize;
        dst[at..at + bytes.len()].copy_from_slice(bytes);
    }
    Ok(())
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
                memory: DeviceMemory::Device,
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
        pinned: None,
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
                memory: DeviceMemory::Managed,
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
        pinned: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_shot_ring_fits_the_upload() {
        let fixed = PinnedOptions {
            buffers: 8,
            fit_ring: false,
            ..PinnedOptions::default()
        };
        let fit = PinnedOptions {
            fit_ring: true,
            ..fixed
        };
        // (slices, buffers as given, buffers fitted)
        for (slices, given, fitted) in [
            (1, 1, 1),
            (3, 3, 3),
            (40, 8, 6),   // never fewer than 6
            (53, 8, 6),   // the real workload in 4 MiB slices
            (56, 8, 7),   // one buffer per 8 slices
            (1024, 8, 8), // 4 GiB: the whole configured ring
        ] {
            assert_eq!(one_shot_buffers(&fixed, slices), given, "{slices} slices");
            assert_eq!(
                one_shot_buffers(&fit, slices),
                fitted,
                "{slices} slices, fit"
            );
        }
        let deep = PinnedOptions { buffers: 2, ..fit };
        assert_eq!(
            one_shot_buffers(&deep, 1024),
            2,
            "never more than configured"
        );
    }
}
