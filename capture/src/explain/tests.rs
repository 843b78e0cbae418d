//! `explain`'s tests: the notations and log prefixes one at a time, hostile input, the paste shapes of issue
//! 38 (`shapes`, `known_misses`, `hard_wraps`) and the hung-task detector's blocker line (`kernel_word`).

use super::*;

/// The function names of a task's stack, innermost first.
fn frame_names(task: &ExplainedTask) -> Vec<&str> {
    task.stack.iter().map(|f| f.function.as_str()).collect()
}

#[test]
fn hung_task_block_with_journal_prefix_and_guesses() {
    let log = "\
Nov 19 01:03:26 host kernel: INFO: task nv_open_q:1014 blocked for more than 122 seconds.
Nov 19 01:03:26 host kernel:       Tainted: P           OE      6.8.0-49-generic #49-Ubuntu
Nov 19 01:03:26 host kernel: task:nv_open_q       state:D stack:0     pid:1014  tgid:1014  ppid:2      flags:0x00004000
Nov 19 01:03:26 host kernel: Call Trace:
Nov 19 01:03:26 host kernel:  <TASK>
Nov 19 01:03:26 host kernel:  __schedule+0x27c/0x6b0
Nov 19 01:03:26 host kernel:  schedule+0x33/0x110
Nov 19 01:03:26 host kernel:  rwsem_down_write_slowpath+0x27e/0x550
Nov 19 01:03:26 host kernel:  down_write+0x5c/0x80
Nov 19 01:03:26 host kernel:  os_acquire_rwlock_write+0x3c/0x70 [nvidia]
Nov 19 01:03:26 host kernel:  ? down+0x36/0x80
Nov 19 01:03:26 host kernel:  rmapiLockAcquire+0x294/0x360 [nvidia]
Nov 19 01:03:26 host kernel:  kthread+0xf2/0x120
Nov 19 01:03:26 host kernel:  ret_from_fork+0x47/0x70
Nov 19 01:03:26 host kernel:  </TASK>
";
    let e = explain(log.as_bytes()).unwrap();
    assert_eq!(e.tasks.len(), 1);
    let t = &e.tasks[0];
    assert_eq!(
        (t.task.as_str(), t.pid, t.ppid),
        ("nv_open_q", Some(1014), Some(2))
    );
    assert!(t.kernel_thread);
    assert_eq!(t.stack[0].function, "rwsem_down_write_slowpath");
    assert!(t.stack.iter().all(|f| f.function != "down"));
    let site = t.site.as_deref().unwrap();
    assert!(site.starts_with("kernel thread nv_open_q"), "{site}");
    assert!(site.ends_with("[RM API lock]"), "{site}");
}

#[test]
fn bare_proc_stack_and_arm32_from_lines() {
    let e = explain(b"[<0>] os_acquire_rwlock_read+0x30/0x40 [nvidia]\n[<0>] _nv012345rm+0x10/0x20 [nvidia]\n[<0>] nvidia_ioctl+0x5e4/0x8c0 [nvidia]\n[<0>] __x64_sys_ioctl+0x97/0xd0\n").unwrap();
    assert_eq!(e.tasks[0].task, "(pasted stack)");
    assert!(e.tasks[0]
        .site
        .as_deref()
        .unwrap()
        .ends_with("[RM API lock (read)]"));
    let arm = "[ 5036.077593] [<8079ef70>] (__schedule) from [<8079f5d8>] (schedule+0x50/0xa8)\n[ 5036.077611] [<8079f5d8>] (schedule) from [<807a26d8>] (rwsem_down_read_failed+0x10c/0x15c)\n[ 5036.077629] [<807a26d8>] (rwsem_down_read_failed) from [<807a1d6c>] (down_read+0x5c/0x60)\n[ 5036.077645] [<807a1d6c>] (down_read) from [<807a5418>] (do_page_fault+0xfc/0x3a4)\n";
    let e = explain(arm.as_bytes()).unwrap();
    let names: Vec<_> = e.tasks[0]
        .stack
        .iter()
        .map(|f| f.function.as_str())
        .collect();
    assert_eq!(
        names,
        ["rwsem_down_read_failed", "down_read", "do_page_fault"]
    );
}

#[test]
fn raw_kmsg_and_viewer_prefixes_are_not_the_message() {
    let log = "6,1201,5140900,-;INFO: task kworker/3:1:77 blocked for more than 122 seconds.\n\
               4,1202,5140901,-,caller=T77; <TASK>\n\
               > 2025-01-16T17:24:58.365Z  mutex_lock+0x1f/0x2f\n\
               warning [129398.234297] proc_cgroup_show+0x4e/0x2a0\n\
               <4>[  12.5] autoremove_wake_function+0x0/0x40\n\
               kern.err: [  12.6] seq_read_iter+0x11d/0x4b0\n";
    let e = explain(log.as_bytes()).unwrap();
    let t = &e.tasks[0];
    assert_eq!((t.task.as_str(), t.pid), ("kworker/3:1", Some(77)));
    let names: Vec<_> = t.stack.iter().map(|f| f.function.as_str()).collect();
    // The wake callback at offset 0 is a pointer on the stack, not a frame.
    assert_eq!(names, ["mutex_lock", "proc_cgroup_show", "seq_read_iter"]);
    assert!(
        t.site
            .as_deref()
            .unwrap()
            .contains("proc_cgroup_show … mutex wait"),
        "{:?}",
        t.site
    );
}

