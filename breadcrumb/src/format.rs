//! The byte layout of a ring file, versions 1 and 2 (docs/breadcrumb-ring.md is the normative text;
//! the constants here are the same numbers). Everything is little-endian. Pure: no I/O.

use serde::{Deserialize, Serialize};

/// First 8 bytes of every ring file.
pub const MAGIC: [u8; 8] = *b"WEDGERNG";
/// The format version this crate writes: per-thread lanes, CPU-counter timestamps.
pub const VERSION: u32 = 2;
/// The first format (one shared ring, `CLOCK_MONOTONIC` timestamps); still read.
pub const VERSION_1: u32 = 1;
/// Header size written by this crate (a multiple of 64; slots start here).
pub const HEADER_SIZE: u32 = 512;
/// Slot size written by this crate (a multiple of 64).
pub const SLOT_SIZE: u32 = 128;
/// Linux `CLOCK_MONOTONIC`: the default clock of slot timestamps.
pub const CLOCK_MONOTONIC_ID: u32 = 1;
/// Linux `CLOCK_MONOTONIC_COARSE`: the same clock at tick resolution (1–4 ms), read without
/// touching the hardware counter; a writer may choose it for cheaper records.
pub const CLOCK_MONOTONIC_COARSE_ID: u32 = 6;

/// The clock a writer stamps records with. Readers always see `CLOCK_MONOTONIC` (or its coarse
/// variant) nanoseconds: the header's `clock_id` is the timebase, and a counter is converted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum RingClock {
    /// The CPU counter (x86_64 invariant TSC, aarch64 `CNTVCT_EL0`) calibrated to
    /// `CLOCK_MONOTONIC` in the header; falls back to [`RingClock::Monotonic`] where the counter
    /// is not the kernel's clocksource. Version 2 only.
    #[default]
    Counter,
    /// `CLOCK_MONOTONIC` (id 1): nanosecond resolution.
    Monotonic,
    /// `CLOCK_MONOTONIC_COARSE` (id 6): same timebase, tick resolution, cheaper to read.
    MonotonicCoarse,
}

impl RingClock {
    /// The Linux clock id stored in the header.
    pub const fn id(self) -> u32 {
        match self {
            RingClock::Counter | RingClock::Monotonic => CLOCK_MONOTONIC_ID,
            RingClock::MonotonicCoarse => CLOCK_MONOTONIC_COARSE_ID,
        }
    }

    /// The clock with this header id, if the format allows it.
    pub const fn from_id(id: u32) -> Option<RingClock> {
        match id {
            CLOCK_MONOTONIC_ID => Some(RingClock::Monotonic),
            CLOCK_MONOTONIC_COARSE_ID => Some(RingClock::MonotonicCoarse),
            _ => None,
        }
    }

