//! Copying tensor bytes into pinned staging memory: plain `memcpy`, or non-temporal
//! ("streaming") stores that bypass the CPU caches.
//!
//! Why streaming stores: staging memory is written once by a packing thread and then read by
//! the GPU's DMA engine, never by a CPU. Plain stores first read each destination line into the
//! cache (read-for-ownership) and later write it back, so packing moves 3 bytes of memory
//! traffic per byte packed; streaming stores move 2. While the copy engine itself reads host
//! memory at ~55 GB/s, that difference is memory bandwidth the pipeline needs. Whether it wins
//! on a given host is measured, not assumed, and it differs between hosts of one type: on one
//! H200 VM streaming stores packed twice as fast as plain ones, on another plain stores into a
//! 16 MiB ring that stays in the 300 MiB L3 cache were 1.25–1.4× faster end to end
//! (BENCHMARKS.md). The pipeline defaults to [`PackStore::BySize`] (streaming for many small
//! tensors, plain for large ones: what the end-to-end comparisons favoured for each shape);
//! [`PackStore::Auto`] times both per upload, but per-piece times miss what a store costs the rest
//! of the system, so it is opt-in.

use serde::Serialize;

/// How packing threads write staging memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PackStore {
    /// `memcpy` (`ptr::copy_nonoverlapping`).
    Plain,
    /// Non-temporal 16-byte stores on x86_64 (SSE2, part of the x86_64 baseline, so no runtime
    /// detection is needed); elsewhere the same as `Plain`.
    Streaming,
    /// Measure both at the start of each upload and use the faster: the pipeline packs pieces
    /// alternately plain and streaming until it has enough samples of each. (`copy` itself
    /// treats it as `Plain`.)
    Auto,
    /// Chosen per upload by the workload's shape ([`PackStore::for_mean_tensor`]): streaming for
    /// many small tensors, plain for large ones. (`copy` itself treats it as `Plain`.)
    BySize,
}

/// `BySize`: uploads whose mean tensor is smaller than this pack with streaming stores.
///
/// Why (BENCHMARKS.md, issue 40): on the H200/H100 hosts every same-process comparison on the real
/// workload (213,354 tensors of 772 B, 217 MB) had streaming stores ahead with staging reused
/// (+3.5 … +8 points of the copy ceiling: runs 22 and 25, four processes) and level cold, while at
/// 4 GiB of 256 KiB tensors streaming lost ~11 points (run 22): there plain stores keep the 32 MiB
/// staging ring in the last-level cache, where the copy engine reads it, and the sources stream
/// from memory either way. 64 KiB sits between the two shapes measured.
pub const STREAMING_BELOW_MEAN_TENSOR: u64 = 64 << 10;

impl PackStore {
    pub fn name(self) -> &'static str {
        match self {
            PackStore::Plain => "plain",
            PackStore::Streaming => "streaming",
            PackStore::Auto => "auto",
            PackStore::BySize => "bysize",
        }
    }

    /// The store an upload of tensors of `mean_tensor_bytes` on average packs with: `BySize`
    /// resolved ([`STREAMING_BELOW_MEAN_TENSOR`]), every other store as it is.
    pub fn for_mean_tensor(self, mean_tensor_bytes: u64) -> PackStore {
        match self {
            PackStore::BySize if mean_tensor_bytes < STREAMING_BELOW_MEAN_TENSOR => {
                PackStore::Streaming
            }
            PackStore::BySize => PackStore::Plain,
            other => other,
        }
    }
}

impl std::str::FromStr for PackStore {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "plain" => Ok(PackStore::Plain),
            "streaming" | "nt" => Ok(PackStore::Streaming),
            "auto" => Ok(PackStore::Auto),
            "bysize" => Ok(PackStore::BySize),
            other => Err(format!(
                "unknown pack store {other:?} (auto, bysize, plain, streaming)"
            )),
        }
    }
}

/// Below this many bytes a streaming copy is not worth its alignment prologue.
#[cfg(target_arch = "x86_64")]
const STREAMING_MIN: usize = 256;

/// Copies `len` bytes from `src` to `dst` with `store`. After streaming copies, call
/// [`publish_fence`] before another thread (or a DMA submission) relies on the bytes.
///
/// # Safety
/// As `ptr::copy_nonoverlapping`: both ranges valid for `len` bytes and not overlapping.
pub unsafe fn copy(store: PackStore, src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    if store == PackStore::Streaming && len >= STREAMING_MIN {
        // SAFETY: forwarded caller contract.
        unsafe { copy_streaming_x86_64(src, dst, len) };
        return;
    }
    let _ = store;
    // SAFETY: forwarded caller contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
}

