use std::time::Duration;

use regex::Regex;

use super::table::{REFRESH_EVERY, YOUNG_SCANS};
use super::*;
use capture::testing::FakeProc;
use std::path::Path;

/// `/proc/<pid>` with stat (comm, start), cgroup and fd links, in the shared fake tree builder.
fn fake_process(root: &Path, pid: i32, comm: &str, start: u64, cgroup: &str, fds: &[&str]) {
    FakeProc::at(root)
        .process(pid)
        .comm(comm)
        .start(start)
        .cgroup(cgroup)
        .fds(fds);
}

fn pids(targets: &[Target]) -> Vec<i32> {
    targets.iter().map(|t| t.pid).collect()
}

#[test]
fn nvidia_device_names() {
    for yes in [
        "/dev/nvidia0",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/nvidia1",
    ] {
        assert!(is_nvidia_device(yes), "{yes}");
    }
    assert!(is_nvidia_device("/dev/nvidia-caps/nvidia-cap1"));
    for no in [
        "/tmp/nvidia0",
        "/dev/null",
        "/home/x/nvidia/log",
        "socket:[1]",
        "",
    ] {
        assert!(!is_nvidia_device(no), "{no}");
    }
}

#[test]
fn selects_by_comm_cgroup_and_gpu_in_a_fake_tree() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fake_process(root, 10, "python3", 100, "/user.slice", &["/dev/null"]);
    fake_process(
        root,
        11,
        "bash",
        101,
        "/machine.slice/libpod-abc.scope",
        &[],
    );
    fake_process(
        root,
        12,
        "worker",
        102,
        "/",
        &["/dev/nvidiactl", "/dev/nvidia0"],
    );
    fake_process(root, 13, "sshd", 103, "/system.slice", &["socket:[5]"]);
    let proc_root = ProcRoot::new(root);
    let selection = Selection {
        comm: vec![Regex::new("^pyth").unwrap()],
        cgroup: vec!["libpod-abc".into()],
        gpu: true,
        ring_dirs: Vec::new(),
    };
    let mut source = HostSource::new(selection, SourceSettings::default());
    let targets = source.targets(&proc_root);
    assert_eq!(pids(&targets), vec![10, 11, 12], "{targets:?}");
    assert!(targets[0].why.contains("python3"), "{targets:?}");
    assert!(targets[1].why.contains("libpod-abc"), "{targets:?}");
    assert!(targets[2].why.contains("/dev/nvidiactl"), "{targets:?}");

    // An exited process leaves the targets and the cache; a new one joins.
    std::fs::remove_dir_all(root.join("10")).unwrap();
    fake_process(root, 14, "python3.11", 104, "/", &[]);
    let targets = source.targets(&proc_root);
    assert_eq!(pids(&targets), vec![11, 12, 14], "{targets:?}");
    assert_eq!(source.cache_sizes().0, 4);

    // Suppressed and excluded pids are left out.
    source.set_suppressed([11].into_iter().collect());
    source.exclude(&[12].into_iter().collect());
    assert_eq!(pids(&source.targets(&proc_root)), vec![14]);

    // A reload to another selection applies at the next scan.
    source.reconfigure(
        Selection {
            comm: vec![Regex::new("ssh").unwrap()],
            ..Selection::default()
        },
        SourceSettings::default(),
    );
    source.set_suppressed(HashSet::new());
    assert_eq!(pids(&source.targets(&proc_root)), vec![13]);
}

#[test]
fn a_reused_pid_is_a_new_process() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    fake_process(root, 20, "python", 100, "/", &[]);
    let proc_root = ProcRoot::new(root);
    let mut source = HostSource::new(
        Selection {
            comm: vec![Regex::new("^bash$").unwrap()],
            ..Selection::default()
        },
        SourceSettings::default(),
    );
    assert!(source.targets(&proc_root).is_empty());
    std::fs::remove_dir_all(root.join("20")).unwrap();
    fake_process(root, 20, "bash", 200, "/", &[]);
    // Within REFRESH_EVERY scans the new process is read afresh.
    let found = (0..REFRESH_EVERY).any(|_| !source.targets(&proc_root).is_empty());
    assert!(found);
}

#[test]
fn an_exec_right_after_the_fork_is_seen_at_the_next_scan() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let proc_root = ProcRoot::new(root);
    let mut source = HostSource::new(
        Selection {
            comm: vec![Regex::new("^worker$").unwrap()],
            ..Selection::default()
        },
        SourceSettings::default(),
    );
    // Every pid residue modulo REFRESH_EVERY: none may wait for its periodic refresh.
    for pid in 40..40 + REFRESH_EVERY as i32 {
        // Listed between fork and exec: still the parent's comm.
        fake_process(root, pid, "launcher", 500, "/", &[]);
    }
    assert!(source.targets(&proc_root).is_empty());
    for pid in 40..40 + REFRESH_EVERY as i32 {
        fake_process(root, pid, "worker", 500, "/", &[]);
    }
    assert_eq!(
        source.targets(&proc_root).len(),
        REFRESH_EVERY as usize,
        "the exec's comm must be seen at the next scan"
    );
}

/// A process of our own that renames itself (`prctl(PR_SET_NAME)`, no exec) when told to through a
/// pipe, then sleeps until killed.
struct Renamer {
    pid: i32,
    go: std::os::fd::OwnedFd,
}

