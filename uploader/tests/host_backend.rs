//! End-to-end uploads through the host backend: every strategy verifies, failures are
//! all-or-nothing, and the breadcrumb ring holds an enter and an exit for every driver call.

use std::sync::Arc;

use breadcrumb::identity::ProcessIdentity;
use breadcrumb::{read_ring, ReadOptions, RecordKind, Writer, WriterOptions};
use uploader::host::{HostConfig, HostDriver};
use uploader::outcome::StrategyKind;
use uploader::plan::{plan, PlanOptions, Planned};
use uploader::strategy::upload;
use uploader::verify::verify;
use uploader::workload::{Workload, WorkloadSpec};
use uploader::{CallKind, Driver, Error, TensorSource, Traced};

mod support;

use support::{assert_all_released, small_plan, small_workload, strategy};

#[test]
fn every_strategy_uploads_and_verifies() {
    let w = small_workload();
    let p = small_plan(&w);
    assert!(
        p.chunks.len() > 40,
        "want many chunks, got {}",
        p.chunks.len()
    );
    for kind in StrategyKind::ALL {
        let d = HostDriver::default();
        let t = Traced::open(&d, None, 0).unwrap();
        let mut last = None;
        let up = upload(&t, &strategy(kind), &w, &p, &mut |pr| last = Some(*pr)).unwrap();
        let last = last.expect("progress reported");
        assert_eq!(last.done, last.count);
        assert_eq!(last.bytes_done, last.bytes_total);
        assert_eq!(up.views.len(), w.len());
        let report = verify(&t, &up, &w).unwrap();
        assert_eq!(report.tensors, w.len());
        assert_eq!(report.bytes, p.tensor_bytes);
        up.free(&t).unwrap();
        t.close().unwrap();
        assert_all_released(&d);
        assert_eq!(
            t.calls(),
            d.total_calls(),
            "{kind:?}: every driver call goes through Traced"
        );
        match kind {
            StrategyKind::Ztensor => {
                // ztensor: per chunk exactly one alloc and one synchronous copy.
                assert_eq!(d.calls(CallKind::MemAlloc), p.chunks.len() as u64);
                assert_eq!(d.calls(CallKind::MemcpyHtoD), p.chunks.len() as u64);
                assert_eq!(d.calls(CallKind::MemcpyHtoDAsync), 0);
            }
            StrategyKind::Managed => {
                assert_eq!(d.calls(CallKind::MemAllocManaged), p.chunks.len() as u64);
                assert_eq!(d.calls(CallKind::MemPrefetchAsync), p.chunks.len() as u64);
            }
            StrategyKind::Pinned => {
                // One arena from the session's pool, handed back to it, the pool destroyed
                // by close.
                assert_eq!(d.calls(CallKind::MemAlloc), 0);
                assert_eq!(d.calls(CallKind::MemAllocFromPoolAsync), 1);
                assert_eq!(d.calls(CallKind::MemFreeAsync), 1);
                assert_eq!(d.calls(CallKind::MemPoolCreate), 1);
                assert_eq!(d.calls(CallKind::MemPoolDestroy), 1);
                // The default `Overlap` staging: one registration per group of buffers, each
                // undone once.
                let buffers = strategy(kind).pinned.buffers;
                let groups = uploader::pinned::registration_groups(buffers).len() as u64;
                assert_eq!(d.calls(CallKind::MemHostRegister), groups);
                assert_eq!(d.calls(CallKind::MemHostUnregister), groups);
                assert_eq!(d.calls(CallKind::MemHostAlloc), 0);
                assert!(d.calls(CallKind::EventSynchronize) > 10);
            }
        }
    }
}

#[test]
fn verify_detects_a_corrupted_tensor() {
    let w = small_workload();
    let p = small_plan(&w);
    let d = HostDriver::default();
    let t = Traced::open(&d, None, 0).unwrap();
    let up = upload(&t, &strategy(StrategyKind::Ztensor), &w, &p, &mut |_| {}).unwrap();
    let victim = up.views[123];
    // SAFETY: the view lies in a live allocation of the host driver.
    unsafe { d.memcpy_htod(victim.device_ptr + 8, &[0u8; 4]) }.unwrap();
    match verify(&t, &up, &w) {
        Err(Error::VerifyMismatch { tensor, offset, .. }) => {
            assert_eq!(tensor, victim.tensor);
            assert_eq!(offset, 8);
        }
        other => panic!("expected a mismatch, got {other:?}"),
    }
    up.free(&t).unwrap();
}

