//! Who was wedged: the host ([`HostInfo`]) and the process, its container and pod ([`ProcessInfo`]).

use serde::{Deserialize, Serialize};

/// The host, as passed in by the caller (the reports crate reads nothing from the kernel).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct HostInfo {
    pub hostname: String,
    /// The kernel's random `boot_id`: tells whether two incidents come from the same boot.
    pub boot_id: String,
    /// `uname -r`.
    pub kernel_release: String,
    /// `x86_64` or `aarch64`.
    pub arch: String,
    /// NVIDIA kernel driver version when known (e.g. `580.159.04`).
    pub nvidia_driver_version: Option<String>,
}

/// The watched process.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessInfo {
    /// PID in the host's PID namespace.
    pub pid: i32,
    /// Start time of the process (field 22 of /proc/<pid>/stat, clock ticks since boot): with the boot id
    /// and the pid, the process's identity (a reused pid has another start time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
    /// NSpid from status: the PID in each nested namespace, outermost first (last = inside the container).
    pub nspid: Vec<i32>,
    pub comm: String,
    /// cgroup v2 path.
    pub cgroup: Option<String>,
    /// Container id derived from the cgroup path, if any.
    pub container_id: Option<String>,
    /// The container (and Kubernetes pod) the process runs in, from its cgroup and the kubelet's pod
    /// log directories.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerInfo>,
    /// Command line, read in a sacrificial child (it can hang); always redacted before it is stored.
    /// Environment variables are never captured.
    pub cmdline: Option<Vec<String>>,
}

/// A process's container: `runtime` is `containerd`, `cri-o`, `docker`, `podman` or `unknown`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ContainerInfo {
    pub runtime: String,
    pub id: String,
    pub pod_uid: Option<String>,
    /// Found under the kubelet's pod log directory for `pod_uid` (or in the container runtime's state).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodInfo>,
    /// How `pod_uid` was established (issue 35); absent without one. Older files lack it: their pod was only
    /// claimed by the cgroup name ([`ContainerInfo::pod_confirmed`] reads them so).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_identity: Option<PodIdentity>,
    /// Why: the node state that confirmed the pod, or what was missing or disagreed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_identity_note: Option<String>,
}

/// How a container's pod was established: the cgroup path only *claims* one (a process with a delegated cgroup
/// can name its cgroups like another pod's); the node's own state confirms it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PodIdentity {
    /// The container runtime's state names the container in that pod, at or above the process's cgroup.
    ContainerRuntime,
    /// The kubelet's pod directory for the UID exists and the cgroup's kubelet levels start at its root.
    Kubelet,
    /// Claimed by the cgroup name: nothing the node keeps confirms it.
    CgroupName,
}

impl PodIdentity {
    /// `confirmed by the container runtime`, `confirmed by the kubelet`, `claimed by the cgroup name only`.
    pub fn describe(self) -> &'static str {
        match self {
            PodIdentity::ContainerRuntime => "confirmed by the container runtime's state",
            PodIdentity::Kubelet => "confirmed by the kubelet's pod directory",
            PodIdentity::CgroupName => "claimed by the cgroup name only (not confirmed)",
        }
    }
}

impl ContainerInfo {
    /// Whether the node's own state confirmed the pod (a file without `pod_identity`: no).
    pub fn pod_confirmed(&self) -> bool {
        matches!(
            self.pod_identity,
            Some(PodIdentity::ContainerRuntime | PodIdentity::Kubelet)
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
}

impl ProcessInfo {
    /// Redact secrets in the command line (idempotent).
    pub fn redact(&mut self) {
        if let Some(args) = &self.cmdline {
            self.cmdline = Some(crate::redact::redact_cmdline(args));
        }
    }
}
