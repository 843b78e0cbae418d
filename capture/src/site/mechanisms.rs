//! Wait mechanisms: what a thread waits for, told by telltale frames, and on what (who must act for it to
//! wake). A mechanism may require an inner wait under its frame (a journal commit over buffer I/O is the
//! storage's; over nothing visible it may be the running handles): the site names the deepest informative
//! wait, not the first known one. Read innermost frame first with the category rules ([`super::rules`]);
//! `{driver}` in a label is the GPU or block driver that waits.
//!
//! Each row names one mechanism; a row naming a single function says which mechanism it stands for (the
//! self-test in `capture/tests/traces.rs` checks that every row is exercised by a recorded trace).

use super::rules::Pattern;

/// One mechanism.
#[derive(Debug, Clone, Copy)]
pub struct Mechanism {
    /// Short name (docs/capture.md lists them).
    pub name: &'static str,
    /// A frame that shows the mechanism.
    pub frames: Pattern,
    /// An inner frame (nearer the top) the mechanism requires, when it does.
    pub under: Option<Pattern>,
    /// The category shown in brackets: what it waits for, and on what.
    pub label: &'static str,
}

const fn m(
    name: &'static str,
    frames: &'static [&'static str],
    under: Option<&'static [&'static str]>,
    label: &'static str,
) -> Mechanism {
    Mechanism {
        name,
        frames: Pattern::Names(frames),
        under: match under {
            Some(u) => Some(Pattern::Names(u)),
            None => None,
        },
        label,
    }
}

/// Frames of a wait for a buffer head's I/O (`wait_on_buffer` and the bit wait under it).
const BUFFER_IO: &[&str] = &[
    "sleep_on_buffer",
    "__wait_on_buffer",
    "wait_on_buffer",
    "sync_buffer",
    "bit_wait_io",
    "out_of_line_wait_on_bit",
    "__wait_on_bit",
    "io_schedule",
    "io_schedule_timeout",
];

/// Journal commit: jbd2's commit writes the transaction's buffers and waits for them.
const JBD2_COMMIT: &[&str] = &[
    "jbd2_journal_commit_transaction",
    "journal_commit_transaction",
];
/// The journal's commit, or its checkpoint (writing back committed buffers to make room).
const JBD2_WRITES: &[&str] = &[
    "jbd2_journal_commit_transaction",
    "journal_commit_transaction",
    "jbd2_log_do_checkpoint",
    "__jbd2_log_wait_for_space",
];

