//! Notation tests from issue 38's held-out rounds 12 onward (their traces are in
//! capture/tests/data/traces/; these pin each parsing step a round added).

use super::*;

/// Round 12b's notations: a profiler's numbered stack, a board farm's labels and level/facility around the
/// timestamp, and x86's register summary after an oops's end.
mod round12b {
    use super::*;

    #[test]
    fn a_profilers_numbered_kernel_stack() {
        let log = "\
  0. osDevReadReg032  (<kernel>) nvidia
  1. kgmmuCheckPendingInvalidates_TU102  (<kernel>) nvidia
  2. rm_ioctl  (<kernel>) nvidia
  3. __x64_sys_ioctl  (<kernel>) <kernel>
";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1);
        assert_eq!(
            frame_names(&e.tasks[0]),
            [
                "osDevReadReg032",
                "kgmmuCheckPendingInvalidates_TU102",
                "rm_ioctl",
                "__x64_sys_ioctl"
            ]
        );
        assert_eq!(e.tasks[0].stack[0].module.as_deref(), Some("nvidia"));
        // A numbered list in prose is no stack.
        assert!(explain(b"  1. Install the driver (<b>) then reboot\n").is_err());
    }

    #[test]
    fn a_board_farms_labels_and_level_facility() {
        let log = "\
boot: logs: [   16.166216] WARNING KERN CPU: 2 PID: 90 Comm: kworker/2:1 Not tainted 5.4.110 #1
boot: logs: [   16.166233] WARNING KERN Workqueue: pm pm_runtime_work
boot: logs: [   16.166467] WARNING KERN Call trace:
boot: logs: [   16.166474] WARNING KERN  reset_control_assert+0x174/0x1a8
boot: logs: [   16.166516] WARNING KERN  tegra_sor_suspend+0x24/0x88 [tegra_drm]
";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1);
        assert_eq!(e.tasks[0].task, "kworker/2:1");
        assert_eq!(
            frame_names(&e.tasks[0]),
            ["reset_control_assert", "tegra_sor_suspend"]
        );
    }

    #[test]
    fn the_register_summary_after_an_oops_is_not_another_task() {
        let log = "\
[   10.1] CPU: 0 UID: 0 PID: 15038 Comm: rpc-virtqemud Tainted: G O 7.0.1 #1
[   10.1] RIP: 0010:nv_audio_dynamic_power+0xc0/0x140 [nvidia]
[   10.1] Call Trace:
[   10.1]  <TASK>
[   10.1]  nv_pci_remove_helper+0x75/0x4e0 [nvidia]
[   10.1]  __x64_sys_write+0x84/0xf0
[   10.1]  </TASK>
[   10.1] ---[ end trace 0000000000000000 ]---
[   10.1] RIP: 0010:nv_audio_dynamic_power+0xc0/0x140 [nvidia]
";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1);
        // A second oops after the end has its own header, and its RIP is its own.
        let two = format!(
            "{log}[   11.2] CPU: 1 UID: 0 PID: 7 Comm: kworker/1:0 Tainted: G O 7.0.1 #1\n\
             [   11.2] RIP: 0010:nv_audio_dynamic_power+0xc0/0x140 [nvidia]\n"
        );
        assert_eq!(explain(two.as_bytes()).unwrap().tasks.len(), 2);
    }
}

/// Round 13 of issue 38's held-out traces (GPU stacks): what a mail client wrapped off the lines around a stack.
mod round13 {
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
}

/// Round 14: `dmesg -T`'s dates are stamps too (one log's go forward), and a paste in that format after a
/// dmesg paste cut short is another paste, not the rest of its stack.
#[test]
fn dmesg_t_dates_are_stamps_and_another_format_is_another_paste() {
    assert_eq!(
        stamp::ctime_seconds("Wed Jun 14 18:03:48 2017"),
        Some(1_497_463_428.0)
    );
    assert_eq!(
        stamp::ctime_seconds("Thu Feb 29 23:59:59 2024"),
        Some(1_709_251_199.0)
    );
    assert_eq!(stamp::ctime_seconds("Sep26 10:00"), None);
    let text = "[ 1079.910691]  [<ffffffff810846f3>] do_group_exit+0x43/0xb0\n\
                [ 1079.910693]  [<ffffffff810908c2>] get_signal+0x292/0x600\n\
                [Wed Jun 14 18:03:48 2017]  [<ffffffffa02b6fc9>] xfs_iunpin_wait+0x19/0x20 [xfs]\n\
                [Wed Jun 14 18:03:48 2017]  [<ffffffffa02ab84c>] xfs_reclaim_inode+0x8c/0x350 [xfs]\n";
    let e = explain(text.as_bytes()).unwrap();
    assert_eq!(e.tasks.len(), 2, "{:?}", e.tasks);
    assert_eq!(frame_names(&e.tasks[1])[0], "xfs_iunpin_wait");
}

