//! Snapshots decoded from fake /proc trees (`ProcRoot::new(dir)`): a recorded aarch64 GB10-style wedge
//! and the H200 UVM exit-path fixture. These complement the real D-state test (tests/dstate.rs).

use std::path::Path;

use capture::decode::syscalls;
use capture::parse::stack;
use capture::testing::FakeProc;
use capture::{site, snapshot_process, Arch, SnapshotOptions, SyscallInfo};

/// One thread of a recorded tree; the fields every fixture here sets.
struct FakeThread<'a> {
    tid: i32,
    comm: &'a str,
    state: char,
    wchan: &'a str,
    syscall: &'a str,
    stack: &'a str,
}

fn add(tree: &FakeProc, pid: i32, t: &FakeThread) {
    tree.task(pid, t.tid)
        .comm(t.comm)
        .state(t.state)
        .start(123_456)
        .num_threads(4)
        .cpu_ticks(250, 31)
        .processor(3)
        .ctxt_switches(10, 2)
        .wchan(t.wchan)
        .syscall(t.syscall)
        .stack(t.stack);
}

const ARM64_RM_STACK: &str = "[<0>] os_acquire_rwlock_write+0x38/0x60 [nvidia]\n[<0>] rmapiLockAcquire+0x1a0/0x2c0 [nvidia]\n[<0>] rm_ioctl+0x64/0xb0 [nvidia]\n[<0>] nvidia_ioctl+0x5e4/0x8c0 [nvidia]\n[<0>] nvidia_unlocked_ioctl+0x24/0x40 [nvidia]\n[<0>] __arm64_sys_ioctl+0xb4/0x100\n[<0>] invoke_syscall+0x50/0x120\n[<0>] el0_svc_common.constprop.0+0x48/0xf0\n[<0>] do_el0_svc+0x24/0x38\n[<0>] el0_svc+0x30/0xe0\n[<0>] el0t_64_sync_handler+0x100/0x130\n[<0>] el0t_64_sync+0x190/0x198\n";

fn gb10_tree() -> FakeProc {
    let tree = FakeProc::new();
    let pid = 4100;
    // The process first: its main thread is then written over by the recording below.
    tree.process(pid)
        .fd(5, "/dev/nvidiactl")
        .fd(7, "/dev/nvidia-uvm");
    add(
        &tree,
        pid,
        &FakeThread {
            tid: pid,
            comm: "python3",
            state: 'S',
            wchan: "futex_wait_queue",
            // aarch64 futex is 98.
            syscall: "98 0xffff8a000010 0x80 0x0 0x0 0x0 0x0 0xffffd1e0b000 0xffff8a3e0000\n",
            stack: "",
        },
    );
    add(
        &tree,
        pid,
        &FakeThread {
            tid: 4107,
            comm: "pt_main (gpu) 0",
            state: 'D',
            wchan: "os_acquire_rwlock_write",
            // aarch64 ioctl is 29: fd 5 → /dev/nvidiactl, NV_ESC_RM_CONTROL.
            syscall: "29 0x5 0xc020462a 0xffffd1e0c0a8 0x0 0x0 0x0 0xffffd1e0c050 0xffff8a3e1c2c\n",
            stack: ARM64_RM_STACK,
        },
    );
    add(
        &tree,
        pid,
        &FakeThread {
            tid: 4110,
            comm: "uvm-worker",
            state: 'D',
            wchan: "uvm_api_alloc_semaphore_pool",
            syscall: "29 0x7 0x44 0xffffd1e0d000 0x0 0x0 0x0 0xffffd1e0cf00 0xffff8a3e1c2c\n",
            stack: "[<0>] uvm_api_alloc_semaphore_pool+0x5a/0x2a0 [nvidia_uvm]\n[<0>] uvm_ioctl+0x1c7e/0x1e10 [nvidia_uvm]\n[<0>] uvm_unlocked_ioctl+0x31/0x60 [nvidia_uvm]\n[<0>] uvm_unlocked_ioctl_entry.part.0+0x7b/0xf0 [nvidia_uvm]\n[<0>] __arm64_sys_ioctl+0xb4/0x100\n[<0>] invoke_syscall+0x50/0x120\n",
        },
    );
    add(
        &tree,
        pid,
        &FakeThread {
            tid: 4111,
            comm: "spin",
            state: 'R',
            wchan: "0",
            syscall: "running\n",
            stack: "",
        },
    );
    tree.vanished_task(pid, 4112);

    tree
}

