//! Pinned staging memory: the ring's one allocation, its registration groups and (for
//! `Overlap`) the page faults packers take before they pack.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use super::options::StagingMemory;
use crate::error::{Error, Result};
use crate::outcome::elapsed_ns;
use crate::trace::{Site, Traced};

/// Transparent huge page size the registered mapping is aligned to.
pub(super) const HUGE_PAGE: usize = 2 << 20;

/// Buffers registered by one `cuMemHostRegister` each, in ring order: `[0]`, `[1]`, `[2, 3]`,
/// `[4..8)`, … (boundaries at powers of two, the last group cut at `buffers`). Filled lazily
/// (`Overlap`), the first buffer is page-locked after one small registration, so the first copy
/// starts early, and the ring needs only about log2(buffers) + 1 calls (each costs a fixed
/// ~60 µs on top of ~30 µs per MiB on an H200 host).
pub fn registration_groups(buffers: usize) -> Vec<std::ops::Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0;
    while start < buffers {
        let end = if start == 0 { 1 } else { start * 2 }.min(buffers);
        groups.push(start..end);
        start = end;
    }
    groups
}

/// Consecutive staging buffers page-locked (or not yet) by one registration.
#[derive(Debug)]
pub(super) struct Registration {
    pub(super) buffers: std::ops::Range<usize>,
    /// Page-locked now. Only the submitting thread registers and unregisters.
    pub(super) registered: AtomicBool,
}

/// `Overlap` staging's page faults, taken by the packing threads of the stager's first
/// uploads before they pack: each claims the next huge page of the mapping (in ring order, so
/// the first buffers are ready first) and writes to it. Nothing is packed into a page, and no
/// group is registered, before its fault is done: registering touched memory is ~7× faster
/// than letting `cuMemHostRegister` fault it in on one thread, and the zeroing write must not
/// race a packer's bytes. `Register` staging's [`prefault`] takes the same faults before it
/// registers, from threads of its own.
#[derive(Debug)]
pub(super) struct FaultPass {
    /// The mapping's address (as an integer: the pass is shared between threads).
    base: usize,
    /// Next huge page to claim.
    next: AtomicUsize,
    /// Per huge page: faulted in.
    done: Vec<AtomicBool>,
}

impl FaultPass {
    pub(super) fn new(base: *mut u8, len: usize) -> FaultPass {
        FaultPass {
            base: base as usize,
            next: AtomicUsize::new(0),
            done: (0..len.div_ceil(HUGE_PAGE))
                .map(|_| AtomicBool::new(false))
                .collect(),
        }
    }

    /// Huge pages holding mapping offsets `[from, to)`.
    pub(super) fn pages(from: usize, to: usize) -> std::ops::Range<usize> {
        from / HUGE_PAGE..to.div_ceil(HUGE_PAGE)
    }

    /// Claims the next page below `limit` and faults it in; false when every page below
    /// `limit` is claimed (some may still be faulting on other threads).
    pub(super) fn fault_next(&self, limit: usize) -> bool {
        let limit = limit.min(self.done.len());
        let mut page = self.next.load(Ordering::Relaxed);
        loop {
            if page >= limit {
                return false;
            }
            match self.next.compare_exchange_weak(
                page,
                page + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => page = now,
            }
        }
        for at in (page * HUGE_PAGE..(page + 1) * HUGE_PAGE).step_by(4096) {
            // SAFETY: inside the mapping (`page < done.len()`, and the mapping's length is a
            // multiple of HUGE_PAGE), readable and writable. Only this thread claimed the page,
            // and until `done[page]` is set nobody else reads or writes it (packers and the
            // registering submitter wait for it).
            unsafe { std::ptr::write_volatile((self.base + at) as *mut u8, 0) };
        }
        // Release: the faulted, zeroed page is the packers' from here on.
        self.done[page].store(true, Ordering::Release);
        true
    }

    /// Every page holding mapping offsets `[from, to)` is faulted in.
    pub(super) fn is_done(&self, from: usize, to: usize) -> bool {
        self.done[Self::pages(from, to)]
            .iter()
            .all(|d| d.load(Ordering::Acquire))
    }
}