/// Orders earlier streaming stores before later stores (non-temporal stores are weakly ordered:
/// an atomic release alone does not order them). A no-op for `Plain` and off x86_64.
pub fn publish_fence(store: PackStore) {
    #[cfg(target_arch = "x86_64")]
    if store == PackStore::Streaming {
        // SAFETY: `sfence` has no preconditions (SSE, part of the x86_64 baseline).
        unsafe { std::arch::x86_64::_mm_sfence() };
    }
    let _ = store;
}

/// Plain stores up to the first 64-byte boundary of `dst`, then whole cache lines with
/// non-temporal stores (so the write-combining buffers flush full lines), then a plain tail.
///
/// # Safety
/// As `ptr::copy_nonoverlapping`, and `len >= 64`.
#[cfg(target_arch = "x86_64")]
unsafe fn copy_streaming_x86_64(src: *const u8, dst: *mut u8, len: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    let head = dst.align_offset(64).min(len);
    // SAFETY: `head ≤ len`, inside both ranges (caller contract).
    unsafe { std::ptr::copy_nonoverlapping(src, dst, head) };
    let mut done = head;
    while len - done >= 64 {
        // SAFETY: `done + 64 ≤ len`: the 64 bytes at `done` lie in both ranges; `dst + done` is
        // 64-byte aligned (the head ended on a boundary), as `_mm_stream_si128` requires 16;
        // loads are unaligned loads. SSE2 is part of the x86_64 baseline.
        unsafe {
            let s = src.add(done).cast::<__m128i>();
            let d = dst.add(done).cast::<__m128i>();
            let a = _mm_loadu_si128(s);
            let b = _mm_loadu_si128(s.add(1));
            let c = _mm_loadu_si128(s.add(2));
            let e = _mm_loadu_si128(s.add(3));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
        }
        done += 64;
    }
    // SAFETY: the remaining `len - done < 64` bytes lie in both ranges.
    unsafe { std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), len - done) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alignment_and_length_copies_exactly() {
        let src: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        for store in [
            PackStore::Plain,
            PackStore::Streaming,
            PackStore::Auto,
            PackStore::BySize,
        ] {
            for src_off in [0usize, 1, 15, 16, 63] {
                for dst_off in [0usize, 1, 8, 31, 64] {
                    for len in [0usize, 1, 63, 64, 255, 256, 257, 1000, 3000] {
                        let mut dst = vec![0xeeu8; 4096 + 128];
                        // SAFETY: both ranges lie inside their vectors and do not overlap.
                        unsafe {
                            copy(
                                store,
                                src.as_ptr().add(src_off),
                                dst.as_mut_ptr().add(dst_off),
                                len,
                            )
                        };
                        publish_fence(store);
                        assert_eq!(
                            &dst[dst_off..dst_off + len],
                            &src[src_off..src_off + len],
                            "{store:?} src+{src_off} dst+{dst_off} len {len}"
                        );
                        assert!(dst[..dst_off].iter().all(|&b| b == 0xee), "wrote before");
                        assert!(
                            dst[dst_off + len..].iter().all(|&b| b == 0xee),
                            "wrote after"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn names_parse() {
        assert_eq!("plain".parse::<PackStore>(), Ok(PackStore::Plain));
        assert_eq!("nt".parse::<PackStore>(), Ok(PackStore::Streaming));
        assert_eq!("auto".parse::<PackStore>(), Ok(PackStore::Auto));
        assert_eq!("bysize".parse::<PackStore>(), Ok(PackStore::BySize));
        assert!("fast".parse::<PackStore>().is_err());
    }

    #[test]
    fn by_size_streams_small_tensors_only() {
        // The real workload's 772-byte tensors and the 4 GiB workload's 256 KiB ones.
        assert_eq!(PackStore::BySize.for_mean_tensor(772), PackStore::Streaming);
        assert_eq!(
            PackStore::BySize.for_mean_tensor(256 << 10),
            PackStore::Plain
        );
        assert_eq!(
            PackStore::BySize.for_mean_tensor(STREAMING_BELOW_MEAN_TENSOR),
            PackStore::Plain
        );
        for store in [PackStore::Plain, PackStore::Streaming, PackStore::Auto] {
            assert_eq!(store.for_mean_tensor(772), store, "only BySize is resolved");
        }
    }
}