#[test]
fn aarch64_gb10_snapshot_from_a_fake_tree() {
    let tree = gb10_tree();
    let opts = SnapshotOptions {
        arch: Arch::Aarch64,
        ..SnapshotOptions::default()
    };
    let snap = snapshot_process(&tree.root(), 4100, &opts).unwrap();
    assert_eq!(snap.arch, "aarch64");
    let tids: Vec<i32> = snap.threads.iter().map(|t| t.tid).collect();
    assert_eq!(tids, vec![4100, 4107, 4110, 4111, 4112]);

    let main = &snap.threads[0];
    assert_eq!(main.state, "S");
    // Not in D, yet read in full: thread 4107 waits for the RM API lock, and its holder may be any thread
    // inside another RM call whatever its state. The main thread is in a futex, so it is not that holder.
    assert!(main.syscall.is_some() && main.wchan.is_some());
    assert!(!capture::rm_lock::in_rm_call(main));
    assert_eq!(snap.threads[1].waits_for.as_deref(), Some("RM API lock"));
    assert!(
        snap.threads[1].blocked_behind.is_empty(),
        "no holder visible"
    );

    let rm = &snap.threads[1];
    assert_eq!(rm.comm, "pt_main (gpu) 0");
    assert_eq!(rm.state, "D");
    assert_eq!(rm.wchan.as_deref(), Some("os_acquire_rwlock_write"));
    match &rm.syscall {
        Some(SyscallInfo::Blocked {
            nr,
            name,
            args,
            sp,
            pc,
        }) => {
            assert_eq!((*nr, name.as_deref()), (29, Some("ioctl")));
            assert_eq!(args[0], "0x5");
            assert_eq!(
                (sp.as_str(), pc.as_str()),
                ("0xffffd1e0c050", "0xffff8a3e1c2c")
            );
        }
        other => panic!("{other:?}"),
    }
    let io = rm.ioctl.as_ref().unwrap();
    assert_eq!(io.fd, 5);
    assert_eq!(io.fd_target.as_deref(), Some("/dev/nvidiactl"));
    assert_eq!(io.request, "0xc020462a");
    assert_eq!(io.name.as_deref(), Some("NV_ESC_RM_CONTROL"));
    assert_eq!(io.driver.as_deref(), Some("nvidia-rm"));
    assert_eq!(
        (io.dir.as_str(), io.ioctl_type, io.nr, io.size),
        ("read|write", 0x46, 0x2a, 32)
    );
    assert_eq!(rm.stack.len(), 12);
    assert_eq!(rm.stack[0].module.as_deref(), Some("nvidia"));
    assert_eq!(
        rm.site.as_deref(),
        Some("ioctl → nvidia: nvidia_ioctl → rm_ioctl … os_acquire_rwlock_write [RM API lock]")
    );
    assert_eq!(rm.voluntary_ctxt_switches, Some(10));
    assert_eq!(rm.cpu_ticks, Some(281));
    assert_eq!(rm.processor, Some(3));

    let uvm = &snap.threads[2];
    let io = uvm.ioctl.as_ref().unwrap();
    assert_eq!(io.name.as_deref(), Some("UVM_ALLOC_SEMAPHORE_POOL"));
    assert_eq!(io.dir, "raw");
    assert_eq!(io.fd_target.as_deref(), Some("/dev/nvidia-uvm"));
    assert_eq!(
        uvm.site.as_deref(),
        // The mutex slow path is a `__sched` function /proc/<tid>/stack omits (issue 28, family 6).
        Some("ioctl → nvidia_uvm: uvm_ioctl → uvm_api_alloc_semaphore_pool … waits in uvm_api_alloc_semaphore_pool (lock or wait not visible in the stack)")
    );

    assert_eq!(snap.threads[3].state, "R");
    assert!(snap.threads[4].gone);

    // Decoded as x86_64 instead, nr 29 is shmget: the arch matters and is recorded.
    let x86 = snapshot_process(
        &tree.root(),
        4100,
        &SnapshotOptions {
            arch: Arch::X86_64,
            ..opts.clone()
        },
    )
    .unwrap();
    assert!(x86.threads[1].ioctl.is_none());

    // --tid: only that thread, read in full whatever its state.
    let one = snapshot_process(
        &tree.root(),
        4100,
        &SnapshotOptions {
            only_tid: Some(4100),
            ..opts.clone()
        },
    )
    .unwrap();
    assert_eq!(one.threads.len(), 1);
    assert_eq!(one.threads[0].wchan.as_deref(), Some("futex_wait_queue"));
    match &one.threads[0].syscall {
        Some(SyscallInfo::Blocked { name, .. }) => assert_eq!(name.as_deref(), Some("futex")),
        other => panic!("{other:?}"),
    }

    // --all-threads: the running one reads `running`.
    let all = snapshot_process(
        &tree.root(),
        4100,
        &SnapshotOptions {
            all_threads: true,
            ..opts
        },
    )
    .unwrap();
    assert_eq!(
        all.threads[3].syscall,
        Some(SyscallInfo::Running { running: true })
    );

    // JSON contract names.
    let json = serde_json::to_value(&snap).unwrap();
    assert_eq!(json["pid"], 4100);
    let t = &json["threads"][1];
    for key in [
        "tid", "comm", "state", "wchan", "syscall", "ioctl", "stack", "site",
    ] {
        assert!(t.get(key).is_some(), "missing {key}");
    }
    assert_eq!(t["ioctl"]["type"], 0x46);
    assert_eq!(t["stack"][0]["function"], "os_acquire_rwlock_write");
    assert_eq!(t["stack"][0]["module"], "nvidia");
    let back: capture::ProcessSnapshot = serde_json::from_value(json).unwrap();
    assert_eq!(back, snap);

    // Markdown at a glance.
    let md = capture::render::markdown(&snap);
    assert!(
        md.starts_with("# Process 4100 — 2 of 5 threads in D"),
        "{md}"
    );
    assert!(md.contains("NV_ESC_RM_CONTROL"), "{md}");
    assert!(md.contains("| 4112 |  | gone |"), "{md}");
}