/// Pinned staging memory: one allocation holding every buffer.
#[derive(Debug)]
pub(super) struct Staging {
    pub(super) base: *mut u8,
    /// Bytes allocated.
    pub(super) len: usize,
    /// Distance between buffers (the buffer size rounded up to a page).
    pub(super) stride: usize,
    pub(super) memory: StagingMemory,
    /// The buffers' registrations: one group of all of them, page-locked at creation, but for
    /// `Overlap` staging ([`registration_groups`], each locked by the upload that first needs it).
    pub(super) groups: Vec<Registration>,
    /// `Overlap`: the page faults still to take (by packing threads).
    pub(super) faults: Option<FaultPass>,
    /// Page-locked read-only for the device (`CU_MEMHOSTREGISTER_READ_ONLY`).
    pub(super) read_only: bool,
}

impl Staging {
    /// The registration group holding buffer `b`.
    pub(super) fn group_of(&self, b: usize) -> usize {
        self.groups.partition_point(|g| g.buffers.end <= b)
    }

    /// Mapping offsets `[from, to)` of group `g`'s buffers.
    pub(super) fn group_span(&self, g: usize) -> (usize, usize) {
        let buffers = &self.groups[g].buffers;
        (buffers.start * self.stride, buffers.end * self.stride)
    }

    /// Every page of group `g` is faulted in (always, but for `Overlap` staging).
    pub(super) fn group_faulted(&self, g: usize) -> bool {
        let (from, to) = self.group_span(g);
        self.faults.as_ref().is_none_or(|f| f.is_done(from, to))
    }
}

/// An anonymous private mapping of `len` bytes (a multiple of [`HUGE_PAGE`]) aligned to
/// [`HUGE_PAGE`], advised for transparent huge pages.
pub(super) fn map_huge_aligned(len: usize) -> Result<*mut u8> {
    let span = len
        .checked_add(HUGE_PAGE)
        .ok_or_else(|| Error::InvalidOptions("staging size overflows".into()))?;
    // SAFETY: a fresh anonymous mapping; no existing memory is affected.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(Error::Os {
            what: "mmap of pinned staging memory",
            source: std::io::Error::last_os_error(),
        });
    }
    let raw = raw.cast::<u8>();
    let lead = raw.align_offset(HUGE_PAGE);
    let trail = span - lead - len;
    // SAFETY: `raw..raw+span` is our mapping; we unmap its unaligned head and tail, keeping
    // `raw+lead .. raw+lead+len` (page-aligned: mmap returns pages and HUGE_PAGE is a multiple).
    unsafe {
        if lead > 0 {
            libc::munmap(raw.cast(), lead);
        }
        if trail > 0 {
            libc::munmap(raw.add(lead + len).cast(), trail);
        }
    }
    // SAFETY: inside the mapping just created (the kept part).
    let base = unsafe { raw.add(lead) };
    // Best effort: without transparent huge pages the registration still works, on 4 KiB pages.
    // SAFETY: advice on our own mapping.
    unsafe { libc::madvise(base.cast(), len, libc::MADV_HUGEPAGE) };
    Ok(base)
}

/// Faults in (and so zeroes) `base..base+len`, a fresh mapping of ours whose length is a
/// multiple of [`HUGE_PAGE`], from up to `threads` threads. `cuMemHostRegister` would otherwise
/// fault every page in itself, on one thread: on an H200 host, registering 32 MiB took 6.8 ms
/// untouched against 1.0 ms touched, and one thread faults 32 MiB in 4.6 ms.
pub(super) fn prefault(base: *mut u8, len: usize, threads: usize) {
    let faults = FaultPass::new(base, len);
    let fault_all = || while faults.fault_next(usize::MAX) {};
    std::thread::scope(|scope| {
        for _ in 1..threads.clamp(1, faults.done.len().max(1)) {
            if std::thread::Builder::new()
                .spawn_scoped(scope, fault_all)
                .is_err()
            {
                // No thread to spare: this thread faults the rest.
                break;
            }
        }
        fault_all();
    });
}

/// Page-locks group `g` of `Overlap` staging unless it is locked; its pages must be faulted
/// in. Returns the nanoseconds the registration took (0 if there was none).
pub(super) fn register_group(t: &Traced, site: &Site, s: &Staging, g: usize) -> Result<u64> {
    let group = &s.groups[g];
    if group.registered.load(Ordering::Acquire) {
        return Ok(0);
    }
    let (from, to) = s.group_span(g);
    let started = Instant::now();
    // SAFETY: the group's buffers lie in our mapping and start on a page (the stride is a
    // multiple of 4096); they are registered once (the flag is set right after, and only the
    // submitting thread registers) and unregistered by `unregister_group` before the unmap;
    // registered read-only only if nothing on the device writes staging (it is only ever a
    // copy's source); every page was faulted in by a write (`FaultPass`), so a read-only pin
    // holds the pages the packers write, not the shared zero page.
    unsafe {
        t.host_register(
            site,
            s.base.wrapping_add(from),
            (to - from) as u64,
            s.read_only,
        )
    }?;
    group.registered.store(true, Ordering::Release);
    Ok(elapsed_ns(started))
}

