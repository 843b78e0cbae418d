//! Round 19 (issue 38 held-out: kernel threads) and round 26 (direct I/O): lock takers, most of them
//! functions that call a `__sched` wait primitive themselves, so `/proc/<tid>/stack` (which leaves the
//! primitive out) ends at them. Each row names what that call waits on, read from the function's source;
//! the lookups read these rows after [`super::LOCK_TAKERS`].

use super::pattern::{t, LockTaker};

/// Round 19's lock takers (kswapd's inode eviction on ZFS, dm-crypt's worker, ACPICA, usb-storage's error handler).
pub const HIDDEN_WAIT_TAKERS: &[LockTaker] = &[
    // module/zfs/zfs_znode.c: zfs_zinactive (the last iput of a ZFS inode: zpl_evict_inode -> zfs_inactive)
    // first takes the object's hold lock so no zfs_zget races the release (ZFS_OBJ_HOLD_ENTER = mutex_enter
    // on the z_hold_mtx bucket of the object id before 0.7, zfs_znode_hold_enter's zh_lock since), then the
    // znode's z_lock. A reclaiming kswapd waits here while the holder itself waits for memory.
    t(
        &["zfs_zinactive"],
        "mutex wait",
        "the ZFS object's hold lock (ZFS_OBJ_HOLD_ENTER / zfs_znode_hold_enter) or the znode's z_lock",
    ),
    // drivers/md/dm-crypt.c: crypt_convert hands each sector to the cipher; when the crypto driver's queue is
    // full the request is backlogged (-EBUSY) and dm-crypt waits on ctx->restart (wait_for_completion), which
    // kcryptd_async_done completes once the driver takes the request: an accelerator that stops answering
    // (QAT, CAAM) holds every kcryptd worker here.
    t(
        &["crypt_convert"],
        "completion wait",
        "the crypto driver's backlog (ctx->restart: dm-crypt waits for the cipher to take the request)",
    ),
    // drivers/acpi/acpica/utmutex.c: acpi_ut_acquire_mutex takes one of ACPICA's own mutexes (the namespace,
    // interpreter, tables… locks, each an OS semaphore: acpi_os_acquire_mutex = acpi_os_wait_semaphore) with
    // no timeout; an AML method that sleeps or never returns while holding it (a thermal zone's _TMP, a GPE
    // method) blocks every other ACPI evaluation, kacpid's GPE work first.
    t(
        &["acpi_ut_acquire_mutex"],
        "semaphore wait",
        "an ACPICA mutex (namespace or interpreter lock, an OS semaphore)",
    ),
    // drivers/usb/storage/scsiglue.c: the SCSI error handler's device reset (eh_device_reset_handler =
    // device_reset) takes the USB storage device's dev_mutex before the transport reset; the usb-storage
    // control thread holds it for the whole command, so a stalled transfer blocks scsi_eh_N here.
    t(
        &["device_reset"],
        "mutex wait",
        "the USB storage device's mutex (us->dev_mutex, usb-storage)",
    ),
    // Round 24 (issue 38 held-out: network and cluster storage).
    // drivers/target/iscsi/iscsi_target_erl0.c: iscsit_cause_connection_reinstatement (a TMR, a session
    // reinstatement, a timed-out command's handler) signals the connection's RX and TX threads and, asked to
    // sleep, waits (wait_for_completion) on conn->conn_wait_comp, which only iscsit_close_connection completes
    // once those threads have torn the connection down; iscsit_connection_reinstatement_rcfr waits on the same
    // completion. A TX/RX thread stuck itself (in kthread_stop, on the backend) holds every caller here.
    t(
        &[
            "iscsit_cause_connection_reinstatement",
            "iscsit_connection_reinstatement_rcfr",
        ],
        "completion wait",
        "the iSCSI target connection's close (conn_wait_comp: its RX/TX threads must tear it down)",
    ),
    // drbd/drbd_state.c (DRBD 9, out of tree): a state change asked to wait for completion (CS_WAIT_COMPLETE,
    // every drbdsetup command's) ends in __state_change_unlock, which waits (wait_for_completion) on the
    // change's `done` completion: the resource's worker thread completes it after running the
    // after-state-change work (w_after_state_change), which itself waits on peers and the backing disk.
    t(
        &["__state_change_unlock"],
        "completion wait",
        "the DRBD state change's done completion (the resource's worker must finish the after-state-change work)",
    ),
    // Round 26 (issue 38 held-out: bare /proc stacks). Synchronous direct I/O waits for its own bios with
    // an inlined io_schedule loop: fs/direct-io.c do_blockdev_direct_IO (dio_await_completion → dio_await_one,
    // static), block/fops.c (block/block_dev.c before 5.16) __blkdev_direct_IO_simple and __blkdev_direct_IO
    // (`for (;;) { set_current_state(TASK_UNINTERRUPTIBLE); ... blk_io_schedule(); }` until the bio's
    // end_io clears the waiter), fs/iomap/direct-io.c __iomap_dio_rw (the same loop on dio->submit.waiter).
    // The wait is the device's: a suspended device-mapper table or a dead path holds the bios.
    t(
        &[
            "do_blockdev_direct_IO",
            "__blkdev_direct_IO_simple",
            "__blkdev_direct_IO",
            "__iomap_dio_rw",
        ],
        "I/O wait",
        "the direct I/O's bios (the block device has not completed them)",
    ),
    // kernel/fork.c: a CLONE_VFORK clone (vfork, posix_spawn) ends in wait_for_vfork_done (static, inlined into
    // kernel_clone; _do_fork 4.2-5.9, do_fork before), which waits (wait_for_completion_killable) on
    // vfork_done until the child execs or exits: the parent's wait is the child's, which may itself be stuck.
    t(
        &["kernel_clone", "_do_fork", "do_fork", "wait_for_vfork_done"],
        "completion wait",
        "the vfork child's exec or exit (vfork_done)",
    ),
    // drivers/infiniband/core/uverbs_main.c: ib_uverbs_remove_one (the uverbs client's remove, on device
    // unregistration) waits (wait_for_completion) on uverbs_dev->comp unless the driver can disassociate its
    // users; the completion comes when the last open /dev/infiniband/uverbsN file drops its reference.
    t(
        &["ib_uverbs_remove_one"],
        "completion wait",
        "the uverbs device's last open file closing (uverbs_dev->comp)",
    ),
    // Round 29 (issue 38 held-out: Q&A sites, forums and blog posts). fs/squashfs/cache.c: squashfs_cache_get
    // finds or fills an entry of one of squashfs's small fixed caches (the read_page cache has one entry per
    // decompressor: one with CONFIG_SQUASHFS_DECOMP_SINGLE). With every entry in use it sleeps in
    // `wait_event(cache->wait_queue, cache->unused)`; on an entry another reader is still filling it sleeps
    // in `wait_event(entry->wait_queue, !entry->pending)`. Both wait for another thread's block read and
    // decompression, so one slow read (an I/O-throttled cgroup) stalls every reader of the filesystem.
    t(
        &["squashfs_cache_get"],
        "waitqueue wait",
        "a squashfs cache entry (every entry in use, or the entry's block still being read by another thread)",
    ),
    // Round 31 (issue 38 held-out: subsystem lists). drivers/infiniband/core/cm.c: cm_destroy_id drops its own
    // reference (cm_deref_id) and then waits in wait_for_completion(&cm_id_priv->comp), which cm_deref_id
    // completes when the id's refcount reaches zero: every queued CM work item and every MAD sent for the id
    // (cm_alloc_msg takes a reference, the send's completion handler drops it) must finish first, so a MAD the
    // layer below never completes (a hung HCA) holds the destroy forever.
    t(
        &["cm_destroy_id"],
        "completion wait",
        "the CM id's release, when its last reference drops (cm_id_priv->comp: CM work and MADs in flight hold it)",
    ),
];