#[test]
fn missing_process_and_hostile_files() {
    let tree = gb10_tree();
    let root = tree.root();
    assert!(matches!(
        snapshot_process(&root, 999, &SnapshotOptions::default()),
        Err(capture::Error::NoSuchProcess { pid: 999, .. })
    ));
    // A corrupt syscall file is a note on that thread, not a failure of the snapshot.
    std::fs::write(
        tree.path().join("4100/task/4107/syscall"),
        b"\xff\xfe garbage",
    )
    .unwrap();
    std::fs::write(tree.path().join("4100/task/4110/stack"), b"[<0 broken").unwrap();
    let snap = snapshot_process(&root, 4100, &SnapshotOptions::default()).unwrap();
    assert!(snap.threads[1].syscall.is_none());
    assert!(
        snap.threads[1]
            .notes
            .iter()
            .any(|n| n.starts_with("syscall unreadable")),
        "{:?}",
        snap.threads[1].notes
    );
    assert!(snap.threads[2]
        .notes
        .iter()
        .any(|n| n.starts_with("stack unreadable")));
    // A corrupt stat: the thread is kept with a note.
    std::fs::write(tree.path().join("4100/task/4111/stat"), b"nonsense").unwrap();
    let snap = snapshot_process(&root, 4100, &SnapshotOptions::default()).unwrap();
    assert!(snap.threads[3].state.is_empty());
    assert!(!snap.threads[3].notes.is_empty());
}

#[derive(serde::Deserialize)]
struct Fixture {
    threads: Vec<FixtureThread>,
}

#[derive(serde::Deserialize)]
struct FixtureThread {
    state: String,
    wchan: String,
    syscall_nr: i64,
    stack: String,
}

fn h200() -> Fixture {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/h200-nvidia-uvm-dstate.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn h200_fixture_is_classified_by_stack_not_syscall() {
    let fx = h200();
    let expected = [
        "mprotect … do_mprotect_pkey (waits for mmap_lock)",
        // Issue 38: the kthread queue flush mechanism (kernel-open/common/nv-kthread-q.c) names what it waits for.
        "process exit → __fput → nvidia_uvm uvm_release … nv_kthread_q_flush [kthread queue flush (nvidia_uvm): waits for every item queued on the driver's nv_kthread_q to run]",
        // Round 8: kthread_stop waits for the thread to exit (kernel/kthread.c), a wait with words now.
        "process exit → __fput → nvidia_uvm uvm_release … kernel thread stop wait (kthread_stop: the thread must exit)",
        "process exit → __fput → nvidia_uvm uvm_release … rcu_barrier",
    ];
    assert_eq!(fx.threads.len(), expected.len());
    for (t, want) in fx.threads.iter().zip(expected) {
        assert_eq!(t.state, "D");
        let frames = stack::parse(t.stack.as_bytes()).unwrap();
        let wchan = capture::parse::wchan::parse(t.wchan.as_bytes()).unwrap();
        let name = syscalls::name(Arch::X86_64, t.syscall_nr);
        let got = site::classify(&frames, wchan.as_deref(), name).unwrap();
        assert_eq!(got, want);
        // The exit-path threads say futex in /proc/<tid>/syscall; the site must not.
        if t.syscall_nr == 202 {
            assert_eq!(name, Some("futex"));
            assert!(!got.contains("futex"));
        }
    }
}

#[test]
fn h200_fixture_as_a_fake_tree_notes_the_stale_syscall() {
    let fx = h200();
    let tree = FakeProc::new();
    let pid = 7000;
    let mut tids = Vec::new();
    for (i, t) in fx.threads.iter().enumerate() {
        let tid = pid + i as i32;
        tids.push(tid);
        let syscall = format!(
            "{} 0x7f0000001000 0x80 0x0 0x0 0x0 0x0 0x7ffd00000000 0x7f0000002000\n",
            t.syscall_nr
        );
        add(
            &tree,
            pid,
            &FakeThread {
                tid,
                comm: "pt_main_thread",
                state: 'D',
                wchan: &t.wchan,
                syscall: &syscall,
                stack: &t.stack,
            },
        );
    }
    let snap = snapshot_process(
        &tree.root(),
        pid,
        &SnapshotOptions {
            arch: Arch::X86_64,
            ..SnapshotOptions::default()
        },
    )
    .unwrap();
    assert_eq!(snap.threads.len(), 4);
    assert!(snap.threads[0].notes.is_empty());
    for t in &snap.threads[1..] {
        assert!(t
            .site
            .as_deref()
            .unwrap()
            .starts_with("process exit → __fput → nvidia_uvm uvm_release"));
        assert!(
            t.notes
                .iter()
                .any(|n| n.contains("syscall says futex") && n.contains("stale")),
            "{:?}",
            t.notes
        );
    }
}
