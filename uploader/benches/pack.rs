//! Host packing bandwidth: how fast the pinned pipeline's packing threads can copy tensors into
//! a staging ring with no GPU involved — the upper bound on `pinned` wherever packing, not the
//! copy engine, is the bottleneck. Same code as the pipeline (`uploader::pack::copy`, pieces
//! claimed from one atomic counter), same shapes as the 4 GiB `--compare` workload (tensors of
//! 256 KiB, each its own allocation; pieces of 256 KiB; a 16 MiB ring).
//!
//!   cargo bench -p uploader --bench pack
//!   WEDGE_BENCH_PACK_MIB=4096 WEDGE_BENCH_PACK_THREADS=1,4,8,12 cargo bench -p uploader --bench pack
//!   WEDGE_BENCH_PACK_MIB=0 cargo bench -p uploader --bench pack    # the real workload only
//!
//! Rows: source (each tensor its own allocation, as `Workload` does, or one mapping advised for
//! transparent huge pages) × store (plain memcpy, non-temporal) × ring (4 KiB pages, or advised
//! huge pages) × thread count. Baseline: one thread, plain stores, per-tensor source, 4 KiB ring,
//! measured in the same run. Median of the rounds.
//!
//! Then the real workload's shape (213,304 tensors of 772 bytes and 50 of 1 MiB, each its own
//! allocation, generated as `upload` generates them), packed through the pipeline's own
//! `pack_range` into an 8 × 4 MiB ring in 256 KiB pieces, against two references in the same
//! run: the per-tensor loop of commit 6c50d19 (a per-tensor arena table, one lookup and one
//! copy per tensor) and the same bytes copied from one contiguous image (no per-tensor cost at
//! all). The ratio to that image is the per-tensor cost made visible. 512 MiB are written
//! between packs (`WEDGE_BENCH_PACK_FLUSH_MIB`) so the sources come from memory.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use breadcrumb::identity::clock_ns;
use uploader::pack::{copy, publish_fence, PackStore};
use uploader::pinned::{pack_range, pack_range_per_tensor, ArenaLayout};
use uploader::workload::{Workload, WorkloadSpec};
use uploader::{plan, Plan, PlanOptions, Planned, TensorSource};

const TENSOR: usize = 256 << 10;
const PIECE: usize = 256 << 10;
const RING: usize = 16 << 20;
const HUGE: usize = 2 << 20;

fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(name)
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty())
        .unwrap_or_else(|| default.to_vec())
}

/// A private anonymous mapping, 2 MiB aligned, optionally advised for huge pages, written once
/// so it is resident. Never unmapped (the bench exits).
fn mapping(len: usize, huge: bool) -> &'static mut [u8] {
    // SAFETY: a fresh anonymous mapping.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len + HUGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(raw, libc::MAP_FAILED, "mmap {len} bytes");
    let raw = raw.cast::<u8>();
    // SAFETY: the aligned start lies within the `len + HUGE` bytes just mapped.
    let base = unsafe { raw.add(raw.align_offset(HUGE)) };
    if huge {
        // SAFETY: advice on our own mapping; failure (THP off) only means 4 KiB pages.
        unsafe { libc::madvise(base.cast(), len, libc::MADV_HUGEPAGE) };
    }
    // SAFETY: `base..base+len` is inside our mapping, which lives for the rest of the process.
    let slice = unsafe { std::slice::from_raw_parts_mut(base, len) };
    slice.fill(1);
    slice
}

/// Packs every source piece into the ring with `threads` threads; returns GB/s.
fn pack_all(sources: &[&[u8]], ring: &mut [u8], store: PackStore, threads: usize) -> f64 {
    let pieces = sources.len() * (TENSOR / PIECE);
    let next = AtomicUsize::new(0);
    let ring_base = ring.as_mut_ptr() as usize;
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= pieces {
                        break;
                    }
                    let offset = k * PIECE;
                    let src = &sources[offset / TENSOR][offset % TENSOR..][..PIECE];
                    let dst = ring_base + offset % RING;
                    // SAFETY: `dst..dst+PIECE` lies in the ring (RING is a multiple of PIECE);
                    // concurrent pieces may land on the same ring bytes (the bench measures
                    // bandwidth, not contents), and u8 stores cannot be torn into invalid values.
                    unsafe { copy(store, src.as_ptr(), dst as *mut u8, PIECE) };
                }
                publish_fence(store);
            });
        }
    });
    (pieces * PIECE) as f64 / started.elapsed().as_secs_f64() / 1e9
}

