//! One upload's shared packing state: packing threads claim pieces, the submitter waits for
//! whole slices and releases buffers whose copies finished.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use super::layout::{pack_range, pack_range_per_tensor, ArenaLayout};
use super::staging::{FaultPass, Staging};
use crate::error::{chunk_failed, Error, Result};
use crate::pack::{self, PackStore};
use crate::plan::Plan;
use crate::workload::TensorSource;

/// One upload's shared packing state.
pub(super) struct Pipeline<'a> {
    pub(super) src: &'a dyn TensorSource,
    pub(super) plan: &'a Plan,
    pub(super) layout: &'a ArenaLayout,
    /// `Overlap` staging's page faults: taken by packers before they pack, waited for before
    /// a piece is written or a group registered.
    pub(super) faults: Option<&'a FaultPass>,
    /// Huge pages of staging this upload uses (faults beyond are left to later uploads).
    pub(super) fault_limit: usize,
    pub(super) staging_base: usize,
    pub(super) stride: u64,
    pub(super) buffers: u64,
    pub(super) slice: u64,
    pub(super) piece: u64,
    pub(super) pieces_per_slice: u64,
    /// Next piece to claim (slice = piece / pieces_per_slice).
    pub(super) next_piece: AtomicU64,
    /// Slices `0..released` were copied out: slice `s` may be packed iff `s < released + buffers`.
    pub(super) released: AtomicU64,
    /// Pieces packed, per slice.
    pub(super) filled: Vec<AtomicU32>,
    pub(super) stop: AtomicBool,
    /// The first packing error and its slice.
    pub(super) error: Mutex<Option<(u64, Error)>>,
    /// The store in use: [`UNDECIDED`] while `Auto` calibrates.
    pub(super) decided: AtomicU8,
    pub(super) calibration: Mutex<Calibration>,
    pub(super) park: bool,
    /// [`super::PinnedOptions::gather`].
    pub(super) gather: bool,
    pub(super) submitter: std::thread::Thread,
}

pub(super) const UNDECIDED: u8 = 0;
pub(super) const DECIDED_PLAIN: u8 = 1;
pub(super) const DECIDED_STREAMING: u8 = 2;

/// Calibration samples of `PackStore::Auto` per side before deciding.
const CALIBRATION_SAMPLES: usize = 16;

/// `PackStore::Auto`'s samples: nanoseconds per byte of whole calibration pieces, per store.
/// Medians, not sums, decide: one descheduled thread must not flip the choice.
#[derive(Default)]
pub(super) struct Calibration {
    pub(super) plain: Vec<f64>,
    pub(super) streaming: Vec<f64>,
}

impl Calibration {
    fn median(samples: &[f64]) -> Option<f64> {
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    }

    pub(super) fn median_mbps(samples: &[f64]) -> u64 {
        Self::median(samples).map_or(0, |ns_per_byte| (1e3 / ns_per_byte) as u64)
    }

    /// The faster store once both sides have enough samples.
    fn decision(&self) -> Option<u8> {
        if self.plain.len() < CALIBRATION_SAMPLES || self.streaming.len() < CALIBRATION_SAMPLES {
            return None;
        }
        let (plain, streaming) = (Self::median(&self.plain)?, Self::median(&self.streaming)?);
        Some(if streaming < plain {
            DECIDED_STREAMING
        } else {
            DECIDED_PLAIN
        })
    }
}

/// Sets the stop flag and wakes every worker when dropped (also on an early return or
/// unwinding), so the scope's join never waits on a sleeping or blocked worker.
pub(super) struct StopOnDrop<'a> {
    pub(super) stop: &'a AtomicBool,
    pub(super) workers: Vec<std::thread::Thread>,
}

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for w in &self.workers {
            w.unpark();
        }
    }
}

