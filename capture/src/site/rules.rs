//! The classifier's rules as data: frame patterns → what a person calls the wait.
//!
//! Three tables, each read innermost frame first:
//! - [`WAIT_WORDS`]: the wait primitive a thread sleeps in (mutex, rwsem, page lock, fence, RPC…), including the
//!   names older kernels used (`rwsem_down_read_failed`, `sleep_on_page`, `__lock_page`…), so a hung-task log
//!   from any LTS kernel of the last eight years reads the same as a current `/proc/<tid>/stack`.
//! - [`CATEGORY_RULES`]: the layer and category a driver engineer names (GPU fence wait, FUSE daemon, NFS
//!   server, page lock, writeback); `{driver}` in a label is replaced by the GPU driver that waits.
//! - [`GENERIC_MODULES`]: framework modules (DRM core, TTM, the GPU scheduler, RDMA core) that are never "the
//!   driver": the entry and the waiting module are the driver modules around them.
//!
//! Map: `pattern` the row types and constructors; `wait_table` the primitives ([`WAIT_WORDS`]); `lock_table`
//! the lock takers ([`LOCK_TAKERS`]); `hidden_wait_table` round 19's ([`HIDDEN_WAIT_TAKERS`]);
//! `firmware_wait_table` round 21's ([`FIRMWARE_WAIT_TAKERS`]); `round30_lock_table` round 30's
//! ([`ROUND30_LOCK_TAKERS`]); `zfs_lock_table` round 10's ZFS rows ([`ZFS_LOCK_TAKERS`]); this module the
//! category tables, the frame lists and the lookups.

mod firmware_wait_table;
mod hidden_wait_table;
mod lock_table;
mod pattern;
mod round30_lock_table;
mod wait_table;
mod zfs_lock_table;

pub use firmware_wait_table::FIRMWARE_WAIT_TAKERS;
pub use hidden_wait_table::HIDDEN_WAIT_TAKERS;
pub use lock_table::LOCK_TAKERS;
pub use pattern::{CategoryRule, Layer, LockTaker, Pattern, WaitWord};
pub use round30_lock_table::ROUND30_LOCK_TAKERS;
pub use wait_table::WAIT_WORDS;
pub use zfs_lock_table::ZFS_LOCK_TAKERS;

use pattern::c;
use wait_table::FENCE_WAITS;

/// The frames of a wait for a DMA fence (a mechanism over one names what the fence is for).
pub const FENCE_WAIT_FRAMES: &[&str] = FENCE_WAITS;

/// The words for one wait primitive, if it is one.
pub fn wait_words(name: &str) -> Option<&'static str> {
    WAIT_WORDS
        .iter()
        .find(|w| w.pattern.matches(name))
        .map(|w| w.words)
}

/// Round 16: waiters whose own wait is a `wait_event` in their body (fs/btrfs/transaction.c
/// btrfs_commit_transaction: the transaction's writers, its ordered extents). Under another wait they called
/// that one and are not waiting themselves: the run of primitives ends before them.
const INLINE_WAITERS: &[&str] = &["btrfs_commit_transaction"];

/// Round 25: fault handlers whose page-lock sleep is inlined into them. mm/filemap.c `filemap_fault` locks the
/// page it maps with `lock_folio_maybe_drop_mmap` → `__folio_lock_killable` (5.16+; `lock_page_maybe_drop_mmap`
/// → `__lock_page_killable` before), both inlined down to `folio_wait_bit_common(folio, PG_locked, …)`
/// (`wait_on_page_bit_common`), and `filemap_read_folio` waits with `folio_wait_locked_killable`: the page is
/// locked while its read I/O is in flight. So the generic bit or I/O wait right under it is that page's lock.
/// Under any other wait (the `invalidate_lock` rwsem it takes to read a page in) or with nothing above it (the
/// primitives a `/proc` stack omits are `__sched` locks, not the bit wait), it is not this wait.
const PAGE_LOCK_INLINERS: &[&str] = &["filemap_fault"];

/// Round 28: callers of `folio_lock` whose page-lock sleep shows as the bit wait itself. mm/filemap.c
/// `__folio_lock` is a tail call into `folio_wait_bit_common(folio, PG_locked, …)`, so its frame is gone;
/// mm/page-writeback.c `write_cache_pages` (5.16+) waits for writeback through the out-of-line
/// `folio_wait_writeback`, its own frame. So `folio_wait_bit_common` right under `write_cache_pages` is the
/// page's lock (4.x's inlined `wait_on_page_writeback` → `wait_on_page_bit` there is writeback: not matched).
const FOLIO_LOCK_TAIL_CALLERS: &[&str] = &["write_cache_pages"];