/// Unlocks group `g` of `Overlap` staging if it is locked; returns the nanoseconds it took.
///
/// # Safety
/// No copy out of the group's buffers may be in flight.
pub(super) unsafe fn unregister_group(
    t: &Traced,
    site: &Site,
    s: &Staging,
    g: usize,
) -> Result<u64> {
    let group = &s.groups[g];
    if !group.registered.load(Ordering::Acquire) {
        return Ok(0);
    }
    let (from, to) = s.group_span(g);
    let started = Instant::now();
    // SAFETY: registered once by `register_group` at this address; no copy in flight (the
    // caller's contract). Still registered if this fails, so teardown tries again.
    unsafe { t.host_unregister(site, s.base.wrapping_add(from), (to - from) as u64) }?;
    group.registered.store(false, Ordering::Release);
    Ok(elapsed_ns(started))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pages of `base..base+len` that are resident (`mincore`).
    fn resident_pages(base: *mut u8, len: usize) -> usize {
        let mut vec = vec![0u8; len.div_ceil(4096)];
        // SAFETY: `base..base+len` is a live mapping of ours; `vec` has one byte per page.
        let rc = unsafe { libc::mincore(base.cast(), len, vec.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 == 1).count()
    }

    #[test]
    fn prefault_makes_every_page_of_the_staging_mapping_resident() {
        for (huge_pages, threads) in [(1, 1), (3, 2), (3, 8), (5, 3)] {
            let len = huge_pages * HUGE_PAGE;
            let base = map_huge_aligned(len).unwrap();
            assert_eq!(resident_pages(base, len), 0, "fresh mapping");
            prefault(base, len, threads);
            assert_eq!(
                resident_pages(base, len),
                len / 4096,
                "{huge_pages} × 2 MiB, {threads}"
            );
            // SAFETY: our mapping, unused elsewhere.
            unsafe { libc::munmap(base.cast(), len) };
        }
    }

    #[test]
    fn registration_groups_double_and_cover_the_ring_once() {
        assert!(registration_groups(0).is_empty());
        assert_eq!(
            registration_groups(1),
            vec![std::ops::Range { start: 0, end: 1 }]
        );
        assert_eq!(registration_groups(3), [0..1, 1..2, 2..3]);
        assert_eq!(registration_groups(8), [0..1, 1..2, 2..4, 4..8]);
        assert_eq!(registration_groups(11), [0..1, 1..2, 2..4, 4..8, 8..11]);
        for n in 1..100 {
            let groups = registration_groups(n);
            assert_eq!(groups.first().unwrap().start, 0);
            assert_eq!(groups.last().unwrap().end, n);
            assert!(groups.windows(2).all(|w| w[0].end == w[1].start));
            assert!(groups.len() <= n.ilog2() as usize + 2, "{n}: {groups:?}");
        }
    }

    /// The fault pass hands out each page once, in order, never past the limit (a later, larger
    /// upload takes the rest), and makes exactly the pages it marks done resident.
    #[test]
    fn the_fault_pass_faults_each_page_once_up_to_the_limit() {
        let len = 5 * HUGE_PAGE;
        let base = map_huge_aligned(len).unwrap();
        let faults = FaultPass::new(base, len);
        assert!(!faults.is_done(0, 1));
        let mut taken = 0;
        while faults.fault_next(2) {
            taken += 1;
        }
        assert_eq!(taken, 2);
        assert!(faults.is_done(0, 2 * HUGE_PAGE));
        assert!(!faults.is_done(0, 2 * HUGE_PAGE + 1));
        assert_eq!(resident_pages(base, len), 2 * HUGE_PAGE / 4096);
        // Threads share the rest; a limit past the end stops at the end.
        let taken_by_threads: usize = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        let mut taken = 0;
                        while faults.fault_next(usize::MAX) {
                            taken += 1;
                        }
                        taken
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).sum()
        });
        assert_eq!(taken_by_threads, 3);
        assert!(faults.is_done(0, len));
        assert_eq!(resident_pages(base, len), len / 4096);
        assert!(!faults.fault_next(usize::MAX));
        // SAFETY: our mapping, unused elsewhere.
        unsafe { libc::munmap(base.cast(), len) };
    }
}
