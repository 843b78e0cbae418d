//! Stack → one-line "site": where a blocked thread is, in words a person reads at a glance.
//!
//! Examples: `ioctl → nvidia_uvm: uvm_ioctl → uvm_api_alloc_semaphore_pool … mutex wait`,
//! `process exit → __fput → nvidia_uvm uvm_release … nv_kthread_q_flush`,
//! `page fault (filemap_fault)`, `ioctl → filesystem freeze (percpu_rwsem_wait)`.
//!
//! The stack decides; the syscall number is only a fallback. `/proc/<tid>/syscall` can be stale: a thread
//! killed while in futex() shows nr 202 while its stack is in `do_exit` → `__fput` → a driver's release
//! (see `tests/data/h200-nvidia-uvm-dstate.json`). Note that on current kernels `/proc/<tid>/stack`
//! omits scheduler functions (`__sched`: mutex/rwsem slow paths, `wait_for_completion`), so the top
//! frame is usually the caller of the lock, not the lock itself.
//!
//! NVIDIA: [`nvidia_site`] names what a driver thread waits for ([`NvidiaWait`]: RM API lock, GPU lock, GSP
//! RPC wait, UVM locks, pinning user pages, …), shown in brackets by [`classify`]; [`nvidia_operation`]
//! joins it with a decoded ioctl argument into the report's sentence.

use crate::snapshot::StackFrame;

/// `uvm_release.isra.0` → `uvm_release`; `foo.part.0.constprop.0` → `foo`.
pub fn base_name(function: &str) -> &str {
    function.split('.').next().unwrap_or(function)
}

fn has(frames: &[StackFrame], names: &[&str]) -> Option<usize> {
    frames
        .iter()
        .position(|f| names.contains(&base_name(&f.function)))
}

/// The syscall the stack entered through (`__x64_sys_ioctl`, `__arm64_sys_ioctl`, `__do_sys_…`).
pub fn syscall_from_stack(frames: &[StackFrame]) -> Option<&str> {
    frames.iter().rev().find_map(|f| {
        let name = base_name(&f.function);
        [
            "__x64_sys_",
            "__arm64_sys_",
            "__ia32_sys_",
            "__do_sys_",
            "__se_sys_",
            "ksys_",
        ]
        .iter()
        .find_map(|p| name.strip_prefix(p))
    })
}

/// Names a wait primitive or a well-known waiter from the innermost frame.
fn wait_kind(frames: &[StackFrame], wchan: Option<&str>) -> Option<String> {
    let top = frames.first().map(|f| base_name(&f.function)).or(wchan)?;
    let kind = match top {
        "__mutex_lock"
        | "mutex_lock"
        | "__mutex_lock_slowpath"
        | "mutex_lock_killable"
        | "mutex_lock_interruptible"
        | "__mutex_lock_killable_slowpath" => "mutex wait",
        "rwsem_down_read_slowpath" | "down_read" | "down_read_killable" => "rwsem wait (read)",
        "rwsem_down_write_slowpath" | "down_write" | "down_write_killable" => "rwsem wait (write)",
        "down" | "__down" | "__down_common" | "down_interruptible" | "down_timeout" => {
            "semaphore wait"
        }
        "percpu_rwsem_wait" | "__percpu_down_read" | "percpu_down_write" => "percpu rwsem wait",
        "wait_for_completion"
        | "wait_for_completion_killable"
        | "wait_for_completion_timeout"
        | "__wait_for_common" => "completion wait",
        "io_schedule" | "folio_wait_bit_common" | "wait_on_page_bit_common" | "bit_wait_io" => {
            "I/O wait"
        }
        "schedule_timeout" | "msleep" | "usleep_range_state" | "hrtimer_nanosleep" => "sleep",
        "futex_wait_queue" | "futex_wait_queue_me" | "futex_wait" => "futex wait",
        "do_mprotect_pkey" | "vm_mmap_pgoff" | "__vm_munmap" | "do_madvise" | "vm_munmap" => {
            return Some(format!("{top} (waits for mmap_lock)"))
        }
        "__vma_start_write" | "vma_start_write" => {
            return Some(format!("{top} (waits for a page fault to leave the VMA)"))
        }
        other => return Some(other.to_string()),
    };
    Some(kind.to_string())
}

