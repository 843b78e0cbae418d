//! The host-memory backend: "device" memory is ordinary host memory, so the strategies, the
//! breadcrumbs and `--verify` run on machines without a GPU, and tests can make any call fail.
//!
//! It keeps CUDA's ordering rules rather than short-cutting them: asynchronous copies are
//! queued on their stream and only performed when the stream or a later event is synchronized.
//! A strategy that reuses a staging buffer before waiting for its event therefore uploads the
//! wrong bytes here, and `--verify` catches it.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::call_table::CallKind;
use crate::driver::{DeviceAttribute, DevicePtr, Driver, Event, MemPool, Stream};
use crate::error::{Error, Result};

const INVALID_VALUE: i32 = 1;
const OUT_OF_MEMORY: i32 = 2;
const NOT_INITIALIZED: i32 = 3;
const INVALID_CONTEXT: i32 = 201;
const INVALID_HANDLE: i32 = 400;
const ALREADY_REGISTERED: i32 = 712;
const NOT_REGISTERED: i32 = 713;
const NOT_SUPPORTED: i32 = 801;
/// `CUDA_ERROR_ILLEGAL_STATE`: unregistering memory a queued copy still reads.
const ILLEGAL_STATE: i32 = 401;

/// Settings of the simulated device.
#[derive(Debug, Clone, Copy)]
pub struct HostConfig {
    /// Simulated device memory (what `mem_get_info` reports as total).
    pub memory_bytes: u64,
    /// What `CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS` reports.
    pub concurrent_managed_access: bool,
    /// What `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED` reports.
    pub memory_pools: bool,
    /// What `CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED` reports; without it a
    /// read-only registration fails with `CUDA_ERROR_NOT_SUPPORTED`, as the driver's does.
    pub read_only_host_register: bool,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            memory_bytes: 16 << 30,
            concurrent_managed_access: true,
            memory_pools: true,
            read_only_host_register: true,
        }
    }
}

#[derive(Debug)]
struct Block {
    len: usize,
    layout: Layout,
    managed: bool,
    /// The pool it came from (`cuMemAllocFromPoolAsync`), freed only by `cuMemFreeAsync`.
    pool: Option<u64>,
}

#[derive(Debug)]
enum Op {
    Copy { dst: u64, src: usize, len: usize },
    Record(u64),
}

#[derive(Debug, Default)]
struct State {
    initialized: bool,
    device: bool,
    retained: bool,
    current: bool,
    /// Device (and managed) allocations by base address.
    blocks: BTreeMap<u64, Block>,
    pinned: BTreeMap<u64, Layout>,
    /// Registered host ranges (base → length); the memory is the caller's.
    registered: BTreeMap<u64, u64>,
    /// Live memory pools.
    pools: HashSet<u64>,
    used: u64,
    streams: HashMap<u64, VecDeque<Op>>,
    /// Event → the stream whose queue holds its latest pending record, if any.
    events: HashMap<u64, Option<u64>>,
    next_handle: u64,
}

#[derive(Debug, Clone, Copy)]
struct FailRule {
    call: CallKind,
    nth: u64,
    code: i32,
}

/// Called at the start of every call with the call and its 1-based count (tests use it to look
/// at the breadcrumb ring while a call is "in the driver").
pub type CallHook = Box<dyn Fn(CallKind, u64) + Send + Sync>;

/// The host-memory driver. See the module docs.
pub struct HostDriver {
    config: HostConfig,
    state: Mutex<State>,
    calls: [AtomicU64; CallKind::ALL.len()],
    failures: Mutex<Vec<FailRule>>,
    hook: Mutex<Option<CallHook>>,
}

impl std::fmt::Debug for HostDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostDriver")
            .field("config", &self.config)
            .field("total_calls", &self.total_calls())
            .finish_non_exhaustive()
    }
}

fn err(call: CallKind, code: i32) -> Error {
    Error::Driver {
        call,
        code,
        name: crate::driver::error_name(code).to_string(),
    }
}

impl Default for HostDriver {
    fn default() -> Self {
        HostDriver::new(HostConfig::default())
    }
}

