//! From a CUPTI driver-API callback to a breadcrumb: which ring call id a function gets, whether it
//! is recorded, and how its `<name>_params` struct (generated_cuda_meta.h) becomes [`Args`].
//!
//! A function is classified by its *name*, not its CUPTI callback id: names are stable across CUDA
//! versions, ids are not promised to be. The result is cached per callback id ([`ClassCache`]), so
//! the string compare happens once per function, never on the hot path.

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicU32, Ordering};

use breadcrumb::format::LABEL_CAPACITY;
use breadcrumb::{Args, Call};

/// How a function's parameters are read. Each variant names the layout of the leading fields of
/// the params struct it reads (CUDA 12/13 `generated_cuda_meta.h`, LP64).
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoder {
    /// Nothing worth recording beyond the name.
    None = 0,
    /// `{ T **out; size_t bytesize; ... }`: cuMemAlloc_v2, cuMemAllocManaged, cuMemHostAlloc,
    /// cuMemAllocHost_v2 (the pointer is only known at exit: `bytes` only).
    Alloc = 1,
    /// `{ CUdeviceptr *dptr; size_t bytesize; CUstream hStream; }`: cuMemAllocAsync.
    AllocAsync = 2,
    /// `{ CUdeviceptr *dptr; size_t bytesize; CUmemoryPool pool; CUstream hStream; }`.
    AllocFromPoolAsync = 3,
    /// `{ ptr; }`: cuMemFree_v2, cuMemFreeHost, cuMemHostUnregister.
    Ptr = 4,
    /// `{ CUdeviceptr dptr; CUstream hStream; }`: cuMemFreeAsync.
    PtrStream = 5,
    /// `{ ptr; size_t bytes; ... }`: cuMemHostRegister_v2, cuMemPrefetchAsync*, cuMemAdvise*.
    PtrSize = 6,
    /// `{ dst; src; size_t ByteCount; }`: cuMemcpy, cuMemcpyHtoD_v2, DtoH_v2, DtoD_v2.
    Copy = 7,
    /// `{ dst; src; size_t ByteCount; CUstream hStream; }`: the `Async` copies.
    CopyAsync = 8,
    /// `{ dst; CUcontext; src; CUcontext; size_t ByteCount; }`: cuMemcpyPeer.
    CopyPeer = 9,
    /// cuMemcpyPeer's layout plus `CUstream hStream`.
    CopyPeerAsync = 10,
    /// `{ CUdeviceptr dstDevice; <8/16/32-bit value>; size_t N; }` (bytes = N × 1).
    Memset8 = 11,
    Memset16 = 12,
    Memset32 = 13,
    /// The memset layouts plus `CUstream hStream`.
    Memset8Async = 14,
    Memset16Async = 15,
    Memset32Async = 16,
    /// `{ CUstream hStream; }`: cuStreamSynchronize, cuStreamQuery, cuStreamDestroy_v2.
    Stream = 17,
    /// `{ handle; CUstream hStream; }`: cuEventRecord*, cuGraphLaunch.
    HandleStream = 18,
    /// `{ CUstream hStream; CUevent hEvent; ... }`: cuStreamWaitEvent.
    StreamHandle = 19,
    /// cuLaunchKernel / cuLaunchCooperativeKernel: `{ CUfunction f; unsigned grid[3], block[3],
    /// sharedMemBytes; CUstream hStream; ... }`.
    Launch = 20,
    /// cuLaunchKernelEx: `{ const CUlaunchConfig *config; CUfunction f; ... }`.
    LaunchEx = 21,
}

impl Decoder {
    const ALL: [Decoder; 22] = [
        Decoder::None,
        Decoder::Alloc,
        Decoder::AllocAsync,
        Decoder::AllocFromPoolAsync,
        Decoder::Ptr,
        Decoder::PtrStream,
        Decoder::PtrSize,
        Decoder::Copy,
        Decoder::CopyAsync,
        Decoder::CopyPeer,
        Decoder::CopyPeerAsync,
        Decoder::Memset8,
        Decoder::Memset16,
        Decoder::Memset32,
        Decoder::Memset8Async,
        Decoder::Memset16Async,
        Decoder::Memset32Async,
        Decoder::Stream,
        Decoder::HandleStream,
        Decoder::StreamHandle,
        Decoder::Launch,
        Decoder::LaunchEx,
    ];

