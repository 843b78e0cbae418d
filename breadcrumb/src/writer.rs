//! The writer: a shared file mapping, per-thread lanes, and a record path without locked
//! instructions.
//!
//! A version-2 ring is split into lanes. The first record a thread writes claims a free lane with
//! one compare-and-swap on the lane's owner word; from then on the thread is the lane's only
//! writer, and a record is: one counter read (`rdtsc` / `CNTVCT_EL0`, or `clock_gettime` where
//! the counter is not usable), a thread-local lookup, a plain store of the lane's head (the claim),
//! a release fence, the body, and a release store of the final sequence word. No lock, no
//! read-modify-write, no allocation, no system call. The lane is released when the thread exits.
//!
//! Threads that find no free lane write to lane 0, shared, with the version-1 protocol: a
//! `fetch_add` on its head to claim an index and a compare-and-swap on the slot's sequence word to
//! own it (never a slot another writer is still filling); they try for a lane again every
//! [`CLAIM_RETRY_RECORDS`] records. An exit recorded in another lane than its enter also marks the
//! enter closed in place (a compare-and-swap on the enter's sequence word), so a reader never calls
//! a returned call in flight because the exit's lane wrapped first.
//!
//! Making a writer (a fresh ring, an existing one opened to append, the environment's) and the
//! header a fresh ring starts with live in `create`; this file holds the record path.

use std::cell::{Cell, RefCell};
use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once, Weak};

use crate::counter;
use crate::error::{Error, Result};
use crate::format::{self, header, lane, slot, Args, Call, RingClock};
use crate::identity;

mod create;

/// Environment variable: create the ring at exactly this path.
pub const ENV_RING: &str = "WEDGE_CAPTURE_RING";
/// Environment variable: create the ring in this directory as `<pid>-<starttime>.ring`.
pub const ENV_RING_DIR: &str = "WEDGE_CAPTURE_RING_DIR";
/// Environment variable: slot count (a power of two) for rings made from the environment.
pub const ENV_RING_SLOTS: &str = "WEDGE_CAPTURE_RING_SLOTS";
/// Environment variable: lane count (a power of two, at most the slot count); default automatic.
pub const ENV_RING_LANES: &str = "WEDGE_CAPTURE_RING_LANES";
/// Environment variable: `counter` (default), `monotonic`, or `coarse` for
/// `CLOCK_MONOTONIC_COARSE` timestamps.
pub const ENV_RING_CLOCK: &str = "WEDGE_CAPTURE_RING_CLOCK";

/// How to create a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterOptions {
    /// All lanes' slots together: a power of two, 1..=2^20.
    pub slot_count: u32,
    /// Clock of the slot timestamps.
    pub clock: RingClock,
    /// A power of two, at most `slot_count` and 4096; 0 = automatic (64 lanes, fewer so that a
    /// lane keeps at least 16 slots).
    pub lane_count: u32,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            slot_count: format::DEFAULT_SLOT_COUNT,
            clock: RingClock::Counter,
            lane_count: 0,
        }
    }
}

impl WriterOptions {
    /// The lane count these options give (resolving 0 = automatic), or the reason they are bad.
    pub fn lanes(&self) -> Result<u32> {
        let slots = self.slot_count;
        if !slots.is_power_of_two() {
            return Err(Error::BadSlotCount);
        }
        if slots > format::MAX_SLOT_COUNT {
            return Err(Error::RingTooLarge {
                slots: u64::from(slots),
                max_slots: format::MAX_SLOT_COUNT,
                max_bytes: format::MAX_RING_BYTES,
            });
        }
        let lanes = match self.lane_count {
            0 => (slots / format::MIN_AUTO_LANE_SLOTS).clamp(1, format::DEFAULT_LANE_COUNT),
            n => n,
        };
        if !lanes.is_power_of_two() || lanes > format::MAX_LANE_COUNT || lanes > slots {
            return Err(Error::BadLaneCount);
        }
        Ok(lanes)
    }
}

