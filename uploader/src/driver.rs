//! The `Driver` trait: the CUDA driver calls the strategies make, one method per call, so the
//! breadcrumb layer ([`crate::trace`]) can wrap every one of them.
//!
//! Backends: [`crate::cuda::CudaDriver`] (libcuda through cudarc's `result`/`sys` layer) and
//! [`crate::host::HostDriver`] (device memory simulated in host memory, for tests and machines
//! without a GPU).

use serde::Serialize;

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
}

/// Every driver call the uploader can make. The breadcrumb records carry the CUDA name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum CallKind {
    Init,
    DeviceGet,
    PrimaryCtxRetain,
    CtxSetCurrent,
    PrimaryCtxRelease,
    CtxSynchronize,
    DeviceGetAttribute,
    MemGetInfo,
    MemAlloc,
    MemFree,
    MemPoolCreate,
    MemPoolSetAttribute,
    MemPoolDestroy,
    MemAllocFromPoolAsync,
    MemFreeAsync,
    MemAllocManaged,
    MemPrefetchAsync,
    MemHostAlloc,
    MemFreeHost,
    MemHostRegister,
    MemHostUnregister,
    MemcpyHtoD,
    MemcpyHtoDAsync,
    MemcpyDtoH,
    StreamCreate,
    StreamSynchronize,
    StreamDestroy,
    EventCreate,
    EventRecord,
    EventSynchronize,
    EventQuery,
    EventDestroy,
}

impl CallKind {
    pub const ALL: [CallKind; 32] = [
        CallKind::Init,
        CallKind::DeviceGet,
        CallKind::PrimaryCtxRetain,
        CallKind::CtxSetCurrent,
        CallKind::PrimaryCtxRelease,
        CallKind::CtxSynchronize,
        CallKind::DeviceGetAttribute,
        CallKind::MemGetInfo,
        CallKind::MemAlloc,
        CallKind::MemFree,
        CallKind::MemPoolCreate,
        CallKind::MemPoolSetAttribute,
        CallKind::MemPoolDestroy,
        CallKind::MemAllocFromPoolAsync,
        CallKind::MemFreeAsync,
        CallKind::MemAllocManaged,
        CallKind::MemPrefetchAsync,
        CallKind::MemHostAlloc,
        CallKind::MemFreeHost,
        CallKind::MemHostRegister,
        CallKind::MemHostUnregister,
        CallKind::MemcpyHtoD,
        CallKind::MemcpyHtoDAsync,
        CallKind::MemcpyDtoH,
        CallKind::StreamCreate,
        CallKind::StreamSynchronize,
        CallKind::StreamDestroy,
        CallKind::EventCreate,
        CallKind::EventRecord,
        CallKind::EventSynchronize,
        CallKind::EventQuery,
        CallKind::EventDestroy,
    ];

    /// The driver API symbol the CUDA backend calls (what a breadcrumb names).
    pub fn cuda_name(self) -> &'static str {
        match self {
            CallKind::Init => "cuInit",
            CallKind::DeviceGet => "cuDeviceGet",
            CallKind::PrimaryCtxRetain => "cuDevicePrimaryCtxRetain",
            CallKind::CtxSetCurrent => "cuCtxSetCurrent",
            CallKind::PrimaryCtxRelease => "cuDevicePrimaryCtxRelease_v2",
            CallKind::CtxSynchronize => "cuCtxSynchronize",
            CallKind::DeviceGetAttribute => "cuDeviceGetAttribute",
            CallKind::MemGetInfo => "cuMemGetInfo_v2",
            CallKind::MemAlloc => "cuMemAlloc_v2",
            CallKind::MemFree => "cuMemFree_v2",
            CallKind::MemPoolCreate => "cuMemPoolCreate",
            CallKind::MemPoolSetAttribute => "cuMemPoolSetAttribute",
            CallKind::MemPoolDestroy => "cuMemPoolDestroy",
            CallKind::MemAllocFromPoolAsync => "cuMemAllocFromPoolAsync",
            CallKind::MemFreeAsync => "cuMemFreeAsync",
            CallKind::MemAllocManaged => "cuMemAllocManaged",
            CallKind::MemPrefetchAsync => "cuMemPrefetchAsync_v2",
            CallKind::MemHostAlloc => "cuMemHostAlloc",
            CallKind::MemFreeHost => "cuMemFreeHost",
            CallKind::MemHostRegister => "cuMemHostRegister_v2",
            CallKind::MemHostUnregister => "cuMemHostUnregister",
            CallKind::MemcpyHtoD => "cuMemcpyHtoD_v2",
            CallKind::MemcpyHtoDAsync => "cuMemcpyHtoDAsync_v2",
            CallKind::MemcpyDtoH => "cuMemcpyDtoH_v2",
            CallKind::StreamCreate => "cuStreamCreate",
            CallKind::StreamSynchronize => "cuStreamSynchronize",
            CallKind::StreamDestroy => "cuStreamDestroy_v2",
            CallKind::EventCreate => "cuEventCreate",
            CallKind::EventRecord => "cuEventRecord",
            CallKind::EventSynchronize => "cuEventSynchronize",
            CallKind::EventQuery => "cuEventQuery",
            CallKind::EventDestroy => "cuEventDestroy_v2",
        }
    }
}

/// The driver calls the uploader makes. Methods are called from one thread (the one that made
/// the context current); packing threads never call the driver.
///
/// The `unsafe` methods take raw addresses: the caller promises they came from this driver,
/// are live, and cover the stated length.
pub trait Driver {
    /// "cuda" or "host".
    fn backend(&self) -> &'static str;

