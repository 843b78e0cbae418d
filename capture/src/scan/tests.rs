use super::*;
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// Scans until `done` holds (at most 5 s), adding the new threads seen to `new_seen`.
fn scan_until(scanner: &mut Scanner, new_seen: &mut usize, done: impl Fn(&Scanner) -> bool) {
    let until = std::time::Instant::now() + Duration::from_secs(5);
    *new_seen += scanner.scan().unwrap().new;
    while !done(scanner) && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
        *new_seen += scanner.scan().unwrap().new;
    }
}

#[test]
fn sees_new_and_gone_threads_of_this_process() {
    let me = std::process::id() as i32;
    let mut scanner = Scanner::new(&ProcRoot::default(), me).unwrap();
    let first = scanner.scan().unwrap();
    assert!(first.threads >= 1);
    let tid = nix::unistd::gettid().as_raw();
    // Other tests start and end threads meanwhile, and a /proc/<pid>/task listing resumes by
    // position, so one listing can skip a live thread; the next scan re-lists (thread count
    // differs from the threads held). Scan until seen, bounded.
    let mut new_seen = 0;
    scan_until(&mut scanner, &mut new_seen, |s| s.sample(tid).is_some());
    assert_eq!(scanner.sample(tid).unwrap().state, 'R');

    let start = Arc::new(Barrier::new(4));
    let stop = Arc::new(Barrier::new(4));
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let (start, stop) = (start.clone(), stop.clone());
            std::thread::Builder::new()
                .name("scan-probe".into())
                .spawn(move || {
                    start.wait();
                    stop.wait();
                })
                .unwrap()
        })
        .collect();
    start.wait();
    new_seen = 0;
    scan_until(&mut scanner, &mut new_seen, |s| {
        s.samples().filter(|t| t.comm == "scan-probe").count() == 3
    });
    assert!(new_seen >= 3, "{new_seen} new threads seen");
    let probes: Vec<_> = scanner
        .samples()
        .filter(|t| t.comm == "scan-probe")
        .collect();
    assert_eq!(probes.len(), 3);
    // Just past the first barrier a probe may still be running on its way to the second.
    assert!(
        probes.iter().all(|t| matches!(t.state, 'S' | 'R')),
        "{probes:?}"
    );
    let probe = probes[0].tid;
    assert!(scanner.ctxt_switches(probe).unwrap().unwrap() >= 1);
    stop.wait();
    for h in handles {
        h.join().unwrap();
    }
    // join() returns when the thread cleared its tid futex, a moment before the kernel removes
    // its task directory: scan until all three are gone (bounded).
    let mut gone = 0;
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while gone < 3 && std::time::Instant::now() < until {
        gone += scanner.scan().unwrap().gone;
        if gone < 3 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    assert!(gone >= 3, "{gone} threads seen gone");
    assert!(scanner.samples().all(|t| t.comm != "scan-probe"));
    assert_eq!(scanner.ctxt_switches(probe).unwrap(), None);
}

/// The schedstat shortcut must not hide a sleeper that wakes up and enters D.
#[test]
fn sleeper_that_enters_d_is_seen() {
    use crate::frozen_fs::FrozenFs;
    use std::io::Write;
    let Some(mut fs) = FrozenFs::for_test("sleeper_that_enters_d_is_seen") else {
        return;
    };
    let path = fs.create_file("late", b"").unwrap();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let h = std::thread::Builder::new()
        .name("late-writer".into())
        .spawn(move || {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
            go_rx.recv().unwrap();
            f.write_all(b"x").unwrap();
        })
        .unwrap();
    let tid = tid_rx.recv().unwrap();
    let me = std::process::id() as i32;
    let root = ProcRoot::default();
    crate::frozen_fs::wait_for_state(&root, me, tid, 'S', Duration::from_secs(5)).unwrap();
    let mut scanner = Scanner::new(&root, me).unwrap();
    let mut new_seen = 0;
    scan_until(&mut scanner, &mut new_seen, |s| s.sample(tid).is_some());
    scanner.scan().unwrap();
    // Sleepers skip `stat` once their schedstat fds are kept; the fds are budgeted across every scanner
    // of this test process, so while a test with thousands of threads runs beside this one there may be
    // none left for a while (bounded wait).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut s = scanner.scan().unwrap();
    while s.unchanged == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        s = scanner.scan().unwrap();
    }
    assert_eq!(scanner.sample(tid).unwrap().state, 'S');
    assert!(s.unchanged >= 1, "sleepers skip stat: {s:?}");
    fs.freeze().unwrap();
    go_tx.send(()).unwrap();
    crate::frozen_fs::wait_for_state(&root, me, tid, 'D', Duration::from_secs(10)).unwrap();
    scanner.scan().unwrap();
    assert_eq!(scanner.sample(tid).unwrap().state, 'D');
    fs.thaw().unwrap();
    h.join().unwrap();
}