/// The host driver performs async copies only at synchronization, like a GPU that is behind:
/// a staging buffer rewritten before its event is waited for uploads the wrong bytes.
#[test]
fn host_driver_defers_async_copies_until_synchronized() {
    let d = HostDriver::default();
    let t = Traced::open(&d, None, 0).unwrap();
    let site = uploader::trace::Site::plain("test");
    let stream = t.stream_create(&site).unwrap();
    let event = t.event_create(&site).unwrap();
    let host = t.host_alloc_pinned(&site, 4).unwrap();
    let dev = t.mem_alloc(&site, 4).unwrap();
    // SAFETY: all handles and buffers are live and 4 bytes long.
    unsafe {
        std::ptr::copy_nonoverlapping([1u8, 2, 3, 4].as_ptr(), host, 4);
        t.memcpy_htod_async(&site, dev, host, 4, stream).unwrap();
        t.event_record(&site, event, stream).unwrap();
        std::ptr::copy_nonoverlapping([9u8, 9, 9, 9].as_ptr(), host, 4); // too early!
        t.event_synchronize(&site, event).unwrap();
        let mut back = [0u8; 4];
        t.memcpy_dtoh(&site, &mut back, dev).unwrap();
        assert_eq!(back, [9, 9, 9, 9]);
        t.mem_free(&site, dev, 4).unwrap();
        t.host_free_pinned(&site, host, 4).unwrap();
        t.event_destroy(&site, event).unwrap();
        t.stream_destroy(&site, stream).unwrap();
    }
    assert_all_released(&d);
}

/// Chunk k fails: the error names it, and nothing the upload allocated is left behind.
#[test]
fn failure_at_chunk_k_frees_everything() {
    let w = small_workload();
    let p = small_plan(&w);
    let cases: &[(StrategyKind, CallKind, u64, &str, u32)] = &[
        (StrategyKind::Ztensor, CallKind::MemAlloc, 7, "chunk", 6),
        (StrategyKind::Ztensor, CallKind::MemcpyHtoD, 12, "chunk", 11),
        (
            StrategyKind::Managed,
            CallKind::MemAllocManaged,
            9,
            "chunk",
            8,
        ),
        (
            StrategyKind::Managed,
            CallKind::MemPrefetchAsync,
            3,
            "chunk",
            2,
        ),
        (
            StrategyKind::Pinned,
            CallKind::MemcpyHtoDAsync,
            10,
            "slice",
            9,
        ),
        // With 2 buffers: after each submission the oldest copy is queried (the host driver
        // answers "not ready" to every other query) and waited for only when both buffers hold
        // copies. That makes the 4th wait the one for slice 8 and the 3rd query slice 3's.
        (
            StrategyKind::Pinned,
            CallKind::EventSynchronize,
            4,
            "slice",
            7,
        ),
        (StrategyKind::Pinned, CallKind::EventQuery, 3, "slice", 2),
        (StrategyKind::Pinned, CallKind::EventRecord, 1, "slice", 0),
    ];
    for &(kind, call, nth, unit, chunk) in cases {
        let d = HostDriver::default();
        d.fail_on(call, nth, 2);
        let t = Traced::open(&d, None, 0).unwrap();
        let err = upload(&t, &strategy(kind), &w, &p, &mut |_| {}).unwrap_err();
        match &err {
            Error::ChunkFailed {
                unit: u,
                chunk: c,
                source,
                ..
            } => {
                assert_eq!((*u, *c), (unit, chunk), "{kind:?} {call:?}: {err}");
                assert!(
                    matches!(**source, Error::Driver { call: failed, code: 2, .. } if failed == call)
                );
            }
            other => panic!("{kind:?} {call:?}: expected ChunkFailed, got {other:?}"),
        }
        assert!(err.to_string().contains("all earlier allocations freed"));
        t.close().unwrap();
        assert_all_released(&d);
    }
}

