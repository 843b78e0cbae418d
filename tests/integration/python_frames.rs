//! Integration tests of issue 29: the incident of a Python worker names the file, function and line its wedged
//! thread was in (py-spy, in a sacrificial child) and the libc function its pc is in (ELF symbols, by path),
//! on real D states of a frozen loop-mounted ext4. py-spy is installed by `.ci/run` (`pip install py-spy`):
//! with CI=true these tests fail rather than skip without it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::episode::{load, python, wait_complete, PY_MMAP_LOCK};
use crate::harness::{start, wait_limited, Started, Wedge};

/// A training-script stand-in: thread `wedge-worker` runs `step`, whose ioctl on the frozen file blocks in D.
/// The test finds the blocking call's line by its text.
const TRAIN_PY: &str = r#"import fcntl, os, struct, sys, threading, time

fd = os.open(sys.argv[1], os.O_RDWR)

def step():
    flags = bytearray(struct.pack("l", 0))
    fcntl.ioctl(fd, 0x80086601, flags)
    fcntl.ioctl(fd, 0x40086602, flags)  # the wedged call

def train():
    step()
    time.sleep(float(sys.argv[2]))

t = threading.Thread(target=train, name="wedge-worker")
t.start()
t.join()
"#;

const WEDGED_CALL: &str = "fcntl.ioctl(fd, 0x40086602, flags)  # the wedged call";

fn wedged_line() -> u64 {
    TRAIN_PY
        .lines()
        .position(|l| l.trim() == WEDGED_CALL)
        .expect("the wedged call's line") as u64
        + 1
}

/// py-spy on PATH, or None (skipped, never with CI=true).
fn py_spy() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("py-spy"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            !crate::util::in_ci(),
            "py-spy is needed with CI=true (.ci/run installs it: pip install py-spy)"
        );
        eprintln!("skipped: no py-spy (pip install py-spy)");
    }
    found
}

/// `run` watching `train.py` (written into the scratch directory) on the wedge's file, with `flags`.
fn run_train(wedge: &Wedge, flags: &[&str]) -> Option<(Started, PathBuf)> {
    let Some(python) = python() else {
        assert!(!crate::util::in_ci(), "python3 is needed with CI=true");
        return None;
    };
    let script = wedge.scratch.join("train.py");
    std::fs::write(&script, TRAIN_PY).unwrap();
    let mut command = Command::new(crate::util::bin());
    command
        .args([
            "run",
            "--no-nvidia-smi",
            "--interval",
            "0.25",
            "--threshold",
            "1",
        ])
        .args(flags)
        .arg("--out")
        .arg(&wedge.out)
        .arg("--")
        .arg(python)
        .arg(&script)
        .arg(&wedge.file)
        .arg("0");
    Some((start(&mut command), script))
}

/// A stand-in py-spy that records that it was called (in `marker`) and prints nothing useful.
/// The complete incident of a training run, once thawed and exited 0.
fn thaw_and_load(wedge: &mut Wedge, run: Started) -> (PathBuf, serde_json::Value) {
    let dir = wait_complete(&wedge.out);
    wedge.fs.thaw().unwrap();
    let done = wait_limited(run, Duration::from_secs(20));
    assert_eq!(done.code, Some(0), "stderr: {}", done.stderr);
    let incident = load(&dir);
    (dir, incident)
}

fn recording_py_spy(dir: &Path) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let marker = dir.join("py-spy-was-called");
    let program = dir.join("fake-py-spy");
    std::fs::write(
        &program,
        format!("#!/bin/sh\necho \"$@\" >> {}\nexit 1\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    (program, marker)
}

fn not_captured<'a>(incident: &'a serde_json::Value, what: &str) -> Vec<&'a str> {
    incident["not_captured"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["what"] == what)
        .map(|n| n["why"].as_str().unwrap())
        .collect()
}

