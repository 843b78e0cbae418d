//! Integration tests: the injection library as the agent sees it. The library itself is tested by
//! loading it (inject/cdylib/tests/load.rs for CUPTI, interpose.rs for the driver-API interposer,
//! which build the cdylib first); here, through the binary: `run --inject` preloads the interposer
//! (the default) or names the CUPTI library (`--inject=cupti`, `--cupti`), and
//! `ring dump` shows what an injected ring carries (the fail-soft status, a CUDA 13 `_v2` call
//! in flight under its ring id with the real name as label).

use std::path::Path;
use std::process::{Command, Output};

use breadcrumb::{Args, Call, Writer};

fn wedge_capture(args: &[&std::ffi::OsStr], env: &[(&str, &Path)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_wedge-capture"));
    command.args(args);
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("run wedge-capture")
}

#[test]
fn run_hands_the_injection_variables_to_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let out = dir.path().join("incidents");
    let rings = dir.path().join("rings");
    let script = format!(
        "printf '%s\\n%s\\n%s\\n' \"$CUDA_INJECTION64_PATH\" \"$WEDGE_CAPTURE_CUPTI\" \
         \"$WEDGE_CAPTURE_RING_DIR\" > '{}'",
        seen.display()
    );
    let output = wedge_capture(
        &[
            "run".as_ref(),
            "--no-nvidia-smi".as_ref(),
            "--out".as_ref(),
            out.as_os_str(),
            "--ring-dir".as_ref(),
            rings.as_os_str(),
            "--".as_ref(),
            "sh".as_ref(),
            "-c".as_ref(),
            script.as_ref(),
        ],
        &[
            (
                "CUDA_INJECTION64_PATH",
                Path::new("/opt/wc/lib/libwedge_inject.so"),
            ),
            (
                "WEDGE_CAPTURE_CUPTI",
                Path::new("/usr/local/cuda/lib64/libcupti.so"),
            ),
        ],
    );
    assert!(
        output.status.success(),
        "{:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let seen = std::fs::read_to_string(&seen).unwrap();
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(lines[0], "/opt/wc/lib/libwedge_inject.so");
    assert_eq!(lines[1], "/usr/local/cuda/lib64/libcupti.so");
    assert_eq!(Path::new(lines[2]), rings);
}

#[test]
fn ring_dump_shows_an_injected_ring() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("4242-99.cupti.ring");
    // What the injection library writes: a launch (grid in the chunk fields, kernel as label),
    // then a CUDA 13 cuCtxSynchronize_v2 that never returns.
    let writer = Writer::create(&path, 64).unwrap();
    let launch = Args {
        ptr: 0xf00,
        stream: 0x51,
        chunk: 1024,
        chunk_count: 1,
        tensor_first: 1,
        tensor_count: 256,
        ..Args::default()
    };
    let token = writer.enter(Call::CuLaunchKernel, &launch, "_Z11spin_kernelyPi");
    writer.exit(token, 0);
    writer.enter(
        Call::CuCtxSynchronize,
        &Args::default(),
        "cuCtxSynchronize_v2",
    );

    let text = wedge_capture(&["ring".as_ref(), "dump".as_ref(), path.as_os_str()], &[]);
    assert!(text.status.success());
    let stdout = String::from_utf8_lossy(&text.stdout);
    let in_flight = stdout
        .split("IN FLIGHT")
        .nth(1)
        .expect("an in-flight section");
    assert!(in_flight.contains("cuCtxSynchronize"), "{stdout}");
    assert!(in_flight.contains("cuCtxSynchronize_v2"), "{stdout}");
    assert!(stdout.contains("_Z11spin_kernelyPi"), "{stdout}");

    // A fail-soft reason lands in the header, and both views show it.
    writer.set_status(
        4,
        "another CUPTI subscriber is active: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (39)",
    );
    let text = wedge_capture(&["ring".as_ref(), "dump".as_ref(), path.as_os_str()], &[]);
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(stdout.contains("writer status (code 4)"), "{stdout}");
    let json = wedge_capture(
        &[
            "ring".as_ref(),
            "dump".as_ref(),
            "--format".as_ref(),
            "json".as_ref(),
            path.as_os_str(),
        ],
        &[],
    );
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(value["header"]["status_code"], 4);
    assert!(value["header"]["status"]
        .as_str()
        .unwrap()
        .contains("MULTIPLE_SUBSCRIBERS"));
}

