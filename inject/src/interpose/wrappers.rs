//! The generated wrappers (inject/build.rs from driver_api/driver_api.tsv): one `#[no_mangle] extern "C"`
//! function per libcuda symbol of cuda.h, named as the symbol and declared with its exact parameter list. Each
//! builds the `<name>_params` layout CUPTI would show (the parameters in order, as a `repr(C)` struct) for
//! [`super::enter`], calls the real function and records its `CUresult` with [`super::exit`]. [`wrapper`] maps
//! a table index to its wrapper's address; [`NAMES`] and [`ABI`] are the table.
#![allow(
    non_snake_case,
    non_camel_case_types,
    clippy::too_many_arguments,
    clippy::missing_safety_doc
)]

use std::ffi::{c_void, CStr};

use super::CUresult;

include!(concat!(env!("OUT_DIR"), "/driver_api.rs"));

/// The table index of `name` (binary search: [`NAMES`] is sorted).
pub fn index_of(name: &[u8]) -> Option<usize> {
    NAMES
        .binary_search_by(|probe| probe.to_bytes().cmp(name))
        .ok()
}