impl Pipeline<'_> {
    pub(super) fn buffer(&self, slice: u64) -> usize {
        self.staging_base + ((slice % self.buffers) * self.stride) as usize
    }

    fn idle(&self, spins: &mut u32) {
        *spins = spins.saturating_add(1);
        let limit = if self.park { 256 } else { 4096 };
        if *spins < limit {
            std::hint::spin_loop();
        } else if self.park {
            // Spurious or early returns are fine: every caller re-checks its condition.
            std::thread::park_timeout(std::time::Duration::from_millis(10));
        } else {
            std::thread::yield_now();
        }
    }

    fn fail(&self, slice: u64, e: Error) {
        self.error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert((slice, e));
        self.stop.store(true, Ordering::Release);
        self.submitter.unpark();
    }

    /// Packing thread: claim pieces in order until none are left or the upload stops.
    pub(super) fn worker(&self) {
        if let Some(faults) = self.faults {
            while !self.stop.load(Ordering::Relaxed) {
                if !faults.fault_next(self.fault_limit) {
                    break;
                }
            }
        }
        let total = self.filled.len() as u64 * self.pieces_per_slice;
        loop {
            let k = self.next_piece.fetch_add(1, Ordering::Relaxed);
            if k >= total {
                return;
            }
            let s = k / self.pieces_per_slice;
            let mut spins = 0u32;
            while s >= self.released.load(Ordering::Acquire) + self.buffers {
                if self.stop.load(Ordering::Acquire) {
                    return;
                }
                self.idle(&mut spins);
            }
            if !self.pack_piece(k) {
                return;
            }
        }
    }

    /// Packs claimed piece `k`, whose buffer is free, and publishes it; false if the upload
    /// stopped or packing failed (then the failure is recorded).
    fn pack_piece(&self, k: u64) -> bool {
        let s = k / self.pieces_per_slice;
        if self.stop.load(Ordering::Acquire) {
            return false;
        }
        let from = s * self.slice + (k % self.pieces_per_slice) * self.piece;
        let to = (from + self.piece)
            .min((s + 1) * self.slice)
            .min(self.layout.bytes);
        if from < to {
            let dst = self.buffer(s) + (from - s * self.slice) as usize;
            if let Some(faults) = self.faults {
                let at = dst - self.staging_base;
                let mut spins = 0u32;
                while !faults.is_done(at, at + (to - from) as usize) {
                    if self.stop.load(Ordering::Acquire) {
                        return false;
                    }
                    if !faults.fault_next(self.fault_limit) {
                        self.idle(&mut spins);
                    }
                }
            }
            let (store, calibrating) = self.store_for(k);
            let started = calibrating.then(Instant::now);
            let packed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.pack(store, dst, from, to)
            }))
            .unwrap_or_else(|_| Err(Error::Worker("packing thread panicked".into())));
            if let Err(e) = packed {
                self.fail(s, e);
                return false;
            }
            pack::publish_fence(store);
            // Only whole pieces are comparable samples.
            if let (Some(started), true) = (started, to - from == self.piece) {
                self.calibrate(store, started, to - from);
            }
        }
        // Release: the piece's bytes are visible to the submitter that sees the count.
        let n = self.filled[s as usize].fetch_add(1, Ordering::Release) + 1;
        if self.park && u64::from(n) == self.pieces_per_slice {
            self.submitter.unpark();
        }
        true
    }

    /// Submitter: claims and packs the next piece if its buffer is free now; false if there is
    /// none to take. It never claims a piece it would have to wait for: only the submitter
    /// frees buffers, so that wait could never end.
    fn help_pack(&self) -> bool {
        let total = self.filled.len() as u64 * self.pieces_per_slice;
        let k = self.next_piece.load(Ordering::Relaxed);
        if k >= total
            || k / self.pieces_per_slice >= self.released.load(Ordering::Acquire) + self.buffers
        {
            return false;
        }
        if self
            .next_piece
            .compare_exchange(k, k + 1, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            // A packer took it: that piece is in hand, which is what waiting is for.
            return true;
        }
        self.pack_piece(k);
        true
    }

    /// The store for piece `k`, and whether the piece is a calibration sample (`Auto`,
    /// undecided: even pieces plain, odd pieces streaming, under the same conditions).
    fn store_for(&self, k: u64) -> (PackStore, bool) {
        match self.decided.load(Ordering::Relaxed) {
            DECIDED_PLAIN => (PackStore::Plain, false),
            DECIDED_STREAMING => (PackStore::Streaming, false),
            _ if k.is_multiple_of(2) => (PackStore::Plain, true),
            _ => (PackStore::Streaming, true),
        }
    }

    fn calibrate(&self, store: PackStore, started: Instant, bytes: u64) {
        let ns_per_byte = started.elapsed().as_nanos() as f64 / bytes as f64;
        let mut c = self.calibration.lock().unwrap_or_else(|p| p.into_inner());
        match store {
            PackStore::Streaming => c.streaming.push(ns_per_byte),
            _ => c.plain.push(ns_per_byte),
        }
        if let Some(choice) = c.decision() {
            // The first decision stands; later samples (pieces already under way) only add to
            // the record.
            let _ = self.decided.compare_exchange(
                UNDECIDED,
                choice,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// The store that packed (or will pack) the rest of the upload.
    pub(super) fn store_used(&self) -> PackStore {
        match self.decided.load(Ordering::Relaxed) {
            DECIDED_PLAIN => PackStore::Plain,
            DECIDED_STREAMING => PackStore::Streaming,
            _ => PackStore::Auto,
        }
    }

    /// Copies arena bytes `[from, to)` of the tensors to staging address `dst`.
    fn pack(&self, store: PackStore, dst: usize, from: u64, to: u64) -> Result<()> {
        // SAFETY: `dst` addresses arena offset `from` inside a live staging buffer that holds
        // the whole slice, and `from..to` lies in that slice, so every write stays inside the
        // buffer. Pieces are disjoint, and the buffer's previous copy completed (its event was
        // waited for before `released` passed this slice), so nothing else reads or writes
        // these bytes meanwhile.
        unsafe {
            let pack = if self.gather {
                pack_range
            } else {
                pack_range_per_tensor
            };
            pack(
                self.src,
                self.plan,
                self.layout,
                store,
                dst as *mut u8,
                from,
                to,
            )
        }
    }

    /// Submitter: waits until every piece of `slice` is packed, or a packing thread failed.
    /// Meanwhile, rather than spin, it does `chore` (a short piece of other work; false when
    /// there is none left) and, with `help`, packs pieces itself.
    pub(super) fn wait_filled(
        &self,
        slice: u64,
        help: bool,
        chore: &mut dyn FnMut() -> Result<bool>,
    ) -> Result<()> {
        let mut spins = 0u32;
        loop {
            // Acquire: pairs with the packers' release, so their bytes are visible.
            if u64::from(self.filled[slice as usize].load(Ordering::Acquire))
                == self.pieces_per_slice
            {
                return Ok(());
            }
            self.stopped()?;
            if chore()? || (help && self.help_pack()) {
                continue;
            }
            self.idle(&mut spins);
        }
    }

    /// Submitter: waits until every page of staging group `g` is faulted in, taking faults
    /// itself while any are unclaimed, or a packing thread failed.
    pub(super) fn wait_faulted(&self, staging: &Staging, g: usize) -> Result<()> {
        let mut spins = 0u32;
        while !staging.group_faulted(g) {
            self.stopped()?;
            let took = self.faults.is_some_and(|f| f.fault_next(self.fault_limit));
            if !took {
                self.idle(&mut spins);
            }
        }
        Ok(())
    }

    /// `Err` with the packers' failure once the upload stopped.
    fn stopped(&self) -> Result<()> {
        if !self.stop.load(Ordering::Acquire) {
            return Ok(());
        }
        let failed = self.error.lock().unwrap_or_else(|p| p.into_inner()).take();
        Err(match failed {
            Some((s, e)) => chunk_failed("slice", s as usize, self.filled.len(), e),
            None => Error::Worker("packing stopped".into()),
        })
    }

    /// Submitter: slices below `upto` were copied out; their buffers may be refilled.
    pub(super) fn release(&self, upto: u64, workers: &[std::thread::Thread]) {
        self.released.store(upto, Ordering::Release);
        if self.park {
            for w in workers {
                w.unpark();
            }
        }
    }
}