    fn from_u8(value: u8) -> Decoder {
        Decoder::ALL
            .get(usize::from(value))
            .copied()
            .unwrap_or(Decoder::None)
    }

    /// A kernel launch (the label gets the kernel's name).
    pub fn is_launch(self) -> bool {
        matches!(self, Decoder::Launch | Decoder::LaunchEx)
    }
}

/// What a driver function becomes in the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Class {
    /// The ring's call id ([`Call::Custom`] when the ring has no id for it).
    pub call_id: u16,
    pub decoder: Decoder,
    /// Write enter/exit records (false for pure getters that cannot block on the GPU).
    pub record: bool,
    /// Put the CUPTI function name in the label (the ring's id does not say it exactly: a
    /// Custom call, or a `_ptsz`/`_ptds` variant).
    pub name_in_label: bool,
}

/// Driver functions that only read host-side state (never wait for the GPU) and that frameworks
/// call thousands of times a second; recording them would push the interesting history out of
/// the ring. `WEDGE_CAPTURE_INJECT_ALL=1` records them too. Matched as name prefixes.
pub const QUIET_PREFIXES: &[&str] = &[
    "cuGetProcAddress",
    "cuGetExportTable",
    "cuGetError",
    "cuDriverGetVersion",
    "cuCtxGetCurrent",
    "cuCtxGetDevice",
    "cuCtxGetFlags",
    "cuCtxGetId",
    "cuCtxGetApiVersion",
    "cuCtxGetStreamPriorityRange",
    "cuCtxGetLimit",
    "cuModuleGetLoadingMode",
    "cuOccupancy",
    "cuDeviceGet",
    "cuDevicePrimaryCtxGetState",
    "cuStreamGetCaptureInfo",
    "cuStreamIsCapturing",
    "cuStreamGetId",
    "cuStreamGetFlags",
    "cuStreamGetPriority",
    "cuStreamGetCtx",
    "cuFuncGetAttribute",
    "cuPointerGetAttributes",
    "cuKernelGetAttribute",
];

/// Classifies a driver function by its CUPTI name. `record_all` overrides [`QUIET_PREFIXES`].
pub fn classify(name: &str, record_all: bool) -> Class {
    let base = name
        .strip_suffix("_ptsz")
        .or_else(|| name.strip_suffix("_ptds"))
        .unwrap_or(name);
    // CUDA 13 renamed some calls with a version suffix (cuCtxSynchronize_v2): they keep the ring
    // id of the unsuffixed call, with the real name in the label.
    let call = Call::from_name(base)
        .or_else(|| {
            ["_v2", "_v3", "_v4"]
                .iter()
                .find_map(|suffix| base.strip_suffix(suffix))
                .and_then(Call::from_name)
        })
        .filter(|call| *call != Call::Custom);
    let decoder = match base {
        "cuMemAlloc_v2" | "cuMemAllocManaged" | "cuMemHostAlloc" | "cuMemAllocHost_v2" => {
            Decoder::Alloc
        }
        "cuMemAllocAsync" => Decoder::AllocAsync,
        "cuMemAllocFromPoolAsync" => Decoder::AllocFromPoolAsync,
        "cuMemFree_v2" | "cuMemFreeHost" | "cuMemHostUnregister" => Decoder::Ptr,
        "cuMemFreeAsync" => Decoder::PtrStream,
        "cuMemHostRegister_v2"
        | "cuMemPrefetchAsync"
        | "cuMemPrefetchAsync_v2"
        | "cuMemAdvise"
        | "cuMemAdvise_v2" => Decoder::PtrSize,
        "cuMemcpy" | "cuMemcpyHtoD_v2" | "cuMemcpyDtoH_v2" | "cuMemcpyDtoD_v2" => Decoder::Copy,
        "cuMemcpyAsync"
        | "cuMemcpyHtoDAsync_v2"
        | "cuMemcpyDtoHAsync_v2"
        | "cuMemcpyDtoDAsync_v2" => Decoder::CopyAsync,
        "cuMemcpyPeer" => Decoder::CopyPeer,
        "cuMemcpyPeerAsync" => Decoder::CopyPeerAsync,
        "cuMemsetD8_v2" => Decoder::Memset8,
        "cuMemsetD16_v2" => Decoder::Memset16,
        "cuMemsetD32_v2" => Decoder::Memset32,
        "cuMemsetD8Async" => Decoder::Memset8Async,
        "cuMemsetD16Async" => Decoder::Memset16Async,
        "cuMemsetD32Async" => Decoder::Memset32Async,
        "cuStreamSynchronize" | "cuStreamQuery" | "cuStreamDestroy_v2" => Decoder::Stream,
        "cuEventRecord" | "cuEventRecordWithFlags" | "cuGraphLaunch" => Decoder::HandleStream,
        "cuStreamWaitEvent" => Decoder::StreamHandle,
        "cuEventSynchronize" | "cuEventQuery" | "cuEventDestroy_v2" => Decoder::Ptr,
        "cuLaunchKernel" | "cuLaunchCooperativeKernel" => Decoder::Launch,
        "cuLaunchKernelEx" => Decoder::LaunchEx,
        _ => Decoder::None,
    };
    let quiet = QUIET_PREFIXES.iter().any(|prefix| base.starts_with(prefix));
    Class {
        call_id: call.map_or(Call::Custom.id(), Call::id),
        decoder,
        record: record_all || !quiet,
        name_in_label: call.is_none_or(|call| call.name() != name),
    }
}

