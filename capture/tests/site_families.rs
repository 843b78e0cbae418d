//! Issue 28's families, one test each, on x86_64 and aarch64 stacks (the recorded public traces are in
//! `traces.rs`): kernel threads, the proprietary module's lock primitives, entry and waiting module, GPU fences
//! and driver teardown, older kernels' names, stripped locks, an unparseable frame.

use capture::decode::arch::Arch;
use capture::parse::stack;
use capture::site::nvidia::NvidiaWait;
use capture::site::{self, Origin};
use capture::testing::FakeProc;
use capture::{snapshot_process, SnapshotOptions, StackFrame, ThreadSnapshot};

fn frames(text: &str) -> Vec<StackFrame> {
    stack::parse(text.as_bytes()).unwrap()
}

/// The syscall entry frames of each arch, appended under a driver's frames.
fn entry(arch: Arch, call: &str) -> String {
    match arch {
        Arch::X86_64 => format!("[<0>] __x64_sys_{call}+0x97/0xd0\n[<0>] do_syscall_64+0x5c/0x90\n[<0>] entry_SYSCALL_64_after_hwframe+0x76/0x7e\n"),
        _ => format!("[<0>] __arm64_sys_{call}+0xb4/0x100\n[<0>] invoke_syscall+0x50/0x120\n[<0>] el0_svc_common.constprop.0+0x48/0xf0\n[<0>] do_el0_svc+0x24/0x38\n[<0>] el0_svc+0x30/0xe0\n[<0>] el0t_64_sync_handler+0x100/0x130\n[<0>] el0t_64_sync+0x190/0x198\n"),
    }
}

const ARCHES: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

fn one_thread(
    arch: Arch,
    comm: &str,
    ppid: i32,
    flags: u32,
    syscall: &str,
    stack: &str,
) -> ThreadSnapshot {
    let tree = FakeProc::new();
    let pid = 900;
    tree.process(pid).comm(comm).ppid(ppid).flags(flags);
    tree.task(pid, pid)
        .comm(comm)
        .state('D')
        .ppid(ppid)
        .flags(flags)
        .wchan("0")
        .syscall(syscall)
        .stack(stack);
    let opts = SnapshotOptions {
        arch,
        ..SnapshotOptions::default()
    };
    snapshot_process(&tree.root(), pid, &opts)
        .unwrap()
        .threads
        .remove(0)
}

const ZERO_SYSCALL: &str = "0 0x0 0x0 0x0 0x0 0x0 0x0 0x0 0x0\n";

