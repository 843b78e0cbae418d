//! Driver-API interposition: breadcrumbs without CUPTI (docs/inject.md, "The default path").
//!
//! libwedge_inject.so in `LD_PRELOAD` exports one wrapper per libcuda function of cuda.h ([`wrappers`],
//! generated from driver_api/driver_api.tsv) and an interposed `dlsym` ([`dlsym`]). A program reaches the
//! driver three ways, and each now lands on a wrapper:
//! - linked against libcuda (`-lcuda`): the dynamic linker binds its calls to the preloaded wrappers;
//! - `dlopen` + `dlsym(handle, "cu…")` (cudarc, PyTorch, Triton): the interposed `dlsym` returns the wrapper of
//!   the libcuda function it found;
//! - `cuGetProcAddress` (the CUDA runtime, static or shared, cuBLAS, NCCL, `cudaGetDriverEntryPoint`): its
//!   wrapper replaces the returned pointer by the wrapper of the function at that address.
//!
//! Wrappers are chosen by *address*, never by the name asked for: the driver decides which version and which
//! stream flavour (`_ptsz`/`_ptds`) a `cuGetProcAddress(name, version, flags)` gets, and may return one function
//! for several versions; the wrapper of the symbol at that address has exactly that function's parameters.
//! An address two symbols share with different parameter lists, and a libcuda function the table lacks (a
//! newer driver's), pass through unwrapped and are counted ([`PassThrough`]; the ring's status names them).
//!
//! Each wrapper calls [`enter`] (the same classification, argument decoding and labels as the CUPTI callback,
//! [`crate::calls`]), the real function, then [`exit`] with its `CUresult`. The ring is
//! `<pid>-<starttime>.driver.ring`, created at the first recorded call.

pub mod dlsym;
pub mod kernels;
pub mod wrappers;

use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use breadcrumb::format::LABEL_CAPACITY;
use breadcrumb::{Token, Writer};

use crate::calls::{self, ClassCache};

/// `CUresult`.
pub type CUresult = c_int;
/// `CUDA_ERROR_NOT_FOUND`: what a wrapper returns when libcuda has no such function (the program could not
/// have called it without the interposer either).
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
/// The ring file suffix of this path: `<pid>-<starttime>.driver.ring`.
pub const RING_SUFFIX: &str = "driver";
/// Ring status code: libcuda functions the program looked up that pass through unrecorded.
pub const STATUS_PASSED_THROUGH: i32 = 7;
/// Environment variable: `1` prints the interposer's counts on stderr at exit.
pub const ENV_STATS: &str = "WEDGE_CAPTURE_INJECT_STATS";

/// The real function of each table entry (0 until resolved).
static REAL: [AtomicUsize; wrappers::COUNT] = [const { AtomicUsize::new(0) }; wrappers::COUNT];
static CLASSES: ClassCache = ClassCache::new();
static LIBCUDA: OnceLock<AddressMap> = OnceLock::new();
static WRITER: OnceLock<Option<Writer>> = OnceLock::new();
static SETTINGS: OnceLock<Settings> = OnceLock::new();
static WRAPPED_LOOKUPS: AtomicU64 = AtomicU64::new(0);
static PASSED: Mutex<PassThrough> = Mutex::new(PassThrough {
    lookups: 0,
    names: Vec::new(),
});

struct Settings {
    record_all: bool,
    record: bool,
}

fn settings() -> &'static Settings {
    SETTINGS.get_or_init(|| {
        if crate::env_flag(ENV_STATS) == Some(true) {
            // SAFETY: registering a function with no preconditions to run at exit.
            unsafe { libc::atexit(print_stats) };
        }
        Settings {
            record_all: crate::env_flag(crate::ENV_RECORD_ALL) == Some(true),
            record: crate::env_flag(crate::ENV_RECORD) != Some(false),
        }
    })
}

