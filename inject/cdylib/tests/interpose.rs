//! The driver-API interposer as a CUDA program meets it, without a GPU: libwedge_inject.so in `LD_PRELOAD` of
//! a small C program (tests/data/fake_cuda_app.c) that reaches a stand-in libcuda.so.1 (tests/data/
//! fake_libcuda.c) the ways real programs do: `dlopen` + `dlsym` (cudarc), `cuGetProcAddress` by version and
//! stream flavour (the CUDA runtime), and linked against it (`-lcuda`). The stand-in prints the arguments each
//! real function received, so "arguments arrive unchanged" is checked against a run without the interposer.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use breadcrumb::{read_ring, ReadOptions, RecordKind, RingSnapshot};

/// The cdylib built with this test (see load.rs).
fn injection_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe
        .parent()
        .expect("test binary under target/<profile>/deps");
    [
        deps.join("libwedge_inject.so"),
        deps.parent().unwrap_or(deps).join("libwedge_inject.so"),
    ]
    .into_iter()
    .find(|so| so.is_file())
    .expect("libwedge_inject.so built")
}

/// The stand-in libcuda, the two RTLD_NEXT probe libraries and both programs, built into `dir`. `None`
/// (skip) without a C compiler, except with CI=true.
fn build(dir: &Path) -> Option<()> {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let d = dir.display().to_string();
    let steps: Vec<Vec<String>> = vec![
        vec![
            "-shared",
            "-fPIC",
            "-Wl,-soname,libcuda.so.1",
            "-Wl,-Bsymbolic",
            "-o",
            &format!("{d}/libcuda.so.1"),
        ]
        .into_iter()
        .map(String::from)
        .chain([data.join("fake_libcuda.c").display().to_string()])
        .collect(),
        vec![
            "-shared".into(),
            "-fPIC".into(),
            "-DWHICH=1".into(),
            "-o".into(),
            format!("{d}/libnext1.so"),
            data.join("fake_next.c").display().to_string(),
        ],
        vec![
            "-shared".into(),
            "-fPIC".into(),
            "-DWHICH=2".into(),
            "-o".into(),
            format!("{d}/libnext2.so"),
            data.join("fake_next.c").display().to_string(),
        ],
    ];
    for args in steps {
        if !compile(&cc, &args) {
            return None;
        }
    }
    std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).unwrap();
    let app = data.join("fake_cuda_app.c").display().to_string();
    let link = |out: &str, extra: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = vec!["-o".into(), format!("{d}/{out}")];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend([
            app.clone(),
            "-Wl,--no-as-needed".into(),
            format!("-L{d}"),
            "-lnext1".into(),
            "-lnext2".into(),
            "-ldl".into(),
            format!("-Wl,-rpath,{d}"),
        ]);
        args
    };
    let mut linked = link("app_linked", &["-DLINKED"]);
    linked.push("-lcuda".into());
    (compile(&cc, &link("app", &[])) && compile(&cc, &linked)).then_some(())
}

fn compile(cc: &str, args: &[String]) -> bool {
    match Command::new(cc).args(args).status() {
        Ok(status) if status.success() => true,
        other => {
            assert!(
                !breadcrumb::in_ci(),
                "CI=true: cannot build with {cc} {args:?}: {other:?}"
            );
            eprintln!("skipping: no C compiler ({cc}: {other:?})");
            false
        }
    }
}

