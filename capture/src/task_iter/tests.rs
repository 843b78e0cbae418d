use super::*;

fn record(tid: u32, tgid: u32, state: u32, exit_state: u32, nv: u64, niv: u64) -> Vec<u8> {
    let mut r = Vec::new();
    for w in [tid, tgid, state, exit_state] {
        r.extend_from_slice(&w.to_le_bytes());
    }
    r.extend_from_slice(&nv.to_le_bytes());
    r.extend_from_slice(&niv.to_le_bytes());
    r
}

#[test]
fn records_parse_and_sum_the_switch_counts() {
    let mut bytes = record(10, 10, 0x1, 0, 5, 2);
    bytes.extend(record(11, 10, 0x2, 0, 1, 0));
    let records: Vec<_> = parse_records(&bytes).unwrap().collect();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].switches, 7);
    assert_eq!((records[1].tid, records[1].tgid), (11, 10));
    assert_eq!(records[1].letter(), 'D');
    assert!(parse_records(&[]).unwrap().next().is_none());
}

#[test]
fn a_partial_record_is_an_error_not_a_short_answer() {
    let mut bytes = record(10, 10, 1, 0, 0, 0);
    bytes.pop();
    assert!(parse_records(&bytes).is_err());
    assert!(parse_records(&[0u8; 31]).is_err());
}

/// The letters of fs/proc/array.c's task_state_array for the bits include/linux/sched.h defines.
#[test]
fn state_bits_give_the_letters_stat_shows() {
    let letter = |state, exit| ThreadRecord {
        tid: 1,
        tgid: 1,
        state,
        exit_state: exit,
        switches: 0,
    };
    let cases = [
        (0x0, 0, 'R', false),
        (0x1, 0, 'S', true),
        (0x2001, 0, 'S', true), // TASK_INTERRUPTIBLE | TASK_FREEZABLE (nanosleep)
        (0x2, 0, 'D', false),
        (0x102, 0, 'D', false), // TASK_KILLABLE
        (0x402, 0, 'I', true),  // TASK_IDLE
        (0x2402, 0, 'I', true),
        (0x1000, 0, 'D', false), // TASK_RTLOCK_WAIT
        (0x4, 0, 'T', false),
        (0x8, 0, 't', false),
        (0x0, 0x10, 'X', false),
        (0x0, 0x20, 'Z', false),
        (0x40, 0, 'P', false),
        (0x8000, 0, 'R', false), // TASK_FROZEN alone: not a reported sleep, so read
        (0x3, 0, 'D', false),    // two report bits: the highest wins, and it is not skipped
    ];
    for (state, exit, want, asleep) in cases {
        let r = letter(state, exit);
        assert_eq!(r.letter(), want, "state {state:#x} exit {exit:#x}");
        assert_eq!(r.asleep(), asleep, "state {state:#x}");
    }
}

/// The checked-in object was built from the checked-in source (gen_task_states.sh records the hash).
#[test]
fn the_object_matches_its_source() {
    crate::task_iter::assert_object_matches_source("task_states.bpf.c");
}

/// The loaded iterator, or None (skipped, with a line) when this machine cannot: not root and not
/// CI. As root or under CI a refusal is a failure.
fn load_for_test(test: &str) -> Option<TaskIter> {
    match TaskIter::load() {
        Ok(iter) => Some(iter),
        Err(e) if !nix::unistd::Uid::effective().is_root() && !breadcrumb::in_ci() => {
            eprintln!("skipping {test}: {e}");
            None
        }
        Err(e) => panic!("{test}: the task iterator is unavailable as root: {e}"),
    }
}

fn records_of(threads: &mut ProcessThreads) -> Vec<ThreadRecord> {
    let mut records = Vec::new();
    threads.visit(&mut Vec::new(), |r| records.push(r)).unwrap();
    records
}

