//! Host packing bandwidth: how fast the pinned pipeline's packing threads can copy tensors into
//! a staging ring with no GPU involved — the upper bound on `pinned` wherever packing, not the
//! copy engine, is the bottleneck. Same code as the pipeline (`uploader::pack::copy`, pieces
//! claimed from one atomic counter), same shapes as the 4 GiB `--compare` workload (tensors of
//! 256 KiB, each its own allocation; pieces of 256 KiB; a 16 MiB ring).
//!
//!   cargo bench -p uploader --bench pack
//!   WEDGE_BENCH_PACK_MIB=4096 WEDGE_BENCH_PACK_THREADS=1,4,8,12 cargo bench -p uploader --bench pack
//!
//! Rows: source (each tensor its own allocation, as `Workload` does, or one mapping advised for
//! transparent huge pages) × store (plain memcpy, non-temporal) × ring (4 KiB pages, or advised
//! huge pages) × thread count. Baseline: one thread, plain stores, per-tensor source, 4 KiB ring,
//! measured in the same run. Median of the rounds.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use uploader::pack::{copy, publish_fence, PackStore};

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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mib = env_list("WEDGE_BENCH_PACK_MIB", &[1024])[0];
    let threads = env_list("WEDGE_BENCH_PACK_THREADS", &[1, 2, 4, 8]);
    let rounds = env_list("WEDGE_BENCH_PACK_ROUNDS", &[3])[0].max(1);
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
}