    /// The Linux name, e.g. `CLOCK_MONOTONIC`.
    pub const fn name(self) -> &'static str {
        match self {
            RingClock::Counter | RingClock::Monotonic => "CLOCK_MONOTONIC",
            RingClock::MonotonicCoarse => "CLOCK_MONOTONIC_COARSE",
        }
    }
}
/// Default number of slots, all lanes together (512 KiB of slots with the 128-byte slots).
pub const DEFAULT_SLOT_COUNT: u32 = 4096;
/// Default (and automatic maximum) number of lanes: lane 0 is shared, the others are each owned
/// by one thread at a time.
pub const DEFAULT_LANE_COUNT: u32 = 64;
/// Largest lane count a ring may declare (the token keeps 16 bits for the lane).
pub const MAX_LANE_COUNT: u32 = 4096;
/// The automatic lane count gives each lane at least this many slots.
pub const MIN_AUTO_LANE_SLOTS: u32 = 16;
/// Bytes per entry of the version-2 lane table (one cache line: the owner's hot head word never
/// shares a line with another lane's).
pub const LANE_ENTRY_SIZE: u32 = 64;
/// Bit 63 of a version-2 enter record's sequence word: closed by an exit in another lane.
pub const SEQ_CLOSED: u64 = 1 << 63;
/// Version 2: bits of the token (and `ref`) that hold the lane-local index.
pub const LANE_INDEX_BITS: u32 = 32;
/// Mask for [`LANE_INDEX_BITS`].
pub const LANE_INDEX_MASK: u64 = (1 << LANE_INDEX_BITS) - 1;
/// Largest slot count a ring may declare (readers reject more).
pub const MAX_SLOT_COUNT: u32 = 1 << 20;
/// Bytes of a ring of `slot_count` slots in `lane_count` lanes as this crate writes it: the header,
/// the version-2 lane table, the slots.
pub const fn ring_len(slot_count: u32, lane_count: u32) -> u64 {
    HEADER_SIZE as u64
        + LANE_ENTRY_SIZE as u64 * lane_count as u64
        + SLOT_SIZE as u64 * slot_count as u64
}
/// The largest ring file, and the one size limit of every ring: [`MAX_SLOT_COUNT`] slots in
/// [`MAX_LANE_COUNT`] lanes (128 MiB of slots, 256 KiB of lane table, the header). The writer never
/// creates a larger ring, and the agent's discovery, trust checks and reader accept every ring up to
/// this size, so a ring the writer can create is a ring the agent reads.
pub const MAX_RING_BYTES: u64 = ring_len(MAX_SLOT_COUNT, MAX_LANE_COUNT);
/// Largest header a reader accepts.
pub const MAX_HEADER_SIZE: u32 = 4096;
/// Largest slot a reader accepts.
pub const MAX_SLOT_SIZE: u32 = 4096;
/// Bytes of inline label in a slot.
pub const LABEL_CAPACITY: usize = 40;
/// Bytes of status message in the header.
pub const STATUS_CAPACITY: usize = 248;
/// Low bits of a token that identify its enter record (version 2: lane in bits 32..48 and the
/// lane-local index's low 32 bits; version 1: the global index's low 48 bits).
pub const TOKEN_INDEX_BITS: u32 = 48;
/// Mask for [`TOKEN_INDEX_BITS`].
pub const TOKEN_INDEX_MASK: u64 = (1 << TOKEN_INDEX_BITS) - 1;

/// Header field offsets (bytes from the start of the file).
pub mod header {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const HEADER_SIZE: usize = 12;
    pub const SLOT_SIZE: usize = 16;
    pub const SLOT_COUNT: usize = 20;
    pub const WRITER_PID: usize = 24;
    pub const CLOCK_ID: usize = 28;
    pub const PIDNS_INODE: usize = 32;
    pub const START_TIME_TICKS: usize = 40;
    pub const BOOT_ID: usize = 48;
    pub const CREATED_REALTIME_NS: usize = 64;
    pub const CREATED_MONOTONIC_NS: usize = 72;
    pub const TICKS_PER_SECOND: usize = 80;
    pub const FLAGS: usize = 84;
    /// Version 2: number of lanes.
    pub const LANE_COUNT: usize = 88;
    /// Version 2: what slot times count (`counter::COUNTER_*`; 0 = `clock_id` nanoseconds).
    pub const COUNTER_KIND: usize = 92;
    /// Version 2: counter ticks per second.
    pub const COUNTER_HZ: usize = 96;
    /// Version 2: the counter read together with `CREATED_MONOTONIC_NS`.
    pub const CREATED_COUNTER: usize = 104;
    /// Version 1: next global record index to claim (the only hot header word; its own cache
    /// line). Version 2: zero (each lane has its head).
    pub const HEAD: usize = 128;
    /// Records given up because every slot tried was busy.
    pub const DROPPED: usize = 192;
    /// Version 2: sequence word of the refreshed calibration pair (odd while rewritten).
    pub const CALIB_SEQ: usize = 200;
    /// Version 2: counter of the refreshed calibration pair.
    pub const CALIB_COUNTER: usize = 208;
    /// Version 2: `CLOCK_MONOTONIC` ns of the refreshed calibration pair.
    pub const CALIB_MONOTONIC_NS: usize = 216;
    /// Status message length; `u32::MAX` while being rewritten.
    pub const STATUS_LEN: usize = 256;
    pub const STATUS_CODE: usize = 260;
    pub const STATUS_TEXT: usize = 264;
}

