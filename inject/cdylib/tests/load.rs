//! The built `libwedge_inject.so`, loaded the way the CUDA driver loads it (`dlopen`, then
//! `InitializeInjection`), in a child process (each test gets a fresh process: the library's state
//! is process-global). No GPU: CUPTI is absent, wrong, busy, or a stand-in built from
//! tests/data/fake_cupti.c that plays the driver's callbacks.
//!
//! This file lives in the `inject` package so that `cargo test` builds the cdylib before it runs.

use std::ffi::{c_char, c_int, c_void, CString};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use breadcrumb::{read_ring, Call, ReadOptions, RecordKind, RingSnapshot};

const ROLE: &str = "WEDGE_INJECT_TEST_ROLE";
const SO: &str = "WEDGE_INJECT_TEST_SO";

/// The cdylib built with this test: cargo writes it into target/<profile>/deps/ next to this test
/// binary (and copies it to target/<profile>/ only on `cargo build`, so that copy may be stale).
/// Found from the test binary's own path, so it follows CARGO_TARGET_DIR and the profile.
fn injection_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe
        .parent()
        .expect("test binary under target/<profile>/deps");
    let candidates = [
        deps.join("libwedge_inject.so"),
        deps.parent().unwrap_or(deps).join("libwedge_inject.so"),
    ];
    candidates
        .iter()
        .find(|so| so.is_file())
        .cloned()
        .unwrap_or_else(|| panic!("libwedge_inject.so not built: looked at {candidates:?}"))
}

/// Builds the stand-in libcupti with the system C compiler. `None` (skip) if there is none, unless
/// CI=true, where that is a failure.
fn fake_cupti(dir: &Path) -> Option<PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/fake_cupti.c");
    let out = dir.join("libfakecupti.so");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    match Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&out)
        .arg(&source)
        .status()
    {
        Ok(status) if status.success() => Some(out),
        other => {
            assert!(
                !breadcrumb::in_ci(),
                "CI=true: cannot build the fake CUPTI with {cc}: {other:?}"
            );
            eprintln!("skipping: no C compiler ({cc}: {other:?})");
            None
        }
    }
}

