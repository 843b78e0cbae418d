//! Integration tests for issue 18 through the built binary: `decode-ioctl --arg` on a struct copied from a
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
        "--json",
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
    // Without the flag nothing is read from mem.
    let o = wedge(&[
        "capture",
        "--pid",
        "900",
        "--proc-root",
        &root,
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v.to_string().find("\"argument\"").is_none());
}
