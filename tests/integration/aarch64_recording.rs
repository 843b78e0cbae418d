//! Real arm64 `/proc` wedges, recorded on Debian's arm64 kernel under qemu-system-aarch64 by
//! tests/aarch64/init.sh (see tests/aarch64/recordings/README.md), replayed on any machine through
//! `capture --proc-root --arch aarch64` and `explain`:
//! - `frozen-ext4-append`: a shell's `>>` on a file of a frozen ext4: D in `openat` (`mnt_want_write` →
//!   `percpu_rwsem_wait`), with the kernel's own `sysrq w` dump of it (arm64's `Call trace:`, `__switch_to`);
//! - `vfork-fifo`: a `posix_spawn` parent (Python, glibc 2.36) in D in `clone` while its vfork child waits to
//!   open a FIFO nobody writes.
//!
//! What they pin: arm64's syscall numbers (openat is 56, clone 220: x86_64's 257 and 56), the arm64 entry
//! frames (`__arm64_sys_…`, `invoke_syscall`, `el0_svc`, `el0t_64_sync`) kept out of the site, and the
//! site named from the frames above them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::bin;

const RECORDINGS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/aarch64/recordings");

/// The recording `name` as a proc tree in a temp dir (its fd links made from `fd.txt`, which git keeps as
/// text), and the recorded process's pid.
fn proc_tree(name: &str) -> (tempfile::TempDir, i32) {
    let from = Path::new(RECORDINGS).join(name);
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&from.join("proc"), dir.path());
    let pids: Vec<i32> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.parse().ok())
        .collect();
    assert_eq!(pids.len(), 1, "one process in {}", from.display());
    let pid = pids[0];
    if let Ok(links) = std::fs::read_to_string(from.join("fd.txt")) {
        let fd_dir = dir.path().join(pid.to_string()).join("fd");
        std::fs::create_dir_all(&fd_dir).unwrap();
        for line in links.lines() {
            let (fd, target) = line.split_once(' ').unwrap();
            std::os::unix::fs::symlink(target, fd_dir.join(fd)).unwrap();
        }
    }
    (dir, pid)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn wedge(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .output()
        .expect("run wedge-capture")
}

fn capture_json(root: &Path, pid: i32) -> serde_json::Value {
    let pid = pid.to_string();
    let root = root.to_str().unwrap();
    let o = wedge(&[
        "capture",
        "--pid",
        &pid,
        "--proc-root",
        root,
        "--arch",
        "aarch64",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{o:?}");
    serde_json::from_slice(&o.stdout).expect("valid JSON")
}

fn explain_json(input: &Path) -> serde_json::Value {
    let o = wedge(&["explain", input.to_str().unwrap(), "--format", "json"]);
    assert!(o.status.success(), "{o:?}");
    serde_json::from_slice(&o.stdout).expect("valid JSON")
}

fn frames(thread: &serde_json::Value) -> Vec<String> {
    thread["stack"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn stack_file(dir: &Path, pid: i32) -> PathBuf {
    dir.join(format!("{pid}/task/{pid}/stack"))
}

#[test]
fn arm64_append_on_a_frozen_ext4_is_openat_56_at_the_freeze() {
    let (dir, pid) = proc_tree("frozen-ext4-append");
    let stack = std::fs::read_to_string(stack_file(dir.path(), pid)).unwrap();
    // The recording is arm64's: its entry path, not x86's.
    for frame in [
        "__arm64_sys_openat",
        "invoke_syscall",
        "el0_svc",
        "el0t_64_sync",
    ] {
        assert!(stack.contains(frame), "{frame} missing:\n{stack}");
    }

    let v = capture_json(dir.path(), pid);
    assert_eq!(v["arch"], "aarch64");
    let t = &v["threads"][0];
    assert_eq!(t["tid"], pid);
    assert_eq!(t["state"], "D");
    assert_eq!(t["syscall"]["nr"], 56, "{t}");
    assert_eq!(t["syscall"]["name"], "openat", "{t}");
    let site = t["site"].as_str().unwrap();
    assert_eq!(site, "openat → filesystem freeze (percpu_rwsem_wait)");
    assert!(frames(t).iter().any(|f| f == "percpu_rwsem_wait"), "{t}");

    let e = explain_json(&stack_file(dir.path(), pid));
    let site = e["tasks"][0]["site"].as_str().unwrap();
    assert!(site.contains("filesystem freeze"), "{e}");
}

#[test]
fn arm64_sysrq_w_dump_names_the_frozen_appender() {
    let dump = Path::new(RECORDINGS).join("frozen-ext4-append/sysrq-w.txt");
    let (dir, pid) = proc_tree("frozen-ext4-append");
    drop(dir);
    let e = explain_json(&dump);
    let tasks = e["tasks"].as_array().unwrap();
    let writer = tasks
        .iter()
        .find(|t| t["pid"] == pid)
        .unwrap_or_else(|| panic!("pid {pid} missing: {e}"));
    let site = writer["site"].as_str().unwrap();
    assert!(site.contains("filesystem freeze"), "{writer}");
}

#[test]
fn arm64_vfork_parent_waits_for_its_child() {
    let (dir, pid) = proc_tree("vfork-fifo");
    let v = capture_json(dir.path(), pid);
    let t = &v["threads"][0];
    assert_eq!(t["tid"], pid);
    assert_eq!(t["state"], "D");
    assert_eq!(t["wchan"], "kernel_clone");
    assert_eq!(t["syscall"]["nr"], 220, "{t}");
    assert_eq!(t["syscall"]["name"], "clone", "{t}");
    // The vfork wait (wait_for_vfork_done) is inlined into kernel_clone: the site names the syscall, the
    // function and what it waits for (the lock-taker row of kernel/fork.c's vfork_done), and no arm64 entry frame.
    let site = t["site"].as_str().unwrap();
    assert!(site.starts_with("clone → kernel_clone … "), "{site}");
    assert!(site.contains("completion wait"), "{site}");
    assert!(site.contains("vfork child's exec or exit"), "{site}");
    assert!(
        !site.contains("el0") && !site.contains("invoke_syscall"),
        "{site}"
    );
}
