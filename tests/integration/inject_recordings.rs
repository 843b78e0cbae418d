//! Recordings of issue 42 on an H100 (driver 580.159.04, CUDA 13.0; tests/gpu/inject42_*.sh, kept in
//! tests/gpu/recordings/h100-580.159.04-issue42): what the two breadcrumb paths recorded and measured there must
//! stay readable and keep saying what docs/inject.md says. No GPU needed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

fn recording(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/gpu/recordings/h100-580.159.04-issue42")
        .join(name)
}

fn dump(name: &str) -> serde_json::Value {
    let out = Command::new(crate::util::bin())
        .args(["ring", "dump", "--format", "json", "--all"])
        .arg(recording(name))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dump: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(dump["torn_slots"], 0, "{name}");
    assert_eq!(dump["invalid_slots"], 0, "{name}");
    assert!(
        dump["in_flight"].as_array().unwrap().is_empty(),
        "{name}: every call returned"
    );
    dump
}

/// Enter records per driver function: the label's name for `_ptsz`/`_v2`/custom calls, else the call id's.
fn calls_by_function(dump: &serde_json::Value) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for record in dump["records"].as_array().unwrap() {
        if record["kind"] != "enter" {
            continue;
        }
        let label = record["label"].as_str().unwrap_or("");
        let first = label.split(' ').next().unwrap_or("");
        let name = if first.starts_with("cu") {
            first.to_string()
        } else {
            record["call"].as_str().unwrap().to_string()
        };
        *counts.entry(name).or_default() += 1;
    }
    counts
}

/// The same PyTorch program (inject/tests/data/inject_torch.py) under `run --inject` and `run --inject=cupti`:
/// every call CUPTI saw, the interposer saw as often, kernel names included; the interposer also sees the calls
/// at exit that CUPTI no longer reports.
#[test]
fn the_interposer_recorded_every_driver_call_cupti_did_on_pytorch() {
    let driver = dump("pytorch.driver.ring");
    let cupti = dump("pytorch.cupti.ring");
    let (by_driver, by_cupti) = (calls_by_function(&driver), calls_by_function(&cupti));
    assert!(by_cupti.values().sum::<u64>() >= 30, "{by_cupti:?}");
    for (function, count) in &by_cupti {
        assert!(
            by_driver.get(function).copied().unwrap_or(0) >= *count,
            "{function}: CUPTI {count}, interposer {:?}",
            by_driver.get(function)
        );
    }
    for function in ["cuLibraryUnload", "cuDevicePrimaryCtxRelease"] {
        assert!(
            by_driver.contains_key(function) && !by_cupti.contains_key(function),
            "{function}"
        );
    }
    // The launches, with their kernel names (CUPTI's symbolName; the interposer's cuFuncGetName), alike.
    let launches = |dump: &serde_json::Value| -> Vec<(String, String)> {
        dump["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["kind"] == "enter")
            .map(|r| {
                let call = r["call"].as_str().unwrap().to_string();
                (call, r["label"].as_str().unwrap_or("").to_string())
            })
            .filter(|(call, label)| call.contains("Launch") || label.contains("Launch"))
            .collect()
    };
    let launched = launches(&driver);
    assert_eq!(launched, launches(&cupti));
    assert_eq!(launched.len(), 3, "{launched:?}");
    assert!(
        launched
            .iter()
            .all(|(_, l)| l.contains("_ZN2at6native") || l.contains("gemm")),
        "{launched:?}"
    );
}

/// cudarc (`wedge-capture upload`) reaches libcuda through dlopen + dlsym: its calls are in the driver ring.
#[test]
fn the_interposer_recorded_the_cudarc_uploader() {
    let counts = calls_by_function(&dump("upload-cudarc.driver.ring"));
    for function in ["cuInit", "cuMemAlloc_v2", "cuMemcpyHtoD_v2", "cuMemFree_v2"] {
        assert!(
            counts.contains_key(function),
            "{function} not in {counts:?}"
        );
    }
}

/// The watched program of the measurement (uvmlock populate) under `run --inject`: its prefetch of 48 GiB is the
/// last call of the main thread, `cuMemPrefetchAsync_v2` with its size.
#[test]
fn the_interposer_recorded_the_uvm_prefetch() {
    let dump = dump("uvmlock-populate.driver.ring");
    let prefetch: Vec<u64> = dump["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "enter" && r["label"] == "cuMemPrefetchAsync_v2")
        .map(|r| r["args"]["bytes"].as_u64().unwrap())
        .collect();
    assert!(prefetch.contains(&(48u64 << 30)), "{prefetch:?}");
    assert!(
        prefetch.contains(&(64u64 << 20)),
        "the workers' 64 MiB too: {prefetch:?}"
    );
}

/// nvidia-smi -q from another process while uvmlock populated 48 GiB of managed memory (tests/gpu/
/// smi_during_uvm.py, every run of the three batches): under an active CUPTI subscription a run waited for
/// seconds; under the interposer, bare and the other CUPTI steps none did.
#[test]
fn the_recorded_nvidia_smi_times_back_the_docs() {
    let text = std::fs::read_to_string(recording("nvidia-smi-runs.jsonl")).unwrap();
    let mut seen = BTreeMap::new();
    for line in text.lines() {
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        let (Some(name), Some(populate)) = (value["name"].as_str(), value["populate_s"].as_f64())
        else {
            continue;
        };
        // (start relative to the populate, duration) of the runs that began during it.
        let started_inside: Vec<(f64, f64)> = value["smi_runs_rel"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r[0].as_f64().unwrap(), r[1].as_f64().unwrap()))
            .filter(|(start, _)| (0.0..populate).contains(start))
            .collect();
        assert!(!started_inside.is_empty(), "{name}");
        let longest = started_inside.iter().map(|r| r.1).fold(0.0, f64::max);
        let inside = started_inside
            .iter()
            .filter(|(start, len)| start + len <= populate)
            .map(|r| r.1)
            .fold(0.0, f64::max);
        seen.insert(name.to_string(), (inside, longest));
    }
    for (name, (inside, longest)) in &seen {
        let cupti_subscribed = name.contains("cupti") && !name.starts_with("arena1")
            || ["noop-none", "noop-domain"]
                .iter()
                .any(|n| name.ends_with(n));
        if cupti_subscribed {
            assert!(*longest >= 5.0, "{name}: {longest} s");
        } else {
            // Within the populate; a run that straddles its end also waits for the program's own munmap of the
            // 48 GiB (cuMemFree, 0.3-0.4 s), bare included.
            assert!(*inside <= 0.5, "{name}: {inside} s");
            assert!(*longest <= 1.0, "{name}: {longest} s");
        }
    }
    for name in [
        "bare",
        "inject-driver",
        "inject-driver-2",
        "inject-driver-3",
        "inject-cupti",
        "noop-none",
    ] {
        assert!(seen.contains_key(name), "{name} measured");
    }
}

/// `doctor --json` on the GPU host names the default breadcrumb path.
#[test]
fn the_recorded_doctor_names_the_breadcrumb_path() {
    let doctor: serde_json::Value =
        serde_json::from_slice(&std::fs::read(recording("doctor.json")).unwrap()).unwrap();
    let check = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "breadcrumbs")
        .expect("a breadcrumbs check");
    assert_eq!(check["status"], "ok");
    assert!(check["detail"]
        .as_str()
        .unwrap()
        .contains("driver-API interposition"));
}