/// Family 1: a kernel thread's `0 0x0 …` syscall line is no `read` (x86_64) or `io_setup` (aarch64).
#[test]
fn kernel_threads_are_named_and_classified_from_the_stack_only() {
    let stack = "[<0>] dma_fence_default_wait+0x1e1/0x220\n[<0>] dma_fence_wait_timeout+0x116/0x140\n[<0>] amdgpu_vm_fini+0xf1/0x610 [amdgpu]\n[<0>] amdgpu_driver_postclose_kms+0x1b7/0x2f0 [amdgpu]\n[<0>] drm_file_free+0x1/0x2 [drm]\n[<0>] drm_release+0x1/0x2 [drm]\n[<0>] __fput+0x1/0x2\n[<0>] delayed_fput+0x1/0x2\n[<0>] process_one_work+0x1/0x2\n[<0>] worker_thread+0x1/0x2\n[<0>] kthread+0x1/0x2\n[<0>] ret_from_fork+0x1/0x2\n";
    for arch in ARCHES {
        // PF_KTHREAD, ppid 2 and the all-zero line, each alone, say "kernel thread".
        for (ppid, flags, syscall) in [
            (2, 0x0020_8040, ZERO_SYSCALL),
            (2, 0x0040_0100, ZERO_SYSCALL),
            (1, 0x0020_0000, "-1 0x0 0x0\n"),
            (1, 0x0040_0100, ZERO_SYSCALL),
        ] {
            let t = one_thread(arch, "kworker/12:9+events", ppid, flags, syscall, stack);
            let site = t.site.unwrap();
            assert_eq!(
                site,
                "kernel thread kworker/12:9 (workqueue events: delayed_fput) → __fput → amdgpu amdgpu_driver_postclose_kms … fence wait [GPU fence wait (amdgpu)]",
                "{arch:?} ppid {ppid} flags {flags:#x}"
            );
            assert!(t.ioctl.is_none());
            assert!(
                t.notes.iter().any(|n| n.starts_with("kernel thread")) || syscall != ZERO_SYSCALL
            );
        }
        // ppid 2 with a kthread stack and no syscall line to go by.
        let t = one_thread(
            arch,
            "kworker/12:9+events",
            2,
            0x0040_0100,
            "-1 0x0 0x0\n",
            stack,
        );
        assert!(t.site.unwrap().starts_with("kernel thread kworker/12:9"));
        // ppid 2 in a pid namespace is any process: a user stack stays a user thread.
        let t = one_thread(
            arch,
            "python3",
            2,
            0x0040_0100,
            "0 0x3 0x7f0000001000 0x10 0x0 0x0 0x0 0x7ffd00000000 0x7f0000002000\n",
            &format!(
                "[<0>] pipe_read+0x1/0x2\n[<0>] vfs_read+0x1/0x2\n{}",
                entry(arch, "read")
            ),
        );
        assert_eq!(
            t.site.as_deref(),
            Some("read … waits in pipe_read (lock or wait not visible in the stack)")
        );
        assert!(t.notes.is_empty(), "{:?}", t.notes);
        // A user thread in read(2) stays one.
        let t = one_thread(
            arch,
            "python3",
            1,
            0x0040_0100,
            "0 0x3 0x7f0000001000 0x10 0x0 0x0 0x0 0x7ffd00000000 0x7f0000002000\n",
            "[<0>] pipe_read+0x1/0x2\n",
        );
        assert!(!t.site.unwrap().starts_with("kernel thread"));
    }
    // Without a comm, a stack that starts in kthread still says so.
    let site = site::classify(&frames(stack), None, Some("read")).unwrap();
    assert!(
        site.starts_with("kernel thread (work delayed_fput) → __fput"),
        "{site}"
    );
}

/// Family 2: the proprietary module's callers are `_nvNNNNNNrm`, but its lock primitives keep their names.
#[test]
fn proprietary_rm_lock_primitives_come_before_the_obfuscated_fallback() {
    let cases: &[(&str, NvidiaWait, &str)] = &[
        (
            "[<0>] os_acquire_rwlock_read+0x30/0x40 [nvidia]\n",
            NvidiaWait::RmApiLockMode { write: false },
            "[RM API lock (read)]",
        ),
        (
            "[<0>] os_acquire_rwlock_write+0x30/0x40 [nvidia]\n",
            NvidiaWait::RmApiLockMode { write: true },
            "[RM API lock (write)]",
        ),
        (
            "[<0>] down+0x36/0x80\n[<0>] os_acquire_semaphore+0x4c/0x90 [nvidia]\n",
            NvidiaWait::RmSemaphore,
            "[RM semaphore / GPU lock]",
        ),
        (
            "[<0>] os_acquire_mutex+0x4c/0x90 [nvidia]\n",
            NvidiaWait::RmSemaphore,
            "[RM semaphore / GPU lock]",
        ),
        (
            "[<0>] os_acquire_spinlock+0x12/0x30 [nvidia]\n",
            NvidiaWait::RmSpinlock,
            "[RM spinlock]",
        ),
        ("", NvidiaWait::ObfuscatedFrames, "[obfuscated frames]"),
    ];
    for arch in ARCHES {
        for (top, want, label) in cases {
            let text = format!("{top}[<0>] _nv000712rm+0x10/0x20 [nvidia]\n[<0>] _nv043172rm+0x10/0x20 [nvidia]\n[<0>] rm_ioctl+0x64/0xb0 [nvidia]\n[<0>] nvidia_ioctl+0x5e4/0x8c0 [nvidia]\n[<0>] nvidia_unlocked_ioctl+0x24/0x40 [nvidia]\n{}", entry(arch, "ioctl"));
            let f = frames(&text);
            assert_eq!(site::nvidia::nvidia_site(&f), Some(*want), "{text}");
            let s = site::classify(&f, None, None).unwrap();
            assert!(
                s.starts_with("ioctl → nvidia: nvidia_ioctl → rm_ioctl"),
                "{s}"
            );
            assert!(s.ends_with(label), "{s}");
        }
    }
}