/// The real kernel: for threads of this process in known states (running, a parked sleeper, a thread
/// in D on a frozen ext4) the iterator's letters are the ones `/proc/<pid>/task/<tid>/stat` shows,
/// and a thread that wakes and sleeps again has a larger switch count.
#[test]
fn the_iterator_agrees_with_proc_including_a_real_d_thread() {
    use crate::frozen_fs::{spawn_blocked_thread, wait_for_state, BlockingCall, FrozenFs};
    use crate::ProcRoot;
    use std::time::Duration;
    let Some(iter) = load_for_test("the_iterator_agrees_with_proc_including_a_real_d_thread")
    else {
        return;
    };
    let Some(mut fs) =
        FrozenFs::for_test("the_iterator_agrees_with_proc_including_a_real_d_thread")
    else {
        return;
    };
    let root = ProcRoot::default();
    let me = std::process::id() as i32;
    let running = nix::unistd::gettid().as_raw();

    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (wake_tx, wake_rx) = std::sync::mpsc::channel::<bool>();
    let sleeper = std::thread::spawn(move || {
        tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
        while wake_rx.recv() == Ok(true) {}
    });
    let sleeper_tid = tid_rx.recv().unwrap();
    wait_for_state(&root, me, sleeper_tid, 'S', Duration::from_secs(5)).unwrap();

    let path = fs.create_file("victim", b"x").unwrap();
    fs.freeze().unwrap();
    let blocked = spawn_blocked_thread(&path, BlockingCall::Write, "iter-d-victim").unwrap();
    wait_for_state(&root, me, blocked.tid, 'D', Duration::from_secs(10)).unwrap();

    let mut threads = iter.watch(me).unwrap();
    let records = records_of(&mut threads);
    assert!(records.iter().all(|r| r.tgid == me), "only this process");
    let find = |records: &[ThreadRecord], tid: i32| {
        *records
            .iter()
            .find(|r| r.tid == tid)
            .unwrap_or_else(|| panic!("tid {tid} missing from {records:?}"))
    };
    for (tid, want) in [(running, 'R'), (sleeper_tid, 'S'), (blocked.tid, 'D')] {
        let seen = find(&records, tid);
        let proc_state = root.read_task_stat(me, tid).unwrap().state;
        assert_eq!(seen.letter(), want, "iterator, tid {tid}");
        assert_eq!(proc_state, want, "/proc, tid {tid}");
    }
    assert!(find(&records, sleeper_tid).asleep());
    assert!(!find(&records, blocked.tid).asleep());

    // Unchanged while it sleeps; larger once it has run and slept again.
    let before = find(&records, sleeper_tid).switches;
    assert_eq!(
        find(&records_of(&mut threads), sleeper_tid).switches,
        before
    );
    wake_tx.send(true).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let now = find(&records_of(&mut threads), sleeper_tid);
        if now.switches > before && now.asleep() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{now:?} vs {before}");
        std::thread::sleep(Duration::from_millis(5));
    }

    fs.thaw().unwrap();
    blocked.join().unwrap();
    drop(wake_tx);
    sleeper.join().unwrap();
}

/// A damaged object (truncated, or not ELF) is an unavailability with a reason, never a panic.
#[test]
fn a_damaged_object_is_a_reason_not_a_panic() {
    if load_for_test("a_damaged_object_is_a_reason_not_a_panic").is_none() {
        return;
    }
    for damaged in [
        &OBJECT[..OBJECT.len() / 2],
        &OBJECT[..64],
        &b"not an ELF object"[..],
    ] {
        match TaskIter::load_object(KERNEL_BTF, damaged) {
            Err(Error::TaskIterUnavailable(why)) => {
                assert!(why.starts_with("loading the task iterator"), "{why}")
            }
            other => panic!("{other:?}"),
        }
    }
}

