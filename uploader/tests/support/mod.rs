//! What the host-backend test files share: a small workload of the real one's shape, its plan,
//! a pinned strategy of awkward sizes, and the leak check.

use uploader::host::HostDriver;
use uploader::outcome::StrategyKind;
use uploader::pinned::PinnedOptions;
use uploader::plan::{plan, PlanOptions, Planned};
use uploader::strategy::Strategy;
use uploader::workload::{Workload, WorkloadSpec};
use uploader::Plan;

pub fn small_workload() -> Workload {
    Workload::synthetic(&WorkloadSpec {
        samples: 700,
        sample_floats: 193,
        params: 3,
        param_floats: 5_000, // 20,000 B: bigger than the byte cap below, so alone in a chunk
        seed: 11,
    })
}

pub fn small_options() -> PlanOptions {
    PlanOptions {
        chunk_bytes: 16 << 10,
        chunk_tensors: 16,
        ..PlanOptions::default()
    }
}

pub fn small_plan(w: &Workload) -> Plan {
    match plan(w.infos(), &small_options()).unwrap() {
        Planned::Bulk(p) => p,
        other => panic!("{other:?}"),
    }
}

pub fn strategy(kind: StrategyKind) -> Strategy {
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

pub fn assert_all_released(d: &HostDriver) {
    assert_eq!(d.live_allocations(), 0, "device allocations leaked");
    assert_eq!(d.live_pinned(), 0, "pinned buffers leaked");
    assert_eq!(d.live_handles(), 0, "streams/events leaked");
}
