//! The CUDA backend: libcuda through cudarc's thin `result` layer (and `sys` where `result` has
//! no wrapper), so each method is exactly one driver call and the breadcrumbs name it.
//!
//! cudarc loads libcuda lazily and panics when it is missing or lacks a symbol. [`CudaDriver::load`]
//! checks both first and returns [`Error::NoDriver`] instead.

use std::cell::Cell;

use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys;

use crate::call_table::CallKind;
use crate::driver::{DeviceAttribute, DevicePtr, Driver, Event, MemPool, Stream};
use crate::error::{Error, Result};

/// The CUDA driver on one device. Not `Send`: the context is current on the thread that
/// called [`Driver::ctx_set_current`], and every call must come from that thread.
#[derive(Debug)]
pub struct CudaDriver {
    device: Cell<Option<sys::CUdevice>>,
    context: Cell<sys::CUcontext>,
}

fn fail(call: CallKind, e: DriverError) -> Error {
    let name = e
        .error_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0));
    Error::Driver {
        call,
        code: e.0 as i32,
        name,
    }
}

/// Symbols the backend needs, checked before cudarc can panic on a missing one: every call of
/// the driver-call table, and `cuGetErrorName` (which [`fail`] uses to name an error).
fn required_symbols() -> impl Iterator<Item = &'static str> {
    std::iter::once("cuGetErrorName").chain(CallKind::ALL.iter().map(|call| call.cuda_name()))
}

impl CudaDriver {
    /// Finds libcuda and every symbol we call, without initialising anything.
    pub fn load() -> Result<CudaDriver> {
        // SAFETY: only tries to dlopen cudarc's candidate library names (libcuda.so, .so.1, …);
        // loading the NVIDIA driver library runs its initialisers, which is what using it means.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::NoDriver(
                "libcuda (the NVIDIA driver library) was not found: no NVIDIA driver is installed \
                 here, or libcuda.so.1 is not on the loader path (ldconfig, LD_LIBRARY_PATH). \
                 Use --backend host to run without a GPU."
                    .into(),
            ));
        }
        // SAFETY: the library is present (checked just above), so `culib` loads it instead of
        // panicking; it is kept loaded for the life of the process.
        let lib = unsafe { sys::culib() };
        for name in required_symbols() {
            // SAFETY: we only look the symbol up; it is never called through this type.
            let found = unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_ok();
            if !found {
                return Err(Error::NoDriver(format!(
                    "libcuda lacks {name}: the NVIDIA driver is too old (CUDA 12.2 or newer needed)"
                )));
            }
        }
        Ok(CudaDriver {
            device: Cell::new(None),
            context: Cell::new(std::ptr::null_mut()),
        })
    }

    fn device(&self, call: CallKind) -> Result<sys::CUdevice> {
        self.device.get().ok_or(Error::Driver {
            call,
            code: sys::CUresult::CUDA_ERROR_NOT_INITIALIZED as i32,
            name: "CUDA_ERROR_NOT_INITIALIZED".into(),
        })
    }

    fn stream(s: Stream) -> sys::CUstream {
        s.0 as usize as sys::CUstream
    }

    fn event(e: Event) -> sys::CUevent {
        e.0 as usize as sys::CUevent
    }

    fn pool(p: MemPool) -> sys::CUmemoryPool {
        p.0 as usize as sys::CUmemoryPool
    }
}

