//! The verdict and report.md with a wait graph (issue 36): the lock the judged thread waits for is read
//! first, with its holder and the holder's breadcrumb; a waiter's own call is never offered as the cause.
//!
//! The shape of the H100 `MAP_POPULATE` run: thread 20 maps 32 GiB with MAP_POPULATE (running, holding the
//! mmap_lock for reading, no breadcrumb of its own: plain mmap), threads 21 and 22 wait in D in
//! `cuMemAllocManaged` → `mmap`. 22's breadcrumb is the oldest in the ring: the verdict of 1e849ad blamed it.

use reports::model::Incident;

fn incident(with_graph: bool) -> Incident {
    let crumb = |tid: u32, seq: u64, entered: u64| {
        serde_json::json!({
            "tid": tid, "seq": seq, "call_id": 12, "call": "cuMemAllocManaged",
            "args": {"bytes": 2097152, "ptr": 0, "ptr2": 0, "stream": 0, "chunk": 0, "chunk_count": 0,
                     "tensor_first": 0, "tensor_count": 0},
            "label": "", "entered_monotonic_ns": entered, "age_ns": 100_000_000_000u64 - entered
        })
    };
    let waiter = |tid: i32| {
        serde_json::json!({
            "tid": tid, "comm": "worker", "state": "D", "wchan": "vm_mmap_pgoff",
            "syscall": {"nr": 9, "name": "mmap", "args": ["0x0", "0x200000", "0x3", "0x22", "0xffffffff", "0x0"],
                        "sp": "0x1", "pc": "0x2"},
            "stack": [{"function": "vm_mmap_pgoff", "offset": 231, "size": 560, "module": null}],
            "site": "mmap … vm_mmap_pgoff (waits for mmap_lock)", "waits_for": "mmap_lock"
        })
    };
    let graph = serde_json::json!({
        "records": "kernel blocker records (task_struct::blocker) of 300 tasks",
        "kernel_records": true,
        "locks": [{
            "id": "L1", "kind": "rwsem", "address": "0xffff888100000040",
            "name": "the mmap_lock of pid 20 (trainer)",
            "identity": {"class": "mmap_lock", "pid": 20, "comm": "trainer"},
            "holders": [{"tid": 20, "pid": 20, "comm": "trainer", "mode": "read", "evidence": "last_reader",
                         "state": "R", "doing": "running in the kernel in mmap (6 of 6 samples over 1.0 s, 1.00 s of system time)",
                         "inside_samples": [6, 6], "call": "mmap"}],
            "readers": 1,
            "waiters": [
                {"tid": 21, "pid": 20, "comm": "worker", "mode": "write", "state": "D", "call": "mmap", "by": "stack", "waited_s": 9.0},
                {"tid": 22, "pid": 20, "comm": "worker", "mode": "write", "state": "D", "call": "mmap", "by": "stack", "waited_s": 9.6}
            ]
        }]
    });
    let value = serde_json::json!({
        "schema": "wedge-capture.incident", "schema_version": 2, "id": "x", "complete": true,
        "process": {"pid": 20, "comm": "trainer"},
        "wedged_threads": [{
            "tid": 21, "comm": "worker",
            "d_since": {"monotonic_ns": 90_000_000_000u64},
            "detected_at": {"monotonic_ns": 100_000_000_000u64},
            "at_detection": waiter(21)
        }],
        "samples": [{"taken_at": {"monotonic_ns": 100_000_000_000u64},
                     "snapshot": {"pid": 20, "arch": "x86_64", "threads": [waiter(21), waiter(22)]}}],
        "ring": {"read_at": {"monotonic_ns": 100_000_000_000u64},
                 "records": [], "in_flight": [crumb(21, 5, 91_000_000_000), crumb(22, 3, 90_400_000_000)]},
        "wait_graph": if with_graph { graph } else { serde_json::Value::Null }
    });
    serde_json::from_value(value).unwrap()
}

#[test]
fn without_a_graph_the_oldest_breadcrumb_of_a_waiter_is_offered() {
    // 21 has a call of its own: that one, its own, is named; the bug was the stand-in for a thread without.
    let mut i = incident(false);
    i.ring.as_mut().unwrap().in_flight.retain(|f| f.tid != 21);
    let v = reports::verdict::verdict(&i);
    assert!(v.contains("on thread 22"), "{v}");
}

#[test]
fn with_a_graph_the_holder_is_read_first_and_no_waiter_is_blamed() {
    let mut i = incident(true);
    i.ring.as_mut().unwrap().in_flight.retain(|f| f.tid != 21);
    let v = reports::verdict::verdict(&i);
    assert!(
        v.starts_with(
            "2 threads wait for the mmap_lock of pid 20 (`trainer`) (for writing, in mmap); held for reading by \
             tid 20 `trainer` (the kernel's last reader), running in the kernel in mmap (6 of 6 samples"
        ),
        "{v}"
    );
    assert!(
        v.contains("held for at least 9.6 s (the longest wait)"),
        "{v}"
    );
    assert!(
        !v.contains("on thread 22"),
        "a waiter's call offered as the cause: {v}"
    );
    assert!(!v.contains("cuMemAllocManaged"), "{v}");
    assert!(!v.contains("more thread"), "{v}");
    let md = reports::render::markdown(&i);
    assert!(md.contains("### Wait graph"), "{md}");
    assert!(
        md.contains(
            "| waits for | the mmap_lock of pid 20 (`trainer`) (L1), held for reading by tid 20"
        ),
        "{md}"
    );
    assert!(
        md.contains("Wait graph: every lock, holder and waiter"),
        "{md}"
    );
}
