//! Integration tests for issues 18 and 28 through the built binary: `decode-ioctl --arg` on a struct copied from a
//! bug report, and `capture --ioctl-arguments` on a fake proc tree whose `mem` holds the struct.

use std::process::{Command, Output};

use capture::testing::FakeProc;

fn wedge(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wedge-capture"))
        .args(args)
        .output()
        .expect("run wedge-capture")
}

/// The REGISTER_VIDMEM control a thread on the H200 was caught in (capture/tests/data/h200-ioctl-arguments.json).
const RECORDED_NVOS54: &str =
    "5e00d0c1 0d00005c 0401 3c50 00000000 2093_41e9377f0000 20000000 00000000";

#[test]
fn decode_ioctl_arg_decodes_a_recorded_control_and_refuses_a_short_one() {
    let arg = RECORDED_NVOS54.replace('_', "");
    let o = wedge(&[
        "decode-ioctl",
        "0xc020462a",
        "--device",
        "/dev/nvidiactl",
        "--arg",
        &arg,
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let a = &v["argument"];
    assert_eq!(a["cmd_name"], "NV503C_CTRL_CMD_REGISTER_VIDMEM");
    assert_eq!(a["handles"][0][1], "0xc1d0005e");
    assert_eq!(a["params"], "0x7f37e9419320");
    assert_eq!(a["params_size"], 32);
    assert_eq!(
        a["locks"],
        "takes the API lock read-write + GPU locks (all GPUs)"
    );

    let o = wedge(&[
        "decode-ioctl",
        "0xc020462a",
        "--device",
        "/dev/nvidiactl",
        "--arg",
        "5e00d0c1",
    ]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("needs 32 bytes, only 4"), "{err}");
    let o = wedge(&["decode-ioctl", "0xc020462a", "--arg", "xyz"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
}

#[test]
fn capture_ioctl_arguments_reads_mem_through_the_proc_root() {
    let fake = FakeProc::new();
    let ptr: u64 = 0x7f_e941_8000;
    let mut nvos54 = Vec::new();
    for v in [0xc1d0_005eu32, 0x5c00_000d, 0x503c_0104, 0] {
        nvos54.extend_from_slice(&v.to_le_bytes());
    }
    nvos54.extend_from_slice(&0x7f37_e941_9320u64.to_le_bytes());
    nvos54.extend_from_slice(&[32, 0, 0, 0, 0, 0, 0, 0]);
    fake.process(900)
        .comm("cuda")
        .state('S')
        .fd(5, "/dev/nvidiactl")
        .sparse_mem(ptr + 0x1000, ptr, &nvos54);
    fake.task(900, 901)
        .comm("worker")
        .state('D')
        .wchan("os_acquire_rwlock_write")
        .syscall(&format!(
            "16 0x5 0xc020462a {ptr:#x} 0x0 0x0 0x0 0x7ffd0000f000 0x7f0000001234\n"
        ))
        .stack("[<0>] os_acquire_rwlock_write+0x38/0x60 [nvidia]\n[<0>] portSyncRwLockAcquireWrite+0x10/0x20 [nvidia]\n[<0>] rmapiLockAcquire+0x1a0/0x2c0 [nvidia]\n[<0>] RmIoctl+0x2a8/0xd80 [nvidia]\n[<0>] rm_ioctl+0x64/0xb0 [nvidia]\n[<0>] nvidia_unlocked_ioctl+0x24/0x40 [nvidia]\n[<0>] __x64_sys_ioctl+0x94/0xd0\n");
    let root = fake.path().to_str().unwrap().to_string();
    let o = wedge(&[
        "capture",
        "--pid",
        "900",
        "--proc-root",
        &root,
        "--arch",
        "x86_64",
        "--ioctl-arguments",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{o:?}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let t = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == 901)
        .unwrap();
    let a = &t["ioctl"]["argument"];
    assert_eq!(a["cmd_name"], "NV503C_CTRL_CMD_REGISTER_VIDMEM", "{t}");
    assert_eq!(
        a["operation"],
        "RM control NV503C_CTRL_CMD_REGISTER_VIDMEM waits for the RM API lock (takes the API lock read-write + GPU locks (all GPUs))"
    );
    assert!(
        t["site"].as_str().unwrap().ends_with("[RM API lock]"),
        "{t}"
    );
    // Without the flag the thread in D is decoded all the same (issue 28: by default).
    let default = capture_json(&root, &[]);
    let a = &thread(&default, 901)["ioctl"]["argument"];
    assert_eq!(
        a["cmd_name"], "NV503C_CTRL_CMD_REGISTER_VIDMEM",
        "{default}"
    );
    // --no-ioctl-arguments: nothing is read from mem.
    let none = capture_json(&root, &["--no-ioctl-arguments"]);
    assert!(none.to_string().find("\"argument\"").is_none(), "{none}");
}

fn capture_json(root: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "capture",
        "--pid",
        "900",
        "--proc-root",
        root,
        "--arch",
        "x86_64",
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--format", "json"]);
    let o = wedge(&args);
    assert!(o.status.success(), "{o:?}");
    serde_json::from_slice(&o.stdout).unwrap()
}

fn thread(snapshot: &serde_json::Value, tid: i64) -> &serde_json::Value {
    snapshot["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tid"] == tid)
        .unwrap()
}

/// The deep-decode tree of issue 18 with two more threads in the same control: one in D whose fd is the
/// container form `/nvidiactl`, one sleeping (S) in the ioctl. `capture --pid` decodes both D threads by
/// default and the sleeping one only with --ioctl-arguments (every thread in an ioctl).
#[test]
fn capture_decodes_threads_in_d_by_default_and_every_ioctl_thread_with_the_flag() {
    let fake = FakeProc::new();
    let ptr: u64 = 0x7f_e941_8000;
    let mut nvos54 = Vec::new();
    for v in [0xc1d0_005eu32, 0x5c00_000d, 0x503c_0104, 0] {
        nvos54.extend_from_slice(&v.to_le_bytes());
    }
    nvos54.extend_from_slice(&0x7f37_e941_9320u64.to_le_bytes());
    nvos54.extend_from_slice(&[32, 0, 0, 0, 0, 0, 0, 0]);
    fake.process(900)
        .comm("cuda")
        .state('S')
        .fd(5, "/dev/nvidiactl")
        .fd(6, "/nvidiactl")
        .sparse_mem(ptr + 0x1000, ptr, &nvos54);
    let stack = "[<0>] os_acquire_rwlock_write+0x38/0x60 [nvidia]\n[<0>] rmapiLockAcquire+0x1a0/0x2c0 [nvidia]\n[<0>] rm_ioctl+0x64/0xb0 [nvidia]\n[<0>] nvidia_unlocked_ioctl+0x24/0x40 [nvidia]\n";
    for (tid, state, fd) in [(901, 'D', 5), (902, 'D', 6), (903, 'S', 5)] {
        fake.task(900, tid)
            .comm("worker")
            .state(state)
            .wchan("os_acquire_rwlock_write")
            .syscall(&format!(
                "16 {fd:#x} 0xc020462a {ptr:#x} 0x0 0x0 0x0 0x7ffd0000f000 0x7f0000001234\n"
            ))
            .stack(stack);
    }
    let root = fake.path().to_str().unwrap().to_string();
    let cmd_name =
        |v: &serde_json::Value, tid| thread(v, tid)["ioctl"]["argument"]["cmd_name"].clone();
    let default = capture_json(&root, &[]);
    assert_eq!(
        cmd_name(&default, 901),
        "NV503C_CTRL_CMD_REGISTER_VIDMEM",
        "{default}"
    );
    assert_eq!(
        cmd_name(&default, 902),
        "NV503C_CTRL_CMD_REGISTER_VIDMEM",
        "{default}"
    );
    assert_eq!(thread(&default, 902)["ioctl"]["fd_target"], "/nvidiactl");
    // The sleeping thread is read (threads wait for the RM API lock, so any thread inside an RM call may
    // hold it), but its argument is not: it is not in D.
    assert!(
        thread(&default, 903)["ioctl"]["argument"].is_null(),
        "{default}"
    );
    assert_eq!(thread(&default, 901)["waits_for"], "RM API lock");
    let every = capture_json(&root, &["--ioctl-arguments", "--all-threads"]);
    for tid in [901, 902, 903] {
        assert_eq!(
            cmd_name(&every, tid),
            "NV503C_CTRL_CMD_REGISTER_VIDMEM",
            "{tid} {every}"
        );
    }
    let in_d_only = capture_json(&root, &["--all-threads"]);
    assert!(
        thread(&in_d_only, 903)["ioctl"]["argument"].is_null(),
        "{in_d_only}"
    );
    assert_eq!(cmd_name(&in_d_only, 901), "NV503C_CTRL_CMD_REGISTER_VIDMEM");
    let o = wedge(&[
        "capture",
        "--pid",
        "900",
        "--proc-root",
        &root,
        "--ioctl-arguments",
        "--no-ioctl-arguments",
    ]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
}

/// `decode-ioctl` names DRM core, DRM driver (by --driver) and KFD ioctls, and says "driver unknown" for a
/// driver number without a driver.
#[test]
fn decode_ioctl_shows_drm_and_kfd_ioctls() {
    let cases: &[(&str, &str, Option<&str>, &str, &str)] = &[
        (
            "0xc0406400",
            "/dev/dri/card0",
            None,
            "DRM_IOCTL_VERSION",
            "drm",
        ),
        (
            "0xc02864c3",
            "/dev/dri/renderD128",
            None,
            "DRM_IOCTL_SYNCOBJ_WAIT",
            "drm",
        ),
        (
            "0xc0186444",
            "/dev/dri/renderD128",
            Some("amdgpu"),
            "DRM_IOCTL_AMDGPU_CS",
            "amdgpu",
        ),
        (
            "0xc0206449",
            "/dri/renderD128",
            Some("amdgpu"),
            "DRM_IOCTL_AMDGPU_WAIT_CS",
            "amdgpu",
        ),
        (
            "0x40406469",
            "/dev/dri/card0",
            Some("i915"),
            "DRM_IOCTL_I915_GEM_EXECBUFFER2",
            "i915",
        ),
        (
            "0xc0284b16",
            "/dev/kfd",
            None,
            "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU",
            "amdkfd",
        ),
        (
            "0xc0184b0c",
            "/dev/kfd",
            None,
            "AMDKFD_IOC_WAIT_EVENTS",
            "amdkfd",
        ),
    ];
    for (request, device, driver, name, table) in cases {
        let mut args = vec![
            "decode-ioctl",
            request,
            "--device",
            device,
            "--format",
            "json",
        ];
        if let Some(driver) = driver {
            args.extend_from_slice(&["--driver", driver]);
        }
        let o = wedge(&args);
        assert!(o.status.success(), "{o:?}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["name"], *name, "{v}");
        assert_eq!(v["driver"], *table, "{v}");
    }
    // Text output names the header version of the table.
    let o = wedge(&[
        "decode-ioctl",
        "0xc0186444",
        "--device",
        "/dev/dri/renderD128",
        "--driver",
        "amdgpu",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("name     DRM_IOCTL_AMDGPU_CS"), "{text}");
    assert!(text.contains("table    Linux 6.12.117"), "{text}");
    // A driver number on a node whose driver is unknown: said, not guessed.
    let o = wedge(&[
        "decode-ioctl",
        "0xc0186444",
        "--device",
        "/dri/renderD250",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["name"].is_null(), "{v}");
    assert!(
        v["note"]
            .as_str()
            .unwrap()
            .starts_with("driver-specific ioctl 0x44 (driver unknown)"),
        "{v}"
    );
}
