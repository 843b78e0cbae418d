//! The busy-process shortcut (BPF task iterator) keeps the detection guarantee: in a process whose
//! counters always move (threads waking every millisecond), the parked threads are not read, yet a
//! sleeper that enters D on a frozen ext4 is seen in D by the very next scan. Without the shortcut
//! (turned off, or refused for want of privilege) the same scans give the same answers, and the agent's
//! start line and `doctor` say why.

use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use ::agent::testing::{ScanShortcuts, ThreadScanner};
use capture::ProcRoot;

use crate::agent::{Agent, TempDir};
use crate::util::{bin, frozen_fs_or_skip, in_ci};

const PARKED: usize = 500;
const BUSY: usize = 2;

/// The bench helper: `parked` parked threads, `busy` threads waking every ms, and a writer that appends to
/// `file` when told (`wedge` on stdin). Returns it, its stdin and its pid.
pub(crate) fn parked_helper(
    parked: usize,
    busy: usize,
    file: &std::path::Path,
) -> (Child, ChildStdin, i32) {
    let mut helper = Command::new(bin())
        .args(["internal", "bench-agent", "--park-threads"])
        .arg(parked.to_string())
        .arg("--park-busy")
        .arg(busy.to_string())
        .arg("--wedge-on")
        .arg(file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = helper.id() as i32;
    let mut line = String::new();
    std::io::BufReader::new(helper.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.starts_with(&format!("parked {parked} busy {busy}")),
        "{line:?}"
    );
    let stdin = helper.stdin.take().unwrap();
    (helper, stdin, pid)
}

/// The helper's writer (asleep) is told to write to its file on the now frozen filesystem; once it is in
/// D, the very next scan must see it in D, with its progress signature. Returns its tid.
pub(crate) fn wedge_the_writer_and_see_it_at_the_next_scan(
    fs: &mut capture::frozen_fs::FrozenFs,
    stdin: &mut ChildStdin,
    scanner: &mut ThreadScanner,
    pid: i32,
    observations: &mut Vec<::agent::testing::Observation>,
) -> i32 {
    let root = ProcRoot::default();
    let writer = observations
        .iter()
        .find(|o| o.comm == "wedge-writer")
        .expect("the writer thread is watched");
    let tid = writer.tid;
    assert_eq!(writer.state, b'S');

    fs.freeze().unwrap();
    writeln!(stdin, "wedge").unwrap();
    capture::frozen_fs::wait_for_state(&root, pid, tid, 'D', Duration::from_secs(10)).unwrap();
    let stats = scanner.scan(&root, &[pid], observations);
    let seen = observations.iter().find(|o| o.tid == tid).unwrap();
    assert_eq!(seen.state, b'D', "the next scan sees it in D: {stats:?}");
    assert!(seen.progress.is_some(), "with its progress signature");
    assert_eq!(stats.in_d, 1);
    tid
}

/// Closes the helper's stdin (it exits) and reaps it, killing it after 10 s.
pub(crate) fn stop(mut helper: Child, stdin: ChildStdin) {
    drop(stdin);
    let until = Instant::now() + Duration::from_secs(10);
    while helper.try_wait().unwrap().is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = helper.kill();
    let _ = helper.wait();
}

/// (tid, state) of every observation but the busy threads (whose state flips between two scans), sorted.
fn states(observations: &[::agent::testing::Observation]) -> Vec<(i32, u8)> {
    let mut v: Vec<(i32, u8)> = observations
        .iter()
        .filter(|o| o.comm != "wcbench-busy")
        .map(|o| (o.tid, o.state))
        .collect();
    v.sort_unstable();
    v
}

/// The two scanners' answers agree (shown as the differing threads only).
fn assert_same(a: &[::agent::testing::Observation], b: &[::agent::testing::Observation]) {
    let (a, b) = (states(a), states(b));
    let differ: Vec<_> = a.iter().zip(&b).filter(|(x, y)| x != y).take(5).collect();
    assert!(
        a.len() == b.len() && differ.is_empty(),
        "{} vs {} threads; {differ:?}",
        a.len(),
        b.len()
    );
}

#[test]
fn a_sleeper_of_a_busy_process_entering_d_is_seen_at_the_next_scan() {
    let Some(mut fs) = frozen_fs_or_skip("busy_scan") else {
        return;
    };
    let file = fs.create_file("late", b"").unwrap();
    let (helper, mut stdin, pid) = parked_helper(PARKED, BUSY, &file);
    let root = ProcRoot::default();
    let wanted = ScanShortcuts {
        taskstats: true,
        task_iter: true,
    };
    let mut scanner = ThreadScanner::with_shortcuts(&root, wanted);
    if !scanner.thread_shortcut().starts_with("on") {
        assert!(
            !in_ci() && !nix::unistd::geteuid().is_root(),
            "the task iterator must work as root: {}",
            scanner.thread_shortcut()
        );
        eprintln!("skipping: {}", scanner.thread_shortcut());
        stop(helper, stdin);
        return;
    }
    // The same threads through /proc only, side by side.
    let mut plain = ThreadScanner::with_shortcuts(
        &root,
        ScanShortcuts {
            taskstats: false,
            task_iter: false,
        },
    );
    assert!(
        plain.thread_shortcut().starts_with("off"),
        "{}",
        plain.thread_shortcut()
    );
    let (mut observations, mut plain_observations) = (Vec::new(), Vec::new());
    let total = PARKED + BUSY + 2; // + the main thread and the writer
    let first = scanner.scan(&root, &[pid], &mut observations);
    assert_eq!(first.threads, total, "{first:?}");

    // Busy: never quiet, so the quiet shortcut skips nothing; the iterator spares the parked threads.
    let mut best = first;
    let settle = Instant::now();
    while best.unswitched < PARKED * 8 / 10 && settle.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
        best = scanner.scan(&root, &[pid], &mut observations);
    }
    assert!(
        best.unswitched >= PARKED * 8 / 10,
        "a busy process's parked threads are not read: {best:?}"
    );
    assert!(
        best.quiet < PARKED / 2,
        "the busy helper is not quiet: {best:?}"
    );
    plain.scan(&root, &[pid], &mut plain_observations);
    assert_same(&observations, &plain_observations);

    let tid = wedge_the_writer_and_see_it_at_the_next_scan(
        &mut fs,
        &mut stdin,
        &mut scanner,
        pid,
        &mut observations,
    );
    // Still skipping the parked threads, still reading the D thread at every scan (the no-progress
    // proof), and the same answer as the plain scanner.
    std::thread::sleep(Duration::from_millis(20));
    let again = scanner.scan(&root, &[pid], &mut observations);
    assert_eq!(again.in_d, 1, "still in D, still read: {again:?}");
    assert!(again.unswitched >= PARKED / 2, "{again:?}");
    plain.scan(&root, &[pid], &mut plain_observations);
    let d_threads = |o: &[::agent::testing::Observation]| {
        o.iter()
            .filter(|o| o.state == b'D')
            .map(|o| o.tid)
            .collect::<Vec<_>>()
    };
    assert_eq!(d_threads(&observations), vec![tid]);
    assert_eq!(d_threads(&plain_observations), vec![tid]);
    assert_same(&observations, &plain_observations);

    fs.thaw().unwrap();
    stop(helper, stdin);
}

