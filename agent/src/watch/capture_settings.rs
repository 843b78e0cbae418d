//! How to capture ([`CaptureSettings`]): what the episode lifecycle (`watch::incident`) and every capture
//! stage (`watch::stages`) read. Its own module so that both reach down to it and neither imports the other
//! for it.

use std::path::PathBuf;
use std::time::Duration;

use capture::{kmsg, ProcRoot};

use crate::defaults;

/// How to capture.
#[derive(Debug, Clone)]
pub struct CaptureSettings {
    pub proc_root: ProcRoot,
    /// Directories holding ring files (`*.ring`), searched for the wedged process's ring.
    pub ring_dirs: Vec<PathBuf>,
    pub probe_timeout: Duration,
    pub max_stuck_probes: usize,
    /// Run `nvidia-smi -q` as a probe when it is installed.
    pub nvidia_smi: bool,
    /// Extra files to read as probes (a test stand-in for a driver file that hangs).
    pub extra_probe_files: Vec<PathBuf>,
    /// py-spy for a CPython target's Python stacks (a bare name: looked up on PATH at each capture).
    pub py_spy: PathBuf,
    pub kmsg_path: PathBuf,
    /// Kernel log kept from this long before the wedge began.
    pub kmsg_before: Duration,
    /// While an episode is open, add a new thread snapshot this often.
    pub resample_every: Duration,
    /// Samples kept per incident (the first and the latest ones).
    pub max_samples: usize,
    /// Send SIGKILL to the wedged process after the capture, and record whether it died.
    pub kill_on_wedge: bool,
    /// Most D-state tasks listed in the host census.
    pub max_census: usize,
    /// The kubelet's pod log directories (`<namespace>_<name>_<uid>`), to name a container's pod.
    pub pods_log_dir: PathBuf,
    /// Captures running at once (capture workers).
    pub capture_workers: usize,
    /// A capture's total deadline.
    pub capture_deadline: Duration,
    /// Captures waiting per tenant before more are refused.
    pub max_queued_per_tenant: usize,
    /// The node's root: the kubelet's and the container runtime's state under it confirm a container's pod.
    pub node_root: PathBuf,
}

impl CaptureSettings {
    pub fn new(proc_root: ProcRoot) -> CaptureSettings {
        CaptureSettings {
            proc_root,
            ring_dirs: Vec::new(),
            probe_timeout: defaults::PROBE_TIMEOUT,
            max_stuck_probes: defaults::MAX_STUCK_PROBES,
            nvidia_smi: true,
            extra_probe_files: Vec::new(),
            py_spy: PathBuf::from(defaults::PY_SPY),
            kmsg_path: PathBuf::from(kmsg::KMSG_PATH),
            kmsg_before: defaults::KMSG_BEFORE,
            resample_every: defaults::RESAMPLE_EVERY,
            max_samples: defaults::MAX_SAMPLES,
            kill_on_wedge: false,
            max_census: defaults::MAX_CENSUS,
            pods_log_dir: PathBuf::from(defaults::PODS_LOG_DIR),
            capture_workers: defaults::CAPTURE_WORKERS,
            capture_deadline: defaults::CAPTURE_DEADLINE,
            max_queued_per_tenant: defaults::MAX_QUEUED_CAPTURES_PER_TENANT,
            node_root: PathBuf::from(defaults::NODE_ROOT),
        }
    }
}