/// Family 3: the entry module and the module where the wait happens.
#[test]
fn entry_module_and_waiting_module_are_both_named() {
    for arch in ARCHES {
        let modeset = format!("[<0>] nvkms_ioctl_from_kapi_try_pmlock+0x36/0x80 [nvidia_modeset]\n[<0>] ApplyModeSetConfig+0xc7a/0xe00 [nvidia_modeset]\n[<0>] nv_drm_atomic_commit+0x220/0x270 [nvidia_drm]\n[<0>] drm_atomic_commit+0x1/0x2 [drm]\n[<0>] drm_mode_atomic_ioctl+0x1/0x2 [drm]\n[<0>] drm_ioctl_kernel+0x1/0x2 [drm]\n[<0>] drm_ioctl+0x1/0x2 [drm]\n{}", entry(arch, "ioctl"));
        assert_eq!(
            site::classify(&frames(&modeset), None, None).unwrap(),
            "ioctl → nvidia_drm: nv_drm_atomic_commit → nvidia_modeset: nvkms_ioctl_from_kapi_try_pmlock [nvidia-modeset global lock]"
        );
        let spin = "[<0>] nvWriteGpEntry+0x90/0x370 [nvidia_modeset]\n[<0>] nvPushKickoff+0x24/0x40 [nvidia_modeset]\n[<0>] nvkms_kthread_q_callback+0x1/0x2 [nvidia_modeset]\n[<0>] _main_loop+0x1/0x2 [nvidia]\n[<0>] kthread+0x1/0x2\n[<0>] ret_from_fork+0x1/0x2\n";
        let s = site::classify_from(
            Origin::KernelThread {
                comm: "nvidia-modeset/",
                workqueue: None,
            },
            &frames(spin),
            None,
        )
        .unwrap();
        assert_eq!(s, "kernel thread nvidia-modeset/ → nvidia: _main_loop → nvidia_modeset: nvWriteGpEntry [nvidia-modeset pushbuffer/GPFIFO spin]");
        // An RDMA memory registration released through nv_peer_mem into the (proprietary) nvidia module.
        let peer = format!("[<0>] down+0x1/0x2\n[<0>] os_acquire_semaphore+0x1/0x2 [nvidia]\n[<0>] _nv011223rm+0x1/0x2 [nvidia]\n[<0>] nvidia_p2p_put_pages+0x1/0x2 [nvidia]\n[<0>] nv_mem_put_pages+0x1/0x2 [nv_peer_mem]\n[<0>] ib_umem_release+0x1/0x2 [ib_core]\n[<0>] ib_dereg_mr_user+0x1/0x2 [ib_core]\n[<0>] ib_uverbs_dereg_mr+0x1/0x2 [ib_uverbs]\n[<0>] ib_uverbs_write+0x1/0x2 [ib_uverbs]\n[<0>] vfs_write+0x1/0x2\n{}", entry(arch, "write"));
        assert_eq!(
            site::classify(&frames(&peer), None, None).unwrap(),
            "write → nv_peer_mem: nv_mem_put_pages → nvidia: os_acquire_semaphore … semaphore wait [RM semaphore / GPU lock]"
        );
        // The other way in: the proprietary module calls nv_peer_mem's free callback, which waits in ib_core.
        // The wait is not in obfuscated frames.
        let callback = format!("[<0>] ib_invalidate_peer_memory+0x1/0x2 [ib_core]\n[<0>] nv_mem_free_callback+0x1/0x2 [nv_peer_mem]\n[<0>] _nv034712rm+0x1/0x2 [nvidia]\n[<0>] _nv012008rm+0x1/0x2 [nvidia]\n[<0>] rm_ioctl+0x1/0x2 [nvidia]\n[<0>] nvidia_ioctl+0x1/0x2 [nvidia]\n{}", entry(arch, "ioctl"));
        let f = frames(&callback);
        assert_eq!(site::nvidia::nvidia_site(&f), None);
        assert_eq!(
            site::classify(&f, None, None).unwrap(),
            "ioctl → nvidia: nvidia_ioctl → rm_ioctl → nv_peer_mem → ib_core: ib_invalidate_peer_memory … waits in ib_invalidate_peer_memory (lock or wait not visible in the stack)"
        );
    }
}