/// The agent says which shortcut it uses and why not: turned off by the environment, or refused for
/// want of CAP_BPF/CAP_PERFMON (root with those capabilities dropped, as a container without them is).
#[test]
fn the_start_line_says_why_the_busy_shortcut_is_off() {
    let dir = TempDir::new("busy-shortcut");
    let out = dir.path().join("incidents");
    let pattern = format!("^nothing-{}$", std::process::id());
    let args = ["--out", out.to_str().unwrap(), "--match-comm", &pattern];

    let mut agent = Agent::start(dir.path(), &args, &[("WEDGE_CAPTURE_TASK_ITER", "off")]);
    let log = agent.wait_log("started (pid", 1, Duration::from_secs(10));
    assert!(
        log.contains("busy-process shortcut: off (WEDGE_CAPTURE_TASK_ITER=off)"),
        "{log}"
    );
    let (code, _, _) = agent.terminate();
    assert_eq!(code, Some(0));

    if !nix::unistd::geteuid().is_root() {
        assert!(!in_ci(), "CI runs the tests as root");
        return;
    }
    // On this machine, as root: on.
    let mut agent = Agent::start(dir.path(), &args, &[]);
    let log = agent.wait_log("started (pid", 1, Duration::from_secs(10));
    assert!(
        log.contains(
            "busy-process shortcut: on (BPF task iterator, each process's threads walked in one call)"
        ),
        "{log}"
    );
    agent.terminate();

    // Root without CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN: refused, said, and the agent runs on.
    let log = dir.path().join("nocaps.log");
    let mut child = Command::new("setpriv")
        .args([
            "--inh-caps=-bpf,-perfmon,-sys_admin",
            "--bounding-set=-bpf,-perfmon,-sys_admin",
        ])
        .arg(bin())
        .args(["agent", "--log-format", "plain", "--no-nvidia-smi"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("started (pid") || Instant::now() > until {
            break text;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    // SAFETY: kill(2) on our own child's pid; no memory involved.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(
        text.contains("busy-process shortcut: unavailable (")
            && text.contains("needs CAP_BPF and CAP_PERFMON"),
        "{text}"
    );
    assert_eq!(status.code(), Some(0), "{text}");
}

/// `internal bench-agent` measures both shapes against its same-run baseline (a small, quick run: the
/// figures are in BENCHMARKS.md, this proves the command that makes them works).
#[test]
fn bench_agent_reports_the_idle_and_the_busy_shape() {
    if !nix::unistd::geteuid().is_root() {
        assert!(!in_ci(), "CI runs the tests as root");
        return;
    }
    let output = Command::new(bin())
        .args([
            "internal",
            "bench-agent",
            "--threads",
            "100",
            "--scans",
            "3",
            "--interval",
            "50ms",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let rows: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    let shapes: Vec<&str> = rows.iter().map(|r| r["shape"].as_str().unwrap()).collect();
    assert_eq!(shapes, ["idle", "busy"]);
    // 100 parked + the helper's main thread (+ 2 busy threads).
    assert_eq!(rows[0]["threads"], 101);
    assert_eq!(rows[1]["threads"], 103);
    for row in rows {
        let ratio = row["ratio"].as_f64().unwrap();
        assert!(ratio > 0.0 && ratio.is_finite(), "{row}");
        assert!(row["baseline_us_per_scan"].as_f64().unwrap() > 0.0, "{row}");
    }
}

/// Two agent binaries compared in one run share one helper process and the baseline measured between
/// them: the second row's "before" baseline is the first row's "after" (issue 40: a ratio against a
/// baseline drawn on another helper, at another time, moved with the draw).
#[test]
fn bench_agent_compares_binaries_against_the_baseline_measured_between_them() {
    if !nix::unistd::geteuid().is_root() {
        assert!(!in_ci(), "CI runs the tests as root");
        return;
    }
    let exe = bin();
    let output = Command::new(exe)
        .args([
            "internal",
            "bench-agent",
            "--threads",
            "20",
            "--shapes",
            "idle",
        ])
        .args(["--scans", "3", "--interval", "50ms", "--json"])
        .arg("--agent-exe")
        .arg(exe)
        .arg("--agent-exe")
        .arg(exe)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let rows: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let pair = |row: &serde_json::Value| {
        let both = row["baseline_before_after_ns_per_thread_scan"]
            .as_array()
            .unwrap();
        (both[0].as_f64().unwrap(), both[1].as_f64().unwrap())
    };
    let (first_before, first_after) = pair(&rows[0]);
    let (second_before, second_after) = pair(&rows[1]);
    assert_eq!(first_after, second_before, "{rows:?}");
    for (row, (before, after)) in rows.iter().zip([pair(&rows[0]), pair(&rows[1])]) {
        assert!(before > 0.0 && after > 0.0, "{row}");
        let mean = row["baseline_ns_per_thread_scan"].as_f64().unwrap();
        assert!(
            (mean - (before + after) / 2.0).abs() <= 1e-6 * mean,
            "{row}"
        );
    }
    assert!(first_before > 0.0 && second_after > 0.0);
}