/// The task iterator's answer is used only when it describes this process: a sleeping child is
/// skipped from the second scan on, and an answer about another process (or none) reads everything.
#[test]
fn the_task_iterator_skips_a_sleeper_only_on_a_trustworthy_answer() {
    let Some(iter) = task_iter_or_skip() else {
        return;
    };
    let (mut child, pid, root) = sleeping_child();

    let mut scanner = Scanner::new(&root, pid).unwrap();
    scanner.set_thread_iter(Some(iter.watch(pid).unwrap()));
    assert!(scanner.has_thread_iter());
    let first = scanner.scan().unwrap();
    assert_eq!((first.threads, first.unswitched), (1, 0), "{first:?}");
    assert!(first.iterated, "{first:?}");
    // The second scan reads it once more (the first found it by listing, after the iterator's
    // read) and takes its switch count; from the third on it is skipped.
    let second = scanner.scan().unwrap();
    assert_eq!(second.unswitched, 0, "{second:?}");
    // (At most one of two scans gives it its staggered forced read.)
    let third = scanner.scan().unwrap();
    let fourth = scanner.scan().unwrap();
    assert!(
        third.unswitched + fourth.unswitched >= 1,
        "asleep and not switched: {third:?} {fourth:?}"
    );
    assert_eq!(scanner.sample(pid).unwrap().state, 'S');

    // An answer about another process: not used, the sleeper is read (its schedstat, then stat).
    let me = std::process::id() as i32;
    scanner.set_thread_iter(Some(iter.watch(me).unwrap()));
    let foreign = scanner.scan().unwrap();
    assert!(!foreign.iterated, "{foreign:?}");
    assert_eq!(foreign.unswitched, 0, "{foreign:?}");
    assert_eq!(scanner.sample(pid).unwrap().state, 'S');

    // A busy process (its counters moved between two queries) is not asked for them for
    // BUSY_SKIPS scans, then twice in a row; a quiet answer keeps them asked every scan.
    scanner.set_thread_iter(Some(iter.watch(pid).unwrap()));
    let counters = |n: u64| TgidCounters {
        nvcsw: n,
        ..TgidCounters::default()
    };
    assert!(scanner.wants_counters());
    scanner.scan_with(Some(counters(1))).unwrap();
    assert!(scanner.wants_counters(), "one answer says nothing yet");
    scanner.scan_with(Some(counters(2))).unwrap();
    for skipped in 0..BUSY_SKIPS {
        assert!(!scanner.wants_counters(), "busy: skipped {skipped}");
        let s = scanner.scan_with(None).unwrap();
        assert_eq!(scanner.sample(pid).unwrap().state, 'S', "{s:?}");
    }
    assert!(scanner.wants_counters());
    scanner.scan_with(Some(counters(2))).unwrap();
    assert!(scanner.wants_counters(), "a first answer after the skips");
    // Two quiet scans: at most one of them gives the sleeper its staggered forced read.
    let quiet = scanner.scan_with(Some(counters(2))).unwrap();
    let again = scanner.scan_with(Some(counters(2))).unwrap();
    assert!(quiet.quiet + again.quiet >= 1, "{quiet:?} {again:?}");
    assert!(scanner.wants_counters(), "quiet: asked every scan");

    // None: as before the iterator existed.
    scanner.set_thread_iter(None);
    let plain = scanner.scan().unwrap();
    assert!(!plain.iterated && plain.unswitched == 0, "{plain:?}");

    child.kill().unwrap();
    child.wait().unwrap();
}