/// Family 4: GPU fences name the waiting driver; exit paths name the driver's teardown, not `drm_release`.
#[test]
fn gpu_fence_waits_name_the_driver() {
    for arch in ARCHES {
        let i915 = format!("[<0>] dma_resv_wait_timeout+0x1/0x2\n[<0>] i915_gem_object_wait+0x1/0x2 [i915]\n[<0>] i915_gem_wait_ioctl+0x1/0x2 [i915]\n[<0>] drm_ioctl_kernel+0x1/0x2 [drm]\n[<0>] drm_ioctl+0x1/0x2 [drm]\n{}", entry(arch, "ioctl"));
        assert_eq!(
            site::classify(&frames(&i915), None, None).unwrap(),
            "ioctl → i915: i915_gem_wait_ioctl → i915_gem_object_wait … fence wait [GPU fence wait (i915)]"
        );
        let old = format!("[<0>] reservation_object_wait_timeout_rcu+0x1/0x2\n[<0>] amdgpu_gem_wait_idle_ioctl+0x1/0x2\n[<0>] drm_ioctl+0x1/0x2\n[<0>] amdgpu_drm_ioctl+0x1/0x2\n{}", entry(arch, "ioctl"));
        assert_eq!(
            site::classify(&frames(&old), None, None).unwrap(),
            // Built-in amdgpu (no module tags): the layer map names the driver as a tag would (issue 38).
            "ioctl → amdgpu: amdgpu_drm_ioctl → amdgpu_gem_wait_idle_ioctl … fence wait [GPU fence wait (amdgpu)]"
        );
        let exit = "[<0>] dma_fence_wait_timeout+0x1/0x2\n[<0>] xe_vm_close_and_put+0x1/0x2 [xe]\n[<0>] xe_file_close+0x1/0x2 [xe]\n[<0>] drm_file_free+0x1/0x2 [drm]\n[<0>] drm_release+0x1/0x2 [drm]\n[<0>] __fput+0x1/0x2\n[<0>] task_work_run+0x1/0x2\n[<0>] do_exit+0x1/0x2\n[<0>] do_group_exit+0x1/0x2\n";
        assert_eq!(
            site::classify(&frames(exit), None, Some("futex")).unwrap(),
            "process exit → __fput → xe xe_file_close … fence wait [GPU fence wait (xe)]"
        );
        let sched = "[<0>] drm_sched_entity_flush+0x1/0x2 [gpu_sched]\n[<0>] amdgpu_ctx_mgr_entity_flush+0x1/0x2 [amdgpu]\n[<0>] amdgpu_flush+0x1/0x2 [amdgpu]\n[<0>] filp_close+0x1/0x2\n[<0>] put_files_struct+0x1/0x2\n[<0>] do_exit+0x1/0x2\n";
        // Issue 38: more precise than a fence wait — the scheduler drains the context's queue.
        assert!(site::classify(&frames(sched), None, None)
            .unwrap()
            .ends_with("GPU scheduler entity drain [GPU scheduler entity drain (amdgpu): the GPU has not run the context's queued jobs]"));
    }
}

