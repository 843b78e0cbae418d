//! Kernel names for launch records. CUPTI hands its callback the kernel's name; the interposer asks the driver
//! (`cuFuncGetName`, else `cuKernelGetName` for a `CUkernel` passed as a function, CUDA 12.3+) once per
//! function handle and keeps the first 40 bytes in a fixed table: no allocation, no lock, one seqlock read on a
//! hit. `cuModuleUnload`/`cuLibraryUnload` start a new generation (a handle may be reused for another kernel).

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::OnceLock;

use breadcrumb::format::LABEL_CAPACITY;

use super::real::real;
use super::table::{index_of, CUresult};

const SLOTS: usize = 1024;
const WORDS: usize = LABEL_CAPACITY / 8;

/// One cached name: `seq` odd while being written; `key` the handle; `meta` = generation << 8 | length.
struct Slot {
    seq: AtomicU64,
    key: AtomicU64,
    meta: AtomicU64,
    name: [AtomicU64; WORDS],
}

static TABLE: [Slot; SLOTS] = [const {
    Slot {
        seq: AtomicU64::new(0),
        key: AtomicU64::new(0),
        meta: AtomicU64::new(0),
        name: [const { AtomicU64::new(0) }; WORDS],
    }
}; SLOTS];

static GENERATION: AtomicU64 = AtomicU64::new(1);

/// Forget every cached name (a module or library was unloaded).
pub fn invalidate() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
}

type GetNameFn =
    unsafe extern "C" fn(*mut *const std::ffi::c_char, *mut std::ffi::c_void) -> CUresult;

/// The real `cuFuncGetName` and `cuKernelGetName`, if this libcuda has them.
fn getters() -> &'static [usize; 2] {
    static GETTERS: OnceLock<[usize; 2]> = OnceLock::new();
    GETTERS.get_or_init(|| {
        [&b"cuFuncGetName"[..], &b"cuKernelGetName"[..]].map(|name| index_of(name).map_or(0, real))
    })
}

fn slot_of(handle: u64) -> &'static Slot {
    // Handles are heap pointers: mix the bits above the allocation alignment.
    let hash = (handle >> 4).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54;
    &TABLE[hash as usize % SLOTS]
}

/// Writes the kernel name of function handle `handle` into `out`; returns its length (0: unknown).
pub fn name(handle: u64, out: &mut [u8; LABEL_CAPACITY]) -> usize {
    if handle == 0 {
        return 0;
    }
    let generation = GENERATION.load(Ordering::Acquire);
    let slot = slot_of(handle);
    if let Some(len) = read(slot, handle, generation, out) {
        return len;
    }
    let len = ask_driver(handle, out);
    if len > 0 {
        write(slot, handle, generation, &out[..len]);
    }
    len
}

fn read(
    slot: &Slot,
    handle: u64,
    generation: u64,
    out: &mut [u8; LABEL_CAPACITY],
) -> Option<usize> {
    let before = slot.seq.load(Ordering::Acquire);
    if before & 1 == 1 || before == 0 {
        return None;
    }
    let key = slot.key.load(Ordering::Relaxed);
    let meta = slot.meta.load(Ordering::Relaxed);
    let mut words = [0u64; WORDS];
    for (word, cell) in words.iter_mut().zip(&slot.name) {
        *word = cell.load(Ordering::Relaxed);
    }
    fence(Ordering::Acquire);
    if slot.seq.load(Ordering::Relaxed) != before || key != handle || meta >> 8 != generation {
        return None;
    }
    let len = ((meta & 0xff) as usize).min(LABEL_CAPACITY);
    for (chunk, word) in out.chunks_exact_mut(8).zip(words) {
        chunk.copy_from_slice(&word.to_le_bytes());
    }
    Some(len)
}

fn write(slot: &Slot, handle: u64, generation: u64, name: &[u8]) {
    let before = slot.seq.load(Ordering::Relaxed);
    if before & 1 == 1
        || slot
            .seq
            .compare_exchange(before, before + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        return; // another thread is writing this slot: leave it to it
    }
    fence(Ordering::Release);
    slot.key.store(handle, Ordering::Relaxed);
    slot.meta
        .store(generation << 8 | name.len() as u64, Ordering::Relaxed);
    let mut padded = [0u8; LABEL_CAPACITY];
    padded[..name.len()].copy_from_slice(name);
    for (cell, chunk) in slot.name.iter().zip(padded.chunks_exact(8)) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        cell.store(u64::from_le_bytes(word), Ordering::Relaxed);
    }
    slot.seq.store(before + 2, Ordering::Release);
}

fn ask_driver(handle: u64, out: &mut [u8; LABEL_CAPACITY]) -> usize {
    for getter in getters() {
        if *getter == 0 {
            continue;
        }
        let mut name: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: the real cuFuncGetName/cuKernelGetName (`CUresult (const char **, CUfunction|CUkernel)`);
        // an invalid handle is an error result, not a crash.
        let result = unsafe {
            std::mem::transmute::<usize, GetNameFn>(*getter)(&mut name, handle as *mut _)
        };
        if result == 0 && !name.is_null() {
            // SAFETY: the driver returned a NUL-terminated name it owns; at most 40 bytes are read.
            let bytes = unsafe { crate::calls::c_prefix(name) };
            out[..bytes.len()].copy_from_slice(bytes);
            return bytes.len();
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_name_is_read_back_until_invalidated() {
        let handle = 0x5555_0000_1230;
        let generation = GENERATION.load(Ordering::Acquire);
        let slot = slot_of(handle);
        let mut out = [0u8; LABEL_CAPACITY];
        assert_eq!(read(slot, handle, generation, &mut out), None);
        write(slot, handle, generation, b"_Z4spinPi");
        assert_eq!(read(slot, handle, generation, &mut out), Some(9));
        assert_eq!(&out[..9], b"_Z4spinPi");
        assert_eq!(
            read(slot, handle + 16, generation, &mut out),
            None,
            "another handle"
        );
        assert_eq!(
            read(slot, handle, generation + 1, &mut out),
            None,
            "a later generation"
        );
    }
}