/// Lookups of libcuda functions that were handed out unwrapped.
#[derive(Debug, Default)]
pub struct PassThrough {
    pub lookups: u64,
    /// The distinct names, first 16.
    pub names: Vec<String>,
}

/// Every exported function of one libcuda, by address.
struct AddressMap {
    /// (address, table index), sorted by address; addresses shared by unlike symbols are left out.
    by_address: Vec<(usize, u16)>,
    low: usize,
    high: usize,
}

impl AddressMap {
    fn lookup(&self, address: usize) -> Option<usize> {
        self.by_address
            .binary_search_by_key(&address, |(a, _)| *a)
            .ok()
            .map(|i| usize::from(self.by_address[i].1))
    }

    fn contains(&self, address: usize) -> bool {
        (self.low..=self.high).contains(&address)
    }
}

/// The real function of table entry `index`, resolved on first use: libcuda's (from the library the map was
/// built from), else the next definition after this library (a program linked against libcuda).
#[inline]
pub fn real(index: usize) -> usize {
    let known = REAL[index].load(Ordering::Acquire);
    if known != 0 {
        return known;
    }
    resolve(index)
}

#[cold]
fn resolve(index: usize) -> usize {
    let name = wrappers::NAMES[index];
    // SAFETY: RTLD_NEXT from this library's own code: the definition after this one (libcuda for a program
    // linked against it).
    let found = unsafe { dlsym::real_dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    if found.is_null() {
        clear_dlerror();
        return 0;
    }
    adopt_library_of(found);
    let _ = REAL[index].compare_exchange(0, found as usize, Ordering::AcqRel, Ordering::Acquire);
    REAL[index].load(Ordering::Acquire)
}

fn clear_dlerror() {
    // SAFETY: dlerror takes no arguments; the returned text (if any) is dropped.
    unsafe { libc::dlerror() };
}

/// If `address` is in a library named `libcuda.so*`, builds the address map from it (once per process).
fn adopt_library_of(address: *mut c_void) {
    if LIBCUDA.get().is_some() {
        return;
    }
    let mut info: libc::Dl_info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr with a valid out-pointer; the address is only looked up.
    if unsafe { libc::dladdr(address, &mut info) } == 0 || info.dli_fname.is_null() {
        return;
    }
    // SAFETY: dladdr filled dli_fname with the object's NUL-terminated path.
    let path = unsafe { CStr::from_ptr(info.dli_fname) };
    let is_libcuda = path
        .to_bytes()
        .rsplit(|b| *b == b'/')
        .next()
        .is_some_and(|file| file.starts_with(b"libcuda.so"));
    if !is_libcuda {
        return;
    }
    // SAFETY: RTLD_NOLOAD only returns a handle to the already loaded object (never loads or runs anything).
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        clear_dlerror();
        return;
    }
    LIBCUDA.get_or_init(|| build_map(handle));
    // The lookups of symbols this driver lacks left an error behind: the program's dlerror() must not see it.
    clear_dlerror();
}

