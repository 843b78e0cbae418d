//! The real `dlsym` (glibc's, or the next interposer's), found with `dlvsym(RTLD_NEXT, "dlsym", <version>)`
//! (never through `dlsym`, which is this library's own: [`super::dlsym`]) at load time, or at the first call if
//! another library's constructor calls first. The interposer's own lookups of libcuda go through it.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The real `dlsym` (glibc's, or the next interposer's), 0 until resolved.
pub(super) static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// glibc's symbol versions of `dlsym`: libc since 2.34, libdl before (x86_64 and aarch64 base versions).
const DLSYM_VERSIONS: &[&CStr] = &[c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"];

/// Finds the real `dlsym` (once; racing threads find the same one). Returns 0 if there is none.
pub(super) extern "C" fn resolve_real_dlsym() -> usize {
    let known = REAL_DLSYM.load(Ordering::Acquire);
    if known != 0 {
        return known;
    }
    for version in DLSYM_VERSIONS {
        // SAFETY: dlvsym with RTLD_NEXT and NUL-terminated names; it searches the objects after this one.
        let found = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), version.as_ptr()) };
        if !found.is_null() {
            REAL_DLSYM.store(found as usize, Ordering::Release);
            return found as usize;
        }
    }
    0
}

/// Resolves the real `dlsym` when the library is loaded, before the program's own code runs.
#[used]
#[link_section = ".init_array"]
static RESOLVE_AT_LOAD: extern "C" fn() = {
    extern "C" fn at_load() {
        resolve_real_dlsym();
    }
    at_load
};

/// The real `dlsym`, called from this library (never for `RTLD_NEXT` on a caller's behalf).
///
/// # Safety
/// `name` must be NULL or NUL-terminated and `handle` a value `dlsym` accepts.
pub unsafe fn real_dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let real = resolve_real_dlsym();
    if real == 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: `real` is the address of a `dlsym` (found by dlvsym under that name); the caller's contract.
    unsafe { std::mem::transmute::<usize, DlsymFn>(real)(handle, name) }
}
