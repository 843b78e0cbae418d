//! The real thing: a helper process whose non-main thread sits in D inside ioctl(FS_IOC_SETFLAGS) on a
//! frozen loop-mounted ext4, while its other threads keep running; captured from outside.
//!
//! The helper is this test binary re-executed with `WEDGE_CAPTURE_DSTATE_HELPER=<file>` running the
//! ignored `dstate_helper_entry` test. Needs root; with CI=true it must run (and fails if it cannot set up).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use capture::frozen_fs::{self, BlockingCall, FrozenFs};
use capture::scan::Scanner;
use capture::{snapshot_process, Arch, ProcRoot, SnapshotOptions, SyscallInfo};

const HELPER_ENV: &str = "WEDGE_CAPTURE_DSTATE_HELPER";
const READY: &str = "WEDGE_HELPER_READY blocked_tid=";

/// Helper process body (not a test on its own: it does nothing unless re-executed with HELPER_ENV).
#[test]
#[ignore = "helper entry point, run by captures_a_real_d_state_thread"]
fn dstate_helper_entry() {
    let Ok(path) = std::env::var(HELPER_ENV) else {
        return;
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    // Both runners are named and running before the blocker is started.
    let started = std::sync::Arc::new(std::sync::Barrier::new(3));
    let s = started.clone();
    std::thread::Builder::new()
        .name("spinner".into())
        .spawn(move || {
            s.wait();
            let mut x = 0u64;
            while std::time::Instant::now() < deadline {
                for _ in 0..10_000 {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
        })
        .unwrap();
    let s = started.clone();
    std::thread::Builder::new()
        .name("sleeper".into())
        .spawn(move || {
            s.wait();
            while std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        })
        .unwrap();
    started.wait();
    let blocked =
        frozen_fs::spawn_blocked_thread(Path::new(&path), BlockingCall::SetFlags, "blocker")
            .unwrap();
    println!("{READY}{}", blocked.tid);
    // The main thread waits (S) until the parent kills the process.
    while std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Thaws, then kills and reaps the helper, then (by dropping the FrozenFs) unmounts — in that order,
/// also when an assertion fails: a process with a thread in D cannot be reaped before the thaw.
struct Cleanup {
    fs: Option<FrozenFs>,
    child: Option<Child>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(fs) = self.fs.as_mut() {
            let _ = fs.thaw();
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.fs.take();
    }
}

#[test]
fn captures_a_real_d_state_thread() {
    let Some(mut fs) = FrozenFs::for_test("captures_a_real_d_state_thread") else {
        return;
    };
    let victim = fs.create_file("victim", b"wedge").unwrap();
    let victim = std::fs::canonicalize(&victim).unwrap();
    fs.freeze().unwrap();
    let mut cleanup = Cleanup {
        fs: Some(fs),
        child: None,
    };

    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "dstate_helper_entry", "--ignored", "--nocapture"])
        .env(HELPER_ENV, &victim)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let pid = child.id() as i32;
    cleanup.child = Some(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(tid) = line.strip_prefix(READY) {
                let _ = tx.send(tid.trim().parse::<i32>().unwrap());
            }
        }
    });
    let tid = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("helper did not report its blocked thread");
    let root = ProcRoot::default();
    frozen_fs::wait_for_state(&root, pid, tid, 'D', Duration::from_secs(10)).unwrap();

    let snap = snapshot_process(&root, pid, &SnapshotOptions::default()).unwrap();
    assert_eq!(snap.pid, pid);
    assert_eq!(snap.arch, Arch::host().as_str());
    let t = snap
        .threads
        .iter()
        .find(|t| t.tid == tid)
        .expect("blocked thread listed");
    assert_eq!(t.comm, "blocker");
    assert_eq!(t.state, "D");
    assert_eq!(t.wchan.as_deref(), Some("percpu_rwsem_wait"), "{t:#?}");
    match &t.syscall {
        Some(SyscallInfo::Blocked { nr, name, args, .. }) => {
            assert_eq!(name.as_deref(), Some("ioctl"));
            assert_eq!(
                *nr,
                capture::decode::syscalls::number(Arch::host(), "ioctl").unwrap()
            );
            assert_eq!(args.len(), 6);
            assert_eq!(args[1], "0x40086602");
        }
        other => panic!("expected a blocked ioctl, got {other:?}"),
    }
    let ioctl = t.ioctl.as_ref().expect("ioctl decoded");
    assert_eq!(ioctl.name.as_deref(), Some("FS_IOC_SETFLAGS"));
    assert_eq!(ioctl.request, "0x40086602");
    assert_eq!(ioctl.driver.as_deref(), Some("linux-fs"));
    assert_eq!(ioctl.fd_target.as_deref(), Some(victim.to_str().unwrap()));
    eprintln!(
        "blocked thread's stack:\n{}",
        capture::render::stack_text(&t.stack)
    );
    let functions: Vec<&str> = t.stack.iter().map(|f| f.function.as_str()).collect();
    assert!(functions.contains(&"percpu_rwsem_wait"), "{functions:?}");
    assert!(
        functions.iter().any(|f| f.starts_with("mnt_want_write")),
        "{functions:?}"
    );
    assert!(
        functions.iter().any(|f| f.ends_with("sys_ioctl")),
        "{functions:?}"
    );
    assert_eq!(
        t.site.as_deref(),
        Some("ioctl → filesystem freeze (percpu_rwsem_wait)")
    );
    assert!(t.voluntary_ctxt_switches.is_some());

    // The running threads are there and are not wedged; only the blocker is read in depth.
    assert!(snap.threads.len() >= 4, "{:#?}", snap.threads);
    for other in snap.threads.iter().filter(|o| o.tid != tid) {
        assert_ne!(other.state, "D", "{other:#?}");
        assert!(
            other.stack.is_empty() && other.syscall.is_none(),
            "{other:#?}"
        );
    }
    for comm in ["spinner", "sleeper"] {
        assert!(
            snap.threads.iter().any(|o| o.comm == comm),
            "no {comm}: {:#?}",
            snap.threads
        );
    }

    // The hot scanner agrees, and the D thread makes no progress (ctxt switches frozen).
    let mut scanner = Scanner::new(&root, pid).unwrap();
    scanner.scan().unwrap();
    assert_eq!(scanner.sample(tid).unwrap().state, 'D');
    let d_count = scanner.samples().filter(|s| s.state == 'D').count();
    assert_eq!(d_count, 1);
    let before = scanner.ctxt_switches(tid).unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    scanner.scan().unwrap();
    assert_eq!(scanner.ctxt_switches(tid).unwrap().unwrap(), before);

    // The views show it.
    let md = capture::render::markdown(&snap);
    assert!(md.contains("1 of"), "{md}");
    assert!(md.contains("FS_IOC_SETFLAGS"), "{md}");
    assert!(md.contains("percpu_rwsem_wait+0x"), "{md}");
    let json = serde_json::to_value(&snap).unwrap();
    let jt = json["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["tid"] == tid)
        .unwrap();
    assert_eq!(jt["ioctl"]["name"], "FS_IOC_SETFLAGS");
    assert_eq!(jt["syscall"]["name"], "ioctl");

    // Thaw: the blocker completes and leaves D.
    cleanup.fs.as_mut().unwrap().thaw().unwrap();
    let left_d = (0..200).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        root.read_task_stat(pid, tid)
            .map_or(true, |s| s.state != 'D')
    });
    assert!(left_d, "blocker still in D after thaw");
}