/// The first driver the core kernel called into: (module, entry function, operation it called).
fn driver_entry(frames: &[StackFrame]) -> Option<(&str, &str, Option<&str>)> {
    // Outermost module frame = the driver's entry point from the core kernel.
    let outer = frames.iter().rposition(|f| f.module.is_some())?;
    let module = frames[outer].module.as_deref()?;
    // Frames of that module contiguous with the entry.
    let mut first = outer;
    while first > 0 && frames[first - 1].module.as_deref() == Some(module) {
        first -= 1;
    }
    let run = &frames[first..=outer];
    // Prefer a `*_ioctl` dispatcher that is not an `unlocked`/`_entry` wrapper (uvm_ioctl, nvidia_ioctl).
    let entry_idx = run
        .iter()
        .rposition(|f| {
            let n = base_name(&f.function);
            n.ends_with("_ioctl") && !n.contains("unlocked") && !n.ends_with("_entry")
        })
        .or_else(|| {
            run.iter().position(|f| {
                let n = base_name(&f.function);
                n.ends_with("_release") || n.ends_with("_fault") || n.ends_with("_mmap")
            })
        })
        .unwrap_or(run.len() - 1);
    let entry = base_name(&run[entry_idx].function);
    let op = (entry_idx > 0).then(|| base_name(&run[entry_idx - 1].function));
    Some((module, entry, op))
}

fn is_fs_freeze(frames: &[StackFrame], wchan: Option<&str>) -> bool {
    let percpu = wchan == Some("percpu_rwsem_wait")
        || has(frames, &["percpu_rwsem_wait", "__percpu_down_read"]).is_some();
    // percpu_rwsem_wait also serves cgroup_threadgroup_rwsem and others; require the superblock
    // write-protection path (sb_start_write / mnt_want_write, often inlined into a vfs_* caller)
    // when there is a stack to look at.
    let fs_path = frames.iter().any(|f| {
        let n = base_name(&f.function);
        n.starts_with("mnt_want_write")
            || n.starts_with("__sb_start")
            || n.starts_with("sb_start")
            || n == "file_start_write"
            || n.starts_with("vfs_")
            || n == "do_truncate"
            || n == "do_sys_ftruncate"
            || n.starts_with("ioctl_")
            || n == "do_vfs_ioctl"
            // A write fault into a shared file mapping: sb_start_pagefault, often inlined.
            || n == "do_page_mkwrite"
            || n.ends_with("_page_mkwrite")
    });
    percpu && (fs_path || frames.is_empty())
}

/// Frames of the page-fault path (x86_64 and arm64).
const FAULT_PATH: &[&str] = &[
    "asm_exc_page_fault",
    "exc_page_fault",
    "do_user_addr_fault",
    "handle_mm_fault",
    "do_page_fault",
    "do_translation_fault",
    "do_mem_abort",
    "el0_da",
];

/// Frames that take the mmap lock (or a VMA's write lock) for a change of the address space.
const MM_CHANGERS: &[&str] = &[
    "vm_mmap_pgoff",
    "do_mmap",
    "__vm_munmap",
    "vm_munmap",
    "do_vmi_munmap",
    "do_mprotect_pkey",
    "mprotect_fixup",
    "do_madvise",
    "madvise_lock",
    "__do_sys_brk",
    "__do_sys_mremap",
    "lock_mm_and_find_vma",
    "mmap_read_lock_killable",
    "mmap_write_lock_killable",
    "__vma_start_write",
    "vma_start_write",
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
];

/// The lock class a thread waits for, for grouping threads stuck on the same lock: `mmap_lock` for a thread
/// whose stack waits in an rwsem slow path (or a VMA write lock) from mmap/munmap/mprotect/madvise/brk/mremap or
/// a page fault's mmap-lock step. Stacks omit `__sched` functions, so the innermost frame may be the changer
/// itself (`vm_mmap_pgoff`): that counts as the wait too.
pub fn lock_class(frames: &[StackFrame], wchan: Option<&str>) -> Option<&'static str> {
    let top = frames.first().map(|f| base_name(&f.function)).or(wchan)?;
    let waiting = MM_LOCK_WAITS.contains(&top)
        || MM_CHANGERS.contains(&top)
        || wchan.is_some_and(|w| MM_LOCK_WAITS.contains(&w) || MM_CHANGERS.contains(&w));
    let through_mm = has(frames, MM_CHANGERS).is_some()
        || (frames.is_empty() && wchan.is_some_and(|w| MM_CHANGERS.contains(&w)));
    (waiting && through_mm).then_some("mmap_lock")
}