/// Family 5: the names of older kernels, and `__folio_lock` is a page lock, not I/O.
#[test]
fn older_kernels_names_are_known() {
    let fault_old = "[<0>] call_rwsem_down_read_failed+0x1/0x2\n[<0>] __do_page_fault+0x1/0x2\n[<0>] do_page_fault+0x1/0x2\n[<0>] page_fault+0x1/0x2\n";
    let f = frames(fault_old);
    assert_eq!(site::mm_lock::lock_class(&f, None), Some("mmap_lock"));
    assert_eq!(
        site::classify(&f, None, None).unwrap(),
        "page fault … rwsem wait (read) [mmap_lock wait]"
    );
    let folio = "[<0>] folio_wait_bit_common+0x1/0x2\n[<0>] __folio_lock+0x1/0x2\n[<0>] filemap_fault+0x1/0x2\n[<0>] __do_fault+0x1/0x2\n[<0>] handle_mm_fault+0x1/0x2\n[<0>] do_page_fault+0x1/0x2\n[<0>] do_translation_fault+0x1/0x2\n[<0>] do_mem_abort+0x1/0x2\n[<0>] el0_da+0x1/0x2\n";
    assert_eq!(
        site::classify(&frames(folio), None, None).unwrap(),
        "page fault (filemap_fault) … page lock wait"
    );
    for (top, words) in [
        ("sleep_on_page", "page lock wait"),
        ("__lock_page", "page lock wait"),
        ("wait_on_page_bit", "I/O wait"),
        ("wait_on_page_writeback", "writeback wait"),
        ("sleep_on_buffer", "buffer I/O wait"),
        ("rwsem_down_write_failed", "rwsem wait (write)"),
        ("call_rwsem_down_write_failed", "rwsem wait (write)"),
    ] {
        for arch in ARCHES {
            let text = format!(
                "[<0>] {top}+0x1/0x2\n[<0>] generic_perform_write+0x1/0x2\n{}",
                entry(arch, "write")
            );
            assert_eq!(
                site::classify(&frames(&text), None, None).unwrap(),
                format!("write → generic_perform_write … {words}"),
                "{top}"
            );
        }
    }
}

/// Family 6: the stack omits the lock; the operation on top waits in it.
#[test]
fn a_stripped_lock_says_where_the_wait_is_hidden() {
    for arch in ARCHES {
        let kfd = format!("[<0>] kfd_ioctl_alloc_memory_of_gpu+0x1/0x2 [amdgpu]\n[<0>] kfd_ioctl+0x1/0x2 [amdgpu]\n{}", entry(arch, "ioctl"));
        assert_eq!(
            site::classify(&frames(&kfd), Some("kfd_ioctl_alloc_memory_of_gpu"), None).unwrap(),
            "ioctl → amdgpu: kfd_ioctl → kfd_ioctl_alloc_memory_of_gpu … mutex wait on the KFD process's mutex"
        );
        // A function that takes no lock the tables know: only where the wait is hidden is said.
        let unknown = format!("[<0>] kfd_ioctl_set_scratch_backing_va+0x1/0x2 [amdgpu]\n[<0>] kfd_ioctl+0x1/0x2 [amdgpu]\n{}", entry(arch, "ioctl"));
        assert_eq!(
            site::classify(&frames(&unknown), None, None).unwrap(),
            "ioctl → amdgpu: kfd_ioctl → kfd_ioctl_set_scratch_backing_va … waits in kfd_ioctl_set_scratch_backing_va (lock or wait not visible in the stack)"
        );
        let open = format!(
            "[<0>] do_last+0x1/0x2\n[<0>] path_openat+0x1/0x2\n[<0>] do_filp_open+0x1/0x2\n{}",
            entry(arch, "openat")
        );
        assert_eq!(
            site::classify(&frames(&open), None, None).unwrap(),
            // Issue 38: do_last takes the inode lock (O_CREAT): the lock it waits for is named.
            "openat → do_last … rwsem wait (write) on the inode lock (i_rwsem; i_mutex before 4.7)"
        );
    }
}

/// Family 7: one frame that does not parse (a demangled C++ name) is skipped and noted, the rest kept.
#[test]
fn an_unparseable_frame_does_not_discard_the_stack() {
    let stack = "[<0>] down+0x36/0x80\n[<0>] DisplayPort::EvoMainLink::train(DisplayPort::LinkTrainParameters const&)+0x330/0x9c0 [nvidia_modeset]\n[<0>] nvkms_ioctl_from_kapi_try_pmlock+0x36/0x80 [nvidia_modeset]\n[<0>] nv_drm_atomic_check+0x220/0x270 [nvidia_drm]\n[<0>] __x64_sys_ioctl+0x1/0x2\n";
    let t = one_thread(
        Arch::X86_64,
        "kwin_wayland",
        1,
        0x0040_0100,
        "-1 0x0 0x0\n",
        stack,
    );
    assert_eq!(t.stack.len(), 4);
    assert!(
        t.notes.iter().any(|n| n.starts_with(
            "1 unparseable stack frame skipped: `[<0>] DisplayPort::EvoMainLink::train("
        )),
        "{:?}",
        t.notes
    );
    assert!(t.site.unwrap().ends_with("[nvidia-modeset global lock]"));
}