/// How many indices a shared-lane record tries before it is counted as dropped.
const MAX_CLAIM_ATTEMPTS: u32 = 64;
/// A thread writing to the shared lane tries to claim a lane of its own again after this many
/// records.
pub const CLAIM_RETRY_RECORDS: u32 = 256;
/// A lane writer checks whether the header's calibration pair is due for a refresh when its
/// lane-local index is a multiple of this (a power of two).
const RECALIBRATE_EVERY: u64 = 64;

/// 8-byte words of a slot (`format::SLOT_SIZE`).
const SLOT_WORDS: usize = format::SLOT_SIZE as usize / 8;

/// What `enter` returns and `exit` takes: the enter record's call id (high 16 bits), lane (next
/// 16 bits) and lane-local index (low 32 bits). In the C ABI it is a plain `uint64_t`.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token(u64);

impl Token {
    /// No enter record was written (no ring, or every slot tried was busy); `exit` ignores it.
    pub const NONE: Token = Token(u64::MAX);

    fn new(lane: u32, index: u64, call_id: u16) -> Token {
        Token((u64::from(call_id) << format::TOKEN_INDEX_BITS) | ref_word(lane, index))
    }

    /// The token's low 48 bits (lane and low 32 bits of the lane-local index: the `ref` an exit
    /// record stores), or `None` for [`Token::NONE`].
    pub fn index(self) -> Option<u64> {
        (self != Token::NONE).then_some(self.0 & format::TOKEN_INDEX_MASK)
    }

    /// The enter record's lane.
    pub fn lane(self) -> u32 {
        ((self.0 & format::TOKEN_INDEX_MASK) >> format::LANE_INDEX_BITS) as u32
    }

    /// The call id of the enter record.
    pub fn call_id(self) -> u16 {
        (self.0 >> format::TOKEN_INDEX_BITS) as u16
    }

    /// The raw 64-bit value (the C ABI's token).
    pub fn to_raw(self) -> u64 {
        self.0
    }

    /// A token from its raw value.
    pub fn from_raw(raw: u64) -> Token {
        Token(raw)
    }
}

/// A version-2 `ref` word: lane in bits 32..48, the lane-local index's low 32 bits below.
#[inline(always)]
fn ref_word(lane: u32, index: u64) -> u64 {
    (u64::from(lane) << format::LANE_INDEX_BITS) | (index & format::LANE_INDEX_MASK)
}

/// The shared mapping. Threads' lane leases hold it weakly, so a lane is released at thread exit
/// only while the mapping still exists.
struct Mapping {
    base: NonNull<u8>,
    len: usize,
    /// Lanes this process's threads own, released when the writer is dropped.
    claimed: Mutex<Vec<u32>>,
    /// Kept open for the writer's life so the agent finds the ring through the fd table.
    _file: File,
}

// SAFETY: the mapping is shared memory accessed only through atomic types; the pointer is never
// handed out, and the mapping lives until `Drop`.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// The 8-byte atomic word at byte `offset` of the mapping.
    #[inline(always)]
    fn word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset & 7 == 0 && offset + 8 <= self.len);
        // SAFETY: callers pass 8-aligned offsets inside the mapping (header constants, lane
        // entries below `lane_count`, slot offsets masked to the lane); the mapping is
        // page-aligned, lives as long as `self`, and is only accessed through atomics.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    fn release_lane(&self, lane_index: u32) {
        let owner = format::HEADER_SIZE as usize
            + lane_index as usize * format::LANE_ENTRY_SIZE as usize
            + lane::OWNER;
        self.word(owner).store(0, Ordering::Release);
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        let claimed = std::mem::take(self.claimed.get_mut().unwrap_or_else(|e| e.into_inner()));
        for lane_index in claimed {
            self.release_lane(lane_index);
        }
        // SAFETY: `base`/`len` are exactly what mmap returned; no reference into the mapping
        // outlives the `Mapping`.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Where timestamps come from.
#[derive(Debug, Clone, Copy)]
enum TimeSource {
    Counter { hz: u64 },
    Clock(libc::clockid_t),
}

