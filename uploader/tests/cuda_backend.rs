//! The CUDA backend. Without libcuda it must give a clear error (never cudarc's panic); with a
//! GPU it runs every strategy end to end with verification. On the device machine, where there
//! is no Rust toolchain, the same checks run through `wedge-capture upload --backend cuda
//! --verify` (see BENCHMARKS.md). Set WEDGE_REQUIRE_GPU=1 to make a missing GPU a failure.

use uploader::cuda::CudaDriver;
use uploader::outcome::StrategyKind;
use uploader::plan::{plan, PlanOptions, Planned};
use uploader::strategy::{upload, Strategy};
use uploader::verify::verify;
use uploader::workload::{Workload, WorkloadSpec};
use uploader::{Error, Traced};

fn libcuda_present() -> bool {
    // SAFETY: dlopen with a constant NUL-terminated name; the handle is closed at once.
    unsafe {
        let h = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL);
        if h.is_null() {
            return false;
        }
        libc::dlclose(h);
        true
    }
}

#[test]
fn missing_driver_is_a_clear_error_not_a_panic() {
    let loaded =
        std::panic::catch_unwind(CudaDriver::load).expect("CudaDriver::load must not panic");
    match loaded {
        Ok(_) => assert!(libcuda_present(), "loaded without libcuda?"),
        Err(e) => {
            assert!(!libcuda_present() || matches!(e, Error::NoDriver(_)), "{e}");
            assert!(e.is_no_driver(), "{e:?}");
            assert!(e.to_string().contains("libcuda"), "{e}");
        }
    }
}

#[test]
fn every_strategy_on_a_real_gpu() {
    let driver = match CudaDriver::load() {
        Ok(d) => d,
        Err(e) => {
            assert!(
                std::env::var_os("WEDGE_REQUIRE_GPU").is_none(),
                "GPU required: {e}"
            );
            eprintln!("skipped: no CUDA driver here ({e})");
            return;
        }
    };
    let t = match Traced::open(&driver, None, 0) {
        Ok(t) => t,
        Err(e) => {
            assert!(
                std::env::var_os("WEDGE_REQUIRE_GPU").is_none(),
                "GPU required: {e}"
            );
            eprintln!("skipped: libcuda present but no usable device ({e})");
            return;
        }
    };
    let w = Workload::synthetic(&WorkloadSpec {
        samples: 20_000,
        params: 5,
        ..WorkloadSpec::default()
    });
    let p = match plan(w.infos(), &PlanOptions::default()).unwrap() {
        Planned::Bulk(p) => p,
        other => panic!("{other:?}"),
    };
    for kind in StrategyKind::ALL {
        match upload(&t, &Strategy::new(kind), &w, &p, &mut |_| {}) {
            Ok(up) => {
                verify(&t, &up, &w).unwrap();
                up.free(&t).unwrap();
            }
            Err(Error::Unsupported(why)) if kind == StrategyKind::Managed => {
                eprintln!("managed skipped: {why}");
            }
            Err(e) => panic!("{kind:?}: {e}"),
        }
    }
    t.close().unwrap();
}