/// The words for a frame of the run of wait primitives at a stack's top, given the words of the run above it
/// and the frame right above it: None past its end (a frame that is no primitive, or an inline waiter under
/// another wait: its caller).
pub fn wait_words_in_run(
    name: &str,
    above: Option<&str>,
    above_name: Option<&str>,
) -> Option<&'static str> {
    if above.is_some() && INLINE_WAITERS.contains(&name) {
        return None;
    }
    if PAGE_LOCK_INLINERS.contains(&name) {
        return (above == Some("I/O wait")).then_some("page lock wait");
    }
    if FOLIO_LOCK_TAIL_CALLERS.contains(&name) {
        return (above_name == Some("folio_wait_bit_common")).then_some("page lock wait");
    }
    wait_words(name)
}

/// Round 27: mm/filemap.c's page (folio) bit waits: the bit is PG_locked or PG_writeback, so the generic "I/O
/// wait" they show is a page lock when the caller locks or reads the page (`do_read_cache_page` waiting for
/// its read to unlock the page).
pub fn is_page_bit_wait(name: &str) -> bool {
    matches!(
        name,
        "wait_on_page_bit_common"
            | "folio_wait_bit_common"
            | "wait_on_page_bit"
            | "folio_wait_bit"
            | "wait_on_page_bit_killable"
    )
}

/// Round 15: kernel/sched/wait_bit.c's generic bit waits (`__wait_on_bit`, `out_of_line_wait_on_bit`): the
/// action under them (`bit_wait_io`, `rpc_wait_bit_killable`, `nfs_wait_bit_killable`) says whose bit it is,
/// so their own words (a buffer's I/O) do not replace the action's.
pub fn is_generic_bit_wait(name: &str) -> bool {
    matches!(name, "__wait_on_bit" | "out_of_line_wait_on_bit")
}

/// Round 15: net/sunrpc's call machinery (rpc_call_sync → rpc_run_task → rpc_execute → __rpc_execute →
/// rpc_wait_bit_killable): the RPC's generic wait, as a helper module's primitive is, so a driver path names
/// the function that issued the call (`rpc_create_xprt`'s NULL ping, `_nfs4_proc_delegreturn`).
pub fn is_rpc_call_machinery(name: &str) -> bool {
    wait_words(name) == Some("RPC wait")
}

