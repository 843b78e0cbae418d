//! The quiet-process shortcut (taskstats) keeps the detection guarantee: a thread of a quiet process
//! (its sleeping threads skipped because its counters did not move) that enters D is seen in D by the
//! very next scan.

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ::agent::testing::{ScanShortcuts, ThreadScanner};
use capture::ProcRoot;

use crate::util::{bin, frozen_fs_or_skip};

#[test]
fn a_thread_of_a_quiet_process_entering_d_is_seen_at_the_next_scan() {
    let Some(mut fs) = frozen_fs_or_skip("quiet_scan") else {
        return;
    };
    let file = fs.create_file("late", b"").unwrap();
    let mut helper = Command::new(bin())
        .args([
            "internal",
            "bench-agent",
            "--park-threads",
            "500",
            "--wedge-on",
        ])
        .arg(&file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = helper.id() as i32;
    let mut line = String::new();
    std::io::BufReader::new(helper.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("parked 500"), "{line:?}");

    let root = ProcRoot::default();
    // The quiet shortcut alone: with the task iterator too, a process whose counters moved (the writer
    // entering D) is not asked for them for a few scans (busy_scan.rs covers that combination).
    let mut scanner = ThreadScanner::with_shortcuts(
        &root,
        ScanShortcuts {
            taskstats: true,
            task_iter: false,
        },
    );
    assert!(
        scanner.quiet_shortcut().starts_with("on"),
        "taskstats must work as root: {}",
        scanner.quiet_shortcut()
    );
    let mut observations = Vec::new();
    let first = scanner.scan(&root, &[pid], &mut observations);
    assert_eq!(first.threads, 502, "{first:?}");
    // Quiet: the parked threads and the writer sleep; most of them are skipped (not even schedstat).
    // A scan whose interval saw any thread of the helper run (its last threads settling, a loaded CI
    // machine delaying them) reads everything, so look at up to 2 s of scans for a quiet one.
    let mut quiet = 0;
    let settle = Instant::now();
    while quiet < 400 && settle.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
        quiet = scanner.scan(&root, &[pid], &mut observations).quiet;
    }
    assert!(
        quiet >= 400,
        "a quiet process's sleepers are skipped: {quiet}"
    );
    let writer = observations
        .iter()
        .find(|o| o.comm == "wedge-writer")
        .expect("the writer thread is watched");
    let tid = writer.tid;
    assert_eq!(writer.state, b'S');

    fs.freeze().unwrap();
    let mut stdin = helper.stdin.take().unwrap();
    writeln!(stdin, "wedge").unwrap();
    capture::frozen_fs::wait_for_state(&root, pid, tid, 'D', Duration::from_secs(10)).unwrap();
    let stats = scanner.scan(&root, &[pid], &mut observations);
    let seen = observations.iter().find(|o| o.tid == tid).unwrap();
    assert_eq!(seen.state, b'D', "the next scan sees it in D: {stats:?}");
    assert!(seen.progress.is_some(), "with its progress signature");
    assert_eq!(stats.in_d, 1);
    // Quiet again (a thread in D does not run), yet the D thread is read at every scan: the tracker's
    // no-progress proof needs it.
    std::thread::sleep(Duration::from_millis(20));
    scanner.scan(&root, &[pid], &mut observations);
    let again = scanner.scan(&root, &[pid], &mut observations);
    assert!(again.quiet >= 400, "{again:?}");
    assert_eq!(again.in_d, 1, "still in D, still read: {again:?}");

    fs.thaw().unwrap();
    drop(stdin);
    let until = Instant::now() + Duration::from_secs(10);
    while helper.try_wait().unwrap().is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = helper.kill();
    let _ = helper.wait();
}
