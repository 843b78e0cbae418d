//! The quiet-process shortcut (taskstats) keeps the detection guarantee: a thread of a quiet process
//! (its sleeping threads skipped because its counters did not move) that enters D is seen in D by the
//! very next scan.

use std::time::{Duration, Instant};

use ::agent::testing::{ScanShortcuts, ThreadScanner};
use capture::ProcRoot;

use crate::busy_scan::{parked_helper, stop, wedge_the_writer_and_see_it_at_the_next_scan};
use crate::util::frozen_fs_or_skip;

#[test]
fn a_thread_of_a_quiet_process_entering_d_is_seen_at_the_next_scan() {
    let Some(mut fs) = frozen_fs_or_skip("quiet_scan") else {
        return;
    };
    let file = fs.create_file("late", b"").unwrap();
    let (helper, mut stdin, pid) = parked_helper(500, 0, &file);

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
    let tid = wedge_the_writer_and_see_it_at_the_next_scan(
        &mut fs,
        &mut stdin,
        &mut scanner,
        pid,
        &mut observations,
    );
    // Quiet again (a thread in D does not run), yet the D thread is read at every scan: the tracker's
    // no-progress proof needs it.
    std::thread::sleep(Duration::from_millis(20));
    scanner.scan(&root, &[pid], &mut observations);
    let again = scanner.scan(&root, &[pid], &mut observations);
    assert!(again.quiet >= 400, "{again:?}");
    assert_eq!(again.in_d, 1, "still in D, still read: {again:?}");
    let seen = observations.iter().find(|o| o.tid == tid).unwrap();
    assert_eq!(seen.state, b'D');

    fs.thaw().unwrap();
    stop(helper, stdin);
}
