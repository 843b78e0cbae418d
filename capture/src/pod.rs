//! Pod identity a tenant does not name: the pod a process's cgroup path claims ([`KubeletCgroup`]), confirmed or
//! not by the node's own state, which only root writes.
//!
//! A cgroup path is a set of names, and a process with a delegated cgroup (a rootless runtime, a privileged pod,
//! a user slice) can create cgroups named like another pod's. So the path only *claims* a pod; [`confirm`] asks:
//! 1. the container runtime's state for the container at the kubelet's container level: containerd's task bundle
//!    `<root>/run/containerd/io.containerd.runtime.v2.task/k8s.io/<id>/config.json` (k3s:
//!    `<root>/run/k3s/containerd/…`), CRI-O's `<root>/run/containers/storage/overlay-containers/<id>/userdata/config.json`.
//!    Root-owned, opened without following links, bounded. Its `linux.cgroupsPath` must be the process's cgroup or
//!    one of its parents and name the same pod UID, and its pod-UID annotation, if any, must agree:
//!    [`PodIdentity::ContainerRuntime`]. A runtime whose state is visible but holds no such container, or one that
//!    disagrees, refutes the claim.
//! 2. Where no runtime state is visible: the kubelet's pod directory `<root>/var/lib/kubelet/pods/<uid>` (a
//!    root-owned directory, not a link), believed only when the cgroup's kubelet levels start at the hierarchy's
//!    root ([`KubeletCgroup::anchored`]): [`PodIdentity::Kubelet`].
//! 3. Anything else: [`PodIdentity::CgroupName`], "claimed by the cgroup name", with a note saying why.
//!
//! `<root>` is `/` on the host, or where the host's root is mounted (e.g. `/proc/1/root` in a hostPID pod).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::parse::cgroup::{self, KubeletCgroup};
use crate::untrusted::{self, Limits};

/// Largest runtime `config.json` read (a spec with a large environment is tens of KiB).
pub const MAX_RUNTIME_CONFIG_BYTES: u64 = 4 << 20;

/// The kubelet's per-pod state directories, under the node's root.
pub const KUBELET_PODS_DIR: &str = "var/lib/kubelet/pods";

/// Per runtime: the directory of its per-container state (checked to exist and be root's before its absence of a
/// container means anything) and the config file of container `<id>` under it.
const RUNTIME_STATE: &[(&str, &str, &str)] = &[
    (
        "containerd",
        "run/containerd/io.containerd.runtime.v2.task/k8s.io",
        "config.json",
    ),
    (
        "containerd",
        "run/k3s/containerd/io.containerd.runtime.v2.task/k8s.io",
        "config.json",
    ),
    (
        "cri-o",
        "run/containers/storage/overlay-containers",
        "userdata/config.json",
    ),
];

/// How a pod's identity was established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodIdentity {
    /// The container runtime's state names the container, in that pod, at (or above) the process's cgroup.
    ContainerRuntime,
    /// The kubelet's pod directory for the UID exists, and the cgroup's kubelet levels start at its root.
    Kubelet,
    /// Only the cgroup path's names say so.
    CgroupName,
}

/// What [`confirm`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodCheck {
    pub identity: PodIdentity,
    /// Why the identity is what it is (which state confirmed it, or what was missing or disagreed).
    pub note: String,
    /// The pod's namespace and name from the runtime's annotations, when it confirmed the pod and they are
    /// valid Kubernetes names.
    pub names: Option<(String, String)>,
}

fn claimed(note: String) -> PodCheck {
    PodCheck {
        identity: PodIdentity::CgroupName,
        note,
        names: None,
    }
}

/// A root-owned directory that is not a symlink.
fn root_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir() && m.uid() == 0)
}

