//! Unit tests of the classifier; per-family tests on recorded public traces are in `tests/traces.rs`.

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
        // Issue 38: which lock (the taker's) and the layer (the map's).
        "clone3 → cgroup_can_fork … percpu rwsem wait on cgroup_threadgroup_rwsem [cgroup (kernel/cgroup)]"
    );
    let f = frames("[<0>] folio_wait_bit_common+0x13d/0x350\n[<0>] filemap_fault+0x5e1/0x9c0\n[<0>] __do_fault+0x36/0x130\n[<0>] do_fault+0x1b5/0x410\n[<0>] __handle_mm_fault+0x632/0xc70\n[<0>] handle_mm_fault+0xd8/0x2c0\n[<0>] do_user_addr_fault+0x1c1/0x690\n[<0>] exc_page_fault+0x77/0x170\n[<0>] asm_exc_page_fault+0x26/0x30\n");
    assert_eq!(
        classify(&f, None, None).unwrap(),
        "page fault (filemap_fault) … page lock wait"
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
    assert!(mm_lock::holds_fault_lock(&fault, Some("percpu_rwsem_wait")));
    assert_eq!(mm_lock::lock_class(&fault, Some("percpu_rwsem_wait")), None);
    let mprotect = frames("[<0>] __vma_start_write+0x5c/0x110\n[<0>] mprotect_fixup+0xec/0x370\n[<0>] do_mprotect_pkey+0x353/0x5f0\n[<0>] __x64_sys_mprotect+0x1b/0x30\n[<0>] do_syscall_64+0x71/0x290\n[<0>] entry_SYSCALL_64_after_hwframe+0x76/0x7e\n");
    assert_eq!(
        mm_lock::lock_class(&mprotect, Some("__vma_start_write")),
        Some("mmap_lock")
    );
    assert!(!mm_lock::holds_fault_lock(
        &mprotect,
        Some("__vma_start_write")
    ));
    let mmap = frames("[<0>] vm_mmap_pgoff+0xe9/0x230\n[<0>] do_syscall_64+0x71/0x290\n[<0>] entry_SYSCALL_64_after_hwframe+0x76/0x7e\n");
    assert_eq!(
        mm_lock::lock_class(&mmap, Some("vm_mmap_pgoff")),
        Some("mmap_lock")
    );
    assert_eq!(
        mm_lock::lock_class(&[], Some("vm_mmap_pgoff")),
        Some("mmap_lock")
    );
    // A fault that itself waits for the mmap lock is a waiter, not a holder.
    let fault_waits = frames("[<0>] rwsem_down_read_slowpath+0x1/0x2\n[<0>] lock_mm_and_find_vma+0x1/0x2\n[<0>] do_user_addr_fault+0x1/0x2\n[<0>] exc_page_fault+0x1/0x2\n");
    assert_eq!(mm_lock::lock_class(&fault_waits, None), Some("mmap_lock"));
    assert!(!mm_lock::holds_fault_lock(&fault_waits, None));
    // A futex wait is neither.
    let futex = frames("[<0>] futex_do_wait+0x46/0x90\n[<0>] __x64_sys_futex+0x12d/0x230\n");
    assert_eq!(mm_lock::lock_class(&futex, Some("futex_do_wait")), None);
    assert!(!mm_lock::holds_fault_lock(&futex, None));
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

/// Issue 38, family 1: in a live capture the kernel's blocker record names the lock the stack hides.
#[test]
fn the_kernels_blocker_record_names_the_hidden_lock() {
    use crate::wait_graph::{LockIdentity, LockKind, LockNode, Mode, WaitGraph, Waiter};
    let f = frames("[<0>] xfs_reflink_end_atomic_cow+0x133/0x200 [xfs]\n[<0>] xfs_dio_write_end_io+0x117/0x320 [xfs]\n[<0>] iomap_dio_complete+0x41/0x240\n[<0>] __x64_sys_io_submit+0x1/0x2\n");
    let site = classify(&f, None, Some("io_submit")).unwrap();
    assert!(site.contains("lock or wait not visible"), "{site}");
    let lock = |kind, by: &str, mode| LockNode {
        id: "L1".into(),
        kind,
        address: Some("0xffff888012345678".into()),
        name: "the inode lock of /mnt/x (ino 12)".into(),
        identity: LockIdentity::default(),
        holders: vec![],
        holder_unknown: None,
        readers: None,
        waiters: vec![Waiter {
            tid: 7,
            pid: 7,
            comm: "fio".into(),
            mode,
            state: "D".into(),
            call: "io_submit".into(),
            by: by.into(),
            waited_s: None,
        }],
        more_waiters: 0,
    };
    let mut snap = crate::snapshot::ThreadSnapshot {
        tid: 7,
        site: Some(site.clone()),
        ..Default::default()
    };
    let graph = WaitGraph {
        locks: vec![lock(LockKind::Rwsem, "kernel record", Some(Mode::Write))],
        ..Default::default()
    };
    crate::wait_graph::refine_with_graph(std::slice::from_mut(&mut snap), &graph);
    assert_eq!(
        snap.site.as_deref(),
        Some("io_submit → xfs: xfs_dio_write_end_io → xfs_reflink_end_atomic_cow … rwsem wait (write) on the inode lock of /mnt/x (ino 12) (kernel record) in xfs_reflink_end_atomic_cow")
    );
    // A lock known from the stack only is no record: the site is left as the stack says.
    let mut other = crate::snapshot::ThreadSnapshot {
        tid: 7,
        site: Some(site.clone()),
        ..Default::default()
    };
    let graph = WaitGraph {
        locks: vec![lock(LockKind::Mutex, "stack", None)],
        ..Default::default()
    };
    crate::wait_graph::refine_with_graph(std::slice::from_mut(&mut other), &graph);
    assert_eq!(other.site.as_deref(), Some(site.as_str()));
    // A site that named the primitive gets which lock, before its category.
    assert_eq!(
        super::with_recorded_lock("ioctl … mutex wait [RM API lock]", "mutex", None, "rm_lock"),
        "ioctl … mutex wait — mutex wait on rm_lock (kernel record) [RM API lock]"
    );
}

/// ppc64's `/proc/<pid>/stack` lists the unwinder's first, unreliable slot as a bare address above
/// `__switch_to`: it is no frame of the task, and the wait is read from the frames after the switch. A bare
/// address inside the task's frames (unsymbolized code) is kept.
#[test]
fn bare_address_before_the_context_switch_is_not_the_wait() {
    let f = frames("[<0>] 0xc00000008de94400\n[<0>] __switch_to+0x13c/0x228\n[<0>] futex_wait_queue+0xa8/0x134\n[<0>] __futex_wait+0xb4/0x15c\n[<0>] futex_wait+0x94/0x150\n[<0>] do_futex+0xe8/0x374\n[<0>] sys_futex+0xa4/0x234\n[<0>] system_call_exception+0x134/0x390\n");
    let site = classify(&f, Some("0xc00000008de94400"), Some("futex")).unwrap();
    assert!(site.contains("futex wait"), "{site}");
    assert!(!site.contains("0xc00000008de94400"), "{site}");
    assert_eq!(past_switch_artifacts(&f).len(), f.len() - 1);
    // No switch after it: the address is the task's own (unsymbolized) frame.
    let g = frames("[<0>] 0xffffffffc0a1b2c3\n[<0>] nvidia_ioctl+0x5e4/0x8c0 [nvidia]\n[<0>] __x64_sys_ioctl+0x97/0xd0\n");
    assert_eq!(past_switch_artifacts(&g).len(), g.len());
}

/// A function that takes two locks is named by the one its wait's primitive is on: cgroup_can_fork takes
/// cgroup_mutex (a mutex) and cgroup_threadgroup_rwsem (a percpu rwsem).
#[test]
fn a_taker_of_two_locks_is_named_by_the_waits_primitive() {
    let lock = |words| rules::lock_taken_with("cgroup_can_fork", words).map(|t| t.lock);
    assert_eq!(lock("mutex wait"), Some("cgroup_mutex"));
    assert_eq!(lock("percpu rwsem wait"), Some("cgroup_threadgroup_rwsem"));
    // A lock of another kind than the wait names none.
    assert!(rules::lock_taken_with("nbd_ioctl", "rwsem wait (write)").is_none());
    let f = frames("[<0>] percpu_rwsem_wait+0x107/0x130\n[<0>] __percpu_down_read+0x5e/0x70\n[<0>] cgroup_can_fork+0x61/0x110\n[<0>] copy_process+0x1ad7/0x2130\n[<0>] kernel_clone+0x9d/0x3c0\n[<0>] __do_sys_clone3+0xd4/0x120\n");
    let site = classify(&f, None, None).unwrap();
    assert!(site.contains("cgroup_threadgroup_rwsem"), "{site}");
}

/// Issue 38, round 7: the msm DPU's commit wait and vc4's seqno wait (mechanism rows from the drivers'
/// source, awaiting a public trace), on stacks shaped like the kernel's call paths.
#[test]
fn msm_dpu_commit_and_vc4_seqno_waits() {
    let f = frames("[<0>] __schedule+0x2a8/0x7b0\n[<0>] schedule+0x5c/0xc4\n[<0>] schedule_timeout+0x90/0x130\n[<0>] dpu_encoder_helper_wait_for_irq+0x11c/0x2a0 [msm]\n[<0>] dpu_encoder_phys_vid_wait_for_commit_done+0x48/0x90 [msm]\n[<0>] dpu_kms_wait_for_commit_done+0x88/0xc0 [msm]\n[<0>] msm_atomic_commit_tail+0x1d8/0x5b0 [msm]\n[<0>] commit_tail+0xa4/0x180\n[<0>] commit_work+0x18/0x24\n[<0>] process_one_work+0x1e8/0x460\n[<0>] worker_thread+0x178/0x534\n[<0>] kthread+0x120/0x12c\n[<0>] ret_from_fork+0x10/0x20\n");
    let site = classify(&f, None, None).unwrap();
    assert_eq!(
        site,
        "kernel thread (work commit_work) → msm: msm_atomic_commit_tail → dpu_kms_wait_for_commit_done → \
         dpu_encoder_helper_wait_for_irq … sleep [display interrupt wait (msm): the display engine has not \
         raised the encoder's vsync/pingpong-done interrupt]"
    );
    let f = frames("[<0>] __schedule+0x2f0/0x7a0\n[<0>] schedule+0x5c/0xc4\n[<0>] schedule_timeout+0x84/0x130\n[<0>] vc4_wait_for_seqno+0xf8/0x1f0 [vc4]\n[<0>] vc4_wait_for_seqno_ioctl_helper+0x34/0x90 [vc4]\n[<0>] vc4_wait_bo_ioctl+0x6c/0xa0 [vc4]\n[<0>] drm_ioctl_kernel+0xc4/0x130 [drm]\n[<0>] drm_ioctl+0x214/0x444 [drm]\n[<0>] __arm64_sys_ioctl+0xb0/0xf4\n[<0>] invoke_syscall+0x50/0x120\n[<0>] el0_svc_common.constprop.0+0x48/0xf0\n[<0>] do_el0_svc+0x24/0x38\n[<0>] el0_svc+0x30/0xe0\n[<0>] el0t_64_sync_handler+0x100/0x130\n[<0>] el0t_64_sync+0x190/0x198\n");
    let site = classify(&f, None, Some("ioctl")).unwrap();
    assert_eq!(
        site,
        "ioctl → vc4: vc4_wait_bo_ioctl → vc4_wait_for_seqno_ioctl_helper → vc4_wait_for_seqno … sleep \
         [GPU seqno wait (vc4): the GPU has not reached the job's seqno (no job-done interrupt)]"
    );
}

#[test]
fn a_sleep_in_atomic_report_is_read_below_its_printer() {
    // Round 11: `__schedule_bug` prints the stack from inside `__schedule`; the frames above it (a misspelt
    // `dump_stak` in a forum paste) are the printer's, the wait is below it.
    let f = frames("[<0>] dump_backtrace+0x0/0x168\n[<0>] dump_stak+0x94/0xbc\n[<0>] __schedule_bug+0x70/0x80\n[<0>] __schedule+0x504/0x570\n[<0>] schedule_timeout+0x19c/0x400\n[<0>] wait_for_common+0x9c/0x128\n");
    assert_eq!(
        classify(&f, None, None).unwrap(),
        "wait_for_common … completion wait"
    );
    // Without the report, a top frame that is no wait stays the top.
    let f = frames("[<0>] dump_stak+0x94/0xbc\n[<0>] wait_for_common+0x9c/0x128\n");
    assert!(classify(&f, None, None).unwrap().contains("dump_stak"));
}

#[test]
fn a_stack_printed_from_an_exception_in_a_wait_is_read_below_the_exception() {
    // Round 12: an SError taken in schedule_timeout's timer setup (msm DP, arm64): the panic's frames and the
    // exception entry are the handler's, the spin lock under it is the interrupted timer code, the wait is
    // the completion below.
    let f = frames("[<0>] panic+0x14c/0x32c\n[<0>] arm64_serror_panic+0x78/0x84\n[<0>] do_serror+0x40/0x64\n[<0>] el1h_64_error_handler+0x30/0x48\n[<0>] el1h_64_error+0x68/0x6c\n[<0>] _raw_spin_lock_irqsave+0x38/0x4c\n[<0>] lock_timer_base+0x40/0x78\n[<0>] __mod_timer+0xf4/0x25c\n[<0>] schedule_timeout+0xd4/0xfc\n[<0>] wait_for_completion_timeout+0x2c/0x54\n[<0>] dp_ctrl_push_idle+0x40/0x88\n");
    let site = classify(&f, None, None).unwrap();
    assert!(site.contains("dp_ctrl_push_idle"), "{site}");
    assert!(site.contains("[DP idle pattern wait (msm)"), "{site}");
    assert!(!site.contains("_raw_spin_lock_irqsave"), "{site}");
    // With no wait under the exception, the interrupted code is what the task was doing: kept.
    let f = frames("[<0>] asm_exc_invalid_op+0x16/0x20\n[<0>] virtio_gpu_queue_ctrl_sgs+0x236/0x290 [virtio_gpu]\n[<0>] virtio_gpu_queue_fenced_ctrl_buffer+0x82/0x2c0 [virtio_gpu]\n");
    assert!(classify(&f, None, None)
        .unwrap()
        .contains("asm_exc_invalid_op"));
}

#[test]
fn a_task_in_the_reclaim_loop_is_reclaiming_not_behind_a_hidden_lock() {
    // Round 12: shrink_slab on top (qxl's fbdev worker, an NMI backtrace) is direct reclaim itself.
    let f = frames("[<0>] shrink_slab+0xab/0x300\n[<0>] do_try_to_free_pages+0x3c2/0x4e0\n[<0>] try_to_free_pages+0xfc/0x180\n[<0>] __alloc_pages_nodemask+0x7fd/0xb90\n");
    let site = classify(&f, None, None).unwrap();
    assert!(site.contains("memory reclaim in shrink_slab"), "{site}");
    assert!(!site.contains("not visible"), "{site}");
    // A wait inside the loop is the wait's: the throttle, not the loop.
    let f = frames("[<0>] reclaim_throttle+0x1c0/0x2b0\n[<0>] shrink_node+0x4a0/0x700\n[<0>] do_try_to_free_pages+0xd0/0x4e0\n");
    assert!(classify(&f, None, None)
        .unwrap()
        .contains("memory reclaim throttle"));
}

#[test]
fn a_stack_cut_at_module_init_entered_through_init_module() {
    // Round 12b: a WARN cut at do_init_module (insmod of nvkm probing the GPU) has no syscall frame; only
    // init_module(2)/finit_module(2) reach load_module → do_init_module.
    let f = frames("[<0>] r535_gsp_msgq_wait+0xd0/0x190 [nvkm]\n[<0>] r535_gsp_msg_recv+0x46/0x230 [nvkm]\n[<0>] nvkm_device_pci_probe+0x305/0x420 [nvkm]\n[<0>] local_pci_probe+0x46/0xa0\n[<0>] do_one_initcall+0x44/0x300\n[<0>] do_init_module+0x64/0x240\n");
    let site = classify(&f, None, None).unwrap();
    assert!(site.starts_with("init_module → nvkm"), "{site}");
}

#[test]
fn register_reads_on_top_are_the_polling_loop_below_them() {
    // Round 12b: RM's register access on top of its TLB-invalidate poll (a profiler's stack): the poll is
    // the wait, the reads are its body.
    let f = frames("[<0>] osDevReadReg032+0x1/0x2 [nvidia]\n[<0>] _regRead+0x1/0x2 [nvidia]\n[<0>] kgmmuCheckPendingInvalidates_TU102+0x1/0x2 [nvidia]\n[<0>] kgmmuInvalidateTlb_GM107+0x1/0x2 [nvidia]\n[<0>] rm_ioctl+0x1/0x2 [nvidia]\n");
    let site = classify(&f, None, None).unwrap();
    assert!(
        site.contains("… kgmmuCheckPendingInvalidates_TU102 [TLB invalidate poll (nvidia)"),
        "{site}"
    );
    assert!(!site.contains("waits in osDevReadReg032"), "{site}");
}

/// Round 27: a page's bit wait is the page lock under a page reader, the writeback under a writeback wait.
#[test]
fn page_bit_wait_named_by_its_caller() {
    let read = frames("[<0>] io_schedule+0x17/0x70\n[<0>] wait_on_page_bit_common+0x542/0xcb0\n[<0>] do_read_cache_page+0x66b/0x1000\n[<0>] read_part_sector+0xf6/0x610\n[<0>] blk_add_partitions+0x47a/0xe70\n");
    let site = classify(&read, None, Some("open")).unwrap();
    assert!(
        site.contains("page lock wait on a page being read"),
        "{site}"
    );
    let writeback = frames("[<0>] io_schedule+0xba/0x130\n[<0>] wait_on_page_bit_common+0x593/0xeb0\n[<0>] wait_on_page_writeback+0x4c/0x370\n[<0>] truncate_inode_pages_range+0x565/0x10f0\n[<0>] ext4_evict_inode+0x59d/0x1c80\n");
    let site = classify(&writeback, None, None).unwrap();
    assert!(site.contains("writeback wait"), "{site}");
    assert!(!site.contains("page lock wait"), "{site}");
}