/// `pack_range` or `pack_range_per_tensor`.
type PackFn = unsafe fn(
    &dyn TensorSource,
    &Plan,
    &ArenaLayout,
    PackStore,
    *mut u8,
    u64,
    u64,
) -> uploader::Result<()>;

/// How the real-workload rows pack one piece: arena bytes `[from, to)` into `dst`.
#[derive(Clone, Copy)]
enum RealPacker {
    /// `uploader::pinned::pack_range` with plain stores, as the pipeline does for large tensors.
    Pipeline,
    /// `uploader::pinned::pack_range` with streaming stores, as the pipeline packs this workload
    /// (`bysize`): gathered through a bounce buffer.
    PipelineStreaming,
    /// `uploader::pinned::pack_range_per_tensor` with streaming stores: this workload's packing
    /// before the bounce buffer (the same-run reference of the row above).
    PerTensorStreaming,
    /// The pipeline's loop of commit 6c50d19: per tensor, one lookup and one copy.
    PerTensor,
    /// The same arena image from one contiguous buffer: one copy per piece.
    Contiguous,
}

struct Real<'a> {
    workload: &'a Workload,
    plan: &'a uploader::Plan,
    layout: &'a ArenaLayout,
    image: &'a [u8],
}

impl Real<'_> {
    /// The per-tensor reference loop (the pipeline's `pack` of commit 6c50d19).
    fn pack_per_tensor(&self, dst: *mut u8, from: u64, to: u64) {
        let starts = |i: usize| self.layout.start(self.plan, i).unwrap_or(u64::MAX);
        let n = self.plan.placements.len();
        // First placement ending after `from`: binary search on starts, then one step back.
        let (mut lo, mut hi) = (0usize, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if starts(mid) < from {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let mut i = lo.saturating_sub(1);
        while i < n && starts(i) < to {
            let p = &self.plan.placements[i];
            let bytes = self.workload.bytes(p.tensor);
            assert_eq!(bytes.len() as u64, p.bytes);
            let start = starts(i);
            let (a, b) = (start.max(from), (start + p.bytes).min(to));
            if a < b {
                let piece = &bytes[(a - start) as usize..(b - start) as usize];
                // SAFETY: `a..b` lies in `from..to`; `dst` has `to - from` bytes (caller).
                unsafe {
                    copy(
                        PackStore::Plain,
                        piece.as_ptr(),
                        dst.add((a - from) as usize),
                        piece.len(),
                    )
                };
            }
            i += 1;
        }
    }

    /// Packs the whole arena in 256 KiB pieces of 4 MiB slices into an 8 × 4 MiB ring with
    /// `threads` threads; returns GB/s of tensor bytes.
    fn pack_all(&self, ring: &mut [u8], packer: RealPacker, threads: usize) -> f64 {
        const SLICE: u64 = 4 << 20;
        let arena = self.layout.bytes();
        let pieces_per_slice = SLICE / PIECE as u64;
        let pieces = arena.div_ceil(SLICE) * pieces_per_slice;
        let next = AtomicUsize::new(0);
        let ring_base = ring.as_mut_ptr() as usize;
        let ring_len = ring.len() as u64;
        let cpu_ns = AtomicU64::new(0);
        let started = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    let cpu_start = thread_cpu_ns();
                    self.pack_pieces(&next, pieces, ring_base, ring_len, packer);
                    cpu_ns.fetch_add(thread_cpu_ns() - cpu_start, Ordering::Relaxed);
                });
            }
        });
        let seconds = if cpu_time() {
            // The packers' CPU time, as if each had had its core to itself.
            cpu_ns.into_inner() as f64 / threads as f64 / 1e9
        } else {
            started.elapsed().as_secs_f64()
        };
        self.plan.tensor_bytes as f64 / seconds / 1e9
    }

    /// One packing thread: claims pieces until none is left.
    fn pack_pieces(
        &self,
        next: &AtomicUsize,
        pieces: u64,
        ring_base: usize,
        ring_len: u64,
        packer: RealPacker,
    ) {
        let arena = self.layout.bytes();
        loop {
            let k = next.fetch_add(1, Ordering::Relaxed) as u64;
            if k >= pieces {
                break;
            }
            let from = k * PIECE as u64;
            let to = (from + PIECE as u64).min(arena);
            if from >= to {
                continue;
            }
            let dst = (ring_base + (from % ring_len) as usize) as *mut u8;
            let pipeline: Option<(PackFn, PackStore)> = match packer {
                RealPacker::Pipeline => Some((pack_range, PackStore::Plain)),
                RealPacker::PipelineStreaming => Some((pack_range, PackStore::Streaming)),
                RealPacker::PerTensorStreaming => {
                    Some((pack_range_per_tensor, PackStore::Streaming))
                }
                RealPacker::PerTensor | RealPacker::Contiguous => None,
            };
            match pipeline {
                // SAFETY: `dst..dst + (to - from)` lies in the ring (a multiple of the piece
                // size); concurrent pieces may share ring bytes (bandwidth, not contents, is
                // measured).
                Some((pack, store)) => unsafe {
                    pack(self.workload, self.plan, self.layout, store, dst, from, to).expect("pack")
                },
                None if matches!(packer, RealPacker::PerTensor) => {
                    self.pack_per_tensor(dst, from, to)
                }
                None => {
                    let src = &self.image[from as usize..to as usize];
                    // SAFETY: as above.
                    unsafe { copy(PackStore::Plain, src.as_ptr(), dst, src.len()) };
                }
            }
            publish_fence(PackStore::Streaming);
        }
    }
}

