//! NVIDIA site categories and operation sentences: real H200 stacks with their decoded arguments
//! (`tests/data/h200-ioctl-arguments.json`, recorded with `capture --ioctl-arguments`) and the stack shapes
//! of the public reports issue 18 lists.

use capture::decode::nvidia::{self, IoctlArgument};
use capture::parse::stack;
use capture::site;
use capture::site::nvidia::NvidiaWait;
use capture::ThreadSnapshot;

fn recording(name: &str) -> Vec<ThreadSnapshot> {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    serde_json::from_value(v["threads"].clone()).unwrap()
}

fn recorded() -> Vec<ThreadSnapshot> {
    recording("h200-ioctl-arguments.json")
}

fn operations(threads: &[ThreadSnapshot]) -> Vec<String> {
    threads
        .iter()
        .map(|t| {
            let a: &IoctlArgument = t.ioctl.as_ref().unwrap().argument.as_ref().unwrap();
            site::nvidia::nvidia_operation(&t.stack, a).unwrap()
        })
        .collect()
}

fn frames(text: &str) -> Vec<capture::StackFrame> {
    stack::parse(text.as_bytes()).unwrap()
}

#[test]
fn recorded_h200_threads_name_their_operation_and_wait() {
    let threads = recorded();
    assert!(threads.len() >= 6);
    let seen = operations(&threads);
    let has = |s: &str| seen.iter().any(|x| x == s);
    assert!(
        has("RM control NV503C_CTRL_CMD_REGISTER_VIDMEM waits for the RM API lock (takes the API lock read-write + GPU locks (all GPUs))"),
        "{seen:#?}"
    );
    assert!(
        has("RM alloc NV01_MEMORY_LOCAL_USER waits for the RM API lock"),
        "{seen:#?}"
    );
    assert!(
        has("RM alloc memory NV01_MEMORY_SYSTEM_OS_DESCRIPTOR waits for the GPU lock"),
        "{seen:#?}"
    );
    assert!(
        has("UVM UVM_MAP_EXTERNAL_ALLOCATION waits for the GPU lock"),
        "{seen:#?}"
    );
    assert!(has("RM free waits for the RM API lock"), "{seen:#?}");
}

/// The same decode for processes started by `run --inject` (the CUPTI library loaded in each): one thread per
/// distinct (escape, wait, operation) of 66 decoded arguments, `tests/data/h200-inject-ioctl-arguments.json`.
#[test]
fn recorded_h200_threads_under_run_inject_name_their_operation_and_wait() {
    let threads = recording("h200-inject-ioctl-arguments.json");
    assert!(threads.len() >= 10);
    let seen = operations(&threads);
    for expected in [
        "RM control NV503C_CTRL_CMD_UNREGISTER_VIDMEM waits for the RM API lock (takes the API lock read-write + GPU locks (all GPUs))",
        "RM alloc memory NV01_MEMORY_SYSTEM_OS_DESCRIPTOR waits for the RM API lock",
        "UVM UVM_FREE waits for the RM API lock",
        "UVM UVM_MAP_EXTERNAL_ALLOCATION waits for the GPU lock",
        "RM free waits for the GPU lock",
    ] {
        assert!(seen.iter().any(|s| s == expected), "{expected}\n{seen:#?}");
    }
}

#[test]
fn the_recorded_control_struct_decodes_the_same_from_its_fields() {
    // The command word of the recorded REGISTER_VIDMEM control, decoded from the tables alone.
    let c = nvidia::control(0x503c0104).unwrap();
    assert_eq!(c.name, "NV503C_CTRL_CMD_REGISTER_VIDMEM");
    assert_eq!(c.flags, Some(0x8));
}

