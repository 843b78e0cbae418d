//! The one table of the uploader's driver calls (`for_each_driver_call!`) and [`CallKind`],
//! generated from it. The [`crate::driver::Driver`] trait and [`crate::trace::Traced`]'s
//! breadcrumbed wrappers are generated from the same table in their own modules.

use breadcrumb::Call;
use serde::Serialize;

/// The one list of the uploader's driver calls. Adding a call is one entry here, plus its real
/// implementation in [`crate::cuda::CudaDriver`] and [`crate::host::HostDriver`]; [`CallKind`],
/// the [`Driver`] trait, the CUDA backend's required-symbol list and the breadcrumbed wrappers
/// of [`crate::trace::Traced`] are all generated from it.
///
/// An entry reads:
/// `[unsafe?] Kind("libcuda symbol", BreadcrumbCall) vis fn method(driver args) -> T
///  [breadcrumb-only args] { breadcrumb field: value, … };`
/// - the breadcrumb call (a [`breadcrumb::Call`] variant) fixes the id written in the
///   ring, a contract with `wedge_breadcrumb.h` and docs/breadcrumb-ring.md;
/// - `vis` is the visibility of the [`crate::trace::Traced`] wrapper, which takes a
///   [`crate::trace::Site`] first, then the driver args, then the breadcrumb-only args;
/// - the `{ … }` block says what the breadcrumb's `bytes`/`ptr`/`ptr2`/`stream` record;
/// - the doc comment (with its `# Safety` section for an unsafe call) documents both the
///   trait method and its traced wrapper, which forwards the same contract.
///
/// It hands the list to the macro `$then` (one per consumer: this module and `trace`).
macro_rules! for_each_driver_call {
    ($then:ident) => {
        $then! {
            /// `cuInit(0)`.
            [] Init("cuInit", CuInit) fn init() [] {};
            /// `cuDeviceGet(ordinal)`; the driver remembers the device.
            [] DeviceGet("cuDeviceGet", CuDeviceGet) fn device_get(ordinal: i32) [] {};
            /// `cuDevicePrimaryCtxRetain` on the remembered device.
            [] PrimaryCtxRetain("cuDevicePrimaryCtxRetain", CuDevicePrimaryCtxRetain)
                fn primary_ctx_retain() [] {};
            /// `cuCtxSetCurrent` with the retained primary context, on the calling thread.
            [] CtxSetCurrent("cuCtxSetCurrent", CuCtxSetCurrent) fn ctx_set_current() [] {};
            /// `cuDevicePrimaryCtxRelease`.
            [] PrimaryCtxRelease("cuDevicePrimaryCtxRelease_v2", CuDevicePrimaryCtxRelease_v2)
                fn primary_ctx_release() [] {};
            /// `cuCtxSynchronize`.
            [] CtxSynchronize("cuCtxSynchronize", CuCtxSynchronize)
                pub fn ctx_synchronize() [] {};
            /// `cuDeviceGetAttribute` on the remembered device.
            [] DeviceGetAttribute("cuDeviceGetAttribute", CuDeviceGetAttribute)
                pub fn device_attribute(attribute: DeviceAttribute) -> i32 [] {};
            /// `(free, total)` device memory in bytes.
            [] MemGetInfo("cuMemGetInfo_v2", CuMemGetInfo_v2)
                pub fn mem_get_info() -> (u64, u64) [] {};
            /// `cuMemAlloc`: uninitialised device memory.
            [] MemAlloc("cuMemAlloc_v2", CuMemAlloc_v2)
                pub fn mem_alloc(bytes: u64) -> DevicePtr [] { bytes: bytes };
            /// # Safety
            /// `ptr` came from [`Driver::mem_alloc`] or [`Driver::mem_alloc_managed`], is freed
            /// once, and no copy into or out of it is still in flight.
            [unsafe] MemFree("cuMemFree_v2", CuMemFree_v2)
                pub fn mem_free(ptr: DevicePtr) [bytes: u64] { bytes: bytes, ptr: ptr };
            /// A stream-ordered pool of device memory on the remembered device
            /// (`cuMemPoolCreate`: pinned allocations located on that device).
            [] MemPoolCreate("cuMemPoolCreate", CuMemPoolCreate)
                fn mem_pool_create() -> MemPool [] {};
            /// `cuMemPoolSetAttribute(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)`: bytes of freed memory
            /// the pool keeps mapped instead of releasing at the next synchronization.
            /// # Safety
            /// `pool` is live.
            [unsafe] MemPoolSetAttribute("cuMemPoolSetAttribute", CuMemPoolSetAttribute)
                fn mem_pool_set_release_threshold(pool: MemPool, bytes: u64) []
                { bytes: bytes, ptr: pool.0 };
            /// `cuMemPoolDestroy`.
            /// # Safety
            /// `pool` is live and destroyed once (allocations still out are released when
            /// freed).
            [unsafe] MemPoolDestroy("cuMemPoolDestroy", CuMemPoolDestroy)
                fn mem_pool_destroy(pool: MemPool) [] { ptr: pool.0 };
            /// `cuMemAllocFromPoolAsync`: usable by work on `stream` issued after this call (and
            /// by anything once `stream` was synchronized).
            /// # Safety
            /// `pool` and `stream` are live.
            [unsafe] MemAllocFromPoolAsync("cuMemAllocFromPoolAsync", CuMemAllocFromPoolAsync)
                pub fn mem_alloc_from_pool_async(bytes: u64, pool: MemPool, stream: Stream)
                -> DevicePtr [] { bytes: bytes, ptr2: pool.0, stream: stream.0 };
            /// `cuMemFreeAsync`: back to its pool once `stream` reaches this point.
            /// # Safety
            /// `ptr` came from [`Driver::mem_alloc_from_pool_async`], is freed once, and no work
            /// touching it is in flight on another stream.
            [unsafe] MemFreeAsync("cuMemFreeAsync", CuMemFreeAsync)
                pub fn mem_free_async(ptr: DevicePtr, stream: Stream) [bytes: u64]
                { bytes: bytes, ptr: ptr, stream: stream.0 };
            /// Managed memory (`CU_MEM_ATTACH_GLOBAL`); the returned address is valid on the
            /// host too.
            [] MemAllocManaged("cuMemAllocManaged", CuMemAllocManaged)
                pub fn mem_alloc_managed(bytes: u64) -> DevicePtr [] { bytes: bytes };
            /// `cuMemPrefetchAsync` to the remembered device.
            /// # Safety
            /// `ptr..ptr+bytes` is managed memory from this driver; `stream` is live.
            [unsafe] MemPrefetchAsync("cuMemPrefetchAsync_v2", CuMemPrefetchAsync)
                pub fn mem_prefetch_to_device(ptr: DevicePtr, bytes: u64, stream: Stream) []
                { bytes: bytes, ptr: ptr, stream: stream.0 };
            /// Page-locked host memory (`cuMemHostAlloc`, flags 0).
            [] MemHostAlloc("cuMemHostAlloc", CuMemHostAlloc)
                pub fn host_alloc_pinned(bytes: u64) -> *mut u8 [] { bytes: bytes };
            /// `cuMemFreeHost`.
            /// # Safety
            /// `ptr` came from [`Driver::host_alloc_pinned`], is freed once, with no copy in
            /// flight.
            [unsafe] MemFreeHost("cuMemFreeHost", CuMemFreeHost)
                pub fn host_free_pinned(ptr: *mut u8) [bytes: u64]
                { bytes: bytes, ptr: ptr as u64 };
            /// Page-locks existing host memory (`cuMemHostRegister_v2`): flags 0, or
            /// `CU_MEMHOSTREGISTER_READ_ONLY` when `read_only` (the device only reads it; only
            /// where [`DeviceAttribute::ReadOnlyHostRegisterSupported`] is non-zero).
            /// # Safety
            /// `ptr..ptr+bytes` is mapped, page-aligned memory of the caller's that stays mapped
            /// until [`Driver::host_unregister`]; with `read_only`, nothing on the device writes it.
            [unsafe] MemHostRegister("cuMemHostRegister_v2", CuMemHostRegister_v2)
                pub fn host_register(ptr: *mut u8, bytes: u64, read_only: bool) []
                { bytes: bytes, ptr: ptr as u64 };
            /// `cuMemHostUnregister`.
            /// # Safety
            /// `ptr` was registered with [`Driver::host_register`], once, with no copy in flight.
            [unsafe] MemHostUnregister("cuMemHostUnregister", CuMemHostUnregister)
                pub fn host_unregister(ptr: *mut u8) [bytes: u64]
                { bytes: bytes, ptr: ptr as u64 };
            /// Synchronous host-to-device copy (pageable or pinned source).
            /// # Safety
            /// `dst..dst+src.len()` lies inside one live device allocation.
            [unsafe] MemcpyHtoD("cuMemcpyHtoD_v2", CuMemcpyHtoD_v2)
                pub fn memcpy_htod(dst: DevicePtr, src: &[u8]) []
                { bytes: src.len() as u64, ptr: dst, ptr2: src.as_ptr() as u64 };
            /// Asynchronous host-to-device copy on `stream`.
            /// # Safety
            /// As [`Driver::memcpy_htod`]; besides, `src..src+len` stays valid and unmodified
            /// until the stream (or an event recorded after this copy) has been synchronized.
            [unsafe] MemcpyHtoDAsync("cuMemcpyHtoDAsync_v2", CuMemcpyHtoDAsync_v2)
                pub fn memcpy_htod_async(dst: DevicePtr, src: *const u8, len: usize, stream: Stream)
                [] { bytes: len as u64, ptr: dst, ptr2: src as u64, stream: stream.0 };
            /// Synchronous device-to-host copy.
            /// # Safety
            /// `src..src+dst.len()` lies inside one live device allocation.
            [unsafe] MemcpyDtoH("cuMemcpyDtoH_v2", CuMemcpyDtoH_v2)
                pub fn memcpy_dtoh(dst: &mut [u8], src: DevicePtr) []
                { bytes: dst.len() as u64, ptr: dst.as_ptr() as u64, ptr2: src };
            /// `cuStreamCreate` (non-blocking).
            [] StreamCreate("cuStreamCreate", CuStreamCreate)
                pub fn stream_create() -> Stream [] {};
            /// `cuStreamSynchronize`.
            /// # Safety
            /// `stream` is live.
            [unsafe] StreamSynchronize("cuStreamSynchronize", CuStreamSynchronize)
                pub fn stream_synchronize(stream: Stream) [] { stream: stream.0 };
            /// `cuStreamDestroy`.
            /// # Safety
            /// `stream` is live and destroyed once.
            [unsafe] StreamDestroy("cuStreamDestroy_v2", CuStreamDestroy_v2)
                pub fn stream_destroy(stream: Stream) [] { stream: stream.0 };
            /// `cuEventCreate` (timing disabled).
            [] EventCreate("cuEventCreate", CuEventCreate) pub fn event_create() -> Event [] {};
            /// `cuEventRecord`.
            /// # Safety
            /// `event` and `stream` are live.
            [unsafe] EventRecord("cuEventRecord", CuEventRecord)
                pub fn event_record(event: Event, stream: Stream) []
                { ptr: event.0, stream: stream.0 };
            /// `cuEventSynchronize`.
            /// # Safety
            /// `event` is live.
            [unsafe] EventSynchronize("cuEventSynchronize", CuEventSynchronize)
                pub fn event_synchronize(event: Event) [] { ptr: event.0 };
            /// `cuEventQuery`: true when the event's work is complete, false for
            /// `CUDA_ERROR_NOT_READY`.
            /// # Safety
            /// `event` is live.
            [unsafe] EventQuery("cuEventQuery", CuEventQuery)
                pub fn event_query(event: Event) -> bool [] { ptr: event.0 };
            /// `cuEventDestroy`.
            /// # Safety
            /// `event` is live and destroyed once.
            [unsafe] EventDestroy("cuEventDestroy_v2", CuEventDestroy_v2)
                pub fn event_destroy(event: Event) [] { ptr: event.0 };
        }
    };
}
pub(crate) use for_each_driver_call;

