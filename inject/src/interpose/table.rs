//! The driver-API table (inject/build.rs from driver_api/driver_api.tsv): every libcuda symbol of cuda.h,
//! sorted ([`NAMES`]), with its parameter classes ([`ABI`]) and the by-value structs they name. The leaf every
//! other part of the interposer looks symbols up in.
#![allow(non_camel_case_types)]

use std::ffi::{c_int, CStr};

/// `CUresult`.
pub type CUresult = c_int;
/// `CUDA_ERROR_NOT_FOUND`: what a wrapper returns when libcuda has no such function (the program could not
/// have called it without the interposer either).
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;

include!(concat!(env!("OUT_DIR"), "/driver_api_table.rs"));

/// The table index of `name` (binary search: [`NAMES`] is sorted).
pub fn index_of(name: &[u8]) -> Option<usize> {
    NAMES
        .binary_search_by(|probe| probe.to_bytes().cmp(name))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_knows_the_calls_the_cupti_path_records() {
        assert!(NAMES.windows(2).all(|w| w[0] < w[1]));
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
            assert!(index_of(name.as_bytes()).is_some(), "{name}");
        }
    }
}