/// Runs `program` (in `dir`) with `env`, the interposer preloaded when `preload`.
fn run(dir: &Path, program: &str, args: &[&str], env: &[(&str, &Path)], preload: bool) -> Output {
    let mut command = Command::new(dir.join(program));
    command
        .args(args)
        .env("LD_LIBRARY_PATH", dir)
        .env_remove("WEDGE_CAPTURE_RING")
        .env_remove("WEDGE_CAPTURE_RING_DIR")
        .env_remove("LD_PRELOAD");
    if preload {
        command.env("LD_PRELOAD", injection_library());
    }
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("run the test program")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The lines the stand-in driver printed: what each real function received.
fn real_calls(output: &Output) -> Vec<String> {
    text(&output.stdout)
        .lines()
        .filter(|l| l.starts_with("real "))
        .map(String::from)
        .collect()
}

fn ring(path: &Path) -> RingSnapshot {
    read_ring(path, &ReadOptions::default()).expect("read the ring back")
}

fn enters(snapshot: &RingSnapshot) -> Vec<(String, String)> {
    snapshot
        .records
        .iter()
        .filter(|r| r.kind == RecordKind::Enter)
        .map(|r| (r.call.clone(), r.label.clone()))
        .collect()
}

#[test]
fn the_runtime_way_records_every_call_and_passes_its_arguments_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    if build(dir.path()).is_none() {
        return;
    }
    let bare = run(dir.path(), "app", &[], &[], false);
    assert!(bare.status.success(), "bare run: {}", text(&bare.stdout));
    let ring_path = dir.path().join("app.ring");
    let preloaded = run(
        dir.path(),
        "app",
        &[],
        &[("WEDGE_CAPTURE_RING", &ring_path)],
        true,
    );
    let stdout = text(&preloaded.stdout);
    // The program's own checks: dlerror clean after a found symbol, RTLD_NEXT from a later library finds the
    // next one, one wrapper for one function asked at two versions, cuGetProcAddress of itself.
    assert!(
        preloaded.status.success(),
        "{stdout}\n{}",
        text(&preloaded.stderr)
    );
    assert!(
        stdout.contains("runtime done") && !stdout.contains("CHECK FAILED"),
        "{stdout}"
    );
    // Every real function got exactly what the program passed (11 arguments with five on the stack, a struct
    // by value, the per-thread-stream variant the driver chose).
    assert_eq!(real_calls(&preloaded), real_calls(&bare));
    assert_eq!(real_calls(&bare).len(), 8, "{:?}", real_calls(&bare));

    let snapshot = ring(&ring_path);
    let names = enters(&snapshot);
    let expect = [
        ("cuInit", ""),
        ("cuMemAlloc_v2", ""),
        ("cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz"),
        ("cuMemcpyHtoDAsync_v2", ""),
        ("cuLaunchKernel", "cuLaunchKernel_ptsz _Z4spinPi"),
        ("cuMemPrefetchAsync", "cuMemPrefetchAsync_v2"),
        ("cuCtxSynchronize", ""),
    ];
    let got: Vec<(&str, &str)> = names
        .iter()
        .map(|(c, l)| (c.as_str(), l.as_str()))
        .collect();
    assert_eq!(
        got, expect,
        "quiet getters and the unknown function leave no record"
    );
    assert_eq!(snapshot.records.len(), 14, "every call exited");
    let record = |call: &str, label: &str| {
        snapshot
            .records
            .iter()
            .find(|r| r.kind == RecordKind::Enter && r.call == call && r.label == label)
            .unwrap()
    };
    assert_eq!(record("cuMemAlloc_v2", "").args.bytes, 3 << 30);
    let copy = record("cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz");
    assert_eq!(
        (
            copy.args.ptr,
            copy.args.ptr2,
            copy.args.bytes,
            copy.args.stream
        ),
        (0x7f00_0000_0000, 0x5555_0000, 1 << 20, 0x51)
    );
    let launch = record("cuLaunchKernel", "cuLaunchKernel_ptsz _Z4spinPi");
    assert_eq!(
        (launch.args.ptr, launch.args.chunk, launch.args.tensor_count),
        (0xf00, 120, 256)
    );
    let launch_exit = snapshot
        .records
        .iter()
        .find(|r| r.kind == RecordKind::Exit && r.call == "cuLaunchKernel")
        .unwrap();
    assert_eq!(launch_exit.result, Some(2), "the CUresult is recorded");
    // The function the table does not know ran unrecorded, and the ring says so.
    assert!(stdout.contains("real cuWedgeTestUnknown 42"));
    assert_eq!(snapshot.header.status_code, 7);
    let status = snapshot.header.status.unwrap();
    assert!(status.contains("cuWedgeTestUnknown"), "{status}");
}

#[test]
fn a_program_linked_against_libcuda_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    if build(dir.path()).is_none() {
        return;
    }
    let bare = run(dir.path(), "app_linked", &[], &[], false);
    let ring_path = dir.path().join("linked.ring");
    let preloaded = run(
        dir.path(),
        "app_linked",
        &[],
        &[("WEDGE_CAPTURE_RING", &ring_path)],
        true,
    );
    assert!(preloaded.status.success(), "{}", text(&preloaded.stdout));
    assert_eq!(real_calls(&preloaded), real_calls(&bare));
    let names = enters(&ring(&ring_path));
    let calls: Vec<&str> = names.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(calls, ["cuInit", "cuMemAlloc_v2", "cuLaunchKernel"]);
    assert_eq!(
        names[2].1, "_Z4spinPi",
        "the kernel's name from cuFuncGetName"
    );
}

#[test]
fn the_call_in_flight_survives_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    if build(dir.path()).is_none() {
        return;
    }
    let ring_path = dir.path().join("kill.ring");
    let output = run(
        dir.path(),
        "app",
        &["kill"],
        &[
            ("WEDGE_CAPTURE_RING", &ring_path),
            ("FAKE_CUDA_KILL_IN_SYNC", Path::new("1")),
        ],
        true,
    );
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGKILL),
        "{:?}",
        output.status
    );
    let snapshot = ring(&ring_path);
    assert_eq!(snapshot.in_flight.len(), 1, "{:?}", snapshot.in_flight);
    assert_eq!(snapshot.in_flight[0].call, "cuCtxSynchronize");
}

#[test]
fn a_ring_dir_gets_a_driver_ring_only_for_processes_that_call_the_driver() {
    let dir = tempfile::tempdir().unwrap();
    if build(dir.path()).is_none() {
        return;
    }
    let rings = dir.path().join("rings");
    std::fs::create_dir(&rings).unwrap();
    // A shell that never touches CUDA: preloaded, unharmed, no ring.
    let shell = Command::new("sh")
        .args(["-c", "echo hi"])
        .env("LD_PRELOAD", injection_library())
        .env("WEDGE_CAPTURE_RING_DIR", &rings)
        .output()
        .unwrap();
    assert_eq!(text(&shell.stdout), "hi\n");
    assert_eq!(std::fs::read_dir(&rings).unwrap().count(), 0);
    let output = run(
        dir.path(),
        "app",
        &[],
        &[("WEDGE_CAPTURE_RING_DIR", &rings)],
        true,
    );
    assert!(output.status.success(), "{}", text(&output.stdout));
    let names: Vec<String> = std::fs::read_dir(&rings)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].ends_with(".driver.ring"), "{names:?}");
    let header = ring(&rings.join(&names[0])).header;
    assert!(
        names[0].starts_with(&format!("{}-", header.writer_pid)),
        "{names:?}"
    );
}