/// Whether the thread is inside a page fault that is not itself waiting for the mmap lock: such a thread holds
/// the mmap lock for read (or its VMA's lock) for as long as it sleeps, and a writer of the address space waits
/// behind it.
pub fn holds_fault_lock(frames: &[StackFrame], wchan: Option<&str>) -> bool {
    has(frames, FAULT_PATH).is_some() && lock_class(frames, wchan).is_none()
}

/// One-line classification. `syscall` is the name decoded from `/proc/<tid>/syscall`, used only when
/// the stack does not say.
pub fn classify(
    frames: &[StackFrame],
    wchan: Option<&str>,
    syscall: Option<&str>,
) -> Option<String> {
    let wait = wait_kind(frames, wchan);
    let tail = |s: String| match &wait {
        Some(w) if !s.ends_with(w.as_str()) => format!("{s} … {w}"),
        _ => s,
    };

    // 1. Exit path: trust the stack over a stale syscall number.
    if has(frames, &["do_exit", "do_group_exit"]).is_some() {
        let Some(fput) = has(frames, &["__fput", "____fput", "fput"]) else {
            return Some(tail("process exit".to_string()));
        };
        let above = &frames[..fput];
        let release = above
            .iter()
            .rev()
            .filter(|f| f.module.is_some())
            .find(|f| base_name(&f.function).ends_with("release"))
            .or_else(|| above.last());
        return Some(tail(match release {
            Some(f) => match &f.module {
                Some(m) => format!("process exit → __fput → {m} {}", base_name(&f.function)),
                None => format!("process exit → __fput → {}", base_name(&f.function)),
            },
            None => "process exit → __fput".to_string(),
        }));
    }

    let entered = syscall_from_stack(frames).or(syscall);

    // 2. Page fault.
    let fault = has(
        frames,
        &[
            "asm_exc_page_fault",
            "exc_page_fault",
            "do_user_addr_fault",
            "handle_mm_fault",
            "do_page_fault",
            "do_translation_fault",
            "do_mem_abort",
            "el0_da",
        ],
    );
    if let Some(fault) = fault {
        let above = &frames[..fault];
        if is_fs_freeze(above, wchan) {
            return Some("page fault → filesystem freeze (percpu_rwsem_wait)".to_string());
        }
        if let Some((module, entry, _)) = driver_entry(above) {
            return Some(tail(format!("page fault → {module}: {entry}")));
        }
        // The innermost fault handler that is not part of the generic fault path.
        const GENERIC: &[&str] = &[
            "__do_fault",
            "do_fault",
            "do_read_fault",
            "do_shared_fault",
            "do_cow_fault",
            "handle_mm_fault",
            "__handle_mm_fault",
            "do_user_addr_fault",
            "exc_page_fault",
            "asm_exc_page_fault",
            "do_page_fault",
            "do_translation_fault",
        ];
        let handler = above
            .iter()
            .map(|f| base_name(&f.function))
            .find(|n| n.ends_with("_fault") && !GENERIC.contains(n));
        return Some(match handler {
            Some(h) => format!("page fault ({h})"),
            None => tail("page fault".to_string()),
        });
    }

    // 3. A frozen filesystem.
    if is_fs_freeze(frames, wchan) {
        return Some(match entered {
            Some(s) => format!("{s} → filesystem freeze (percpu_rwsem_wait)"),
            None => "filesystem freeze (percpu_rwsem_wait)".to_string(),
        });
    }

    // 4. Inside a driver module.
    if let Some((module, entry, op)) = driver_entry(frames) {
        let origin = entered.unwrap_or("kernel");
        let s = match op {
            Some(op) if op != entry => format!("{origin} → {module}: {entry} → {op}"),
            _ => format!("{origin} → {module}: {entry}"),
        };
        if let Some(nv) = nvidia_site(frames) {
            return Some(format!("{} [{}]", tail(s), nv.label()));
        }
        return Some(tail(s));
    }

    // 5. Core kernel, or no stack at all (e.g. no CAP_SYS_ADMIN): syscall and wait site.
    match (entered, &wait) {
        (Some(s), Some(w)) => Some(format!("{s} … {w}")),
        (Some(s), None) => Some(s.to_string()),
        (None, Some(w)) => Some(w.clone()),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::stack;

    fn frames(s: &str) -> Vec<StackFrame> {
        stack::parse(s.as_bytes()).unwrap()
    }

    #[test]
    fn uvm_ioctl_mutex_wait() {
        let f = frames("[<0>] __mutex_lock.constprop.0+0x14f/0x8a0\n[<0>] uvm_api_alloc_semaphore_pool+0x5a/0x2a0 [nvidia_uvm]\n[<0>] uvm_ioctl+0x1c7e/0x1e10 [nvidia_uvm]\n[<0>] uvm_unlocked_ioctl+0x31/0x60 [nvidia_uvm]\n[<0>] uvm_unlocked_ioctl_entry.part.0+0x7b/0xf0 [nvidia_uvm]\n[<0>] __x64_sys_ioctl+0x97/0xd0\n[<0>] do_syscall_64+0x5c/0x90\n[<0>] entry_SYSCALL_64_after_hwframe+0x76/0x7e\n");
        assert_eq!(
            classify(&f, None, Some("ioctl")).unwrap(),
            "ioctl → nvidia_uvm: uvm_ioctl → uvm_api_alloc_semaphore_pool … mutex wait"
        );
    }

    #[test]
    fn rm_ioctl_on_arm64() {
        let f = frames("[<0>] os_acquire_rwlock_write+0x38/0x60 [nvidia]\n[<0>] rmapiLockAcquire+0x1a0/0x2c0 [nvidia]\n[<0>] rm_ioctl+0x64/0xb0 [nvidia]\n[<0>] nvidia_ioctl+0x5e4/0x8c0 [nvidia]\n[<0>] nvidia_unlocked_ioctl+0x24/0x40 [nvidia]\n[<0>] __arm64_sys_ioctl+0xb4/0x100\n[<0>] invoke_syscall+0x50/0x120\n[<0>] el0_svc_common.constprop.0+0x48/0xf0\n[<0>] do_el0_svc+0x24/0x38\n[<0>] el0_svc+0x30/0xe0\n[<0>] el0t_64_sync_handler+0x100/0x130\n[<0>] el0t_64_sync+0x190/0x198\n");
        assert_eq!(
            classify(&f, Some("os_acquire_rwlock_write"), Some("ioctl")).unwrap(),
            "ioctl → nvidia: nvidia_ioctl → rm_ioctl … os_acquire_rwlock_write [RM API lock]"
        );
    }

    #[test]
    fn frozen_fs_and_faults() {
        let f = frames("[<0>] percpu_rwsem_wait+0x107/0x130\n[<0>] __percpu_down_read+0x5e/0x70\n[<0>] mnt_want_write_file+0x99/0xb0\n[<0>] ioctl_setflags+0x3c/0x90\n[<0>] do_vfs_ioctl+0x3f3/0x8f0\n[<0>] __x64_sys_ioctl+0x71/0xd0\n[<0>] do_syscall_64+0x71/0x290\n[<0>] entry_SYSCALL_64_after_hwframe+0x76/0x7e\n");
        assert_eq!(
            classify(&f, Some("percpu_rwsem_wait"), Some("ioctl")).unwrap(),
            "ioctl → filesystem freeze (percpu_rwsem_wait)"
        );
        // No stack (no CAP_SYS_ADMIN): wchan still tells.
        assert_eq!(
            classify(&[], Some("percpu_rwsem_wait"), Some("write")).unwrap(),
            "write → filesystem freeze (percpu_rwsem_wait)"
        );
        // write(2) on this kernel: sb_start_write is inlined into vfs_write.
        let f = frames("[<0>] percpu_rwsem_wait+0x15f/0x1d0\n[<0>] vfs_write+0x458/0x4c0\n[<0>] ksys_write+0x6f/0xf0\n[<0>] do_syscall_64+0x71/0x290\n[<0>] entry_SYSCALL_64_after_hwframe+0x76/0x7e\n");
        assert_eq!(
            classify(&f, Some("percpu_rwsem_wait"), Some("write")).unwrap(),
            "write → filesystem freeze (percpu_rwsem_wait)"
        );
        // The same wait under cgroup_threadgroup_rwsem (fork) is not a frozen filesystem.
        let f = frames("[<0>] percpu_rwsem_wait+0x15f/0x1d0\n[<0>] __percpu_down_read+0x5e/0x70\n[<0>] cgroup_can_fork+0x3a/0x60\n[<0>] copy_process+0x1/0x2\n[<0>] kernel_clone+0x1/0x2\n[<0>] __x64_sys_clone3+0x1/0x2\n");
        assert_eq!(
            classify(&f, Some("percpu_rwsem_wait"), Some("clone3")).unwrap(),
            "clone3 … percpu rwsem wait"
        );
        let f = frames("[<0>] folio_wait_bit_common+0x13d/0x350\n[<0>] filemap_fault+0x5e1/0x9c0\n[<0>] __do_fault+0x36/0x130\n[<0>] do_fault+0x1b5/0x410\n[<0>] __handle_mm_fault+0x632/0xc70\n[<0>] handle_mm_fault+0xd8/0x2c0\n[<0>] do_user_addr_fault+0x1c1/0x690\n[<0>] exc_page_fault+0x77/0x170\n[<0>] asm_exc_page_fault+0x26/0x30\n");
        assert_eq!(
            classify(&f, None, None).unwrap(),
            "page fault (filemap_fault)"
        );
        let f = frames("[<0>] uvm_va_block_make_resident+0x1/0x2 [nvidia_uvm]\n[<0>] uvm_vm_fault+0x10/0x20 [nvidia_uvm]\n[<0>] __do_fault+0x36/0x130\n[<0>] handle_mm_fault+0xd8/0x2c0\n[<0>] do_page_fault+0x1/0x2\n[<0>] el0_da+0x1/0x2\n");
        assert_eq!(
            classify(&f, None, None).unwrap(),
            "page fault → nvidia_uvm: uvm_vm_fault … uvm_va_block_make_resident"
        );
    }

    /// The mmap-lock wedge as seen on 6.18 (frozen ext4): a write fault holds the VMA, mprotect waits for it
    /// holding the mmap lock, mmap waits for the mmap lock.
    #[test]
    fn mmap_lock_wedge_waiters_and_the_fault_they_wait_behind() {
        let fault = frames("[<0>] percpu_rwsem_wait+0x15f/0x1d0\n[<0>] ext4_page_mkwrite+0x4ab/0x570\n[<0>] do_page_mkwrite+0x49/0xb0\n[<0>] do_fault+0x10f/0x660\n[<0>] __handle_mm_fault+0x842/0xf80\n[<0>] handle_mm_fault+0xd0/0x310\n[<0>] exc_page_fault+0x176/0x770\n[<0>] asm_exc_page_fault+0x22/0x30\n");
        assert_eq!(
            classify(&fault, Some("percpu_rwsem_wait"), None).unwrap(),
            "page fault → filesystem freeze (percpu_rwsem_wait)"
        );
        assert!(holds_fault_lock(&fault, Some("percpu_rwsem_wait")));
        assert_eq!(lock_class(&fault, Some("percpu_rwsem_wait")), None);
        let mprotect = frames("[<0>] __vma_start_write+0x5c/0x110\n[<0>] mprotect_fixup+0xec/0x370\n[<0>] do_mprotect_pkey+0x353/0x5f0\n[<0>] __x64_sys_mprotect+0x1b/0x30\n[<0>] do_syscall_64+0x71/0x290\n[<0>] entry_SYSCALL_64_after_hwframe+0x76/0x7e\n");
        assert_eq!(
            lock_class(&mprotect, Some("__vma_start_write")),
            Some("mmap_lock")
        );
        assert!(!holds_fault_lock(&mprotect, Some("__vma_start_write")));
        let mmap = frames("[<0>] vm_mmap_pgoff+0xe9/0x230\n[<0>] do_syscall_64+0x71/0x290\n[<0>] entry_SYSCALL_64_after_hwframe+0x76/0x7e\n");
        assert_eq!(lock_class(&mmap, Some("vm_mmap_pgoff")), Some("mmap_lock"));
        assert_eq!(lock_class(&[], Some("vm_mmap_pgoff")), Some("mmap_lock"));
        // A fault that itself waits for the mmap lock is a waiter, not a holder.
        let fault_waits = frames("[<0>] rwsem_down_read_slowpath+0x1/0x2\n[<0>] lock_mm_and_find_vma+0x1/0x2\n[<0>] do_user_addr_fault+0x1/0x2\n[<0>] exc_page_fault+0x1/0x2\n");
        assert_eq!(lock_class(&fault_waits, None), Some("mmap_lock"));
        assert!(!holds_fault_lock(&fault_waits, None));
        // A futex wait is neither.
        let futex = frames("[<0>] futex_do_wait+0x46/0x90\n[<0>] __x64_sys_futex+0x12d/0x230\n");
        assert_eq!(lock_class(&futex, Some("futex_do_wait")), None);
        assert!(!holds_fault_lock(&futex, None));
    }

    #[test]
    fn fallbacks() {
        assert_eq!(classify(&[], None, None), None);
        assert_eq!(classify(&[], None, Some("read")).as_deref(), Some("read"));
        assert_eq!(
            classify(&[], Some("pipe_read"), Some("read")).as_deref(),
            Some("read … pipe_read")
        );
        let f = frames("[<0>] do_mprotect_pkey+0x177/0x650\n[<0>] __x64_sys_mprotect+0x1f/0x30\n[<0>] x64_sys_call+0x1367/0x2350\n[<0>] do_syscall_64+0x71/0x290\n[<0>] entry_SYSCALL_64_after_hwframe+0x76/0x7e\n");
        assert_eq!(
            classify(&f, Some("do_mprotect_pkey"), Some("mprotect")).unwrap(),
            "mprotect … do_mprotect_pkey (waits for mmap_lock)"
        );
        assert_eq!(
            base_name("uvm_release_entry.part.0.isra.0"),
            "uvm_release_entry"
        );
    }
}

/// What an NVIDIA driver thread waits for, from the innermost frame that says (issue 18's categories).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvidiaWait {
    /// `os_acquire_rwlock_read/write` under `rmapiLockAcquire`.
    RmApiLock,
    /// `os_acquire_semaphore`/`os_acquire_mutex` under `rmGpuLocksAcquire`.
    GpuLock,
    /// `_kgspRpcRecvPoll` / `kgspRecvPoll_IMPL` under `_issueRpcAndWait`.
    GspRpc,
    /// `uvm_gpu_retain_by_uuid` (the UVM global lock).
    UvmGlobalLock,
    /// A page-tree mutex (`uvm_page_tree_*`).
    UvmPageTreeLock,
    /// The VA-space rwsem (`uvm_down_read/write`, `uvm_va_space_down_*`).
    UvmVaSpaceLock,
    /// Another UVM mutex or rwsem.
    UvmLock,
    /// `uvm_spin_loop`: waiting for the GPU to make progress.
    UvmGpuProgressSpin,
    /// `os_lock_user_pages` → `pin_user_pages` (a page fault while pinning).
    PinningUserPages { fault: bool },
    /// nvidia-modeset's PM semaphore.
    ModesetPmSemaphore,
    /// Proprietary module: `_nv…rm` frames that name nothing.
    ObfuscatedFrames,
}