/// Runs this test binary again as a child in `role`, with `env` set (and the ring variables
/// cleared unless given); it must exit with success.
fn child(role: &str, env: &[(&str, &Path)]) -> Output {
    let output = child_any(role, env);
    assert!(
        output.status.success(),
        "child failed: {:?}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// [`child`] without the success check.
fn child_any(role: &str, env: &[(&str, &Path)]) -> Output {
    let exe = std::env::current_exe().unwrap();
    let mut command = Command::new(exe);
    command
        .args([
            "child_process",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .env(SO, injection_library())
        .env_remove("WEDGE_CAPTURE_RING")
        .env_remove("WEDGE_CAPTURE_RING_DIR")
        .env_remove("WEDGE_CAPTURE_CUPTI")
        .env_remove("FAKE_CUPTI_SUBSCRIBE_RESULT");
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().expect("run the child")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ring(path: &Path) -> RingSnapshot {
    read_ring(path, &ReadOptions::default()).expect("read the ring back")
}

/// Not a test of its own: the body of the child processes (does nothing unless ROLE is set).
#[test]
fn child_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let so = CString::new(std::env::var(SO).unwrap()).unwrap();
    // SAFETY: dlopen of the freshly built injection library; its constructors do nothing unusual.
    let handle = unsafe { libc::dlopen(so.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen of the injection library failed");
    let initialize = symbol::<extern "C" fn() -> c_int>(handle, c"InitializeInjection");
    let state = symbol::<extern "C" fn() -> c_int>(handle, c"wedge_inject_state");
    println!("before={}", state());
    println!("init={}", initialize());
    println!("again={}", initialize());
    println!("state={}", state());
    if role == "fake-calls" || role == "fake-calls-then-sigkill" {
        play_driver_calls();
    }
    if role == "fake-calls-then-sigkill" {
        // SAFETY: raising SIGKILL on ourselves; nothing runs after it.
        unsafe { libc::raise(libc::SIGKILL) };
    }
}

fn symbol<T: Copy>(handle: *mut c_void, name: &std::ffi::CStr) -> T {
    // SAFETY: `handle` is a live dlopen handle and `name` NUL-terminated.
    let pointer = unsafe { libc::dlsym(handle, name.as_ptr()) };
    assert!(!pointer.is_null(), "missing symbol {name:?}");
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: T is the function pointer type of the symbol (checked by the callers' signatures).
    unsafe { std::mem::transmute_copy(&pointer) }
}

type FakeCall = extern "C" fn(
    cbid: u32,
    site: c_int,
    name: *const c_char,
    params: *const c_void,
    result: c_int,
    symbol: *const c_char,
    correlation: *mut u64,
) -> c_int;

/// Plays the driver through the fake CUPTI's hook, as the real one calls back: an enter and an
/// exit per call, sharing a correlation slot.
fn play_driver_calls() {
    let cupti = CString::new(std::env::var("WEDGE_CAPTURE_CUPTI").unwrap()).unwrap();
    // SAFETY: the library the injection already loaded (same handle, reference counted).
    let handle = unsafe { libc::dlopen(cupti.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null());
    let call = symbol::<FakeCall>(handle, c"fake_cupti_call");
    let run = |cbid: u32,
               name: &std::ffi::CStr,
               params: *const c_void,
               result,
               kernel: *const c_char,
               exit: bool| {
        let mut slot = 0u64;
        assert_eq!(
            call(cbid, 0, name.as_ptr(), params, 0, kernel, &mut slot),
            0
        );
        if exit {
            assert_eq!(
                call(cbid, 1, name.as_ptr(), params, result, kernel, &mut slot),
                0
            );
        }
    };
    // cuMemAlloc_v2_params { CUdeviceptr *dptr; size_t bytesize; }
    let mut out = 0u64;
    let alloc: [u64; 2] = [(&mut out as *mut u64) as u64, 3 << 30];
    run(
        10,
        c"cuMemAlloc_v2",
        alloc.as_ptr().cast(),
        0,
        std::ptr::null(),
        true,
    );
    // A quiet getter: no records.
    run(
        11,
        c"cuCtxGetCurrent",
        std::ptr::null(),
        0,
        std::ptr::null(),
        true,
    );
    // cuMemcpyHtoDAsync_v2_params { dst; src; size_t ByteCount; CUstream hStream; }, ptsz variant.
    let copy: [u64; 4] = [0x7f00_0000_0000, 0x5555_0000, 1 << 20, 0x51];
    run(
        12,
        c"cuMemcpyHtoDAsync_v2_ptsz",
        copy.as_ptr().cast(),
        0,
        std::ptr::null(),
        true,
    );
    // cuLaunchKernel_params: f, 7 unsigned ints, hStream, kernelParams, extra; fails with 2.
    #[repr(C)]
    struct Launch {
        f: u64,
        dims: [u32; 7],
        stream: u64,
        params: u64,
        extra: u64,
    }
    let launch = Launch {
        f: 0xf00,
        dims: [120, 1, 1, 256, 1, 1, 0],
        stream: 0x51,
        params: 0,
        extra: 0,
    };
    run(
        13,
        c"cuLaunchKernel",
        (&launch as *const Launch).cast(),
        2,
        c"_Z4spinPi".as_ptr(),
        true,
    );
    // A call the ring has no id for.
    run(
        14,
        c"cuMemcpy2DAsync_v2",
        std::ptr::null(),
        0,
        std::ptr::null(),
        true,
    );
    // The exit of the cuInit that loaded us: its slot was never written by an enter.
    let mut never_entered = 0u64;
    assert_eq!(
        call(
            1,
            1,
            c"cuInit".as_ptr(),
            std::ptr::null(),
            0,
            std::ptr::null(),
            &mut never_entered
        ),
        0
    );
    // The same callback id again: classified from the cache.
    run(
        10,
        c"cuMemAlloc_v2",
        alloc.as_ptr().cast(),
        0,
        std::ptr::null(),
        true,
    );
    // The call that never returns.
    run(
        15,
        c"cuCtxSynchronize_v2",
        std::ptr::null(),
        0,
        std::ptr::null(),
        false,
    );
}

#[test]
fn fails_soft_when_cupti_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let ring_path = dir.path().join("app.ring");
    let missing = dir.path().join("no/libcupti.so.13");
    let output = child(
        "init",
        &[
            ("WEDGE_CAPTURE_RING", &ring_path),
            ("WEDGE_CAPTURE_CUPTI", &missing),
        ],
    );
    let (stdout, stderr) = (text(&output.stdout), text(&output.stderr));
    assert!(
        stdout.contains("before=0") && stdout.contains("init=1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("again=1") && stdout.contains("state=2"),
        "{stdout}"
    );
    assert_eq!(
        stderr.matches("CUPTI library not loadable").count(),
        1,
        "said once: {stderr}"
    );
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
    let header = ring(&ring_path).header;
    assert_eq!(header.status_code, 1);
    let status = header.status.expect("status in the ring header");
    assert!(status.contains("CUPTI library not loadable"), "{status}");
}

#[test]
fn fails_soft_when_the_library_is_not_cupti() {
    let dir = tempfile::tempdir().unwrap();
    let ring_path = dir.path().join("app.ring");
    let output = child(
        "init",
        &[
            ("WEDGE_CAPTURE_RING", &ring_path),
            ("WEDGE_CAPTURE_CUPTI", Path::new("libc.so.6")),
        ],
    );
    assert!(text(&output.stdout).contains("state=2"));
    let header = ring(&ring_path).header;
    assert_eq!(header.status_code, 2);
    assert!(header.status.unwrap().contains("cuptiSubscribe"));
}

#[test]
fn fails_soft_without_a_ring() {
    let dir = tempfile::tempdir().unwrap();
    let output = child("init", &[("WEDGE_CAPTURE_CUPTI", &dir.path().join("x.so"))]);
    assert!(text(&output.stdout).contains("state=2"));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("no breadcrumb ring configured"), "{stderr}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// A child in `role` with the fake CUPTI built and a ring file `app.ring` in a fresh directory (kept
/// alive by the returned TempDir); `extra` adds environment. [`child`] (success asserted) or, with
/// `may_fail`, [`child_any`]. None when no C compiler can build the fake (outside CI).
fn with_fake_cupti_ring(
    role: &str,
    extra: &[(&str, &Path)],
    may_fail: bool,
) -> Option<(tempfile::TempDir, PathBuf, Output)> {
    let dir = tempfile::tempdir().unwrap();
    let cupti = fake_cupti(dir.path())?;
    let ring_path = dir.path().join("app.ring");
    let mut env = vec![
        ("WEDGE_CAPTURE_RING", ring_path.as_path()),
        ("WEDGE_CAPTURE_CUPTI", cupti.as_path()),
    ];
    env.extend_from_slice(extra);
    let output = if may_fail {
        child_any(role, &env)
    } else {
        child(role, &env)
    };
    Some((dir, ring_path, output))
}

#[test]
fn another_subscriber_is_named_in_the_status() {
    let Some((_dir, ring_path, output)) = with_fake_cupti_ring(
        "init",
        &[("FAKE_CUPTI_SUBSCRIBE_RESULT", Path::new("39"))],
        false,
    ) else {
        return;
    };
    assert!(text(&output.stdout).contains("state=2"));
    assert!(text(&output.stderr).contains("another CUPTI subscriber"));
    let header = ring(&ring_path).header;
    assert_eq!(header.status_code, 4);
    let status = header.status.unwrap();
    assert!(
        status.contains("MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (39)"),
        "{status}"
    );
}

#[test]
fn records_driver_calls_through_the_cupti_callback() {
    let Some((_dir, ring_path, output)) = with_fake_cupti_ring("fake-calls", &[], false) else {
        return;
    };
    assert!(
        text(&output.stdout).contains("state=1"),
        "{}",
        text(&output.stdout)
    );
    assert_eq!(
        text(&output.stderr).matches("wedge-capture inject").count(),
        0
    );

    let snapshot = ring(&ring_path);
    assert_eq!(snapshot.header.status, None);
    let enters: Vec<_> = snapshot
        .records
        .iter()
        .filter(|r| r.kind == RecordKind::Enter)
        .collect();
    let names: Vec<&str> = enters.iter().map(|r| r.call.as_str()).collect();
    assert_eq!(
        names,
        [
            "cuMemAlloc_v2",
            "cuMemcpyHtoDAsync_v2",
            "cuLaunchKernel",
            "custom",
            "cuMemAlloc_v2",
            "cuCtxSynchronize"
        ],
        "quiet getters and unentered exits write nothing"
    );
    assert_eq!(
        snapshot.records.len(),
        11,
        "five enter/exit pairs and one enter"
    );
    assert_eq!(enters[0].args.bytes, 3 << 30);
    assert_eq!(enters[0].label, "");
    let copy = enters[1];
    assert_eq!(copy.label, "cuMemcpyHtoDAsync_v2_ptsz");
    assert_eq!(
        (
            copy.args.ptr,
            copy.args.ptr2,
            copy.args.bytes,
            copy.args.stream
        ),
        (0x7f00_0000_0000, 0x5555_0000, 1 << 20, 0x51)
    );
    let launch = enters[2];
    assert_eq!(launch.label, "_Z4spinPi");
    assert_eq!(
        (launch.args.ptr, launch.args.chunk, launch.args.tensor_count),
        (0xf00, 120, 256)
    );
    assert_eq!(enters[3].call_id, Call::Custom.id());
    assert_eq!(enters[3].label, "cuMemcpy2DAsync_v2");
    let launch_exit = snapshot
        .records
        .iter()
        .find(|r| r.kind == RecordKind::Exit && r.call_id == Call::CuLaunchKernel.id())
        .expect("launch exit");
    assert_eq!(launch_exit.result, Some(2), "the CUresult is recorded");
    assert_eq!(snapshot.in_flight.len(), 1);
    let stuck = &snapshot.in_flight[0];
    assert_eq!(stuck.call, "cuCtxSynchronize");
    assert_eq!(stuck.label, "cuCtxSynchronize_v2");
}

#[test]
fn a_ring_dir_gets_a_cupti_ring_per_process() {
    let dir = tempfile::tempdir().unwrap();
    let Some(cupti) = fake_cupti(dir.path()) else {
        return;
    };
    let rings = dir.path().join("rings");
    std::fs::create_dir(&rings).unwrap();
    let output = child(
        "init",
        &[
            ("WEDGE_CAPTURE_RING_DIR", &rings),
            ("WEDGE_CAPTURE_CUPTI", &cupti),
        ],
    );
    assert!(text(&output.stdout).contains("state=1"));
    let names: Vec<String> = std::fs::read_dir(&rings)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].ends_with(".cupti.ring"), "{names:?}");
    let header = ring(&rings.join(&names[0])).header;
    assert!(
        names[0].starts_with(&format!("{}-", header.writer_pid)),
        "{names:?}"
    );
}

#[test]
fn the_call_in_flight_survives_a_sigkill() {
    use std::os::unix::process::ExitStatusExt;
    let Some((_dir, ring_path, output)) =
        with_fake_cupti_ring("fake-calls-then-sigkill", &[], true)
    else {
        return;
    };
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGKILL),
        "{:?}",
        output.status
    );
    let snapshot = ring(&ring_path);
    assert_eq!(snapshot.in_flight.len(), 1, "{:?}", snapshot.in_flight);
    assert_eq!(snapshot.in_flight[0].label, "cuCtxSynchronize_v2");
    assert_eq!(snapshot.records.len(), 11);
}
