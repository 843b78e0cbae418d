//! End-to-end uploads through the host backend: every strategy verifies, failures are
//! all-or-nothing, and the breadcrumb ring holds an enter and an exit for every driver call.

use std::sync::Arc;

use breadcrumb::identity::ProcessIdentity;
use breadcrumb::{read_ring, ReadOptions, RecordKind, Writer, WriterOptions};
use uploader::host::{HostConfig, HostDriver};
use uploader::outcome::StrategyKind;
use uploader::pinned::PinnedOptions;
use uploader::plan::{plan, PlanOptions, Planned};
use uploader::strategy::{upload, Strategy};
use uploader::trace::Site;
use uploader::verify::verify;
use uploader::workload::{Workload, WorkloadSpec};
use uploader::{CallKind, Driver, Error, Plan, TensorSource, Traced};

fn small_workload() -> Workload {
    Workload::synthetic(&WorkloadSpec {
        samples: 700,
        sample_floats: 193,
        params: 3,
        param_floats: 5_000, // 20,000 B: bigger than the byte cap below, so alone in a chunk
        seed: 11,
    })
}

fn small_options() -> PlanOptions {
    PlanOptions {
        chunk_bytes: 16 << 10,
        chunk_tensors: 16,
        ..PlanOptions::default()
    }
}

fn small_plan(w: &Workload) -> Plan {
    match plan(w.infos(), &small_options()).unwrap() {
        Planned::Bulk(p) => p,
        other => panic!("{other:?}"),
    }
}

fn strategy(kind: StrategyKind) -> Strategy {
    let mut s = Strategy::new(kind);
    // Buffers smaller than a chunk and not a multiple of a tensor: tensors straddle slices,
    // and with 2 buffers each one is reused many times.
    s.pinned = PinnedOptions {
        buffers: 2,
        buffer_bytes: 5_000,
        threads: 3,
        spin: false,
        // Pieces that do not divide a buffer: the last piece of each slice is short.
        piece_bytes: 1_500,
        ..PinnedOptions::default()
    };
    s
}

fn assert_all_released(d: &HostDriver) {
    assert_eq!(d.live_allocations(), 0, "device allocations leaked");
    assert_eq!(d.live_pinned(), 0, "pinned buffers leaked");
    assert_eq!(d.live_handles(), 0, "streams/events leaked");
}

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

#[test]
fn pinned_verifies_with_spinning_and_sleeping_packers_and_odd_thread_counts() {
    let w = small_workload();
    let p = small_plan(&w);
    for (threads, spin) in [(1, false), (1, true), (2, true), (5, false), (4, true)] {
        let d = HostDriver::default();
        let t = Traced::open(&d, None, 0).unwrap();
        let mut s = strategy(StrategyKind::Pinned);
        s.pinned.threads = threads;
        s.pinned.spin = spin;
        let up = upload(&t, &s, &w, &p, &mut |_| {}).unwrap();
        verify(&t, &up, &w).unwrap();
        up.free(&t).unwrap();
        t.close().unwrap();
        assert_all_released(&d);
    }
}