/// Number of callback ids whose classification is cached; higher ids are classified every time
/// (CUDA 13's driver table has well under a thousand entries).
pub const CACHE_SIZE: usize = 2048;

const RESOLVED: u32 = 1 << 31;
const RECORD: u32 = 1 << 30;
const NAME_IN_LABEL: u32 = 1 << 29;

impl Class {
    fn pack(self) -> u32 {
        RESOLVED
            | if self.record { RECORD } else { 0 }
            | if self.name_in_label { NAME_IN_LABEL } else { 0 }
            | (u32::from(self.decoder as u8) << 16)
            | u32::from(self.call_id)
    }

    fn unpack(word: u32) -> Class {
        Class {
            call_id: word as u16,
            decoder: Decoder::from_u8((word >> 16) as u8),
            record: word & RECORD != 0,
            name_in_label: word & NAME_IN_LABEL != 0,
        }
    }
}

/// A fixed table of classifications indexed by CUPTI callback id: lock-free, no allocation.
pub struct ClassCache {
    slots: [AtomicU32; CACHE_SIZE],
}

impl Default for ClassCache {
    fn default() -> Self {
        ClassCache::new()
    }
}

impl ClassCache {
    pub const fn new() -> ClassCache {
        ClassCache {
            slots: [const { AtomicU32::new(0) }; CACHE_SIZE],
        }
    }

    /// The classification of callback id `cbid`, computing it from `name` the first time. Racing
    /// threads compute the same value; the last store wins harmlessly.
    #[inline]
    pub fn get(&self, cbid: u32, name: impl FnOnce() -> &'static str, record_all: bool) -> Class {
        let Some(slot) = self.slots.get(cbid as usize) else {
            return classify(name(), record_all);
        };
        let word = slot.load(Ordering::Relaxed);
        if word & RESOLVED != 0 {
            return Class::unpack(word);
        }
        let class = classify(name(), record_all);
        slot.store(class.pack(), Ordering::Relaxed);
        class
    }
}

/// A label built on the stack: at most 40 bytes of valid UTF-8.
#[derive(Clone, Copy)]
pub struct Label {
    bytes: [u8; LABEL_CAPACITY],
    len: usize,
}

impl Default for Label {
    fn default() -> Self {
        Label {
            bytes: [0; LABEL_CAPACITY],
            len: 0,
        }
    }
}

impl Label {
    /// Appends as much of `text` as fits (then cuts back to a char boundary at the end).
    pub fn push(&mut self, text: &[u8]) {
        let room = LABEL_CAPACITY - self.len;
        let take = text.len().min(room);
        self.bytes[self.len..self.len + take].copy_from_slice(&text[..take]);
        self.len += take;
    }

    /// The label as bytes, cut to its longest valid UTF-8 prefix.
    pub fn as_bytes(&self) -> &[u8] {
        let bytes = &self.bytes[..self.len];
        match std::str::from_utf8(bytes) {
            Ok(_) => bytes,
            Err(err) => &bytes[..err.valid_up_to()],
        }
    }
}

