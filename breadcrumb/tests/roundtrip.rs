//! Writer → file → reader, single process: records, order, in-flight calls, header, wrap-around.

use breadcrumb::{
    parse_ring, read_ring, read_ring_with_bytes, Args, Call, Error, ReadOptions, RecordKind, Writer,
};

fn upload_args(chunk: u32) -> Args {
    Args {
        bytes: 4 << 20,
        ptr: 0x7f00_0000_0000 + u64::from(chunk) * (4 << 20),
        ptr2: 0x5500_0000,
        stream: 0xabc,
        chunk,
        chunk_count: 53,
        tensor_first: 100,
        tensor_count: 7,
    }
}

#[test]
fn records_come_back_in_order_with_their_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.ring");
    let writer = Writer::create(&path, 64).unwrap();
    assert_eq!(writer.path(), path);
    let token = writer.enter(
        Call::CuMemAlloc_v2,
        &Args {
            bytes: 1 << 30,
            ..Args::default()
        },
        "weights",
    );
    writer.exit(token, 0);
    let token = writer.enter(
        Call::CuMemcpyHtoD_v2,
        &upload_args(12),
        "bulkUpload chunk 12/53",
    );
    writer.exit(token, 700);
    let open = writer.enter(
        Call::CuStreamSynchronize,
        &Args {
            stream: 0xabc,
            ..Args::default()
        },
        "sync",
    );

    let snapshot = read_ring(&path, &ReadOptions::default()).unwrap();
    assert_eq!(snapshot.header.writer_pid, std::process::id());
    assert_eq!(snapshot.header.slot_count, 64);
    assert_eq!(snapshot.header.head, 5);
    assert_eq!(snapshot.header.version, 2);
    assert_eq!(snapshot.header.clock, "CLOCK_MONOTONIC");
    assert_eq!(
        snapshot.header.counter_kind != 0,
        writer.uses_counter(),
        "the header says how records are stamped"
    );
    assert_eq!(snapshot.torn_slots, 0);
    assert_eq!(snapshot.invalid_slots, 0);
    let calls: Vec<(&str, RecordKind)> = snapshot
        .records
        .iter()
        .map(|r| (r.call.as_str(), r.kind))
        .collect();
    assert_eq!(
        calls,
        [
            ("cuMemAlloc_v2", RecordKind::Enter),
            ("cuMemAlloc_v2", RecordKind::Exit),
            ("cuMemcpyHtoD_v2", RecordKind::Enter),
            ("cuMemcpyHtoD_v2", RecordKind::Exit),
            ("cuStreamSynchronize", RecordKind::Enter),
        ]
    );
    let copy = &snapshot.records[2];
    assert_eq!(copy.args, upload_args(12));
    assert_eq!(copy.label, "bulkUpload chunk 12/53");
    assert_eq!(snapshot.records[3].result, Some(700));
    assert_eq!(snapshot.records[3].enter_seq, Some(2));
    assert!(snapshot
        .records
        .windows(2)
        .all(|w| w[0].monotonic_ns <= w[1].monotonic_ns));

    assert_eq!(snapshot.in_flight.len(), 1);
    let stuck = &snapshot.in_flight[0];
    assert_eq!(stuck.call, "cuStreamSynchronize");
    assert_eq!(stuck.args.stream, 0xabc);
    assert_eq!(stuck.lane, open.lane());
    assert_eq!(Some(stuck.seq), open.index().map(|i| i & 0xFFFF_FFFF));
    assert_eq!(snapshot.same_boot, Some(true));
    assert!(stuck.age_ns.is_some());

    assert_eq!(snapshot.last(2).len(), 2);
    assert_eq!(snapshot.last(2)[1].call, "cuStreamSynchronize");
    assert_eq!(snapshot.last(100).len(), 5);

    // The copied bytes parse to the same records.
    let (again, bytes) = read_ring_with_bytes(&path, &ReadOptions::default()).unwrap();
    let parsed = parse_ring(&bytes, &ReadOptions::default()).unwrap();
    assert_eq!(parsed.records, again.records);
}

