//! Where a plan's tensors lie in the pinned arena, and packing arena ranges into staging.

use crate::driver::DevicePtr;
use crate::error::Result;
use crate::outcome::{placed_bytes, views_for, View};
use crate::pack::{self, PackStore};
use crate::plan::{Placement, Plan};
use crate::workload::TensorSource;

/// Arena alignment of each chunk inside the pinned strategy's single device allocation.
const CHUNK_ALIGN: u64 = 256;

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
    pub(super) fn overlapping(&self, plan: &Plan, from: u64, to: u64) -> std::ops::Range<usize> {
        let start = |p: &Placement| self.chunk_base[p.chunk as usize] + p.offset;
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

/// Streaming pieces whose tensors average fewer bytes than this are packed through a bounce buffer
/// ([`pack_range`]).
pub const GATHER_BELOW_MEAN_TENSOR: u64 = 4 << 10;

/// The bounce buffer of a gathered streaming pack: 4 KiB, stays in L1.
const BOUNCE: usize = 4 << 10;

#[repr(C, align(64))]
struct Bounce([u8; BOUNCE]);

/// Copies arena bytes `[from, to)` of `plan`'s tensors (laid out by `layout`) to `dst`: the
/// packing threads' inner loop, public so `benches/pack.rs` measures the very same code.
///
/// With [`PackStore::Streaming`] and small tensors (a mean under [`GATHER_BELOW_MEAN_TENSOR`] in
/// the range), the tensors are gathered into a 4 KiB bounce buffer in L1 with plain copies and
/// the buffer is written out with non-temporal stores: every staging line is then written whole
/// by streaming stores, 4 KiB at a time. Packed one by one, a 772-byte tensor's first and last
/// lines are shared with its neighbours and written with plain stores (a read-for-ownership
/// each, the mixed line flushed from the write-combining buffers half full), and each tensor
/// pays the streaming copy's alignment prologue. Otherwise [`pack_range_per_tensor`]. Padding
/// between tensors is never written, either way.
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
    let range = layout.overlapping(plan, from, to);
    let gather = store == PackStore::Streaming
        && !range.is_empty()
        && (to - from) / (range.len() as u64) < GATHER_BELOW_MEAN_TENSOR;
    if gather {
        // SAFETY: forwarded caller contract.
        unsafe { pack_gathered(src, plan, layout, range, dst, from, to) }
    } else {
        // SAFETY: forwarded caller contract.
        unsafe { pack_range_per_tensor(src, plan, layout, store, dst, from, to) }
    }
}

/// [`pack_range`] one tensor at a time: per tensor, one source lookup and one copy with `store`
/// (what `pack_range` does for plain stores and large tensors; public so `benches/pack.rs`
/// compares the gathered path with it in the same run). (Looking sources up four tensors ahead
/// and prefetching them measured 5–9 % slower on the H200 host, so it is not done; BENCHMARKS.md.)
///
/// # Safety
/// As [`pack_range`].
pub unsafe fn pack_range_per_tensor(
    src: &dyn TensorSource,
    plan: &Plan,
    layout: &ArenaLayout,
    store: PackStore,
    dst: *mut u8,
    from: u64,
    to: u64,
) -> Result<()> {
    for p in &plan.placements[layout.overlapping(plan, from, to)] {
        let Some((piece, offset)) = piece_in(src, layout, p, from, to)? else {
            continue;
        };
        // SAFETY: the piece lies in `from..to`, so the write of its bytes at `dst + offset`
        // stays inside the caller's destination (caller contract); `piece` is the tensor's own
        // host memory, a different allocation.
        unsafe { pack::copy(store, piece.as_ptr(), dst.add(offset), piece.len()) };
    }
    Ok(())
}

/// The bytes of placement `p` that lie in arena range `[from, to)`, and their offset from `from`
/// (`None`: none do).
fn piece_in<'s>(
    src: &'s dyn TensorSource,
    layout: &ArenaLayout,
    p: &Placement,
    from: u64,
    to: u64,
) -> Result<Option<(&'s [u8], usize)>> {
    let bytes = placed_bytes(src, p)?;
    let start = layout.chunk_base[p.chunk as usize] + p.offset;
    let lo = start.max(from);
    let hi = (start + p.bytes).min(to);
    if lo >= hi {
        return Ok(None);
    }
    let piece = &bytes[(lo - start) as usize..(hi - start) as usize];
    Ok(Some((piece, (lo - from) as usize)))
}

/// A run of consecutive destination bytes gathered in the bounce buffer: `bounce[head..filled]`
/// goes to `dst + at`, where `head ≡ at (mod 64)` so whole bounce lines are whole staging lines.
struct Run {
    bounce: Bounce,
    head: usize,
    filled: usize,
    at: usize,
}

impl Run {
    /// Writes the gathered bytes out (streaming stores for the whole lines) and starts an empty
    /// run at destination offset `next` (after a full bounce, the next line boundary).
    ///
    /// # Safety
    /// `dst + at .. dst + at + (filled - head)` is inside the caller's destination.
    unsafe fn flush(&mut self, dst: *mut u8, next: usize) {
        let len = self.filled - self.head;
        if len > 0 {
            // SAFETY: the bounce bytes are ours; the destination range is the caller's
            // (contract above); they do not overlap (the bounce is on this stack).
            unsafe {
                pack::copy(
                    PackStore::Streaming,
                    self.bounce.0.as_ptr().add(self.head),
                    dst.add(self.at),
                    len,
                )
            };
        }
        self.head = (dst as usize).wrapping_add(next) % 64;
        self.filled = self.head;
        self.at = next;
    }
}