#[test]
fn names_with_spaces_and_the_kernels_blocker_line() {
    let log = "INFO: task CPU 6/KVM:11091 blocked for more than 120 seconds.\n\
               Call Trace:\n mutex_lock+0x1f/0x2f\n intel_vgpu_emulate_mmio_read+0x4e/0x2a0 [i915]\n\
               INFO: task CPU 6/KVM:11091 is blocked on a mutex likely owned by task qemu:42.\n";
    let e = explain(log.as_bytes()).unwrap();
    let t = &e.tasks[0];
    assert_eq!((t.task.as_str(), t.pid), ("CPU 6/KVM", Some(11091)));
    assert_eq!(e.tasks.len(), 1);
    assert!(
        t.notes
            .iter()
            .any(|n| n.contains("blocked on a mutex likely owned by task qemu:42")),
        "{:?}",
        t.notes
    );
}

#[test]
fn interrupt_frames_above_the_entry_are_not_the_task() {
    let e = explain(b"[<0>] irqentry_exit+0x34/0x640\n[<0>] sysvec_apic_timer_interrupt+0x57/0xc0\n[<0>] asm_sysvec_apic_timer_interrupt+0x1b/0x20\n[<0>] hmm_range_fault+0x3c/0xb0\n[<0>] amdgpu_hmm_range_get_pages+0x104/0x200 [amdgpu]\n").unwrap();
    let t = &e.tasks[0];
    assert_eq!(t.stack[0].function, "hmm_range_fault");
    assert!(
        t.notes
            .iter()
            .any(|n| n.contains("2 interrupt frames above asm_sysvec_apic_timer_interrupt")),
        "{:?}",
        t.notes
    );
}

#[test]
fn hostile_input_is_a_clear_error() {
    assert!(explain(b"").is_err());
    assert!(explain(b"hello world\nnothing here\n").is_err());
    assert!(explain(&[0u8, 1, 2, 3, 0xff, 0x80]).is_err());
    let huge = vec![b'a'; MAX_INPUT + 1];
    assert!(explain(&huge).is_err());
    // Truncated in the middle of a frame: what is there is kept.
    let e = explain(b"INFO: task a:1 blocked for more than 120 seconds.\nCall Trace:\n mutex_lock+0x1f/0x2f\n do_last+0x28f/0x1").unwrap();
    assert_eq!(e.tasks[0].stack[0].function, "mutex_lock");
    let e = explain(b"INFO: task a:1 blocked for more than 120 seconds.\nCall Trace:\n mutex_lock+0x1f/0x2f\n do_last+0x28f/0x").unwrap();
    assert_eq!(e.tasks[0].stack.len(), 1, "{:?}", e.tasks[0]);
    assert!(
        e.tasks[0].notes[0].contains("unparseable"),
        "{:?}",
        e.tasks[0].notes
    );
    // Many tasks and frames stay bounded.
    let many =
        "INFO: task a:1 blocked for more than 120 seconds.\n f+0x1/0x2\n".repeat(MAX_TASKS + 5);
    let e = explain(many.as_bytes()).unwrap();
    assert_eq!(e.tasks.len(), MAX_TASKS);
    assert!(!e.notes.is_empty());
    let deep = format!(
        "INFO: task a:1 blocked for more than 1 seconds.\n{}",
        " f+0x1/0x2\n".repeat(1000)
    );
    let e = explain(deep.as_bytes()).unwrap();
    assert_eq!(e.tasks[0].stack.len(), MAX_TASK_FRAMES);
}
/// Issue 35: a pasted log names its tasks, and its tasks name themselves: every task name, the site naming a
/// kernel thread, the kernel's blocker line and an unparseable frame quoting one, are inert in the Markdown,
/// headings included.
#[test]
fn hostile_task_names_are_inert_in_the_markdown() {
    use crate::escape::{inert_markdown_problems, HOSTILE_NAMES};
    let mut log = String::new();
    for (i, name) in HOSTILE_NAMES.iter().enumerate() {
        let name = name.replace('\n', " ");
        let pid = 100 + i;
        log.push_str(&format!(
            "INFO: task {name}:{pid} blocked for more than 122 seconds.\n\
             task:{name} state:D stack:0 pid:{pid} tgid:{pid} ppid:2 flags:0x00004000\n\
             Call Trace:\n\
             schedule+0x33/0x110\n\
             rwsem_down_write_slowpath+0x27e/0x550\n\
             {name}+0x1/0x2\n\
             kthread+0xf2/0x120\n\
             INFO: task {name}:{pid} is blocked on a mutex likely owned by task {name}:{}.\n",
            pid + 1
        ));
    }
    // A thread name with a line break comes from a wedge-capture report's own line (escaped there as `\n`).
    log.push_str("thread 7 line\\nbreak state D wchan rwsem_down_write_slowpath\n[<0>] rwsem_down_write_slowpath+0x1/0x2\n");
    let e = explain(log.as_bytes()).unwrap();
    let md = markdown(&e);
    let names: Vec<&str> = HOSTILE_NAMES
        .iter()
        .copied()
        .filter(|n| !n.contains('\n'))
        .collect();
    let problems = inert_markdown_problems(&md, &names);
    assert!(problems.is_empty(), "{problems:#?}\n{md}");
    assert!(md.contains("## `line\\nbreak` (pid 7)"), "{md}");
    assert!(md.contains("## ``a`b`` (pid 101)"), "{md}");
    // Every heading is one code span and a pid: no markup of the name's own.
    for heading in md
        .lines()
        .filter(|l| l.starts_with("## ") && *l != "## Wait graph")
    {
        let spans = crate::escape::code_spans(heading);
        assert_eq!(spans.len(), 1, "{heading}");
        assert_eq!(spans[0].start, 3, "{heading}");
    }
}