/// Every pipeline shape uploads the right bytes: one buffer (no overlap at all) to many,
/// pieces smaller than, equal to and larger than a buffer, plain and streaming stores,
/// driver-allocated and registered staging. The host driver performs a copy only when it is
/// waited for, so a buffer refilled too early shows up as wrong bytes.
#[test]
fn pinned_verifies_in_every_pipeline_shape() {
    use uploader::pack::PackStore;
    use uploader::pinned::{registration_groups, ArenaLayout};
    use uploader::pinned::{ArenaMemory, StagingMemory};
    let w = small_workload();
    let p = small_plan(&w);
    for buffers in [1, 2, 3, 7] {
        for (buffer_bytes, piece_bytes) in [
            (5_000, 64),
            (5_000, 5_000),
            (4096, 1 << 20),
            (65_536, 4_000),
        ] {
            for store in [PackStore::Plain, PackStore::Streaming, PackStore::Auto] {
                for (staging, arena) in [
                    (StagingMemory::HostAlloc, ArenaMemory::Alloc),
                    (StagingMemory::Register, ArenaMemory::Pool),
                    (StagingMemory::Overlap, ArenaMemory::Pool),
                ] {
                    let d = HostDriver::default();
                    let t = Traced::open(&d, None, 0).unwrap();
                    let mut s = strategy(StrategyKind::Pinned);
                    s.pinned = PinnedOptions {
                        buffers,
                        buffer_bytes,
                        piece_bytes,
                        store,
                        staging,
                        arena,
                        threads: 3,
                        spin: true,
                        // Both submitters: with a ring of one buffer a helping one must not
                        // claim a piece it would wait for itself.
                        submitter_packs: buffers % 2 == 1,
                        fit_ring: false,
                        read_only_staging: buffer_bytes != 5_000,
                        // Streaming stores gathered through the bounce buffer in half the
                        // shapes: the bytes verify either way.
                        gather: buffers % 2 == 0,
                    };
                    let up = upload(&t, &s, &w, &p, &mut |_| {}).unwrap();
                    let stats = up.pinned.expect("pinned uploads report their phases");
                    assert!(stats.staging_ns > 0 && stats.arena_ns > 0, "{stats:?}");
                    assert_eq!(
                        stats.staging_read_only,
                        s.pinned.read_only_staging && staging != StagingMemory::HostAlloc,
                        "{:?}",
                        s.pinned
                    );
                    verify(&t, &up, &w).unwrap_or_else(|e| panic!("{:?}: {e}", s.pinned));
                    up.free(&t).unwrap();
                    t.close().unwrap();
                    assert_all_released(&d);
                    let (alloc, register) = (
                        d.calls(CallKind::MemHostAlloc),
                        d.calls(CallKind::MemHostRegister),
                    );
                    match staging {
                        StagingMemory::HostAlloc => assert_eq!((alloc, register), (1, 0)),
                        StagingMemory::Register => {
                            assert_eq!((alloc, register), (0, 1));
                            assert_eq!(d.calls(CallKind::MemHostUnregister), 1);
                        }
                        // One registration per group of the buffers the upload used (the
                        // ring is capped at the slice count), each undone once.
                        StagingMemory::Overlap => {
                            let slices = ArenaLayout::new(&p).bytes().div_ceil(buffer_bytes);
                            let used = (buffers as u64).min(slices) as usize;
                            let groups = registration_groups(used).len() as u64;
                            assert_eq!((alloc, register), (0, groups));
                            assert_eq!(d.calls(CallKind::MemHostUnregister), groups);
                            assert!(stats.register_ns > 0, "{stats:?}");
                        }
                    }
                    assert!(stats.first_slice_ns > 0, "{stats:?}");
                }
            }
        }
    }
}

/// `Auto` times plain and streaming stores on the first pieces, settles on one, and says which
/// and how fast each was; a fixed store is used as given, with no calibration.
#[test]
fn auto_store_calibrates_then_decides() {
    use uploader::pack::PackStore;
    let w = small_workload();
    let p = small_plan(&w);
    let d = HostDriver::default();
    let t = Traced::open(&d, None, 0).unwrap();
    let mut s = strategy(StrategyKind::Pinned);
    s.pinned.piece_bytes = 1024;
    s.pinned.store = PackStore::Auto;
    let up = upload(&t, &s, &w, &p, &mut |_| {}).unwrap();
    let stats = up.pinned.unwrap();
    assert_ne!(stats.store, PackStore::Auto, "{stats:?}");
    assert!(stats.calibration_plain_mbps > 0 && stats.calibration_streaming_mbps > 0);
    verify(&t, &up, &w).unwrap();
    up.free(&t).unwrap();
    s.pinned.store = PackStore::Streaming;
    let up = upload(&t, &s, &w, &p, &mut |_| {}).unwrap();
    let stats = up.pinned.unwrap();
    assert_eq!(stats.store, PackStore::Streaming);
    assert_eq!(
        (
            stats.calibration_plain_mbps,
            stats.calibration_streaming_mbps
        ),
        (0, 0)
    );
    verify(&t, &up, &w).unwrap();
    up.free(&t).unwrap();
    t.close().unwrap();
    assert_all_released(&d);
}

/// An upload smaller than the staging ring page-locks only the buffers it can use.
#[test]
fn a_small_upload_gets_a_small_ring() {
    let w = small_workload();
    let p = small_plan(&w);
    assert!(p.tensor_bytes < 1 << 20);
    let d = HostDriver::default();
    let t = Traced::open(&d, None, 0).unwrap();
    let mut s = strategy(StrategyKind::Pinned);
    s.pinned.buffers = 8;
    s.pinned.buffer_bytes = 1 << 20;
    let up = upload(&t, &s, &w, &p, &mut |_| {}).unwrap();
    verify(&t, &up, &w).unwrap();
    up.free(&t).unwrap();
    // One buffer, so one event.
    assert_eq!(d.calls(CallKind::EventCreate), 1);
    t.close().unwrap();
    assert_all_released(&d);
}

