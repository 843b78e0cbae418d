//! The generated wrappers (inject/build.rs from driver_api/driver_api.tsv): one `#[no_mangle] extern "C"`
//! function per libcuda symbol of cuda.h, named as the symbol and declared with its exact parameter list. Each
//! builds the `<name>_params` layout CUPTI would show (the parameters in order, as a `repr(C)` struct) for
//! [`enter`], calls the real function ([`real`]) and records its `CUresult` with [`exit`]. [`wrapper`] maps
//! a table index to its wrapper's address, which [`wrap_lookup`] hands out for a libcuda address (the
//! interposed `dlsym` and `cuGetProcAddress`'s wrapper).
#![allow(
    non_snake_case,
    non_camel_case_types,
    clippy::too_many_arguments,
    clippy::missing_safety_doc
)]

use std::ffi::{c_char, c_void, CStr};
use std::panic::catch_unwind;

use super::kernels::invalidate;
use super::real::{adopt_library_of, libcuda_map, real};
use super::record::{enter, exit, note_pass_through, note_wrapped};
use super::table::*;

include!(concat!(env!("OUT_DIR"), "/driver_api_wrappers.rs"));

/// The wrapper to hand out for `found` (a lookup of `name`), or `found` itself.
pub fn wrap_lookup(found: *mut c_void, name: &CStr) -> *mut c_void {
    adopt_library_of(found);
    let Some(map) = libcuda_map() else {
        return found;
    };
    if let Some(index) = map.lookup(found as usize) {
        note_wrapped();
        return wrapper(index) as *mut c_void;
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
    invalidate();
}
