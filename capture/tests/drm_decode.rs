//! DRM and AMD KFD ioctls of wedged threads, decoded from fake /proc trees on both architectures: the
//! core's numbers from drm.h, the driver's numbers from the table of the driver sysfs says is bound to the
//! node (`<sys>/class/drm/<node>/device/driver`), KFD's on /dev/kfd, and "driver unknown" without sysfs.

use std::path::Path;

use capture::decode::syscalls;
use capture::testing::FakeProc;
use capture::{snapshot_process, Arch, ProcessSnapshot, SnapshotOptions};

const PID: i32 = 7300;

/// Request words from the Linux 6.12 UAPI headers.
const DRM_IOCTL_VERSION: u32 = 0xc040_6400;
const DRM_IOCTL_SYNCOBJ_WAIT: u32 = 0xc028_64c3;
const DRM_IOCTL_AMDGPU_CS: u32 = 0xc018_6444;
const DRM_IOCTL_AMDGPU_WAIT_CS: u32 = 0xc020_6449;
const DRM_IOCTL_I915_GEM_EXECBUFFER2: u32 = 0x4040_6469;
const DRM_IOCTL_XE_EXEC: u32 = 0x4038_6449;
const AMDKFD_IOC_ALLOC_MEMORY_OF_GPU: u32 = 0xc028_4b16;
const AMDKFD_IOC_WAIT_EVENTS: u32 = 0xc018_4b0c;

fn bind(sys: &Path, node: &str, driver: &str) {
    let device = sys.join("class/drm").join(node).join("device");
    std::fs::create_dir_all(&device).unwrap();
    let target = format!("../../../../bus/pci/drivers/{driver}");
    std::os::unix::fs::symlink(target, device.join("driver")).unwrap();
}

/// (tid, fd, request) for each thread; fds: 10 amdgpu render node, 11 i915 card, 12 a container's
/// xe render node, 13 /dev/kfd, 14 a render node sysfs does not know.
const THREADS: [(i32, i32, u32); 9] = [
    (PID + 1, 10, DRM_IOCTL_VERSION),
    (PID + 2, 10, DRM_IOCTL_SYNCOBJ_WAIT),
    (PID + 3, 10, DRM_IOCTL_AMDGPU_CS),
    (PID + 4, 10, DRM_IOCTL_AMDGPU_WAIT_CS),
    (PID + 5, 11, DRM_IOCTL_I915_GEM_EXECBUFFER2),
    (PID + 6, 12, DRM_IOCTL_XE_EXEC),
    (PID + 7, 13, AMDKFD_IOC_ALLOC_MEMORY_OF_GPU),
    (PID + 8, 13, AMDKFD_IOC_WAIT_EVENTS),
    (PID + 9, 14, DRM_IOCTL_AMDGPU_CS),
];

fn snapshot(arch: Arch, sys: &Path) -> ProcessSnapshot {
    let tree = FakeProc::new();
    tree.process(PID)
        .comm("rocm-train")
        .state('S')
        .fd(10, "/dev/dri/renderD128")
        .fd(11, "/dev/dri/card1")
        .fd(12, "/dri/renderD129")
        .fd(13, "/dev/kfd")
        .fd(14, "/dev/dri/renderD130");
    let ioctl = syscalls::number(arch, "ioctl").unwrap();
    for (tid, fd, request) in THREADS {
        tree.task(PID, tid)
            .comm("worker")
            .state('D')
            .wchan("dma_fence_default_wait")
            .syscall(&format!(
                "{ioctl} {fd:#x} {request:#x} 0x7f0000001000 0x0 0x0 0x0 0x7ffd0000f000 0x7f0000001234\n"
            ))
            .stack("[<0>] dma_fence_default_wait+0x1f0/0x260\n");
    }
    let options = SnapshotOptions {
        arch,
        sys_root: Some(sys.to_path_buf()),
        ..SnapshotOptions::default()
    };
    snapshot_process(&tree.root(), PID, &options).unwrap()
}

fn named(snap: &ProcessSnapshot, tid: i32) -> (Option<String>, Option<String>, Option<String>) {
    let t = snap.threads.iter().find(|t| t.tid == tid).unwrap();
    let i = t
        .ioctl
        .as_ref()
        .unwrap_or_else(|| panic!("{tid}: no ioctl {t:?}"));
    (i.name.clone(), i.driver.clone(), i.note.clone())
}

#[test]
fn drm_and_kfd_ioctls_are_named_by_the_bound_driver_on_both_arches() {
    let sys = tempfile::tempdir().unwrap();
    bind(sys.path(), "renderD128", "amdgpu");
    bind(sys.path(), "card1", "i915");
    bind(sys.path(), "renderD129", "xe");
    for arch in [Arch::X86_64, Arch::Aarch64] {
        let snap = snapshot(arch, sys.path());
        let expect = [
            (PID + 1, "DRM_IOCTL_VERSION", "drm"),
            (PID + 2, "DRM_IOCTL_SYNCOBJ_WAIT", "drm"),
            (PID + 3, "DRM_IOCTL_AMDGPU_CS", "amdgpu"),
            (PID + 4, "DRM_IOCTL_AMDGPU_WAIT_CS", "amdgpu"),
            (PID + 5, "DRM_IOCTL_I915_GEM_EXECBUFFER2", "i915"),
            (PID + 6, "DRM_IOCTL_XE_EXEC", "xe"),
            (PID + 7, "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU", "amdkfd"),
            (PID + 8, "AMDKFD_IOC_WAIT_EVENTS", "amdkfd"),
        ];
        for (tid, name, driver) in expect {
            let (got_name, got_driver, _) = named(&snap, tid);
            assert_eq!(got_name.as_deref(), Some(name), "{arch:?} {tid}");
            assert_eq!(got_driver.as_deref(), Some(driver), "{arch:?} {tid}");
        }
        // No sysfs entry for renderD130: the driver's number is not guessed.
        let (name, driver, note) = named(&snap, PID + 9);
        assert_eq!((name, driver.as_deref()), (None, Some("drm")), "{arch:?}");
        let note = note.unwrap();
        assert!(
            note.starts_with("driver-specific ioctl 0x44 (driver unknown)"),
            "{note}"
        );
    }
}

#[test]
fn without_sysfs_driver_numbers_read_driver_unknown_and_core_numbers_stay_named() {
    let empty = tempfile::tempdir().unwrap();
    let snap = snapshot(Arch::Aarch64, empty.path());
    let (name, _, note) = named(&snap, PID + 3);
    assert_eq!(name, None);
    assert!(note.unwrap().contains("(driver unknown)"));
    assert_eq!(
        named(&snap, PID + 1).0.as_deref(),
        Some("DRM_IOCTL_VERSION")
    );
    assert_eq!(
        named(&snap, PID + 8).0.as_deref(),
        Some("AMDKFD_IOC_WAIT_EVENTS")
    );
}