impl Renamer {
    fn start(name: &std::ffi::CStr) -> Renamer {
        let (read, write) = nix::unistd::pipe().unwrap();
        // SAFETY: fork(2) in a threaded process: the child below makes raw system calls only.
        match unsafe { libc::fork() } {
            // SAFETY: async-signal-safe calls only (read, prctl, pause) on memory that exists in
            // the child after fork (the pipe fd, the name, a stack byte).
            0 => unsafe {
                use std::os::fd::AsRawFd;
                let mut byte = 0u8;
                libc::read(read.as_raw_fd(), std::ptr::addr_of_mut!(byte).cast(), 1);
                libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0);
                loop {
                    libc::pause();
                }
            },
            pid if pid > 0 => Renamer { pid, go: write },
            _ => panic!("fork failed"),
        }
    }

    fn rename_now(&self) {
        nix::unistd::write(&self.go, b"x").unwrap();
    }
}

impl Drop for Renamer {
    fn drop(&mut self) {
        // SAFETY: kill(2) and waitpid(2) on our own child.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

fn live_source(comm: &str) -> HostSource {
    HostSource::new(
        Selection {
            comm: vec![Regex::new(&format!("^{comm}$")).unwrap()],
            ..Selection::default()
        },
        SourceSettings::default(),
    )
}

fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// With the proc connector (root), a process that execs or renames itself after the subscription
/// is found at the next scan, from the events alone: no listing of the proc root.
#[test]
fn exec_and_rename_are_found_from_events_without_a_listing() {
    let root = ProcRoot::default();
    let comm = format!("wcq{}", std::process::id() % 100_000);
    let mut source = live_source(&comm);
    source.targets(&root); // subscribes, then the first listing
    if source.events.socket.is_none() {
        assert!(
            !nix::unistd::Uid::effective().is_root() && !breadcrumb::in_ci(),
            "the proc connector must work as root: {:?}",
            source.take_notes()
        );
        eprintln!("skipping: {:?}", source.take_notes());
        return;
    }
    // Past the young-process window of everything listed, and not at a safety-net scan.
    for _ in 0..(YOUNG_SCANS as u64 + 1) {
        source.targets(&root);
    }
    let (_, walks) = source.discovery_counts();

    let renamer = Renamer::start(&std::ffi::CString::new(comm.clone()).unwrap());
    // Old enough that the young-process re-reads no longer look at it.
    for _ in 0..(YOUNG_SCANS as u64 + 1) {
        assert!(source.targets(&root).iter().all(|t| t.pid != renamer.pid));
    }
    renamer.rename_now();
    assert!(wait_until(Duration::from_secs(5), || {
        std::fs::read_to_string(format!("/proc/{}/comm", renamer.pid))
            .is_ok_and(|c| c.trim() == comm)
    }));
    let found = pids(&source.targets(&root));
    assert!(found.contains(&renamer.pid), "renamed: {found:?}");

    let (_dir, mut exec) = sleep_named(&comm);
    let exec_pid = exec.id() as i32;
    let found = pids(&source.targets(&root));
    assert!(found.contains(&exec_pid), "exec'd: {found:?}");
    assert_eq!(
        source.discovery_counts().1,
        walks,
        "found from events, without listing the proc root"
    );

    // Exit: gone from the targets at the next scan, still without a listing.
    exec.kill().unwrap();
    exec.wait().unwrap();
    let found = pids(&source.targets(&root));
    assert!(!found.contains(&exec_pid), "reaped: {found:?}");
    assert_eq!(source.discovery_counts().1, walks);
    drop(renamer);
}

/// `sleep 30` exec'd under the name `comm` (a symlink in a temporary directory, kept alive by the
/// returned guard), once its comm reads `comm`.
fn sleep_named(comm: &str) -> (tempfile::TempDir, std::process::Child) {
    let dir = tempfile::tempdir().unwrap();
    let program = dir.path().join(comm);
    std::os::unix::fs::symlink("/bin/sleep", &program).unwrap();
    let child = std::process::Command::new(&program)
        .arg("30")
        .spawn()
        .unwrap();
    let pid = child.id();
    assert!(wait_until(Duration::from_secs(5), || {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
    }));
    (dir, child)
}

/// Lost events (an overrun) or a lost socket: the proc root is listed again, and what appeared in
/// between is found.
#[test]
fn losing_the_events_falls_back_to_listing() {
    let root = ProcRoot::default();
    let comm = format!("wcl{}", std::process::id() % 100_000);
    let mut source = live_source(&comm);
    source.targets(&root);
    if source.events.socket.is_none() {
        assert!(
            !nix::unistd::Uid::effective().is_root() && !breadcrumb::in_ci(),
            "the proc connector must work as root"
        );
        return;
    }
    source.targets(&root);
    let (_, walks) = source.discovery_counts();
    // An overrun: the next scan lists.
    source.events.walk_due = true;
    source.targets(&root);
    assert_eq!(source.discovery_counts().1, walks + 1);
    source.targets(&root);
    assert_eq!(source.discovery_counts().1, walks + 1, "then events again");

    // The socket gone: every scan lists, and a process that execs is found.
    source.events.socket = None;
    let (_dir, mut child) = sleep_named(&comm);
    let pid = child.id() as i32;
    let found = pids(&source.targets(&root));
    assert!(found.contains(&pid), "{found:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!pids(&source.targets(&root)).contains(&pid));
}

#[test]
fn max_targets_bounds_the_list() {
    let dir = tempfile::tempdir().unwrap();
    for pid in 30..40 {
        fake_process(dir.path(), pid, "many", pid as u64, "/", &[]);
    }
    let mut source = HostSource::new(
        Selection {
            comm: vec![Regex::new("many").unwrap()],
            ..Selection::default()
        },
        SourceSettings {
            max_targets: 3,
            ..SourceSettings::default()
        },
    );
    let targets = source.targets(&ProcRoot::new(dir.path()));
    assert_eq!(pids(&targets), vec![30, 31, 32]);
    assert!(source
        .take_notes()
        .iter()
        .any(|n| n.contains("10 processes match")));
}