#[test]
fn wrap_around_keeps_exactly_the_last_slot_count_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wrap.ring");
    let writer = Writer::create(&path, 16).unwrap();
    for chunk in 0..1000u32 {
        let token = writer.enter(Call::CuMemcpyHtoDAsync_v2, &upload_args(chunk), "wrap");
        writer.exit(token, i64::from(chunk));
    }
    let snapshot = read_ring(&path, &ReadOptions::default()).unwrap();
    assert_eq!(snapshot.records.len(), 16);
    assert_eq!(snapshot.records[0].seq, 2000 - 16);
    assert_eq!(snapshot.records[15].seq, 1999);
    assert_eq!(snapshot.records[15].result, Some(999));
    assert!(snapshot.in_flight.is_empty(), "{:?}", snapshot.in_flight);
}

#[test]
fn long_labels_are_cut_and_status_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.ring");
    let writer = Writer::create(&path, 8).unwrap();
    writer.enter(Call::Custom, &Args::default(), &"ü".repeat(50));
    writer.set_status(
        -3,
        "CUPTI subscribe failed: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED",
    );
    let snapshot = read_ring(&path, &ReadOptions::default()).unwrap();
    assert_eq!(snapshot.records[0].label, "ü".repeat(20));
    assert_eq!(snapshot.records[0].call, "custom");
    assert_eq!(
        snapshot.header.status.as_deref(),
        Some("CUPTI subscribe failed: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED")
    );
    assert_eq!(snapshot.header.status_code, -3);
    writer.set_status(0, "");
    assert_eq!(
        read_ring(&path, &ReadOptions::default())
            .unwrap()
            .header
            .status,
        None
    );
}

#[test]
fn from_env_uses_the_directory_and_names_the_file_by_pid_and_start_time() {
    // Only this test touches these variables in this binary.
    let dir = tempfile::tempdir().unwrap();
    std::env::remove_var("WEDGE_CAPTURE_RING");
    std::env::set_var("WEDGE_CAPTURE_RING_DIR", dir.path());
    std::env::set_var("WEDGE_CAPTURE_RING_SLOTS", "32");
    let writer = Writer::from_env().unwrap().expect("configured");
    let name = writer
        .path()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        name.starts_with(&format!("{}-", std::process::id())),
        "{name}"
    );
    assert!(name.ends_with(".ring"));
    let snapshot = read_ring(writer.path(), &ReadOptions::default()).unwrap();
    assert_eq!(snapshot.header.slot_count, 32);
    assert_eq!(
        name,
        format!(
            "{}-{}.ring",
            std::process::id(),
            snapshot.header.start_time_ticks
        )
    );
    assert_eq!(
        snapshot.header.lane_count, 2,
        "32 slots: lanes of at least 16"
    );
    std::env::set_var("WEDGE_CAPTURE_RING_LANES", "8");
    std::env::set_var("WEDGE_CAPTURE_RING_CLOCK", "monotonic");
    let writer = Writer::from_env().unwrap().expect("configured");
    let snapshot = read_ring(writer.path(), &ReadOptions::default()).unwrap();
    assert_eq!(snapshot.header.lane_count, 8);
    assert_eq!(snapshot.header.counter_kind, 0, "monotonic: no counter");
    std::env::set_var("WEDGE_CAPTURE_RING_LANES", "3");
    assert!(matches!(Writer::from_env(), Err(Error::BadLaneCount)));
    std::env::remove_var("WEDGE_CAPTURE_RING_LANES");
    std::env::set_var("WEDGE_CAPTURE_RING_CLOCK", "fast");
    assert!(matches!(Writer::from_env(), Err(Error::Create(_))));
    std::env::remove_var("WEDGE_CAPTURE_RING_CLOCK");
    std::env::set_var("WEDGE_CAPTURE_RING_SLOTS", "12");
    assert!(matches!(Writer::from_env(), Err(Error::BadSlotCount)));
    std::env::remove_var("WEDGE_CAPTURE_RING_DIR");
    std::env::remove_var("WEDGE_CAPTURE_RING_SLOTS");
    assert!(Writer::from_env().unwrap().is_none());
}

