//! The one device classifier: an fd's link target (`/dev/nvidiactl`, `/dev/dri/renderD128`, …) → which
//! driver's ioctl table applies. Every caller (ioctl decode, the argument stage, GPU-holder detection)
//! asks here, so one path gets one answer.
//!
//! Container paths: a process in a container opens its devices under the container's own `/dev` (a
//! private tmpfs). Read from the host, `/proc/<pid>/fd/<n>` shows the path relative to that mount, so
//! `/dev/nvidia0` reads `/nvidia0` and `/dev/dri/renderD128` reads `/dri/renderD128`. Those forms are
//! accepted for the GPU nodes only (a top-level `/tty` or `/console` is too likely to be an ordinary file).
//! A ` (deleted)` suffix (the node was removed while held open) is ignored.

use std::path::Path;

/// Which driver a device node belongs to, from its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// `/dev/nvidiactl` or `/dev/nvidiaN`: RM escapes.
    NvidiaRm,
    NvidiaUvm,
    NvidiaUvmTools,
    NvidiaModeset,
    /// `/dev/nvidia-caps/nvidia-capN`: capability nodes (opened, not ioctl'ed; no table).
    NvidiaCaps,
    /// `/dev/dri/card*`, `renderD*`, `controlD*`: DRM core and the driver's own ioctls.
    Drm,
    /// `/dev/kfd`: the AMD compute (ROCm) node.
    Kfd,
    /// Terminals and pseudo-terminals.
    Tty,
    /// Anything else (a regular file, a socket, unknown).
    Other,
}

/// The path below `/dev` of a device node: `/dev/nvidia0` → `nvidia0`; a container's `/nvidia0` →
/// `nvidia0` (GPU nodes only, see the module doc).
fn below_dev(path: &str) -> Option<&str> {
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    if let Some(rest) = path.strip_prefix("/dev/") {
        return Some(rest);
    }
    let rest = path.strip_prefix('/')?;
    let gpu_node = rest.starts_with("nvidia")
        || rest == "kfd"
        || rest.strip_prefix("dri/").is_some_and(is_drm_node_name);
    gpu_node.then_some(rest)
}

/// `card0`, `renderD128`, `controlD64`.
fn is_drm_node_name(name: &str) -> bool {
    ["card", "renderD", "controlD"].iter().any(|prefix| {
        name.strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
    })
}

impl DeviceKind {
    pub fn of(path: &str) -> DeviceKind {
        let Some(rest) = below_dev(path) else {
            return DeviceKind::Other;
        };
        match rest {
            "nvidiactl" => DeviceKind::NvidiaRm,
            "nvidia-uvm" => DeviceKind::NvidiaUvm,
            "nvidia-uvm-tools" => DeviceKind::NvidiaUvmTools,
            "nvidia-modeset" => DeviceKind::NvidiaModeset,
            "kfd" => DeviceKind::Kfd,
            "console" | "tty" | "ptmx" => DeviceKind::Tty,
            _ => {
                if let Some(n) = rest.strip_prefix("nvidia") {
                    if !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) {
                        return DeviceKind::NvidiaRm;
                    }
                }
                if rest
                    .strip_prefix("nvidia-caps/")
                    .is_some_and(|n| !n.is_empty() && !n.contains('/'))
                {
                    DeviceKind::NvidiaCaps
                } else if rest.starts_with("dri/") {
                    DeviceKind::Drm
                } else if rest.starts_with("pts/") || rest.starts_with("tty") {
                    DeviceKind::Tty
                } else {
                    DeviceKind::Other
                }
            }
        }
    }

    /// Any NVIDIA node: what marks a process as holding an NVIDIA GPU.
    pub fn is_nvidia(self) -> bool {
        matches!(
            self,
            DeviceKind::NvidiaRm
                | DeviceKind::NvidiaUvm
                | DeviceKind::NvidiaUvmTools
                | DeviceKind::NvidiaModeset
                | DeviceKind::NvidiaCaps
        )
    }

    /// Any GPU node (NVIDIA, DRM, KFD).
    pub fn is_gpu(self) -> bool {
        self.is_nvidia() || matches!(self, DeviceKind::Drm | DeviceKind::Kfd)
    }
}

/// Whether `path` is the NVIDIA control node (`/dev/nvidiactl`, or `/nvidiactl` in a container): some RM
/// escapes are accepted only there, others only on a GPU node.
pub fn is_nvidia_control_node(path: &str) -> bool {
    below_dev(path) == Some("nvidiactl")
}

/// The DRM node's name (`renderD128`, `card0`) of a DRM device path, as `/sys/class/drm` names it.
pub fn drm_node_name(path: &str) -> Option<&str> {
    let name = below_dev(path)?.strip_prefix("dri/")?;
    is_drm_node_name(name).then_some(name)
}

/// Longest driver name accepted from sysfs (kernel driver names are short identifiers).
const MAX_DRIVER_NAME: usize = 64;