/// Version-2 lane table entry offsets (bytes from the start of the entry; the table starts at
/// `header_size`, one [`LANE_ENTRY_SIZE`] entry per lane).
pub mod lane {
    /// Owning thread's id, 0 = free. Lane 0 is never owned (shared by every thread without a lane).
    pub const OWNER: usize = 0;
    /// Next lane-local record index to claim.
    pub const HEAD: usize = 8;
}

/// Slot field offsets (bytes from the start of the slot).
pub mod slot {
    pub const SEQ: usize = 0;
    /// Version 1: `clock_id` ns. Version 2: counter ticks (or `clock_id` ns with no counter).
    pub const MONOTONIC_NS: usize = 8;
    pub const TID: usize = 16;
    pub const KIND: usize = 20;
    pub const LABEL_LEN: usize = 21;
    pub const CALL_ID: usize = 22;
    pub const BYTES: usize = 24;
    pub const PTR: usize = 32;
    pub const PTR2: usize = 40;
    pub const STREAM: usize = 48;
    pub const CHUNK: usize = 56;
    pub const CHUNK_COUNT: usize = 60;
    pub const TENSOR_FIRST: usize = 64;
    pub const TENSOR_COUNT: usize = 68;
    pub const REF_INDEX: usize = 72;
    pub const RESULT: usize = 80;
    pub const LABEL: usize = 88;
    /// Bytes of a slot that versions 1 and 2 define.
    pub const USED: usize = 128;
}

/// Slot `kind` byte values.
pub const KIND_ENTER: u8 = 1;
/// Slot `kind` byte values.
pub const KIND_EXIT: u8 = 2;

/// The sequence word a writer stores while it owns a slot for global index `g` (odd: busy).
#[inline]
pub const fn busy_seq(g: u64) -> u64 {
    g.wrapping_mul(2).wrapping_add(1)
}

/// The sequence word of a complete record with global index `g` (even, non-zero).
#[inline]
pub const fn final_seq(g: u64) -> u64 {
    g.wrapping_mul(2).wrapping_add(2)
}

/// Arguments of a driver call, as recorded. Unused fields stay zero. `#[repr(C)]`: the same layout
/// is `wb_args` in `include/wedge_breadcrumb.h`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Args {
    /// Size in bytes (allocation, copy, memset).
    pub bytes: u64,
    /// First pointer (destination, device pointer, host pointer).
    pub ptr: u64,
    /// Second pointer (source of a copy).
    pub ptr2: u64,
    /// The `CUstream` handle, 0 for the default stream.
    pub stream: u64,
    /// Chunk index within a chunked transfer.
    pub chunk: u32,
    /// Number of chunks in the transfer.
    pub chunk_count: u32,
    /// First tensor of the range the call belongs to.
    pub tensor_first: u32,
    /// Number of tensors in that range.
    pub tensor_count: u32,
}

