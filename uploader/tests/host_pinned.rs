//! End-to-end uploads of the `pinned` pipeline through the host backend: every pipeline shape,
//! store and staging kind verifies, the session's pools and page locks are made once and
//! released, and a failure anywhere leaks nothing.

use uploader::host::{HostConfig, HostDriver};
use uploader::outcome::StrategyKind;
use uploader::pinned::PinnedOptions;
use uploader::plan::{plan, PlanOptions, Planned};
use uploader::strategy::upload;
use uploader::trace::Site;
use uploader::verify::verify;
use uploader::workload::{Workload, WorkloadSpec};
use uploader::{CallKind, Driver, Error, Traced};

mod support;

use support::{assert_all_released, small_options, small_plan, small_workload, strategy};

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