impl HostDriver {
    pub fn new(config: HostConfig) -> HostDriver {
        HostDriver {
            config,
            state: Mutex::new(State {
                next_handle: 1,
                ..State::default()
            }),
            calls: std::array::from_fn(|_| AtomicU64::new(0)),
            failures: Mutex::new(Vec::new()),
            hook: Mutex::new(None),
        }
    }

    /// Installs a hook run at the start of every call (before the call does anything).
    pub fn set_hook(&self, hook: Option<CallHook>) {
        *self.hook.lock().unwrap_or_else(|e| e.into_inner()) = hook;
    }

    /// Makes the `nth` call (1-based, counted from the driver's creation) of `call` fail with
    /// CUDA error `code`, without doing anything.
    pub fn fail_on(&self, call: CallKind, nth: u64, code: i32) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(FailRule { call, nth, code });
    }

    /// How many times `call` was made (failed calls included).
    pub fn calls(&self, call: CallKind) -> u64 {
        self.calls[call as usize].load(Ordering::Relaxed)
    }

    /// Total driver calls made.
    pub fn total_calls(&self) -> u64 {
        self.calls.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// Live device and managed allocations.
    pub fn live_allocations(&self) -> usize {
        self.lock().blocks.len()
    }

    /// Live pinned host allocations.
    pub fn live_pinned(&self) -> usize {
        let s = self.lock();
        s.pinned.len() + s.registered.len()
    }

    /// Live streams, events and memory pools.
    pub fn live_handles(&self) -> usize {
        let s = self.lock();
        s.streams.len() + s.events.len() + s.pools.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts the call, applies a planned failure, checks the context; returns the state.
    fn begin(
        &self,
        call: CallKind,
        needs_context: bool,
    ) -> Result<std::sync::MutexGuard<'_, State>> {
        let n = self.calls[call as usize].fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(hook) = self.hook.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            hook(call, n);
        }
        let planned = self
            .failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|r| r.call == call && r.nth == n)
            .copied();
        if let Some(rule) = planned {
            return Err(err(call, rule.code));
        }
        let state = self.lock();
        if needs_context {
            if !state.initialized {
                return Err(err(call, NOT_INITIALIZED));
            }
            if !state.current {
                return Err(err(call, INVALID_CONTEXT));
            }
        }
        Ok(state)
    }

    fn handle(state: &mut State) -> u64 {
        let h = state.next_handle;
        state.next_handle += 1;
        h
    }

    /// The block holding `[ptr, ptr+len)`, if one does.
    fn find(state: &State, ptr: u64, len: usize) -> Option<(u64, &Block)> {
        let (&base, block) = state.blocks.range(..=ptr).next_back()?;
        let end = ptr.checked_add(len as u64)?;
        (end <= base + block.len as u64).then_some((base, block))
    }

    fn run_op(op: Op) {
        if let Op::Copy { dst, src, len } = op {
            // SAFETY: `dst..dst+len` was checked to lie in a live block when the copy was
            // queued, and blocks are only freed after every queue is drained (`drain_all`);
            // `src..src+len` is valid until synchronization by the caller's contract of
            // `memcpy_htod_async`. The two ranges belong to different allocations.
            unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, len) };
        }
    }

    /// Performs `event`'s stream's work up to and including the event's latest record.
    fn reach_event(s: &mut State, event: Event, call: CallKind) -> Result<()> {
        let pending = *s
            .events
            .get(&event.0)
            .ok_or_else(|| err(call, INVALID_HANDLE))?;
        let Some(stream) = pending else {
            return Ok(());
        };
        // Perform the stream's work up to and including the event's latest record.
        while let Some(op) = s.streams.get_mut(&stream).and_then(|q| q.pop_front()) {
            match op {
                Op::Record(e) => {
                    // An earlier record of the same event is superseded by the later one.
                    let latest = s.events.get(&e).copied().flatten() == Some(stream)
                        && !s.streams[&stream]
                            .iter()
                            .any(|o| matches!(o, Op::Record(x) if *x == e));
                    if latest {
                        Self::complete_record(s, e);
                    }
                    if e == event.0 && latest {
                        break;
                    }
                }
                op => Self::run_op(op),
            }
        }
        Ok(())
    }

    /// An event's record was reached: the event is complete (unless it was destroyed since).
    fn complete_record(state: &mut State, event: u64) {
        if let Some(pending) = state.events.get_mut(&event) {
            *pending = None;
        }
    }

    fn drain_all(state: &mut State) {
        let mut ops = Vec::new();
        for queue in state.streams.values_mut() {
            ops.extend(queue.drain(..));
        }
        for op in ops {
            match op {
                Op::Record(e) => Self::complete_record(state, e),
                op => Self::run_op(op),
            }
        }
    }

    fn alloc_block(&self, call: CallKind, bytes: u64, managed: bool) -> Result<DevicePtr> {
        let mut state = self.begin(call, true)?;
        Self::insert_block(&mut state, &self.config, call, bytes, managed, None)
    }

    fn insert_block(
        state: &mut State,
        config: &HostConfig,
        call: CallKind,
        bytes: u64,
        managed: bool,
        pool: Option<u64>,
    ) -> Result<DevicePtr> {
        if bytes == 0 {
            return Err(err(call, INVALID_VALUE));
        }
        if state.used.saturating_add(bytes) > config.memory_bytes {
            return Err(err(call, OUT_OF_MEMORY));
        }
        let len = usize::try_from(bytes).map_err(|_| err(call, OUT_OF_MEMORY))?;
        let layout = Layout::from_size_align(len, 256).map_err(|_| err(call, OUT_OF_MEMORY))?;
        // SAFETY: the layout has a non-zero size (checked above).
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(err(call, OUT_OF_MEMORY));
        }
        state.used += bytes;
        state.blocks.insert(
            ptr as u64,
            Block {
                len,
                layout,
                managed,
                pool,
            },
        );
        Ok(ptr as u64)
    }

    /// Frees block `ptr`, which must (`pooled`) or must not come from a pool: stricter than
    /// CUDA, so a strategy that frees with the wrong call fails here.
    fn free_block(s: &mut State, call: CallKind, ptr: DevicePtr, pooled: bool) -> Result<()> {
        let right_kind = s
            .blocks
            .get(&ptr)
            .is_some_and(|b| b.pool.is_some() == pooled);
        let Some(block) = right_kind.then(|| s.blocks.remove(&ptr)).flatten() else {
            return Err(err(call, INVALID_VALUE));
        };
        s.used -= block.len as u64;
        // SAFETY: allocated in `insert_block` with this layout; removed from the map, so freed
        // once.
        unsafe { dealloc(ptr as *mut u8, block.layout) };
        Ok(())
    }
}