/// Issue 38, family 4: the paste shapes read by structure (each shape alone; together in
/// `tests/traces.rs`).
mod shapes {
    use super::*;

    fn names(t: &ExplainedTask) -> Vec<&str> {
        t.stack.iter().map(|f| f.function.as_str()).collect()
    }

    /// crash's `bt -t` (a `START:` line) lists every text address on the stack, stale ones too: its frames are
    /// guesses, so the stale one between the rwsem's slow path and `down_read` goes; a plain `bt` keeps it.
    #[test]
    fn crash_bt_t_text_symbols_are_guesses() {
        let frames = " [ffffc9000000fd00] __schedule at ffffffff81000010\n [ffffc9000000fd40] schedule at ffffffff81000020\n [ffffc9000000fd58] rwsem_down_read_slowpath at ffffffff81000030\n [ffffc9000000fd80] filemap_map_pages at ffffffff81000040\n [ffffc9000000fda0] down_read at ffffffff81000050\n [ffffc9000000fdb8] xfs_ilock at ffffffffc0000060 [xfs]\n [ffffc9000000fdd8] xfs_file_buffered_read at ffffffffc0000070 [xfs]\n";
        let header = "PID: 77     TASK: ffff8881a2b3c000  CPU: 1   COMMAND: \"cat\"\n";
        let with_t = format!("{header}      START: __schedule at ffffffff81000010\n{frames}");
        let t = &explain(with_t.as_bytes()).unwrap().tasks[0];
        assert_eq!(
            names(t),
            [
                "rwsem_down_read_slowpath",
                "down_read",
                "xfs_ilock",
                "xfs_file_buffered_read"
            ]
        );
        assert!(
            t.notes.iter().any(|n| n.contains("`bt -t`")),
            "{:?}",
            t.notes
        );
        let plain = format!("{header}{frames}");
        let t = &explain(plain.as_bytes()).unwrap().tasks[0];
        assert!(names(t).contains(&"filemap_map_pages"), "{:?}", names(t));
    }

    #[test]
    fn crash_bt_without_frame_indices() {
        let e = explain(b"PID: 4242   TASK: ffff8881a2b3c000  CPU: 3   COMMAND: \"kworker/3:1\"\n [ffffc90000a3fd88] __schedule at ffffffff81a0b3e6\n [ffffc90000a3fe10] schedule at ffffffff81a0b8a4\n [ffffc90000a3fe28] schedule_timeout at ffffffff81a10f1e\n [ffffc90000a3fea0] wait_for_completion at ffffffff81a0c5d2\n [ffffc90000a3fef0] nvme_dev_disable at ffffffffc01a2b3c [nvme]\n [ffffc90000a3ff10] kthread at ffffffff810c4d11\n").unwrap();
        let t = &e.tasks[0];
        assert_eq!((t.task.as_str(), t.pid), ("kworker/3:1", Some(4242)));
        assert_eq!(
            names(t),
            [
                "schedule_timeout",
                "wait_for_completion",
                "nvme_dev_disable",
                "kthread"
            ]
        );
        assert_eq!(t.stack[2].module.as_deref(), Some("nvme"));
    }

    #[test]
    fn decoded_addresses_and_inlined_callee_notes() {
        // OpenWrt's decoded traces: the raw address again before the name, a source location, and the callee
        // inlined at that address after `->`; the workqueue line decoded the same way.
        let log =
            "task:kworker/0:1     state:D stack:0     pid:10    ppid:2      flags:0x00100000\n\
                   Workqueue: events_power_efficient 0x8380ab0c -> reg_check_chans_work\n\
                   Call Trace:\n\
                   [<8082b5c8>] 0x8082b5c8 schedule kernel/sched/core.c:6776\n\
                   [<8082c998>] 0x8082c998 __mutex_lock kernel/locking/mutex.c:747\n\
                   [<8380ab3c>] 0x8380ab3c reg_check_chans_work -> rtnl_lock\n";
        let e = explain(log.as_bytes()).unwrap();
        let t = &e.tasks[0];
        assert_eq!(
            t.workqueue.as_deref(),
            Some("events_power_efficient reg_check_chans_work")
        );
        assert_eq!(names(t), ["__mutex_lock", "reg_check_chans_work"]);
        assert!(t.site.as_deref().unwrap().contains("rtnl_mutex (RTNL)"));
    }