#[test]
fn pinned_options_out_of_range_are_errors_not_panics() {
    let w = small_workload();
    let p = small_plan(&w);
    let d = HostDriver::default();
    let t = Traced::open(&d, None, 0).unwrap();
    for bad in [
        PinnedOptions {
            buffers: 0,
            ..PinnedOptions::default()
        },
        PinnedOptions {
            piece_bytes: 0,
            ..PinnedOptions::default()
        },
        PinnedOptions {
            threads: 0,
            ..PinnedOptions::default()
        },
        PinnedOptions {
            buffer_bytes: 1 << 50,
            ..PinnedOptions::default()
        },
    ] {
        let mut s = strategy(StrategyKind::Pinned);
        s.pinned = bad;
        let err = upload(&t, &s, &w, &p, &mut |_| {}).unwrap_err();
        assert!(matches!(err, Error::InvalidOptions(_)), "{bad:?}: {err:?}");
    }
    t.close().unwrap();
    assert_all_released(&d);
}

/// Pinned arenas come from one pool per session: made by the first upload, reused by the next
/// ones (a `with_ring` view shares it), destroyed by `close`. `--arena alloc` and a device
/// without memory pools use `cuMemAlloc` instead.
#[test]
fn pinned_arenas_come_from_one_pool_per_session() {
    use uploader::outcome::DeviceMemory;
    use uploader::pinned::ArenaMemory;
    let w = small_workload();
    let p = small_plan(&w);
    let d = HostDriver::default();
    let t = Traced::open(&d, None, 0).unwrap();
    let s = strategy(StrategyKind::Pinned);
    let view = t.with_ring(None);
    for session in [&t, &t, &view] {
        let up = upload(session, &s, &w, &p, &mut |_| {}).unwrap();
        assert_eq!(up.allocations.len(), 1);
        assert_eq!(up.allocations[0].memory, DeviceMemory::Pool);
        assert_eq!(up.pinned.unwrap().arena_memory, DeviceMemory::Pool);
        verify(session, &up, &w).unwrap();
        up.free(session).unwrap();
    }
    assert_eq!(d.calls(CallKind::MemPoolCreate), 1, "one pool per session");
    assert_eq!(d.calls(CallKind::MemPoolSetAttribute), 1);
    assert_eq!(d.calls(CallKind::MemAllocFromPoolAsync), 3);
    assert_eq!(d.calls(CallKind::MemFreeAsync), 3);
    assert_eq!(d.calls(CallKind::MemAlloc), 0);
    assert_eq!(d.calls(CallKind::MemPoolDestroy), 0, "kept until close");
    t.close().unwrap();
    assert_eq!(d.calls(CallKind::MemPoolDestroy), 1);
    assert_all_released(&d);

    for (config, arena) in [
        (HostConfig::default(), ArenaMemory::Alloc),
        (
            HostConfig {
                memory_pools: false,
                ..HostConfig::default()
            },
            ArenaMemory::Pool,
        ),
    ] {
        let d = HostDriver::new(config);
        let t = Traced::open(&d, None, 0).unwrap();
        let mut s = strategy(StrategyKind::Pinned);
        s.pinned.arena = arena;
        let up = upload(&t, &s, &w, &p, &mut |_| {}).unwrap();
        assert_eq!(up.allocations[0].memory, DeviceMemory::Device, "{arena:?}");
        assert_eq!(up.pinned.unwrap().arena_memory, DeviceMemory::Device);
        verify(&t, &up, &w).unwrap();
        up.free(&t).unwrap();
        t.close().unwrap();
        assert_eq!(d.calls(CallKind::MemAlloc), 1);
        assert_eq!(d.calls(CallKind::MemPoolCreate), 0);
        assert_all_released(&d);
    }
}