#[test]
fn a_wedged_python_thread_is_named_by_file_function_and_line_and_its_libc_symbol() {
    let Some(mut wedge) = Wedge::new("python_frames_named", "python-frames") else {
        return;
    };
    if py_spy().is_none() {
        return;
    }
    let Some((run, script)) = run_train(&wedge, &[]) else {
        return;
    };
    let (dir, incident) = thaw_and_load(&mut wedge, run);
    let judged = &incident["wedged_threads"][0];
    let stack = judged["python_stack"].as_array().expect("python_stack");
    let line = wedged_line();
    assert_eq!(stack[0]["function"], "step", "{stack:?}");
    assert_eq!(stack[0]["file"], script.display().to_string());
    assert_eq!(stack[0]["line"], line);
    assert_eq!(stack[0]["code"], WEDGED_CALL, "{stack:?}");
    assert_eq!(stack[1]["function"], "train", "{stack:?}");
    // The pc is in libc's ioctl wrapper, named from its ELF symbols; the build id is recorded.
    let frame = &judged["user_frame"];
    let symbol = frame["symbol"].as_str().unwrap_or_default();
    assert!(frame["path"].as_str().unwrap().contains("libc"), "{frame}");
    assert!(symbol.contains("ioctl+0x"), "{frame}");
    assert!(
        frame["build_id"].as_str().is_some_and(|id| id.len() >= 16),
        "{frame}"
    );
    // Every Python thread of the process in the sample taken at detection, by native tid.
    let samples = incident["samples"].as_array().unwrap();
    let threads = samples
        .iter()
        .find_map(|s| s["python_threads"].as_array())
        .expect("python_threads in a sample");
    assert!(
        threads.iter().any(|t| t["name"] == "MainThread"),
        "{threads:?}"
    );
    assert!(
        threads
            .iter()
            .any(|t| t["tid"] == judged["tid"] && t["name"] == "wedge-worker"),
        "{threads:?}"
    );
    let verdict = incident["verdict"].as_str().unwrap();
    assert!(
        verdict.contains(&format!("(from `train.py:{line}` `{WEDGED_CALL}`)")),
        "{verdict}"
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        md.contains(&format!("| Python | `train.py:{line} in step ← ")),
        "{md}"
    );
    assert!(md.contains(&format!(" = `{symbol}`")), "{md}");
    assert!(md.contains("<summary>Python stacks ("), "{md}");
    assert!(
        not_captured(&incident, "python stacks").is_empty(),
        "{incident}"
    );
    // Both helpers ran as probes and finished within the deadline.
    for name in ["py-spy-", "resolve-symbols ("] {
        let probe = incident["probes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"].as_str().unwrap().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} probe: {incident}"));
        assert_eq!(probe["outcome"], "ok", "{probe}");
        eprintln!("{}: {} ms", probe["name"], probe["duration_ms"]);
    }
    wedge.remove_scratch();
}

#[test]
fn without_py_spy_one_reason_says_how_to_install_it_and_nothing_else_changes() {
    let Some(mut wedge) = Wedge::new("python_frames_no_py_spy", "python-no-py-spy") else {
        return;
    };
    let missing = wedge.scratch.join("no-such-py-spy");
    let Some((run, _)) = run_train(&wedge, &["--py-spy", missing.to_str().unwrap()]) else {
        return;
    };
    let (_, incident) = thaw_and_load(&mut wedge, run);
    let reasons = not_captured(&incident, "python stacks");
    assert_eq!(reasons.len(), 1, "{incident}");
    assert!(reasons[0].contains("pip install py-spy"), "{}", reasons[0]);
    let judged = &incident["wedged_threads"][0];
    assert!(judged["python_stack"].is_null(), "{judged}");
    // The rest of the capture is as before: the frame, its symbol, the verdict's call.
    assert!(judged["user_frame"]["symbol"].is_string(), "{judged}");
    assert_eq!(incident["complete"], true);
    let verdict = incident["verdict"].as_str().unwrap();
    assert!(
        verdict.contains("`FS_IOC_SETFLAGS`") && !verdict.contains("(from "),
        "{verdict}"
    );
    wedge.remove_scratch();
}