/// Categories a stack shows anywhere in its frames, innermost frame first.
pub const CATEGORY_RULES: &[CategoryRule] = &[
    c(FENCE_WAITS, Layer::Gpu, "GPU fence wait ({driver})"),
    c(
        &[
            "drm_sched_stop",
            "drm_sched_fini",
            "amddrm_sched_entity_push_job",
        ],
        Layer::Gpu,
        "GPU fence wait ({driver})",
    ),
    // Deeper in the stack than the wait: the wait happens during a GPU reset after a job timed out.
    c(
        &[
            "amdgpu_device_gpu_recover",
            "amdgpu_device_gpu_recover_imp",
            "amdgpu_job_timedout",
            "drm_sched_job_timedout",
            "amdgpu_ras_do_recovery",
        ],
        Layer::Gpu,
        "GPU recovery ({driver})",
    ),
    CategoryRule {
        pattern: Pattern::Contains("fence_wait"),
        layer: Layer::Gpu,
        label: "GPU fence wait ({driver})",
    },
    c(
        &[
            "drm_modeset_lock",
            "drm_modeset_lock_all",
            "drm_modeset_lock_all_ctx",
            "drm_modeset_backoff",
            "modeset_lock",
        ],
        Layer::Gpu,
        "DRM modeset lock ({driver})",
    ),
    c(
        &[
            "request_wait_answer",
            "__fuse_request_send",
            "fuse_request_send",
            "fuse_simple_request",
            "__fuse_simple_request",
            "fuse_wait_aborted",
            "fuse_wait_on_page_writeback",
            "fuse_wait_on_folio_writeback",
        ],
        Layer::Filesystem,
        "FUSE daemon wait",
    ),
    c(
        &[
            "rpc_wait_bit_killable",
            "__rpc_wait_for_completion_task",
            "nfs_wait_bit_killable",
            "nfs4_wait_clnt_recover",
            "nfs_wait_client_init_complete",
            "nfs4_run_open_task",
            "nfs4_call_sync",
            "nfs4_proc_getattr",
        ],
        Layer::Filesystem,
        "NFS server wait",
    ),
    c(
        &[
            "ceph_mdsc_do_request",
            "ceph_mdsc_wait_request",
            "ceph_osdc_wait_request",
            "ceph_osdc_sync",
            "ceph_osdc_wait_requests",
            "ceph_monc_wait_osdmap",
            "__ceph_open_session",
        ],
        Layer::Filesystem,
        "Ceph server wait",
    ),
    c(
        &[
            "wait_for_response",
            "compound_send_recv",
            "cifs_send_recv",
            "SendReceive",
            "SendReceive2",
            "smb2_reconnect",
            "cifs_reconnect_tcon",
            "wait_for_free_request",
        ],
        Layer::Filesystem,
        "SMB server wait",
    ),
    c(
        &["p9_client_rpc", "p9_client_zc_rpc"],
        Layer::Filesystem,
        "9P server wait",
    ),
    // Context deeper in the stack: whatever the wait above, it happens under these.
    c(
        &[
            "rtnl_lock",
            "rtnl_lock_killable",
            "__rtnl_lock",
            "rtnl_lock_interruptible",
            // Holds it for the request it serves.
            "rtnetlink_rcv_msg",
            // Work items that take it first thing (the lock takers' RTNL row).
            "reg_check_chans_work",
            "addrconf_dad_work",
            "addrconf_verify_work",
            // Round 30: the VLAN ioctl takes it first thing (round 30's lock takers).
            "vlan_ioctl_handler",
        ],
        Layer::Network,
        "RTNL lock (network configuration)",
    ),
    c(
        &["cleanup_net"],
        Layer::Network,
        "network namespace cleanup",
    ),
    c(
        &["copy_net_ns"],
        Layer::Network,
        "network namespace creation (net_mutex)",
    ),
    c(
        &[
            "mem_cgroup_out_of_memory",
            "mem_cgroup_oom_synchronize",
            "mem_cgroup_oom",
        ],
        Layer::Memory,
        "memcg OOM",
    ),
    c(
        &["out_of_memory", "__alloc_pages_may_oom"],
        Layer::Memory,
        "OOM killer",
    ),
    c(
        &[
            "try_to_compact_pages",
            "__alloc_pages_direct_compact",
            "compact_zone",
            "compact_zone_order",
            "kcompactd_do_work",
        ],
        Layer::Memory,
        "memory compaction",
    ),
    c(
        &[
            "try_to_free_mem_cgroup_pages",
            "try_to_free_pages",
            "do_try_to_free_pages",
            "__alloc_pages_direct_reclaim",
            "__perform_reclaim",
            "shrink_node",
            "shrink_zones",
        ],
        Layer::Memory,
        "memory reclaim",
    ),
    // Round 8 (issue 38 held-out: non-GPU families).
    // fs/nfs/nfs4proc.c: an OPEN (CLOSE) reply whose stateid seqid is not the next one sleeps on the open
    // state's waitq for the reply in between (5 s at a time, killable, again and again): the server's order.
    c(
        &[
            "nfs_set_open_stateid_locked",
            "nfs4_refresh_open_old_stateid",
        ],
        Layer::Filesystem,
        "NFS server wait",
    ),
];

/// Page-cache and journal throttles: a writer held back for the disk, not for a lock.
pub const PAGE_CACHE_RULES: &[CategoryRule] = &[
    c(
        &[
            "balance_dirty_pages",
            "balance_dirty_pages_ratelimited",
            "balance_dirty_pages_ratelimited_flags",
        ],
        Layer::PageCache,
        "dirty page throttle (writeback)",
    ),
    c(
        &[
            "jbd2_log_wait_commit",
            "wait_transaction_locked",
            "__jbd2_log_wait_for_space",
            "start_this_handle",
            // Round 14: a handle's write access to a buffer the commit is writing (BH_Shadow).
            "do_get_write_access",
        ],
        Layer::PageCache,
        "filesystem journal wait",
    ),
];