/// Staging is page-locked read-only for the device only where the device says it can be; a
/// device that cannot still uploads, through writable staging.
#[test]
fn read_only_staging_needs_the_device_to_support_it() {
    use uploader::pinned::StagingMemory;
    let w = small_workload();
    let p = small_plan(&w);
    for (supported, staging) in [
        (true, StagingMemory::Overlap),
        (false, StagingMemory::Overlap),
        (true, StagingMemory::Register),
        (false, StagingMemory::Register),
    ] {
        let d = HostDriver::new(HostConfig {
            read_only_host_register: supported,
            ..HostConfig::default()
        });
        let t = Traced::open(&d, None, 0).unwrap();
        let mut s = strategy(StrategyKind::Pinned);
        s.pinned.staging = staging;
        assert!(s.pinned.read_only_staging, "on by default");
        let up = upload(&t, &s, &w, &p, &mut |_| {}).unwrap();
        assert_eq!(
            up.pinned.unwrap().staging_read_only,
            supported,
            "{staging:?}, supported: {supported}"
        );
        assert!(d.calls(CallKind::DeviceGetAttribute) >= 1);
        verify(&t, &up, &w).unwrap();
        up.free(&t).unwrap();
        t.close().unwrap();
        assert_all_released(&d);
    }
    // The simulated driver refuses the flag where the attribute says no, as libcuda does: the
    // stager must not have asked for it.
    let d = HostDriver::new(HostConfig {
        read_only_host_register: false,
        ..HostConfig::default()
    });
    let t = Traced::open(&d, None, 0).unwrap();
    let mut page = vec![0u8; 2 * 4096];
    let at = page
        .as_mut_ptr()
        .wrapping_add(page.as_ptr().align_offset(4096));
    // SAFETY: a page of our own buffer, never registered (the call fails).
    let refused = unsafe { t.host_register(&Site::plain("test"), at, 4096, true) };
    assert!(refused.is_err());
    t.close().unwrap();
}

/// A failing pool call fails the upload with that call named, and nothing leaks.
#[test]
fn a_failing_pool_call_fails_the_upload_and_leaks_nothing() {
    let w = small_workload();
    let p = small_plan(&w);
    for call in [
        CallKind::MemPoolCreate,
        CallKind::MemPoolSetAttribute,
        CallKind::MemAllocFromPoolAsync,
    ] {
        let d = HostDriver::default();
        d.fail_on(call, 1, 2);
        let t = Traced::open(&d, None, 0).unwrap();
        let err = upload(&t, &strategy(StrategyKind::Pinned), &w, &p, &mut |_| {}).unwrap_err();
        assert!(
            err.to_string().contains(call.cuda_name()),
            "{call:?}: {err}"
        );
        t.close().unwrap();
        assert_all_released(&d);
    }
}

/// The host driver frees pool memory only with `cuMemFreeAsync` and other device memory only
/// with `cuMemFree`, so a strategy that records the wrong kind fails its tests.
#[test]
fn host_driver_rejects_freeing_with_the_wrong_call() {
    use uploader::Stream;
    let d = HostDriver::default();
    let t = Traced::open(&d, None, 0).unwrap();
    let stream = d.stream_create().unwrap();
    let pool = d.mem_pool_create().unwrap();
    // SAFETY: live pool and stream of this driver; nothing is copied into the memory.
    let pooled = unsafe { d.mem_alloc_from_pool_async(4096, pool, stream) }.unwrap();
    let plain = d.mem_alloc(4096).unwrap();
    // SAFETY: live allocations of this driver, nothing in flight; the wrong calls are refused
    // without freeing anything.
    unsafe {
        assert!(d.mem_free(pooled).is_err());
        assert!(d.mem_free_async(plain, Stream::LEGACY).is_err());
        d.mem_free_async(pooled, Stream::LEGACY).unwrap();
        d.mem_free(plain).unwrap();
        d.mem_pool_destroy(pool).unwrap();
        d.stream_destroy(stream).unwrap();
    }
    t.close().unwrap();
    assert_all_released(&d);
}

/// `Overlap` staging registers each buffer once, in the first upload that fills it: a reused
/// stager registers nothing more, and its teardown unregisters every buffer once.
#[test]
fn overlap_staging_registers_each_buffer_once_across_uploads() {
    use uploader::pinned::{PinnedStager, StagingMemory};
    let w = small_workload();
    let p = small_plan(&w);
    let d = HostDriver::default();
    let t = Traced::open(&d, None, 0).unwrap();
    let options = PinnedOptions {
        buffers: 3,
        staging: StagingMemory::Overlap,
        ..strategy(StrategyKind::Pinned).pinned
    };
    let stager = PinnedStager::create(&t, &options).unwrap();
    assert_eq!(
        d.calls(CallKind::MemHostRegister),
        0,
        "nothing locked before packing"
    );
    for round in 0..3 {
        let up = stager.upload(&t, &w, &p, &mut |_| {}).unwrap();
        let stats = up.pinned.unwrap();
        assert_eq!(d.calls(CallKind::MemHostRegister), 3, "round {round}");
        assert_eq!(
            stats.register_ns > 0,
            round == 0,
            "round {round}: {stats:?}"
        );
        verify(&t, &up, &w).unwrap();
        up.free(&t).unwrap();
    }
    stager.destroy(&t).unwrap();
    assert_eq!(d.calls(CallKind::MemHostUnregister), 3);
    t.close().unwrap();
    assert_all_released(&d);
}