/// Reads at most [`LABEL_CAPACITY`] bytes of a C string (never scans past them).
///
/// # Safety
/// `text` must be NULL or point to a NUL-terminated string (or at least 40 readable bytes).
pub unsafe fn c_prefix<'a>(text: *const c_char) -> &'a [u8] {
    if text.is_null() {
        return &[];
    }
    // SAFETY: per the contract, strnlen reads at most LABEL_CAPACITY readable bytes.
    let len = unsafe { libc::strnlen(text, LABEL_CAPACITY) };
    // SAFETY: the first `len` bytes were just read by strnlen.
    unsafe { std::slice::from_raw_parts(text.cast::<u8>(), len) }
}

/// Reads the `index`-th 8-byte word of a params struct.
///
/// # Safety
/// `params` must point to a params struct with at least `index + 1` 8-byte words.
#[inline(always)]
unsafe fn word(params: *const c_void, index: usize) -> u64 {
    // SAFETY: per the contract; params structs are 8-aligned on LP64 (they start with a pointer
    // or size_t), but an unaligned read costs nothing here and tolerates any caller.
    unsafe { params.cast::<u64>().add(index).read_unaligned() }
}

/// Reads the `index`-th 4-byte word of a params struct.
///
/// # Safety
/// `params` must point to a params struct with at least `(index + 1) * 4` bytes.
#[inline(always)]
unsafe fn word32(params: *const c_void, index: usize) -> u32 {
    // SAFETY: per the contract.
    unsafe { params.cast::<u32>().add(index).read_unaligned() }
}

/// The launch geometry fields of [`Args`]: `chunk`, `chunk_count`, `tensor_first` = grid x, y, z;
/// `tensor_count` = threads per block; `bytes` = dynamic shared memory (docs/inject.md).
fn launch_args(function: u64, grid: [u32; 3], block: [u32; 3], shared: u32, stream: u64) -> Args {
    Args {
        bytes: u64::from(shared),
        ptr: function,
        stream,
        chunk: grid[0],
        chunk_count: grid[1],
        tensor_first: grid[2],
        tensor_count: block[0].saturating_mul(block[1]).saturating_mul(block[2]),
        ..Args::default()
    }
}

/// Decodes the arguments of one call.
///
/// # Safety
/// `params` must be NULL or the `functionParams` CUPTI passed for a function that [`classify`]
/// gave `decoder` (so the struct has the layout the decoder reads).
pub unsafe fn decode(decoder: Decoder, params: *const c_void) -> Args {
    if params.is_null() {
        return Args::default();
    }
    // SAFETY: the caller promises `params` has the layout named by `decoder`; each `word`/`word32`
    // read below stays within the fields that layout declares.
    unsafe {
        match decoder {
            Decoder::None => Args::default(),
            Decoder::Alloc => Args {
                bytes: word(params, 1),
                ..Args::default()
            },
            Decoder::AllocAsync => Args {
                bytes: word(params, 1),
                stream: word(params, 2),
                ..Args::default()
            },
            Decoder::AllocFromPoolAsync => Args {
                bytes: word(params, 1),
                ptr2: word(params, 2),
                stream: word(params, 3),
                ..Args::default()
            },
            Decoder::Ptr => Args {
                ptr: word(params, 0),
                ..Args::default()
            },
            Decoder::PtrStream => Args {
                ptr: word(params, 0),
                stream: word(params, 1),
                ..Args::default()
            },
            Decoder::PtrSize => Args {
                ptr: word(params, 0),
                bytes: word(params, 1),
                ..Args::default()
            },
            Decoder::Copy => Args {
                ptr: word(params, 0),
                ptr2: word(params, 1),
                bytes: word(params, 2),
                ..Args::default()
            },
            Decoder::CopyAsync => Args {
                ptr: word(params, 0),
                ptr2: word(params, 1),
                bytes: word(params, 2),
                stream: word(params, 3),
                ..Args::default()
            },
            Decoder::CopyPeer => Args {
                ptr: word(params, 0),
                ptr2: word(params, 2),
                bytes: word(params, 4),
                ..Args::default()
            },
            Decoder::CopyPeerAsync => Args {
                ptr: word(params, 0),
                ptr2: word(params, 2),
                bytes: word(params, 4),
                stream: word(params, 5),
                ..Args::default()
            },
            Decoder::Memset8 | Decoder::Memset16 | Decoder::Memset32 => Args {
                ptr: word(params, 0),
                bytes: word(params, 2).saturating_mul(memset_width(decoder)),
                ..Args::default()
            },
            Decoder::Memset8Async | Decoder::Memset16Async | Decoder::Memset32Async => Args {
                ptr: word(params, 0),
                bytes: word(params, 2).saturating_mul(memset_width(decoder)),
                stream: word(params, 3),
                ..Args::default()
            },
            Decoder::Stream => Args {
                stream: word(params, 0),
                ..Args::default()
            },
            Decoder::HandleStream => Args {
                ptr: word(params, 0),
                stream: word(params, 1),
                ..Args::default()
            },
            Decoder::StreamHandle => Args {
                stream: word(params, 0),
                ptr: word(params, 1),
                ..Args::default()
            },
            Decoder::Launch => decode_launch(params),
            Decoder::LaunchEx => decode_launch_ex(params),
        }
    }
}

