//! Recordings from the GPU host (issue 31; tests/gpu/recordings/, made by tests/gpu/agent_run.sh and
//! rmlock_contention.sh on an H100 with driver 580.159.04): what the tool read there must stay readable here.

use std::path::PathBuf;
use std::process::Command;

fn recording(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/gpu/recordings/h100-580.159.04-run1")
        .join(name)
}

/// The CUPTI injection's ring of an unmodified PyTorch training loop (`run --inject`): every record valid,
/// nothing in flight (the job ended normally), kernel launches and synchronizes by name.
#[test]
fn the_recorded_pytorch_cupti_ring_reads_whole() {
    let out = Command::new(crate::util::bin())
        .args(["ring", "dump", "--format", "json", "--last", "128"])
        .arg(recording("pytorch.cupti.ring"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dump: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(dump["torn_slots"], 0, "{dump}");
    assert_eq!(dump["invalid_slots"], 0, "{dump}");
    assert!(dump["in_flight"].as_array().unwrap().is_empty());
    let calls: Vec<&str> = dump["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["call"].as_str())
        .collect();
    assert!(calls.len() >= 100, "{}", calls.len());
    for call in ["cuLaunchKernel", "cuCtxSynchronize"] {
        assert!(calls.contains(&call), "{call} not in {calls:?}");
    }
}

/// `doctor --json` on the GPU host: the driver, libcuda, libcupti and nvidia-smi are found, nothing failed.
#[test]
fn the_recorded_gpu_host_doctor_finds_the_driver() {
    let text = std::fs::read(recording("doctor.json")).unwrap();
    let doctor: serde_json::Value = serde_json::from_slice(&text).unwrap();
    let status = |name: &str| {
        doctor["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .map(|c| c["status"].as_str().unwrap().to_string())
    };
    for name in ["nvidia-driver", "libcuda", "libcupti", "nvidia-smi", "kmsg"] {
        assert_eq!(status(name).as_deref(), Some("ok"), "{name}");
    }
    assert_eq!(doctor["failed"], false);
}

/// The agent's `/metrics` next to that job after a SIGUSR1: one on-demand incident, no wedge.
#[test]
fn the_recorded_gpu_host_metrics_count_the_on_demand_incident() {
    let text = std::fs::read_to_string(recording("metrics.txt")).unwrap();
    assert!(text.contains("wedge_capture_incidents_total{trigger=\"on_demand\"} 1"));
    assert!(text.contains("wedge_capture_incidents_total{trigger=\"wedge\"} 0"));
    assert!(text.contains("wedge_capture_targets 1"));
}

fn run2(name: &str) -> reports::Incident {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/gpu/recordings/h100-580.159.04-run2")
        .join(name);
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// A real multi-second wedge inside CUDA driver calls on the H100 (tests/gpu/rmlock_short_batch.sh): 8 threads of RM-heavy
/// calls while one thread of the same process pins 32 GiB (`cuMemHostRegister`). The pinning thread holds the
/// process's mmap_lock while it faults in every page; another thread's `mmap` waited 8.3 s for it in D. The
/// pinning thread runs (not in D), so the kernel names no holder: the verdict names it from the breadcrumbs.
#[test]
fn the_recorded_mmap_lock_wait_behind_a_32_gib_pin_names_the_pinning_call() {
    let incident = run2("mmap-lock-behind-32gib-pin.incident.json");
    let v = reports::verdict::verdict(&incident);
    assert!(
        v.starts_with(
            "thread 655 `rmlock` was in D for 8.3 s in syscall `mmap` at `vm_mmap_pgoff`"
        ),
        "{v}"
    );
    assert!(
        v.contains(
            "no thread in D holds the `mmap_lock`; in flight on other threads (breadcrumbs): tid 649 \
             `cuMemHostRegister_v2(32 GiB)` entered 1.3 s ago"
        ),
        "{v}"
    );
    assert!(v.ends_with("; resolved"), "{v}");
    let md = reports::render::markdown(&incident);
    assert!(md.contains("waits for | `mmap_lock`"), "{md}");
}

/// Issue 29 on the GPU host (tests/gpu/pyframes_run.sh): a PyTorch thread held in a real `cuMemcpyDtoH`
/// into a MAP_SHARED mapping of a frozen file. Python frames, the breadcrumb and the libcuda frame together.
#[test]
fn the_recorded_pytorch_copy_into_a_frozen_file_names_the_python_line_and_the_driver_call() {
    let incident = run2("pytorch-dtoh-frozen-file.incident.json");
    let v = reports::verdict::verdict(&incident);
    assert!(
        v.contains("page fault → filesystem freeze (percpu_rwsem_wait)"),
        "{v}"
    );
    assert!(
        v.contains("(from `pyframes_dtoh.py:25` `host.copy_(device)"),
        "{v}"
    );
    assert!(
        v.contains("last breadcrumb `cuMemcpyDtoHAsync_v2(4 MiB)`"),
        "{v}"
    );
    let w = &incident.wedged_threads[0];
    let python: Vec<String> = w
        .python_stack
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|f| format!("{}:{}", f.function, f.line.unwrap_or(0)))
        .collect();
    assert_eq!(python[..2], ["copy_back:25", "step:30"], "{python:?}");
    let frame = w.user_frame.as_ref().unwrap();
    assert!(frame
        .path
        .as_deref()
        .unwrap()
        .contains("libcuda.so.580.159.04"));
    assert!(frame.build_id.is_some());
}
