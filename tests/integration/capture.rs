//! Integration tests: `wedge-capture capture` and `decode-ioctl`, through the built binary.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use capture::frozen_fs::{self, FrozenFs};
use capture::testing::FakeProc;
use capture::ProcRoot;

fn wedge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wedge-capture"))
        .args(args)
        .output()
        .expect("run wedge-capture")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{o:?}");
    serde_json::from_slice(&o.stdout).expect("valid JSON")
}

#[test]
fn decode_ioctl_names_rm_uvm_and_linux_requests() {
    let o = wedge(&["decode-ioctl", "0xc020462a", "--device", "/dev/nvidiactl"]);
    assert!(o.status.success(), "{o:?}");
    let out = stdout(&o);
    assert!(out.contains("NV_ESC_RM_CONTROL"), "{out}");
    assert!(out.contains("nr 0x2a"), "{out}");

    let v = json(&wedge(&[
        "decode-ioctl",
        "0x30000001",
        "--device",
        "/dev/nvidia-uvm",
        "--format",
        "json",
    ]));
    assert_eq!(v["name"], "UVM_INITIALIZE");
    assert_eq!(v["dir"], "raw");

    let v = json(&wedge(&["decode-ioctl", "0x40086602", "--format", "json"]));
    assert_eq!(v["name"], "FS_IOC_SETFLAGS");
    assert_eq!(v["type"], 0x66);
    assert_eq!(v["size"], 8);

    let v = json(&wedge(&["decode-ioctl", "0x12345678", "--format", "json"]));
    assert!(v["name"].is_null());
    assert_eq!(v["nr"], 0x78);

    let o = wedge(&["decode-ioctl", "nonsense"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
}

#[test]
fn capture_of_a_missing_process_exits_4() {
    // Pids above pid_max (4194304 at most) never exist.
    let o = wedge(&["capture", "--pid", "2147483600"]);
    assert_eq!(o.status.code(), Some(4), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("no such process"));
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_str().unwrap();
    let o = wedge(&["capture", "--pid", "12", "--proc-root", root]);
    assert_eq!(o.status.code(), Some(4), "{o:?}");
}

#[test]
fn capture_of_a_live_process_all_threads() {
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = child.id().to_string();
    // Let it reach clock_nanosleep.
    let root = ProcRoot::default();
    frozen_fs::wait_for_state(
        &root,
        child.id() as i32,
        child.id() as i32,
        'S',
        Duration::from_secs(5),
    )
    .unwrap();
    // State S is set before schedule() dequeues the task; until then (long on a loaded machine) the kernel
    // answers wchan "0" (`get_wchan` wants the task off the run queue). The capture reports that honestly;
    // this test wants the settled sleep.
    let settled = Instant::now();
    while std::fs::read_to_string(format!("/proc/{pid}/wchan")).is_ok_and(|w| w.trim() == "0")
        && settled.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    let v = json(&wedge(&[
        "capture",
        "--pid",
        &pid,
        "--all-threads",
        "--format",
        "json",
    ]));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(v["pid"].as_i64(), Some(i64::from(child.id() as i32)));
    let t = &v["threads"][0];
    assert_eq!(t["comm"], "sleep");
    assert_eq!(t["state"], "S");
    assert_eq!(t["syscall"]["name"], "clock_nanosleep");
    assert_eq!(t["syscall"]["args"].as_array().unwrap().len(), 6);
    assert!(t["wchan"].is_string());
}

fn fake_gb10_tree(dir: &Path) {
    let tree = FakeProc::at(dir);
    tree.process(4100)
        .comm("python3")
        .start(99)
        .fd(5, "/dev/nvidiactl");
    tree.task(4100, 4107)
        .comm("pt_main")
        .state('D')
        .start(99)
        .cpu_ticks(5, 6)
        .processor(2)
        .ctxt_switches(7, 1)
        .wchan("os_acquire_rwlock_write")
        .syscall("29 0x5 0xc020462a 0xffffd1e0c0a8 0x0 0x0 0x0 0xffffd1e0c050 0xffff8a3e1c2c\n")
        .stack("[<0>] os_acquire_rwlock_write+0x38/0x60 [nvidia]\n[<0>] rm_ioctl+0x64/0xb0 [nvidia]\n[<0>] nvidia_ioctl+0x5e4/0x8c0 [nvidia]\n[<0>] __arm64_sys_ioctl+0xb4/0x100\n");
}

#[test]
fn capture_from_a_recorded_aarch64_tree_in_markdown_and_json() {
    let dir = tempfile::tempdir().unwrap();
    fake_gb10_tree(dir.path());
    let root = dir.path().to_str().unwrap();
    let base = [
        "capture",
        "--pid",
        "4100",
        "--proc-root",
        root,
        "--arch",
        "aarch64",
    ];

    let o = wedge(&[&base[..], &["--format", "markdown"]].concat());
    assert!(o.status.success(), "{o:?}");
    let md = stdout(&o);
    assert!(
        md.starts_with("# Process 4100 — 1 of 2 threads in D"),
        "{md}"
    );
    assert!(
        md.contains("- **tid 4107 `pt_main` — D · `ioctl → nvidia: nvidia_ioctl → rm_ioctl"),
        "{md}"
    );
    assert!(md.contains("NV_ESC_RM_CONTROL"), "{md}");
    assert!(md.contains("| 4100 | `python3` | S |"), "{md}");
    assert!(
        md.contains("```\nos_acquire_rwlock_write+0x38/0x60 [nvidia]\n"),
        "{md}"
    );

    let v = json(&wedge(&[&base[..], &["--format", "json"]].concat()));
    assert_eq!(v["arch"], "aarch64");
    let t = &v["threads"][1];
    assert_eq!(t["tid"], 4107);
    assert_eq!(t["syscall"]["nr"], 29);
    assert_eq!(t["syscall"]["name"], "ioctl");
    assert_eq!(t["ioctl"]["fd"], 5);
    assert_eq!(t["ioctl"]["fd_target"], "/dev/nvidiactl");
    assert_eq!(t["ioctl"]["request"], "0xc020462a");
    assert_eq!(t["ioctl"]["name"], "NV_ESC_RM_CONTROL");
    assert_eq!(t["ioctl"]["driver"], "nvidia-rm");
    assert_eq!(t["stack"][0]["module"], "nvidia");
    assert!(t["site"].as_str().unwrap().starts_with("ioctl → nvidia:"));

    let o = wedge(&[&base[..], &["--format", "text", "--tid", "4107"]].concat());
    assert!(o.status.success(), "{o:?}");
    assert!(stdout(&o).contains("NV_ESC_RM_CONTROL"));
    let o = wedge(&[&base[..], &["--tid", "4999"]].concat());
    assert_eq!(o.status.code(), Some(4), "{o:?}");
}

/// A real wedge: a shell appending to a file on a frozen ext4 sits in D; the binary shows it.
#[test]
fn capture_of_a_real_wedged_process() {
    let Some(mut fs) = FrozenFs::for_test("capture_of_a_real_wedged_process") else {
        return;
    };
    let file = fs.create_file("log", b"").unwrap();
    fs.freeze().unwrap();
    let child = Command::new("sh")
        .args(["-c", "echo wedged >> \"$0\"", file.to_str().unwrap()])
        .spawn()
        .unwrap();
    struct Cleanup(Option<FrozenFs>, std::process::Child);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            if let Some(fs) = self.0.as_mut() {
                let _ = fs.thaw();
            }
            let _ = self.1.kill();
            let _ = self.1.wait();
        }
    }
    let pid = child.id() as i32;
    let _cleanup = Cleanup(Some(fs), child);
    frozen_fs::wait_for_state(&ProcRoot::default(), pid, pid, 'D', Duration::from_secs(10))
        .unwrap();

    let o = wedge(&["capture", "--pid", &pid.to_string()]);
    assert!(o.status.success(), "{o:?}");
    let md = stdout(&o);
    assert!(
        md.starts_with(&format!("# Process {pid} — 1 of 1 threads in D")),
        "{md}"
    );
    assert!(md.contains("filesystem freeze (percpu_rwsem_wait)"), "{md}");
    assert!(md.contains("percpu_rwsem_wait+0x"), "{md}");

    let v = json(&wedge(&[
        "capture",
        "--pid",
        &pid.to_string(),
        "--format",
        "json",
    ]));
    let t = &v["threads"][0];
    assert_eq!(t["state"], "D");
    assert_eq!(t["wchan"], "percpu_rwsem_wait");
    assert!(t["stack"].as_array().unwrap().len() > 2);
}
