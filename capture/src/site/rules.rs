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

/// How a rule matches a frame's function name (its `.isra.0`-style suffixes already stripped).
#[derive(Debug, Clone, Copy)]
pub enum Pattern {
    /// One of these names exactly.
    Names(&'static [&'static str]),
    /// A name that starts with this.
    Prefix(&'static str),
    /// A name that contains this (`nouveau_fence_wait`, `radeon_fence_wait_seq_timeout`).
    Contains(&'static str),
}

impl Pattern {
    pub fn matches(self, name: &str) -> bool {
        match self {
            Pattern::Names(names) => names.contains(&name),
            Pattern::Prefix(p) => name.starts_with(p),
            Pattern::Contains(p) => name.contains(p),
        }
    }
}

/// A wait primitive and the words for it.
#[derive(Debug, Clone, Copy)]
pub struct WaitWord {
    pub pattern: Pattern,
    pub words: &'static str,
}

const fn w(names: &'static [&'static str], words: &'static str) -> WaitWord {
    WaitWord {
        pattern: Pattern::Names(names),
        words,
    }
}

/// GPU fence waits: a wait word and a category. (The GPU scheduler draining a context's queue is its own
/// mechanism: [`super::mechanisms`].)
const FENCE_WAITS: &[&str] = &[
    "dma_fence_default_wait",
    "dma_fence_wait_timeout",
    "dma_fence_wait",
    "dma_fence_wait_any_timeout",
    "kcl_fence_default_wait",
    "kcl_fence_wait_timeout",
    "fence_wait_timeout",
    "fence_default_wait",
    "dma_resv_wait_timeout",
    "dma_resv_wait_timeout_rcu",
    "reservation_object_wait_timeout_rcu",
    "drm_atomic_helper_wait_for_fences",
    "drm_sched_entity_push_job",
    "amd_sched_entity_push_job",
    "i915_request_wait",
    "i915_gem_object_wait",
    "i915_gem_object_wait_fence",
    "drm_syncobj_array_wait_timeout",
    "drm_gem_dma_resv_wait",
    "ttm_bo_wait",
    "ttm_bo_wait_ctx",
    "amdttm_bo_wait",
    "msm_wait_fence",
];