macro_rules! calls {
    ($($variant:ident = $id:literal => $name:literal,)*) => {
        /// A CUDA driver API entry point (or `Custom`). The numbers are stable: they are part of the
        /// file format (docs/breadcrumb-ring.md, "Call ids"). Add new ones at the end, never renumber.
        #[allow(non_camel_case_types)]
        #[repr(u16)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum Call {
            $($variant = $id,)*
        }

        impl Call {
            /// Every call, in id order.
            pub const ALL: &'static [Call] = &[$(Call::$variant,)*];

            /// The driver API symbol name, e.g. `cuMemAlloc_v2`.
            pub const fn name(self) -> &'static str {
                match self {
                    $(Call::$variant => $name,)*
                }
            }

            /// The call with this id, if the id is known to this version.
            pub const fn from_u16(id: u16) -> Option<Call> {
                match id {
                    $($id => Some(Call::$variant),)*
                    _ => None,
                }
            }

            /// The call whose driver symbol is `name`.
            pub fn from_name(name: &str) -> Option<Call> {
                match name {
                    $($name => Some(Call::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

calls! {
    Custom = 0 => "custom",
    CuInit = 1 => "cuInit",
    CuCtxCreate_v2 = 2 => "cuCtxCreate_v2",
    CuCtxDestroy_v2 = 3 => "cuCtxDestroy_v2",
    CuCtxSynchronize = 4 => "cuCtxSynchronize",
    CuCtxSetCurrent = 5 => "cuCtxSetCurrent",
    CuDevicePrimaryCtxRetain = 6 => "cuDevicePrimaryCtxRetain",
    CuDeviceGet = 7 => "cuDeviceGet",
    CuDeviceGetAttribute = 8 => "cuDeviceGetAttribute",
    CuMemGetInfo_v2 = 9 => "cuMemGetInfo_v2",
    CuMemAlloc_v2 = 10 => "cuMemAlloc_v2",
    CuMemFree_v2 = 11 => "cuMemFree_v2",
    CuMemAllocManaged = 12 => "cuMemAllocManaged",
    CuMemHostAlloc = 13 => "cuMemHostAlloc",
    CuMemFreeHost = 14 => "cuMemFreeHost",
    CuMemHostRegister_v2 = 15 => "cuMemHostRegister_v2",
    CuMemHostUnregister = 16 => "cuMemHostUnregister",
    CuMemcpyHtoD_v2 = 17 => "cuMemcpyHtoD_v2",
    CuMemcpyDtoH_v2 = 18 => "cuMemcpyDtoH_v2",
    CuMemcpyDtoD_v2 = 19 => "cuMemcpyDtoD_v2",
    CuMemcpyHtoDAsync_v2 = 20 => "cuMemcpyHtoDAsync_v2",
    CuMemcpyDtoHAsync_v2 = 21 => "cuMemcpyDtoHAsync_v2",
    CuMemsetD8_v2 = 22 => "cuMemsetD8_v2",
    CuMemsetD32_v2 = 23 => "cuMemsetD32_v2",
    CuMemPrefetchAsync = 24 => "cuMemPrefetchAsync",
    CuMemAdvise = 25 => "cuMemAdvise",
    CuStreamCreate = 26 => "cuStreamCreate",
    CuStreamDestroy_v2 = 27 => "cuStreamDestroy_v2",
    CuStreamSynchronize = 28 => "cuStreamSynchronize",
    CuStreamQuery = 29 => "cuStreamQuery",
    CuEventCreate = 30 => "cuEventCreate",
    CuEventRecord = 31 => "cuEventRecord",
    CuEventSynchronize = 32 => "cuEventSynchronize",
    CuEventQuery = 33 => "cuEventQuery",
    CuEventDestroy_v2 = 34 => "cuEventDestroy_v2",
    CuLaunchKernel = 35 => "cuLaunchKernel",
    CuModuleLoadData = 36 => "cuModuleLoadData",
    CuModuleGetFunction = 37 => "cuModuleGetFunction",
    CuModuleUnload = 38 => "cuModuleUnload",
    CuMemAllocHost_v2 = 39 => "cuMemAllocHost_v2",
    CuMemAllocAsync = 40 => "cuMemAllocAsync",
    CuMemFreeAsync = 41 => "cuMemFreeAsync",
    CuStreamWaitEvent = 42 => "cuStreamWaitEvent",
    CuCtxPushCurrent_v2 = 43 => "cuCtxPushCurrent_v2",
    CuCtxPopCurrent_v2 = 44 => "cuCtxPopCurrent_v2",
    CuMemcpy = 45 => "cuMemcpy",
    CuMemcpyAsync = 46 => "cuMemcpyAsync",
    CuMemsetD8Async = 47 => "cuMemsetD8Async",
    CuDevicePrimaryCtxRelease_v2 = 48 => "cuDevicePrimaryCtxRelease_v2",
    CuLaunchCooperativeKernel = 49 => "cuLaunchCooperativeKernel",
    CuGraphLaunch = 50 => "cuGraphLaunch",
    CuMemHostGetDevicePointer_v2 = 51 => "cuMemHostGetDevicePointer_v2",
    CuPointerGetAttribute = 52 => "cuPointerGetAttribute",
    CuDeviceTotalMem_v2 = 53 => "cuDeviceTotalMem_v2",
    CuMemPoolCreate = 54 => "cuMemPoolCreate",
    CuMemPoolDestroy = 55 => "cuMemPoolDestroy",
    CuMemPoolSetAttribute = 56 => "cuMemPoolSetAttribute",
    CuMemAllocFromPoolAsync = 57 => "cuMemAllocFromPoolAsync",
}

impl Call {
    /// The stable numeric id.
    pub const fn id(self) -> u16 {
        self as u16
    }
}

/// The display name of a call id read from a file: the symbol if known, else `call#<id>`.
pub fn call_name(id: u16) -> String {
    match Call::from_u16(id) {
        Some(call) => call.name().to_string(),
        None => format!("call#{id}"),
    }
}

/// The longest prefix of `label` that fits in a slot, cut at a char boundary. Inlined: it is on
/// the record path of every `Writer::enter`.
#[inline]
pub fn truncate_label(label: &str) -> &str {
    if label.len() <= LABEL_CAPACITY {
        return label;
    }
    let mut end = LABEL_CAPACITY;
    while end > 0 && !label.is_char_boundary(end) {
        end -= 1;
    }
    // `end` is a char boundary, so the slice cannot fail.
    label.get(..end).unwrap_or("")
}

/// Little-endian field readers over a byte slice that never panic (missing bytes read as 0;
/// callers check lengths first).
pub(crate) fn le_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    if let Some(src) = bytes.get(at..at.saturating_add(8)) {
        word.copy_from_slice(src);
    }
    u64::from_le_bytes(word)
}

pub(crate) fn le_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    if let Some(src) = bytes.get(at..at.saturating_add(4)) {
        word.copy_from_slice(src);
    }
    u32::from_le_bytes(word)
}

pub(crate) fn le_u16(bytes: &[u8], at: usize) -> u16 {
    let mut word = [0u8; 2];
    if let Some(src) = bytes.get(at..at.saturating_add(2)) {
        word.copy_from_slice(src);
    }
    u16::from_le_bytes(word)
}

pub(crate) fn byte_at(bytes: &[u8], at: usize) -> u8 {
    bytes.get(at).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ids_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for (position, call) in Call::ALL.iter().enumerate() {
            assert_eq!(
                usize::from(call.id()),
                position,
                "ids are dense and in order"
            );
            assert_eq!(Call::from_u16(call.id()), Some(*call));
            assert_eq!(Call::from_name(call.name()), Some(*call));
            assert!(seen.insert(call.name()));
        }
        assert_eq!(Call::from_u16(60000), None);
        assert_eq!(call_name(60000), "call#60000");
        assert_eq!(Call::CuMemAlloc_v2.name(), "cuMemAlloc_v2");
    }

    #[test]
    fn labels_are_cut_at_char_boundaries() {
        assert_eq!(
            truncate_label("bulkUpload chunk 12/53"),
            "bulkUpload chunk 12/53"
        );
        let long = "é".repeat(30); // 60 bytes
        let cut = truncate_label(&long);
        assert_eq!(cut.len(), 40);
        let odd = format!("a{}", "é".repeat(30));
        assert_eq!(truncate_label(&odd).len(), 39);
    }

    #[test]
    fn args_layout_matches_the_c_header() {
        assert_eq!(std::mem::size_of::<Args>(), 48);
        assert_eq!(std::mem::align_of::<Args>(), 8);
    }

    #[test]
    fn sequence_words() {
        assert_eq!(busy_seq(0), 1);
        assert_eq!(final_seq(0), 2);
        assert_eq!(final_seq(7), 16);
    }
}