#[test]
fn coarse_clock_rings_say_so_and_still_age_their_calls() {
    use breadcrumb::identity::ProcessIdentity;
    use breadcrumb::{RingClock, WriterOptions};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("coarse.ring");
    let options = WriterOptions {
        slot_count: 8,
        clock: RingClock::MonotonicCoarse,
        ..WriterOptions::default()
    };
    let writer = Writer::create_with(&path, &options, &ProcessIdentity::current()).unwrap();
    writer.enter(Call::CuCtxSynchronize, &Args::default(), "");
    let snapshot = read_ring(&path, &ReadOptions::default()).unwrap();
    assert_eq!(snapshot.header.clock, "CLOCK_MONOTONIC_COARSE");
    assert_eq!(snapshot.header.clock_id, 6);
    assert_eq!(snapshot.in_flight[0].call, "cuCtxSynchronize");
    assert!(snapshot.in_flight[0].age_ns.is_some());
}

#[test]
fn nested_calls_are_in_flight_but_a_gap_hides_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nest.ring");
    let writer = Writer::create(&path, 16).unwrap();
    writer.enter(Call::Custom, &Args::default(), "bulkUpload");
    writer.enter(Call::CuMemcpyHtoD_v2, &Args::default(), "chunk 0/1");
    let snapshot = read_ring(&path, &ReadOptions::default()).unwrap();
    let calls: Vec<&str> = snapshot.in_flight.iter().map(|c| c.call.as_str()).collect();
    assert_eq!(
        calls,
        ["custom", "cuMemcpyHtoD_v2"],
        "nested: both in flight"
    );

    // Same thread: enter A, (exit A unreadable), enter B. A must not be called in flight.
    let mut records = snapshot.records.clone();
    records[1].seq = 2; // leave index 1 missing between the two enters
    let in_flight = breadcrumb::in_flight_calls(&records, None);
    assert_eq!(in_flight.len(), 1);
    assert_eq!(in_flight[0].call, "cuMemcpyHtoD_v2");
}

#[test]
fn a_second_writer_can_append_to_an_existing_ring() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.ring");
    let first = Writer::create(&path, 32).unwrap();
    let token = first.enter(Call::CuInit, &Args::default(), "launcher");
    first.exit(token, 0);
    let second = Writer::open(&path).unwrap();
    assert_eq!(second.slot_count(), 32);
    let open = second.enter(Call::CuCtxSynchronize, &Args::default(), "worker");
    let snapshot = read_ring(&path, &ReadOptions::default()).unwrap();
    assert_eq!(snapshot.records.len(), 3);
    assert_eq!(snapshot.records[2].label, "worker");
    assert_eq!(snapshot.in_flight[0].seq, open.index().unwrap());

    let junk = dir.path().join("junk.ring");
    std::fs::write(&junk, b"not a ring").unwrap();
    assert!(matches!(Writer::open(&junk), Err(Error::BadMagic)));
    let mut short = std::fs::read(&path).unwrap();
    short.truncate(600);
    let cut = dir.path().join("cut.ring");
    std::fs::write(&cut, &short).unwrap();
    assert!(matches!(Writer::open(&cut), Err(Error::Truncated { .. })));
}

#[test]
fn a_forked_child_records_under_its_own_thread_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fork.ring");
    let writer = Writer::create(&path, 16).unwrap();
    writer.enter(Call::CuInit, &Args::default(), "parent"); // caches the parent's tid
                                                            // SAFETY: the child only records (no allocation, no locks: an atomic fetch_add, a CAS, stores,
                                                            // the gettid syscall) and leaves with _exit.
    let child = unsafe { libc::fork() };
    assert!(child >= 0);
    if child == 0 {
        writer.enter(Call::CuInit, &Args::default(), "child");
        // SAFETY: _exit is async-signal-safe and never returns.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    let snapshot = read_ring(&path, &ReadOptions::default()).unwrap();
    let by_label: std::collections::HashMap<&str, u32> = snapshot
        .records
        .iter()
        .map(|r| (r.label.as_str(), r.tid))
        .collect();
    assert_eq!(
        by_label["child"], child as u32,
        "the child's records carry its own tid"
    );
    assert_ne!(by_label["parent"], by_label["child"]);
}