/// Module names that are frameworks, not the driver a person means.
pub const GENERIC_MODULES: &[&str] = &[
    "drm",
    "drm_kms_helper",
    "drm_display_helper",
    "drm_exec",
    "drm_ttm_helper",
    // DRM's shared helper libraries a driver calls into (GPU SVM over HMM, the buddy and sub-allocators, GPU
    // VA management): the driver is the module that called them.
    "drm_gpusvm_helper",
    "drm_buddy",
    "drm_suballoc_helper",
    "drm_gpuvm",
    "ttm",
    "gpu_sched",
    "amd_sched",
    "amdkcl",
    "amdttm",
    "amddrm_ttm_helper",
    "ib_core",
    "ib_uverbs",
    "sunrpc",
];

/// GPU drivers by function prefix, for built-in drivers whose frames carry no `[module]`.
pub const GPU_DRIVER_PREFIXES: &[(&str, &str)] = &[
    ("amdgpu_", "amdgpu"),
    ("kfd_", "amdgpu"),
    ("nouveau_", "nouveau"),
    ("nv50_", "nouveau"),
    ("nvkm_", "nouveau"),
    ("i915_", "i915"),
    ("intel_", "i915"),
    ("xe_", "xe"),
    ("radeon_", "radeon"),
    ("lima_", "lima"),
    ("v3d_", "v3d"),
    ("vc4_", "vc4"),
    ("panfrost_", "panfrost"),
    ("panthor_", "panthor"),
    // Round 13: the virtual KMS driver (drivers/gpu/drm/vkms), syzbot's display.
    ("vkms_", "vkms"),
    ("msm_", "msm"),
    ("etnaviv_", "etnaviv"),
    ("virtio_gpu_", "virtio_gpu"),
    ("nv_drm_", "nvidia_drm"),
];

/// Names that mean "the thread waits here" even though they are not scheduler primitives (flushes, stops,
/// barriers, polls): a top frame like this is the wait, not an operation whose lock the stack hides.
pub fn names_a_wait(name: &str) -> bool {
    const WORDS: &[&str] = &[
        "wait", "flush", "sync", "lock", "sleep", "stop", "barrier", "poll", "down", "spin",
        "drain", "complet", "idle", "fence", "schedule", "park",
    ];
    let lower = name.to_ascii_lowercase();
    WORDS.iter().any(|w| lower.contains(w))
}

/// Scheduler frames a hung-task dump prints and `/proc/<tid>/stack` omits: dropped before classification so
/// a pasted log and a live capture classify the same.
pub const SCHEDULER_FRAMES: &[&str] = &[
    "__schedule",
    "schedule",
    "__switch_to",
    "__switch_to_asm",
    "context_switch",
    "finish_task_switch",
    "schedule_preempt_disabled",
    "preempt_schedule_common",
    "preempt_schedule",
    "_cond_resched",
    "__cond_resched",
    "schedule_idle",
    // The printing machinery of a stack dump, not where the task is.
    "dump_stack",
    "dump_stack_lvl",
    "show_stack",
    "sched_show_task",
    "os_dump_stack",
    // Round 11: arm64's stack printer (arch/arm64/kernel/stacktrace.c: `show_stack` → `dump_backtrace`).
    "dump_backtrace",
    // Inlined into a syzbot trace.
    "__schedule_loop",
    // The scheduler's own work that old unwinders print above a sleeping task (2.6-4.x).
    "find_busiest_group",
    "load_balance",
    "idle_balance",
    "newidle_balance",
    "pick_next_task",
    "pick_next_task_fair",
    "put_prev_task_fair",
    "dequeue_task_fair",
    "dequeue_entity",
    "update_curr",
    "__switch_to_xtra",
    "__perf_event_task_sched_out",
    "__perf_event_task_sched_in",
];

/// Round 11 (issue 38 held-out: Jetson TX2 "BUG: scheduling while atomic"). `__schedule_bug`
/// (kernel/sched/core.c) is called by `schedule_debug` inside `__schedule` when a task sleeps in atomic
/// context: it prints the report and the stack, so the frames above it are the printer's and the frames
/// below it are the sleeping task's — one stack, entered through the scheduler from its wait. Round 13:
/// `schedule_debug` is a `static inline` of `__schedule`, seen only where a report decodes inlined frames
/// (syzbot's `schedule_debug kernel/sched/core.c:5970 [inline]`): the same report's chain.
pub fn is_sleep_in_atomic_report(name: &str) -> bool {
    name == "__schedule_bug" || name == "schedule_debug"
}

