//! Round 13 of issue 38's held-out traces (GPU stacks): what a mail client wrapped off the lines around a stack.

use super::*;

/// Lockdep's held-lock listing after a hung-task report, its `#0:` lines wrapped before their `at:`
/// function: the functions that took the locks are no stack of their own.
#[test]
fn a_wrapped_held_lock_listing_is_no_stack() {
    let log = "\
[  738.337726] INFO: task MatrixMultiplic:653 blocked for more than 122 seconds.
[  738.358240] task:MatrixMultiplic state:D stack:    0 pid:  653 ppid:     1 flags:0x00004000
[  738.358254] Call Trace:
[  738.358312]  schedule_timeout+0x275/0x380
[  738.358375]  dma_fence_default_wait+0x214/0x230
[  738.358421]  amdgpu_mn_invalidate_gfx+0x55/0xa0 [amdgpu]
[  738.358688]  __mmu_notifier_release+0x1bb/0x210
[  738.358710]  exit_mmap+0x2f/0x1e0
[  738.358756]  do_exit+0x5c3/0xc00
[  738.359062]  entry_SYSCALL_64_after_hwframe+0x44/0xa9
[  738.359129] Showing all locks held in the system:
[  738.359141] 1 lock held by khungtaskd/54:
[  738.359148]  #0: ffffffff829f6840 (rcu_read_lock){....}-{1:2}, at:
debug_show_all_locks+0x15/0x183
[  738.359202] 1 lock held by MatrixMultiplic/653:
[  738.359206]  #0: ffff88810e364fe0
(&adev->notifier_lock){+.+.}-{3:3}, at:
amdgpu_mn_invalidate_gfx+0x34/0xa0 [amdgpu]
";
    let e = explain(log.as_bytes()).unwrap();
    assert_eq!(e.tasks.len(), 1, "{:?}", e.tasks);
    let site = e.tasks[0].site.as_deref().unwrap();
    assert!(
        site.contains("process exit → mmu notifier release → amdgpu amdgpu_mn_invalidate_gfx"),
        "{site}"
    );
}

/// A register dump's value wrapped onto a line of its own (`R09:` / `ffffffffffffff80`) is no frame.
#[test]
fn a_wrapped_register_word_is_no_frame() {
    let log = "\
task:cinnamon        state:D stack:    0 pid:18527 ppid:3109 flags:0x00000000
Call Trace:
 mutex_lock+0x32/0x40
 amdgpu_ctx_mgr_entity_flush+0x40/0xf0 [amdgpu]
 entry_SYSCALL_64_after_hwframe+0x44/0xae
RBP: 000055f28bde3d80 R08: 00000000000000e7 R09:
ffffffffffffff80
";
    let e = explain(log.as_bytes()).unwrap();
    assert_eq!(e.tasks.len(), 1, "{:?}", e.tasks);
    assert_eq!(
        frame_names(&e.tasks[0]),
        [
            "mutex_lock",
            "amdgpu_ctx_mgr_entity_flush",
            "entry_SYSCALL_64_after_hwframe"
        ]
    );
}