/// Decodes `cuLaunchKernel`'s params.
///
/// # Safety
/// `params` must point to `cuLaunchKernel_params` (the [`Decoder::Launch`] layout).
unsafe fn decode_launch(params: *const c_void) -> Args {
    // SAFETY: per the contract, every read stays within `cuLaunchKernel_params`.
    unsafe {
        // f (8 bytes) then seven unsigned ints at byte 8..36, padding, hStream at 40.
        let int = |i: usize| word32(params, 2 + i);
        launch_args(
            word(params, 0),
            [int(0), int(1), int(2)],
            [int(3), int(4), int(5)],
            int(6),
            word(params, 5),
        )
    }
}

/// Decodes `cuLaunchKernelEx`'s params, and the `CUlaunchConfig` they point to.
///
/// # Safety
/// `params` must point to `cuLaunchKernelEx_params` (the [`Decoder::LaunchEx`] layout), whose
/// config pointer is NULL or points to a `CUlaunchConfig`.
unsafe fn decode_launch_ex(params: *const c_void) -> Args {
    // SAFETY: per the contract, every read stays within `cuLaunchKernelEx_params` and the
    // `CUlaunchConfig` (read only when not NULL).
    unsafe {
        // CUlaunchConfig: seven unsigned ints, padding, hStream at byte 32, attrs, count.
        let config = word(params, 0) as *const c_void;
        let function = word(params, 1);
        if config.is_null() {
            Args {
                ptr: function,
                ..Args::default()
            }
        } else {
            let int = |i: usize| word32(config, i);
            launch_args(
                function,
                [int(0), int(1), int(2)],
                [int(3), int(4), int(5)],
                int(6),
                word(config, 4),
            )
        }
    }
}

fn memset_width(decoder: Decoder) -> u64 {
    match decoder {
        Decoder::Memset16 | Decoder::Memset16Async => 2,
        Decoder::Memset32 | Decoder::Memset32Async => 4,
        _ => 1,
    }
}

/// The label of a record: the CUPTI name when the call id does not say it exactly, then the
/// kernel name for launches (CUPTI's `symbolName`), space-separated, cut to 40 bytes.
///
/// # Safety
/// `name` and `symbol` must each be NULL or NUL-terminated strings.
pub unsafe fn label(class: Class, name: *const c_char, symbol: *const c_char) -> Label {
    // SAFETY: forwarded contract (each read stops at 40 bytes or the NUL).
    let (name, kernel) = unsafe { (c_prefix(name), c_prefix(symbol)) };
    label_of(class, name, kernel)
}