    #[test]
    fn arm_unwinder_lines_without_a_space_before_the_caller() {
        let log = "[<c04d011c>](__schedule+0x2c0/0x5c0) from [<bf0b7480>](cv_wait_common+0x150/0x1ec [spl])\n\
                   [<bf0b7480>](cv_wait_common+0x150/0x1ec [spl]) from [<bf51a24c>](txg_quiesce_thread+0x1bc/0x360 [zfs])\n";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(names(&e.tasks[0]), ["cv_wait_common", "txg_quiesce_thread"]);
        assert_eq!(e.tasks[0].stack[1].module.as_deref(), Some("zfs"));
    }

    #[test]
    fn a_paste_that_starts_with_guesses_is_its_own_task() {
        // The first paste ends without its bottom frames; the next (another log, no timestamps) starts with
        // `?` guesses and then its wait: the guesses do not make the second paste the first one's.
        let log = "[ 10.000001]  [<ffffffffa01756d1>] zfs_dirlook+0x81/0x310 [zfs]\n\
                   [ 10.000002]  [<ffffffff811c8ae3>] __lookup_hash+0x33/0x40\n \
                   [<ffffffffa0705bbc>] ? tcp_packet+0x48c/0x17d0 [nf_conntrack]\n \
                   [<ffffffffa03a3f1d>] cv_wait_common+0x11d/0x130 [spl]\n \
                   [<ffffffffa049278c>] zfs_range_lock+0x2ac/0x5e0 [zfs]\n";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 2, "{:?}", e.tasks);
        assert_eq!(names(&e.tasks[1]), ["cv_wait_common", "zfs_range_lock"]);
    }

    #[test]
    fn diff_and_quote_marks_are_not_the_line() {
        let log = "+INFO: task dd:77 blocked for more than 122 seconds.\n\
                   +[  12.1] Call Trace:\n\
                   +  schedule+0x29/0x70\n\
                   +  io_schedule+0x12/0x40\n\
                   -  folio_wait_bit_common+0x1/0x2\n\
                   > + folio_wait_writeback+0x1/0x2\n";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1, "{:?}", e.tasks);
        let t = &e.tasks[0];
        assert_eq!((t.task.as_str(), t.pid), ("dd", Some(77)));
        assert_eq!(
            names(t),
            [
                "io_schedule",
                "folio_wait_bit_common",
                "folio_wait_writeback"
            ]
        );
    }

    /// Round 9: a log kept as comment lines behind a reply's quote and a diff's `+` (drm/ci's flakes files):
    /// `#` then blank is the comment's mark; drgn's `# 0 [ffff…]` frame index is not.
    #[test]
    fn comment_marks_are_not_the_line_but_frame_indices_stay() {
        let log = ">   > +# INFO: task kms_lease:1271 blocked for more than 122 seconds.\n\
                   >   > +# Call Trace:\n\
                   >   > +#\n\
                   >   > +#  schedule+0x35/0x120\n\
                   >   > +#  drm_vblank_work_flush+0x91/0xf0\n\
                   >   > +#  intel_wait_for_vblank_workers+0x58/0x90\n";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1, "{:?}", e.tasks);
        assert_eq!(e.tasks[0].pid, Some(1271));
        assert_eq!(
            names(&e.tasks[0]),
            ["drm_vblank_work_flush", "intel_wait_for_vblank_workers"]
        );
        assert_eq!(
            crate::explain::formats::message(" # 0 [ff54a3e3b02ef658] schedule"),
            " # 0 [ff54a3e3b02ef658] schedule"
        );
    }

    /// Round 9: a `Workqueue:` line wrapped before its work function (a bugzilla mail): the function on the
    /// next line completes it, it is not a frame.
    #[test]
    fn a_wrapped_workqueue_line_keeps_its_work_function() {
        let log = "[  605.33] INFO: task kworker/u8:3:162 blocked for more than 120 seconds.\n\
                   [  605.33] Workqueue: events_unbound\n\
                   nv50_disp_atomic_commit_work [nouveau]\n\
                   [  605.33] Call Trace:\n\
                   [  605.33]  dma_fence_default_wait+0x22f/0x290\n\
                   [  605.33]  nv50_disp_atomic_commit_tail+0x72/0x710 [nouveau]\n\
                   [  605.33]  process_one_work+0x1a7/0x360\n";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1, "{:?}", e.tasks);
        let t = &e.tasks[0];
        assert_eq!(
            t.workqueue.as_deref(),
            Some("events_unbound nv50_disp_atomic_commit_work [nouveau]")
        );
        assert!(!names(t).contains(&"nv50_disp_atomic_commit_work"));
        let site = t.site.as_deref().unwrap_or("");
        assert!(
            site.contains("(workqueue events_unbound: nv50_disp_atomic_commit_work)"),
            "{site}"
        );
    }

    #[test]
    fn old_sysrq_w_task_lines_with_the_stack_count_glued_to_the_state() {
        let log =
            "SysRq : Show Blocked State\n  task                        PC stack   pid father\n\
                   kworker/u16:2   D12312  1234      2 0x00000000\n\
                   [<ffffffff8160b039>] schedule+0x29/0x70\n\
                   [<ffffffff81608d65>] jbd2_log_wait_commit+0xc5/0x140 [jbd2]\n\
                   FwgThread OpFor D    0 15341  15184 0x000040a0\n\
                   [<ffffffff81608d65>] jbd2_log_wait_commit+0xc5/0x140 [jbd2]\n";
        let e = explain(log.as_bytes()).unwrap();
        let got: Vec<_> = e
            .tasks
            .iter()
            .map(|t| (t.task.as_str(), t.pid, t.ppid))
            .collect();
        assert_eq!(
            got,
            [
                ("kworker/u16:2", Some(1234), Some(2)),
                ("FwgThread OpFor", Some(15341), Some(15184))
            ]
        );
    }

    #[test]
    fn mail_wrapped_headers_and_module_tags() {
        let log = "> [ 2 17 16:44:02 2026 <    0.000000>] INFO: task kworker/10:3:7194 \n\
                   > blocked for more than 122 seconds.\n\
                   > [ 2 17 16:44:02 2026 <    0.001597>] task:kworker/10:3    state:D \n\
                   > stack:0     pid:7194  tgid:7194  ppid:2      flags:0x00004000\n\
                   > Call Trace:\n\
                   >  dma_fence_default_wait+0x13d/0x210\n\
                   >  ? \n\
                   > __pfx_dma_fence_default_wait_cb+0x10/0x10\n\
                   >  svm_range_validate_and_map+0xf7c/0x19c0\n\
                   > [amdgpu]\n";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1, "{:?}", e.tasks);
        let t = &e.tasks[0];
        assert_eq!(
            (t.task.as_str(), t.pid, t.ppid),
            ("kworker/10:3", Some(7194), Some(2))
        );
        assert_eq!(
            names(t),
            ["dma_fence_default_wait", "svm_range_validate_and_map"]
        );
        assert_eq!(t.stack[1].module.as_deref(), Some("amdgpu"));
    }

    #[test]
    fn cat_proc_stack_names_the_pid_and_pastes_stay_apart() {
        let log = "root@host:~# cat /proc/4121/stack\n\
                   [<0>] rpc_wait_bit_killable+0x1e/0xa0 [sunrpc]\n\
                   [<0>] nfs4_proc_getattr+0x1/0x2 [nfsv4]\n\
                   [<0>] __x64_sys_newstat+0x1/0x2\n\
                   $ sudo cat /proc/88/task/90/stack\n\
                   [<0>] ceph_mdsc_do_request+0x1/0x2 [ceph]\n\
                   [<0>] do_syscall_64+0x1/0x2\n\
                   [<0>] entry_SYSCALL_64_after_hwframe+0x1/0x2\n\
                   [<0>] request_wait_answer+0x1/0x2 [fuse]\n\
                   [<0>] fuse_simple_request+0x1/0x2 [fuse]\n\
                   \n\
                   \u{20} io_schedule+0x1/0x2\n\
                   \u{20} nbd_queue_rq+0x1/0x2 [nbd]\n";
        let e = explain(log.as_bytes()).unwrap();
        let got: Vec<_> = e
            .tasks
            .iter()
            .map(|t| (t.pid, t.stack[0].function.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (Some(4121), "rpc_wait_bit_killable"),
                (Some(90), "ceph_mdsc_do_request"),
                // After the end of a stack (the syscall entry): another task.
                (None, "request_wait_answer"),
                // Another notation: another paste.
                (None, "io_schedule"),
            ]
        );
    }
}