/// Round 14: the hung-task detector's own NMI backtrace (khungtaskd, printing every CPU) is not a task of the
/// report.
#[test]
fn the_hung_task_detectors_own_backtrace_is_no_task() {
    let text = "INFO: task a.out:7 blocked for more than 140 seconds.\n\
                task:a.out state:D stack:0 pid:7 ppid:1 flags:0x00004002\n\
                Call Trace:\n __schedule+0x1/0x2\n schedule+0x1/0x2\n jbd2_log_wait_commit+0x1/0x2\n\
                NMI backtrace for cpu 1\n\
                CPU: 1 PID: 1573 Comm: khungtaskd Not tainted 4.19.300 #1\n\
                Call Trace:\n dump_stack+0x1/0x2\n nmi_cpu_backtrace.cold+0x63/0xa2\n\
                nmi_trigger_cpumask_backtrace+0x1a6/0x1f0\n watchdog+0x962/0xd80\n kthread+0x33f/0x460\n\
                ret_from_fork+0x24/0x30\n";
    let e = explain(text.as_bytes()).unwrap();
    assert_eq!(e.tasks.len(), 1, "{:?}", e.tasks);
    assert_eq!(e.tasks[0].task, "a.out");
}

/// Round 18: `talosctl dmesg`'s node, facility, level and RFC 3339 time with their colons are a prefix; a
/// `dmesg -T` block dated more than a day before the last stack, and a block in uptime seconds after one in
/// `dmesg -T` dates, are other pastes even when their first frame names no wait.
mod round18 {
    use super::*;

    #[test]
    fn a_talos_node_prefix_is_not_the_frame() {
        let log = "\
10.0.0.7: kern: warning: [2026-04-22T21:27:51.289597368Z]:  knvlinkSyncLinkMasksAndVbiosInfo_IMPL+0xb7/0x1a0 [nvidia]
10.0.0.7: kern: warning: [2026-04-22T21:27:51.290423802Z]:  rmapiControlWithSecInfo+0x79/0x140 [nvidia]
";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1);
        assert_eq!(
            frame_names(&e.tasks[0]),
            [
                "knvlinkSyncLinkMasksAndVbiosInfo_IMPL",
                "rmapiControlWithSecInfo"
            ]
        );
        // Not a Talos line: a word that is no facility keeps the line as it is.
        let other = "node: kernel2: warning: [2026-04-22T21:27:51Z]:  f+0x1/0x2\n";
        assert!(explain(other.as_bytes())
            .map(|e| e.tasks.iter().all(|t| t.stack.is_empty()))
            .unwrap_or(true));
    }

    #[test]
    fn a_dmesg_t_block_a_day_earlier_is_another_paste() {
        let log = "\
[Fri Mar  6 14:53:28 2026]  __ib_umem_release+0xa9/0xe0 [ib_core]
[Fri Mar  6 14:53:28 2026]  destroy_hw_idr_uobject+0x13/0x20 [ib_uverbs]
[Mon Mar  6 21:22:08 2023]  _nv038505rm+0xc/0x30 [nvidia]
[Mon Mar  6 21:22:08 2023]  ? rm_ioctl+0x54/0xb0 [nvidia]
";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 2, "{:?}", e.tasks);
        assert_eq!(frame_names(&e.tasks[1])[0], "_nv038505rm");
        // The same day (a stack printed over a few seconds) is one stack.
        let same = log.replace("Mon Mar  6 21:22:08 2023", "Fri Mar  6 14:53:29 2026");
        assert_eq!(explain(same.as_bytes()).unwrap().tasks.len(), 1);
    }

    #[test]
    fn uptime_seconds_after_dmesg_t_dates_are_another_paste() {
        let log = "\
[Mon Mar  6 21:22:08 2023]  _nv038505rm+0xc/0x30 [nvidia]
[Mon Mar  6 21:22:08 2023]  ? entry_SYSCALL_64_after_hwframe+0x61/0xc6
[  155.441404]  uvm_vm_close_managed_entry+0x92/0xb0 [nvidia_uvm]
[  155.441426]  remove_vma+0x31/0x90
";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 2, "{:?}", e.tasks);
        assert_eq!(frame_names(&e.tasks[1])[0], "uvm_vm_close_managed_entry");
    }
}

/// Round 24's notation: a syslog excerpt without the printk stamp, then another host's with it.
mod round24 {
    use super::*;