/// The safety net in quiet scans costs a `schedstat` read, not a `stat` (issue 40): once a sleeper's
/// baseline is taken (its first forced read), each later forced check over RELIST_EVERY quiet scans
/// finds it unchanged and reads no `stat`.
#[test]
fn the_quiet_scans_safety_net_checks_a_sleeper_by_its_schedstat() {
    let (mut child, pid, root) = sleeping_child();
    let mut scanner = Scanner::new(&root, pid).unwrap();
    let counters = TgidCounters {
        nvcsw: 7,
        ..TgidCounters::default()
    };
    let window = |scanner: &mut Scanner| {
        let (mut quiet, mut unchanged) = (0, 0);
        for _ in 0..RELIST_EVERY {
            let s = scanner.scan_with(Some(counters)).unwrap();
            quiet += s.quiet;
            unchanged += s.unchanged;
        }
        (quiet, unchanged)
    };
    // The first window: listed, then quiet; its forced read reads `stat` and takes the baseline.
    let first = window(&mut scanner);
    assert_eq!(first.1, 0, "no baseline yet: {first:?}");
    // A `sleep` just started may still run a little after its first sleep (a slow emulated machine, a loaded
    // one): its forced check then finds schedstat moved and reads `stat`, as it must. Once it sleeps for good,
    // each window's forced check is answered by schedstat; the old read never is.
    let windows: Vec<(usize, usize)> = (0..6).map(|_| window(&mut scanner)).collect();
    assert!(
        windows.contains(&(RELIST_EVERY as usize - 1, 1)),
        "one forced check per RELIST_EVERY quiet scans, answered by schedstat: {windows:?}"
    );
    assert_eq!(scanner.sample(pid).unwrap().state, 'S');
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The busy shortcut's safety net is a `schedstat` check too (issue 40): a sleeper the task iterator shows
/// asleep and unswitched gets, once per RELIST_EVERY scans, its schedstat compared with the baseline instead
/// of a `stat` read; once it sleeps for good that check finds it unchanged.
#[test]
fn the_busy_scans_safety_net_checks_an_unswitched_sleeper_by_its_schedstat() {
    let Some(iter) = task_iter_or_skip() else {
        return;
    };
    let (mut child, pid, root) = sleeping_child();
    let mut scanner = Scanner::new(&root, pid).unwrap();
    scanner.set_thread_iter(Some(iter.watch(pid).unwrap()));
    // Listed, then read once more (its switch count and schedstat baseline taken).
    scanner.scan().unwrap();
    scanner.scan().unwrap();
    let window = |scanner: &mut Scanner| {
        let (mut unswitched, mut unchanged) = (0, 0);
        for _ in 0..RELIST_EVERY {
            let s = scanner.scan().unwrap();
            assert!(s.iterated, "{s:?}");
            unswitched += s.unswitched;
            unchanged += s.unchanged;
        }
        (unswitched, unchanged)
    };
    // As in the quiet test: a `sleep` just started may still run a little (then `stat` is read, as it must).
    let windows: Vec<(usize, usize)> = (0..6).map(|_| window(&mut scanner)).collect();
    assert!(
        windows.contains(&(RELIST_EVERY as usize - 1, 1)),
        "one forced check per RELIST_EVERY busy scans, answered by schedstat: {windows:?}"
    );
    assert_eq!(scanner.sample(pid).unwrap().state, 'S');
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The task directory's link count is the thread count, as `num_threads` in stat says.
#[test]
fn thread_count_from_the_task_directory() {
    let mut child = sleep_30();
    let pid = child.id() as i32;
    let mut scanner = Scanner::new(&ProcRoot::default(), pid).unwrap();
    assert_eq!(scanner.num_threads().unwrap(), Some(1));
    let me = std::process::id() as i32;
    let mut mine = Scanner::new(&ProcRoot::default(), me).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let extra = std::thread::spawn(move || rx.recv());
    // Other tests start and end threads between the two reads: retry until they agree (bounded).
    let (mut from_dir, mut from_stat) = (0, 1);
    for _ in 0..200 {
        from_dir = mine.num_threads().unwrap().unwrap();
        from_stat = mine.num_threads_from_stat().unwrap().unwrap();
        if from_dir == from_stat {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        from_dir >= 2 && from_dir == from_stat,
        "{from_dir} vs {from_stat}"
    );
    tx.send(()).unwrap();
    extra.join().unwrap().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(matches!(
        scanner.num_threads(),
        Err(Error::NoSuchProcess { .. })
    ));
}

#[test]
fn exited_process_is_an_error() {
    let mut child = sleep_30();
    let pid = child.id() as i32;
    // The child is ours to read only once it has exec'd `sleep` (until then its comm is this test
    // thread's: seen on a slow emulated machine); bounded wait.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(format!("/proc/{pid}/comm")).map_or(true, |c| c.trim() != "sleep")
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut scanner = Scanner::new(&ProcRoot::default(), pid).unwrap();
    assert_eq!(scanner.scan().unwrap().threads, 1);
    assert_eq!(scanner.sample(pid).unwrap().comm, "sleep");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(matches!(scanner.scan(), Err(Error::NoSuchProcess { .. })));
    assert!(matches!(
        Scanner::new(&ProcRoot::default(), pid),
        Err(Error::NoSuchProcess { .. })
    ));
}

/// A `sleep 30` child (killed and reaped by each test).
fn sleep_30() -> std::process::Child {
    std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap()
}

/// The BPF task iterator, or None (skip) when it cannot load without root outside CI; as root or in CI it
/// must load.
fn task_iter_or_skip() -> Option<crate::task_iter::TaskIter> {
    match crate::task_iter::TaskIter::load() {
        Ok(iter) => Some(iter),
        Err(e) if !nix::unistd::Uid::effective().is_root() && !breadcrumb::in_ci() => {
            eprintln!("skipping: {e}");
            None
        }
        Err(e) => panic!("the task iterator is unavailable as root: {e}"),
    }
}

/// A `sleep 30` child already asleep, its pid, and the live proc root.
fn sleeping_child() -> (std::process::Child, i32, ProcRoot) {
    let child = sleep_30();
    let pid = child.id() as i32;
    let root = ProcRoot::default();
    crate::frozen_fs::wait_for_state(&root, pid, pid, 'S', Duration::from_secs(10)).unwrap();
    (child, pid, root)
}

/// The periodic re-listing is skipped only where the task iterator has just named exactly the threads
/// held: without the iterator every RELIST_EVERY-th scan re-lists, and a thread created under the
/// iterator is found (the counts differ) and read.
#[test]
fn the_periodic_relisting_is_spared_only_by_an_iterator_answer_naming_the_threads_held() {
    let Some(iter) = task_iter_or_skip() else {
        return;
    };
    let (mut child, pid, root) = sleeping_child();
    let relisted = |scanner: &mut Scanner| {
        (0..RELIST_EVERY)
            .map(|_| scanner.scan().unwrap())
            .filter(|s| s.relisted)
            .count()
    };
    let mut plain = Scanner::new(&root, pid).unwrap();
    plain.scan().unwrap();
    assert_eq!(
        relisted(&mut plain),
        1,
        "the safety net every {RELIST_EVERY} scans"
    );

    let mut iterated = Scanner::new(&root, pid).unwrap();
    iterated.set_thread_iter(Some(iter.watch(pid).unwrap()));
    iterated.scan().unwrap();
    assert_eq!(
        relisted(&mut iterated),
        0,
        "the iterator named the one thread held"
    );
    child.kill().unwrap();
    child.wait().unwrap();

    // This process, under the iterator: a new thread differs from the count held, so it is listed.
    let me = std::process::id() as i32;
    let mut scanner = Scanner::new(&root, me).unwrap();
    scanner.set_thread_iter(Some(iter.watch(me).unwrap()));
    scanner.scan().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
        let _ = rx.recv();
    });
    let tid = tid_rx.recv().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while scanner.sample(tid).is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "thread {tid} never found"
        );
        scanner.scan().unwrap();
    }
    drop(tx);
    h.join().unwrap();
}