/// [`pack_range`]'s gathered streaming path over the placements `range`.
///
/// # Safety
/// As [`pack_range`].
unsafe fn pack_gathered(
    src: &dyn TensorSource,
    plan: &Plan,
    layout: &ArenaLayout,
    range: std::ops::Range<usize>,
    dst: *mut u8,
    from: u64,
    to: u64,
) -> Result<()> {
    let head = (dst as usize) % 64;
    let mut run = Run {
        bounce: Bounce([0; BOUNCE]),
        head,
        filled: head,
        at: 0,
    };
    for p in &plan.placements[range] {
        let Some((mut piece, offset)) = piece_in(src, layout, p, from, to)? else {
            continue;
        };
        if offset != run.at + (run.filled - run.head) {
            // Padding before this tensor: never written, so the run ends here.
            // SAFETY: the run's bytes lie before `offset`, inside the destination.
            unsafe { run.flush(dst, offset) };
        }
        while !piece.is_empty() {
            let n = piece.len().min(BOUNCE - run.filled);
            run.bounce.0[run.filled..run.filled + n].copy_from_slice(&piece[..n]);
            run.filled += n;
            piece = &piece[n..];
            if run.filled == BOUNCE {
                let next = run.at + (BOUNCE - run.head);
                // SAFETY: the run's bytes are tensor bytes of `[from, to)`: inside the
                // destination.
                unsafe { run.flush(dst, next) };
            }
        }
    }
    let end = run.at + (run.filled - run.head);
    // SAFETY: as above.
    unsafe { run.flush(dst, end) };
    Ok(())
}

/// The upload's per-tensor views, built one chunk at a time while the submitting thread waits
/// for packers: for many small tensors they are megabytes of fresh memory to write (page
/// faults included), which after the last copy would add to the upload's time.
pub(super) struct ViewBuilder {
    pub(super) views: Vec<View>,
    pub(super) next_chunk: usize,
}

impl ViewBuilder {
    /// Adds the next chunk's views; false once every chunk has its views.
    pub(super) fn step(&mut self, plan: &Plan, layout: &ArenaLayout, arena: DevicePtr) -> bool {
        let Some(&base) = layout.chunk_base.get(self.next_chunk) else {
            return false;
        };
        views_for(plan, self.next_chunk, arena + base, 0, &mut self.views);
        self.next_chunk += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

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

    /// `samples` tensors of 193 floats (the real workload's 772 bytes) and `params` of
    /// `param_floats`, planned in chunks of at most `chunk_bytes` / `chunk_tensors`, unaligned.
    fn small_tensors(
        samples: usize,
        params: usize,
        param_floats: usize,
        chunk_bytes: u64,
        chunk_tensors: u32,
        seed: u64,
    ) -> (crate::Workload, Plan, ArenaLayout) {
        use crate::workload::{Workload, WorkloadSpec};
        let w = Workload::synthetic(&WorkloadSpec {
            samples,
            sample_floats: 193,
            params,
            param_floats,
            seed,
        });
        let options = crate::PlanOptions {
            chunk_bytes,
            chunk_tensors,
            min_eligible: 1,
            alignment: None,
        };
        let plan = bulk(&w, &options);
        let layout = ArenaLayout::new(&plan);
        (w, plan, layout)
    }

    /// Any arena range, cut anywhere (inside a tensor, across chunk padding, fewer tensors than
    /// the lookahead, more), packs exactly the arena image's bytes of that range.
    #[test]
    fn pack_range_writes_exactly_the_arena_image_of_any_range() {
        let (w, plan, layout) = small_tensors(300, 3, 3000, 10_000, 7, 3);
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

    /// The gathered streaming path writes what the per-tensor path writes, at every alignment of
    /// the destination and of the range, and nothing else (not padding, not past the range).
    #[test]
    fn gathered_streaming_matches_the_per_tensor_path_at_every_alignment() {
        let (w, plan, layout) = small_tensors(40, 2, 50, 9_000, 9, 5);
        let end = layout.bytes();
        for shift in [0usize, 1, 8, 31, 63] {
            for (from, to) in [
                (0, end),
                (5, end - 3),
                (772, 772 * 9),
                (4000, 4000 + 4096 + 70),
            ] {
                let len = (to - from) as usize;
                let mut gathered = vec![0x5au8; len + 128];
                let mut per_tensor = gathered.clone();
                // SAFETY: each output has `shift + len` bytes and a guard tail, ours alone.
                unsafe {
                    let dst = gathered.as_mut_ptr().add(shift);
                    pack_range(&w, &plan, &layout, PackStore::Streaming, dst, from, to).unwrap();
                    let dst = per_tensor.as_mut_ptr().add(shift);
                    pack_range_per_tensor(&w, &plan, &layout, PackStore::Plain, dst, from, to)
                        .unwrap();
                }
                pack::publish_fence(PackStore::Streaming);
                assert!(gathered == per_tensor, "shift {shift}, [{from}, {to})");
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
}