/// Wait primitives, innermost first in a stack. A stack's wait is named by the *outermost* frame of the run of
/// primitives at its top (`folio_wait_bit_common` under `__folio_lock` is a page-lock wait, `schedule_timeout`
/// under `dma_fence_default_wait` a fence wait).
pub const WAIT_WORDS: &[WaitWord] = &[
    w(
        &[
            "__mutex_lock",
            "mutex_lock",
            "__mutex_lock_slowpath",
            "__mutex_lock_common",
            "mutex_lock_killable",
            "mutex_lock_interruptible",
            "__mutex_lock_killable_slowpath",
            "__mutex_lock_interruptible_slowpath",
            "mutex_lock_nested",
            "ww_mutex_lock",
            "ww_mutex_lock_interruptible",
            "__ww_mutex_lock",
            "ww_mutex_lock_slow",
            "ww_mutex_lock_slow_interruptible",
            "__ww_mutex_lock_slowpath",
            "__ww_mutex_lock_interruptible_slowpath",
        ],
        "mutex wait",
    ),
    w(
        &[
            "rwsem_down_read_slowpath",
            "down_read",
            "down_read_killable",
            "down_read_interruptible",
            "down_read_nested",
            // rwsem.c's internals between the API and the slow path (inlined: a syzbot trace prints them).
            "__down_read",
            "__down_read_common",
            "__down_read_killable",
            "__down_read_interruptible",
            // Before 5.x: the slow path and its assembly thunk.
            "rwsem_down_read_failed",
            "rwsem_down_read_failed_killable",
            "call_rwsem_down_read_failed",
            "call_rwsem_down_read_failed_killable",
        ],
        "rwsem wait (read)",
    ),
    w(
        &[
            "rwsem_down_write_slowpath",
            "down_write",
            "down_write_killable",
            "down_write_nested",
            "down_write_killable_nested",
            "__down_write",
            "__down_write_common",
            "__down_write_killable",
            "rwsem_down_write_failed",
            "rwsem_down_write_failed_killable",
            "call_rwsem_down_write_failed",
            "call_rwsem_down_write_failed_killable",
            "rwsem_down_failed_common",
        ],
        "rwsem wait (write)",
    ),
    w(
        &[
            "down",
            "__down",
            "__down_common",
            "down_interruptible",
            "__down_interruptible",
            "down_killable",
            "__down_killable",
            "down_timeout",
            "__down_timeout",
            // The tty's line discipline semaphore (tty_ldsem.c): its own reader/writer semaphore, slow
            // paths included.
            "ldsem_down_read",
            "ldsem_down_write",
            "__ldsem_down_read_nested",
            "__ldsem_down_write_nested",
            "ldsem_down_write_nested",
            "down_read_failed",
            "down_write_failed",
        ],
        "semaphore wait",
    ),
    w(
        &[
            "percpu_rwsem_wait",
            "__percpu_down_read",
            "percpu_down_write",
        ],
        "percpu rwsem wait",
    ),
    w(
        &[
            "wait_for_completion",
            "wait_for_completion_killable",
            "wait_for_completion_timeout",
            "wait_for_completion_interruptible",
            "wait_for_completion_io",
            "wait_for_completion_io_timeout",
            "__wait_for_common",
            "wait_for_common",
            "wait_for_common_io",
            "do_wait_for_common",
        ],
        "completion wait",
    ),
    w(
        &[
            "__folio_lock",
            "folio_lock",
            "__folio_lock_killable",
            "__lock_page",
            "__lock_page_killable",
            "lock_page",
            "__lock_page_or_retry",
            "__folio_lock_or_retry",
            "sleep_on_page",
            "sleep_on_page_killable",
            "__wait_on_bit_lock",
            "out_of_line_wait_on_bit_lock",
            "wait_on_page_locked",
            "folio_wait_locked",
        ],
        "page lock wait",
    ),
    w(
        &[
            "wait_on_page_writeback",
            "folio_wait_writeback",
            "folio_wait_stable",
            "wait_for_stable_page",
            "wait_for_stable_folio",
            "__filemap_fdatawait_range",
            "filemap_fdatawait_range",
            "filemap_fdatawait_keep_errors",
            "filemap_write_and_wait",
            "filemap_write_and_wait_range",
            "file_write_and_wait_range",
            "wait_on_page_bit_killable_writeback",
        ],
        "writeback wait",
    ),
    w(
        &[
            "sleep_on_buffer",
            "__wait_on_buffer",
            "wait_on_buffer",
            "out_of_line_wait_on_bit",
            "__wait_on_bit",
            "bit_wait_io",
        ],
        "buffer I/O wait",
    ),
    w(
        &[
            "io_schedule",
            "io_schedule_timeout",
            "folio_wait_bit_common",
            "folio_wait_bit",
            "wait_on_page_bit_common",
            "wait_on_page_bit",
            "wait_on_page_bit_killable",
            "blk_mq_get_tag",
            // Before 3.x.
            "sync_page",
            "sync_page_killable",
        ],
        "I/O wait",
    ),
    w(
        &["rq_qos_wait", "wbt_wait", "__rq_qos_throttle"],
        "block I/O throttle wait",
    ),
    w(FENCE_WAITS, "fence wait"),
    w(
        &[
            "drm_sched_entity_flush",
            "drm_sched_entity_fini",
            "drm_sched_entity_destroy",
            "drm_sched_entity_kill",
            "amd_sched_entity_fini",
            "amd_sched_entity_flush",
            "amddrm_sched_entity_fini",
            "amddrm_sched_entity_flush",
        ],
        "GPU scheduler entity drain",
    ),
    WaitWord {
        pattern: Pattern::Contains("fence_wait"),
        words: "fence wait",
    },
    w(
        &[
            "drm_modeset_lock",
            "drm_modeset_lock_all",
            "drm_modeset_lock_all_ctx",
            "drm_modeset_backoff",
            "modeset_lock",
        ],
        "DRM modeset lock wait",
    ),
    w(
        &[
            "balance_dirty_pages",
            "balance_dirty_pages_ratelimited",
            "balance_dirty_pages_ratelimited_flags",
        ],
        "dirty page throttle",
    ),
    w(
        &[
            "jbd2_log_wait_commit",
            "wait_transaction_locked",
            "__jbd2_log_wait_for_space",
            "jbd2_journal_commit_transaction",
        ],
        "journal wait",
    ),
    w(
        &[
            "request_wait_answer",
            "__fuse_request_send",
            "fuse_request_send",
            "fuse_simple_request",
            "__fuse_simple_request",
            "fuse_wait_aborted",
        ],
        "FUSE request wait",
    ),
    w(
        &[
            "rpc_wait_bit_killable",
            "__rpc_wait_for_completion_task",
            "__rpc_execute",
            "rpc_execute",
            "rpc_run_task",
            "nfs_wait_bit_killable",
        ],
        "RPC wait",
    ),
    // The lock of a cached NFS write request (held while it is sent): `nfs_wait_bit_killable` is only its
    // sleep.
    w(
        &[
            "nfs_wait_on_request",
            "nfs_page_group_lock",
            "nfs_page_group_lock_head",
            "nfs_lock_request",
        ],
        "NFS page request wait",
    ),
    w(
        &[
            "synchronize_rcu",
            "synchronize_rcu_expedited",
            "synchronize_srcu",
            "synchronize_srcu_expedited",
            "synchronize_sched",
            "synchronize_rcu_tasks",
            "__synchronize_srcu",
            "__wait_rcu_gp",
            "wait_rcu_gp",
        ],
        "RCU grace period wait",
    ),
    w(
        &[
            "flush_work",
            "__flush_work",
            "flush_delayed_work",
            "flush_workqueue",
            "__flush_workqueue",
            "drain_workqueue",
            "cancel_work_sync",
            "cancel_delayed_work_sync",
            "__cancel_work_timer",
            "__cancel_work_sync",
            "kthread_flush_work",
            "kthread_flush_worker",
        ],
        "workqueue flush wait",
    ),
    w(
        &[
            "rpm_resume",
            "rpm_suspend",
            "rpm_idle",
            "__pm_runtime_resume",
            "__pm_runtime_suspend",
            "__pm_runtime_idle",
            "__pm_runtime_barrier",
            "pm_runtime_barrier",
            "pm_runtime_get_sync",
            "pm_runtime_resume_and_get",
        ],
        "runtime PM wait",
    ),
    w(
        &[
            "async_synchronize_full",
            "async_synchronize_full_domain",
            "async_synchronize_cookie",
            "async_synchronize_cookie_domain",
        ],
        "async work wait",
    ),
    w(
        &[
            "cv_wait",
            "__cv_wait",
            "cv_wait_common",
            "cv_wait_io",
            "__cv_wait_io",
            "cv_wait_idle",
            "__cv_wait_idle",
            "cv_timedwait",
            "__cv_timedwait",
            "cv_timedwait_common",
        ],
        "condition variable wait (SPL)",
    ),
    w(
        &["d_wait_lookup", "d_alloc_parallel"],
        "dentry lookup wait (a parallel lookup of the same name)",
    ),
    w(&["inode_wait", "wait_on_inode"], "inode state wait"),
    // bcachefs's shared/intent/exclusive locks (btree nodes, its other SIX locks): the holder is another
    // btree transaction.
    w(
        &[
            "__six_lock_type_slowpath",
            "six_lock_slowpath",
            "__six_lock_type_waiter",
            "six_lock_ip_waiter",
            "six_lock_type",
            "six_lock_intent",
            "six_lock_read",
            "six_lock_write",
            "six_lock_ip",
        ],
        "six lock wait (bcachefs)",
    ),
    w(
        &[
            "inode_wait_for_writeback",
            "__inode_wait_for_writeback",
            "wb_wait_for_completion",
        ],
        "writeback wait",
    ),
    w(
        &[
            "blk_execute_rq",
            "blk_execute_rq_nowait",
            "scsi_execute",
            "scsi_execute_cmd",
            "scsi_execute_req",
        ],
        "block device request wait",
    ),
    w(
        &["__mmc_claim_host", "mmc_claim_host", "mmc_get_card"],
        "MMC host claim wait",
    ),
    // Filesystem and RAID internals a kernel engineer names by their subsystem.
    w(
        &["xlog_grant_head_wait", "xlog_grant_head_check"],
        "XFS log space wait",
    ),
    w(&["xlog_wait", "xlog_wait_on_iclog"], "XFS log I/O wait"),
    w(&["xfs_ail_push_all_sync"], "XFS AIL push wait"),
    w(
        &[
            "wait_current_trans",
            "btrfs_wait_for_commit",
            "wait_for_commit",
            // Commit waits for the transaction's writers and ordered extents (wait_event inline).
            "btrfs_commit_transaction",
        ],
        "btrfs transaction wait",
    ),
    w(
        &[
            "md_super_wait",
            "md_write_start",
            "wait_barrier",
            "freeze_array",
            "raid5_get_active_stripe",
            "mddev_suspend",
        ],
        "md RAID wait",
    ),
    // Process life cycle: frozen, dumping core, a pid namespace's init waiting for its processes.
    w(
        &[
            "__refrigerator",
            "refrigerator",
            "try_to_freeze",
            "try_to_freeze_unsafe",
            "do_freezer_trap",
        ],
        "frozen by the freezer (cgroup freezer or suspend)",
    ),
    w(
        &["coredump_wait", "coredump_task_exit", "do_coredump"],
        "core dump wait",
    ),
    w(
        &["zap_pid_ns_processes"],
        "pid namespace teardown wait (init waits for its processes to exit)",
    ),
    w(
        &["do_wait", "kernel_wait4", "__do_wait"],
        "child wait (wait4)",
    ),
    w(&["exit_aio", "wait_for_all_aios"], "AIO completion wait"),
    w(
        &["__lock_sock", "lock_sock_nested", "lock_sock"],
        "socket lock wait",
    ),
    // Memory: reclaim throttles, migration.
    w(
        &[
            "throttle_direct_reclaim",
            "reclaim_throttle",
            "congestion_wait",
            "wait_iff_congested",
        ],
        "memory reclaim throttle",
    ),
    w(
        &["mem_cgroup_handle_over_high"],
        "memcg memory.high throttle",
    ),
    w(
        &[
            "migration_entry_wait",
            "__migration_entry_wait",
            "migration_entry_wait_on_locked",
            "__migration_entry_wait_huge",
            "migration_entry_wait_huge",
            "pmd_migration_entry_wait",
        ],
        "page migration wait",
    ),
    // Devices, sysfs and the block queue.
    w(
        // `kernfs_drain` is often inlined into `__kernfs_remove` (`kernfs_remove` itself takes a rwsem first).
        &[
            "kernfs_drain",
            "kernfs_deactivate",
            "kernfs_drain_open_files",
            "__kernfs_remove",
        ],
        "sysfs active-reference drain",
    ),
    w(
        &[
            "blk_mq_freeze_queue_wait",
            "blk_queue_enter",
            "bio_queue_enter",
            "__bio_queue_enter",
            "blk_mq_freeze_queue_wait_timeout",
            "blk_freeze_queue",
            "blk_mq_freeze_queue",
            "nvme_wait_freeze",
            "nvme_wait_freeze_timeout",
        ],
        "block queue freeze wait",
    ),
    w(
        &[
            "usb_kill_urb",
            "usb_kill_anchored_urbs",
            "usb_start_wait_urb",
        ],
        "USB URB wait",
    ),
    w(
        // `netdev_run_todo` loops on `netdev_wait_allrefs` (often inlined): "waiting for lo to become free".
        &[
            "netdev_wait_allrefs",
            "netdev_wait_allrefs_any",
            "netdev_run_todo",
        ],
        "network device reference wait",
    ),
    w(
        &[
            "io_uring_cancel_generic",
            "io_wq_exit_workers",
            "io_ring_exit_work",
            "io_uring_cancel_task_requests",
            "io_uring_cancel_files",
            "__io_uring_files_cancel",
            "io_uring_files_cancel",
            "__io_uring_cancel",
        ],
        "io_uring cancel wait",
    ),
    w(
        &[
            "schedule_timeout",
            "schedule_timeout_uninterruptible",
            "schedule_timeout_killable",
            "schedule_hrtimeout_range",
            "msleep",
            "usleep_range_state",
            "hrtimer_nanosleep",
            "do_nanosleep",
        ],
        "sleep",
    ),
    w(
        &["futex_wait_queue", "futex_wait_queue_me", "futex_wait"],
        "futex wait",
    ),
];

