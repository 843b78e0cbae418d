//! [`Traced`]: the one door to the driver. Each method makes exactly one driver call and, when a
//! breadcrumb ring is attached, writes an `enter` record before it and an `exit` record (with
//! the driver's result code) after it. Without a ring the cost is one branch.

use std::cell::Cell;
use std::fmt::Write as _;
use std::rc::Rc;

use wedge_breadcrumb::{Args, Call, Writer};

use crate::driver::{CallKind, DeviceAttribute, DevicePtr, Driver, Event, MemPool, Stream};
use crate::error::{Error, Result};
use crate::plan::Plan;

/// Where in the upload a call is made: what the breadcrumb's chunk fields and label say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Site {
    /// "chunk", "slice", "setup", "verify", …; the label reads `<unit> <index+1>/<count>`.
    pub unit: &'static str,
    /// 0-based index of the unit (the label shows it 1-based).
    pub index: u32,
    /// Number of units; 0 means "not numbered" (the label is the unit alone).
    pub count: u32,
    /// Plan chunk (0-based) and chunk count recorded in the breadcrumb's args.
    pub chunk: u32,
    pub chunk_count: u32,
    /// Tensor range (input indices) the call works on.
    pub tensor_first: u32,
    pub tensor_count: u32,
}

impl Site {
    /// A call outside any chunk (context, stream and event setup, teardown).
    pub const fn plain(unit: &'static str) -> Site {
        Site {
            unit,
            index: 0,
            count: 0,
            chunk: 0,
            chunk_count: 0,
            tensor_first: 0,
            tensor_count: 0,
        }
    }

    /// Chunk `index` of `plan`.
    pub fn chunk(plan: &Plan, index: usize) -> Site {
        let chunk = &plan.chunks[index];
        let first = plan.placements.get(chunk.first).map_or(0, |p| p.tensor);
        let last = plan
            .placements
            .get(chunk.first + chunk.count.saturating_sub(1))
            .map_or(0, |p| p.tensor);
        Site {
            unit: "chunk",
            index: index as u32,
            count: plan.chunks.len() as u32,
            chunk: index as u32,
            chunk_count: plan.chunks.len() as u32,
            tensor_first: sat_u32(first),
            tensor_count: sat_u32(last + 1 - first),
        }
    }
}

pub(crate) fn sat_u32(v: usize) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// A label built on the stack (breadcrumb labels hold 40 bytes); longer text is cut.
struct Label {
    buf: [u8; 48],
    len: usize,
}

impl Label {
    fn new() -> Label {
        Label {
            buf: [0; 48],
            len: 0,
        }
    }

    fn as_str(&self) -> &str {
        // Only whole `&str`s are appended (see `write_str`), so this never fails.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl std::fmt::Write for Label {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let room = self.buf.len() - self.len;
        if s.len() > room {
            return Err(std::fmt::Error);
        }
        self.buf[self.len..self.len + s.len()].copy_from_slice(s.as_bytes());
        self.len += s.len();
        Ok(())
    }
}

/// The breadcrumb call id for one of our calls.
pub fn breadcrumb_call(kind: CallKind) -> Call {
    match kind {
        CallKind::Init => Call::CuInit,
        CallKind::DeviceGet => Call::CuDeviceGet,
        CallKind::PrimaryCtxRetain => Call::CuDevicePrimaryCtxRetain,
        CallKind::CtxSetCurrent => Call::CuCtxSetCurrent,
        CallKind::PrimaryCtxRelease => Call::CuDevicePrimaryCtxRelease_v2,
        CallKind::CtxSynchronize => Call::CuCtxSynchronize,
        CallKind::DeviceGetAttribute => Call::CuDeviceGetAttribute,
        CallKind::MemGetInfo => Call::CuMemGetInfo_v2,
        CallKind::MemAlloc => Call::CuMemAlloc_v2,
        CallKind::MemFree => Call::CuMemFree_v2,
        CallKind::MemPoolCreate => Call::CuMemPoolCreate,
        CallKind::MemPoolSetAttribute => Call::CuMemPoolSetAttribute,
        CallKind::MemPoolDestroy => Call::CuMemPoolDestroy,
        CallKind::MemAllocFromPoolAsync => Call::CuMemAllocFromPoolAsync,
        CallKind::MemFreeAsync => Call::CuMemFreeAsync,
        CallKind::MemAllocManaged => Call::CuMemAllocManaged,
        CallKind::MemPrefetchAsync => Call::CuMemPrefetchAsync,
        CallKind::MemHostAlloc => Call::CuMemHostAlloc,
        CallKind::MemFreeHost => Call::CuMemFreeHost,
        CallKind::MemHostRegister => Call::CuMemHostRegister_v2,
        CallKind::MemHostUnregister => Call::CuMemHostUnregister,
        CallKind::MemcpyHtoD => Call::CuMemcpyHtoD_v2,
        CallKind::MemcpyHtoDAsync => Call::CuMemcpyHtoDAsync_v2,
        CallKind::MemcpyDtoH => Call::CuMemcpyDtoH_v2,
        CallKind::StreamCreate => Call::CuStreamCreate,
        CallKind::StreamSynchronize => Call::CuStreamSynchronize,
        CallKind::StreamDestroy => Call::CuStreamDestroy_v2,
        CallKind::EventCreate => Call::CuEventCreate,
        CallKind::EventRecord => Call::CuEventRecord,
        CallKind::EventSynchronize => Call::CuEventSynchronize,
        CallKind::EventQuery => Call::CuEventQuery,
        CallKind::EventDestroy => Call::CuEventDestroy_v2,
    }
}