/// Quiet scans of a process with a task iterator (issue 40): the safety net is one walk of the group
/// per RELIST_EVERY scans, which vouches for every sleeper at once, not a `schedstat` read per thread per
/// scan; nor is the task directory re-listed, since the walk named exactly the threads held.
#[test]
fn a_quiet_process_is_checked_by_one_walk_per_relist_every_scans() {
    let Some(iter) = task_iter_or_skip() else {
        return;
    };
    let (mut child, pid, root) = sleeping_child();
    let mut scanner = Scanner::new(&root, pid).unwrap();
    scanner.set_thread_iter(Some(iter.watch(pid).unwrap()));
    let counters = TgidCounters {
        nvcsw: 7,
        ..TgidCounters::default()
    };
    let window = |scanner: &mut Scanner| {
        let summaries: Vec<ScanSummary> = (0..RELIST_EVERY)
            .map(|_| scanner.scan_with(Some(counters)).unwrap())
            .collect();
        let walks = summaries.iter().filter(|s| s.iterated).count();
        let walked: usize = summaries.iter().map(|s| s.walked).sum();
        let unchanged: usize = summaries.iter().map(|s| s.unchanged).sum();
        let relisted = summaries.iter().filter(|s| s.relisted).count();
        (walks, walked, unchanged, relisted)
    };
    // The first windows take the baselines (a `sleep` just started may still run a little).
    let windows: Vec<_> = (0..6).map(|_| window(&mut scanner)).collect();
    assert!(
        windows.contains(&(1, 1, 0, 0)),
        "one walk per window, vouching for the sleeper; no schedstat, no re-listing: {windows:?}"
    );
    // Never a window without its check.
    assert!(windows.iter().all(|w| w.0 >= 1), "{windows:?}");
    assert_eq!(scanner.sample(pid).unwrap().state, 'S');
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The quiet shortcut trusts the process's summed counters; if they lied (the same sums every scan), the
/// walk's net still finds a sleeper that entered D within RELIST_EVERY scans: a real D thread of a
/// single-threaded child, writing to a frozen ext4.
#[test]
fn lying_counters_cannot_hide_a_d_thread_from_the_walk_net() {
    use crate::frozen_fs::FrozenFs;
    use std::io::Write;
    let Some(iter) = task_iter_or_skip() else {
        return;
    };
    let Some(mut fs) =
        FrozenFs::for_test("lying_counters_cannot_hide_a_d_thread_from_the_walk_net")
    else {
        return;
    };
    let path = fs.create_file("late", b"").unwrap();
    let mut child = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("read x; echo x >> '{}'", path.display()))
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let root = ProcRoot::default();
    crate::frozen_fs::wait_for_state(&root, pid, pid, 'S', Duration::from_secs(10)).unwrap();
    let mut scanner = Scanner::new(&root, pid).unwrap();
    scanner.set_thread_iter(Some(iter.watch(pid).unwrap()));
    let lie = TgidCounters {
        nvcsw: 7,
        ..TgidCounters::default()
    };
    for _ in 0..3 * RELIST_EVERY {
        scanner.scan_with(Some(lie)).unwrap();
    }
    assert_eq!(scanner.sample(pid).unwrap().state, 'S');
    fs.freeze().unwrap();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    crate::frozen_fs::wait_for_state(&root, pid, pid, 'D', Duration::from_secs(10)).unwrap();
    let mut seen_at = None;
    for k in 1..=RELIST_EVERY {
        scanner.scan_with(Some(lie)).unwrap();
        if scanner.sample(pid).unwrap().state == 'D' {
            seen_at = Some(k);
            break;
        }
    }
    fs.thaw().unwrap();
    child.wait().unwrap();
    assert!(
        seen_at.is_some(),
        "the D thread was not seen in {RELIST_EVERY} scans of lying counters"
    );
}