fn real_workload(threads: &[usize], rounds: usize) {
    let workload = Workload::synthetic(&WorkloadSpec::default());
    let Ok(Planned::Bulk(plan)) = plan(workload.infos(), &PlanOptions::default()) else {
        panic!("the real workload plans a bulk upload");
    };
    let layout = ArenaLayout::new(&plan);
    let mut image = vec![0u8; layout.bytes() as usize];
    for (i, p) in plan.placements.iter().enumerate() {
        let at = layout.start(&plan, i).expect("placement start") as usize;
        image[at..at + p.bytes as usize].copy_from_slice(workload.bytes(p.tensor));
    }
    let real = Real {
        workload: &workload,
        plan: &plan,
        layout: &layout,
        image: &image,
    };
    let ring = mapping(8 << 22, true);
    // Between timed packs, write this much elsewhere so the sources come from memory, as in
    // `upload --compare`, where other contenders run between two pinned uploads (217 MB would
    // otherwise stay in a 300 MiB last-level cache and flatter every row).
    let flush_mib = env_list("WEDGE_BENCH_PACK_FLUSH_MIB", &[512])[0];
    let mut flush = (flush_mib > 0).then(|| mapping(flush_mib << 20, true));
    let evict = |flush: &mut Option<&'static mut [u8]>| {
        if let Some(f) = flush.as_deref_mut() {
            for (i, line) in f.chunks_mut(64).enumerate() {
                line[0] = i as u8;
            }
        }
    };
    check_pack_range(&workload, &plan, &layout, &image);
    println!(
        "\nreal workload: {} tensors, {:.1} MB, ring 8 x 4 MiB (huge pages), pieces of {} KiB, \
         {flush_mib} MiB written between packs; {} \
         GB/s of tensor bytes (x = against the per-tensor loop, same threads; % = of the \
         contiguous image, same threads)",
        workload.len(),
        plan.tensor_bytes as f64 / 1e6,
        PIECE >> 10,
        if cpu_time() {
            "per second of the packers' CPU time (WEDGE_BENCH_PACK_CPU=1),"
        } else {
            "per second of wall time,"
        }
    );
    println!(
        "{:<34}{}",
        "packer",
        threads
            .iter()
            .map(|t| format!("{:>22}", format!("{t} thr")))
            .collect::<String>()
    );
    let packers = [
        ("contiguous image (reference)", RealPacker::Contiguous),
        ("per-tensor loop (before)", RealPacker::PerTensor),
        ("pack_range, plain", RealPacker::Pipeline),
        (
            "per tensor, streaming (before)",
            RealPacker::PerTensorStreaming,
        ),
        (
            "pack_range, streaming (gathered)",
            RealPacker::PipelineStreaming,
        ),
    ];
    // Interleave rounds across packers and thread counts so drift hits every cell alike.
    let mut samples = vec![vec![Vec::new(); threads.len()]; packers.len()];
    for _ in 0..rounds {
        for (row, &(_, packer)) in packers.iter().enumerate() {
            for (col, &t) in threads.iter().enumerate() {
                evict(&mut flush);
                samples[row][col].push(real.pack_all(ring, packer, t));
            }
        }
    }
    let results: Vec<(&str, Vec<f64>)> = packers
        .iter()
        .zip(samples)
        .map(|(&(name, _), cells)| (name, cells.into_iter().map(median).collect()))
        .collect();
    let (contiguous, per_tensor) = (results[0].1.clone(), results[1].1.clone());
    for (name, gbps) in &results {
        let cells: String = gbps
            .iter()
            .enumerate()
            .map(|(c, g)| {
                format!(
                    "{:>22}",
                    format!(
                        "{g:.1} ({:.2}x, {:.0}%)",
                        g / per_tensor[c],
                        g / contiguous[c] * 100.0
                    )
                )
            })
            .collect();
        println!("{name:<34}{cells}");
    }
}