    /// `cuInit(0)`.
    fn init(&self) -> Result<()>;
    /// `cuDeviceGet(ordinal)`; the driver remembers the device.
    fn device_get(&self, ordinal: i32) -> Result<()>;
    /// `cuDevicePrimaryCtxRetain` on the remembered device.
    fn primary_ctx_retain(&self) -> Result<()>;
    /// `cuCtxSetCurrent` with the retained primary context, on the calling thread.
    fn ctx_set_current(&self) -> Result<()>;
    /// `cuDevicePrimaryCtxRelease`.
    fn primary_ctx_release(&self) -> Result<()>;
    /// `cuCtxSynchronize`.
    fn ctx_synchronize(&self) -> Result<()>;

    fn device_attribute(&self, attribute: DeviceAttribute) -> Result<i32>;
    /// `(free, total)` device memory in bytes.
    fn mem_get_info(&self) -> Result<(u64, u64)>;

    fn mem_alloc(&self, bytes: u64) -> Result<DevicePtr>;
    /// # Safety
    /// `ptr` came from [`Driver::mem_alloc`] or [`Driver::mem_alloc_managed`], is freed once,
    /// and no copy into or out of it is still in flight.
    unsafe fn mem_free(&self, ptr: DevicePtr) -> Result<()>;
    /// A stream-ordered pool of device memory on the remembered device (`cuMemPoolCreate`:
    /// pinned allocations located on that device).
    fn mem_pool_create(&self) -> Result<MemPool>;
    /// `cuMemPoolSetAttribute(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)`: bytes of freed memory the
    /// pool keeps mapped instead of releasing at the next synchronization.
    /// # Safety
    /// `pool` is live.
    unsafe fn mem_pool_set_release_threshold(&self, pool: MemPool, bytes: u64) -> Result<()>;
    /// # Safety
    /// `pool` is live and destroyed once (allocations still out are released when freed).
    unsafe fn mem_pool_destroy(&self, pool: MemPool) -> Result<()>;
    /// `cuMemAllocFromPoolAsync`: usable by work on `stream` issued after this call (and by
    /// anything once `stream` was synchronized).
    /// # Safety
    /// `pool` and `stream` are live.
    unsafe fn mem_alloc_from_pool_async(
        &self,
        bytes: u64,
        pool: MemPool,
        stream: Stream,
    ) -> Result<DevicePtr>;
    /// `cuMemFreeAsync`: back to its pool once `stream` reaches this point.
    /// # Safety
    /// `ptr` came from [`Driver::mem_alloc_from_pool_async`], is freed once, and no work
    /// touching it is in flight on another stream.
    unsafe fn mem_free_async(&self, ptr: DevicePtr, stream: Stream) -> Result<()>;
    /// Managed memory (`CU_MEM_ATTACH_GLOBAL`); the returned address is valid on the host too.
    fn mem_alloc_managed(&self, bytes: u64) -> Result<DevicePtr>;
    /// # Safety
    /// `ptr..ptr+bytes` is managed memory from this driver; `stream` is live.
    unsafe fn mem_prefetch_to_device(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: Stream,
    ) -> Result<()>;

    /// Page-locked host memory (`cuMemHostAlloc`, flags 0).
    fn host_alloc_pinned(&self, bytes: u64) -> Result<*mut u8>;
    /// # Safety
    /// `ptr` came from [`Driver::host_alloc_pinned`], is freed once, with no copy in flight.
    unsafe fn host_free_pinned(&self, ptr: *mut u8) -> Result<()>;
    /// Page-locks existing host memory (`cuMemHostRegister_v2`, flags 0).
    /// # Safety
    /// `ptr..ptr+bytes` is mapped, page-aligned memory of the caller's that stays mapped until
    /// [`Driver::host_unregister`].
    unsafe fn host_register(&self, ptr: *mut u8, bytes: u64) -> Result<()>;
    /// # Safety
    /// `ptr` was registered with [`Driver::host_register`], once, with no copy in flight.
    unsafe fn host_unregister(&self, ptr: *mut u8) -> Result<()>;

    /// Synchronous host-to-device copy (pageable or pinned source).
    /// # Safety
    /// `dst..dst+src.len()` lies inside one live device allocation.
    unsafe fn memcpy_htod(&self, dst: DevicePtr, src: &[u8]) -> Result<()>;
    /// Asynchronous host-to-device copy on `stream`.
    /// # Safety
    /// As [`Driver::memcpy_htod`]; besides, `src..src+len` stays valid and unmodified until the
    /// stream (or an event recorded after this copy) has been synchronized.
    unsafe fn memcpy_htod_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
        stream: Stream,
    ) -> Result<()>;
    /// Synchronous device-to-host copy.
    /// # Safety
    /// `src..src+dst.len()` lies inside one live device allocation.
    unsafe fn memcpy_dtoh(&self, dst: &mut [u8], src: DevicePtr) -> Result<()>;

    fn stream_create(&self) -> Result<Stream>;
    /// # Safety
    /// `stream` is live.
    unsafe fn stream_synchronize(&self, stream: Stream) -> Result<()>;
    /// # Safety
    /// `stream` is live and destroyed once.
    unsafe fn stream_destroy(&self, stream: Stream) -> Result<()>;

    fn event_create(&self) -> Result<Event>;
    /// # Safety
    /// `event` and `stream` are live.
    unsafe fn event_record(&self, event: Event, stream: Stream) -> Result<()>;
    /// # Safety
    /// `event` is live.
    unsafe fn event_synchronize(&self, event: Event) -> Result<()>;
    /// `cuEventQuery`: true when the event's work is complete, false for `CUDA_ERROR_NOT_READY`.
    /// # Safety
    /// `event` is live.
    unsafe fn event_query(&self, event: Event) -> Result<bool>;
    /// # Safety
    /// `event` is live and destroyed once.
    unsafe fn event_destroy(&self, event: Event) -> Result<()>;
}

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