/// A ring file mapped shared into this process. `Send + Sync`: every access to the shared
/// mapping goes through atomics.
pub struct Writer {
    /// `mapping.base`, copied so the record path does not chase the `Arc`.
    base: NonNull<u8>,
    /// Unique among this process's writers (never reused), the key of the threads' lane caches.
    id: u64,
    lane_count: u32,
    lane_slots_mask: u64,
    lane_slots_shift: u32,
    slots_offset: usize,
    time: TimeSource,
    /// What the clock candidates cost when this writer chose (None: nothing to choose).
    read_costs: Option<counter::ReadCosts>,
    path: PathBuf,
    status_lock: Mutex<()>,
    mapping: Arc<Mapping>,
}

// SAFETY: `base` points into `mapping`, which the writer keeps alive and which is accessed only
// through atomics.
unsafe impl Send for Writer {}
// SAFETY: as above; all methods taking `&self` use atomic operations on the mapping.
unsafe impl Sync for Writer {}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("path", &self.path)
            .field("slot_count", &self.slot_count())
            .field("lane_count", &self.lane_count)
            .field("time", &self.time)
            .finish()
    }
}

static NEXT_WRITER_ID: AtomicU64 = AtomicU64::new(1);

impl Writer {
    /// Where the ring was created.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of slots, all lanes together.
    pub fn slot_count(&self) -> u64 {
        u64::from(self.lane_count) << self.lane_slots_shift
    }

    /// Number of lanes (lane 0 is the shared one).
    pub fn lane_count(&self) -> u32 {
        self.lane_count
    }

    /// The per-read costs measured when the clock was chosen at creation ([`counter::choose`]);
    /// None for an opened ring, an explicit clock, or a machine without a usable counter.
    pub fn read_costs(&self) -> Option<counter::ReadCosts> {
        self.read_costs
    }

    /// Whether records are stamped with the CPU counter (else with `clock_gettime`).
    pub fn uses_counter(&self) -> bool {
        matches!(self.time, TimeSource::Counter { .. })
    }

    /// Records that a driver call is about to be made. Lock-free; no allocation, no system call.
    /// The label is cut to 40 bytes at a char boundary.
    #[inline]
    pub fn enter(&self, call: Call, args: &Args, label: &str) -> Token {
        self.enter_raw(call.id(), args, format::truncate_label(label).as_bytes())
    }

    /// `enter` with a raw call id and label bytes (at most 40 are kept; the C ABI validates UTF-8).
    #[inline]
    pub fn enter_raw(&self, call_id: u16, args: &Args, label: &[u8]) -> Token {
        match self.record(format::KIND_ENTER, call_id, args, label, None, 0) {
            Some((lane_index, index)) => Token::new(lane_index, index, call_id),
            None => Token::NONE,
        }
    }

    /// Records that the call of `token` returned `result`. Ignores [`Token::NONE`].
    #[inline]
    pub fn exit(&self, token: Token, result: i64) {
        let Some(enter_ref) = token.index() else {
            return;
        };
        let written = self.record(
            format::KIND_EXIT,
            token.call_id(),
            &Args::default(),
            &[],
            Some(enter_ref),
            result,
        );
        let enter_lane = token.lane();
        if written.map(|(lane_index, _)| lane_index) != Some(enter_lane) {
            self.close_in_place(enter_lane, enter_ref & format::LANE_INDEX_MASK);
        }
    }

    /// Records in the header why instrumentation is degraded (e.g. "CUPTI subscribe failed: …").
    /// Not on the record path: takes a lock. An empty message clears the status.
    pub fn set_status(&self, code: i32, message: &str) {
        let _guard = self.status_lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut text = message;
        if text.len() > format::STATUS_CAPACITY {
            let mut end = format::STATUS_CAPACITY;
            while end > 0 && !text.is_char_boundary(end) {
                end -= 1;
            }
            text = text.get(..end).unwrap_or("");
        }
        let len_word = self.u32_word(header::STATUS_LEN);
        len_word.store(u32::MAX, Ordering::Relaxed);
        fence(Ordering::Release);
        self.u32_word(header::STATUS_CODE)
            .store(code as u32, Ordering::Relaxed);
        let mut padded = [0u8; format::STATUS_CAPACITY];
        padded[..text.len()].copy_from_slice(text.as_bytes());
        for (index, chunk) in padded.chunks_exact(8).enumerate() {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.word(header::STATUS_TEXT + index * 8)
                .store(u64::from_le_bytes(word), Ordering::Relaxed);
        }
        len_word.store(text.len() as u32, Ordering::Release);
    }