/// More GPU waits by name (driver request/fence waits, the DRM modeset lock, display commits) and the page
/// cache's throttles.
#[test]
fn driver_fence_waits_modeset_locks_and_throttles_are_categories() {
    for arch in ARCHES {
        let cases = [
            (
                "[<0>] i915_request_wait+0x1/0x2 [i915]\n[<0>] i915_gem_object_wait+0x1/0x2 [i915]\n[<0>] i915_gem_wait_ioctl+0x1/0x2 [i915]\n[<0>] drm_ioctl+0x1/0x2 [drm]\n",
                "ioctl → i915: i915_gem_wait_ioctl → i915_gem_object_wait … fence wait [GPU fence wait (i915)]",
            ),
            (
                "[<0>] nouveau_fence_wait+0x1/0x2 [nouveau]\n[<0>] nouveau_gem_ioctl_cpu_prep+0x1/0x2 [nouveau]\n[<0>] drm_ioctl+0x1/0x2 [drm]\n",
                "ioctl → nouveau: nouveau_gem_ioctl_cpu_prep → nouveau_fence_wait … fence wait [GPU fence wait (nouveau)]",
            ),
            (
                "[<0>] drm_modeset_lock+0x1/0x2 [drm]\n[<0>] drm_atomic_get_crtc_state+0x1/0x2 [drm]\n[<0>] amdgpu_dm_atomic_check+0x1/0x2 [amdgpu]\n[<0>] drm_atomic_check_only+0x1/0x2 [drm]\n[<0>] drm_mode_atomic_ioctl+0x1/0x2 [drm]\n[<0>] drm_ioctl+0x1/0x2 [drm]\n",
                "ioctl → amdgpu: amdgpu_dm_atomic_check → drm: drm_modeset_lock … DRM modeset lock wait [DRM modeset lock (amdgpu)]",
            ),
            (
                "[<0>] balance_dirty_pages+0x1/0x2\n[<0>] balance_dirty_pages_ratelimited_flags+0x1/0x2\n[<0>] generic_perform_write+0x1/0x2\n[<0>] ext4_buffered_write_iter+0x1/0x2 [ext4]\n[<0>] vfs_write+0x1/0x2\n",
                "write → ext4: ext4_buffered_write_iter … dirty page throttle [dirty page throttle (writeback)]",
            ),
        ];
        for (stack, want) in cases {
            let text = format!(
                "{stack}{}",
                entry(
                    arch,
                    if want.starts_with("write") {
                        "write"
                    } else {
                        "ioctl"
                    }
                )
            );
            assert_eq!(site::classify(&frames(&text), None, None).unwrap(), want);
        }
    }
}

/// A fault handler on top of the stack waits for the mmap lock it takes itself (the rwsem slow path omitted).
#[test]
fn a_fault_handler_on_top_waits_for_the_mmap_lock() {
    for text in [
        "[<0>] do_user_addr_fault+0x1/0x2\n[<0>] exc_page_fault+0x1/0x2\n[<0>] asm_exc_page_fault+0x1/0x2\n",
        "[<0>] do_page_fault+0x1/0x2\n[<0>] do_translation_fault+0x1/0x2\n[<0>] do_mem_abort+0x1/0x2\n[<0>] el0_da+0x1/0x2\n",
        "[<0>] __do_page_fault+0x1/0x2\n[<0>] do_page_fault+0x1/0x2\n[<0>] page_fault+0x1/0x2\n",
    ] {
        let f = frames(text);
        assert_eq!(site::mm_lock::lock_class(&f, None), Some("mmap_lock"), "{text}");
        assert!(!site::mm_lock::holds_fault_lock(&f, None));
        let s = site::classify(&f, None, None).unwrap();
        assert!(s.starts_with("page fault … ") && s.ends_with("(waits for mmap_lock)"), "{s}");
    }
}