/// A registration that fails inside an `Overlap` upload fails the upload at that slice, and
/// the buffers registered before it are unregistered: nothing leaks.
#[test]
fn a_failing_overlap_registration_fails_the_upload_and_leaks_nothing() {
    use uploader::pinned::StagingMemory;
    let w = small_workload();
    let p = small_plan(&w);
    for nth in [1, 2] {
        let d = HostDriver::default();
        d.fail_on(CallKind::MemHostRegister, nth, 2);
        let t = Traced::open(&d, None, 0).unwrap();
        let mut s = strategy(StrategyKind::Pinned);
        s.pinned.staging = StagingMemory::Overlap;
        let err = upload(&t, &s, &w, &p, &mut |_| {}).unwrap_err();
        match &err {
            Error::ChunkFailed {
                unit: "slice",
                source,
                ..
            } => assert!(
                matches!(
                    **source,
                    Error::Driver {
                        call: CallKind::MemHostRegister,
                        code: 2,
                        ..
                    }
                ),
                "{err}"
            ),
            other => panic!("registration {nth}: expected ChunkFailed, got {other:?}"),
        }
        assert_eq!(d.calls(CallKind::MemHostUnregister), nth - 1);
        t.close().unwrap();
        assert_all_released(&d);
    }
}

/// A one-shot `Overlap` upload unlocks each group of buffers as soon as no slice of it is left
/// (the host driver refuses to unlock memory a queued copy still reads), teardown unlocks the
/// rest, and every group is locked and unlocked exactly once.
#[test]
fn a_one_shot_overlap_upload_unlocks_finished_groups_while_it_runs() {
    use uploader::pinned::registration_groups;
    use uploader::pinned::StagingMemory;
    let w = small_workload();
    let p = small_plan(&w);
    for threads in [1, 3] {
        let d = HostDriver::default();
        let t = Traced::open(&d, None, 0).unwrap();
        let mut s = strategy(StrategyKind::Pinned);
        s.pinned.staging = StagingMemory::Overlap;
        s.pinned.buffers = 7;
        s.pinned.buffer_bytes = 4096;
        s.pinned.piece_bytes = 1024;
        s.pinned.threads = threads;
        let up = upload(&t, &s, &w, &p, &mut |_| {}).unwrap();
        let stats = up.pinned.unwrap();
        assert!(
            stats.unregister_ns > 0,
            "no group unlocked inside the upload: {stats:?}"
        );
        verify(&t, &up, &w).unwrap();
        let groups = registration_groups(7).len() as u64;
        assert_eq!(d.calls(CallKind::MemHostRegister), groups);
        assert_eq!(d.calls(CallKind::MemHostUnregister), groups);
        up.free(&t).unwrap();
        t.close().unwrap();
        assert_all_released(&d);
    }
}

/// The default store (`BySize`, issue 40) packs many small tensors with streaming stores and
/// large ones plain, and the bytes arrive either way.
#[test]
fn by_size_store_follows_the_workload_shape() {
    use uploader::pack::{PackStore, STREAMING_BELOW_MEAN_TENSOR};
    assert_eq!(PinnedOptions::default().store, PackStore::BySize);
    let large_floats = (STREAMING_BELOW_MEAN_TENSOR / 4 + 1024) as usize;
    let shapes = [
        // The real workload's shape, small: 772-byte samples.
        (small_workload(), PackStore::Streaming),
        // Tensors above the threshold only.
        (
            Workload::synthetic(&WorkloadSpec {
                samples: 70,
                sample_floats: large_floats,
                params: 0,
                param_floats: 0,
                seed: 12,
            }),
            PackStore::Plain,
        ),
    ];
    let d = HostDriver::default();
    let t = Traced::open(&d, None, 0).unwrap();
    for (w, expected) in shapes {
        let options = PlanOptions {
            chunk_bytes: 1 << 20,
            ..small_options()
        };
        let p = match plan(w.infos(), &options).unwrap() {
            Planned::Bulk(p) => p,
            other => panic!("{other:?}"),
        };
        let mut s = strategy(StrategyKind::Pinned);
        s.pinned.store = PackStore::BySize;
        let up = upload(&t, &s, &w, &p, &mut |_| {}).unwrap();
        let stats = up.pinned.unwrap();
        assert_eq!(stats.store, expected, "{stats:?}");
        verify(&t, &up, &w).unwrap();
        up.free(&t).unwrap();
    }
    t.close().unwrap();
    assert_all_released(&d);
}