/// Round 12 (issue 38 held-out: an msm DP wait that took an asynchronous SError in its timer setup). An
/// exception vector's entry frame marks where an exception interrupted the task: arm64's
/// (arch/arm64/kernel/entry.S: `el1h_64_sync`/`_irq`/`_fiq`/`_error`, `el1_sync`/`el1_irq`/`el1_error` before
/// 5.12) and x86's IDT entries (arch/x86/include/asm/idtentry.h: `asm_exc_*`, `asm_sysvec_*`,
/// `asm_common_interrupt`). The frames above it are the handler's (a panic's printer), the frames below it
/// the interrupted code.
pub fn is_exception_entry(name: &str) -> bool {
    matches!(
        name,
        "el1h_64_sync"
            | "el1h_64_irq"
            | "el1h_64_fiq"
            | "el1h_64_error"
            | "el1_sync"
            | "el1_irq"
            | "el1_error"
            | "asm_common_interrupt"
    ) || name.starts_with("asm_exc_")
        || name.starts_with("asm_sysvec_")
}

/// Round 12 (issue 38 held-out: qxl's fbdev worker caught in reclaim by a hung-task panic's NMI dump).
/// mm/page_alloc.c: an allocation allowed to reclaim (__GFP_DIRECT_RECLAIM) frees memory itself
/// (__alloc_pages_direct_reclaim → __perform_reclaim → try_to_free_pages); mm/vmscan.c:
/// do_try_to_free_pages → shrink_zones → shrink_node → shrink_slab runs the shrinkers (fs/super.c's
/// super_cache_scan, prune_super before 3.12). With one of them the innermost frame, the task is in the
/// reclaim loop itself (on CPU, or throttled inside it), not behind a lock the stack hides; a wait inside
/// the loop (reclaim_throttle, a shrinker's mutex) is the wait rows' instead.
pub fn is_reclaim_loop(name: &str) -> bool {
    matches!(
        name,
        "shrink_slab"
            | "do_shrink_slab"
            | "shrink_node"
            | "shrink_zones"
            | "do_try_to_free_pages"
            | "super_cache_scan"
            | "prune_super"
    )
}

/// Round 12b (issue 38 held-out: a profiler's stack of RM polling a TLB invalidate). NVIDIA RM's register
/// access layer (src/nvidia/src/kernel/gpu/gpu_access.c: GPU_REG_RD32/GPU_VREG_RD32 → `_regRead` →
/// `ioaprtReadReg`; the OS layer's `osDevReadReg008/016/032`, arch/nvalloc/unix/src/os.c) reads one register
/// and returns: on top of a stack it is the body of the polling loop below it, which is the wait.
pub fn is_register_access(name: &str) -> bool {
    matches!(
        name,
        "osDevReadReg008" | "osDevReadReg016" | "osDevReadReg032" | "_regRead" | "ioaprtReadReg"
    )
}

/// Round 10 (issue 38 held-out: ZFS kernel threads). SPL, the Solaris porting layer ZFS runs on, starts every
/// thread ZFS creates through `thread_generic_wrapper` (spl-thread.c: `thread_create` passes it to
/// `kthread_create`; it calls the thread's function, `txg_sync_thread`, `dbuf_evict_thread`…) and runs every
/// taskq item from `taskq_thread` (spl-taskq.c: the taskq's kthread loop calling `tqe_func`): module frames
/// that are the thread's way in, like `kthread` and `worker_thread`, not the code that waits.
pub fn is_module_thread_trampoline(name: &str) -> bool {
    matches!(name, "thread_generic_wrapper" | "taskq_thread")
}

/// Round 10: a paste cut inside the wait's own functions (every frame left, `names` innermost first, a wait
/// primitive; no syscall or thread below: `filemap_write_and_wait_range` over `folio_wait_writeback`): the
/// outermost of them is where the wait was entered, the only caller the paste still names.
pub fn cut_in_the_wait<'a>(names: impl Iterator<Item = &'a str> + Clone) -> Option<&'a str> {
    let mut waits = names.clone().filter(|n| !SCHEDULER_FRAMES.contains(n));
    let first = waits.next()?;
    let outermost = waits.last()?;
    let all_waits = names
        .filter(|n| !SCHEDULER_FRAMES.contains(n))
        .all(|n| wait_words(n).is_some());
    (all_waits && outermost != first).then_some(outermost)
}

