//! The lock takers' table: functions that take a well-known lock, by the lock, so a stack whose lock slow path
//! is hidden still names the lock.

use super::pattern::{t, LockTaker};

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
            // btrfs's write_iter takes the inode lock itself (inode_lock inlined into it in 4.x and 5.x).
            "btrfs_file_write_iter",
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
    // Round 28: fs/f2fs/checkpoint.c: the checkpoint-merge thread's batch (`__checkpoint_and_complete_reqs`
    // → `__write_checkpoint_sync`, inlined) writes the checkpoint under `f2fs_down_write(&sbi->gc_lock)`, the
    // lock foreground and background GC hold while they run.
    t(
        &["__checkpoint_and_complete_reqs", "__write_checkpoint_sync"],
        "rwsem wait (write)",
        "f2fs's GC lock (gc_lock)",
    ),
    // Round 28: fs/jbd2/checkpoint.c `__jbd2_log_wait_for_space` (a handle's start finding the journal full)
    // takes `mutex_lock_io(&journal->j_checkpoint_mutex)` before it checkpoints or waits for a commit, both of
    // which show as frames of their own: on top of a stack it waits for that mutex.
    t(
        &["__jbd2_log_wait_for_space"],
        "mutex wait",
        "the journal's checkpoint mutex (j_checkpoint_mutex)",
    ),
    t(
        &["f2fs_lock_op", "f2fs_lock_all"],
        "rwsem wait",
        "f2fs's checkpoint rwsem (cp_rwsem)",
    ),
    t(
        // Round 28: fs/xfs/xfs_aops.c xfs_map_blocks (writeback mapping a dirty page) takes
        // xfs_ilock(ip, XFS_ILOCK_SHARED), inlined into it.
        &["xfs_ilock", "xfs_ilock_nowait", "xfs_lock_two_inodes", "xfs_map_blocks"],
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
    // fs/namespace.c: mount(2)'s dispatcher inlines its static helpers, each taking its lock for write
    // itself: do_remount and do_reconfigure_mnt the superblock's s_umount, do_change_type namespace_sem
    // (namespace_lock): its frame is the taker of either.
    t(
        &["path_mount"],
        "rwsem wait (write)",
        "s_umount (remount) or namespace_sem (propagation change), taken in mount(2)'s inlined helpers",
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
    // Round 15: fs/kernfs/dir.c kernfs_remove_by_name_ns takes the kernfs root's kernfs_rwsem for write
    // (down_write; the global kernfs_mutex before 5.14) to unlink the node: sysfs readers hold it for read.
    t(
        &["kernfs_remove_by_name_ns"],
        "rwsem wait (write)",
        "kernfs_rwsem (the sysfs/kernfs tree; kernfs_mutex before 5.14)",
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
    // Round 27: drivers/block/nbd.c nbd_start_device_ioctl (NBD_DO_IT, inlined into nbd_ioctl) drops
    // config_lock while its recv workers run and re-takes it after (mutex_lock(&nbd->config_lock)).
    t(
        &["nbd_ioctl", "nbd_open", "nbd_release", "nbd_start_device_ioctl"],
        "mutex wait",
        "the nbd device's config_lock",
    ),
    // Round 27: drivers/block/pktcdvd.c takes the global pktcdvd_mutex around its open, release and ioctl
    // (pkt_ioctl forwards CD-ROM ioctls while holding it).
    t(
        &["pkt_ioctl", "pkt_open", "pkt_close", "pkt_release"],
        "mutex wait",
        "pktcdvd_mutex (the packet-writing driver's global lock)",
    ),
    // Round 27: fs/cifs (fs/smb/client) smb2_reconnect serialises a session's reconnect under
    // mutex_lock(&ses->session_mutex); its own wait for the socket is interruptible (no D state).
    // dfs_cache_update_vol (5.2-5.9) updated the DFS volume list under a mutex (dfs_cache.dc_lock, then
    // vol_lock; a spinlock from 5.10).
    t(&["smb2_reconnect"], "mutex wait", "the SMB session's session_mutex"),
    t(
        &["dfs_cache_update_vol"],
        "mutex wait",
        "the DFS cache's volume list lock (vol_lock; dc_lock in 5.2-5.4)",
    ),
    // Consoles, frame buffers and ttys.
    t(
        &["console_lock", "console_lock_single_hold"],
        "semaphore wait",
        "console_sem",
    ),
    t(&["lock_fb_info"], "mutex wait", "fb_info->lock"),
    // Round 17 (issue 38 held-out: syzkaller hangs). block/genhd.c: del_gendisk removes the partitions
    // under the whole disk's open_mutex (mutex_lock(&disk->open_mutex); part0's bd_mutex in 5.13), held by
    // an open or a close of the disk (a driver's release that deletes its own disk from under blkdev_put).
    t(
        &["del_gendisk"],
        "mutex wait",
        "the disk's open_mutex (bd_mutex)",
    ),
    // fs/nfsd/nfsctl.c: the nfsd netlink commands (nfsd_nl_{threads,version,listener,pool_mode}_{get,set}_doit)
    // take the global nfsd_mutex (mutex_lock(&nfsd_mutex)), held across server start and stop.
    t(
        &[
            "nfsd_nl_threads_get_doit",
            "nfsd_nl_threads_set_doit",
            "nfsd_nl_version_get_doit",
            "nfsd_nl_version_set_doit",
            "nfsd_nl_listener_get_doit",
            "nfsd_nl_listener_set_doit",
            "nfsd_nl_pool_mode_get_doit",
            "nfsd_nl_pool_mode_set_doit",
        ],
        "mutex wait",
        "nfsd_mutex (the NFS server's global configuration lock)",
    ),
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
    // drivers/tty/tty_ioctl.c: throttling and unthrottling a tty from its line discipline take
    // tty->throttle_mutex around the driver's throttle/unthrottle call.
    t(
        &["tty_unthrottle_safe", "tty_throttle_safe"],
        "mutex wait",
        "tty->throttle_mutex",
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
        // The mailbox transaction mutex, which the Raspberry Pi tree's rpi_firmware_property_list takes
        // around the whole exchange (rpi_firmware_transaction's own mutex and reply wait: round 21's table).
        &["rpi_firmware_property_list"],
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
    // drivers/gpu/drm/amd/amdgpu/amdgpu_ctx.c (to 6.16, before the xarray): amdgpu_ctx_mgr_entity_flush, the
    // render node's flush on every close (amdgpu_flush), takes the file's context manager mutex
    // (mutex_lock(&mgr->lock)) and drains each context's scheduler entities under it: a second close of the
    // same file waits for the first one's drain (round 13).
    t(
        &["amdgpu_ctx_mgr_entity_flush"],
        "mutex wait",
        "the amdgpu context manager's lock (mgr->lock)",
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
    // kernel/fork.c: fork (clone without CLONE_VM) copies the parent's address space with its mmap_lock taken
    // for write (mmap_write_lock_killable in dup_mmap); a thread that holds it (a fault, a pinning driver
    // call) holds every fork.
    t(
        &["dup_mmap"],
        "rwsem wait (write)",
        "the parent's mmap_lock (fork copies its address space)",
    ),
    // io_uring/sqpoll.c: parking or stopping the SQPOLL thread takes its shared data's mutex, which the SQPOLL
    // thread holds while it runs the rings.
    t(
        &["io_sq_thread_park", "io_sq_thread_stop"],
        "mutex wait",
        "the io_uring SQPOLL thread's lock (sqd->lock)",
    ),
    // kernel/exit.c: an exiting thread whose group is dumping core sleeps in do_exit (coredump_task_exit,
    // inlined; exit_mm before 5.16) until the dumping thread has written the core. Not a lock: the dumper
    // must finish. (exit_mm's own mmap_lock wait shows its rwsem words, which this row does not take.)
    // GPU drivers from source (issue 38): functions that take a driver lock themselves (the lock's slow
    // path is hidden in `/proc/<tid>/stack`), each with its source file.
    // Buffer reservation: each driver's submit path locks its BOs' dma_resv ww_mutexes (i915
    // gem/i915_gem_object.h __i915_gem_object_lock, xe_bo.c xe_bo_lock, xe_vm.c xe_vm_lock, vc4_gem.c and
    // v3d_submit.c *_lock_bo_reservations, lima_gem.c lima_gem_lock_bos, etnaviv_gem_submit.c and
    // msm_gem_submit.c submit_lock_objects, virtgpu_gem.c virtio_gpu_array_lock_resv).
    t(
        &[
            "__i915_gem_object_lock",
            "i915_gem_object_lock",
            "i915_gem_object_lock_interruptible",
            "xe_bo_lock",
            "xe_vm_lock",
            "vc4_lock_bo_reservations",
            "v3d_lock_bo_reservations",
            "lima_gem_lock_bos",
            "submit_lock_objects",
            "virtio_gpu_array_lock_resv",
        ],
        "mutex wait",
        "a buffer's dma_resv lock (ww_mutex)",
    ),
    // drivers/gpu/drm/amd/amdgpu/amdgpu_device.c (amdgpu_reset.c since 6.0): a GPU reset takes the reset
    // domain's rwsem for write (down_write(&reset_domain->sem); adev->reset_sem before 5.19).
    t(
        &["amdgpu_device_lock_reset_domain", "amdgpu_device_lock_adev"],
        "rwsem wait (write)",
        "the amdgpu reset domain's rwsem (GPU reset)",
    ),
    // drivers/gpu/drm/amd/pm/amdgpu_dpm.c: every amdgpu_dpm_* entry takes adev->pm.mutex around the
    // powerplay/SMU call.
    t(
        &[
            "amdgpu_dpm_set_powergating_by_smu",
            "amdgpu_dpm_switch_power_profile",
            "amdgpu_dpm_compute_clocks",
            "amdgpu_dpm_enable_uvd",
            "amdgpu_dpm_enable_vce",
        ],
        "mutex wait",
        "amdgpu power management's pm.mutex",
    ),
    // drivers/gpu/drm/amd/pm/swsmu/smu_cmn.c: a message to the SMU firmware is sent and polled for under
    // smu->message_lock.
    t(
        &[
            "smu_cmn_send_smc_msg_with_param",
            "smu_cmn_send_msg_without_waiting",
            "smu_cmn_send_debug_smc_msg",
        ],
        "mutex wait",
        "the SMU's message_lock (amdgpu power firmware mailbox)",
    ),
    // drivers/gpu/drm/amd/amdkfd/kfd_device_queue_manager.c: dqm_lock (mutex_lock(&dqm->lock_hidden),
    // inlined) first thing in the HWS queue manager's evict/restore/terminate/create/destroy.
    t(
        &[
            "dqm_lock",
            "evict_process_queues_cpsch",
            "restore_process_queues_cpsch",
            "evict_process_queues_nocpsch",
            "restore_process_queues_nocpsch",
            "process_termination_cpsch",
            "process_termination_nocpsch",
            "create_queue_cpsch",
            "destroy_queue_cpsch",
        ],
        "mutex wait",
        "the KFD device queue manager's lock (dqm_lock)",
    ),
    // Round 28: drivers/gpu/drm/i915/gvt/mmio.c: the GVT-g guest MMIO emulation entries (a vCPU's access
    // trapped through KVMGT's vfio region, intel_vgpu_rw) take the vGPU's vgpu->vgpu_lock mutex first.
    t(
        &["intel_vgpu_emulate_mmio_read", "intel_vgpu_emulate_mmio_write"],
        "mutex wait",
        "the vGPU's vgpu_lock (i915 GVT-g)",
    ),
    // drivers/gpu/drm/i915/gt/intel_reset.c: intel_gt_reset takes gt->reset.mutex (after the backoff SRCU), as
    // do wedging and unwedging the GT.
    t(
        &["intel_gt_reset", "intel_gt_set_wedged", "intel_gt_unset_wedged"],
        "mutex wait",
        "the GT's reset.mutex (i915 GPU reset)",
    ),
    // drivers/gpu/drm/xe/xe_exec.c, xe_vm.c: an exec takes the VM's vm->lock for read, a bind for write.
    t(
        &["xe_exec_ioctl", "xe_vm_bind_ioctl"],
        "rwsem wait",
        "the xe VM's vm->lock",
    ),
    // drivers/gpu/drm/display/drm_dp_helper.c: a DPCD access and the AUX I2C bus lock take aux->hw_mutex.
    t(
        &["drm_dp_dpcd_access", "drm_dp_i2c_lock_bus"],
        "mutex wait",
        "the DP AUX channel's hw_mutex",
    ),
    // drivers/gpu/drm/nouveau/nouveau_abi16.c, nouveau_drm.c: nouveau_abi16_get and the file's postclose
    // take the client's cli->mutex.
    t(
        &["nouveau_abi16_get", "nouveau_drm_postclose"],
        "mutex wait",
        "the nouveau client's cli->mutex",
    ),
    // drivers/gpu/drm/msm/msm_atomic.c: lock_crtcs takes each CRTC's kms->commit_lock[] in the commit tail
    // and the async commit; msm_gpu.c: the recovery worker takes gpu->lock.
    t(
        &["lock_crtcs", "msm_atomic_commit_tail", "msm_atomic_async_commit"],
        "mutex wait",
        "the msm KMS per-CRTC commit_lock",
    ),
    t(
        &["recover_worker"],
        "mutex wait",
        "the msm GPU's lock (gpu->lock)",
    ),
    // drivers/gpu/drm/v3d/v3d_sched.c, v3d_gem.c: a reset after a job timeout takes v3d->reset_lock; a
    // cache clean takes v3d->cache_clean_lock.
    t(
        &["v3d_gpu_reset_for_timeout"],
        "mutex wait",
        "the v3d reset_lock (GPU reset)",
    ),
    t(
        &["v3d_clean_caches"],
        "mutex wait",
        "the v3d cache_clean_lock",
    ),
    // drivers/gpu/drm/vc4/vc4_hdmi.c: the HDMI encoder's hooks and detect take vc4_hdmi->mutex.
    t(
        &[
            "vc4_hdmi_connector_detect_ctx",
            "vc4_hdmi_encoder_pre_crtc_configure",
            "vc4_hdmi_encoder_pre_crtc_enable",
            "vc4_hdmi_encoder_post_crtc_enable",
            "vc4_hdmi_encoder_post_crtc_disable",
            "vc4_hdmi_encoder_post_crtc_powerdown",
        ],
        "mutex wait",
        "the vc4 HDMI encoder's mutex",
    ),
    // drivers/gpu/drm/amd/display/amdgpu_dm/amdgpu_dm.c: a hotplug (HPD, HPD RX) takes the connector's
    // hpd_lock, then dm.dc_lock around the link detection.
    t(
        &["handle_hpd_irq_helper", "handle_hpd_rx_irq", "dm_handle_hpd_rx_offload_work"],
        "mutex wait",
        "the amdgpu display core's dc_lock (or the connector's hpd_lock)",
    ),
    // drivers/gpu/drm/i915/i915_vma.c: unbinding a VMA takes its address space's vm->mutex (eviction, the
    // shrinker, close).
    t(
        &["i915_vma_unbind", "i915_vma_unbind_async", "__i915_vma_unbind_async"],
        "mutex wait",
        "the i915 address space's vm->mutex",
    ),
    // drivers/gpu/drm/i915/display/intel_display_power.c: getting/putting a display power domain takes
    // power_domains->lock.
    t(
        &[
            "intel_display_power_get",
            "intel_display_power_get_if_enabled",
            "intel_display_power_put_async_work",
            "intel_display_power_is_enabled",
        ],
        "mutex wait",
        "i915 display power domains' lock",
    ),
    // drivers/gpu/drm/i915/display/intel_psr.c: the PSR work, flush and invalidate take intel_dp->psr.lock.
    t(
        &["intel_psr_work", "intel_psr_flush", "intel_psr_invalidate"],
        "mutex wait",
        "the PSR lock (intel_dp->psr.lock, i915)",
    ),
    // kernel-open/nvidia/nv.c: a system suspend/resume takes nv_system_pm_lock for write.
    t(
        &["nv_set_system_power_state"],
        "rwsem wait",
        "the NVIDIA system PM lock (nv_system_pm_lock)",
    ),
    // drivers/gpu/drm/drm_auth.c: becoming or dropping DRM master (a compositor, a VT switch) and a file's
    // open and release take dev->master_mutex.
    t(
        &[
            "drm_setmaster_ioctl",
            "drm_dropmaster_ioctl",
            "drm_master_open",
            "drm_master_release",
        ],
        "mutex wait",
        "dev->master_mutex (DRM master)",
    ),
    // drivers/gpu/drm/drm_prime.c: importing or exporting a dma-buf takes the file's prime.lock (and the
    // export dev->object_name_lock).
    t(
        &["drm_gem_prime_fd_to_handle", "drm_gem_prime_handle_to_fd"],
        "mutex wait",
        "the DRM file's prime.lock (or dev->object_name_lock)",
    ),
    // drivers/gpu/drm/amd/amdgpu/amdgpu_gfx.c: GFXOFF control takes adev->gfx.gfx_off_mutex.
    t(
        &["amdgpu_gfx_off_ctrl", "amdgpu_gfx_do_off_ctrl", "amdgpu_gfx_off_ctrl_immediate"],
        "mutex wait",
        "amdgpu's gfx_off_mutex (GFXOFF)",
    ),
    // kernel-open/nvidia/nv.c: opening, suspending, resuming and removing an NVIDIA device take its
    // nvl->ldata_lock semaphore (find_minor returns with it held).
    t(
        &[
            "find_minor",
            "nvidia_ctl_open",
            "nvidia_suspend",
            "nvidia_resume",
            "nv_pci_remove",
        ],
        "semaphore wait",
        "the NVIDIA device's ldata_lock",
    ),
    t(
        &["do_exit", "coredump_task_exit"],
        "core dump wait",
        "its thread group's core dump (coredump_task_exit: the thread writing the core must finish)",
    ),
    // --- round 7 (issue 38, GPU held-out) ---
    // drivers/gpu/drm/amd/amdgpu/amdgpu_userq.c: amdgpu_userq_ensure_ev_fence (the user-queue signal/wait
    // ioctls) takes the process's user-queue manager mutex, mutex_lock(&uq_mgr->userq_mutex), which the
    // eviction-fence suspend worker holds while it waits for the queues' last fences.
    t(
        &["amdgpu_userq_ensure_ev_fence"],
        "mutex wait",
        "the user-queue manager's userq_mutex (amdgpu)",
    ),
    // drivers/gpu/drm/amd/amdgpu/amdgpu_mes.c: the MES register helpers send one misc op to the MES firmware
    // under amdgpu_mes_lock(&adev->mes) (mutex_lock(&mes->mutex_hidden)); a request polling an MES that does
    // not answer holds it.
    t(
        &[
            "amdgpu_mes_reg_write_reg_wait",
            "amdgpu_mes_reg_wait",
            "amdgpu_mes_rreg",
            "amdgpu_mes_wreg",
        ],
        "mutex wait",
        "the MES lock (adev->mes.mutex_hidden: one request to the MES firmware at a time)",
    ),
    // drivers/hwmon/lm90.c: lm90_read (every sensor attribute, the thermal zone's poll through hwmon) takes the
    // chip's mutex_lock(&data->update_lock) around the register update; a reader stuck on the I2C bus holds it.
    t(
        &["lm90_read"],
        "mutex wait",
        "the lm90 sensor's update_lock (hwmon)",
    ),
    // arch/arm/mach-msm/mpm-of.c: msm_mpm_work_fn is an endless work item that sleeps in
    // wait_for_completion(&wake_wq) (uninterruptible) until the MPM wakeup interrupt completes it: its idle
    // wait, which sysrq-w lists among the blocked tasks.
    t(
        &["msm_mpm_work_fn"],
        "completion wait",
        "the MPM wakeup completion (wake_wq: the worker's idle wait between MPM wakeups)",
    ),
    // Round 8 (issue 38 held-out: non-GPU families).
    // kernel/cgroup/cgroup.c: the cgroup_destroy worker offlining a killed css (css_killed_work_fn ->
    // offline_css, which asserts cgroup_mutex held) takes cgroup_mutex around the whole offline walk.
    t(&["css_killed_work_fn"], "mutex wait", "cgroup_mutex"),
    // Round 18: mm/gup.c `unpin_user_pages_dirty_lock` (`put_user_pages_dirty_lock` before 5.6) releases pages
    // a driver pinned (an RDMA MR's umem, a GPU's userptr) and marks each dirty with `set_page_dirty_lock`
    // (mm/page-writeback.c: `lock_page` around `set_page_dirty`): a page under I/O or locked by a fault holds it.
    t(
        &["unpin_user_pages_dirty_lock", "put_user_pages_dirty_lock", "set_page_dirty_lock"],
        "page lock wait",
        "a pinned page being dirtied on release (set_page_dirty_lock)",
    ),
    // mm/truncate.c: truncation (inode eviction's truncate_inode_pages_final, truncate(2)) locks each page of
    // the range (lock_page / folio_lock) to take it out of the page cache; a page under read I/O stays locked
    // until the read completes, so the truncation waits for that I/O.
    t(
        &["truncate_inode_pages_range"],
        "page lock wait",
        "a page being truncated (locked until its read I/O completes)",
    ),
    // mm/filemap.c: reading a page through the page cache (read_cache_page: a partition table, a symlink, a
    // filesystem's metadata) waits for the page's read I/O to unlock it (wait_on_page_read / folio_lock).
    t(
        &["do_read_cache_page", "do_read_cache_folio"],
        "page lock wait",
        "a page being read (locked until its read I/O completes)",
    ),
    // fs/file.c: read/write/getdents on a file shared by threads (FMODE_ATOMIC_POS) take the open file's
    // position lock in __fdget_pos (mutex_lock(&file->f_pos_lock)), held by the thread already in the call.
    t(
        &["__fdget_pos", "fdget_pos"],
        "mutex wait",
        "the open file's position lock (f_pos_lock)",
    ),
    // fs/ceph/caps.c: checking an inode's caps takes the MDS session's s_mutex (mutex_lock(&session->
    // s_mutex)) before it sends a cap update; the messenger's dispatch worker blocks on it when a task
    // holding it waits for a reply only that worker would handle.
    t(
        &["ceph_check_caps"],
        "mutex wait",
        "the MDS session's mutex (s_mutex, CephFS)",
    ),
    // fs/namei.c: path_openat's last step (open_last_lookups, do_last before 5.7, static and inlined into
    // path_openat) takes the parent directory's inode lock, for write when the open may create (O_CREAT).
    t(
        &["path_openat"],
        "rwsem wait (write)",
        "the inode lock (i_rwsem; i_mutex before 4.7)",
    ),
    // Round 9 (issue 38 held-out: GPU). drivers/gpu/drm/drm_client_event.c (drm_client.c before 6.13): a hotplug
    // or a last close walks the device's in-kernel clients (fbdev emulation) under mutex_lock(&dev->
    // clientlist_mutex) and calls each client's hotplug/restore hook with it held; drm_client_register holds it
    // across the first hotplug (the fbdev's initial modeset), so a client stuck in its commit blocks them.
    t(
        &["drm_client_dev_hotplug", "drm_client_dev_restore"],
        "mutex wait",
        "the DRM device's in-kernel client list lock (clientlist_mutex)",
    ),
    // Round 26 (issue 38 held-out: bare /proc stacks). mm/vmscan.c (to 6.6): registering and unregistering a
    // shrinker take the shrinker list's rwsem for write (register_shrinker_prepared, unregister_shrinker,
    // synchronize_shrinkers: down_write(&shrinker_rwsem)); every mount (sget_fc → register_shrinker_prepared)
    // and every superblock's last put (deactivate_locked_super → unregister_shrinker) queue behind a holder.
    // 6.7 moved them to mm/shrinker.c under shrinker_mutex with other names (shrinker_register, shrinker_free).
    t(
        &[
            "register_shrinker",
            "register_shrinker_prepared",
            "unregister_shrinker",
            "synchronize_shrinkers",
        ],
        "rwsem wait (write)",
        "the shrinker list lock (shrinker_rwsem)",
    ),
];