/// A driver with optional breadcrumbs around every call, and a call counter.
pub struct Traced<'a> {
    driver: &'a dyn Driver,
    ring: Option<&'a Writer>,
    calls: Cell<u64>,
    /// The session's arena pool, shared with every [`Traced::with_ring`] view.
    arena_pool: Rc<Cell<ArenaPool>>,
}

/// State of the session's stream-ordered pool for arenas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArenaPool {
    /// Not asked for yet.
    Unknown,
    /// The device has no memory pools: arenas come from `cuMemAlloc`.
    Unsupported,
    Live(MemPool),
}

impl std::fmt::Debug for Traced<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traced")
            .field("backend", &self.driver.backend())
            .field("ring", &self.ring.map(|r| r.path().to_path_buf()))
            .field("calls", &self.calls.get())
            .finish()
    }
}

/// Arguments recorded with a call besides its site.
#[derive(Default, Clone, Copy)]
struct CallArgs {
    bytes: u64,
    ptr: u64,
    ptr2: u64,
    stream: u64,
}

impl<'a> Traced<'a> {
    /// Wraps `driver` (whose context must already be current if `open` is not used).
    pub fn new(driver: &'a dyn Driver, ring: Option<&'a Writer>) -> Traced<'a> {
        Traced {
            driver,
            ring,
            calls: Cell::new(0),
            arena_pool: Rc::new(Cell::new(ArenaPool::Unknown)),
        }
    }

    /// Wraps `driver` and opens device `ordinal`: cuInit, cuDeviceGet, cuDevicePrimaryCtxRetain,
    /// cuCtxSetCurrent, each breadcrumbed. A failure of any of them is [`Error::NoDriver`].
    pub fn open(
        driver: &'a dyn Driver,
        ring: Option<&'a Writer>,
        ordinal: i32,
    ) -> Result<Traced<'a>> {
        let t = Traced::new(driver, ring);
        let site = Site::plain("open");
        let no_driver =
            |e: Error| Error::NoDriver(format!("cannot open CUDA device {ordinal}: {e}"));
        t.around(CallKind::Init, &site, CallArgs::default(), || driver.init())
            .map_err(no_driver)?;
        t.around(CallKind::DeviceGet, &site, CallArgs::default(), || {
            driver.device_get(ordinal)
        })
        .map_err(no_driver)?;
        t.around(
            CallKind::PrimaryCtxRetain,
            &site,
            CallArgs::default(),
            || driver.primary_ctx_retain(),
        )
        .map_err(no_driver)?;
        t.around(CallKind::CtxSetCurrent, &site, CallArgs::default(), || {
            driver.ctx_set_current()
        })
        .map_err(no_driver)?;
        Ok(t)
    }

    /// The same driver (and arena pool) with another ring (or none); the call counter starts
    /// at 0.
    pub fn with_ring(&self, ring: Option<&'a Writer>) -> Traced<'a> {
        Traced {
            arena_pool: Rc::clone(&self.arena_pool),
            ..Traced::new(self.driver, ring)
        }
    }

    /// The session's pool for device arenas, created on first use (`cuMemPoolCreate`) with a
    /// release threshold that keeps freed memory mapped, so the next arena reuses memory the
    /// GPU has already written instead of fresh `cuMemAlloc` memory (measured ~10 ms slower to
    /// fill per 4 GiB on an H200; BENCHMARKS.md). `None` where the device has no memory pools.
    pub fn arena_pool(&self, site: &Site) -> Result<Option<MemPool>> {
        match self.arena_pool.get() {
            ArenaPool::Live(pool) => return Ok(Some(pool)),
            ArenaPool::Unsupported => return Ok(None),
            ArenaPool::Unknown => {}
        }
        if self.device_attribute(site, DeviceAttribute::MemoryPoolsSupported)? == 0 {
            self.arena_pool.set(ArenaPool::Unsupported);
            return Ok(None);
        }
        let pool = self.around(CallKind::MemPoolCreate, site, CallArgs::default(), || {
            self.driver.mem_pool_create()
        })?;
        let a = CallArgs {
            bytes: u64::MAX,
            ptr: pool.0,
            ..CallArgs::default()
        };
        // SAFETY: the pool was just created.
        let kept = self.around(CallKind::MemPoolSetAttribute, site, a, || unsafe {
            self.driver.mem_pool_set_release_threshold(pool, u64::MAX)
        });
        if let Err(e) = kept {
            // SAFETY: our pool, nothing allocated from it, destroyed once.
            let _ = unsafe { self.destroy_pool(site, pool) };
            return Err(e);
        }
        self.arena_pool.set(ArenaPool::Live(pool));
        Ok(Some(pool))
    }

    /// # Safety
    /// `pool` is live and destroyed once.
    unsafe fn destroy_pool(&self, site: &Site, pool: MemPool) -> Result<()> {
        let a = CallArgs {
            ptr: pool.0,
            ..CallArgs::default()
        };
        // SAFETY: forwarded caller contract.
        self.around(CallKind::MemPoolDestroy, site, a, || unsafe {
            self.driver.mem_pool_destroy(pool)
        })
    }

    /// Destroys the session's arena pool if one was made (arenas still out stay valid until
    /// freed, then go back to the driver).
    pub fn release_arena_pool(&self) -> Result<()> {
        if let ArenaPool::Live(pool) = self.arena_pool.get() {
            self.arena_pool.set(ArenaPool::Unknown);
            // SAFETY: the live pool made by `arena_pool`, forgotten above so destroyed once.
            unsafe { self.destroy_pool(&Site::plain("close"), pool) }?;
        }
        Ok(())
    }

    /// Destroys the arena pool, then releases the primary context retained by
    /// [`Traced::open`].
    pub fn close(&self) -> Result<()> {
        let pool = self.release_arena_pool();
        let released = self.around(
            CallKind::PrimaryCtxRelease,
            &Site::plain("close"),
            CallArgs::default(),
            || self.driver.primary_ctx_release(),
        );
        pool.and(released)
    }

    pub fn backend(&self) -> &'static str {
        self.driver.backend()
    }

    pub fn ring(&self) -> Option<&'a Writer> {
        self.ring
    }

    /// Driver calls made through this wrapper so far.
    pub fn calls(&self) -> u64 {
        self.calls.get()
    }

    #[inline]
    fn around<T>(
        &self,
        kind: CallKind,
        site: &Site,
        a: CallArgs,
        call: impl FnOnce() -> Result<T>,
    ) -> Result<T> {
        self.calls.set(self.calls.get() + 1);
        let Some(ring) = self.ring else {
            return call();
        };
        let args = Args {
            bytes: a.bytes,
            ptr: a.ptr,
            ptr2: a.ptr2,
            stream: a.stream,
            chunk: site.chunk,
            chunk_count: site.chunk_count,
            tensor_first: site.tensor_first,
            tensor_count: site.tensor_count,
        };
        let mut label = Label::new();
        let _ = if site.count > 0 {
            write!(label, "{} {}/{}", site.unit, site.index + 1, site.count)
        } else {
            label.write_str(site.unit)
        };
        let token = ring.enter(breadcrumb_call(kind), &args, label.as_str());
        let result = call();
        ring.exit(
            token,
            match &result {
                Ok(_) => 0,
                Err(e) => e.result_code(),
            },
        );
        result
    }

    pub fn ctx_synchronize(&self, site: &Site) -> Result<()> {
        self.around(CallKind::CtxSynchronize, site, CallArgs::default(), || {
            self.driver.ctx_synchronize()
        })
    }

    pub fn device_attribute(&self, site: &Site, attribute: DeviceAttribute) -> Result<i32> {
        self.around(
            CallKind::DeviceGetAttribute,
            site,
            CallArgs::default(),
            || self.driver.device_attribute(attribute),
        )
    }

    pub fn mem_get_info(&self, site: &Site) -> Result<(u64, u64)> {
        self.around(CallKind::MemGetInfo, site, CallArgs::default(), || {
            self.driver.mem_get_info()
        })
    }

    pub fn mem_alloc(&self, site: &Site, bytes: u64) -> Result<DevicePtr> {
        let a = CallArgs {
            bytes,
            ..CallArgs::default()
        };
        self.around(CallKind::MemAlloc, site, a, || self.driver.mem_alloc(bytes))
    }

    /// # Safety
    /// See [`Driver::mem_free`].
    pub unsafe fn mem_free(&self, site: &Site, ptr: DevicePtr, bytes: u64) -> Result<()> {
        let a = CallArgs {
            bytes,
            ptr,
            ..CallArgs::default()
        };
        // SAFETY: forwarded caller contract.
        self.around(CallKind::MemFree, site, a, || unsafe {
            self.driver.mem_free(ptr)
        })
    }

    /// # Safety
    /// See [`Driver::mem_alloc_from_pool_async`].
    pub unsafe fn mem_alloc_from_pool_async(
        &self,
        site: &Site,
        bytes: u64,
        pool: MemPool,
        stream: Stream,
    ) -> Result<DevicePtr> {
        let a = CallArgs {
            bytes,
            ptr2: pool.0,
            stream: stream.0,
            ..CallArgs::default()
        };
        // SAFETY: forwarded caller contract.
        self.around(CallKind::MemAllocFromPoolAsync, site, a, || unsafe {
            self.driver.mem_alloc_from_pool_async(bytes, pool, stream)
        })
    }

    /// # Safety
    /// See [`Driver::mem_free_async`].
    pub unsafe fn mem_free_async(
        &self,
        site: &Site,
        ptr: DevicePtr,
        bytes: u64,
        stream: Stream,
    ) -> Result<()> {
        let a = CallArgs {
            bytes,
            ptr,
            stream: stream.0,
            ..CallArgs::default()
        };
        // SAFETY: forwarded caller contract.
        self.around(CallKind::MemFreeAsync, site, a, || unsafe {
            self.driver.mem_free_async(ptr, stream)
        })
    }

    pub fn mem_alloc_managed(&self, site: &Site, bytes: u64) -> Result<DevicePtr> {
        let a = CallArgs {
            bytes,
            ..CallArgs::default()
        };
        self.around(CallKind::MemAllocManaged, site, a, || {
            self.driver.mem_alloc_managed(bytes)
        })
    }

    /// # Safety
    /// See [`Driver::mem_prefetch_to_device`].
    pub unsafe fn mem_prefetch_to_device(
        &self,
        site: &Site,
        ptr: DevicePtr,
        bytes: u64,
        stream: Stream,
    ) -> Result<()> {
        let a = CallArgs {
            bytes,
            ptr,
            stream: stream.0,
            ..CallArgs::default()
        };
        // SAFETY: forwarded caller contract.
        self.around(CallKind::MemPrefetchAsync, site, a, || unsafe {
            self.driver.mem_prefetch_to_device(ptr, bytes, stream)
        })
    }

    pub fn host_alloc_pinned(&self, site: &Site, bytes: u64) -> Result<*mut u8> {
        let a = CallArgs {
            bytes,
            ..CallArgs::default()
        };
        self.around(CallKind::MemHostAlloc, site, a, || {
            self.driver.host_alloc_pinned(bytes)
        })
    }

    /// # Safety
    /// See [`Driver::host_free_pinned`].
    pub unsafe fn host_free_pinned(&self, site: &Site, ptr: *mut u8, bytes: u64) -> Result<()> {
        let a = CallArgs {
            bytes,
            ptr: ptr as u64,
            ..CallArgs::default()
        };
        // SAFETY: forwarded caller contract.
        self.around(CallKind::MemFreeHost, site, a, || unsafe {
            self.driver.host_free_pinned(ptr)
        })
    }

    /// # Safety
    /// See [`Driver::host_register`].
    pub unsafe fn host_register(&self, site: &Site, ptr: *mut u8, bytes: u64) -> Result<()> {
        let a = CallArgs {
            bytes,
            ptr: ptr as u64,
            ..CallArgs::default()
        };
        // SAFETY: forwarded caller contract.
        self.around(CallKind::MemHostRegister, site, a, || unsafe {
            self.driver.host_register(ptr, bytes)
        })
    }

    /// # Safety
    /// See [`Driver::host_unregister`].
    pub unsafe fn host_unregister(&self, site: &Site, ptr: *mut u8, bytes: u64) -> Result<()> {
        let a = CallArgs {
            bytes,
            ptr: ptr as u64,
            ..CallArgs::default()
        };
        // SAFETY: forwarded caller contract.
        self.around(CallKind::MemHostUnregister, site, a, || unsafe {
            self.driver.host_unregister(ptr)
        })
    }

    /// # Safety
    /// See [`Driver::memcpy_htod`].
    pub unsafe fn memcpy_htod(&self, site: &Site, dst: DevicePtr, src: &[u8]) -> Result<()> {
        let a = CallArgs {
            bytes: src.len() as u64,
            ptr: dst,
            ptr2: src.as_ptr() as u64,
            ..CallArgs::default()
        };
        // SAFETY: forwarded caller contract.
        self.around(CallKind::MemcpyHtoD, site, a, || unsafe {
            self.driver.memcpy_htod(dst, src)
        })
    }

    /// # Safety
    /// See [`Driver::memcpy_htod_async`].
    pub unsafe fn memcpy_htod_async(
        &self,
        site: &Site,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
        stream: Stream,
    ) -> Result<()> {
        let a = CallArgs {
            bytes: len as u64,
            ptr: dst,
            ptr2: src as u64,
            stream: stream.0,
        };
        // SAFETY: forwarded caller contract.
        self.around(CallKind::MemcpyHtoDAsync, site, a, || unsafe {
            self.driver.memcpy_htod_async(dst, src, len, stream)
        })
    }

    /// # Safety
    /// See [`Driver::memcpy_dtoh`].
    pub unsafe fn memcpy_dtoh(&self, site: &Site, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        let a = CallArgs {
            bytes: dst.len() as u64,
            ptr: dst.as_ptr() as u64,
            ptr2: src,
            ..CallArgs::default()
        };
        // SAFETY: forwarded caller contract.
        self.around(CallKind::MemcpyDtoH, site, a, || unsafe {
            self.driver.memcpy_dtoh(dst, src)
        })
    }

    pub fn stream_create(&self, site: &Site) -> Result<Stream> {
        self.around(CallKind::StreamCreate, site, CallArgs::default(), || {
            self.driver.stream_create()
        })
    }

    /// # Safety
    /// See [`Driver::stream_synchronize`].
    pub unsafe fn stream_synchronize(&self, site: &Site, stream: Stream) -> Result<()> {
        let a = CallArgs {
            stream: stream.0,
            ..CallArgs::default()
        };
        // SAFETY: forwarded caller contract.
        self.around(CallKind::StreamSynchronize, site, a, || unsafe {
            self.driver.stream_synchronize(stream)
        })
    }

    /// # Safety
    /// See [`Driver::stream_destroy`].
    pub unsafe fn stream_destroy(&self, site: &Site, stream: Stream) -> Result<()> {
        let a = CallArgs {
            stream: stream.0,
            ..CallArgs::default()
        };
        // SAFETY: forwarded caller contract.
        self.around(CallKind::StreamDestroy, site, a, || unsafe {
            self.driver.stream_destroy(stream)
        })
    }

    pub fn event_create(&self, site: &Site) -> Result<Event> {
        self.around(CallKind::EventCreate, site, CallArgs::default(), || {
            self.driver.event_create()
        })
    }

    /// # Safety
    /// See [`Driver::event_record`].
    pub unsafe fn event_record(&self, site: &Site, event: Event, stream: Stream) -> Result<()> {
        let a = CallArgs {
            ptr: event.0,
            stream: stream.0,
            ..CallArgs::default()
        };
        // SAFETY: forwarded caller contract.
        self.around(CallKind::EventRecord, site, a, || unsafe {
            self.driver.event_record(event, stream)
        })
    }

    /// # Safety
    /// See [`Driver::event_synchronize`].
    pub unsafe fn event_synchronize(&self, site: &Site, event: Event) -> Result<()> {
        let a = CallArgs {
            ptr: event.0,
            ..CallArgs::default()
        };
        // SAFETY: forwarded caller contract.
        self.around(CallKind::EventSynchronize, site, a, || unsafe {
            self.driver.event_synchronize(event)
        })
    }

    /// # Safety
    /// See [`Driver::event_query`].
    pub unsafe fn event_query(&self, site: &Site, event: Event) -> Result<bool> {
        let a = CallArgs {
            ptr: event.0,
            ..CallArgs::default()
        };
        // SAFETY: forwarded caller contract.
        self.around(CallKind::EventQuery, site, a, || unsafe {
            self.driver.event_query(event)
        })
    }

    /// # Safety
    /// See [`Driver::event_destroy`].
    pub unsafe fn event_destroy(&self, site: &Site, event: Event) -> Result<()> {
        let a = CallArgs {
            ptr: event.0,
            ..CallArgs::default()
        };
        // SAFETY: forwarded caller contract.
        self.around(CallKind::EventDestroy, site, a, || unsafe {
            self.driver.event_destroy(event)
        })
    }
}