/// The kernel driver bound to the DRM node of `path` (`amdgpu`, `i915`, `xe`, `nouveau`, …), from the
/// `<sys_root>/class/drm/<node>/device/driver` link: a readlink in sysfs, which never waits for the driver.
/// None when the node is not a DRM node, the link is missing (another machine's recording) or odd.
pub fn drm_driver(sys_root: &Path, path: &str) -> Option<String> {
    let node = drm_node_name(path)?;
    let link = sys_root.join("class/drm").join(node).join("device/driver");
    let target = std::fs::read_link(link).ok()?;
    let name = target.file_name()?.to_str()?;
    let sane = !name.is_empty()
        && name.len() <= MAX_DRIVER_NAME
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-');
    sane.then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_container_paths_classify_alike() {
        let cases = [
            ("/dev/nvidiactl", DeviceKind::NvidiaRm),
            ("/nvidiactl", DeviceKind::NvidiaRm),
            ("/dev/nvidia0", DeviceKind::NvidiaRm),
            ("/nvidia0", DeviceKind::NvidiaRm),
            ("/dev/nvidia12", DeviceKind::NvidiaRm),
            ("/dev/nvidia0 (deleted)", DeviceKind::NvidiaRm),
            ("/nvidia0 (deleted)", DeviceKind::NvidiaRm),
            ("/dev/nvidia-uvm", DeviceKind::NvidiaUvm),
            ("/nvidia-uvm", DeviceKind::NvidiaUvm),
            ("/dev/nvidia-uvm-tools", DeviceKind::NvidiaUvmTools),
            ("/dev/nvidia-modeset", DeviceKind::NvidiaModeset),
            ("/nvidia-modeset", DeviceKind::NvidiaModeset),
            ("/dev/nvidia-caps/nvidia-cap1", DeviceKind::NvidiaCaps),
            ("/nvidia-caps/nvidia-cap1", DeviceKind::NvidiaCaps),
            ("/dev/dri/renderD128", DeviceKind::Drm),
            ("/dri/renderD128", DeviceKind::Drm),
            ("/dev/dri/card0", DeviceKind::Drm),
            ("/dri/card1 (deleted)", DeviceKind::Drm),
            ("/dev/kfd", DeviceKind::Kfd),
            ("/kfd", DeviceKind::Kfd),
            ("/dev/pts/3", DeviceKind::Tty),
            ("/dev/tty", DeviceKind::Tty),
            ("/dev/ttyS0", DeviceKind::Tty),
        ];
        for (path, kind) in cases {
            assert_eq!(DeviceKind::of(path), kind, "{path}");
        }
    }

    #[test]
    fn odd_paths_are_other() {
        for path in [
            "",
            "/",
            "/dev/",
            "/dev/nvidia",
            "/nvidia",
            "/dev/nvidiaX",
            "/dev/nvidia0/x",
            "/dev/nvidia-caps",
            "/dev/nvidia-caps/",
            "/tmp/nvidia0",
            "/home/x/nvidia/log",
            "/mnt/frozen/victim",
            "/dri/renderD",
            "/dri/x",
            "/kfd2",
            "/tty",
            "/dev/null",
            "socket:[5]",
            "anon_inode:[eventfd]",
            "nvidia0",
            "/dev/nvidia0 (deleted) (deleted)",
        ] {
            assert_eq!(DeviceKind::of(path), DeviceKind::Other, "{path:?}");
        }
    }

    #[test]
    fn gpu_families() {
        assert!(DeviceKind::of("/nvidia0").is_nvidia());
        assert!(DeviceKind::of("/dev/nvidia-caps/nvidia-cap2").is_nvidia());
        assert!(!DeviceKind::of("/dev/dri/card0").is_nvidia());
        assert!(DeviceKind::of("/dev/dri/card0").is_gpu());
        assert!(DeviceKind::of("/kfd").is_gpu());
        assert!(!DeviceKind::of("/dev/null").is_gpu());
        assert!(is_nvidia_control_node("/dev/nvidiactl"));
        assert!(is_nvidia_control_node("/nvidiactl"));
        assert!(!is_nvidia_control_node("/nvidia0"));
    }

    #[test]
    fn drm_driver_from_a_sysfs_link() {
        let sys = tempfile::tempdir().unwrap();
        let dev = sys.path().join("class/drm/renderD128/device");
        std::fs::create_dir_all(&dev).unwrap();
        std::os::unix::fs::symlink("../../../bus/pci/drivers/amdgpu", dev.join("driver")).unwrap();
        assert_eq!(drm_node_name("/dri/renderD128"), Some("renderD128"));
        assert_eq!(
            drm_driver(sys.path(), "/dev/dri/renderD128").as_deref(),
            Some("amdgpu")
        );
        assert_eq!(
            drm_driver(sys.path(), "/dri/renderD128").as_deref(),
            Some("amdgpu")
        );
        assert_eq!(drm_driver(sys.path(), "/dev/dri/card0"), None);
        assert_eq!(drm_driver(sys.path(), "/dev/dri/../../etc"), None);
        assert_eq!(drm_driver(sys.path(), "/dev/kfd"), None);
    }
}