fn build_map(handle: *mut c_void) -> AddressMap {
    let mut pairs: Vec<(usize, u16)> = Vec::with_capacity(wrappers::COUNT);
    for (index, name) in wrappers::NAMES.iter().enumerate() {
        // SAFETY: a live handle (never closed) and a NUL-terminated name.
        let found = unsafe { dlsym::real_dlsym(handle, name.as_ptr()) };
        if !found.is_null() {
            let _ = REAL[index].compare_exchange(
                0,
                found as usize,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            pairs.push((found as usize, index as u16));
        }
    }
    pairs.sort_unstable();
    let low = pairs.first().map_or(0, |p| p.0);
    let high = pairs.last().map_or(0, |p| p.0);
    // One address, several symbols: keep it only if they all take the same parameters.
    let mut by_address: Vec<(usize, u16)> = Vec::with_capacity(pairs.len());
    let mut i = 0;
    while i < pairs.len() {
        let mut j = i + 1;
        while j < pairs.len() && pairs[j].0 == pairs[i].0 {
            j += 1;
        }
        let abi = wrappers::ABI[usize::from(pairs[i].1)];
        if pairs[i..j]
            .iter()
            .all(|p| wrappers::ABI[usize::from(p.1)] == abi)
        {
            by_address.push(pairs[i]);
        }
        i = j;
    }
    AddressMap {
        by_address,
        low,
        high,
    }
}

/// The wrapper to hand out for `found` (a lookup of `name`), or `found` itself.
pub fn wrap_lookup(found: *mut c_void, name: &CStr) -> *mut c_void {
    adopt_library_of(found);
    let Some(map) = LIBCUDA.get() else {
        return found;
    };
    if let Some(index) = map.lookup(found as usize) {
        WRAPPED_LOOKUPS.fetch_add(1, Ordering::Relaxed);
        return wrappers::wrapper(index) as *mut c_void;
    }
    if map.contains(found as usize) {
        note_pass_through(name);
    }
    found
}

/// After a `cuGetProcAddress*`: replace the returned function by its wrapper.
///
/// # Safety
/// `symbol` and `pfn` are the arguments the call was made with (NULL or valid), `result` its result.
pub unsafe fn after_get_proc_address(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    result: CUresult,
) {
    if result != 0 || pfn.is_null() {
        return;
    }
    // SAFETY: the driver wrote *pfn on success; the caller's pointer is valid for reading and writing.
    let found = unsafe { pfn.read() };
    if found.is_null() {
        return;
    }
    let name = if symbol.is_null() {
        c""
    } else {
        // SAFETY: the symbol name the program passed (NUL-terminated, per the API).
        unsafe { CStr::from_ptr(symbol) }
    };
    let wrapped = catch_unwind(|| wrap_lookup(found, name)).unwrap_or(found);
    if wrapped != found {
        // SAFETY: as above.
        unsafe { pfn.write(wrapped) };
    }
}

/// A module or library was unloaded: kernel names cached by handle may be stale.
pub fn kernels_unloaded() {
    kernels::invalidate();
}

fn note_pass_through(name: &CStr) {
    let mut passed = PASSED.lock().unwrap_or_else(|e| e.into_inner());
    passed.lookups += 1;
    let name = name.to_string_lossy();
    if passed.names.len() < 16 && !passed.names.iter().any(|n| *n == name) {
        passed.names.push(name.into_owned());
        if let Some(Some(writer)) = WRITER.get() {
            set_pass_through_status(writer, &passed);
        }
    }
}

fn set_pass_through_status(writer: &Writer, passed: &PassThrough) {
    if passed.names.is_empty() {
        return;
    }
    writer.set_status(
        STATUS_PASSED_THROUGH,
        &format!(
            "driver-API interposition: calls of {} libcuda function(s) not recorded (not in the wrapper table): {}",
            passed.names.len(),
            passed.names.join(", ")
        ),
    );
}

/// What the interposer did so far (tests, the exit summary).
pub fn pass_through() -> PassThrough {
    let passed = PASSED.lock().unwrap_or_else(|e| e.into_inner());
    PassThrough {
        lookups: passed.lookups,
        names: passed.names.clone(),
    }
}

fn writer() -> Option<&'static Writer> {
    WRITER
        .get_or_init(|| match crate::open_ring(RING_SUFFIX) {
            Ok(Some(writer)) => {
                set_pass_through_status(&writer, &PASSED.lock().unwrap_or_else(|e| e.into_inner()));
                Some(writer)
            }
            Ok(None) => {
                crate::say_disabled(&crate::InjectError::NoRing);
                None
            }
            Err(err) => {
                crate::say_disabled(&err);
                None
            }
        })
        .as_ref()
}