impl NvidiaWait {
    /// "RM API lock", "GSP RPC wait", …
    pub fn label(self) -> &'static str {
        match self {
            NvidiaWait::RmApiLock => "RM API lock",
            NvidiaWait::GpuLock => "GPU lock",
            NvidiaWait::GspRpc => "GSP RPC wait",
            NvidiaWait::UvmGlobalLock => "UVM global lock",
            NvidiaWait::UvmPageTreeLock => "UVM page-tree lock",
            NvidiaWait::UvmVaSpaceLock => "UVM VA-space lock",
            NvidiaWait::UvmLock => "UVM lock",
            NvidiaWait::UvmGpuProgressSpin => "UVM GPU-progress spin",
            NvidiaWait::PinningUserPages { fault: true } => "pinning user pages (page fault)",
            NvidiaWait::PinningUserPages { fault: false } => "pinning user pages",
            NvidiaWait::ModesetPmSemaphore => "nvidia-modeset PM semaphore",
            NvidiaWait::ObfuscatedFrames => "obfuscated frames",
        }
    }

    /// The verb phrase for a sentence: "waits for a GSP RPC reply".
    pub fn phrase(self) -> &'static str {
        match self {
            NvidiaWait::RmApiLock => "waits for the RM API lock",
            NvidiaWait::GpuLock => "waits for the GPU lock",
            NvidiaWait::GspRpc => "waits for a GSP RPC reply",
            NvidiaWait::UvmGlobalLock => "waits for the UVM global lock",
            NvidiaWait::UvmPageTreeLock => "waits for a UVM page-tree lock",
            NvidiaWait::UvmVaSpaceLock => "waits for the UVM VA-space lock",
            NvidiaWait::UvmLock => "waits for a UVM lock",
            NvidiaWait::UvmGpuProgressSpin => "spins waiting for GPU progress",
            NvidiaWait::PinningUserPages { fault: true } => {
                "is pinning user pages (stuck in a page fault)"
            }
            NvidiaWait::PinningUserPages { fault: false } => "is pinning user pages",
            NvidiaWait::ModesetPmSemaphore => "waits for the nvidia-modeset PM semaphore",
            NvidiaWait::ObfuscatedFrames => "is in obfuscated driver frames",
        }
    }
}