#[test]
fn an_unlinked_ring_is_still_readable_through_the_writers_fd() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gone.ring");
    let writer = Writer::create(&path, 16).unwrap();
    writer.enter(Call::CuLaunchKernel, &Args::default(), "still here");
    let inode = std::fs::metadata(&path).unwrap().ino();
    std::fs::remove_file(&path).unwrap();
    // Find the fd the writer keeps open, as the agent does for a worker.
    let fd_dir = std::path::Path::new(breadcrumb::identity::SELF_PROC).join("self/fd");
    let link = std::fs::read_dir(&fd_dir)
        .unwrap()
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|link| {
            std::fs::metadata(link)
                .map(|m| m.ino() == inode)
                .unwrap_or(false)
        })
        .expect("the writer keeps its ring fd open");
    let snapshot = read_ring(&link, &ReadOptions::default()).unwrap();
    assert_eq!(snapshot.in_flight[0].label, "still here");
    assert!(matches!(
        read_ring(&link, &ReadOptions::strict(None)),
        Err(Error::Symlink { .. })
    ));
}

/// An exit recorded by another thread (another lane) closes its enter, even after the exiting
/// thread's lane wrapped and the exit record itself is gone.
#[test]
fn an_exit_from_another_thread_closes_its_enter_even_after_its_lane_wrapped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cross.ring");
    // 64 slots, 4 lanes of 16.
    let writer = Writer::create(&path, 64).unwrap();
    let token = writer.enter(Call::CuStreamSynchronize, &Args::default(), "handed over");
    let still_open = writer.enter(Call::CuCtxSynchronize, &Args::default(), "never exits");
    std::thread::scope(|scope| {
        scope.spawn(|| {
            writer.exit(token, 0);
            // Wrap this thread's lane so the exit record is overwritten.
            for chunk in 0..40 {
                let t = writer.enter(Call::CuMemcpyHtoDAsync_v2, &upload_args(chunk), "");
                writer.exit(t, 0);
            }
        });
    });
    let snapshot = read_ring(&path, &ReadOptions::default()).unwrap();
    assert!(
        !snapshot
            .records
            .iter()
            .any(|r| r.kind == RecordKind::Exit && r.enter_lane == Some(token.lane())),
        "the cross-lane exit record was overwritten"
    );
    let enter = snapshot
        .records
        .iter()
        .find(|r| r.lane == token.lane() && r.seq == 0)
        .unwrap();
    assert!(enter.closed, "closed in place: {enter:?}");
    let in_flight: Vec<&str> = snapshot
        .in_flight
        .iter()
        .map(|f| f.label.as_str())
        .collect();
    assert_eq!(in_flight, ["never exits"]);
    assert_eq!(snapshot.in_flight[0].lane, still_open.lane());
}

/// A child after fork does not write into its parent thread's lane: it claims its own.
#[test]
fn a_forked_child_claims_its_own_lane() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fork.ring");
    let writer = Writer::create(&path, 64).unwrap();
    let parent = writer.enter(Call::CuInit, &Args::default(), "parent");
    // SAFETY: the child only writes one record and leaves with _exit (no destructors, no locks).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let child = writer.enter(Call::CuInit, &Args::default(), "child");
        let code = if child.lane() != parent.lane() && child.lane() != 0 {
            0
        } else {
            1
        };
        // SAFETY: ends the forked child at once.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waiting for the child just forked.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child used the parent's lane"
    );
    let snapshot = read_ring(&path, &ReadOptions::default()).unwrap();
    let labels: Vec<(&str, u32)> = snapshot
        .in_flight
        .iter()
        .map(|f| (f.label.as_str(), f.lane))
        .collect();
    assert_eq!(labels.len(), 2, "{labels:?}");
    assert!(labels.contains(&("parent", parent.lane())));
}

/// Version-2 counter timestamps come back as CLOCK_MONOTONIC nanoseconds.
#[test]
fn counter_timestamps_read_as_monotonic_nanoseconds() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("time.ring");
    let writer = Writer::create(&path, 64).unwrap();
    let before = breadcrumb::identity::monotonic_ns();
    writer.enter(Call::CuInit, &Args::default(), "");
    std::thread::sleep(std::time::Duration::from_millis(20));
    writer.enter(Call::CuInit, &Args::default(), "");
    let after = breadcrumb::identity::monotonic_ns();
    let snapshot = read_ring(&path, &ReadOptions::default()).unwrap();
    let [first, second] = &snapshot.records[..] else {
        panic!("{:?}", snapshot.records);
    };
    assert!(
        before <= first.monotonic_ns + 100_000,
        "{before} vs {}",
        first.monotonic_ns
    );
    assert!(
        second.monotonic_ns <= after + 100_000,
        "{} vs {after}",
        second.monotonic_ns
    );
    let gap = second.monotonic_ns - first.monotonic_ns;
    assert!(
        (20_000_000..40_000_000).contains(&gap),
        "{gap} ns between records 20 ms apart"
    );
}