#[test]
fn pinned_setup_failure_releases_what_was_made() {
    let w = small_workload();
    let p = small_plan(&w);
    let d = HostDriver::default();
    d.fail_on(CallKind::EventCreate, 2, 2);
    let t = Traced::open(&d, None, 0).unwrap();
    let err = upload(&t, &strategy(StrategyKind::Pinned), &w, &p, &mut |_| {}).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Driver {
                call: CallKind::EventCreate,
                ..
            }
        ),
        "{err:?}"
    );
    assert_all_released(&d);
}

#[test]
fn managed_refuses_without_concurrent_access_or_free_memory() {
    let w = small_workload();
    let p = small_plan(&w);
    let d = HostDriver::new(HostConfig {
        concurrent_managed_access: false,
        ..HostConfig::default()
    });
    let t = Traced::open(&d, None, 0).unwrap();
    let err = upload(&t, &strategy(StrategyKind::Managed), &w, &p, &mut |_| {}).unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err:?}");
    assert_eq!(d.calls(CallKind::MemAllocManaged), 0);

    // Each chunk is rounded up to 2 MiB; 50 MiB of "device" cannot hold ~50 such chunks.
    let d = HostDriver::new(HostConfig {
        memory_bytes: 50 << 20,
        ..HostConfig::default()
    });
    let t = Traced::open(&d, None, 0).unwrap();
    let err = upload(&t, &strategy(StrategyKind::Managed), &w, &p, &mut |_| {}).unwrap_err();
    assert!(matches!(err, Error::InsufficientMemory { .. }), "{err:?}");
    assert_eq!(
        d.calls(CallKind::MemAllocManaged),
        0,
        "nothing allocated past the check"
    );
}

#[test]
fn the_ring_has_an_enter_and_an_exit_for_every_driver_call_in_order() {
    let w = small_workload();
    let p = small_plan(&w);
    let dir = tempfile::tempdir().unwrap();
    for kind in StrategyKind::ALL {
        let path = dir.path().join(format!("{}.ring", kind.name()));
        // Two lanes: the uploading thread owns lane 1 (8192 slots), so every record of the
        // upload is kept (a ring's lanes split its slots; the default 64 would keep 256).
        let options = WriterOptions {
            slot_count: 1 << 14,
            lane_count: 2,
            ..WriterOptions::default()
        };
        let ring = Writer::create_with(&path, &options, &ProcessIdentity::current()).unwrap();
        let d = HostDriver::default();
        let t = Traced::open(&d, Some(&ring), 0).unwrap();
        let up = upload(&t, &strategy(kind), &w, &p, &mut |_| {}).unwrap();
        verify(&t, &up, &w).unwrap();
        up.free(&t).unwrap();
        t.close().unwrap();
        let calls = t.calls();
        assert_eq!(calls, d.total_calls());

        let snap = read_ring(&path, &ReadOptions::default()).unwrap();
        assert!(snap.in_flight.is_empty(), "{:?}", snap.in_flight);
        assert_eq!(
            snap.records.len() as u64,
            2 * calls,
            "{kind:?}: 2 records per call"
        );
        for pair in snap.records.chunks(2) {
            let (enter, exit) = (&pair[0], &pair[1]);
            assert_eq!(enter.kind, RecordKind::Enter, "{enter:?}");
            assert_eq!(exit.kind, RecordKind::Exit, "{exit:?}");
            assert_eq!(enter.call_id, exit.call_id);
            assert_eq!(exit.result, Some(0));
        }
        let names: Vec<&str> = snap
            .records
            .iter()
            .step_by(2)
            .map(|r| r.call.as_str())
            .collect();
        assert_eq!(
            &names[..4],
            [
                "cuInit",
                "cuDeviceGet",
                "cuDevicePrimaryCtxRetain",
                "cuCtxSetCurrent"
            ]
        );
        assert_eq!(names.last(), Some(&"cuDevicePrimaryCtxRelease_v2"));
        // Per-kind counts in the ring equal the driver's own counts.
        for call in CallKind::ALL {
            let in_ring = names
                .iter()
                .filter(|n| **n == uploader::trace::breadcrumb_call(call).name())
                .count() as u64;
            assert_eq!(in_ring, d.calls(call), "{kind:?} {call:?}");
        }
        let chunks = p.chunks.len();
        match kind {
            StrategyKind::Ztensor => {
                // alloc + copy per chunk, labelled and carrying bytes, chunk and tensor range.
                let allocs: Vec<_> = snap
                    .records
                    .iter()
                    .filter(|r| r.kind == RecordKind::Enter && r.call == "cuMemAlloc_v2")
                    .collect();
                assert_eq!(allocs.len(), chunks);
                for (k, r) in allocs.iter().enumerate() {
                    assert_eq!(r.label, format!("chunk {}/{}", k + 1, chunks));
                    assert_eq!(r.args.chunk as usize, k);
                    assert_eq!(r.args.chunk_count as usize, chunks);
                    assert_eq!(r.args.bytes, p.chunks[k].bytes);
                    assert_eq!(
                        r.args.tensor_first as usize,
                        p.placements[p.chunks[k].first].tensor
                    );
                    assert_eq!(r.args.tensor_count as usize, p.chunks[k].count);
                }
            }
            StrategyKind::Pinned => {
                assert!(snap
                    .records
                    .iter()
                    .any(|r| r.call == "cuMemcpyHtoDAsync_v2" && r.label.starts_with("slice 1/")));
            }
            StrategyKind::Managed => {
                assert!(snap.records.iter().any(|r| r.call == "cuMemAllocManaged"
                    && r.label == format!("chunk {chunks}/{chunks}")));
            }
        }
    }
}