    /// Round 24: one host's syslog carries printk's time stamp on every kernel line or on none, so syslog
    /// frames without one, then a stack's top with one, is another host's paste.
    #[test]
    fn a_syslog_stack_gaining_the_printk_stamp_is_another_paste() {
        let log = "\
May 25 16:27:50 gw kernel: [<ffffffff8bf1432d>] wait_for_completion+0xfd/0x140
May 25 16:27:50 gw kernel: [<ffffffffc06ae9fe>] iscsit_cause_connection_reinstatement+0x9e/0x100 [iscsi_target_mod]
Aug 16 11:09:34 svr71 kernel: [58680.100932]  [<ffffffff81840ef5>] schedule_timeout+0x1b5/0x270
Aug 16 11:09:34 svr71 kernel: [58680.100940]  [<ffffffff810a0f9f>] kthread_stop+0x4f/0x110
";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 2, "{:?}", e.tasks);
        assert_eq!(frame_names(&e.tasks[1])[0], "schedule_timeout");
        // Stamped throughout, the same lines are one stack.
        let stamped = log.replace("gw kernel: [<", "gw kernel: [58680.100930]  [<");
        assert_eq!(explain(stamped.as_bytes()).unwrap().tasks.len(), 1);
    }
}

/// Round 27's notation: decode_stacktrace.sh names a module frame's module after its locations, bare.
mod round27 {
    use super::*;

    #[test]
    fn a_decoded_module_frame_keeps_its_module() {
        let log = "\
[  484.388532] INFO: task blkid:1979 blocked for more than 120 seconds.
[  484.388585] task:blkid           state:D stack:0     pid:1979  ppid:1768   flags:0x00004002
[  484.388610] Call Trace:
[  484.388728] __mutex_lock.constprop.0 (kernel/locking/mutex.c:197 kernel/locking/mutex.c:747)
[  484.388761] pkt_ioctl (drivers/block/pktcdvd.c:2590) pktcdvd
[  484.388853] ? tomoyo_init_request_info (security/tomoyo/util.c:1026)
[  484.388876] blkdev_ioctl (block/ioctl.c:620)
";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1, "{:?}", e.tasks);
        // The guessed frame (`? tomoyo_init_request_info`) is left out, as in every notation.
        let t = &e.tasks[0];
        assert_eq!(
            frame_names(t),
            ["__mutex_lock.constprop.0", "pkt_ioctl", "blkdev_ioctl"]
        );
        assert_eq!(t.stack[1].module.as_deref(), Some("pktcdvd"));
        // Words after the locations that are no module name (a sentence) make no frame.
        let prose = log.replace(") pktcdvd", ") is where it hangs.");
        let e = explain(prose.as_bytes()).unwrap();
        assert!(!frame_names(&e.tasks[0]).contains(&"pkt_ioctl"));
    }
}

/// Round 31's shapes: powerpc's `[SP] [NIP] fn` frames, and a `ps` row above a `/proc/<pid>/stack`.
mod round31 {
    use super::*;

    #[test]
    fn powerpc_frames_are_read_past_their_two_addresses() {
        let log = "\
[ 1718.848362] NetworkManager  D    0  2626      1 0x00040080
[ 1718.848367] Call Trace:
[ 1718.848374] [c0000008b0f6b8f0] [c000000000c6d558] schedule+0x78/0x130 (unreliable)
[ 1718.848401] [c0000008b0f6bc40] [c0000000005d5a64] jbd2_log_wait_commit+0xd4/0x1a0
[ 1718.848408] [c0000008b0f6bcc0] [c00000000055fb6c] ext4_sync_file+0x1cc/0x480
";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1, "{:?}", e.tasks);
        assert_eq!(
            frame_names(&e.tasks[0]),
            // The scheduler's own frames are not the task's stack (as in every notation).
            ["jbd2_log_wait_commit", "ext4_sync_file"]
        );
        // One bracketed word that is no address (a module tag) is not a powerpc frame's prefix.
        let tagged = "[nvidia] [c000000000c6d558] schedule+0x78/0x130\n";
        assert!(
            explain(tagged.as_bytes()).map_or(true, |e| e.tasks.iter().all(|t| t.stack.is_empty()))
        );
    }

    #[test]
    fn a_ps_row_names_the_task_whose_stack_follows() {
        let log = "\
===1015===
     PID TTY      STAT   TIME COMMAND
    1015 ?        D      0:04 [md2_raid1]
[<0>] md_super_wait+0xa2/0xe0
[<0>] md_thread+0xab/0x190
[<0>] kthread+0xe5/0x120
[<0>] ret_from_fork+0x31/0x50

===125431===
     PID TTY      STAT   TIME COMMAND
  125431 pts/2    Dl+    0:00 emacs .stgit-edit.txt
$ cat /proc/125431/stack
[<0>] jbd2_log_wait_commit+0xd8/0x140
[<0>] ext4_sync_file+0x1cc/0x380
";
        let e = explain(log.as_bytes()).unwrap();
        let got: Vec<_> = e.tasks.iter().map(|t| (t.task.as_str(), t.pid)).collect();
        // The `cat` of the same pid continues the task its `ps` row began.
        assert_eq!(got, [("md2_raid1", Some(1015)), ("emacs", Some(125431))]);
        // A row whose STAT is no process state is not one.
        assert!(crate::explain::task_line::ps_row("1015 ?  Q  0:04 [md2_raid1]").is_none());
    }
}