impl Drop for HostDriver {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        for (&base, block) in &state.blocks {
            // SAFETY: allocated in `alloc_block` with this layout and not yet freed.
            unsafe { dealloc(base as *mut u8, block.layout) };
        }
        for (&base, &layout) in &state.pinned {
            // SAFETY: allocated in `host_alloc_pinned` with this layout and not yet freed.
            unsafe { dealloc(base as *mut u8, layout) };
        }
    }
}

impl Driver for HostDriver {
    fn backend(&self) -> &'static str {
        "host"
    }

    fn init(&self) -> Result<()> {
        let mut s = self.begin(CallKind::Init, false)?;
        s.initialized = true;
        Ok(())
    }

    fn device_get(&self, ordinal: i32) -> Result<()> {
        let mut s = self.begin(CallKind::DeviceGet, false)?;
        if !s.initialized {
            return Err(err(CallKind::DeviceGet, NOT_INITIALIZED));
        }
        if ordinal != 0 {
            return Err(err(CallKind::DeviceGet, 101));
        }
        s.device = true;
        Ok(())
    }

    fn primary_ctx_retain(&self) -> Result<()> {
        let mut s = self.begin(CallKind::PrimaryCtxRetain, false)?;
        if !s.device {
            return Err(err(CallKind::PrimaryCtxRetain, INVALID_VALUE));
        }
        s.retained = true;
        Ok(())
    }

    fn ctx_set_current(&self) -> Result<()> {
        let mut s = self.begin(CallKind::CtxSetCurrent, false)?;
        if !s.retained {
            return Err(err(CallKind::CtxSetCurrent, INVALID_CONTEXT));
        }
        s.current = true;
        Ok(())
    }

    fn primary_ctx_release(&self) -> Result<()> {
        let mut s = self.begin(CallKind::PrimaryCtxRelease, false)?;
        s.retained = false;
        s.current = false;
        Ok(())
    }

    fn ctx_synchronize(&self) -> Result<()> {
        let mut s = self.begin(CallKind::CtxSynchronize, true)?;
        Self::drain_all(&mut s);
        Ok(())
    }

    fn device_attribute(&self, attribute: DeviceAttribute) -> Result<i32> {
        let _s = self.begin(CallKind::DeviceGetAttribute, true)?;
        Ok(match attribute {
            DeviceAttribute::ConcurrentManagedAccess => {
                i32::from(self.config.concurrent_managed_access)
            }
            DeviceAttribute::PageableMemoryAccess => 0,
            DeviceAttribute::MemoryPoolsSupported => i32::from(self.config.memory_pools),
            DeviceAttribute::ReadOnlyHostRegisterSupported => {
                i32::from(self.config.read_only_host_register)
            }
        })
    }

    fn mem_get_info(&self) -> Result<(u64, u64)> {
        let s = self.begin(CallKind::MemGetInfo, true)?;
        Ok((
            self.config.memory_bytes - s.used.min(self.config.memory_bytes),
            self.config.memory_bytes,
        ))
    }

    fn mem_alloc(&self, bytes: u64) -> Result<DevicePtr> {
        self.alloc_block(CallKind::MemAlloc, bytes, false)
    }

    unsafe fn mem_free(&self, ptr: DevicePtr) -> Result<()> {
        let mut s = self.begin(CallKind::MemFree, true)?;
        // cuMemFree waits for outstanding work; so do we.
        Self::drain_all(&mut s);
        Self::free_block(&mut s, CallKind::MemFree, ptr, false)
    }

    fn mem_pool_create(&self) -> Result<MemPool> {
        let mut s = self.begin(CallKind::MemPoolCreate, true)?;
        if !self.config.memory_pools {
            return Err(err(CallKind::MemPoolCreate, NOT_SUPPORTED));
        }
        let h = Self::handle(&mut s);
        s.pools.insert(h);
        Ok(MemPool(h))
    }

    unsafe fn mem_pool_set_release_threshold(&self, pool: MemPool, _bytes: u64) -> Result<()> {
        let s = self.begin(CallKind::MemPoolSetAttribute, true)?;
        if !s.pools.contains(&pool.0) {
            return Err(err(CallKind::MemPoolSetAttribute, INVALID_HANDLE));
        }
        Ok(())
    }

    unsafe fn mem_pool_destroy(&self, pool: MemPool) -> Result<()> {
        let mut s = self.begin(CallKind::MemPoolDestroy, true)?;
        // Allocations still out stay valid until freed, as with CUDA.
        if !s.pools.remove(&pool.0) {
            return Err(err(CallKind::MemPoolDestroy, INVALID_HANDLE));
        }
        Ok(())
    }

    unsafe fn mem_alloc_from_pool_async(
        &self,
        bytes: u64,
        pool: MemPool,
        stream: Stream,
    ) -> Result<DevicePtr> {
        let call = CallKind::MemAllocFromPoolAsync;
        let mut s = self.begin(call, true)?;
        if !s.pools.contains(&pool.0) || !s.streams.contains_key(&stream.0) {
            return Err(err(call, INVALID_HANDLE));
        }
        Self::insert_block(&mut s, &self.config, call, bytes, false, Some(pool.0))
    }

    unsafe fn mem_free_async(&self, ptr: DevicePtr, stream: Stream) -> Result<()> {
        let mut s = self.begin(CallKind::MemFreeAsync, true)?;
        if stream != Stream::LEGACY && !s.streams.contains_key(&stream.0) {
            return Err(err(CallKind::MemFreeAsync, INVALID_HANDLE));
        }
        // Simpler than stream order and never unsafe: every queued copy is done before the
        // memory goes.
        Self::drain_all(&mut s);
        Self::free_block(&mut s, CallKind::MemFreeAsync, ptr, true)
    }

    fn mem_alloc_managed(&self, bytes: u64) -> Result<DevicePtr> {
        self.alloc_block(CallKind::MemAllocManaged, bytes, true)
    }

    unsafe fn mem_prefetch_to_device(
        &self,
        ptr: DevicePtr,
        bytes: u64,
        stream: Stream,
    ) -> Result<()> {
        let s = self.begin(CallKind::MemPrefetchAsync, true)?;
        if !s.streams.contains_key(&stream.0) {
            return Err(err(CallKind::MemPrefetchAsync, INVALID_HANDLE));
        }
        let len =
            usize::try_from(bytes).map_err(|_| err(CallKind::MemPrefetchAsync, INVALID_VALUE))?;
        match Self::find(&s, ptr, len) {
            Some((_, block)) if block.managed => Ok(()),
            _ => Err(err(CallKind::MemPrefetchAsync, INVALID_VALUE)),
        }
    }

    fn host_alloc_pinned(&self, bytes: u64) -> Result<*mut u8> {
        let mut s = self.begin(CallKind::MemHostAlloc, true)?;
        let len = usize::try_from(bytes).map_err(|_| err(CallKind::MemHostAlloc, OUT_OF_MEMORY))?;
        if len == 0 {
            return Err(err(CallKind::MemHostAlloc, INVALID_VALUE));
        }
        let layout = Layout::from_size_align(len, 4096)
            .map_err(|_| err(CallKind::MemHostAlloc, OUT_OF_MEMORY))?;
        // SAFETY: non-zero size (checked above).
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(err(CallKind::MemHostAlloc, OUT_OF_MEMORY));
        }
        s.pinned.insert(ptr as u64, layout);
        Ok(ptr)
    }

    unsafe fn host_free_pinned(&self, ptr: *mut u8) -> Result<()> {
        let mut s = self.begin(CallKind::MemFreeHost, true)?;
        Self::drain_all(&mut s);
        let layout = s
            .pinned
            .remove(&(ptr as u64))
            .ok_or_else(|| err(CallKind::MemFreeHost, INVALID_VALUE))?;
        // SAFETY: allocated in `host_alloc_pinned` with this layout; removed from the map.
        unsafe { dealloc(ptr, layout) };
        Ok(())
    }

    unsafe fn host_register(&self, ptr: *mut u8, bytes: u64, read_only: bool) -> Result<()> {
        let mut s = self.begin(CallKind::MemHostRegister, true)?;
        if read_only && !self.config.read_only_host_register {
            return Err(err(CallKind::MemHostRegister, NOT_SUPPORTED));
        }
        if ptr.is_null() || bytes == 0 || !(ptr as usize).is_multiple_of(4096) {
            return Err(err(CallKind::MemHostRegister, INVALID_VALUE));
        }
        let (base, end) = (ptr as u64, ptr as u64 + bytes);
        // CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED for an overlap, as the driver says.
        let overlaps = s
            .registered
            .range(..end)
            .next_back()
            .is_some_and(|(&b, &len)| b + len > base);
        if overlaps {
            return Err(err(CallKind::MemHostRegister, ALREADY_REGISTERED));
        }
        s.registered.insert(base, bytes);
        Ok(())
    }

    unsafe fn host_unregister(&self, ptr: *mut u8) -> Result<()> {
        let mut s = self.begin(CallKind::MemHostUnregister, true)?;
        let base = ptr as u64;
        let len = *s
            .registered
            .get(&base)
            .ok_or_else(|| err(CallKind::MemHostUnregister, NOT_REGISTERED))?;
        // The contract says no copy out of the range is in flight; on a GPU breaking it is a
        // DMA from unlocked pages, so here it is an error the tests see.
        let copying_from_it = s.streams.values().flatten().any(|op| {
            matches!(*op, Op::Copy { src, len: n, .. }
                if (src as u64) < base + len && src as u64 + n as u64 > base)
        });
        if copying_from_it {
            return Err(err(CallKind::MemHostUnregister, ILLEGAL_STATE));
        }
        Self::drain_all(&mut s);
        s.registered.remove(&base);
        Ok(())
    }

    unsafe fn memcpy_htod(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        let s = self.begin(CallKind::MemcpyHtoD, true)?;
        if Self::find(&s, dst, src.len()).is_none() {
            return Err(err(CallKind::MemcpyHtoD, INVALID_VALUE));
        }
        // SAFETY: the destination range lies inside a live block (checked just above, under
        // the lock); the source is a borrowed slice of a different allocation.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }

    unsafe fn memcpy_htod_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        len: usize,
        stream: Stream,
    ) -> Result<()> {
        let mut s = self.begin(CallKind::MemcpyHtoDAsync, true)?;
        if Self::find(&s, dst, len).is_none() || src.is_null() {
            return Err(err(CallKind::MemcpyHtoDAsync, INVALID_VALUE));
        }
        let queue = s
            .streams
            .get_mut(&stream.0)
            .ok_or_else(|| err(CallKind::MemcpyHtoDAsync, INVALID_HANDLE))?;
        queue.push_back(Op::Copy {
            dst,
            src: src as usize,
            len,
        });
        Ok(())
    }

    unsafe fn memcpy_dtoh(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        let mut s = self.begin(CallKind::MemcpyDtoH, true)?;
        // cuMemcpyDtoH is synchronous with respect to earlier work.
        Self::drain_all(&mut s);
        if Self::find(&s, src, dst.len()).is_none() {
            return Err(err(CallKind::MemcpyDtoH, INVALID_VALUE));
        }
        // SAFETY: the source range lies inside a live block (checked above, under the lock).
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn stream_create(&self) -> Result<Stream> {
        let mut s = self.begin(CallKind::StreamCreate, true)?;
        let h = Self::handle(&mut s);
        s.streams.insert(h, VecDeque::new());
        Ok(Stream(h))
    }

    unsafe fn stream_synchronize(&self, stream: Stream) -> Result<()> {
        let mut s = self.begin(CallKind::StreamSynchronize, true)?;
        let ops: Vec<Op> = s
            .streams
            .get_mut(&stream.0)
            .ok_or_else(|| err(CallKind::StreamSynchronize, INVALID_HANDLE))?
            .drain(..)
            .collect();
        for op in ops {
            match op {
                Op::Record(e) => Self::complete_record(&mut s, e),
                op => Self::run_op(op),
            }
        }
        Ok(())
    }

    unsafe fn stream_destroy(&self, stream: Stream) -> Result<()> {
        let mut s = self.begin(CallKind::StreamDestroy, true)?;
        let queue = s
            .streams
            .remove(&stream.0)
            .ok_or_else(|| err(CallKind::StreamDestroy, INVALID_HANDLE))?;
        // Work queued before the destroy still completes.
        for op in queue {
            match op {
                Op::Record(e) => Self::complete_record(&mut s, e),
                op => Self::run_op(op),
            }
        }
        Ok(())
    }

    fn event_create(&self) -> Result<Event> {
        let mut s = self.begin(CallKind::EventCreate, true)?;
        let h = Self::handle(&mut s);
        s.events.insert(h, None);
        Ok(Event(h))
    }

    unsafe fn event_record(&self, event: Event, stream: Stream) -> Result<()> {
        let mut s = self.begin(CallKind::EventRecord, true)?;
        if !s.events.contains_key(&event.0) {
            return Err(err(CallKind::EventRecord, INVALID_HANDLE));
        }
        let queue = s
            .streams
            .get_mut(&stream.0)
            .ok_or_else(|| err(CallKind::EventRecord, INVALID_HANDLE))?;
        queue.push_back(Op::Record(event.0));
        s.events.insert(event.0, Some(stream.0));
        Ok(())
    }

    unsafe fn event_synchronize(&self, event: Event) -> Result<()> {
        let mut s = self.begin(CallKind::EventSynchronize, true)?;
        Self::reach_event(&mut s, event, CallKind::EventSynchronize)
    }

    unsafe fn event_query(&self, event: Event) -> Result<bool> {
        let n = self.calls(CallKind::EventQuery);
        let mut s = self.begin(CallKind::EventQuery, true)?;
        let pending = *s
            .events
            .get(&event.0)
            .ok_or_else(|| err(CallKind::EventQuery, INVALID_HANDLE))?;
        if pending.is_none() {
            return Ok(true);
        }
        // A device that is sometimes behind: every other query of pending work says "not
        // ready"; the others perform the work up to the record, as if the copy had finished.
        if n % 2 == 1 {
            return Ok(false);
        }
        Self::reach_event(&mut s, event, CallKind::EventQuery)?;
        Ok(true)
    }

    unsafe fn event_destroy(&self, event: Event) -> Result<()> {
        let mut s = self.begin(CallKind::EventDestroy, true)?;
        s.events
            .remove(&event.0)
            .ok_or_else(|| err(CallKind::EventDestroy, INVALID_HANDLE))?;
        Ok(())
    }
}
