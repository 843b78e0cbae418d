//! [`Traced`]: the one door to the driver. Each method makes exactly one driver call and, when a
//! breadcrumb ring is attached, writes an `enter` record before it and an `exit` record (with
//! the driver's result code) after it. Without a ring the cost is one branch. The wrappers are
//! generated from the driver-call table ([`crate::driver`]'s `for_each_driver_call`).

use std::cell::Cell;
use std::fmt::Write as _;
use std::rc::Rc;

use breadcrumb::{Args, Call, Writer};

use crate::call_table::{for_each_driver_call, returns, CallKind};
use crate::driver::{DeviceAttribute, DevicePtr, Driver, Event, MemPool, Stream};
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
    kind.breadcrumb()
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

impl CallArgs {
    fn bytes(self, bytes: u64) -> CallArgs {
        CallArgs { bytes, ..self }
    }

    fn ptr(self, ptr: u64) -> CallArgs {
        CallArgs { ptr, ..self }
    }

    fn ptr2(self, ptr2: u64) -> CallArgs {
        CallArgs { ptr2, ..self }
    }

    fn stream(self, stream: u64) -> CallArgs {
        CallArgs { stream, ..self }
    }
}

/// `Traced`'s wrappers, one per entry of [`for_each_driver_call`]: count the call, breadcrumb
/// it, forward it. An unsafe wrapper carries its driver method's `# Safety` section.
macro_rules! define_traced {
    ($(
        $(#[$doc:meta])*
        [$($unsafety:tt)?] $kind:ident($cuda:literal, $crumb:ident)
        $vis:vis fn $method:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?
        [$($extra:ident: $extra_ty:ty),*]
        { $($field:ident: $value:expr),* };
    )*) => {
        impl Traced<'_> {
            $(
                $(#[$doc])*
                $vis $($unsafety)? fn $method(
                    &self,
                    site: &Site
                    $(, $arg: $ty)*
                    $(, $extra: $extra_ty)*
                ) -> Result<returns!($($ret)?)> {
                    let args = CallArgs::default()$(.$field($value))*;
                    self.around(CallKind::$kind, site, args, || {
                        forward!([$($unsafety)?] self.driver.$method($($arg),*))
                    })
                }
            )*
        }
    };
}

/// The driver call inside a wrapper, in an `unsafe` block where the call is unsafe.
macro_rules! forward {
    ([unsafe] $call:expr) => {
        // SAFETY: the wrapper is an `unsafe fn` with the driver method's own `# Safety`
        // section, so its caller has promised exactly what the driver call needs.
        unsafe { $call }
    };
    ([] $call:expr) => {
        $call
    };
}

for_each_driver_call!(define_traced);

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
        t.init(&site).map_err(no_driver)?;
        t.device_get(&site, ordinal).map_err(no_driver)?;
        t.primary_ctx_retain(&site).map_err(no_driver)?;
        t.ctx_set_current(&site).map_err(no_driver)?;
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
        let pool = self.mem_pool_create(site)?;
        // SAFETY: the pool was just created.
        let kept = unsafe { self.mem_pool_set_release_threshold(site, pool, u64::MAX) };
        if let Err(e) = kept {
            // SAFETY: our pool, nothing allocated from it, destroyed once.
            let _ = unsafe { self.mem_pool_destroy(site, pool) };
            return Err(e);
        }
        self.arena_pool.set(ArenaPool::Live(pool));
        Ok(Some(pool))
    }

    /// Destroys the session's arena pool if one was made (arenas still out stay valid until
    /// freed, then go back to the driver).
    pub fn release_arena_pool(&self) -> Result<()> {
        if let ArenaPool::Live(pool) = self.arena_pool.get() {
            self.arena_pool.set(ArenaPool::Unknown);
            // SAFETY: the live pool made by `arena_pool`, forgotten above so destroyed once.
            unsafe { self.mem_pool_destroy(&Site::plain("close"), pool) }?;
        }
        Ok(())
    }

    /// Destroys the arena pool, then releases the primary context retained by
    /// [`Traced::open`].
    pub fn close(&self) -> Result<()> {
        let pool = self.release_arena_pool();
        let released = self.primary_ctx_release(&Site::plain("close"));
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
        let token = ring.enter(kind.breadcrumb(), &args, label.as_str());
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
}