/// Correctness first: the pipeline's loop, piece by piece, writes exactly the arena image.
fn check_pack_range(workload: &Workload, plan: &Plan, layout: &ArenaLayout, image: &[u8]) {
    let mut out = vec![0u8; layout.bytes() as usize];
    for from in (0..layout.bytes()).step_by(PIECE) {
        let to = (from + PIECE as u64).min(layout.bytes());
        // SAFETY: `out[from..to]` is ours and unaliased.
        unsafe {
            pack_range(
                workload,
                plan,
                layout,
                PackStore::Plain,
                out.as_mut_ptr().add(from as usize),
                from,
                to,
            )
        }
        .expect("pack_range");
    }
    assert!(out == image, "pack_range wrote the arena image");
}

/// `WEDGE_BENCH_PACK_CPU=1`: the real-workload rows divide by the packers' CPU time instead of
/// wall time (on a shared machine, time other processes took from the packers is not counted).
fn cpu_time() -> bool {
    std::env::var("WEDGE_BENCH_PACK_CPU").is_ok_and(|v| v == "1")
}

/// This thread's CPU time in ns.
fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mib = env_list("WEDGE_BENCH_PACK_MIB", &[1024])[0];
    let threads = env_list("WEDGE_BENCH_PACK_THREADS", &[1, 2, 4, 8]);
    let rounds = env_list("WEDGE_BENCH_PACK_ROUNDS", &[3])[0].max(1);
    if mib == 0 {
        real_workload(&threads, rounds);
        return;
    }
    let tensors = (mib << 20) / TENSOR;
    println!(
        "pack bench: {tensors} tensors of {} KiB ({mib} MiB), pieces of {} KiB, ring {} MiB, \
         median of {rounds} rounds, {} CPUs",
        TENSOR >> 10,
        PIECE >> 10,
        RING >> 20,
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    let per_tensor: Vec<Vec<u8>> = (0..tensors).map(|i| vec![i as u8; TENSOR]).collect();
    let per_tensor: Vec<&[u8]> = per_tensor.iter().map(|v| v.as_slice()).collect();
    let one_mapping = mapping(tensors * TENSOR, true);
    let one_mapping: Vec<&[u8]> = one_mapping.chunks(TENSOR).collect();
    let ring_4k = mapping(RING, false);
    let ring_huge = mapping(RING, true);

    let mut baseline = None;
    println!(
        "{:<28} {:<10} {:<10} {}",
        "source",
        "store",
        "ring",
        threads
            .iter()
            .map(|t| format!("{:>16}", format!("{t} thr GB/s (×)")))
            .collect::<String>()
    );
    for (source_name, sources) in [
        ("allocation per tensor", &per_tensor),
        ("one huge-page mapping", &one_mapping),
    ] {
        for store in [PackStore::Plain, PackStore::Streaming] {
            for (ring_name, huge) in [("4 KiB", false), ("huge", true)] {
                let ring: &mut [u8] = if huge { ring_huge } else { ring_4k };
                let mut line = format!("{source_name:<28} {:<10} {ring_name:<10}", store.name());
                for &t in &threads {
                    let gbps = median(
                        (0..rounds)
                            .map(|_| pack_all(sources, ring, store, t))
                            .collect(),
                    );
                    let base = *baseline.get_or_insert(gbps);
                    line.push_str(&format!(
                        "{:>16}",
                        format!("{gbps:.1} ({:.2}×)", gbps / base)
                    ));
                }
                println!("{line}");
            }
        }
    }
    real_workload(&threads, rounds);
}
