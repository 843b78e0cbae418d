//! Integration tests of issue 14: an incident tells the whole episode (evidence as of detection, each thread's
//! fate, the watcher's exit), on real D-state threads of a frozen loop-mounted ext4.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::harness::{start, wait_limited, Started, Wedge};
use crate::util::incident_dirs;

/// A Python worker: a thread named `wedge-worker` makes one call on the file (`ioctl`: FS_IOC_GETFLAGS then
/// FS_IOC_SETFLAGS; `write`: one byte), which blocks while the filesystem is frozen; once it returns the
/// thread (and so the process) lingers for the given seconds before it exits.
const PY_WORKER: &str = r#"
import fcntl, os, struct, sys, threading, time
path, call, linger = sys.argv[1], sys.argv[2], float(sys.argv[3])
fd = os.open(path, os.O_RDWR)
def work():
    if call == "ioctl":
        flags = bytearray(struct.pack("l", 0))
        fcntl.ioctl(fd, 0x80086601, flags)
        fcntl.ioctl(fd, 0x40086602, flags)
    else:
        os.write(fd, b"y")
    time.sleep(linger)
t = threading.Thread(target=work, name="wedge-worker")
t.start()
t.join()
"#;

/// The Python interpreter itself (not a pyenv shim script), or None when there is none.
pub(crate) fn python() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    path.is_file().then_some(path)
}

/// `run` watching the Python worker on `file`.
pub(crate) fn run_python(
    out: &Path,
    file: &Path,
    call: &str,
    linger_s: &str,
    threshold_s: &str,
) -> Option<Started> {
    let Some(python) = python() else {
        assert!(!crate::util::in_ci(), "python3 is needed with CI=true");
        eprintln!("skipped: no python3");
        return None;
    };
    let mut command = Command::new(crate::util::bin());
    command
        .args(["run", "--no-nvidia-smi", "--interval", "0.25"])
        .args(["--threshold", threshold_s])
        .arg("--out")
        .arg(out)
        .arg("--")
        .arg(python)
        .args(["-c", PY_WORKER])
        .arg(file)
        .args([call, linger_s]);
    Some(start(&mut command))
}

pub(crate) fn load(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("incident.json")).unwrap()).unwrap()
}