    /// The 8-byte atomic word at byte `offset` of the mapping.
    #[inline(always)]
    fn word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset & 7 == 0 && offset + 8 <= self.mapping.len);
        // SAFETY: every caller passes an 8-aligned offset inside the mapping (header constants,
        // lane entries below `lane_count`, slot offsets masked to their lane); `base` is the
        // page-aligned mapping that `self.mapping` keeps alive, only ever accessed through atomics.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    #[inline(always)]
    fn u32_word(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset & 3 == 0 && offset + 4 <= self.mapping.len);
        // SAFETY: as in `word`, for a 4-aligned offset of a header field.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    #[inline(always)]
    fn lane_word(&self, lane_index: u32, field: usize) -> &AtomicU64 {
        self.word(
            format::HEADER_SIZE as usize
                + lane_index as usize * format::LANE_ENTRY_SIZE as usize
                + field,
        )
    }

    #[inline(always)]
    fn slot_offset(&self, lane_index: u32, index: u64) -> usize {
        let position =
            (u64::from(lane_index) << self.lane_slots_shift) | (index & self.lane_slots_mask);
        self.slots_offset + position as usize * format::SLOT_SIZE as usize
    }

    #[inline(always)]
    fn now(&self) -> u64 {
        match self.time {
            TimeSource::Counter { .. } => counter::read(),
            TimeSource::Clock(clock) => identity::clock_ns(clock),
        }
    }

    #[inline(always)]
    fn record(
        &self,
        kind: u8,
        call_id: u16,
        args: &Args,
        label: &[u8],
        enter_ref: Option<u64>,
        result: i64,
    ) -> Option<(u32, u64)> {
        let now = self.now();
        let body = |tid| Body {
            now,
            tid,
            kind,
            call_id,
            args,
            label,
            enter_ref,
            result,
        };
        let cache = LANE_CACHE.with(Cell::get);
        if cache.writer_id == self.id
            && cache.lane != 0
            && cache.generation == FORK_GENERATION.load(Ordering::Relaxed)
        {
            return Some(self.record_in_own_lane(cache.lane, &body(cache.tid)));
        }
        // The slow path gets a body of its own: the fast path's never has its address taken,
        // so it stays in registers (no stack stores per record).
        self.record_slow(body(0))
    }

    /// The single-writer record: the head store claims the index (a reader that sees any byte of
    /// the new body also sees the head past the slot's old record, and skips that record as
    /// stale), the body, then the final sequence word.
    #[inline(always)]
    fn record_in_own_lane(&self, lane_index: u32, body: &Body<'_>) -> (u32, u64) {
        let head = self.lane_word(lane_index, lane::HEAD);
        let index = head.load(Ordering::Relaxed);
        head.store(index.wrapping_add(1), Ordering::Relaxed);
        // Order the claim before every body store (on x86_64 this is only a compiler barrier).
        fence(Ordering::Release);
        let words = self.slot_words(self.slot_offset(lane_index, index));
        self.write_body(words, lane_index, index, body);
        words[slot::SEQ / 8].store(format::final_seq(index), Ordering::Release);
        if index & (RECALIBRATE_EVERY - 1) == 0 {
            self.maybe_recalibrate(body.now);
        }
        (lane_index, index)
    }

    /// The slot at byte `offset` of the mapping as its 16 atomic words. The record path stores
    /// through this one reference, so the mapping's base is loaded once per record rather than
    /// once per word (the stores could alias `self` as far as the compiler knows).
    #[inline(always)]
    fn slot_words(&self, offset: usize) -> &[AtomicU64; SLOT_WORDS] {
        debug_assert!(offset & 7 == 0 && offset + format::SLOT_SIZE as usize <= self.mapping.len);
        // SAFETY: `offset` is a slot offset from `slot_offset` (a lane's slot, inside the
        // mapping, 128-byte aligned in a page-aligned mapping), so the 16 words lie in the
        // mapping that `self.mapping` keeps alive; they are only ever accessed through atomics.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add(offset)
                .cast::<[AtomicU64; SLOT_WORDS]>()
        }
    }

    #[inline(always)]
    fn write_body(
        &self,
        words: &[AtomicU64; SLOT_WORDS],
        lane_index: u32,
        index: u64,
        body: &Body<'_>,
    ) {
        let label = &body.label[..body.label.len().min(format::LABEL_CAPACITY)];
        let label_len = label.len();
        let meta = u64::from(body.tid)
            | (u64::from(body.kind) << 32)
            | ((label_len as u64) << 40)
            | (u64::from(body.call_id) << 48);
        let args = body.args;
        let put = |at: usize, v: u64| words[at / 8].store(v.to_le(), Ordering::Relaxed);
        put(slot::MONOTONIC_NS, body.now);
        put(slot::TID, meta);
        put(slot::BYTES, args.bytes);
        put(slot::PTR, args.ptr);
        put(slot::PTR2, args.ptr2);
        put(slot::STREAM, args.stream);
        put(
            slot::CHUNK,
            u64::from(args.chunk) | (u64::from(args.chunk_count) << 32),
        );
        put(
            slot::TENSOR_FIRST,
            u64::from(args.tensor_first) | (u64::from(args.tensor_count) << 32),
        );
        put(
            slot::REF_INDEX,
            body.enter_ref
                .unwrap_or_else(|| ref_word(lane_index, index)),
        );
        put(slot::RESULT, body.result as u64);
        for word_index in 0..format::LABEL_CAPACITY / 8 {
            put(slot::LABEL + word_index * 8, label_word(label, word_index));
        }
    }

    /// A thread without a current lane for this writer: find or claim one, else use the shared
    /// lane.
    #[cold]
    #[inline(never)]
    fn record_slow(&self, body: Body<'_>) -> Option<(u32, u64)> {
        let generation = FORK_GENERATION.load(Ordering::Relaxed);
        let mut cache = LANE_CACHE.with(Cell::get);
        if cache.generation != generation || cache.tid == 0 {
            // First record of this thread, or the first in a child after fork: the parent's
            // leases belong to the parent's thread (the mapping is shared with it).
            cache = LaneCache {
                writer_id: 0,
                generation,
                tid: gettid(),
                lane: 0,
                retry_in: 0,
            };
        }
        if cache.writer_id != self.id {
            cache.writer_id = self.id;
            cache.lane = leased_lane(self.id, generation).unwrap_or(0);
            cache.retry_in = 0;
        }
        if cache.lane == 0 {
            if cache.retry_in == 0 {
                cache.lane = self.claim_lane(cache.tid, generation).unwrap_or(0);
                cache.retry_in = CLAIM_RETRY_RECORDS;
            }
            cache.retry_in -= 1;
        }
        LANE_CACHE.with(|cell| cell.set(cache));
        let body = Body {
            tid: cache.tid,
            ..body
        };
        if cache.lane != 0 {
            return Some(self.record_in_own_lane(cache.lane, &body));
        }
        self.record_shared(&body)
    }

    /// Claims a free lane for thread `tid` (one compare-and-swap on its owner word) and leases it
    /// to this thread, so it is released when the thread exits. `None` if every lane is owned or
    /// the thread is being torn down (its lease could not be released).
    fn claim_lane(&self, tid: u32, generation: u32) -> Option<u32> {
        let owned_lanes = self.lane_count.checked_sub(1).filter(|&n| n > 0)?;
        let start = tid % owned_lanes;
        for step in 0..owned_lanes {
            let lane_index = 1 + (start + step) % owned_lanes;
            let owner = self.lane_word(lane_index, lane::OWNER);
            if owner.load(Ordering::Relaxed) != 0 {
                continue;
            }
            if owner
                .compare_exchange(0, u64::from(tid), Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {
                continue;
            }
            let lease = Lease {
                mapping: Arc::downgrade(&self.mapping),
                writer_id: self.id,
                lane: lane_index,
                generation,
            };
            let leased = LEASES
                .try_with(|leases| {
                    let mut leases = leases.borrow_mut();
                    leases.retain(|lease| lease.mapping.strong_count() > 0);
                    leases.push(lease);
                })
                .is_ok();
            if !leased {
                owner.store(0, Ordering::Release);
                return None;
            }
            self.mapping
                .claimed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(lane_index);
            return Some(lane_index);
        }
        None
    }

    /// The version-1 protocol on lane 0, shared by every thread without a lane of its own.
    fn record_shared(&self, body: &Body<'_>) -> Option<(u32, u64)> {
        let head = self.lane_word(0, lane::HEAD);
        for _ in 0..MAX_CLAIM_ATTEMPTS {
            let index = head.fetch_add(1, Ordering::Relaxed);
            let words = self.slot_words(self.slot_offset(0, index));
            let seq = &words[slot::SEQ / 8];
            let busy = format::busy_seq(index);
            let mut current = seq.load(Ordering::Relaxed);
            let owned = loop {
                // Busy (odd): another writer is filling it (or died doing so). Newer: a later
                // index already lives here. Either way this index is skipped. The closed flag
                // (bit 63) is ignored: it marks the old record, which is being replaced.
                let old = current & !format::SEQ_CLOSED;
                if old & 1 == 1 || old >= busy {
                    break false;
                }
                match seq.compare_exchange_weak(current, busy, Ordering::Acquire, Ordering::Relaxed)
                {
                    Ok(_) => break true,
                    Err(seen) => current = seen,
                }
            };
            if !owned {
                continue;
            }
            // Order the busy mark before every body store (the seqlock writer's release fence).
            fence(Ordering::Release);
            self.write_body(words, 0, index, body);
            seq.store(format::final_seq(index), Ordering::Release);
            if index & (RECALIBRATE_EVERY - 1) == 0 {
                self.maybe_recalibrate(body.now);
            }
            return Some((0, index));
        }
        self.word(header::DROPPED).fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Marks the enter record at (`lane_index`, index ≡ `index_low` mod 2^32) closed, if it is
    /// still in its slot. Only for exits recorded in another lane than their enter.
    #[cold]
    #[inline(never)]
    fn close_in_place(&self, lane_index: u32, index_low: u64) {
        if lane_index >= self.lane_count {
            return;
        }
        let seq = self.word(self.slot_offset(lane_index, index_low) + slot::SEQ);
        let current = seq.load(Ordering::Relaxed);
        if current == 0 || current & (format::SEQ_CLOSED | 1) != 0 {
            return;
        }
        let index = current / 2 - 1;
        if index & format::LANE_INDEX_MASK != index_low {
            return;
        }
        // Fails harmlessly if the owner rewrote the slot meanwhile: the enter is gone then.
        let _ = seq.compare_exchange(
            current,
            current | format::SEQ_CLOSED,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Refreshes the header's calibration pair when it is a second old (counter clocks only), so
    /// readers convert with a frequency measured over the ring's whole life and an anchor at most
    /// about a second (and 64 records of some lane) before any record.
    #[cold]
    #[inline(never)]
    fn maybe_recalibrate(&self, now: u64) {
        let TimeSource::Counter { hz } = self.time else {
            return;
        };
        let last = self.word(header::CALIB_COUNTER).load(Ordering::Relaxed);
        if now.saturating_sub(last) < hz {
            return;
        }
        let seq = self.word(header::CALIB_SEQ);
        let current = seq.load(Ordering::Relaxed);
        if current & 1 == 1
            || seq
                .compare_exchange(current, current + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        fence(Ordering::Release);
        let (counter_at, monotonic_ns) = counter::pair();
        self.word(header::CALIB_COUNTER)
            .store(counter_at, Ordering::Relaxed);
        self.word(header::CALIB_MONOTONIC_NS)
            .store(monotonic_ns, Ordering::Relaxed);
        seq.store(current + 2, Ordering::Release);
    }
}

/// Bytes `8k..8k+8` of `label` as a little-endian word, zero-padded: whole words are one unaligned
/// load each, so the record path never calls `memcpy` for a label.
#[inline(always)]
fn label_word(label: &[u8], k: usize) -> u64 {
    let start = k * 8;
    if let Some(chunk) = label.get(start..start + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        return u64::from_le_bytes(word);
    }
    let rest = label.len().saturating_sub(start);
    if rest == 0 {
        return 0;
    }
    if label.len() >= 8 {
        // The last 8 bytes of the label in one load, shifted so its bytes `start..` come first
        // (no byte loop on the record path).
        let mut word = [0u8; 8];
        word.copy_from_slice(&label[label.len() - 8..]);
        return u64::from_le_bytes(word) >> (8 * (8 - rest));
    }
    let mut word = 0u64;
    for (shift, &byte) in label[start..].iter().enumerate() {
        word |= u64::from(byte) << (8 * shift);
    }
    word
}

/// One record's contents, passed down the record path.
#[derive(Clone, Copy)]
struct Body<'a> {
    now: u64,
    tid: u32,
    kind: u8,
    call_id: u16,
    args: &'a Args,
    label: &'a [u8],
    enter_ref: Option<u64>,
    result: i64,
}

/// Maps the first `map_len` bytes of `file` (already at least that long) read-write and shared, so
/// records land in the page cache where the agent reads them.
fn map_shared(file: File, map_len: usize, path: &Path) -> Result<Mapping> {
    // SAFETY: a fresh shared mapping of a regular file the caller sized to at least `map_len` bytes;
    // the result is checked before use and unmapped in `Mapping::drop`.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(Error::io(path, "mmap", std::io::Error::last_os_error()));
    }
    let base =
        NonNull::new(raw.cast::<u8>()).ok_or_else(|| Error::Create("mmap returned null".into()))?;
    Ok(Mapping {
        base,
        len: map_len,
        claimed: Mutex::new(Vec::new()),
        _file: file,
    })
}

/// The file name of a ring in a ring directory: `<pid>-<starttime>.ring`.
pub fn ring_file_name(pid: u32, start_time_ticks: u64) -> String {
    format!("{pid}-{start_time_ticks}.ring")
}

/// Bumped in the child after `fork`, so cached thread ids and lanes are refreshed there.
static FORK_GENERATION: AtomicU32 = AtomicU32::new(0);

/// A thread's current lane: the record path's only thread-local state (no destructor, so it is
/// one `fs`/`tpidr_el0`-relative load and stays readable during thread teardown).
#[derive(Debug, Clone, Copy)]
struct LaneCache {
    /// The [`Writer::id`] the lane belongs to; 0 = none.
    writer_id: u64,
    generation: u32,
    /// This thread's id (0 = not yet known).
    tid: u32,
    /// 0 = no lane of its own (the shared lane).
    lane: u32,
    /// Shared-lane records left before the next attempt to claim a lane.
    retry_in: u32,
}

/// A lane this thread owns; released when the thread exits (if the writer still exists and this is
/// the process that claimed it).
struct Lease {
    mapping: Weak<Mapping>,
    writer_id: u64,
    lane: u32,
    generation: u32,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.generation != FORK_GENERATION.load(Ordering::Relaxed) {
            return;
        }
        let _ = LANE_CACHE.try_with(|cell| {
            let cache = cell.get();
            if cache.writer_id == self.writer_id && cache.lane == self.lane {
                cell.set(LaneCache { lane: 0, ..cache });
            }
        });
        if let Some(mapping) = self.mapping.upgrade() {
            mapping
                .claimed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|&lane_index| lane_index != self.lane);
            mapping.release_lane(self.lane);
        }
    }
}

thread_local! {
    static LANE_CACHE: Cell<LaneCache> = const {
        Cell::new(LaneCache { writer_id: 0, generation: 0, tid: 0, lane: 0, retry_in: 0 })
    };
    static LEASES: RefCell<Vec<Lease>> = const { RefCell::new(Vec::new()) };
}

/// The lane this thread already owns in writer `writer_id`, if any.
fn leased_lane(writer_id: u64, generation: u32) -> Option<u32> {
    LEASES
        .try_with(|leases| {
            leases
                .borrow()
                .iter()
                .find(|lease| lease.writer_id == writer_id && lease.generation == generation)
                .map(|lease| lease.lane)
        })
        .ok()
        .flatten()
}

#[cold]
fn gettid() -> u32 {
    // SAFETY: SYS_gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

fn register_fork_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering a child handler that only does an atomic increment (async-signal
        // safe, as a post-fork child handler must be).
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
}

#[cfg(test)]
mod tests;