#[test]
fn categories_from_the_public_reports() {
    let cases: &[(&str, NvidiaWait)] = &[
        (
            "[<0>] os_acquire_rwlock_read+0x30/0x40 [nvidia]\n[<0>] rmapiLockAcquire+0x1a0/0x2c0 [nvidia]\n[<0>] rm_ioctl+0x64/0xb0 [nvidia]\n",
            NvidiaWait::RmApiLock,
        ),
        (
            "[<0>] os_acquire_semaphore+0x4c/0x90 [nvidia]\n[<0>] rmGpuLocksAcquire+0x1c4/0x300 [nvidia]\n[<0>] rm_ioctl+0x64/0xb0 [nvidia]\n",
            NvidiaWait::GpuLock,
        ),
        (
            "[<0>] _kgspRpcRecvPoll+0x1f4/0x4a0 [nvidia]\n[<0>] _issueRpcAndWait+0x9c/0x180 [nvidia]\n[<0>] rmapiLockAcquire+0x1a0/0x2c0 [nvidia]\n",
            NvidiaWait::GspRpc,
        ),
        (
            "[<0>] kgspRecvPoll_IMPL+0x1f4/0x4a0 [nvidia]\n[<0>] _issueRpcAndWait+0x9c/0x180 [nvidia]\n",
            NvidiaWait::GspRpc,
        ),
        (
            "[<0>] uvm_page_tree_get_ptes+0x50/0x90 [nvidia_uvm]\n[<0>] uvm_ioctl+0x1a4/0x1c0 [nvidia_uvm]\n",
            NvidiaWait::UvmPageTreeLock,
        ),
        (
            "[<0>] uvm_gpu_retain_by_uuid+0x30/0x90 [nvidia_uvm]\n[<0>] uvm_api_register_gpu+0x50/0x90 [nvidia_uvm]\n",
            NvidiaWait::UvmGlobalLock,
        ),
        (
            "[<0>] uvm_spin_loop+0x90/0x120 [nvidia_uvm]\n[<0>] uvm_tracker_wait+0x50/0x90 [nvidia_uvm]\n",
            NvidiaWait::UvmGpuProgressSpin,
        ),
        (
            "[<0>] folio_wait_bit_common+0x13c/0x350\n[<0>] filemap_fault+0x5c0/0x9a0\n[<0>] handle_mm_fault+0x1b0/0x2e0\n[<0>] __get_user_pages+0x1e0/0x5a0\n[<0>] pin_user_pages+0x40/0x60\n[<0>] os_lock_user_pages+0xa8/0x1a0 [nvidia]\n",
            NvidiaWait::PinningUserPages { fault: true },
        ),
        (
            "[<0>] _nv012345rm+0x10/0x20 [nvidia]\n[<0>] _nv067890rm+0x10/0x20 [nvidia]\n[<0>] nvidia_ioctl+0x5e4/0x8c0 [nvidia]\n",
            NvidiaWait::ObfuscatedFrames,
        ),
        // Round 18: a GPU's first open brings it up (rm_init_adapter) inside nvidia-modeset's RM call, and
        // CPU-RM's NVLink state sync is an RPC to GSP-RM.
        (
            "[<0>] _nv033456rm+0xac/0x130 [nvidia]\n[<0>] rm_init_adapter+0xc5/0xe0 [nvidia]\n[<0>] nv_open_device+0x417/0x8a0 [nvidia]\n[<0>] nvkms_open_gpu+0x49/0x80 [nvidia_modeset]\n",
            NvidiaWait::AdapterInit,
        ),
        (
            "[<0>] knvlinkSyncLinkMasksAndVbiosInfo_IMPL+0xb7/0x1a0 [nvidia]\n[<0>] rmapiControlWithSecInfo+0x79/0x140 [nvidia]\n",
            NvidiaWait::GspRpc,
        ),
    ];
    for (stack, want) in cases {
        assert_eq!(
            site::nvidia::nvidia_site(&frames(stack)),
            Some(*want),
            "{stack}"
        );
    }
    assert_eq!(
        site::nvidia::nvidia_site(&frames("[<0>] do_sys_poll+0x10/0x20\n")),
        None
    );
    // Round 7: a compositor's modeset that took nvidia-modeset's lock (nvkms_ioctl_from_kapi_try_pmlock →
    // nvKmsIoctl) and waits in the RM under nvkms_call_rm (the shape of open-gpu-kernel-modules #1289's and
    // #1371's lock holders) holds that lock: its wait is the RM's, not the modeset lock. The proprietary
    // module names no RM function, only the OS lock primitive.
    let holder = "[<0>] os_acquire_rwlock_read+0x30/0x40 [nvidia]\n[<0>] _nv012345rm+0x10/0x20 [nvidia]\n[<0>] rm_kernel_rmapi_op+0x167/0x273 [nvidia]\n[<0>] nvkms_call_rm+0x4c/0x80 [nvidia_modeset]\n[<0>] _nv003168kms+0x42/0x50 [nvidia_modeset]\n[<0>] nvKmsIoctl+0xe4/0x1c0 [nvidia_modeset]\n[<0>] nvkms_ioctl_from_kapi_try_pmlock+0x4b/0x80 [nvidia_modeset]\n[<0>] ApplyModeSetConfig+0xc2b/0xe00 [nvidia_modeset]\n[<0>] nv_drm_atomic_commit+0x6a0/0xb20 [nvidia_drm]\n";
    assert_eq!(
        site::nvidia::nvidia_site(&frames(holder)),
        Some(NvidiaWait::RmApiLockMode { write: false })
    );
    // Holding it and waiting for a DisplayPort AUX reply in a kernel completion: no NVIDIA category (the
    // wait words say it), never the modeset lock.
    let aux = "[<0>] wait_for_completion_timeout+0x1/0x2\n[<0>] _nv001234kms+0x10/0x20 [nvidia_modeset]\n[<0>] nvKmsIoctl+0xe4/0x1c0 [nvidia_modeset]\n[<0>] nvkms_ioctl_from_kapi_try_pmlock+0x4b/0x80 [nvidia_modeset]\n";
    assert_ne!(
        site::nvidia::nvidia_site(&frames(aux)),
        Some(NvidiaWait::ModesetGlobalLock)
    );
    // Waiting for it: only the kernel's semaphore frames above the taker.
    let waiter = "[<0>] __down+0x1/0x2\n[<0>] down+0x45/0x50\n[<0>] nvkms_ioctl_from_kapi_try_pmlock+0x36/0x80 [nvidia_modeset]\n[<0>] ApplyModeSetConfig+0xc7a/0xe00 [nvidia_modeset]\n";
    assert_eq!(
        site::nvidia::nvidia_site(&frames(waiter)),
        Some(NvidiaWait::ModesetGlobalLock)
    );
    assert_eq!(
        NvidiaWait::PinningUserPages { fault: true }.label(),
        "pinning user pages (page fault)"
    );
}