fn nvidia_wait_of(
    function: &str,
    module: Option<&str>,
    frames: &[StackFrame],
) -> Option<NvidiaWait> {
    let fault = || {
        has(
            frames,
            &[
                "handle_mm_fault",
                "__get_user_pages",
                "filemap_fault",
                "do_user_addr_fault",
            ],
        )
        .is_some()
    };
    Some(match function {
        "os_lock_user_pages" | "nv_lock_user_pages" => {
            NvidiaWait::PinningUserPages { fault: fault() }
        }
        "_kgspRpcRecvPoll" | "kgspRecvPoll_IMPL" | "_issueRpcAndWait" | "_kgspRpcRecvPoll_IMPL" => {
            NvidiaWait::GspRpc
        }
        "uvm_spin_loop" => NvidiaWait::UvmGpuProgressSpin,
        "uvm_gpu_retain_by_uuid" => NvidiaWait::UvmGlobalLock,
        "rmapiLockAcquire" => NvidiaWait::RmApiLock,
        "rmGpuLocksAcquire"
        | "_rmGpuLocksAcquire"
        | "rmGpuGroupLockAcquire"
        | "rmDeviceGpuLocksAcquire" => NvidiaWait::GpuLock,
        "uvm_down_read"
        | "uvm_down_write"
        | "uvm_va_space_down_read"
        | "uvm_va_space_down_write"
        | "uvm_va_space_down_read_rm" => NvidiaWait::UvmVaSpaceLock,
        n if n.starts_with("uvm_page_tree_") => NvidiaWait::UvmPageTreeLock,
        "uvm_mutex_lock" | "uvm_mutex_lock_no_tracking" | "uvm_down" | "uvm_down_read_trylock" => {
            NvidiaWait::UvmLock
        }
        n if module == Some("nvidia_modeset") && (n.contains("_pm_") || n.contains("PmLock")) => {
            NvidiaWait::ModesetPmSemaphore
        }
        _ => return None,
    })
}