/// Round 10 (issue 38 held-out: a crash `bt` of a CIFS open). fs/namei.c's RCU-walk helpers take references
/// under lockref and seqcount checks and never sleep (`legitimize_path`, `legitimize_links`, `legitimize_root`,
/// `try_to_unlazy`, `try_to_unlazy_next`): on a sleeping task's stack such a frame is a stale return address
/// a crash `bt` or an unwinder picked up, and the function that waits is the one under it.
pub fn never_sleeps(name: &str) -> bool {
    matches!(
        name,
        "legitimize_path"
            | "legitimize_links"
            | "legitimize_root"
            | "try_to_unlazy"
            | "try_to_unlazy_next"
    )
}

/// Frames of the way in (syscall entry, kernel thread and workqueue machinery): never "the function that
/// waits".
pub fn is_entry_frame(name: &str) -> bool {
    const ENTRY: &[&str] = &[
        "do_syscall_64",
        "do_syscall_32_irqs_on",
        "do_fast_syscall_32",
        "system_call_fastpath",
        "ret_fast_syscall",
        "invoke_syscall",
        "el0_svc_common",
        "do_el0_svc",
        "el0_svc",
        "kthread",
        "ret_from_fork",
        "ret_from_fork_asm",
        "worker_thread",
        "process_one_work",
        "smpboot_thread_fn",
        "kernel_init",
        "kernel_init_freeable",
        // Round 20: x86-64's pt_regs syscall stubs (arch/x86/kernel/entry_64.S before 4.2,
        // arch/x86/entry/entry_64.S to 4.6): the way in of clone(2), fork(2), vfork(2), execve(2)… — not
        // usbip's `stub_*` (drivers/usb/usbip/stub_*.c), whose prefix the layer map gives to usbip_host.
        "stub_clone",
        "stub_fork",
        "stub_vfork",
        "stub_execve",
        "stub_execveat",
        "stub_rt_sigreturn",
        "stub_sigaltstack",
        "stub_iopl",
        "stub_x32_rt_sigreturn",
        "stub_x32_execve",
        "stub_x32_execveat",
        "ptregscall_common",
    ];
    ENTRY.contains(&name)
        || is_module_thread_trampoline(name)
        || name.starts_with("entry_SYSCALL")
        || SYSCALL_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Prefixes of a system call's handler (`__x64_sys_ioctl`, `__arm64_sys_ioctl`, `__do_sys_…`, and the
/// `SyS_`/`sys_` names of older kernels): what follows is the syscall's name.
pub const SYSCALL_PREFIXES: &[&str] = &[
    "__x64_sys_",
    "__arm64_sys_",
    "__ia32_sys_",
    "__do_sys_",
    "__se_sys_",
    // Round 17: the body a syscall shares with its compat entry (net/socket.c's `__sys_sendmsg`,
    // `__sys_connect`; kernel/bpf's `__sys_bpf`), which a syzbot frame shows called straight from
    // `do_syscall_x64` when the `__x64_sys_` wrapper is inlined away.
    "__sys_",
    "ksys_",
    "compat_SyS_",
    "SyS_",
    "SYSC_",
    "sys_",
];

/// Every lock taker row: [`LOCK_TAKERS`], then round 19's [`HIDDEN_WAIT_TAKERS`], round 21's
/// [`FIRMWARE_WAIT_TAKERS`].
pub fn lock_takers() -> impl Iterator<Item = &'static LockTaker> {
    LOCK_TAKERS
        .iter()
        .chain(HIDDEN_WAIT_TAKERS)
        .chain(FIRMWARE_WAIT_TAKERS)
        .chain(ROUND30_LOCK_TAKERS)
        .chain(ZFS_LOCK_TAKERS)
}

/// The lock `name` takes, if it is a known taker.
pub fn lock_taken_by(name: &str) -> Option<&'static LockTaker> {
    lock_takers().find(|t| t.pattern.matches(name))
}

/// The lock `name` takes with the primitive the wait words `words` name (`mutex wait`, `rwsem wait (write)`…):
/// a function that takes two locks (cgroup_can_fork: cgroup_mutex, then cgroup_threadgroup_rwsem) is named by
/// the one its wait is on, and a taker whose lock is of another kind than the wait names none. A taker that
/// enters either of two primitives ("mutex or completion wait", round 21) is named by a wait on either.
pub fn lock_taken_with(name: &str, words: &str) -> Option<&'static LockTaker> {
    lock_takers()
        .find(|t| t.pattern.matches(name) && t.wait.split(" or ").any(|w| words.starts_with(w)))
}