#[test]
fn issue_example_sentence() {
    let mut bytes = Vec::new();
    for v in [0xc1d0_0001u32, 0x5c00_0003, 0x2080_0102, 0] {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    bytes.extend_from_slice(&[0; 16]);
    let a = nvidia::decode_rm_argument(nvidia::NV_ESC_RM_CONTROL, 32, &bytes).unwrap();
    let gsp = frames("[<0>] _kgspRpcRecvPoll+0x1f4/0x4a0 [nvidia]\n[<0>] _issueRpcAndWait+0x9c/0x180 [nvidia]\n[<0>] rm_ioctl+0x64/0xb0 [nvidia]\n");
    assert_eq!(
        site::nvidia::nvidia_operation(&gsp, &a).unwrap(),
        "RM control NV2080_CTRL_CMD_GPU_GET_INFO_V2 waits for a GSP RPC reply (takes the API lock read-only + GPU lock (device only))"
    );
}

/// The recorded H200 threads' ioctls decode today as they did when recorded (name, driver, note), from the
/// fd path as the host saw it and from the same path as a container's private /dev shows it to the host
/// (`/nvidiactl`, `/nvidia0`, `/nvidia-uvm`), and their argument structs get the same decoder either way.
#[test]
fn recorded_ioctls_decode_the_same_from_host_and_container_paths() {
    let mut threads = recorded();
    threads.extend(recording("h200-inject-ioctl-arguments.json"));
    let mut checked = 0;
    for t in &threads {
        let Some(info) = t.ioctl.as_ref() else {
            continue;
        };
        let request = capture::decode::hex::u32_hex(&info.request).unwrap();
        let host = info.fd_target.as_deref().unwrap();
        let container = host.strip_prefix("/dev").unwrap();
        for path in [host, container] {
            let d = capture::decode::ioctl::decode(request, Some(path));
            assert_eq!(d.name, info.name, "{path} {}", info.request);
            assert_eq!(d.driver, info.driver, "{path} {}", info.request);
            assert_eq!(d.note, info.note, "{path} {}", info.request);
            let decoded = d.into_info(info.fd, Some(path.to_string()));
            assert_eq!(decoded.argument_kind(), info.argument_kind(), "{path}");
            assert!(decoded.argument_kind().is_some(), "{path}");
        }
        checked += 1;
    }
    assert!(checked >= 15, "{checked}");
}

/// nvidia-modeset's nvkms_lock, holder or waiter (kernel-open/nvidia-modeset/nvidia-modeset-linux.c):
/// `nvkms_ioctl_common` takes the lock (`down`) and runs the request under it, so an nvkms entry is the waiter
/// only with the semaphore's primitives inner to it; a thread inner to it in `nvkms_call_rm` holds the lock and
/// waits in the RM. Stacks built from the source's call chain, pasted as a hung-task dump through `explain`.
#[test]
fn nvkms_lock_holder_in_an_rm_call_is_not_its_waiter() {
    let holder = "INFO: task kwin_wayland:1088 blocked for more than 122 seconds.\ntask:kwin_wayland state:D stack:0 pid:1088 ppid:1080 flags:0x00004002\nCall Trace:\n <TASK>\n __schedule+0x44e/0x1710\n schedule+0x27/0xd0\n rwsem_down_write_slowpath+0x2c3/0x6c0\n down_write+0x5c/0x70\n os_acquire_rwlock_write+0x38/0x60 [nvidia]\n _nv012345rm+0x1a0/0x2c0 [nvidia]\n rm_kernel_rmapi_op+0x64/0xb0 [nvidia]\n nvkms_call_rm+0x4e/0x80 [nvidia_modeset]\n _nv002345kms+0x74/0x90 [nvidia_modeset]\n nvkms_ioctl_common+0x4a/0xa0 [nvidia_modeset]\n nvkms_ioctl_from_kapi_try_pmlock+0x36/0x80 [nvidia_modeset]\n nv_drm_atomic_apply_modeset_config+0x6dc/0x780 [nvidia_drm]\n nv_drm_atomic_commit+0x1a0/0x300 [nvidia_drm]\n drm_atomic_commit+0xb0/0xe0 [drm]\n drm_mode_atomic_ioctl+0x9e6/0xc80 [drm]\n drm_ioctl_kernel+0xb2/0x110 [drm]\n drm_ioctl+0x2f1/0x4d0 [drm]\n __x64_sys_ioctl+0x97/0xd0\n do_syscall_64+0x5c/0x90\n entry_SYSCALL_64_after_hwframe+0x76/0x7e\n </TASK>\n";
    let e = capture::explain::explain(holder.as_bytes()).unwrap();
    let t = &e.tasks[0];
    let site = t.site.as_deref().unwrap();
    assert!(site.contains("[RM API lock (write)]"), "{site}");
    assert!(!site.contains("global lock"), "{site}");
    assert_eq!(
        site::nvidia::nvidia_site(&t.stack),
        Some(NvidiaWait::RmApiLockMode { write: true })
    );
    // With nothing the RM's frames name: the RM call, holding the lock.
    let rm_call = frames("[<0>] _nv012345rm+0x10/0x20 [nvidia]\n[<0>] rm_kernel_rmapi_op+0x64/0xb0 [nvidia]\n[<0>] nvkms_call_rm+0x4e/0x80 [nvidia_modeset]\n[<0>] nvKmsIoctl+0x10/0x20 [nvidia_modeset]\n[<0>] nvkms_ioctl_from_kapi+0x36/0x80 [nvidia_modeset]\n");
    assert_eq!(
        site::nvidia::nvidia_site(&rm_call),
        Some(NvidiaWait::ModesetRmCall)
    );
    assert_eq!(
        NvidiaWait::ModesetRmCall.label(),
        "nvidia-modeset RM call (holds the nvkms lock)"
    );
    // The waiter: the semaphore's primitives inner to the entry, or none (`/proc` omits `__down`); the PM
    // lock's `down_read` (a kthread's nvkms_read_lock_pm_lock) is the PM semaphore.
    for (stack, want) in [
        ("[<0>] __down_common+0xe7/0x2c0\n[<0>] down+0x53/0x70\n[<0>] nvkms_ioctl_from_kapi_try_pmlock+0x4a/0xa0 [nvidia_modeset]\n", NvidiaWait::ModesetGlobalLock),
        ("[<0>] nvkms_ioctl_from_kapi_try_pmlock+0x4a/0xa0 [nvidia_modeset]\n[<0>] nv_drm_atomic_check+0x220/0x270 [nvidia_drm]\n", NvidiaWait::ModesetGlobalLock),
        ("[<0>] rwsem_down_read_slowpath+0x1/0x2\n[<0>] down_read+0x1/0x2\n[<0>] nvkms_ioctl_from_kapi+0x36/0x80 [nvidia_modeset]\n", NvidiaWait::ModesetPmSemaphore),
        ("[<0>] __down_common+0xe7/0x2c0\n[<0>] down+0x53/0x70\n[<0>] nvkms_close_pm_locked+0x10/0x80 [nvidia_modeset]\n[<0>] nvkms_close_from_kapi+0x10/0x20 [nvidia_modeset]\n", NvidiaWait::ModesetGlobalLock),
    ] {
        assert_eq!(site::nvidia::nvidia_site(&frames(stack)), Some(want), "{stack}");
    }
    // After nvKmsClose, nvkms_close_pm_locked flushes the kthread queue without the lock: no nvkms lock wait
    // (the kthread queue flush mechanism names it).
    let flush = frames("[<0>] wait_for_completion+0x1/0x2\n[<0>] nv_kthread_q_flush+0x1/0x2 [nvidia_modeset]\n[<0>] nvkms_close_pm_locked+0x10/0x80 [nvidia_modeset]\n[<0>] nvkms_close_from_kapi+0x10/0x20 [nvidia_modeset]\n");
    assert_eq!(site::nvidia::nvidia_site(&flush), None);
}