/// The NVIDIA category of a stack: the innermost frame that names one wins (a page fault inside
/// `os_lock_user_pages` is pinning; `rmapiLockAcquire` above a GSP RPC is not reached). Stacks with
/// only `_nv…rm` frames of the proprietary module are "obfuscated frames".
pub fn nvidia_site(frames: &[StackFrame]) -> Option<NvidiaWait> {
    for frame in frames {
        let name = base_name(&frame.function);
        if let Some(wait) = nvidia_wait_of(name, frame.module.as_deref(), frames) {
            return Some(wait);
        }
    }
    let obfuscated = frames.iter().any(|f| {
        let n = base_name(&f.function);
        f.module.as_deref() == Some("nvidia") && n.starts_with("_nv") && n.ends_with("rm")
    });
    obfuscated.then_some(NvidiaWait::ObfuscatedFrames)
}

/// The operation sentence for a decoded argument and its stack, e.g. "RM control
/// NV2080_CTRL_CMD_GPU_GET_INFO_V2 waits for a GSP RPC reply (takes the API lock read-only + GPU lock)".
pub fn nvidia_operation(
    frames: &[StackFrame],
    argument: &crate::nvidia::IoctlArgument,
) -> Option<String> {
    let op = argument.operation_name()?;
    let wait = nvidia_site(frames)
        .map(|w| format!(" {}", w.phrase()))
        .unwrap_or_default();
    let locks = argument
        .locks
        .as_ref()
        .map(|l| format!(" ({l})"))
        .unwrap_or_default();
    Some(format!("{op}{wait}{locks}"))
}