/// [`label`] from byte strings: the function's name when `class` says so, then the kernel's (launches).
pub fn label_of(class: Class, name: &[u8], kernel: &[u8]) -> Label {
    let mut label = Label::default();
    if class.name_in_label {
        label.push(name);
    }
    if class.decoder.is_launch() && !kernel.is_empty() {
        if label.len > 0 {
            label.push(b" ");
        }
        label.push(kernel);
    }
    label
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_calls_get_their_ring_ids() {
        let class = classify("cuMemAlloc_v2", false);
        assert_eq!(class.call_id, Call::CuMemAlloc_v2.id());
        assert_eq!(class.decoder, Decoder::Alloc);
        assert!(class.record && !class.name_in_label);

        let class = classify("cuMemcpyHtoDAsync_v2_ptsz", false);
        assert_eq!(class.call_id, Call::CuMemcpyHtoDAsync_v2.id());
        assert_eq!(class.decoder, Decoder::CopyAsync);
        assert!(
            class.name_in_label,
            "the _ptsz variant is named in the label"
        );

        let class = classify("cuLaunchKernel", false);
        assert_eq!(class.call_id, Call::CuLaunchKernel.id());
        assert_eq!(class.decoder, Decoder::Launch);
    }

    #[test]
    fn others_are_custom_with_their_name() {
        let class = classify("cuMemcpy2DAsync_v2", false);
        assert_eq!(class.call_id, Call::Custom.id());
        assert_eq!(class.decoder, Decoder::None);
        assert!(class.name_in_label && class.record);
        let class = classify("cuLaunchKernelEx", false);
        assert_eq!(class.call_id, Call::Custom.id());
        assert_eq!(class.decoder, Decoder::LaunchEx);
        // A name equal to "custom" must not become the Custom id by name.
        assert!(classify("custom", false).name_in_label);
    }

    #[test]
    fn getters_are_quiet_unless_asked() {
        assert!(!classify("cuCtxGetCurrent", false).record);
        assert!(!classify("cuGetProcAddress_v2", false).record);
        assert!(!classify("cuStreamGetCaptureInfo_v2_ptsz", false).record);
        assert!(classify("cuCtxGetCurrent", true).record);
        assert!(classify("cuCtxSynchronize", false).record);
        assert!(classify("cuStreamSynchronize_ptsz", false).record);
        // cuBLAS asks this dozens of times per GEMM set-up (seen on the H200 with PyTorch).
        assert!(!classify("cuOccupancyMaxActiveClusters", false).record);
    }

    #[test]
    fn cuda_13_suffixed_names_keep_the_ring_id() {
        let class = classify("cuCtxSynchronize_v2", false);
        assert_eq!(class.call_id, Call::CuCtxSynchronize.id());
        assert!(class.name_in_label && class.record);
        // A known _v2 name is itself, with no label.
        let class = classify("cuMemFree_v2", false);
        assert_eq!(class.call_id, Call::CuMemFree_v2.id());
        assert!(!class.name_in_label);
    }

    #[test]
    fn packing_round_trips_every_decoder() {
        for (index, decoder) in Decoder::ALL.iter().enumerate() {
            assert_eq!(*decoder as u8 as usize, index);
            for (record, name_in_label) in [(true, false), (false, true)] {
                let class = Class {
                    call_id: 53,
                    decoder: *decoder,
                    record,
                    name_in_label,
                };
                assert_eq!(Class::unpack(class.pack()), class);
            }
        }
    }

    #[test]
    fn the_cache_classifies_once_per_id() {
        let cache = ClassCache::new();
        let mut calls = 0;
        let first = cache.get(
            7,
            || {
                calls += 1;
                "cuMemFree_v2"
            },
            false,
        );
        let second = cache.get(7, || panic!("not asked again"), false);
        assert_eq!(calls, 1);
        assert_eq!(first, second);
        assert_eq!(second.call_id, Call::CuMemFree_v2.id());
        // Ids beyond the table still classify.
        assert_eq!(
            cache.get(1 << 20, || "cuMemFree_v2", false).call_id,
            Call::CuMemFree_v2.id()
        );
    }

    // The params structs as the CUDA headers declare them (LP64), to decode from.
    #[repr(C)]
    struct MemAllocParams {
        dptr: *mut u64,
        bytesize: usize,
    }
    #[repr(C)]
    struct CopyAsyncParams {
        dst: u64,
        src: *const c_void,
        count: usize,
        stream: *mut c_void,
    }
    #[repr(C)]
    struct MemsetAsyncParams {
        dst: u64,
        value: u16,
        n: usize,
        stream: *mut c_void,
    }
    #[repr(C)]
    struct LaunchParams {
        f: *mut c_void,
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
        stream: *mut c_void,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    }
    #[repr(C)]
    struct LaunchConfig {
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
        stream: *mut c_void,
        attrs: *mut c_void,
        count: u32,
    }
    #[repr(C)]
    struct LaunchExParams {
        config: *const LaunchConfig,
        f: *mut c_void,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    }

    fn decode_of<T>(name: &str, params: &T) -> Args {
        let class = classify(name, false);
        // SAFETY: `params` is the header layout of `name`'s params struct.
        unsafe { decode(class.decoder, (params as *const T).cast()) }
    }

    #[test]
    fn decodes_allocations_copies_memsets_and_launches() {
        let mut out = 0u64;
        let args = decode_of(
            "cuMemAlloc_v2",
            &MemAllocParams {
                dptr: &mut out,
                bytesize: 1 << 30,
            },
        );
        assert_eq!(args.bytes, 1 << 30);

        let args = decode_of(
            "cuMemcpyHtoDAsync_v2",
            &CopyAsyncParams {
                dst: 0x7f00_0000_1000,
                src: 0x5555_0000 as *const c_void,
                count: 4096,
                stream: 0xabc as *mut c_void,
            },
        );
        assert_eq!(
            (args.ptr, args.ptr2, args.bytes, args.stream),
            (0x7f00_0000_1000, 0x5555_0000, 4096, 0xabc)
        );

        let args = decode_of(
            "cuMemsetD16Async",
            &MemsetAsyncParams {
                dst: 0x1000,
                value: 7,
                n: 10,
                stream: 0x9 as *mut c_void,
            },
        );
        assert_eq!((args.ptr, args.bytes, args.stream), (0x1000, 20, 0x9));

        let launch = LaunchParams {
            f: 0xf00 as *mut c_void,
            grid: [1024, 2, 3],
            block: [256, 2, 1],
            shared: 4096,
            stream: 0x5 as *mut c_void,
            params: std::ptr::null_mut(),
            extra: std::ptr::null_mut(),
        };
        let args = decode_of("cuLaunchKernel_ptsz", &launch);
        assert_eq!(
            (args.ptr, args.chunk, args.chunk_count, args.tensor_first),
            (0xf00, 1024, 2, 3)
        );
        assert_eq!(
            (args.tensor_count, args.bytes, args.stream),
            (512, 4096, 0x5)
        );

        let config = LaunchConfig {
            grid: [8, 1, 1],
            block: [32, 1, 1],
            shared: 0,
            stream: 0x77 as *mut c_void,
            attrs: std::ptr::null_mut(),
            count: 0,
        };
        let args = decode_of(
            "cuLaunchKernelEx",
            &LaunchExParams {
                config: &config,
                f: 0xf1 as *mut c_void,
                params: std::ptr::null_mut(),
                extra: std::ptr::null_mut(),
            },
        );
        assert_eq!(
            (args.ptr, args.chunk, args.tensor_count, args.stream),
            (0xf1, 8, 32, 0x77)
        );
        // SAFETY: `decode`'s contract allows NULL params (it reads nothing then).
        let decoded = unsafe { decode(Decoder::Copy, std::ptr::null()) };
        assert_eq!(decoded, Args::default());
    }

    #[test]
    fn labels_name_variants_and_kernels_within_40_bytes() {
        let name = c"cuLaunchKernel_ptsz";
        let kernel = c"_Z11spin_kernelPyyAVeryLongMangledNameThatGoesOnAndOn";
        let class = classify("cuLaunchKernel_ptsz", false);
        // SAFETY: both are NUL-terminated literals.
        let label = unsafe { label(class, name.as_ptr(), kernel.as_ptr()) };
        let text = std::str::from_utf8(label.as_bytes()).unwrap();
        assert_eq!(text.len(), 40);
        assert!(text.starts_with("cuLaunchKernel_ptsz _Z11spin"), "{text}");

        let class = classify("cuMemAlloc_v2", false);
        // SAFETY: as above; the symbol may be NULL.
        let label = unsafe { super::label(class, c"cuMemAlloc_v2".as_ptr(), std::ptr::null()) };
        assert!(label.as_bytes().is_empty(), "the id says it all");

        let mut cut = Label::default();
        cut.push("x".repeat(39).as_bytes());
        cut.push("é".as_bytes());
        assert_eq!(cut.as_bytes().len(), 39, "a split char is cut off");
    }
}