/// Every mechanism, most specific first where two share a frame.
pub const MECHANISMS: &[Mechanism] = &[
    m(
        "journal commit over buffer I/O",
        JBD2_WRITES,
        Some(BUFFER_IO),
        "journal commit (jbd2) waits for its buffers' I/O: the storage has not completed it",
    ),
    m(
        "journal commit",
        JBD2_COMMIT,
        None,
        "journal commit (jbd2): waits for running handles or its buffers' I/O",
    ),
    m(
        "GPU scheduler entity drain",
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
        None,
        "GPU scheduler entity drain ({driver}): the GPU has not run the context's queued jobs",
    ),
    m(
        "DRM flip completion",
        &[
            "drm_atomic_helper_wait_for_flip_done",
            "drm_atomic_helper_wait_for_dependencies",
            "drm_crtc_commit_wait",
            "drm_atomic_helper_commit_cleanup_done",
        ],
        None,
        "display flip completion ({driver}): the display engine has not signalled flip_done",
    ),
    m(
        "DRM vblank",
        &[
            "drm_atomic_helper_wait_for_vblanks",
            "drm_wait_one_vblank",
            "drm_crtc_wait_one_vblank",
            "drm_wait_vblank_ioctl",
        ],
        None,
        "vblank wait ({driver}): no vblank interrupt from the display",
    ),
    // round 7: drivers/gpu/drm/drm_vblank_work.c: drm_vblank_work_flush waits (wait_event_lock_irq on
    // vblank->work_wait_queue) until the vblank work has run, and it runs only once the vblank counter reaches
    // the work's target: a pipe whose vblank interrupt never comes never runs it.
    m(
        "DRM vblank work",
        &["drm_vblank_work_flush", "drm_vblank_work_flush_all"],
        None,
        "vblank work flush ({driver}): the vblank work has not run — no vblank interrupt from the display",
    ),
    // round 7 (no public trace yet: AWAITING_A_TRACE in tests/traces.rs):
    // drivers/gpu/drm/msm/disp/dpu1/dpu_encoder.c: dpu_encoder_helper_wait_for_irq waits through
    // dpu_encoder_helper_wait_event_timeout (wait_event_timeout on wait_info->wq until *atomic_cnt is 0),
    // and only the DPU interrupt's callback (vblank, ctl start, pingpong done, tx done) decrements it; the
    // commit's wait for it is dpu_encoder_phys_{vid,cmd}_wait_for_commit_done under dpu_kms_wait_for_commit_done.
    m(
        "msm DPU commit done",
        &[
            "dpu_encoder_helper_wait_for_irq",
            "dpu_encoder_helper_wait_event_timeout",
        ],
        None,
        "display commit done ({driver}): the DPU has not raised its interrupt (vblank, ctl start, pingpong/tx done)",
    ),
    // drivers/gpu/drm/vc4/vc4_gem.c: vc4_wait_for_seqno sleeps on vc4->job_wait_queue until
    // vc4->finished_seqno reaches the job's seqno; only the V3D's job-done interrupt (vc4_irq.c, through
    // vc4_job_handle_completed's path) advances finished_seqno.
    m(
        "vc4 seqno wait",
        &["vc4_wait_for_seqno"],
        None,
        "V3D job wait ({driver}): the GPU has not finished the job (finished_seqno below the job's seqno)",
    ),
    m(
        "virtqueue",
        &[
            "virtio_gpu_queue_ctrl_sgs",
            "virtio_gpu_queue_ctrl_buffer",
            "virtio_gpu_queue_fenced_ctrl_buffer",
            "virtio_gpu_queue_cursor",
            "virtio_gpu_cursor_ping",
            "virtqueue_wait_for_used",
            "virtblk_wait_for_used",
        ],
        None,
        "virtqueue wait ({driver}): the device (the host) has not used the queue's buffers",
    ),
    m(
        "clock framework",
        &["clk_prepare_lock"],
        None,
        "clock framework: prepare_lock (every clk_prepare/clk_set_rate of the system)",
    ),
    m(
        "NVMe controller",
        &[
            "nvme_dev_disable",
            "nvme_reset_work",
            "nvme_remove",
            "nvme_sync_queues",
            "nvme_wait_freeze",
            "nvme_wait_freeze_timeout",
            "__nvme_submit_sync_cmd",
            "nvme_submit_sync_cmd",
            "nvme_wait_reset",
            "nvme_timeout",
        ],
        None,
        "NVMe controller: waits for the controller (reset, disable or an admin command)",
    ),
    m(
        "blk-mq tag",
        &[
            "blk_mq_get_tag",
            "__blk_mq_get_tag",
            "blk_mq_get_request",
            "__blk_mq_alloc_request",
        ],
        None,
        "blk-mq: no free request tag: the device has not completed its requests",
    ),
    m(
        "block queue freeze",
        &[
            "blk_mq_freeze_queue_wait",
            "blk_mq_freeze_queue_wait_timeout",
            "blk_freeze_queue",
            "blk_mq_freeze_queue",
            "blk_queue_enter",
            "bio_queue_enter",
            "__bio_queue_enter",
        ],
        None,
        "block queue freeze: requests in flight have not completed",
    ),
    m(
        "nbd",
        &[
            "nbd_queue_rq",
            "nbd_handle_cmd",
            "sock_xmit",
            "nbd_start_device_ioctl",
            "nbd_disconnect_and_put",
            "nbd_xmit_timeout",
            "recv_work",
        ],
        None,
        "nbd: waits for the nbd server (its socket)",
    ),
    m(
        "HMM range fault",
        &["hmm_range_fault", "amdgpu_hmm_range_get_pages", "nouveau_range_fault"],
        None,
        "HMM range fault ({driver}): faulting a user range in for the GPU, retried while it is invalidated",
    ),
    m(
        "device memory copy",
        &["memcpy_toio", "__iowrite32_copy", "__iowrite64_copy", "memcpy_toio_aligned"],
        None,
        "copy to device memory: the CPU is held on its writes across PCI (running, not asleep)",
    ),
    m(
        "QXL command ring",
        &["qxl_ring_push"],
        None,
        "QXL command ring full: the host has not consumed the commands",
    ),
    m(
        "sunrpc cache upcall",
        &["cache_check", "exp_find", "exp_find_key", "rqst_exp_find", "rqst_exp_get_by_name"],
        None,
        "nfsd export cache: waits for mountd's answer (sunrpc cache upcall)",
    ),
    m(
        "bcachefs journal quiesce",
        &["journal_quiesce", "bch2_journal_flush_seq", "bch2_journal_flush_pins"],
        None,
        "bcachefs journal: waits for outstanding journal reservations and writes",
    ),
    m(
        "writeback work completion",
        // sync(2)/syncfs(2) and a filesystem's forced writeback queue a work item on the flusher and wait
        // for it (a completion before 4.2, wb_wait_for_completion since): the flusher's I/O is what is slow.
        &[
            "sync_inodes_sb",
            "writeback_inodes_sb",
            "writeback_inodes_sb_nr",
            "try_to_writeback_inodes_sb",
        ],
        None,
        "writeback wait: the flusher's writeback of the filesystem has not completed",
    ),
    m(
        "sound card teardown",
        // Unbinding a card (rmmod, device removal) waits for every open file of the card to be released.
        &["snd_card_disconnect_sync", "snd_card_free"],
        None,
        "sound card teardown (ALSA): waits for every open file of the card to be closed (a client keeps one open)",
    ),
    m(
        "DRBD RDMA transport teardown",
        // drbd_transport_rdma's dtr_free waits (wait_event) until the transport's RDMA flows and CM ids are
        // released by their completions.
        &["dtr_free"],
        None,
        "DRBD RDMA transport teardown: waits for the connection's RDMA work to be released",
    ),
    m(
        "RDMA verbs command",
        // A user's verbs call goes through ib_uverbs to the provider driver, which waits for its device (the
        // firmware's command interface, or the peer of a software provider).
        &[
            "ib_uverbs_modify_qp",
            "ib_uverbs_ex_modify_qp",
            "ib_uverbs_create_qp",
            "ib_uverbs_ex_create_qp",
            "ib_uverbs_destroy_qp",
            "ib_uverbs_create_cq",
            "ib_uverbs_destroy_cq",
            "ib_uverbs_reg_mr",
            "ib_uverbs_dereg_mr",
        ],
        None,
        "RDMA verbs command: the provider driver waits for its device (firmware or peer) to answer",
    ),
    m(
        "SCSI target command drain",
        // LIO stops or aborts a command (a TMR's LUN reset or abort, a session's teardown) and waits on the
        // command's completion until the backend finishes it.
        &[
            "target_stop_task",
            "target_put_cmd_and_wait",
            "transport_wait_for_tasks",
            "__transport_wait_for_tasks",
            "target_wait_for_sess_cmds",
        ],
        None,
        "SCSI target (LIO) command drain: completion wait for in-flight commands the backend has not finished",
    ),
    m(
        "expedited RCU grace period over CPU stop",
        // Before 4.12 an expedited grace period (synchronize_net under RTNL, synchronize_rcu_expedited)
        // ran try_stop_cpus: it waits until every CPU's stopper thread has run, so a CPU that does not
        // schedule (a soft lockup, a busy loop with preemption off) holds it.
        &["synchronize_sched_expedited", "synchronize_rcu_expedited"],
        Some(&["__stop_cpus", "stop_cpus", "try_stop_cpus"]),
        "expedited RCU grace period: waits for every CPU's stopper thread (stop_cpus): a CPU that does not schedule holds it",
    ),
    m(
        "btrfs ordered extent",
        // fs/btrfs/ordered-data.c: a sync, fsync, transaction commit or cache write waits (wait_event on the
        // extent's wait queue) until an ordered extent's data I/O and its completion work are done.
        &[
            "btrfs_start_ordered_extent",
            "btrfs_wait_ordered_extents",
            "btrfs_wait_ordered_roots",
            "btrfs_wait_ordered_range",
        ],
        None,
        "btrfs ordered extent: waits for the extent's data I/O and its completion to finish",
    ),
    m(
        "OCFS2 cluster lock",
        // fs/ocfs2/dlmglue.c: a cluster lock request goes to the DLM and waits (ocfs2_wait_for_mask, a
        // completion) until the lock is granted: another node holds it, or the DLM lost its peer.
        &["__ocfs2_cluster_lock", "ocfs2_cluster_lock", "ocfs2_wait_for_mask"],
        None,
        "OCFS2 cluster lock: waits for the DLM to grant it (another node holds it or the cluster lost a peer)",
    ),
    m(
        "md sync thread stop",
        // drivers/md/md.c: stopping or reconfiguring an array interrupts its resync/recovery thread and waits
        // (wait_event on MD_RECOVERY_RUNNING, then kthread_stop) until it has finished its current window.
        &["stop_sync_thread", "md_unregister_thread"],
        None,
        "md RAID: waits for the resync/recovery thread to stop (it waits itself, usually on member disk I/O)",
    ),
    m(
        "PCI config access",
        &["pci_wait_cfg", "pci_cfg_access_lock", "pci_dev_wait"],
        None,
        "PCI: waits for config space access or a device to come back from reset",
    ),
    // Round 8 (issue 38 held-out: non-GPU families).
    m(
        "SCSI target command free",
        // drivers/target/target_core_transport.c: a fabric freeing a command with wait_for_tasks (a closing
        // iSCSI connection) waits in target_wait_free_cmd (__transport_wait_for_tasks, inlined) for the
        // command to stop, and for an aborted one on its free completion: both wait for the backend.
        &["transport_generic_free_cmd", "target_wait_free_cmd"],
        None,
        "SCSI target (LIO) command drain: completion wait for in-flight commands the backend has not finished",
    ),
];

/// The mechanism a frame at `i` shows, given the frames inner to it (`frames[..i]`).
pub fn at(names: &[&str], i: usize) -> Option<&'static Mechanism> {
    MECHANISMS.iter().find(|m| {
        m.frames.matches(names[i])
            && m.under
                .is_none_or(|u| names[..i].iter().any(|n| u.matches(n)))
    })
}
