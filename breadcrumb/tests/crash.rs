//! A worker that never returns from its driver call: a child process records `enter`, then is
//! SIGKILLed (or SIGSTOPped) before `exit`. The reader, from outside, must name that call as in
//! flight with its arguments. The child is this test binary re-executed (`child_entry` below).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use breadcrumb::{read_ring, Args, Call, ReadOptions, RecordKind, Writer};

const CHILD_RING: &str = "WEDGE_BREADCRUMB_TEST_CHILD_RING";

fn stuck_args() -> Args {
    Args {
        bytes: 4 << 20,
        ptr: 0x7f12_3400_0000,
        ptr2: 0x5566_0000,
        stream: 0x42,
        chunk: 12,
        chunk_count: 53,
        tensor_first: 300,
        tensor_count: 9,
    }
}

/// Not a test of its own: the body of the re-executed child. Does nothing unless the parent set
/// `WEDGE_BREADCRUMB_TEST_CHILD_RING`.
#[test]
fn child_entry() {
    let Some(path) = std::env::var_os(CHILD_RING) else {
        return;
    };
    let writer = Writer::create(Path::new(&path), 64).expect("child creates its ring");
    for chunk in 0..12 {
        let args = Args {
            chunk,
            chunk_count: 53,
            ..stuck_args()
        };
        let token = writer.enter(
            Call::CuMemcpyHtoD_v2,
            &args,
            &format!("bulkUpload chunk {chunk}/53"),
        );
        writer.exit(token, 0);
    }
    let _token = writer.enter(
        Call::CuMemcpyHtoD_v2,
        &stuck_args(),
        "bulkUpload chunk 12/53",
    );
    println!("\nWEDGE_CHILD_READY");
    // The "driver call" that never returns.
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

fn spawn_child(ring: &Path) -> Child {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD_RING, ring)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("re-exec the test binary");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    loop {
        match lines.next() {
            Some(Ok(line)) if line.contains("WEDGE_CHILD_READY") => break,
            Some(Ok(_)) => continue,
            other => {
                let _ = child.kill();
                panic!("child ended before it was ready: {other:?}");
            }
        }
    }
    child
}

fn assert_stuck_call_named(ring: &Path, child_pid: u32) {
    let snapshot =
        read_ring(ring, &ReadOptions::strict(None)).expect("reader reads the dead worker's ring");
    assert_eq!(snapshot.header.writer_pid, child_pid);
    assert_eq!(snapshot.in_flight.len(), 1, "{:?}", snapshot.in_flight);
    let stuck = &snapshot.in_flight[0];
    assert_eq!(stuck.call, "cuMemcpyHtoD_v2");
    assert_eq!(stuck.call_id, Call::CuMemcpyHtoD_v2.id());
    assert_eq!(stuck.args, stuck_args());
    assert_eq!(stuck.label, "bulkUpload chunk 12/53");
    assert_eq!(snapshot.same_boot, Some(true));
    assert!(stuck.age_ns.is_some());
    let last = snapshot.records.last().unwrap();
    assert_eq!((last.kind, last.seq), (RecordKind::Enter, stuck.seq));
    // 25 records in the worker thread's 16-slot lane (64 slots, 4 lanes): it wrapped, and the
    // call in flight is still found.
    assert_eq!(snapshot.header.lane_slots(), 16);
    assert_eq!(snapshot.records.len(), 16);
    assert!(snapshot
        .records
        .iter()
        .all(|r| r.lane == last.lane && r.lane != 0));
}

#[test]
fn sigkilled_worker_leaves_its_call_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let ring = dir.path().join("killed.ring");
    let mut child = spawn_child(&ring);
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(!status.success());
    assert_stuck_call_named(&ring, child.id());
}

#[test]
fn stopped_worker_is_read_without_its_help() {
    let dir = tempfile::tempdir().unwrap();
    let ring = dir.path().join("stopped.ring");
    let mut child = spawn_child(&ring);
    let pid = child.id() as libc::pid_t;
    // SAFETY: signalling our own child, which has not been reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let result = std::panic::catch_unwind(|| assert_stuck_call_named(&ring, child.id()));
    let _ = child.kill();
    let _ = child.wait();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