/// The one incident under `out` once it is complete (at most 20 s).
pub(crate) fn wait_complete(out: &Path) -> PathBuf {
    let until = Instant::now() + crate::util::scaled(Duration::from_secs(20));
    loop {
        if let Some(dir) = incident_dirs(out).into_iter().next() {
            if load(&dir)["complete"] == true {
                return dir;
            }
        }
        assert!(Instant::now() < until, "no complete incident under {out:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The mmap-lock wedge: thread `fault` writes into a shared mapping of a file on the frozen filesystem (a write
/// fault that sleeps in the filesystem's freeze while it holds its VMA), `mprotect` then changes that mapping
/// (waits for the fault, holding the mmap lock), `mmap` then maps anonymous memory (waits for the mmap lock).
/// ctypes calls release the GIL, so the three block at once.
pub(crate) const PY_MMAP_LOCK: &str = r#"
import ctypes, mmap, os, sys, threading, time
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 16384, mmap.MAP_SHARED)
addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
def fault():
    ctypes.memset(addr, 1, 1)
def protect():
    time.sleep(0.3)
    libc.mprotect(ctypes.c_void_p(addr), 16384, 1)
def mapper():
    time.sleep(0.6)
    mmap.mmap(-1, 4096)
threads = [threading.Thread(target=f) for f in (fault, protect, mapper)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"#;

#[test]
fn the_mmap_lock_wedge_names_who_blocks_whom_and_a_freeze_site() {
    let Some(mut fs) = crate::util::frozen_fs_or_skip("the_mmap_lock_wedge") else {
        return;
    };
    let file = fs.create_file("mapped", &[0u8; 16384]).unwrap();
    fs.freeze().unwrap();
    let scratch = crate::harness::temp_dir("episode-mmap-lock");
    let out = scratch.join("incidents");
    let Some(python) = python() else {
        assert!(!crate::util::in_ci(), "python3 is needed with CI=true");
        return;
    };
    let run = start(
        Command::new(crate::util::bin())
            .args([
                "run",
                "--no-nvidia-smi",
                "--threshold",
                "1",
                "--interval",
                "0.25",
            ])
            .arg("--out")
            .arg(&out)
            .arg("--")
            .arg(python)
            .args(["-c", PY_MMAP_LOCK])
            .arg(&file),
    );
    let dir = wait_complete(&out);
    // Let the two waiters be judged wedged too (they entered D 0.3 and 0.6 s after the fault).
    let until = Instant::now() + crate::util::scaled(Duration::from_secs(5));
    while load(&dir)["wedged_threads"].as_array().unwrap().len() < 3 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    fs.thaw().unwrap();
    let done = wait_limited(run, Duration::from_secs(20));
    // The probe children (maps, cmdline, py-spy) sleep in D behind the mmap lock too, while the watch loop
    // scans: they are ours, never targets of `run` (the subreaper whose children they are).
    let incidents = crate::util::incident_dirs(&out);
    assert_eq!(incidents.len(), 1, "{incidents:?}\nstderr: {}", done.stderr);
    assert_eq!(done.code, Some(0), "stderr: {}", done.stderr);
    let incident = load(&dir);
    let judged = incident["wedged_threads"].as_array().unwrap();
    assert_eq!(judged.len(), 3, "{judged:?}");
    let evidence: Vec<&serde_json::Value> = judged.iter().map(|w| &w["at_detection"]).collect();
    let fault = evidence
        .iter()
        .find(|t| t["waits_for"].is_null())
        .expect("the faulting thread");
    assert_eq!(
        fault["site"], "page fault → filesystem freeze (percpu_rwsem_wait)",
        "{fault}"
    );
    let fault_tid = fault["tid"].as_i64().unwrap();
    let waiters: Vec<&&serde_json::Value> = evidence
        .iter()
        .filter(|t| t["waits_for"] == "mmap_lock")
        .collect();
    assert_eq!(waiters.len(), 2, "{evidence:?}");
    for w in &waiters {
        assert_eq!(w["blocked_behind"], serde_json::json!([fault_tid]), "{w}");
    }
    let verdict = incident["verdict"].as_str().unwrap();
    assert!(
        verdict.starts_with(&format!("thread {fault_tid} "))
            && verdict.contains(" in page fault → filesystem freeze (percpu_rwsem_wait)")
            && verdict.contains(&format!(
                "2 threads wait behind tid {fault_tid} (page fault on a frozen filesystem)"
            )),
        "{verdict}"
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    // The wait graph (issue 36) tells it exactly: mmap waits for the mmap_lock held for writing by mprotect,
    // which waits for the VMA lock the fault holds (by its stack).
    let protect_tid = waiters
        .iter()
        .find(|w| w["syscall"]["name"] == "mprotect")
        .expect("the mprotect waiter")["tid"]
        .as_i64()
        .unwrap();
    assert!(
        md.contains(&format!(
            "held for writing by tid {protect_tid} (the kernel's owner field (writer))"
        )) && md.contains(&format!("held for reading by tid {fault_tid} (its stack)")),
        "{md}"
    );
    // Listing the mappings waits for the address-space writer (mprotect, holding the mmap lock) stuck behind the
    // fault: the maps probe times out in its child and every frame says so; the capture completed regardless.
    let maps = incident["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str().unwrap().starts_with("maps ("))
        .expect("a maps probe");
    assert_eq!(maps["outcome"], "timeout", "{maps}");
    for w in judged {
        assert!(w["user_frame"].is_null(), "{w}");
        assert!(
            w["user_frame_not_captured"]
                .as_str()
                .is_some_and(|why| why.contains("timed out")),
            "{w}"
        );
    }
    assert!(md.contains("| user frame | not captured: reading "), "{md}");
    let _ = std::fs::remove_dir_all(&scratch);
}

#[test]
fn a_wedge_that_resolves_while_the_process_lingers_keeps_its_evidence_and_says_resolved() {
    let test = "a_wedge_that_resolves_while_the_process_lingers";
    let Some(mut wedge) = Wedge::new(test, "episode-resolves") else {
        return;
    };
    // The process lives on 3 s after its wedged thread returned: samples then show no thread in D.
    let Some(run) = run_python(&wedge.out, &wedge.file, "ioctl", "3", "1") else {
        return;
    };
    let dir = wait_complete(&wedge.out);
    wedge.fs.thaw().unwrap();
    let done = wait_limited(run, Duration::from_secs(20));
    assert_eq!(done.code, Some(0), "stderr: {}", done.stderr);
    let incident = load(&dir);
    let verdict = incident["verdict"].as_str().unwrap();
    assert!(
        verdict.contains("was in D for")
            && verdict.contains("in ioctl `FS_IOC_SETFLAGS`")
            && verdict.ends_with("; resolved"),
        "{verdict}"
    );
    assert_eq!(incident["episode"]["status"], "resolved");
    let judged = &incident["wedged_threads"][0];
    assert_eq!(judged["fate"], "resolved", "{judged}");
    assert_eq!(judged["at_detection"]["state"], "D");
    assert!(judged["in_d_s"].as_f64().unwrap() >= 1.0);
    // Later samples were taken while the process lingered, with no thread in D.
    let samples = incident["samples"].as_array().unwrap();
    let last = &samples[samples.len() - 1]["snapshot"]["threads"];
    assert!(
        last.as_array().unwrap().iter().all(|t| t["state"] != "D"),
        "{last}"
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let first = md.lines().next().unwrap();
    assert!(first.contains("; resolved"), "{first}");
    let head = &md[..md.find("<details>").unwrap_or(md.len())];
    assert!(head.contains("evidence as of detection"), "{head}");
    assert!(head.contains("`FS_IOC_SETFLAGS`"), "{head}");
    assert!(head.contains("| site |"), "{head}");
    assert!(head.contains("| fate | left D after"), "{head}");
    assert!(md.contains("Kernel stacks at detection (1 wedged threads)"));
    assert!(head.contains("| user frame | pc 0x"), "{head}");
    assert!(head.contains("`libc.so"), "{head}");
    let stack = judged["at_detection"]["stack"][0]["function"]
        .as_str()
        .unwrap();
    assert!(
        md.contains(&format!("    {stack}+")),
        "stack top {stack} not in report.md"
    );
    assert!(!md.contains("no thread in D"));
    wedge.remove_scratch();
}

#[test]
fn run_exit_3_records_that_the_episode_was_still_wedged_when_it_exited() {
    let Some(mut wedge) = Wedge::new("run_exit_3_records_still_wedged", "episode-exit") else {
        return;
    };
    let done = wedge
        .run()
        .exit_after("0.5")
        .finish(Duration::from_secs(20));
    assert_eq!(done.code, Some(3), "stderr: {}", done.stderr);
    // The wedge clears after run has gone: the incident must still say what was known when it exited.
    wedge.fs.thaw().unwrap();
    let dirs = incident_dirs(&wedge.out);
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let incident = load(&dirs[0]);
    assert_eq!(incident["episode"]["status"], "still_wedged_at_exit");
    assert!(incident["episode"]["watcher_exited_at"]["wall"].is_string());
    assert_eq!(
        incident["wedged_threads"][0]["fate"],
        "still_wedged_at_exit"
    );
    let verdict = incident["verdict"].as_str().unwrap();
    assert!(
        verdict.contains("; still wedged when wedge-capture exited at 20"),
        "{verdict}"
    );
    let md = std::fs::read_to_string(dirs[0].join("report.md")).unwrap();
    assert!(md.contains("still wedged when wedge-capture exited at"));
    assert!(!md.contains("episode still open"));
    wedge.remove_scratch();
}

#[test]
fn a_thread_blocked_in_write_names_its_file() {
    let Some(mut wedge) = Wedge::new("a_thread_blocked_in_write_names_its_file", "episode-write")
    else {
        return;
    };
    let Some(run) = run_python(&wedge.out, &wedge.file, "write", "0", "1") else {
        return;
    };
    let dir = wait_complete(&wedge.out);
    wedge.fs.thaw().unwrap();
    let done = wait_limited(run, Duration::from_secs(20));
    assert_eq!(done.code, Some(0), "stderr: {}", done.stderr);
    let incident = load(&dir);
    let path = wedge.file.to_str().unwrap();
    let thread = &incident["wedged_threads"][0]["at_detection"];
    assert_eq!(thread["syscall"]["name"], "write", "{thread}");
    assert_eq!(
        thread["syscall_files"],
        serde_json::json!([{"arg": 0, "fd": thread["syscall_files"][0]["fd"], "target": path}]),
        "{thread}"
    );
    let verdict = incident["verdict"].as_str().unwrap();
    assert!(
        verdict.contains(&format!("in syscall `write` on `{path}`")),
        "{verdict}"
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains(&format!("→ `{path}`")), "{md}");
    wedge.remove_scratch();
}

fn write_kmsg(line: &str) {
    std::fs::write("/dev/kmsg", format!("<4>{line}\n")).expect("writing /dev/kmsg (needs root)");
}

#[test]
fn kernel_log_lines_are_marked_with_whom_they_concern() {
    let Some(mut wedge) = Wedge::new("kernel_log_lines_are_marked", "episode-kmsg") else {
        return;
    };
    let tag = format!("wcit{}", std::process::id());
    // A hung-task line about another process (the same comm as the target, another pid), before the wedge.
    let other = format!("INFO: task python3:4194301 blocked for more than 120 seconds. {tag}");
    write_kmsg(&other);
    let Some(run) = run_python(&wedge.out, &wedge.file, "ioctl", "1", "1") else {
        return;
    };
    let dir = wait_complete(&wedge.out);
    let pid = load(&dir)["process"]["pid"].as_i64().unwrap();
    // A line naming the target, after the capture: the window runs until the last update (the resolution).
    let ours = format!("INFO: task python3:{pid} blocked for more than 120 seconds. {tag}");
    write_kmsg(&ours);
    std::thread::sleep(Duration::from_millis(300));
    wedge.fs.thaw().unwrap();
    let done = wait_limited(run, Duration::from_secs(20));
    assert_eq!(done.code, Some(0), "stderr: {}", done.stderr);
    let incident = load(&dir);
    let lines = incident["kernel_log"].as_array().unwrap();
    let relevance_of = |text: &str| {
        lines
            .iter()
            .find(|l| l["text"] == text)
            .map(|l| l["relevance"].clone())
            .unwrap_or_else(|| panic!("{text:?} not in the kernel log window"))
    };
    assert_eq!(relevance_of(&other), "other_process");
    assert_eq!(relevance_of(&ours), "target");
    let window = std::fs::read_to_string(dir.join("kernel-log.txt")).unwrap();
    assert!(
        window.contains(&format!("other_process {other}")),
        "{window}"
    );
    assert!(
        window.contains(&format!("target        {ours}")),
        "{window}"
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let head = &md[..md.find("<details>").unwrap_or(md.len())];
    let ours_at = head
        .find("### Kernel log: the wedged process")
        .expect("no target section");
    let others_at = head
        .find("### Kernel log: other processes")
        .expect("no other-process section");
    assert!(head[ours_at..others_at].contains(&ours), "{head}");
    assert!(head[others_at..].contains(&other), "{head}");
    wedge.remove_scratch();
}

#[test]
fn history_holds_the_samples_before_detection() {
    let Some(mut wedge) = Wedge::new(
        "history_holds_the_samples_before_detection",
        "episode-history",
    ) else {
        return;
    };
    // 250 ms scans over a 3 s threshold.
    let Some(run) = run_python(&wedge.out, &wedge.file, "ioctl", "0", "3") else {
        return;
    };
    let dir = wait_complete(&wedge.out);
    wedge.fs.thaw().unwrap();
    let done = wait_limited(run, Duration::from_secs(20));
    assert_eq!(done.code, Some(0), "stderr: {}", done.stderr);
    let incident = load(&dir);
    let tid = incident["wedged_threads"][0]["tid"].clone();
    let detected = incident["wedged_threads"][0]["detected_at"]["monotonic_ns"]
        .as_u64()
        .unwrap();
    let history = incident["history"].as_array().unwrap();
    eprintln!("history: {} samples before detection", history.len());
    assert!(history.len() >= 8, "{} samples", history.len());
    for sample in history {
        assert!(sample["taken_at"]["monotonic_ns"].as_u64().unwrap() <= detected);
    }
    let states: String = history
        .iter()
        .filter_map(|s| {
            s["threads"]
                .as_array()?
                .iter()
                .find(|t| t["tid"] == tid)
                .and_then(|t| t["state"].as_str())
                .map(str::to_string)
        })
        .collect();
    assert!(states.ends_with("DDDDDDDD"), "{states}");
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains("History before detection ("),
        "no history section"
    );
    assert!(md.contains(&format!("tid {tid} (judged wedged): ")));
    wedge.remove_scratch();
}
