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
        "journal commit writing its inodes' data pages",
        // Round 28: the commit writes the transaction's inodes' data first (fs/jbd2/commit.c
        // journal_submit_data_buffers → the filesystem's j_submit_inode_data_buffers: ext4's data=journal
        // `ext4_journalled_submit_inode_data_buffers`, jbd2's own `jbd2_journal_submit_inode_data_buffers`),
        // through mm/page-writeback.c `write_cache_pages`, which waits for each page's lock (or writeback): a
        // task holding the page (a write fault in `ext4_page_mkwrite`) while it waits for this commit stalls it.
        &[
            "ext4_journalled_submit_inode_data_buffers",
            "jbd2_journal_submit_inode_data_buffers",
        ],
        Some(&["write_cache_pages"]),
        "journal commit (jbd2) writing its inodes' data pages waits for a page (its lock or writeback) another task holds",
    ),
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
        "GPU scheduler entity teardown over a dependency fence",
        // Round 13: drivers/gpu/drm/scheduler/sched_entity.c before 6.2: drm_sched_entity_fini kills the
        // entity's queued jobs (drm_sched_entity_kill_jobs, inlined) and first waits for each one's
        // dependencies, "to avoid data corruptions" (`while ((f = job->sched->ops->dependency(job, entity)))
        // dma_fence_wait(f, false)`): fences of other GPU work the job was to wait for. amddrm_: the DKMS copy.
        &[
            "drm_sched_entity_fini",
            "drm_sched_entity_kill_jobs",
            "amddrm_sched_entity_fini",
        ],
        Some(super::rules::FENCE_WAIT_FRAMES),
        "GPU scheduler entity teardown ({driver}): a queued job's dependency fence (other GPU work it waits for) has not signalled",
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
        // i915's commit flushes them through intel_wait_for_vblank_workers (display/intel_display.c).
        &[
            "drm_vblank_work_flush",
            "drm_vblank_work_flush_all",
            "intel_wait_for_vblank_workers",
        ],
        None,
        "vblank work flush ({driver}): the vblank work has not run — no vblank interrupt from the display",
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
        "md superblock write",
        // Round 31: drivers/md/md.c md_super_wait waits on mddev->sb_wait until mddev->pending_writes is 0,
        // the count md_super_write raised for each superblock or write-intent bitmap page it submitted to a
        // member disk and super_written (the bio's end_io) lowers: the member disks have not completed it.
        // md_bitmap_daemon_work, md_bitmap_unplug and md_update_sb all end in it.
        &["md_super_wait"],
        None,
        "md superblock/bitmap write: the member disks have not completed it",
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
            // Not recv_work (round 27): its socket receive sleeps interruptibly (sk_wait_data), so a recv_work
            // in D state is in another wait it called (nbd_config_put destroying the recv workqueue it runs on).
        ],
        None,
        "nbd: waits for the nbd server (its socket)",
    ),
    // Round 27: drivers/md/bcache/alloc.c bch_bucket_alloc(…, wait) sleeps on the cache set's bucket_wait
    // (prepare_to_wait, TASK_UNINTERRUPTIBLE) until a free list has a bucket; the cache's allocator thread
    // (bch_allocator_thread) refills them and wakes bucket_wait, after garbage collection frees buckets.
    m(
        "bcache bucket wait",
        &["bch_bucket_alloc"],
        None,
        "bcache: waits for a free bucket (refilled by the cache's allocator thread after GC)",
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
    m(
        "iSCSI session stop",
        // Round 26. drivers/target/iscsi/iscsi_target.c: iscsit_stop_session(sess, session_sleep,
        // connection_sleep) causes each connection's reinstatement (iscsit_cause_connection_reinstatement(conn,
        // 1) waits for the connection to close) and, with session_sleep and connections left, sets
        // sleep_on_sess_wait_comp and waits in wait_for_completion(&sess->session_wait_comp), completed when the
        // last connection's close (iscsit_close_connection) ends the session. Its callers: a login reinstating
        // the initiator's old session (iscsi_check_for_session_reinstatement, in the iscsi_np login thread), a
        // logout's close-session handler, a TPG's session release. A connection closes only after its receive
        // thread has freed its commands, so a backend that never completes one (a dead tcmu-runner) holds both.
        &["iscsit_stop_session"],
        None,
        "iSCSI session stop: waits for the session's connections to close (session_wait_comp), each behind the commands its backend has not finished",
    ),
    // GPU drivers from source (issue 38): each row's frames are the driver functions that sleep for the
    // mechanism, read from the driver's source (the file is cited); the self-test lists them as awaiting a
    // public trace.
    m(
        "display interrupt wait (msm)",
        // drivers/gpu/drm/msm/disp/dpu1/dpu_encoder.c: dpu_encoder_helper_wait_for_irq sleeps
        // (wait_event_timeout in dpu_encoder_helper_wait_event_timeout) until the encoder's vsync,
        // pingpong-done or ctl-start interrupt bumps its counter; dpu_encoder_wait_for_event and the
        // physical encoders' wait_for_commit_done/tx_complete (dpu_encoder_phys_{vid,cmd}.c) call it from
        // msm_atomic_commit_tail's wait_flush/wait_for_commit_done. mdp5_crtc.c: the same wait for the
        // CTL flush (wait_event_timeout on the vblank queue) and the pingpong-done completion.
        &[
            "dpu_encoder_helper_wait_for_irq",
            "dpu_encoder_helper_wait_event_timeout",
            "dpu_encoder_wait_for_event",
            "dpu_encoder_wait_for_commit_done",
            "dpu_encoder_wait_for_tx_complete",
            "dpu_encoder_phys_vid_wait_for_commit_done",
            "dpu_encoder_phys_vid_wait_for_tx_complete",
            "dpu_encoder_phys_cmd_wait_for_commit_done",
            "dpu_encoder_phys_cmd_wait_for_tx_complete",
            "_dpu_encoder_phys_cmd_wait_for_idle",
            "_dpu_encoder_phys_cmd_wait_for_ctl_start",
            "dpu_encoder_phys_cmd_wait_for_vblank",
            "dpu_encoder_phys_wb_wait_for_commit_done",
            "dpu_kms_wait_for_commit_done",
            "dpu_kms_wait_flush",
            "mdp5_crtc_wait_for_commit_done",
            "mdp5_crtc_wait_for_pp_done",
            "mdp5_crtc_wait_for_flush_done",
            "msm_atomic_wait_for_commit_done",
        ],
        None,
        "display interrupt wait ({driver}): the display engine has not raised the encoder's vsync/pingpong-done interrupt",
    ),
    m(
        "GPU seqno wait (vc4, etnaviv)",
        // drivers/gpu/drm/vc4/vc4_gem.c: vc4_wait_for_seqno sleeps on job_wait_queue until finished_seqno
        // reaches the job's seqno; vc4_irq.c's job-done interrupt (vc4_irq_finish_render_job) raises it.
        // drivers/gpu/drm/etnaviv/etnaviv_gpu.c: etnaviv_gpu_wait_fence_interruptible sleeps on fence_event
        // until the GPU's completed fence number passes the job's (the GPU's event interrupt).
        &[
            "vc4_wait_for_seqno",
            "vc4_wait_for_seqno_ioctl_helper",
            "etnaviv_gpu_wait_fence_interruptible",
        ],
        None,
        "GPU seqno wait ({driver}): the GPU has not reached the job's seqno (no job-done interrupt)",
    ),
    m(
        "GMU firmware reply (msm)",
        // drivers/gpu/drm/msm/adreno/a6xx_hfi.c and a6xx_gmu.c: an HFI message waits (gmu_poll_timeout, a
        // readl_poll_timeout that sleeps) for the GMU's GMU2HOST message-queue interrupt bit, and an OOB
        // request polls for the GMU's ack; the GMU firmware must answer.
        &[
            "a6xx_hfi_wait_for_ack",
            "a6xx_hfi_wait_for_msg_interrupt",
            "a6xx_hfi_send_msg",
            "a6xx_gmu_set_oob",
            "a6xx_gmu_wait_for_idle",
        ],
        None,
        "GMU firmware reply ({driver}): the Adreno GMU has not acknowledged the HFI message or OOB request",
    ),
    m(
        "GSP RPC reply (nouveau)",
        // drivers/gpu/drm/nouveau/nvkm/subdev/gsp/r535.c (rm/r535/rpc.c since 6.15): an RPC is pushed on the
        // GSP command queue (cmdq.mutex held) and r535_gsp_msgq_wait polls (usleep_range) the message queue
        // until the GSP firmware writes the reply.
        &[
            "r535_gsp_msgq_wait",
            "r535_gsp_msg_recv",
            "r535_gsp_rpc_poll",
            "r535_gsp_rpc_push",
            "r535_gsp_rpc_send",
            "r535_gsp_rpc_rd",
            "gsp_msgq_recv",
            "gsp_msgq_recv_one_elem",
        ],
        None,
        "GSP RPC wait ({driver}): the GPU's GSP firmware has not answered the RPC",
    ),
    m(
        "GuC CT reply (i915, xe)",
        // drivers/gpu/drm/i915/gt/uc/intel_guc_ct.c: ct_send writes the H2G request and
        // wait_for_ct_request_update sleeps (wait_for: usleep_range loop) until the GuC's G2H response
        // arrives; drivers/gpu/drm/xe/xe_guc_ct.c: guc_ct_send_recv sleeps on g2h_fence_wq (wait_event_timeout)
        // for the reply, and on ct->wq for H2G space. intel_guc_submission.c: intel_guc_wait_for_idle waits
        // (intel_guc_wait_for_pending_msg) until every outstanding G2H reply has arrived.
        &[
            "wait_for_ct_request_update",
            "intel_guc_ct_send",
            "intel_guc_send_mmio",
            "guc_ct_send_recv",
            "xe_guc_ct_send_recv",
            "xe_guc_ct_send_recv_no_fail",
            "guc_ct_send_wait_for_retry",
            "xe_guc_mmio_send_recv",
            "intel_guc_wait_for_pending_msg",
            "intel_guc_wait_for_idle",
        ],
        None,
        "GuC firmware reply ({driver}): the GuC has not answered the host-to-GuC request",
    ),
    m(
        "PSP command reply (amdgpu)",
        // drivers/gpu/drm/amd/amdgpu/amdgpu_psp.c: psp_cmd_submit_buf holds psp->mutex, rings the PSP's ring
        // and polls its fence buffer (usleep_range) until the Platform Security Processor firmware writes the
        // command's fence (the caller holds psp->mutex); psp_wait_for busy-polls a PSP register (udelay).
        &["psp_cmd_submit_buf", "psp_wait_for", "psp_wait_for_spirom_update"],
        None,
        "PSP command ({driver}): the Platform Security Processor firmware has not completed the command (or its holder keeps psp->mutex)",
    ),
    m(
        "SR-IOV mailbox (amdgpu)",
        // drivers/gpu/drm/amd/amdgpu/mxgpu_ai.c, mxgpu_nv.c, mxgpu_vi.c: a virtual function's request to the
        // host (full GPU access, reset, init data) polls the mailbox (msleep) for the host driver's ack and
        // answer.
        &[
            "xgpu_ai_poll_ack",
            "xgpu_ai_poll_msg",
            "xgpu_nv_poll_ack",
            "xgpu_nv_poll_msg",
            "xgpu_vi_poll_ack",
            "xgpu_vi_poll_msg",
        ],
        None,
        "SR-IOV mailbox ({driver}): the host's GPU driver (the hypervisor) has not answered the virtual function",
    ),
    m(
        "DP AUX transaction",
        // drivers/gpu/drm/i915/display/intel_dp_aux.c: intel_dp_aux_wait_done sleeps (wait_event_timeout on
        // the gmbus wait queue) for the AUX channel's done interrupt; drivers/gpu/drm/msm/dp/dp_aux.c:
        // dp_aux_cmd_fifo_tx waits (wait_for_completion_timeout) for the AUX done interrupt. The sink
        // answers on the AUX channel (an absent or dead sink times out, often retried).
        &[
            "intel_dp_aux_wait_done",
            "intel_dp_aux_xfer",
            "dp_aux_cmd_fifo_tx",
            "msm_dp_aux_cmd_fifo_tx",
        ],
        None,
        "DP AUX transaction ({driver}): the DisplayPort sink has not answered on the AUX channel",
    ),
    m(
        "DP MST sideband reply",
        // drivers/gpu/drm/display/drm_dp_mst_topology.c: drm_dp_mst_wait_tx_reply sleeps on mgr->tx_waitq
        // (wait_event_timeout, 4 s) until the branch device's sideband reply arrives (its IRQ_HPD).
        &["drm_dp_mst_wait_tx_reply"],
        None,
        "DP MST sideband message ({driver}): the MST branch device has not replied",
    ),
    m(
        "virtio-gpu host response",
        // drivers/gpu/drm/virtio/virtgpu_ioctl.c, virtgpu_vram.c, virtgpu_kms.c: the capset query
        // (virtio_gpu_get_caps_ioctl), a host-visible blob's mapping (virtio_gpu_vram_mmap) sleep on
        // vgdev->resp_wq until the host's response has been dequeued.
        &["virtio_gpu_get_caps_ioctl", "virtio_gpu_vram_mmap"],
        None,
        "virtio-gpu host response ({driver}): the host has not answered the command (resp_wq)",
    ),
    m(
        "nouveau display notifier poll",
        // drivers/gpu/drm/nouveau/dispnv50/disp.c, wndw.c, base507c.c: a commit polls (nvif_msec with
        // usleep_range) until the display engine writes the core channel's completion notifier or a window's
        // "update begun" notifier.
        &[
            "nv50_disp_atomic_commit_core",
            "nv50_wndw_wait_armed",
            "base507c_ntfy_wait_begun",
        ],
        None,
        "display notifier poll ({driver}): the display engine has not written the update's completion notifier",
    ),
    m(
        "nvidia-drm flip event wait",
        // kernel-open/nvidia-drm/nvidia-drm-modeset.c: a blocking nv_drm_atomic_commit sleeps on
        // flip_event_wq (wait_event_timeout, 3 s per CRTC) until nvidia-modeset reports the previous flip
        // done (__nv_drm_handle_flip_event); its NVKMS call, when inner, is named by the NVIDIA table.
        &["nv_drm_atomic_commit"],
        None,
        "flip event wait ({driver}): nvidia-modeset has not reported the previous flip done",
    ),
    m(
        "DSI command transfer (msm)",
        // drivers/gpu/drm/msm/dsi/dsi_host.c: dsi_cmd_dma_tx triggers the command DMA and waits
        // (wait_for_completion_timeout on dma_comp) for the DSI controller's CMD_DMA_DONE interrupt; a
        // video-mode panel's command waits for the video engine's done interrupt first (dsi_wait4video_done).
        &[
            "dsi_cmd_dma_tx",
            "dsi_cmds2buf_tx",
            "msm_dsi_host_cmd_tx",
            "dsi_wait4video_done",
            "dsi_wait4video_eng_busy",
        ],
        None,
        "DSI command transfer ({driver}): the DSI controller has not raised the command-DMA done interrupt",
    ),
    m(
        "v3d hardware idle/flush poll",
        // drivers/gpu/drm/v3d/v3d_mmu.c, v3d_gem.c: the MMU's TLB flush and the reset's AXI/GCA idle requests
        // poll a register (wait_for: usleep_range) until the GPU acknowledges them.
        &["v3d_mmu_flush_all", "v3d_idle_axi", "v3d_idle_gca"],
        None,
        "hardware poll ({driver}): the GPU has not acknowledged the MMU flush or idle request",
    ),
    m(
        "i915 GT wakeref idle wait",
        // drivers/gpu/drm/i915/intel_wakeref.c, gt/intel_gt_pm.h: suspend and driver unload wait
        // (wait_var_event_killable in intel_wakeref_wait_for_idle) until the GT's wakeref drops: its requests
        // retired and the GT parked.
        &["intel_wakeref_wait_for_idle", "intel_gt_pm_wait_for_idle"],
        None,
        "GT idle wait ({driver}): the GT has not parked (its requests have not retired)",
    ),
    m(
        "NVIDIA deferred open",
        // kernel-open/nvidia/nv.c, nv-linux.h: an open of a GPU's device file completes on the device's open_q
        // kthread (nvidia_open_deferred); ioctl, mmap and the deferred close wait for it
        // (nv_wait_open_complete*: wait_for_completion on nvlfp->open_complete), and nvidia_close_deferred
        // then takes nv_system_pm_lock for read before the RM's close.
        &[
            "nv_wait_open_complete",
            "nv_wait_open_complete_interruptible",
            "nvidia_close_deferred",
        ],
        None,
        "deferred open ({driver}): waits for the file's open to finish on the device's open_q kthread (then nv_system_pm_lock)",
    ),
    m(
        "NVIDIA kthread queue flush",
        // kernel-open/common/nv-kthread-q.c: nv_kthread_q_flush queues a flush item twice and waits
        // (wait_for_completion) until the queue's kthread has run every item before it.
        // (nv_kthread_q_stop flushes through it, then kthread_stop waits for the thread itself: not a flush.)
        &["nv_kthread_q_flush", "_raw_q_flush"],
        None,
        "kthread queue flush ({driver}): waits for every item queued on the driver's nv_kthread_q to run",
    ),
    // Round 12 (issue 38 held-out: GPU stacks).
    m(
        "DP idle pattern wait (msm)",
        // drivers/gpu/drm/msm/dp/dp_ctrl.c (msm_dp_ctrl_push_idle since 6.15): disabling the DP bridge
        // (dp_bridge_disable/atomic_disable) sets DP_STATE_CTRL_PUSH_IDLE and waits
        // wait_for_completion_timeout(&ctrl->idle_comp, IDLE_PATTERN_COMPLETION_TIMEOUT_JIFFIES), which only
        // the DP controller's ISR completes on DP_CTRL_INTR_IDLE_PATTERN_SENT (dp_ctrl_isr); with the link
        // clock off the interrupt never comes (and the register access can fault).
        &["dp_ctrl_push_idle", "msm_dp_ctrl_push_idle"],
        None,
        "DP idle pattern wait ({driver}): the DP controller has not raised its idle-pattern-sent interrupt",
    ),
    m(
        "gdev scheduler thread sleep",
        // gdev (shinpei0208/gdev, a GPU resource manager on nouveau), mod/gdev/gdev_drv.c: the per-device
        // compute and memory scheduler kthreads loop `set_current_state(TASK_UNINTERRUPTIBLE); schedule();`
        // until __gdev_notify_handler (the GPU's completion notify, from nouveau's interrupt) calls
        // wake_up_process: an idle scheduler sleeps in D between jobs, so a hung-task report of it alone is
        // no wedge; one that never wakes while jobs wait means the GPU never signalled completion.
        &["__gdev_sched_com_thread", "__gdev_sched_mem_thread"],
        None,
        "GPU scheduler thread ({driver}) sleeps in its loop until the GPU's completion notify wakes it (idle between jobs)",
    ),
    m(
        "nfsdcld upcall",
        // Round 15. fs/nfsd/nfs4recover.c: the client-tracking operations (nfsd4_cld_create, _remove, _check,
        // _grace_done, _get_version) queue a message on the rpc_pipefs "cld" pipe (cld_pipe_upcall →
        // __cld_pipe_upcall, inlined: rpc_queue_upcall) and wait_for_completion(&cup->cu_done), which only
        // nfsdcld's downcall (cld_pipe_downcall) completes: a dead or stuck nfsdcld daemon holds the nfsd thread.
        &[
            "nfsd4_cld_create",
            "nfsd4_cld_create_v2",
            "nfsd4_cld_remove",
            "nfsd4_cld_check",
            "nfsd4_cld_check_v0",
            "nfsd4_cld_grace_done",
            "nfsd4_cld_get_version",
            "cld_pipe_upcall",
            "__cld_pipe_upcall",
        ],
        None,
        "NFS server client tracking: waits for the nfsdcld daemon's reply to its rpc_pipefs upcall",
    ),
    m(
        "fsnotify mark reaper flush",
        // Round 26. fs/notify/mark.c: fsnotify_wait_marks_destroyed() is flush_delayed_work(&reaper_work), the
        // mark reaper (fsnotify_mark_destroy_workfn) that frees detached marks only after
        // synchronize_srcu(&fsnotify_mark_srcu); closing an inotify/fanotify group (fsnotify_destroy_group, on
        // the fd's last close, often in exit) waits for it, so an SRCU reader that does not finish (an event
        // handler blocked in a filesystem or a permission event's listener) holds the closing task.
        &["fsnotify_wait_marks_destroyed"],
        None,
        "fsnotify mark reaper flush: waits for the marks' destroy work, behind an SRCU grace period (fsnotify_mark_srcu)",
    ),
    m(
        "RM TLB invalidate poll (nvidia)",
        // Round 12b. NVIDIA RM, src/nvidia/src/kernel/gpu/mmu/arch/turing/kern_gmmu_tu102.c:
        // kgmmuCommitTlbInvalidate_TU102 writes NV_VIRTUAL_FUNCTION_PRIV_MMU_INVALIDATE and
        // kgmmuCheckPendingInvalidates_TU102 spins (osSpinLoop, register reads) until the GPU's MMU clears its
        // TRIGGER field, the GPU is lost or in reset, or gpuCheckTimeout expires: the thread is on CPU, held
        // by the GPU's MMU.
        &[
            "kgmmuCheckPendingInvalidates_TU102",
            "kgmmuCommitTlbInvalidate_TU102",
        ],
        None,
        "TLB invalidate poll ({driver}): RM spins until the GPU's MMU completes the invalidate (or RM's timeout)",
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
