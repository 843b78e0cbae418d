//! Recordings from the GPU host (issue 31; tests/gpu/recordings/, made by tests/gpu/agent_run.sh and
//! rmlock_run.sh on an H100 with driver 580.159.04): what the tool read there must stay readable here.

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