/// Issue 38: the hung-task detector's blocker line names the lock a pasted stack hid.
mod kernel_word {
    use super::*;

    #[test]
    fn the_detectors_blocker_line_names_the_hidden_lock() {
        let log = "INFO: task kworker/3:1:77 blocked for more than 122 seconds.\n\
                   Call Trace:\n xfs_reflink_end_atomic_cow+0x133/0x200 [xfs]\n xfs_dio_write_end_io+0x117/0x320 [xfs]\n\
                   INFO: task kworker/3:1:77 <writer> blocked on an rw-semaphore likely owned by task fio:2308404 <writer>\n";
        let e = explain(log.as_bytes()).unwrap();
        let site = e.tasks[0].site.as_deref().unwrap();
        assert!(
            site.contains("rwsem wait (write) on an rw-semaphore owned by fio:2308404 (kernel record) in xfs_reflink_end_atomic_cow"),
            "{site}"
        );
    }
}

/// Issue 38, round 4: shapes the held-out traces showed (each also in `tests/data/traces/`).
mod round4 {
    use super::*;

    #[test]
    fn frames_whose_address_a_web_page_ate_are_frames() {
        let log = "rm D ffff88107f472c40 0 16705 22512 0x00000000\nCall Trace:\n\
                   [] ? schedule_timeout+0x1ed/0x2d0\n[] ? wait_for_common+0x12c/0x1a0\n\
                   [] ? __ocfs2_cluster_lock+0x1f0/0x780 [ocfs2]\n[] ? wait_for_common+0x150/0x1a0\n\
                   [] ? ocfs2_buffer_cached+0x8c/0x180 [ocfs2]\n[] ? ocfs2_unlink+0x6e1/0xbb0 [ocfs2]\n";
        let e = explain(log.as_bytes()).unwrap();
        let t = &e.tasks[0];
        // The second `wait_for_common` is a stale slot: the waiter before it stays.
        let names: Vec<&str> = t.stack.iter().map(|f| f.function.as_str()).collect();
        assert_eq!(
            names[..3],
            [
                "schedule_timeout",
                "wait_for_common",
                "__ocfs2_cluster_lock"
            ]
        );
        assert!(t.site.as_deref().unwrap().contains("OCFS2 cluster lock"));
    }

