//! 8 writer threads hammer one ring while a reader reads it concurrently through the file.
//!
//! Every record carries redundant, cross-checkable content (thread number, per-thread counter in
//! several fields), so a torn record that slipped through validation would be caught here. The
//! default is the full 8 × 1,000,000 records (an enter and an exit are 2 records), about
//! 5 s in a debug build on 2 cores; `WEDGE_STRESS_RECORDS=<n per thread>` scales it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use breadcrumb::identity::ProcessIdentity;
use breadcrumb::{
    read_ring, Args, Call, ReadOptions, RecordKind, RingSnapshot, Writer, WriterOptions,
};

const THREADS: u64 = 8;
const NOT_STARTED: u64 = u64::MAX;

fn records_per_thread() -> u64 {
    let default = 1_000_000;
    std::env::var("WEDGE_STRESS_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn args_for(thread: u64, counter: u64) -> Args {
    Args {
        bytes: counter,
        ptr: (thread << 40) | counter,
        ptr2: !counter,
        stream: thread,
        chunk: counter as u32,
        chunk_count: thread as u32,
        tensor_first: (counter >> 32) as u32,
        tensor_count: 0x5eed,
    }
}

/// Checks one snapshot; `completed_before[t]` = last counter whose exit had returned before the
/// read began. Returns the number of records checked.
fn check_snapshot(
    snapshot: &RingSnapshot,
    tid_thread: &HashMap<u32, u64>,
    completed_before: &[u64],
) -> usize {
    let mut last_per_thread: HashMap<u32, (u64, u8)> = HashMap::new();
    let mut enter_counter: HashMap<(u32, u64), (u32, u64)> = HashMap::new();
    for record in &snapshot.records {
        let thread = *tid_thread
            .get(&record.tid)
            .unwrap_or_else(|| panic!("record from unknown tid {}: {record:?}", record.tid));
        let (counter, order) = match record.kind {
            RecordKind::Enter => {
                assert_eq!(
                    record.args,
                    args_for(thread, record.args.bytes),
                    "torn enter: {record:?}"
                );
                assert_eq!(
                    record.label,
                    format!("writer {thread}"),
                    "torn label: {record:?}"
                );
                assert_eq!(record.call, "cuMemcpyHtoDAsync_v2");
                enter_counter.insert((record.lane, record.seq), (record.tid, record.args.bytes));
                (record.args.bytes, 0)
            }
            RecordKind::Exit => {
                assert_eq!(record.args, Args::default(), "torn exit: {record:?}");
                assert!(record.label.is_empty());
                let counter = record.result.expect("exit has a result") as u64;
                let enter_lane = record.enter_lane.unwrap_or(record.lane);
                let enter_seq = record.enter_seq.expect("exit names its enter");
                if let Some(&(tid, entered)) = enter_counter.get(&(enter_lane, enter_seq)) {
                    assert_eq!(
                        (tid, entered),
                        (record.tid, counter),
                        "exit matches its enter: {record:?}"
                    );
                }
                (counter, 1)
            }
        };
        if let Some(&previous) = last_per_thread.get(&record.tid) {
            assert!(
                (counter, order) > previous,
                "per-thread order broken for tid {}: {previous:?} then {:?}",
                record.tid,
                (counter, order)
            );
        }
        last_per_thread.insert(record.tid, (counter, order));
    }
    let mut seen_threads = HashMap::new();
    for call in &snapshot.in_flight {
        let thread = tid_thread[&call.tid];
        assert!(
            seen_threads.insert(call.tid, ()).is_none(),
            "two calls in flight on one thread"
        );
        let completed = completed_before[thread as usize];
        assert!(
            completed == NOT_STARTED || call.args.bytes > completed,
            "thread {thread} had completed call {completed} before the read, yet call {} is reported in flight",
            call.args.bytes
        );
    }
    snapshot.records.len()
}

/// The default ring: 64 lanes, so each of the 8 writers has a lane of its own.
#[test]
fn eight_writers_and_a_concurrent_reader() {
    stress(0);
}

/// 4 lanes: 3 writers get a lane of their own, the other 5 share lane 0 (the claim protocol).
#[test]
fn eight_writers_on_four_lanes_and_a_concurrent_reader() {
    stress(4);
}

fn stress(lane_count: u32) {
    let per_thread = records_per_thread();
    let iterations = per_thread / 2;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stress.ring");
    let options = WriterOptions {
        slot_count: 4096,
        lane_count,
        ..WriterOptions::default()
    };
    let writer =
        Arc::new(Writer::create_with(&path, &options, &ProcessIdentity::current()).unwrap());
    let completed: Arc<Vec<AtomicU64>> =
        Arc::new((0..THREADS).map(|_| AtomicU64::new(NOT_STARTED)).collect());
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let done = Arc::new(AtomicBool::new(false));
    // Writers start only once the reader has completed its first read.
    let start = Arc::new(std::sync::Barrier::new(THREADS as usize + 1));

    let writers: Vec<_> = (0..THREADS)
        .map(|thread| {
            let writer = Arc::clone(&writer);
            let completed = Arc::clone(&completed);
            let tid_tx = tid_tx.clone();
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
                tid_tx.send((tid, thread)).unwrap();
                let label = format!("writer {thread}");
                start.wait();
                for counter in 0..iterations {
                    let token = writer.enter(
                        Call::CuMemcpyHtoDAsync_v2,
                        &args_for(thread, counter),
                        &label,
                    );
                    writer.exit(token, counter as i64);
                    completed[thread as usize].store(counter, Ordering::Release);
                }
            })
        })
        .collect();
    drop(tid_tx);
    let tid_thread: HashMap<u32, u64> = tid_rx.iter().take(THREADS as usize).collect();
    assert_eq!(tid_thread.len(), THREADS as usize);

    let reader = {
        let path = path.clone();
        let completed = Arc::clone(&completed);
        let done = Arc::clone(&done);
        let tid_thread = tid_thread.clone();
        let start = Arc::clone(&start);
        std::thread::spawn(move || {
            let (mut reads, mut records, mut torn) = (0u64, 0usize, 0u64);
            let mut started = false;
            while !done.load(Ordering::Acquire) || !started {
                let before: Vec<u64> = completed
                    .iter()
                    .map(|c| c.load(Ordering::Acquire))
                    .collect();
                let snapshot = read_ring(&path, &ReadOptions::default()).expect("live ring reads");
                assert_eq!(snapshot.invalid_slots, 0, "a slot failed validation");
                records += check_snapshot(&snapshot, &tid_thread, &before);
                torn += snapshot.torn_slots;
                reads += 1;
                if !started {
                    started = true;
                    start.wait();
                }
            }
            (reads, records, torn)
        })
    };

    for handle in writers {
        handle.join().expect("writer thread");
    }
    done.store(true, Ordering::Release);
    let (reads, records, torn) = reader.join().expect("reader thread checks passed");
    eprintln!(
        "stress: {THREADS} threads x {per_thread} records; {reads} concurrent reads checked {records} records, skipped {torn} torn slots"
    );
    assert!(reads > 1, "the reader never ran while writers wrote");

    let finished = read_ring(&path, &ReadOptions::default()).unwrap();
    let all_completed: Vec<u64> = completed
        .iter()
        .map(|c| c.load(Ordering::Acquire))
        .collect();
    check_snapshot(&finished, &tid_thread, &all_completed);
    assert!(
        finished.in_flight.is_empty(),
        "completed calls reported in flight: {:?}",
        finished.in_flight
    );
    assert_eq!(finished.torn_slots, 0);
    assert_eq!(finished.invalid_slots, 0);
    assert_eq!(finished.header.dropped, 0);
    // Shared-lane indices whose slot was still busy (a preempted writer) or already newer are
    // skipped, so the heads count claims, not records. A thread's own lane skips nothing.
    let written = THREADS * iterations * 2;
    let skipped = finished.header.head - written;
    assert!(finished.header.head >= written);
    let lane_slots = u64::from(finished.header.lane_slots());
    let lanes_used: std::collections::BTreeSet<u32> =
        finished.records.iter().map(|r| r.lane).collect();
    assert!(finished.records.len() <= 4096);
    assert!(
        finished.records.len() as u64 + skipped >= lanes_used.len() as u64 * lane_slots,
        "{} records in {} lanes of {lane_slots}",
        finished.records.len(),
        lanes_used.len()
    );
    if lane_count == 0 {
        // Each thread's last records survive, however much the others wrote after it.
        let threads_seen: std::collections::BTreeSet<u32> =
            finished.records.iter().map(|r| r.tid).collect();
        assert_eq!(threads_seen.len(), THREADS as usize);
        assert_eq!(skipped, 0, "own lanes never skip an index");
        assert_eq!(finished.records.len() as u64, THREADS * lane_slots);
    }
    eprintln!("stress: {skipped} indices skipped over busy or newer slots, 0 records dropped");
}