/// The fallbacks' reasons, for real: a kernel without BTF, and a program the verifier refuses (the
/// same source built without its NULL check by gen_task_states.sh).
#[test]
fn no_btf_and_a_verifier_refusal_are_reasons() {
    if load_for_test("no_btf_and_a_verifier_refusal_are_reasons").is_none() {
        return;
    }
    match TaskIter::load_object("/nonexistent/btf/vmlinux", OBJECT) {
        Err(Error::TaskIterUnavailable(why)) => {
            assert!(why.starts_with("no kernel BTF at /nonexistent"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    match TaskIter::load_object("/proc/self/stat", OBJECT) {
        Err(Error::TaskIterUnavailable(why)) => {
            assert!(why.starts_with("no kernel BTF"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    static REFUSED: &[u8] = aya::include_bytes_aligned!("../../bpf/task_states_refused.bpf.o");
    match TaskIter::load_object(KERNEL_BTF, REFUSED) {
        Err(Error::TaskIterUnavailable(why)) => {
            assert!(
                why.starts_with("the kernel refused the task iterator: "),
                "{why}"
            );
            // The verifier's own words (the possibly-NULL task pointer), not just an errno.
            assert!(
                why.contains("R1") || why.contains("invalid mem access"),
                "{why}"
            );
        }
        other => panic!("{other:?}"),
    }
}

/// A process that has exited reads as no records, not an error; a pid that never existed cannot
/// be watched.
#[test]
fn an_exited_process_reads_as_no_threads() {
    let Some(iter) = load_for_test("an_exited_process_reads_as_no_threads") else {
        return;
    };
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let mut threads = iter.watch(child.id() as i32).unwrap();
    assert!(threads.walks_group(), "this kernel loads the group walk");
    assert_eq!(records_of(&mut threads).len(), 1);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(records_of(&mut threads).len(), 0);
    assert!(iter.watch(0).is_err());
    assert!(iter.watch(-5).is_err());
}

/// A group walk's bytes: the threads (tid, state word, switches), then the trailer.
fn group_bytes(threads: &[(u32, u32, u64)], tgid: u32, walked: u32, complete: u32) -> Vec<u8> {
    let mut b = Vec::new();
    for &(tid, word, switches) in threads {
        b.extend_from_slice(&tid.to_le_bytes());
        b.extend_from_slice(&word.to_le_bytes());
        b.extend_from_slice(&switches.to_le_bytes());
    }
    for w in [GROUP_MAGIC, tgid, walked, complete] {
        b.extend_from_slice(&w.to_le_bytes());
    }
    b
}

fn group_threads(bytes: &[u8]) -> Vec<ThreadRecord> {
    match parse_group(bytes).unwrap() {
        GroupAnswer::Threads(t) => t.collect(),
        GroupAnswer::TooMany => panic!("too many"),
    }
}

#[test]
fn a_group_walk_parses_whole_with_the_exit_state_unpacked() {
    let bytes = group_bytes(&[(10, 0x1, 7), (11, 0x2, 1), (12, 0x20 << 24, 3)], 10, 3, 1);
    let threads = group_threads(&bytes);
    assert_eq!(threads.len(), 3);
    assert_eq!(
        (threads[0].tid, threads[0].tgid, threads[0].switches),
        (10, 10, 7)
    );
    assert_eq!(
        threads.iter().map(|t| t.letter()).collect::<String>(),
        "SDZ"
    );
    // An exited process: no leader, no bytes, no threads.
    assert!(group_threads(&[]).is_empty());
}

#[test]
fn a_cut_or_damaged_group_walk_is_an_error_or_too_many_never_a_short_answer() {
    let full: Vec<(u32, u32, u64)> = (0..GROUP_MAX_THREADS as u32).map(|t| (t, 1, 0)).collect();
    assert!(matches!(
        parse_group(&group_bytes(&full, 1, GROUP_MAX_THREADS as u32, 0)),
        Ok(GroupAnswer::TooMany)
    ));
    // Cut short by a fault: an error, not the threads read so far.
    assert!(parse_group(&group_bytes(&[(1, 1, 0)], 1, 1, 0)).is_err());
    // The trailer's count against the records, its magic, its length.
    assert!(parse_group(&group_bytes(&[(1, 1, 0)], 1, 2, 1)).is_err());
    let mut bad_magic = group_bytes(&[(1, 1, 0)], 1, 1, 1);
    bad_magic[16] ^= 0xff;
    assert!(parse_group(&bad_magic).is_err());
    let mut short = group_bytes(&[(1, 1, 0)], 1, 1, 1);
    short.pop();
    assert!(parse_group(&short).is_err());
    assert!(parse_group(&group_bytes(&[], 1, 0, 2)).is_err());
}

/// `count` threads of this process parked on a channel (state S) with small stacks; dropping the
/// sender ends them.
fn park_threads(
    count: usize,
) -> (
    std::sync::mpsc::Sender<()>,
    Vec<std::thread::JoinHandle<()>>,
    Vec<i32>,
) {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let handles = (0..count)
        .map(|_| {
            let (rx, ready) = (rx.clone(), ready_tx.clone());
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    ready.send(nix::unistd::gettid().as_raw()).unwrap();
                    // Each thread waits its turn for the lock, then for a message that never comes.
                    let _ = rx.lock().map(|rx| rx.recv());
                })
                .unwrap()
        })
        .collect();
    let tids = (0..count).map(|_| ready_rx.recv().unwrap()).collect();
    (tx, handles, tids)
}

/// The real kernel: the group walk lists the same threads as the per-thread program, with the same
/// letters and, for the parked ones, the same switch counts.
#[test]
fn the_group_walk_and_the_per_thread_iterator_list_the_same_threads() {
    let Some(iter) =
        load_for_test("the_group_walk_and_the_per_thread_iterator_list_the_same_threads")
    else {
        return;
    };
    assert!(
        iter.walks_groups(),
        "this kernel (>= 6.1, BTF) loads the group walk"
    );
    let (stop, handles, tids) = park_threads(50);
    let me = std::process::id() as i32;
    // Asleep before the reads (a thread that has said it is ready may still be on its way to the lock).
    let root = crate::ProcRoot::default();
    for &tid in &tids {
        crate::frozen_fs::wait_for_state(&root, me, tid, 'S', std::time::Duration::from_secs(10))
            .unwrap();
    }
    let mut group = iter.watch(me).unwrap();
    assert!(group.walks_group());
    let mut per_thread = iter.watch_per_thread(me).unwrap();
    assert!(!per_thread.walks_group());
    // Other test threads come and go: compare the parked threads, which stay asleep.
    let by_tid = |records: Vec<ThreadRecord>| {
        records
            .into_iter()
            .map(|r| (r.tid, r))
            .collect::<std::collections::HashMap<_, _>>()
    };
    let (walked, listed) = (
        by_tid(records_of(&mut group)),
        by_tid(records_of(&mut per_thread)),
    );
    assert!(walked.values().all(|r| r.tgid == me));
    for tid in tids {
        let (w, l) = (walked.get(&tid), listed.get(&tid));
        let (Some(w), Some(l)) = (w, l) else {
            panic!("parked thread {tid}: walked {w:?}, listed {l:?}");
        };
        assert!(w.asleep() && l.asleep(), "tid {tid}: {w:?} {l:?}");
        assert_eq!(w.switches, l.switches, "tid {tid}");
    }
    drop(stop);
    for h in handles {
        h.join().unwrap();
    }
}

/// A process of more threads than one walk can write is asked per thread from then on, and every thread
/// is listed either way.
#[test]
fn a_group_too_large_for_one_walk_is_asked_per_thread() {
    let Some(iter) = load_for_test("a_group_too_large_for_one_walk_is_asked_per_thread") else {
        return;
    };
    let (stop, handles, _) = park_threads(GROUP_MAX_THREADS + 50);
    let me = std::process::id() as i32;
    let mut threads = iter.watch(me).unwrap();
    assert!(threads.walks_group());
    let mut raw = Vec::new();
    threads.read(&mut raw).unwrap();
    assert!(matches!(parse_group(&raw), Ok(GroupAnswer::TooMany)));
    let records = records_of(&mut threads);
    assert!(!threads.walks_group(), "asked per thread from now on");
    assert!(records.len() > GROUP_MAX_THREADS + 50, "{}", records.len());
    assert!(records.iter().all(|r| r.tgid == me));
    drop(stop);
    for h in handles {
        h.join().unwrap();
    }
}