#[test]
fn run_inject_finds_the_libraries_and_exports_them() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    let cupti = dir.path().join("libcupti.so");
    let inject_lib = dir.path().join("libwedge_inject.so");
    std::fs::write(&cupti, b"").unwrap();
    std::fs::write(&inject_lib, b"").unwrap();
    let out = dir.path().join("incidents");
    let script = format!(
        "printf '%s\\n%s\\n' \"$CUDA_INJECTION64_PATH\" \"$WEDGE_CAPTURE_CUPTI\" > '{}'",
        seen.display()
    );
    let output = wedge_capture(
        &[
            "run".as_ref(),
            "--no-nvidia-smi".as_ref(),
            "--inject".as_ref(),
            "--cupti".as_ref(),
            cupti.as_os_str(),
            "--out".as_ref(),
            out.as_os_str(),
            "--".as_ref(),
            "sh".as_ref(),
            "-c".as_ref(),
            script.as_ref(),
        ],
        &[("WEDGE_CAPTURE_INJECT_LIB", inject_lib.as_path())],
    );
    assert!(
        output.status.success(),
        "{:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let seen = std::fs::read_to_string(&seen).unwrap();
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(
        lines,
        [inject_lib.to_str().unwrap(), cupti.to_str().unwrap()]
    );
}

#[test]
fn run_inject_with_a_missing_cupti_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-libcupti.so");
    // A clean `cargo test` leaves no libwedge_inject.so next to the binary: name a stand-in.
    let inject_lib = dir.path().join("libwedge_inject.so");
    std::fs::write(&inject_lib, b"").unwrap();
    let out = dir.path().join("incidents");
    let output = wedge_capture(
        &[
            "run".as_ref(),
            "--inject".as_ref(),
            "--cupti".as_ref(),
            missing.as_os_str(),
            "--out".as_ref(),
            out.as_os_str(),
            "--".as_ref(),
            "true".as_ref(),
        ],
        &[("WEDGE_CAPTURE_INJECT_LIB", inject_lib.as_path())],
    );
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--inject") && stderr.contains("no-such-libcupti.so"),
        "{stderr}"
    );
}

/// `--inject` alone is the driver-API interposer: LD_PRELOAD (before the user's own preloads), no CUPTI
/// variables, and no libcupti needed.
#[test]
fn run_inject_preloads_the_interposer_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("seen");
    // A stand-in: the loader refuses it with a message and runs the command anyway.
    let inject_lib = dir.path().join("libwedge_inject.so");
    std::fs::write(&inject_lib, b"").unwrap();
    let out = dir.path().join("incidents");
    let script = format!(
        "printf '%s\\n%s\\n' \"$LD_PRELOAD\" \"${{CUDA_INJECTION64_PATH:-unset}}\" > '{}'",
        seen.display()
    );
    let output = wedge_capture(
        &[
            "run".as_ref(),
            "--no-nvidia-smi".as_ref(),
            "--inject".as_ref(),
            "--out".as_ref(),
            out.as_os_str(),
            "--".as_ref(),
            "sh".as_ref(),
            "-c".as_ref(),
            script.as_ref(),
        ],
        &[
            ("WEDGE_CAPTURE_INJECT_LIB", inject_lib.as_path()),
            ("LD_PRELOAD", Path::new("/nonexistent/libmine.so")),
            ("CUDA_HOME", Path::new("/nonexistent")),
        ],
    );
    assert!(
        output.status.success(),
        "{:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("driver-API interposition"), "{stderr}");
    let seen = std::fs::read_to_string(&seen).unwrap();
    let lines: Vec<&str> = seen.lines().collect();
    let inject_lib = std::fs::canonicalize(&inject_lib).unwrap();
    assert_eq!(
        lines,
        [
            format!("{} /nonexistent/libmine.so", inject_lib.display()).as_str(),
            "unset"
        ]
    );
}

/// `--inject=cupti` states its cost; `--cupti` selects the CUPTI path; an unknown kind is a usage error.
#[test]
fn run_inject_kinds_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let cupti = dir.path().join("libcupti.so");
    let inject_lib = dir.path().join("libwedge_inject.so");
    std::fs::write(&cupti, b"").unwrap();
    std::fs::write(&inject_lib, b"").unwrap();
    let out = dir.path().join("incidents");
    let run = |extra: &[&std::ffi::OsStr]| {
        let mut args: Vec<&std::ffi::OsStr> = vec![
            "run".as_ref(),
            "--no-nvidia-smi".as_ref(),
            "--out".as_ref(),
            out.as_os_str(),
        ];
        args.extend_from_slice(extra);
        args.extend([std::ffi::OsStr::new("--"), std::ffi::OsStr::new("true")]);
        wedge_capture(&args, &[("WEDGE_CAPTURE_INJECT_LIB", inject_lib.as_path())])
    };
    let output = run(&[
        "--inject=cupti".as_ref(),
        "--cupti".as_ref(),
        cupti.as_os_str(),
    ]);
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("breadcrumbs by CUPTI: NVML clients may stall during long UVM operations"),
        "{stderr}"
    );
    let output = run(&[
        "--inject=driver".as_ref(),
        "--cupti".as_ref(),
        cupti.as_os_str(),
    ]);
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("breadcrumbs by CUPTI"));
    let output = run(&["--inject=nvtx".as_ref()]);
    assert_eq!(output.status.code(), Some(2));
}