/// The process's cgroup `process_cgroup` (as `/proc/<pid>/cgroup` shows it) claims the pod `kube`; `root` is the
/// node's root. See the module map.
pub fn confirm(root: &Path, kube: &KubeletCgroup, process_cgroup: &str) -> PodCheck {
    let uid = &kube.pod_uid;
    if let Some((runtime, id)) = &kube.container {
        let mut state_seen = Vec::new();
        for (name, dir, file) in RUNTIME_STATE.iter().filter(|(name, ..)| name == runtime) {
            let dir = root.join(dir);
            if !root_dir(&dir) {
                continue;
            }
            let config = dir.join(id).join(file);
            match read_config(&config) {
                Ok(Some(found)) => {
                    return judge_runtime(name, &config, &found, kube, process_cgroup)
                }
                Ok(None) => state_seen.push(dir),
                Err(why) => return claimed(format!("{}: {why}", config.display())),
            }
        }
        if !state_seen.is_empty() {
            return claimed(format!(
                "the container runtime's state ({}) has no container {id}",
                state_seen
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    let pods = root.join(KUBELET_PODS_DIR);
    let pod_dir = pods.join(uid);
    if !root_dir(&pods) {
        return claimed(format!(
            "no container runtime state and no kubelet pod directories visible under {}",
            root.display()
        ));
    }
    if !root_dir(&pod_dir) {
        return claimed(format!(
            "the kubelet has no pod {uid} ({} is not a root-owned directory)",
            pod_dir.display()
        ));
    }
    if !kube.anchored {
        return claimed(format!(
            "the kubelet has a pod {uid}, but this cgroup's kubepods level is not at the hierarchy's root \
             (a cgroup anyone could name), and no container runtime state confirms the container"
        ));
    }
    PodCheck {
        identity: PodIdentity::Kubelet,
        note: format!(
            "the kubelet's pod directory {} exists (no container runtime state visible)",
            pod_dir.display()
        ),
        names: None,
    }
}

/// The runtime's config of one container: None when it has no such container, an error when the file is there
/// but is not root's, not a regular file, too large or not a spec.
fn read_config(path: &Path) -> Result<Option<cgroup::RuntimeContainer>, String> {
    let limits = Limits {
        max_len: MAX_RUNTIME_CONFIG_BYTES,
        owner: Some(0),
    };
    let bytes = match untrusted::read(path, limits) {
        Ok(bytes) => bytes,
        Err(crate::Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None)
        }
        Err(e) => return Err(e.to_string()),
    };
    cgroup::runtime_container(&bytes)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// `path` without the `..` levels a cgroup namespace puts before paths outside it.
fn from_root(path: &str) -> String {
    let comps: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty())
        .skip_while(|c| *c == "..")
        .collect();
    format!("/{}", comps.join("/"))
}

fn judge_runtime(
    runtime: &str,
    config: &Path,
    found: &cgroup::RuntimeContainer,
    kube: &KubeletCgroup,
    process_cgroup: &str,
) -> PodCheck {
    let uid = &kube.pod_uid;
    let Some(path) = found
        .cgroups_path
        .as_deref()
        .and_then(cgroup::expand_cgroups_path)
    else {
        return claimed(format!(
            "{runtime}'s state for the container ({}) names no cgroup",
            config.display()
        ));
    };
    let process = from_root(process_cgroup);
    let inside = process == path || process.starts_with(&format!("{path}/"));
    if !inside {
        return claimed(format!(
            "{runtime} put the container in {path}, not above this process's cgroup {process}"
        ));
    }
    if cgroup::kubelet_cgroup(&path).map(|k| k.pod_uid).as_deref() != Some(uid.as_str()) {
        return claimed(format!(
            "{runtime}'s cgroup for the container ({path}) is not pod {uid}'s"
        ));
    }
    if let Some(annotated) = &found.pod_uid {
        if annotated != uid {
            return claimed(format!(
                "{runtime} says the container belongs to pod {annotated}, not {uid}"
            ));
        }
    }
    let names = match (&found.pod_namespace, &found.pod_name) {
        (Some(ns), Some(name))
            if cgroup::is_kubernetes_name(ns, true) && cgroup::is_kubernetes_name(name, false) =>
        {
            Some((ns.clone(), name.clone()))
        }
        _ => None,
    };
    PodCheck {
        identity: PodIdentity::ContainerRuntime,
        note: format!(
            "{runtime}'s state ({}) names the container in pod {uid}",
            config.display()
        ),
        names,
    }
}

#[cfg(test)]
mod tests;