impl Driver for CudaDriver {
    fn backend(&self) -> &'static str {
        "cuda"
    }

    fn init(&self) -> Result<()> {
        result::init().map_err(|e| fail(CallKind::Init, e))
    }

    fn device_get(&self, ordinal: i32) -> Result<()> {
        let dev = result::device::get(ordinal).map_err(|e| fail(CallKind::DeviceGet, e))?;
        self.device.set(Some(dev));
        Ok(())
    }

    fn primary_ctx_retain(&self) -> Result<()> {
        let dev = self.device(CallKind::PrimaryCtxRetain)?;
        // SAFETY: `dev` was returned by cuDeviceGet.
        let ctx = unsafe { result::primary_ctx::retain(dev) }
            .map_err(|e| fail(CallKind::PrimaryCtxRetain, e))?;
        self.context.set(ctx);
        Ok(())
    }

    fn ctx_set_current(&self) -> Result<()> {
        // SAFETY: the context was retained by `primary_ctx_retain` (or is null, which the
        // driver rejects or treats as "no context").
        unsafe { result::ctx::set_current(self.context.get()) }
            .map_err(|e| fail(CallKind::CtxSetCurrent, e))
    }

    fn primary_ctx_release(&self) -> Result<()> {
        let dev = self.device(CallKind::PrimaryCtxRelease)?;
        // SAFETY: `dev` was returned by cuDeviceGet and its primary context retained once.
        unsafe { result::primary_ctx::release(dev) }
            .map_err(|e| fail(CallKind::PrimaryCtxRelease, e))?;
        self.context.set(std::ptr::null_mut());
        Ok(())
    }

    fn ctx_synchronize(&self) -> Result<()> {
        result::ctx::synchronize().map_err(|e| fail(CallKind::CtxSynchronize, e))
    }

    fn device_attribute(&self, attribute: DeviceAttribute) -> Result<i32> {
        let dev = self.device(CallKind::DeviceGetAttribute)?;
        let attr = match attribute {
            DeviceAttribute::ConcurrentManagedAccess => {
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS
            }
            DeviceAttribute::PageableMemoryAccess => {
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS
            }
            DeviceAttribute::MemoryPoolsSupported => {
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED
            }
            DeviceAttribute::ReadOnlyHostRegisterSupported => {
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED
            }
        };
        // SAFETY: `dev` was returned by cuDeviceGet.
        unsafe { result::device::get_attribute(dev, attr) }
            .map_err(|e| fail(CallKind::DeviceGetAttribute, e))
    }

    fn mem_get_info(&self) -> Result<(u64, u64)> {
        let (free, total) = result::mem_get_info().map_err(|e| fail(CallKind::MemGetInfo, e))?;
        Ok((free as u64, total as u64))
    }

    fn mem_alloc(&self, bytes: u64) -> Result<DevicePtr> {
        // SAFETY: plain allocation; the memory is uninitialised device memory we only copy into.
        unsafe { result::malloc_sync(bytes as usize) }.map_err(|e| fail(CallKind::MemAlloc, e))
    }

    unsafe fn mem_free(&self, ptr: DevicePtr) -> Result<()> {
        // SAFETY: the caller's contract: `ptr` is a live allocation of ours, freed once.
        unsafe { result::free_sync(ptr) }.map_err(|e| fail(CallKind::MemFree, e))
    }

    fn mem_pool_create(&self) -> Result<MemPool> {
        let dev = self.device(CallKind::MemPoolCreate)?;
        let props = sys::CUmemPoolProps {
            allocType: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
            handleTypes: sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE,
            location: sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                id: dev,
            },
            win32SecurityAttributes: std::ptr::null_mut(),
            maxSize: 0,
            usage: 0,
            reserved: [0; 54],
        };
        // SAFETY: `props` is a valid, fully initialised CUmemPoolProps for the current device.
        unsafe { result::mem_pool::create(&props) }
            .map(|p| MemPool(p as usize as u64))
            .map_err(|e| fail(CallKind::MemPoolCreate, e))
    }

    unsafe fn mem_pool_set_release_threshold(&self, pool: MemPool, bytes: u64) -> Result<()> {
        let mut value: u64 = bytes;
        // SAFETY: the caller's contract: a live pool; the release threshold is a cuuint64_t,
        // which `value` is, and the driver only reads it during the call.
        unsafe {
            result::mem_pool::set_attribute(
                Self::pool(pool),
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&raw mut value).cast(),
            )
        }
        .map_err(|e| fail(CallKind::MemPoolSetAttribute, e))
    }

    unsafe fn mem_pool_destroy(&self, pool: MemPool) -> Result<()> {
        // SAFETY: the caller's contract: a live pool, destroyed once.
        unsafe { result::mem_pool::destroy(Self::pool(pool)) }
            .map_err(|e| fail(CallKind::MemPoolDestroy, e))
    }

    unsafe fn mem_alloc_from_pool_async(
        &self,
        bytes: u64,
        pool: MemPool,
        stream: Stream,
    ) -> Result<DevicePtr> {
        // SAFETY: the caller's contract: live pool and stream; the memory is uninitialised
        // device memory we only copy into, after this call on the same stream.
        unsafe {
            result::mem_pool::alloc_async(Self::pool(pool), bytes as usize, Self::stream(stream))
        }
        .map_err(|e| fail(CallKind::MemAllocFromPoolAsync, e))
    }

    unsafe fn mem_free_async(&self, ptr: DevicePtr, stream: Stream) -> Result<()> {
        // SAFETY: the caller's contract: a live pool allocation of ours, freed once, nothing
        // in flight on another stream.
        unsafe { result::free_async(ptr, Self::stream(stream)) }
            .map_err(|e| fail(CallKind::MemFreeAsync, e))
    }

    fn mem_alloc_managed(&self, bytes: u64) -> Result<DevicePtr> {
        // SAFETY: plain managed allocation, attached globally; contents are written before use.
        unsafe {
            result::malloc_managed(bytes as usize, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL)
        }
        .map_err(|e| fail(CallKind::MemAllocManaged, e))
    }

    unsafe fn mem_prefetch_to_device(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: Stream,
    ) -> Result<()> {
        let dev = self.device(CallKind::MemPrefetchAsync)?;
        let location = sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: dev,
        };
        // SAFETY: the caller's contract: a managed range of ours and a live stream.
        unsafe { result::mem_prefetch_async(ptr, bytes as usize, location, Self::stream(stream)) }
            .map_err(|e| fail(CallKind::MemPrefetchAsync, e))
    }

    fn host_alloc_pinned(&self, bytes: u64) -> Result<*mut u8> {
        // SAFETY: plain page-locked allocation (flags 0); the contents are written before use.
        unsafe { result::malloc_host(bytes as usize, 0) }
            .map(|p| p.cast::<u8>())
            .map_err(|e| fail(CallKind::MemHostAlloc, e))
    }

    unsafe fn host_free_pinned(&self, ptr: *mut u8) -> Result<()> {
        // SAFETY: the caller's contract: `ptr` came from cuMemHostAlloc, freed once.
        unsafe { result::free_host(ptr.cast()) }.map_err(|e| fail(CallKind::MemFreeHost, e))
    }

    unsafe fn host_register(&self, ptr: *mut u8, bytes: u64, read_only: bool) -> Result<()> {
        // Portable/device-mapped are not needed for copies. Read-only pages are pinned without
        // write access, so unlocking them need not mark each one dirty: on an H200 host
        // cuMemHostUnregister of 24 MiB took 0.25 ms against 0.52 ms (BENCHMARKS.md).
        let flags = if read_only {
            sys::CU_MEMHOSTREGISTER_READ_ONLY
        } else {
            0
        };
        // SAFETY: the caller's contract: a mapped range of its own that outlives the
        // registration, and with `read_only` never written by the device.
        unsafe { sys::cuMemHostRegister_v2(ptr.cast(), bytes as usize, flags) }
            .result()
            .map_err(|e| fail(CallKind::MemHostRegister, e))
    }

    unsafe fn host_unregister(&self, ptr: *mut u8) -> Result<()> {
        // SAFETY: the caller's contract: `ptr` was registered once and nothing copies from it.
        unsafe { sys::cuMemHostUnregister(ptr.cast()) }
            .result()
            .map_err(|e| fail(CallKind::MemHostUnregister, e))
    }

    unsafe fn memcpy_htod(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        // SAFETY: the caller's contract: the destination range is inside a live allocation.
        unsafe { result::memcpy_htod_sync(dst, src) }.map_err(|e| fail(CallKind::MemcpyHtoD, e))
    }

    unsafe fn memcpy_htod_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
        stream: Stream,
    ) -> Result<()> {
        // SAFETY: the caller's contract: both ranges are live, and `src` stays untouched until
        // the stream or a later event is synchronized.
        unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), len, Self::stream(stream)) }
            .result()
            .map_err(|e| fail(CallKind::MemcpyHtoDAsync, e))
    }

    unsafe fn memcpy_dtoh(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        // SAFETY: the caller's contract: the source range is inside a live allocation.
        unsafe { result::memcpy_dtoh_sync(dst, src) }.map_err(|e| fail(CallKind::MemcpyDtoH, e))
    }

    fn stream_create(&self) -> Result<Stream> {
        result::stream::create(result::stream::StreamKind::NonBlocking)
            .map(|s| Stream(s as usize as u64))
            .map_err(|e| fail(CallKind::StreamCreate, e))
    }

    unsafe fn stream_synchronize(&self, stream: Stream) -> Result<()> {
        // SAFETY: the caller's contract: a live stream.
        unsafe { result::stream::synchronize(Self::stream(stream)) }
            .map_err(|e| fail(CallKind::StreamSynchronize, e))
    }

    unsafe fn stream_destroy(&self, stream: Stream) -> Result<()> {
        // SAFETY: the caller's contract: a live stream, destroyed once.
        unsafe { result::stream::destroy(Self::stream(stream)) }
            .map_err(|e| fail(CallKind::StreamDestroy, e))
    }

    fn event_create(&self) -> Result<Event> {
        result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
            .map(|e| Event(e as usize as u64))
            .map_err(|e| fail(CallKind::EventCreate, e))
    }

    unsafe fn event_record(&self, event: Event, stream: Stream) -> Result<()> {
        // SAFETY: the caller's contract: live event and stream.
        unsafe { result::event::record(Self::event(event), Self::stream(stream)) }
            .map_err(|e| fail(CallKind::EventRecord, e))
    }

    unsafe fn event_synchronize(&self, event: Event) -> Result<()> {
        // SAFETY: the caller's contract: a live event.
        unsafe { result::event::synchronize(Self::event(event)) }
            .map_err(|e| fail(CallKind::EventSynchronize, e))
    }

    unsafe fn event_query(&self, event: Event) -> Result<bool> {
        // SAFETY: the caller's contract: a live event.
        match unsafe { sys::cuEventQuery(Self::event(event)) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            other => Err(fail(CallKind::EventQuery, DriverError(other))),
        }
    }

    unsafe fn event_destroy(&self, event: Event) -> Result<()> {
        // SAFETY: the caller's contract: a live event, destroyed once.
        unsafe { result::event::destroy(Self::event(event)) }
            .map_err(|e| fail(CallKind::EventDestroy, e))
    }
}
