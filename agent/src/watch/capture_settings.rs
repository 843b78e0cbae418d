//! How to capture ([`CaptureSettings`]): what the episode lifecycle (`watch::incident`) and every capture
//! stage (`watch::stages`) read. Its own module so that both reach down to it and neither imports the other
//! for it.
//!
//! Built only from the resolved settings ([`WatchSettings`], carried whole in [`CaptureSettings::watch`]): a
//! setting's default is its definition's (`settings/mod.rs`), never a second one here, and a new shared
//! setting reaches every capture stage as `settings.watch.<key>` without a field here. What is not a
//! setting (bounds, the kernel log's path) takes its constant from `defaults`.

use std::path::PathBuf;
use std::time::Duration;

use capture::{kmsg, ProcRoot};

use crate::defaults;
use crate::settings::{AgentOptions, Settings, WatchSettings};

/// How to capture.
#[derive(Debug, Clone)]
pub struct CaptureSettings {
    pub proc_root: ProcRoot,
    /// The resolved shared settings (`run`'s and the agent's): probe timeout, nvidia-smi, py-spy, the extra
    /// probes, the resample period, …
    pub watch: WatchSettings,
    /// Directories holding ring files (`*.ring`), searched for the wedged process's ring.
    pub ring_dirs: Vec<PathBuf>,
    pub max_stuck_probes: usize,
    pub kmsg_path: PathBuf,
    /// Kernel log kept from this long before the wedge began.
    pub kmsg_before: Duration,
    /// Samples kept per incident (the first and the latest ones).
    pub max_samples: usize,
    /// Send SIGKILL to the wedged process after the capture, and record whether it died.
    pub kill_on_wedge: bool,
    /// Most D-state tasks listed in the host census.
    pub max_census: usize,
    /// The kubelet's pod log directories (`<namespace>_<name>_<uid>`), to name a container's pod (the
    /// agent's `pods_log_dir`).
    pub pods_log_dir: PathBuf,
    /// Captures running at once (capture workers).
    pub capture_workers: usize,
    /// A capture's total deadline.
    pub capture_deadline: Duration,
    /// Captures waiting per tenant before more are refused.
    pub max_queued_per_tenant: usize,
    /// The node's root: the kubelet's and the container runtime's state under it confirm a container's pod
    /// (the agent's `node_root`).
    pub node_root: PathBuf,
}

impl CaptureSettings {
    /// Every setting at its default (tests, benchmarks).
    pub fn new(proc_root: ProcRoot) -> CaptureSettings {
        CaptureSettings::from_settings(proc_root, WatchSettings::default(), &[])
    }

    /// The capture path of `watch`, reading rings from `ring_dirs`; the agent-only settings at their
    /// defaults (`run`, `selftest`; the agent: [`Settings::capture_settings`]).
    pub fn from_settings(
        proc_root: ProcRoot,
        watch: WatchSettings,
        ring_dirs: &[PathBuf],
    ) -> CaptureSettings {
        let agent = AgentOptions::default().resolve();
        CaptureSettings {
            proc_root,
            watch,
            ring_dirs: ring_dirs.to_vec(),
            max_stuck_probes: defaults::MAX_STUCK_PROBES,
            kmsg_path: PathBuf::from(kmsg::KMSG_PATH),
            kmsg_before: defaults::KMSG_BEFORE,
            max_samples: defaults::MAX_SAMPLES,
            kill_on_wedge: false,
            max_census: defaults::MAX_CENSUS,
            pods_log_dir: agent.pods_log_dir,
            capture_workers: defaults::CAPTURE_WORKERS,
            capture_deadline: defaults::CAPTURE_DEADLINE,
            max_queued_per_tenant: defaults::MAX_QUEUED_CAPTURES_PER_TENANT,
            node_root: agent.node_root,
        }
    }
}

impl WatchSettings {
    /// The capture path's part, reading rings from `ring_dirs`.
    pub fn capture_settings(&self, proc_root: ProcRoot, ring_dirs: &[PathBuf]) -> CaptureSettings {
        CaptureSettings::from_settings(proc_root, self.clone(), ring_dirs)
    }
}

impl Settings {
    /// The agent's capture path: the shared settings, its ring directories, pod log directories and node
    /// root.
    pub fn capture_settings(&self, proc_root: ProcRoot) -> CaptureSettings {
        CaptureSettings {
            pods_log_dir: self.agent.pods_log_dir.clone(),
            node_root: self.agent.node_root.clone(),
            ..self.watch.capture_settings(proc_root, &self.agent.ring_dir)
        }
    }
}
