//! What the host daemon watches ([`Selection`]), its source settings, and what counts as an NVIDIA device.

use std::path::PathBuf;
use std::time::Duration;

use regex::Regex;

/// What to watch.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Unanchored regexes matched against the process comm (stat field 2, at most 15 bytes), like pgrep.
    pub comm: Vec<Regex>,
    /// Substrings matched against every line of the process's cgroup file.
    pub cgroup: Vec<String>,
    /// Every process holding an open `/dev/nvidia*` fd.
    pub gpu: bool,
    /// Directories of breadcrumb rings: the writer of every `*.ring` file there is a target.
    pub ring_dirs: Vec<PathBuf>,
}

impl Selection {
    pub fn is_empty(&self) -> bool {
        self.comm.is_empty() && self.cgroup.is_empty() && !self.gpu && self.ring_dirs.is_empty()
    }

    pub(super) fn needs_host_table(&self) -> bool {
        !self.comm.is_empty() || !self.cgroup.is_empty() || self.gpu
    }
}

/// Source settings besides the selection.
#[derive(Debug, Clone)]
pub struct SourceSettings {
    /// Shortest time between two fd scans of one process.
    pub gpu_rescan: Duration,
    /// Most targets returned (the lowest pids win); the excess is reported once per change.
    pub max_targets: usize,
    /// Find new processes from proc connector events (false: list the proc root every scan). Fixed at the
    /// start: a reconfiguration does not change it.
    pub proc_events: bool,
}

impl Default for SourceSettings {
    /// The agent's settings at their defaults.
    fn default() -> Self {
        SourceSettings::from(&crate::settings::AgentOptions::default().resolve())
    }
}

/// Whether an fd link target is an NVIDIA device node (`/dev/nvidia0`, `/dev/nvidiactl`,
/// `/dev/nvidia-uvm`, `/dev/nvidia-caps/…`). A container's private `/dev` seen from the host may lose
/// its `/dev` prefix, so a top-level `/nvidia*` counts too.
pub fn is_nvidia_device(path: &str) -> bool {
    // Wider than the ioctl decode's classifier on purpose: `--gpu` is documented as every `/dev/nvidia*`
    // holder (nvswitch, caps and future nodes included), the decode only names the nodes it has tables for.
    path.strip_prefix("/dev/")
        .or_else(|| path.strip_prefix('/').filter(|rest| !rest.contains('/')))
        .is_some_and(|rest| rest.starts_with("nvidia"))
}