/// The words for one wait primitive, if it is one.
pub fn wait_words(name: &str) -> Option<&'static str> {
    WAIT_WORDS
        .iter()
        .find(|w| w.pattern.matches(name))
        .map(|w| w.words)
}

/// The layer a category belongs to (which team a report goes to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// A GPU driver waiting for the GPU (fences, the DRM scheduler).
    Gpu,
    /// A network or userspace filesystem waiting for its server.
    Filesystem,
    /// The page cache: page locks, writeback.
    PageCache,
    /// Memory management: OOM, reclaim, compaction.
    Memory,
    /// Networking: the RTNL lock, namespace teardown.
    Network,
}

/// A frame pattern and the category it shows.
#[derive(Debug, Clone, Copy)]
pub struct CategoryRule {
    pub pattern: Pattern,
    pub layer: Layer,
    /// `{driver}` is replaced by the waiting GPU driver (amdgpu, nouveau, i915, lima, v3d…).
    pub label: &'static str,
}

const fn c(names: &'static [&'static str], layer: Layer, label: &'static str) -> CategoryRule {
    CategoryRule {
        pattern: Pattern::Names(names),
        layer,
        label,
    }
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
    ];
    ENTRY.contains(&name)
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
    "ksys_",
    "compat_SyS_",
    "SyS_",
    "SYSC_",
    "sys_",
];