    #[test]
    fn a_zeroed_proc_copy_after_a_cut_dmesg_stack_is_another_task() {
        let log = "INFO: task kworker/u66:0:70 blocked for more than 120 seconds.\nCall Trace:\n\
                   [<ffffffff936b1799>] schedule+0x39/0x80\n[<ffffffff936b233f>] wait_for_completion+0x9f/0x110\n\
                   [<ffffffffc024a680>] btrfs_async_run_delayed_refs+0x150/0x170 [btrfs]\n\
                   [<0>] btrfs_wait_ordered_roots+0x59/0x210\n[<0>] btrfs_sync_fs+0x3d/0x180\n";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 2);
        assert_eq!(e.tasks[1].stack[0].function, "btrfs_wait_ordered_roots");
    }

    #[test]
    fn a_frame_line_another_printk_broke_into_is_joined() {
        let log = "[1038750.299241] INFO: task nfsd:17206 blocked for more than 120 seconds.\n\
                   [1038750.299241] Call Trace:\n\
                   [1038750.300119]  [<ffffffff81579899>] sched[1043267.444164] serial8250: too much work for irq4\n\
                   ule_preempt_disabled+0x9/0x10\n\
                   [1038750.300784]  [<ffffffff8157af3f>] __mutex_lock_slowpath+0x8f/0xf0\n\
                   [1038750.302336]  [<ffffffff8157afb2>] mutex_lock+0x12/0x30\n\
                   [1038750.302901]  [<ffffffffa134ba1a>] btrfs_file_write_iter+0x6a/0x4a0 [btrfs]\n";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1);
        let site = e.tasks[0].site.as_deref().unwrap();
        assert!(
            site.contains("btrfs_file_write_iter … mutex wait"),
            "{site}"
        );
        // A stamp inside a frame's own brackets or after a space is no intruder.
        assert_eq!(
            formats::intruding_stamp(" [<ffffffff8157af3f>] f+0x8f/0xf0 [mod]"),
            None
        );
        assert_eq!(formats::intruding_stamp("text [12.5] more"), None);
    }
}

/// Issue 38, round 6: a call chain written on one line is its frames, innermost first (`->` or `→`, with a
/// `stack:` label or not); a decoder's `func file.c:N -> inlined_callee` stays one frame (its head has a
/// source location), and a source path the paste cut after a frame's offsets is dropped like a whole one.
#[test]
fn one_line_call_chains_and_cut_source_paths() {
    let chain = "task:kwin  state:D\n  __down_common -> down -> nvkms_ioctl_from_kapi_try_pmlock+0x4a/0xa0 [nvidia_modeset]\n  ApplyModeSetConfig+0x5ed/0xda0 [nvidia_modeset]\n";
    let t = &explain(chain.as_bytes()).unwrap().tasks[0];
    let names: Vec<&str> = t.stack.iter().map(|f| f.function.as_str()).collect();
    assert!(
        names.ends_with(&["nvkms_ioctl_from_kapi_try_pmlock", "ApplyModeSetConfig"]),
        "{names:?}"
    );
    assert_eq!(
        t.stack[names.len() - 2].module.as_deref(),
        Some("nvidia_modeset")
    );

    let unicode = "stack:  dup_mmap \u{2192} dup_mm \u{2192} copy_process \u{2192} kernel_clone\n";
    let t = &explain(unicode.as_bytes()).unwrap().tasks[0];
    let names: Vec<&str> = t.stack.iter().map(|f| f.function.as_str()).collect();
    assert_eq!(
        names,
        ["dup_mmap", "dup_mm", "copy_process", "kernel_clone"]
    );

    // Not a chain: a decoder's inlined callee after a source location.
    assert!(
        formats::arrow_chain("addrconf_dad_work net/ipv6/addrconf.c:4160 -> rtnl_lock").is_none()
    );
    // Not a chain: prose with an arrow.
    assert!(formats::arrow_chain("the worker -> waits for the GPU").is_none());

    let cut = "INFO: task kworker/u4:5:1105 blocked for more than 143 seconds.\ntask:kworker/u4:5    state:D stack:0 pid:1105 ppid:2 flags:0x00004000\nCall Trace:\n __wait_for_common+0xbc/0x1e0 home/u/linux/kernel/sched/completion.c:116\n __wait_rcu_gp+0x19d/0x1a0 home/u/linux/kernel\n";
    let t = &explain(cut.as_bytes()).unwrap().tasks[0];
    let names: Vec<&str> = t.stack.iter().map(|f| f.function.as_str()).collect();
    assert!(names.contains(&"__wait_rcu_gp"), "{names:?}");
    assert!(
        t.site.as_deref().unwrap().contains("RCU grace period"),
        "{:?}",
        t.site
    );
}