/// While a driver call is running, the ring already names it: the point of breadcrumbs.
#[test]
fn a_call_in_the_driver_is_in_flight_in_the_ring() {
    let w = small_workload();
    let p = small_plan(&w);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("inflight.ring");
    let ring = Writer::create(&path, 4096).unwrap();
    let d = HostDriver::default();
    let seen = Arc::new(std::sync::Mutex::new(None));
    {
        let seen = Arc::clone(&seen);
        let path = path.clone();
        d.set_hook(Some(Box::new(move |call, n| {
            if call == CallKind::MemcpyHtoD && n == 12 {
                let snap = read_ring(&path, &ReadOptions::default()).unwrap();
                *seen.lock().unwrap() = Some(snap.in_flight);
            }
        })));
    }
    let t = Traced::open(&d, Some(&ring), 0).unwrap();
    let up = upload(&t, &strategy(StrategyKind::Ztensor), &w, &p, &mut |_| {}).unwrap();
    up.free(&t).unwrap();
    let in_flight = seen.lock().unwrap().take().expect("hook ran");
    assert_eq!(in_flight.len(), 1, "{in_flight:?}");
    assert_eq!(in_flight[0].call, "cuMemcpyHtoD_v2");
    assert_eq!(in_flight[0].label, format!("chunk 12/{}", p.chunks.len()));
    assert_eq!(in_flight[0].args.bytes, p.chunks[11].bytes);
}

#[test]
fn fewer_than_64_tensors_are_not_bulk_uploaded() {
    let w = Workload::synthetic(&WorkloadSpec {
        samples: 63,
        sample_floats: 4,
        params: 0,
        param_floats: 0,
        seed: 1,
    });
    assert!(matches!(
        plan(w.infos(), &PlanOptions::default()).unwrap(),
        Planned::TooFew { eligible: 63, .. }
    ));
}

/// A source whose tensor 500 has fewer host bytes than its info says: packing fails on a
/// worker thread, and the upload still rolls back cleanly.
struct Lying(Workload);

impl TensorSource for Lying {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn info(&self, index: usize) -> uploader::TensorInfo {
        self.0.info(index)
    }
    fn bytes(&self, index: usize) -> &[u8] {
        let b = self.0.bytes(index);
        if index == 500 {
            &b[..b.len() - 4]
        } else {
            b
        }
    }
}

#[test]
fn a_packing_error_on_any_thread_rolls_back() {
    let w = small_workload();
    let p = small_plan(&w);
    let lying = Lying(small_workload());
    for kind in StrategyKind::ALL {
        let d = HostDriver::default();
        let t = Traced::open(&d, None, 0).unwrap();
        let err = upload(&t, &strategy(kind), &lying, &p, &mut |_| {}).unwrap_err();
        match &err {
            Error::ChunkFailed { source, .. } => {
                assert!(
                    matches!(**source, Error::InvalidOptions(_)),
                    "{kind:?}: {err}"
                )
            }
            other => panic!("{kind:?}: {other:?}"),
        }
        t.close().unwrap();
        assert_all_released(&d);
    }
}