/// The one size limit: the largest ring the writer creates (2^20 slots in 4096 lanes) is exactly
/// `MAX_RING_BYTES`, and the default reader reads it, in-flight call included; one slot count more
/// is refused at the writer with a message that names the limit.
#[test]
fn the_largest_ring_the_writer_creates_is_read() {
    use breadcrumb::format::{self, MAX_LANE_COUNT, MAX_RING_BYTES, MAX_SLOT_COUNT};
    use breadcrumb::identity::ProcessIdentity;
    use breadcrumb::WriterOptions;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("largest.ring");
    let options = WriterOptions {
        slot_count: MAX_SLOT_COUNT,
        lane_count: MAX_LANE_COUNT,
        ..WriterOptions::default()
    };
    let writer = Writer::create_with(&path, &options, &ProcessIdentity::current()).unwrap();
    writer.enter(
        Call::CuCtxSynchronize,
        &Args::default(),
        "largest ring in flight",
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), MAX_RING_BYTES);
    assert_eq!(
        MAX_RING_BYTES,
        format::ring_len(MAX_SLOT_COUNT, MAX_LANE_COUNT)
    );
    assert_eq!(breadcrumb::reader::DEFAULT_MAX_FILE_BYTES, MAX_RING_BYTES);
    let snapshot = read_ring(&path, &ReadOptions::default()).unwrap();
    assert_eq!(snapshot.header.slot_count, MAX_SLOT_COUNT);
    assert_eq!(snapshot.in_flight.len(), 1);
    assert_eq!(snapshot.in_flight[0].label, "largest ring in flight");
    assert_eq!(snapshot.torn_slots, 0);

    let too_large = WriterOptions {
        slot_count: MAX_SLOT_COUNT * 2,
        ..WriterOptions::default()
    };
    let err = Writer::create_with(
        &dir.path().join("over.ring"),
        &too_large,
        &ProcessIdentity::current(),
    )
    .unwrap_err();
    assert!(matches!(err, Error::RingTooLarge { .. }), "{err}");
    assert!(err.to_string().contains("at most 1048576 slots"), "{err}");
    assert!(!dir.path().join("over.ring").exists());
}

/// The agent's read (`keep_records`: the newest 256) finds the same calls in flight as a full read of
/// a wrapped ring written by several threads, nested calls and cross-thread exits included, and keeps
/// exactly the newest records.
#[test]
fn a_read_keeping_the_newest_records_finds_the_same_calls_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("many.ring");
    let writer = Writer::create(&path, 1024).unwrap();
    std::thread::scope(|scope| {
        for thread in 0..8u32 {
            let writer = &writer;
            scope.spawn(move || {
                for n in 0..500u32 {
                    let outer = writer.enter(Call::CuMemcpyHtoD_v2, &upload_args(n), "outer");
                    let inner = writer.enter(Call::CuCtxSynchronize, &Args::default(), "inner");
                    writer.exit(inner, 0);
                    if !(n == 499 && thread % 2 == 0) {
                        writer.exit(outer, 0);
                    }
                }
                // Left open: nested, the inner one in flight too for odd threads.
                let open = writer.enter(Call::CuMemAlloc_v2, &Args::default(), "left open");
                if thread % 3 == 0 {
                    writer.exit(open, 0);
                }
            });
        }
    });
    let options = ReadOptions {
        compute_age: false,
        ..ReadOptions::default()
    };
    let full = read_ring(&path, &options).unwrap();
    assert!(!full.in_flight.is_empty());
    for keep in [0, 256, usize::MAX] {
        let limited = read_ring(
            &path,
            &ReadOptions {
                keep_records: Some(keep),
                ..options.clone()
            },
        )
        .unwrap();
        assert_eq!(limited.in_flight, full.in_flight, "keep {keep}");
        let start = full.records.len().saturating_sub(keep);
        assert_eq!(limited.records, full.records[start..]);
        assert_eq!(limited.records_omitted, start as u64);
    }
}
