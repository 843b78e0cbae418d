//! Integration tests: upload (through the built binary).

use std::process::{Command, Output};

use breadcrumb::{read_ring, ReadOptions, RecordKind};

fn upload(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wedge-capture"))
        .arg("upload")
        .args(args)
        .output()
        .expect("run wedge-capture")
}

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

const SMALL: &[&str] = &[
    "--tensors",
    "3000",
    "--params",
    "2",
    "--param-floats",
    "70000",
];

#[test]
fn cuda_backend_without_a_driver_exits_6_with_a_clear_message() {
    let out = upload(&[
        "--backend",
        "cuda",
        "--tensors",
        "100",
        "--params",
        "0",
        "--verify",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if libcuda_present() {
        eprintln!(
            "libcuda is present: checking the CUDA backend works instead of the no-driver path"
        );
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        return;
    }
    assert_eq!(out.status.code(), Some(6), "stderr: {stderr}");
    assert!(stderr.contains("CUDA driver unavailable"), "{stderr}");
    assert!(stderr.contains("libcuda"), "{stderr}");
    assert!(stderr.contains("--backend host"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn host_backend_verify_json_succeeds_for_every_strategy() {
    for strategy in ["ztensor", "managed", "pinned"] {
        let mut args = vec![
            "--backend",
            "host",
            "--strategy",
            strategy,
            "--verify",
            "--format",
            "json",
        ];
        args.extend_from_slice(SMALL);
        args.extend_from_slice(&["--chunk-bytes", "256KiB"]);
        // Only the pinned strategy stages (the others refuse the flag rather than ignore it).
        if strategy == "pinned" {
            args.extend_from_slice(&["--staging-bytes", "100000"]);
        }
        let out = upload(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        assert_eq!(v["backend"], "host");
        assert_eq!(v["strategy"], strategy);
        assert_eq!(v["tensors"], 3002);
        assert_eq!(v["bytes"], 3000 * 772 + 2 * 280_000);
        assert!(v["chunks"].as_u64().unwrap() >= 10, "{v}");
        assert!(v["driver_calls"].as_u64().unwrap() > 0);
        assert!(v["seconds"].as_f64().unwrap() > 0.0);
        assert!(v["gbps"].as_f64().unwrap() > 0.0);
        assert_eq!(v["verify"]["tensors"], 3002);
    }
}

#[test]
fn ring_holds_an_enter_and_exit_for_every_call() {
    let dir = tempfile::tempdir().unwrap();
    let ring = dir.path().join("upload.ring");
    let mut args = vec![
        "--backend",
        "host",
        "--strategy",
        "ztensor",
        "--verify",
        "--ring",
    ];
    let ring_arg = ring.to_str().unwrap();
    args.push(ring_arg);
    args.extend_from_slice(SMALL);
    args.extend_from_slice(&["--chunk-tensors", "100"]);
    let out = upload(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let snap = read_ring(&ring, &ReadOptions::default()).unwrap();
    assert!(snap.in_flight.is_empty());
    let enters = snap
        .records
        .iter()
        .filter(|r| r.kind == RecordKind::Enter)
        .count();
    let exits = snap
        .records
        .iter()
        .filter(|r| r.kind == RecordKind::Exit)
        .count();
    assert_eq!(enters, exits);
    // 31 chunks (3000 / 100 + the parameters): one cuMemAlloc_v2 and one cuMemcpyHtoD_v2 each.
    let allocs: Vec<_> = snap
        .records
        .iter()
        .filter(|r| r.kind == RecordKind::Enter && r.call == "cuMemAlloc_v2")
        .collect();
    assert_eq!(allocs.len(), 31);
    assert_eq!(allocs[11].label, "chunk 12/31");
    assert_eq!(allocs[11].args.tensor_first, 1100);
    assert_eq!(allocs[11].args.tensor_count, 100);
    assert_eq!(allocs[11].args.bytes, 100 * 772);
    assert_eq!(
        snap.records.first().map(|r| r.call.as_str()),
        Some("cuInit")
    );
}

#[test]
fn compare_on_the_host_backend_reports_every_contender() {
    let mut args = vec![
        "--backend",
        "host",
        "--compare",
        "--repeat",
        "1",
        "--format",
        "json",
    ];
    args.extend_from_slice(SMALL);
    let out = upload(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["ztensor", "managed", "pinned", "pinned, staging reused"]
    );
    assert!(v["ceiling_pinned"]["gbps"].as_f64().unwrap() > 0.0);
    let in_rounds = &v["ceiling_pinned_in_rounds"];
    assert_eq!(
        in_rounds["seconds"].as_array().unwrap().len(),
        1,
        "one per round"
    );
    assert!(in_rounds["gbps"].as_f64().unwrap() > 0.0);
    assert!(v["ceiling_pageable"]["gbps"].as_f64().unwrap() > 0.0);
    assert_eq!(v["ratios"].as_array().unwrap().len(), 4);
}

#[test]
fn bad_sizes_are_usage_errors() {
    let out = upload(&["--backend", "host", "--chunk-bytes", "12XB"]);
    assert_eq!(out.status.code(), Some(2));
    let out = upload(&["--backend", "host", "--chunk-tensors", "0"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