/// Round 8 of issue 38's held-out traces: crash `bt` of a 32-bit arm vmcore, and a serial console interleaved
/// with its syslog copy mid-line.
mod round8 {
    use super::*;

    #[test]
    fn crash_bt_of_an_arm_vmcore_names_the_functions_in_parentheses() {
        let log = "PID: 202 TASK: edcd2a00 CPU: 4 COMMAND: \"kworker/u16:4\"\n\
                   #0 [<c0a1f8c0>] (__schedule) from [<c0a1d054>]\n\
                   #1 [<c0a1d054>] (schedule_timeout) from [<c0a1f018>]\n\
                   #2 [<c0a1f018>] (wait_for_common) from [<c013c570>]\n\
                   #3 [<c013c570>] (wait_rcu_gp) from [<c014407c>]\n\
                   #4 [<c014407c>] (fuse_writepages [fuse]) from [<c06be62c>]\n\
                   #5 [<c0139db0>] (worker_thread) from\n";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1, "{:?}", e.tasks);
        let t = &e.tasks[0];
        assert_eq!(t.task, "kworker/u16:4");
        let names: Vec<&str> = t.stack.iter().map(|f| f.function.as_str()).collect();
        assert_eq!(
            names,
            [
                "schedule_timeout",
                "wait_for_common",
                "wait_rcu_gp",
                "fuse_writepages",
                "worker_thread"
            ]
        );
        assert_eq!(t.stack[3].module.as_deref(), Some("fuse"));
    }

    #[test]
    fn a_frame_whose_address_a_web_page_split_after_the_bracket() {
        let log = "  [<\nffffffff810ee634>] synchronize_rcu_expedited+0x24/0x30\n  [<\n\
                   ffffffff811ccf23>] bdi_unregister+0x53/0x290\n  [<\n\
                   ffffffff810ad3dc>] kthread+0x12c/0x160\n  [<\nffffffffffffffff>] 0xffffffffffffffff\n";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1, "{:?}", e.tasks);
        let names = frame_names(&e.tasks[0]);
        assert_eq!(
            names,
            ["synchronize_rcu_expedited", "bdi_unregister", "kthread"]
        );
    }

    #[test]
    fn fragments_of_an_interleaved_copy_are_neither_headers_nor_frames() {
        // A serial console and its syslog copy interleaved mid-line (compute-image-packages#905).
        let log = r#"[34315.120624] INFO: task jbd2/sda1-8:161 blocked for more than 120 seconds.
[34315.127680]       Not tainted 5.10.0-8-cloud-amd64 #1 Debian 5.10.46-4
[34315.134361] "echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.
[34315.142345] task:jbd2/sda1-8     state:D stack:    0 pid:  161 ppid:     2 flags:0x00004000
[34315.151697] Call Trace:
[34315.154331]  __schedule+0x282/0x870
Aug 26 00:03:33 [34315.158202]  ? wbt_rqw_done+0xe0/0xe0
[34315.163373]  schedule+0x46/0xb0
uam-tv-1 kernel:[34315.166784]  io_schedule+0x42/0x70
[34315.171934]  rq_qos_wait+0x106/0x170
[34315.175916]  ? efi_partition+0x820/0x820
 [34315.120624] [34315.180090]  ? wbt_cleanup_cb+0x20/0x20
[34315.185551]  wbt_wait+0x9f/0x130
INFO: task jbd2/[34315.188943]  __rq_qos_throttle+0x23/0x30
[34315.194358]  blk_mq_submit_bio+0x124/0x520
sda1-8:161 block[34315.198883]  submit_bio_noacct+0x3a9/0x420
[34315.204478]  ? bio_add_page+0x62/0x90
[34315.208277]  submit_bh_wbc+0x16a/0x190
ed for more than[34315.212349]  jbd2_journal_commit_transaction+0x60a/0x1ad0
 120 seconds.
A[34315.219259]  kjournald2+0xab/0x270
[34315.224249]  ? add_wait_queue_exclusive+0x70/0x70
[34315.229080]  ? load_superblock.part.0+0xb0/0xb0
ug 26 00:03:33 u[34315.233732]  kthread+0x11b/0x140
[34315.238805]  ? __kthread_bind_mask+0x60/0x60
[34315.243209]  ret_from_fork+0x22/0x30
"#;
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1, "{:?}", e.tasks);
        let names = frame_names(&e.tasks[0]);
        assert_eq!(
            names,
            [
                "io_schedule",
                "rq_qos_wait",
                "wbt_wait",
                "__rq_qos_throttle",
                "blk_mq_submit_bio",
                "submit_bio_noacct",
                "submit_bh_wbc",
                "jbd2_journal_commit_transaction",
                "kjournald2",
                "kthread",
                "ret_from_fork"
            ]
        );
        assert_eq!(e.tasks[0].task, "jbd2/sda1-8");
    }
}

/// The two paste shapes issue 38's shape test had listed as known misses.
mod known_misses {
    use super::*;