/// A function that takes a well-known lock itself (or through an inlined helper: `inode_lock` is `down_write`
/// on `i_rwsem`): the lock's slow path is a scheduler function `/proc/<tid>/stack` omits, so on current
/// kernels this function is the top frame of a thread waiting for that lock. Each entry names its mechanism
/// (the lock) and the primitive's words, so a live stack and a pasted log say the same.
#[derive(Debug, Clone, Copy)]
pub struct LockTaker {
    pub pattern: Pattern,
    /// The wait primitive's words ([`WAIT_WORDS`]): `mutex wait`, `rwsem wait (write)`…
    pub wait: &'static str,
    /// Which lock: `i_rwsem (the inode lock)`, `cgroup_mutex`…
    pub lock: &'static str,
}

const fn t(names: &'static [&'static str], wait: &'static str, lock: &'static str) -> LockTaker {
    LockTaker {
        pattern: Pattern::Names(names),
        wait,
        lock,
    }
}

/// Functions that take a known lock, by the lock they take (fs/namei.c, kernel/cgroup, drivers/base,
/// drivers/pci, drivers/clk, drivers/gpu/drm…).
pub const LOCK_TAKERS: &[LockTaker] = &[
    // VFS: the inode lock (`inode_lock` = down_write, `inode_lock_shared` = down_read on i_rwsem).
    t(
        &[
            "filename_create",
            "do_rmdir",
            "do_unlinkat",
            "lock_rename",
            "lock_rename_child",
            "lock_two_nondirectories",
            "do_truncate",
            "chown_common",
            "chmod_common",
            "vfs_setxattr",
            "vfs_removexattr",
            "generic_file_write_iter",
            "ext4_file_write_iter",
            "ext4_buffered_write_iter",
            "ext4_dio_write_iter",
            "shmem_fallocate",
            "do_last",
            "open_last_lookups",
            "lock_mount",
            "inode_lock",
            "inode_lock_nested",
        ],
        "rwsem wait (write)",
        "the inode lock (i_rwsem; i_mutex before 4.7)",
    ),
    t(
        &[
            "lookup_slow",
            "walk_component",
            "iterate_dir",
            "inode_lock_shared",
        ],
        "rwsem wait (read)",
        "the inode lock (i_rwsem; i_mutex before 4.7)",
    ),
    t(&["fuse_lock_inode"], "mutex wait", "the FUSE inode's mutex"),
    // Filesystems' own inode and tree locks.
    t(
        &[
            "ext4_map_blocks",
            "ext4_da_get_block_prep",
            "ext4_da_map_blocks",
            "ext4_ext_truncate",
            "ext4_punch_hole",
            "ext4_ind_map_blocks",
        ],
        "rwsem wait",
        "the ext4 inode's i_data_sem",
    ),
    t(
        &[
            "btrfs_tree_lock",
            "btrfs_tree_read_lock",
            "__btrfs_tree_lock",
            "__btrfs_tree_read_lock",
            "btrfs_lock_root_node",
            "btrfs_read_lock_root_node",
        ],
        "rwsem wait",
        "a btrfs tree block's lock (extent buffer rwsem)",
    ),
    t(
        &["btrfs_inode_lock"],
        "rwsem wait",
        "the inode lock (i_rwsem; btrfs_inode_lock)",
    ),
    t(
        &[
            "nfs_start_io_write",
            "nfs_start_io_read",
            "nfs_start_io_direct",
            "ceph_start_io_write",
            "ceph_start_io_read",
            "ceph_start_io_direct",
        ],
        "rwsem wait",
        "the inode lock (i_rwsem) between buffered and direct I/O",
    ),
    t(
        &["f2fs_lock_op", "f2fs_lock_all"],
        "rwsem wait",
        "f2fs's checkpoint rwsem (cp_rwsem)",
    ),
    t(
        &["xfs_ilock", "xfs_ilock_nowait", "xfs_lock_two_inodes"],
        "rwsem wait",
        "the XFS inode lock (i_lock/i_mmaplock)",
    ),
    // The superblock's s_umount and the mount namespace.
    t(
        &[
            "iterate_supers",
            "__iterate_supers",
            "super_lock",
            "grab_super",
            "deactivate_super",
            "freeze_super",
            "thaw_super",
            "user_get_super",
            "get_super",
        ],
        "rwsem wait",
        "s_umount (the superblock lock)",
    ),
    t(
        &["namespace_lock"],
        "rwsem wait (write)",
        "namespace_sem (mounts)",
    ),
    // cgroups.
    t(
        &[
            "proc_cgroup_show",
            "cgroup_kn_lock_live",
            "cgroup_lock_and_drain_offline",
            "cgroup_lock",
            "cgroup_mkdir",
            "cgroup_rmdir",
            "cgroup_release_agent",
            "cgroup_transfer_tasks",
            "cgroup_attach_task_all",
            "css_release_work_fn",
            "cgroup_bpf_release",
            "cgroup_destroy_wb",
            // Fork into a cgroup (CLONE_INTO_CGROUP) takes cgroup_mutex here, and cgroup_threadgroup_rwsem in
            // cgroup_can_fork too: the wait's primitive says which (see `lock_taken_with`).
            "cgroup_css_set_fork",
            "cgroup_can_fork",
        ],
        "mutex wait",
        "cgroup_mutex",
    ),
    t(
        &[
            "cgroup_attach_lock",
            "cgroup_procs_write_start",
            "cgroup_can_fork",
            "cgroup_threadgroup_change_begin",
        ],
        "percpu rwsem wait",
        "cgroup_threadgroup_rwsem",
    ),
    // Networking.
    t(
        &[
            "rtnl_lock",
            "rtnl_lock_killable",
            "__rtnl_lock",
            "rtnl_lock_interruptible",
            // Work items and handlers that call rtnl_lock() first thing (often inlined or tail-called, so
            // the mutex's slow path sits right under them): the wireless regulatory check, IPv6 address
            // configuration, the wireless-extensions ioctl, an rtnetlink request or dump (rtnetlink's
            // dump cb_mutex is rtnl_mutex itself).
            "reg_check_chans_work",
            "addrconf_dad_work",
            "addrconf_verify_work",
            "wext_handle_ioctl",
            "rtnetlink_rcv_msg",
            "__netlink_dump_start",
        ],
        "mutex wait",
        "rtnl_mutex (RTNL)",
    ),
    t(
        &["netlink_dump"],
        "mutex wait",
        "the netlink socket's dump cb_mutex",
    ),
    t(
        &["genl_rcv", "genl_lock"],
        "mutex wait",
        "genl_mutex (generic netlink)",
    ),
    t(
        &[
            "freezer_write",
            "freezer_change_state",
            "freezer_css_online",
            "freezer_attach",
        ],
        "mutex wait",
        "freezer_mutex (the cgroup v1 freezer)",
    ),
    t(
        &[
            "cpuset_write_resmask",
            "cpuset_css_online",
            "cpuset_can_attach",
            "cpuset_attach",
            "cpuset_write_u64",
        ],
        "mutex wait",
        "cpuset_mutex",
    ),
    // The driver core and buses: device_lock() is mutex_lock(&dev->mutex).
    t(
        &[
            "__device_attach",
            "device_attach",
            "device_initial_probe",
            "device_driver_attach",
            "__driver_attach",
            "device_release_driver_internal",
            "device_shutdown",
            "device_lock",
            "uevent_show",
            "hub_event",
            "usb_lock_device_for_reset",
            "read_descriptors",
            "pci_dev_lock",
            "pci_bus_lock",
            "pci_slot_lock",
            "pci_reset_function",
            "pci_try_reset_function",
            "pci_dev_trylock",
        ],
        "mutex wait",
        "the device's lock (device_lock)",
    ),
    t(
        &[
            "pci_lock_rescan_remove",
            "pci_stop_and_remove_bus_device_locked",
            "pci_rescan_bus_locked",
        ],
        "mutex wait",
        "pci_rescan_remove_lock (PCI core)",
    ),
    t(
        &["pciehp_reset_slot", "pciehp_check_presence"],
        "rwsem wait (read)",
        "the hotplug slot's reset_lock (pciehp)",
    ),
    // Only lock_device_hotplug() sleeps on the mutex: lock_device_hotplug_sysfs() takes it with
    // mutex_trylock and, when it is held, sleeps 5 ms (msleep) and restarts the syscall — never a mutex wait.
    t(
        &["lock_device_hotplug"],
        "mutex wait",
        "device_hotplug_lock",
    ),
    t(
        &["lock_system_sleep"],
        "mutex wait",
        "system_transition_mutex (suspend/hibernate)",
    ),
    t(
        &[
            "cpus_read_lock",
            "get_online_cpus",
            "cpu_hotplug_begin",
            "cpus_write_lock",
        ],
        "percpu rwsem wait",
        "cpu_hotplug_lock",
    ),
    t(
        &["mem_hotplug_begin", "get_online_mems"],
        "percpu rwsem wait",
        "mem_hotplug_lock",
    ),
    // The clock framework: every clk_prepare/clk_set_rate takes the global prepare_lock.
    t(
        &["clk_prepare_lock"],
        "mutex wait",
        "prepare_lock (the clock framework's global lock)",
    ),
    // sysfs/kernfs files: the open file's mutex around show/store.
    t(
        &[
            "kernfs_fop_write_iter",
            "kernfs_fop_write",
            "kernfs_seq_start",
            "kernfs_fop_read_iter",
        ],
        "mutex wait",
        "the sysfs file's of->mutex",
    ),
    // Block devices.
    t(
        &[
            "blkdev_get_by_dev",
            "blkdev_get",
            "__blkdev_get",
            "blkdev_put",
            "bdev_open",
            "bdev_release",
            "blkdev_get_whole",
        ],
        "mutex wait",
        "the disk's open_mutex (bd_mutex)",
    ),
    t(
        &[
            "blk_mq_quiesce_tagset",
            "blk_mq_unquiesce_tagset",
            "blk_mq_update_nr_hw_queues",
        ],
        "mutex wait",
        "the tag set's tag_list_lock (blk-mq)",
    ),
    t(
        &["nbd_ioctl", "nbd_open", "nbd_release"],
        "mutex wait",
        "the nbd device's config_lock",
    ),
    // Consoles, frame buffers and ttys.
    t(
        &["console_lock", "console_lock_single_hold"],
        "semaphore wait",
        "console_sem",
    ),
    t(&["lock_fb_info"], "mutex wait", "fb_info->lock"),
    // tty_lock() is tty_lock_nested(tty, 0) in 3.x-4.x kernels: the _nested one takes legacy_mutex.
    t(
        &[
            "tty_lock",
            "tty_lock_nested",
            "tty_lock_interruptible",
            "tty_lock_slave",
        ],
        "mutex wait",
        "tty->legacy_mutex",
    ),
    t(
        &["n_tty_read", "n_tty_write"],
        "rwsem wait (read)",
        "tty->termios_rwsem",
    ),
    t(
        &[
            "tty_ldisc_ref_wait",
            "tty_ldisc_lock",
            "__tty_ldisc_lock",
            "__tty_ldisc_lock_nested",
        ],
        "semaphore wait",
        "the tty's line discipline semaphore (ldsem)",
    ),
    t(
        &[
            "actual_brightness_show",
            "backlight_device_set_brightness",
            "brightness_store",
        ],
        "mutex wait",
        "the backlight's ops_lock",
    ),
    t(
        &["fb_deferred_io_work"],
        "page lock wait",
        "the framebuffer's pages (fb deferred I/O folio_lock)",
    ),
    t(
        // The mailbox transaction mutex: rpi_firmware_transaction takes it, or (since 5.x)
        // rpi_firmware_property_list around the whole exchange.
        &["rpi_firmware_transaction", "rpi_firmware_property_list"],
        "mutex wait",
        "the Raspberry Pi firmware mailbox transaction lock",
    ),
    // DRM core and GPU drivers' well-known locks.
    t(
        &["drm_release", "drm_open", "drm_stub_open"],
        "mutex wait",
        "drm_global_mutex / the file list lock (DRM core)",
    ),
    t(
        &[
            "drm_client_modeset_commit",
            "drm_client_modeset_probe",
            "drm_client_modeset_dpms",
            "drm_fb_helper_restore_fbdev_mode_unlocked",
            "drm_fb_helper_set_par",
            "drm_fb_helper_hotplug_event",
            "drm_fb_helper_lastclose",
            "__drm_fb_helper_restore_fbdev_mode_unlocked",
        ],
        "mutex wait",
        "the DRM client's modeset_mutex / fb_helper->lock",
    ),
    t(
        &[
            "drm_mode_getconnector",
            "drm_helper_probe_single_connector_modes",
            "drm_helper_hpd_irq_event",
            "drm_kms_helper_hotplug_event",
            "output_poll_execute",
        ],
        "mutex wait",
        "mode_config.mutex (DRM connector probing)",
    ),
    t(
        &[
            "ttm_eu_reserve_buffers",
            "ttm_bo_reserve",
            "ttm_bo_vm_reserve",
            "drm_exec_lock_obj",
            "drm_exec_prepare_obj",
            "amdgpu_vm_lock_pd",
            "amdgpu_bo_reserve",
            "dma_resv_lock",
            "drm_gem_lock_reservations",
        ],
        "mutex wait",
        "a buffer's dma_resv lock (ww_mutex)",
    ),
    t(
        &["dm_suspend", "amdgpu_dm_atomic_commit_tail", "dm_resume"],
        "mutex wait",
        "the amdgpu display core's dc_lock",
    ),
    t(
        &[
            "kfd_ioctl_alloc_memory_of_gpu",
            "kfd_ioctl_free_memory_of_gpu",
            "kfd_ioctl_map_memory_to_gpu",
        ],
        "mutex wait",
        "the KFD process's mutex",
    ),
    t(
        &[
            "i915_mutex_lock_interruptible",
            "__i915_gem_free_objects",
            "i915_gem_retire_work_handler",
        ],
        "mutex wait",
        "struct_mutex (i915)",
    ),
    t(
        &["msm_job_run"],
        "mutex wait",
        "the msm GPU's lock (gpu->lock)",
    ),
    t(
        &["btrfs_start_delalloc_roots"],
        "mutex wait",
        "delalloc_root_mutex (btrfs)",
    ),
    t(&["kvm_vcpu_ioctl"], "mutex wait", "the vCPU's mutex (KVM)"),
];

/// The lock `name` takes, if it is a known taker.
pub fn lock_taken_by(name: &str) -> Option<&'static LockTaker> {
    LOCK_TAKERS.iter().find(|t| t.pattern.matches(name))
}

/// The lock `name` takes with the primitive the wait words `words` name (`mutex wait`, `rwsem wait (write)`…):
/// a function that takes two locks (cgroup_can_fork: cgroup_mutex, then cgroup_threadgroup_rwsem) is named by
/// the one its wait is on, and a taker whose lock is of another kind than the wait names none.
pub fn lock_taken_with(name: &str, words: &str) -> Option<&'static LockTaker> {
    LOCK_TAKERS
        .iter()
        .find(|t| t.pattern.matches(name) && words.starts_with(t.wait))
}
