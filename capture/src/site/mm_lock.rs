//! The mmap lock from a stack: whether a thread waits for an address space's mmap lock (or a VMA's write
//! lock) — [`lock_class`] — and whether a thread in a page fault holds it for read while it sleeps —
//! [`holds_fault_lock`]. The wait graph and the process view group threads by these; the site words use
//! the fault steps.

use super::frame_name::base_name;
use super::rules::SCHEDULER_FRAMES;
use crate::snapshot::StackFrame;

/// Fault handlers that take the mmap lock themselves: on top of a stack (nothing deeper, the lock's `__sched`
/// slow path omitted) they wait for it.
pub(super) const FAULT_LOCK_STEPS: &[&str] =
    &["__do_page_fault", "do_page_fault", "do_user_addr_fault"];

/// Frames of the page-fault path (x86_64, arm64, and the names of older kernels and 32-bit arm).
pub(super) const FAULT_PATH: &[&str] = &[
    "asm_exc_page_fault",
    "exc_page_fault",
    "do_user_addr_fault",
    "handle_mm_fault",
    "do_page_fault",
    "__do_page_fault",
    "page_fault",
    "async_page_fault",
    "do_translation_fault",
    "do_mem_abort",
    "el0_da",
    "do_DataAbort",
    "__dabt_usr",
];

/// Round 25: the generic fault steps under `handle_mm_fault` (mm/memory.c: `__handle_mm_fault` →
/// `handle_pte_fault` → `do_fault` → `do_read_fault` / `do_cow_fault` / `do_shared_fault` → `__do_fault`, which
/// calls the VMA's `->fault`), reached only from a fault (a user fault or GUP's `faultin_page`): a paste cut
/// above `handle_mm_fault` (a freezer's report, a quoted excerpt) is still in a page fault, and the thread
/// holds the mmap lock for read (or the VMA's lock) while it sleeps there. They take no lock themselves, so
/// [`lock_class`] keeps to [`FAULT_PATH`].
pub(super) const FAULT_STEPS: &[&str] = &[
    "__handle_mm_fault",
    "handle_pte_fault",
    "do_fault",
    "__do_fault",
    "do_read_fault",
    "do_cow_fault",
    "do_shared_fault",
];

/// The innermost frame of the page-fault path ([`FAULT_PATH`] or [`FAULT_STEPS`]), if the stack is in a fault.
pub(super) fn fault_frame(frames: &[StackFrame]) -> Option<usize> {
    frames.iter().position(|f| {
        let n = base_name(&f.function);
        FAULT_PATH.contains(&n) || FAULT_STEPS.contains(&n)
    })
}

/// Frames that take the mmap lock (or a VMA's write lock) for a change of the address space.
const MM_CHANGERS: &[&str] = &[
    "vm_mmap_pgoff",
    "do_mmap",
    "__vm_munmap",
    "vm_munmap",
    "do_munmap",
    "do_vmi_munmap",
    "do_mprotect_pkey",
    "mprotect_fixup",
    "do_madvise",
    "madvise_lock",
    "__do_sys_brk",
    "__do_sys_mremap",
    "lock_mm_and_find_vma",
    // fork copies the parent's address space with its mmap_lock held for write.
    "dup_mmap",
    // khugepaged takes it for write to collapse a huge page.
    "collapse_huge_page",
    "mmap_read_lock_killable",
    "mmap_write_lock_killable",
    "__vma_start_write",
    "vma_start_write",
    // Before 4.x.
    "sys_mmap_pgoff",
    "SyS_mmap_pgoff",
    "sys_mprotect",
    "SyS_mprotect",
    "sys_munmap",
    "SyS_munmap",
    "sys_brk",
    "SyS_brk",
];

/// Innermost frames (or wchan) of a wait for the mmap lock or a VMA write lock.
const MM_LOCK_WAITS: &[&str] = &[
    "rwsem_down_write_slowpath",
    "rwsem_down_read_slowpath",
    "down_write_killable",
    "down_read_killable",
    "down_write",
    "down_read",
    "__vma_start_write",
    "vma_start_write",
    "lock_mm_and_find_vma",
    "rwsem_down_read_failed",
    "rwsem_down_read_failed_killable",
    "rwsem_down_write_failed",
    "rwsem_down_write_failed_killable",
    "call_rwsem_down_read_failed",
    "call_rwsem_down_read_failed_killable",
    "call_rwsem_down_write_failed",
    "call_rwsem_down_write_failed_killable",
    "rwsem_down_failed_common",
];

/// The lock class a thread waits for, for grouping threads stuck on the same lock: `mmap_lock` for a thread
/// whose stack waits in an rwsem slow path (or a VMA write lock) from mmap/munmap/mprotect/madvise/brk/mremap or
/// a page fault's mmap-lock step. Stacks omit `__sched` functions, so the innermost frame may be the changer
/// itself (`vm_mmap_pgoff`): that counts as the wait too.
pub fn lock_class(frames: &[StackFrame], wchan: Option<&str>) -> Option<&'static str> {
    let names: Vec<&str> = frames
        .iter()
        .map(|f| base_name(&f.function))
        .filter(|n| !SCHEDULER_FRAMES.contains(n))
        .collect();
    let top = names.first().copied().or(wchan)?;
    let waiting = MM_LOCK_WAITS.contains(&top)
        || MM_CHANGERS.contains(&top)
        || (FAULT_LOCK_STEPS.contains(&top) && !frames.is_empty())
        || wchan.is_some_and(|w| MM_LOCK_WAITS.contains(&w) || MM_CHANGERS.contains(&w));
    // The first frame past the lock primitives: a fault handler that takes the mmap lock itself (before
    // lock_mm_and_find_vma, `__do_page_fault` called down_read directly).
    let caller = names.iter().find(|n| !MM_LOCK_WAITS.contains(n));
    let through_mm = names.iter().any(|n| MM_CHANGERS.contains(n))
        || FAULT_LOCK_STEPS.contains(&top)
        || (MM_LOCK_WAITS.contains(&top) && caller.is_some_and(|c| FAULT_PATH.contains(c)))
        || (frames.is_empty() && wchan.is_some_and(|w| MM_CHANGERS.contains(&w)));
    (waiting && through_mm).then_some("mmap_lock")
}

/// Whether the thread is inside a page fault that is not itself waiting for the mmap lock: such a thread holds
/// the mmap lock for read (or its VMA's lock) for as long as it sleeps, and a writer of the address space waits
/// behind it.
pub fn holds_fault_lock(frames: &[StackFrame], wchan: Option<&str>) -> bool {
    fault_frame(frames).is_some() && lock_class(frames, wchan).is_none()
}