    /// A Markdown list item quoting a mail that quotes a diff of comment lines (`- >   > +# `): each quote
    /// level has marks of its own, so the `+` after the second `>` is stripped too.
    #[test]
    fn a_list_mark_over_a_quoted_diff_keeps_the_task() {
        let log = "\
- >   > +# INFO: task kms_async_flips:1253 blocked for more than 122 seconds.
- >   > +# Call Trace:
- >   > +#  __schedule+0x495/0xd20
- >   > +#  schedule+0x35/0x120
- >   > +#  drm_vblank_work_flush+0x91/0xf0
";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1);
        assert_eq!(
            (e.tasks[0].task.as_str(), e.tasks[0].pid),
            ("kms_async_flips", Some(1253))
        );
        assert_eq!(frame_names(&e.tasks[0]), ["drm_vblank_work_flush"]);
    }

    /// A kernel thread's stack cut after `kthread` (its `ret_from_fork` lost), then another paste's header-less
    /// frames with the same (to the second) time: `kthread`'s only caller is the thread start, so the next
    /// frame that is not a guess begins another stack.
    #[test]
    fn a_frame_after_kthread_begins_another_stack() {
        let log = "\
[Mon Dec  7 18:00:01 2026] INFO: task kworker/39:2:105471 blocked for more than 120 seconds.
[Mon Dec  7 18:00:01 2026] Call Trace:
[Mon Dec  7 18:00:01 2026]  schedule+0x36/0x80
[Mon Dec  7 18:00:01 2026]  blk_mq_freeze_queue_wait+0x4b/0xb0
[Mon Dec  7 18:00:01 2026]  worker_thread+0x4b/0x500
[Mon Dec  7 18:00:01 2026]  kthread+0x109/0x140
[Mon Dec  7 18:00:01 2026]  ? kthread_create_on_node+0x60/0x60
[Mon Dec  7 18:00:01 2026]  request_wait_answer+0x9d/0x210 [fuse]
[Mon Dec  7 18:00:01 2026]  fuse_simple_request+0xbd/0x190 [fuse]
";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 2);
        assert_eq!(e.tasks[0].pid, Some(105471));
        assert_eq!(frame_names(&e.tasks[1])[0], "request_wait_answer");
        // `ret_from_fork` under `kthread` is the same stack's end.
        let whole = log.replace(
            " ? kthread_create_on_node+0x60/0x60\n",
            " ret_from_fork+0x2c/0x40\n",
        );
        let whole = whole.split("  request_wait_answer").next().unwrap();
        let e = explain(whole.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1);
    }
}

/// Lines a mail client hard-wrapped where the structure shows the cut (the ignored `hard_wraps_score`).
mod hard_wraps {
    use super::*;

    /// A 5.x arm `from` line cut after `from`: its caller is the next line, in the same stack.
    #[test]
    fn an_arm_from_line_cut_after_from_joins_its_caller() {
        let log = "\
[ 2332.689514] task:pwngrid         state:D stack:0     pid:4229  ppid:1
[ 2332.689562]  __schedule from schedule+0x54/0xec
[ 2332.689612]  schedule from schedule_preempt_disabled+0x14/0x18
[ 2332.689669]  schedule_preempt_disabled from
__mutex_lock.constprop.0+0x248/0x514
[ 2332.689720]  __mutex_lock.constprop.0 from netlink_dump+0x310/0x3ac
";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1);
        assert_eq!(
            frame_names(&e.tasks[0]),
            ["__mutex_lock.constprop.0", "netlink_dump"]
        );
    }

    /// Round 23: a word alone below a stack's bottom frame (a mail's signature) is no frame of it.
    #[test]
    fn a_signature_below_the_stack_bottom_is_no_frame() {
        let log = "\
> +# [  363.517142] task:msm_recovery    state:D stack:0     pid:876   tgid:876   ppid:274
> +# [  363.528876] Call trace:
> +# [  363.561582]  msm_gem_close+0xac/0xe4
> +# [  363.606601]  el0t_64_sync+0x198/0x19c

-- 
Dmitry
";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1);
        assert_eq!(frame_names(&e.tasks[0]), ["msm_gem_close", "el0t_64_sync"]);
    }

    /// `Workqueue:` alone at a line's end: the queue and work function are the next line.
    #[test]
    fn a_workqueue_label_cut_from_its_queue() {
        let log = "\
[ 3142.681345] task:kworker/0:1     state:D stack:0     pid:99773 ppid:2
[ 3142.681345] Workqueue:
events drm_sched_job_timedout [gpu_sched]
[ 3142.681369] Call trace:
[ 3142.681394]  schedule+0x3c/0x120
[ 3142.681400]  drm_sched_stop+0x1/0x2 [gpu_sched]
";
        let e = explain(log.as_bytes()).unwrap();
        assert_eq!(e.tasks.len(), 1);
        assert_eq!(
            e.tasks[0].workqueue.as_deref(),
            Some("events drm_sched_job_timedout [gpu_sched]")
        );
    }
}

/// Rounds 12 to 14 (and later rounds'): in a module of their own, for the house's file-length rule.
mod rounds;
