//! The `Driver` trait: the CUDA driver calls the strategies make, one method per call, so the
//! breadcrumb layer ([`crate::trace`]) can wrap every one of them. The calls are one table,
//! `for_each_driver_call!` ([`crate::call_table`]); the trait, [`CallKind`] and the wrappers are
//! generated from it.
//!
//! [`CallKind`]: crate::call_table::CallKind
//!
//! Backends: [`crate::cuda::CudaDriver`] (libcuda through cudarc's `result`/`sys` layer) and
//! [`crate::host::HostDriver`] (device memory simulated in host memory, for tests and machines
//! without a GPU).

use crate::call_table::{for_each_driver_call, returns};
use crate::error::Result;

/// A device address (`CUdeviceptr`). For managed memory it is also a valid host address.
pub type DevicePtr = u64;

/// An opaque stream handle (`CUstream`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stream(pub u64);

/// An opaque event handle (`CUevent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event(pub u64);

/// An opaque stream-ordered memory pool handle (`CUmemoryPool`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemPool(pub u64);

impl Stream {
    /// The legacy default stream (`0`).
    pub const LEGACY: Stream = Stream(0);
}

/// Device attributes the strategies ask about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceAttribute {
    /// `CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS`: the CPU may touch managed memory while
    /// the GPU runs. Without it the `managed` strategy refuses to run.
    ConcurrentManagedAccess,
    /// `CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS` (reported, for the record).
    PageableMemoryAccess,
    /// `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`: stream-ordered pools (`cuMemPoolCreate`).
    MemoryPoolsSupported,
    /// `CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED`: `cuMemHostRegister` takes
    /// `CU_MEMHOSTREGISTER_READ_ONLY`.
    ReadOnlyHostRegisterSupported,
}

/// The [`Driver`] trait, from the call table ([`crate::call_table`]).
macro_rules! define_driver {
    ($(
        $(#[$doc:meta])*
        [$($unsafety:tt)?] $kind:ident($cuda:literal, $crumb:ident)
        $vis:vis fn $method:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?
        [$($extra:ident: $extra_ty:ty),*]
        { $($field:ident: $value:expr),* };
    )*) => {
        /// The driver calls the uploader makes. Methods are called from one thread (the one that
        /// made the context current); packing threads never call the driver.
        ///
        /// The `unsafe` methods take raw addresses or handles: the caller promises they came from
        /// this driver, are live, and cover the stated length.
        pub trait Driver {
            /// "cuda" or "host".
            fn backend(&self) -> &'static str;

            $(
                $(#[$doc])*
                $($unsafety)? fn $method(&self $(, $arg: $ty)*) -> Result<returns!($($ret)?)>;
            )*
        }
    };
}

for_each_driver_call!(define_driver);

/// Human-readable names of the CUDA error codes the host backend produces (and a fallback).
pub fn error_name(code: i32) -> &'static str {
    match code {
        0 => "CUDA_SUCCESS",
        1 => "CUDA_ERROR_INVALID_VALUE",
        2 => "CUDA_ERROR_OUT_OF_MEMORY",
        3 => "CUDA_ERROR_NOT_INITIALIZED",
        100 => "CUDA_ERROR_NO_DEVICE",
        201 => "CUDA_ERROR_INVALID_CONTEXT",
        400 => "CUDA_ERROR_INVALID_HANDLE",
        700 => "CUDA_ERROR_ILLEGAL_ADDRESS",
        712 => "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
        713 => "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
        801 => "CUDA_ERROR_NOT_SUPPORTED",
        999 => "CUDA_ERROR_UNKNOWN",
        _ => "CUDA_ERROR_?",
    }
}