/// Before the real call: the enter record (or [`Token::NONE`] for a quiet getter, or without a ring).
///
/// # Safety
/// `params` must be NULL or point to the parameters of table entry `index`, laid out as a `repr(C)` struct in
/// declaration order (what each generated wrapper builds).
#[inline]
pub unsafe fn enter(index: usize, params: *const c_void) -> Token {
    let settings = settings();
    let class = CLASSES.get(
        index as u32,
        || wrappers::NAMES[index].to_str().unwrap_or(""),
        settings.record_all,
    );
    if !class.record || !settings.record {
        return Token::NONE;
    }
    let Some(writer) = writer() else {
        return Token::NONE;
    };
    catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `params` is NULL or the wrapper's `repr(C)` struct of the parameters of the function
        // `index` names, which is the layout `classify` chose the decoder for.
        let args = unsafe { calls::decode(class.decoder, params) };
        let mut kernel = [0u8; LABEL_CAPACITY];
        let kernel_len = if class.decoder.is_launch() {
            kernels::name(args.ptr, &mut kernel)
        } else {
            0
        };
        let label = calls::label_of(
            class,
            wrappers::NAMES[index].to_bytes(),
            &kernel[..kernel_len],
        );
        writer.enter_raw(class.call_id, &args, label.as_bytes())
    }))
    .unwrap_or(Token::NONE)
}

/// After the real call: the exit record with its `CUresult`.
#[inline]
pub fn exit(token: Token, result: CUresult) {
    if token.index().is_none() {
        return;
    }
    if let Some(Some(writer)) = WRITER.get() {
        let _ = catch_unwind(AssertUnwindSafe(|| writer.exit(token, i64::from(result))));
    }
}

extern "C" fn print_stats() {
    let passed = pass_through();
    let message = format!(
        "wedge-capture inject: driver-API interposition: {} lookups wrapped, {} passed through{}{}\n",
        WRAPPED_LOOKUPS.load(Ordering::Relaxed),
        passed.lookups,
        if passed.names.is_empty() { "" } else { ": " },
        passed.names.join(", ")
    );
    // SAFETY: writing a valid buffer to fd 2; a failed write is ignored.
    unsafe { libc::write(2, message.as_ptr().cast(), message.len()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_knows_the_calls_the_cupti_path_records() {
        assert!(wrappers::NAMES.windows(2).all(|w| w[0] < w[1]));
        for name in [
            "cuInit",
            "cuMemAlloc_v2",
            "cuMemcpyHtoDAsync_v2",
            "cuMemcpyHtoDAsync_v2_ptsz",
            "cuLaunchKernel",
            "cuLaunchKernel_ptsz",
            "cuLaunchKernelEx",
            "cuCtxSynchronize",
            "cuCtxSynchronize_v2",
            "cuStreamSynchronize_ptsz",
            "cuMemPrefetchAsync_v2",
            "cuGetProcAddress",
            "cuGetProcAddress_v2",
            "cuLibraryLoadData",
        ] {
            assert!(wrappers::index_of(name.as_bytes()).is_some(), "{name}");
        }
    }

    #[test]
    fn an_address_shared_by_unlike_symbols_is_not_wrapped() {
        let alloc = wrappers::index_of(b"cuMemAlloc_v2").unwrap() as u16;
        let sync = wrappers::index_of(b"cuCtxSynchronize").unwrap() as u16;
        let sync2 = wrappers::index_of(b"cuCtxSynchronize_v2").unwrap() as u16;
        let map = AddressMap {
            by_address: vec![(0x1000, alloc)],
            low: 0x1000,
            high: 0x3000,
        };
        assert_eq!(map.lookup(0x1000), Some(usize::from(alloc)));
        assert!(map.contains(0x2000) && !map.contains(0x4000));
        // What build_map keeps of one address with unlike parameter lists: nothing.
        assert_ne!(
            wrappers::ABI[usize::from(sync)],
            wrappers::ABI[usize::from(sync2)]
        );
    }
}