#[test]
fn a_process_that_is_not_python_gets_no_py_spy_call() {
    let Some(mut wedge) = Wedge::new("python_frames_not_python", "python-not-python") else {
        return;
    };
    let (program, marker) = recording_py_spy(&wedge.scratch);
    let done = wedge
        .run()
        .args(&["--py-spy", program.to_str().unwrap()])
        .exit_after("0.5")
        .finish(Duration::from_secs(30));
    wedge.fs.thaw().unwrap();
    assert_eq!(done.code, Some(3), "stderr: {}", done.stderr);
    let dirs = crate::util::incident_dirs(&wedge.out);
    let incident = load(&dirs[0]);
    assert_eq!(incident["complete"], true);
    assert!(
        !marker.exists(),
        "py-spy was called for a non-Python process"
    );
    assert!(
        not_captured(&incident, "python stacks").is_empty(),
        "{incident}"
    );
    assert!(
        !incident["probes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"].as_str().unwrap().starts_with("py-spy")),
        "{incident}"
    );
    // Its frame is still symbolized (the wedge helper's own binary, or libc).
    assert!(
        incident["wedged_threads"][0]["user_frame"]["symbol"].is_string(),
        "{}",
        incident["wedged_threads"][0]
    );
    wedge.remove_scratch();
}

/// Live py-spy processes started for `pid` (`py-spy dump --pid <pid> …`).
fn py_spy_children_of(pid: i64) -> usize {
    let wanted = format!("--pid\0{pid}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            let dir = e.path();
            std::fs::read_to_string(dir.join("comm")).is_ok_and(|c| c.trim() == "py-spy")
                && std::fs::read(dir.join("cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&wanted))
        })
        .count()
}

#[test]
fn behind_a_held_mmap_lock_the_python_step_times_out_and_the_run_still_exits_on_time() {
    let Some(mut fs) = crate::util::frozen_fs_or_skip("python_frames_mmap_lock") else {
        return;
    };
    if py_spy().is_none() {
        return;
    }
    let Some(python) = python() else {
        assert!(!crate::util::in_ci(), "python3 is needed with CI=true");
        return;
    };
    let file = fs.create_file("mapped", &[0u8; 16384]).unwrap();
    fs.freeze().unwrap();
    let scratch = crate::harness::temp_dir("python-mmap-lock");
    let out = scratch.join("incidents");
    let started = Instant::now();
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
            .args(["--exit-after", "1"])
            .arg("--out")
            .arg(&out)
            .arg("--")
            .arg(python)
            .args(["-c", PY_MMAP_LOCK])
            .arg(&file),
    );
    // Detection (~1.5 s), the capture's risky stages (each bounded by the 2 s probe deadline), --exit-after.
    let done = wait_limited(run, Duration::from_secs(30));
    let elapsed = started.elapsed();
    let dirs = crate::util::incident_dirs(&out);
    let incident = load(&dirs[0]);
    let pid = incident["process"]["pid"].as_i64().unwrap();
    let left_behind = py_spy_children_of(pid);
    fs.thaw().unwrap();
    assert_eq!(done.code, Some(3), "stderr: {}", done.stderr);
    assert!(elapsed < Duration::from_secs(20), "{elapsed:?}");
    assert_eq!(incident["complete"], true);
    let reasons = not_captured(&incident, "python stacks");
    assert_eq!(reasons.len(), 1, "{incident}");
    assert!(
        reasons[0].starts_with("py-spy timed out after 2 s"),
        "{}",
        reasons[0]
    );
    let probe = incident["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"].as_str().unwrap().starts_with("py-spy"))
        .expect("a py-spy probe");
    assert_eq!(probe["outcome"], "timeout", "{probe}");
    // The rest of the incident is there: the mmap-lock analysis of every judged thread.
    assert!(
        incident["wedged_threads"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["at_detection"]["site"]
                .as_str()
                .is_some_and(|s| s.contains("filesystem freeze"))),
        "{incident}"
    );
    // The documented bound (defaults::MAX_STUCK_PY_SPY_PER_TARGET): at most one py-spy per target left.
    assert!(
        left_behind <= 1,
        "{left_behind} py-spy children left behind"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}