/// `T` of a table entry's `-> T`, `()` where it has none.
macro_rules! returns {
    () => {
        ()
    };
    ($ret:ty) => {
        $ret
    };
}
pub(crate) use returns;

/// [`CallKind`] and its names, from [`for_each_driver_call`].
macro_rules! define_call_kind {
    ($($(#[$doc:meta])* [$($unsafety:tt)?] $kind:ident($cuda:literal, $crumb:ident)
        $vis:vis fn $method:ident $args:tt $(-> $ret:ty)? [$($extra:tt)*] {$($field:tt)*};)*) => {
        /// Every driver call the uploader can make. The breadcrumb records carry the CUDA name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        pub enum CallKind {
            $($kind,)*
        }

        impl CallKind {
            /// Every call, in table order (which is also `kind as usize`).
            pub const ALL: [CallKind; [$(stringify!($kind)),*].len()] = [$(CallKind::$kind,)*];

            /// The driver API symbol the CUDA backend calls (what a breadcrumb names).
            pub const fn cuda_name(self) -> &'static str {
                match self {
                    $(CallKind::$kind => $cuda,)*
                }
            }

            /// The breadcrumb call id written in the ring for this call.
            pub const fn breadcrumb(self) -> Call {
                match self {
                    $(CallKind::$kind => Call::$crumb,)*
                }
            }
        }

    };
}

for_each_driver_call!(define_call_kind);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_kinds_index_their_own_slot_and_name_distinct_symbols() {
        // HostDriver counts calls in `[_; ALL.len()]` indexed by `kind as usize`.
        for (i, kind) in CallKind::ALL.iter().enumerate() {
            assert_eq!(*kind as usize, i, "{kind:?}");
        }
        let mut names: Vec<_> = CallKind::ALL.iter().map(|k| k.cuda_name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CallKind::ALL.len());
    }

    #[test]
    fn breadcrumb_ids_are_the_ring_format_contract() {
        // The ids written in the ring (docs/breadcrumb-ring.md, wedge_breadcrumb.h), in table
        // order: a table edit that remaps a call fails here.
        let ids: Vec<u16> = CallKind::ALL
            .iter()
            .map(|k| k.breadcrumb() as u16)
            .collect();
        let expected: Vec<u16> = CallKind::ALL
            .iter()
            .map(|k| {
                // Every call's ring name is its libcuda symbol, except the prefetch whose ring
                // name predates the `_v2` entry point.
                let ring_name = match k.cuda_name() {
                    "cuMemPrefetchAsync_v2" => "cuMemPrefetchAsync",
                    name => name,
                };
                Call::from_name(ring_name).unwrap_or_else(|| panic!("{ring_name}")) as u16
            })
            .collect();
        assert_eq!(ids, expected);
        assert_eq!(CallKind::Init.breadcrumb() as u16, 1);
        assert_eq!(CallKind::MemPrefetchAsync.breadcrumb() as u16, 24);
        assert_eq!(CallKind::EventDestroy.breadcrumb() as u16, 34);
    }
}
