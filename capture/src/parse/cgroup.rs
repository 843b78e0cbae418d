//! `/proc/<pid>/cgroup`: `hierarchy-id:controllers:path` lines; v2 is the single `0::/path` line.
//! [`container_id`] finds the container a path belongs to (podman, docker, containerd/CRI-O under
//! kubernetes), which is how a report names the wedged container; [`pod_dir_name`] and [`find_pod`] name
//! its pod from the kubelet's `/var/log/pods/<namespace>_<name>_<uid>` directories (names others create:
//! checked to be Kubernetes names before they are believed).

use super::{err, parse_u64};
use crate::error::Result;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupLine {
    pub hierarchy: u64,
    /// Empty for cgroup v2.
    pub controllers: Vec<String>,
    pub path: String,
}

impl CgroupLine {
    pub fn is_v2(&self) -> bool {
        self.hierarchy == 0 && self.controllers.is_empty()
    }
}

pub fn parse(b: &[u8]) -> Result<Vec<CgroupLine>> {
    let mut out = Vec::new();
    for line in b.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
        if out.len() == 1024 {
            return Err(err("cgroup", "too many lines"));
        }
        let mut parts = line.splitn(3, |&c| c == b':');
        let (Some(h), Some(c), Some(p)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(err(
                "cgroup",
                format!(
                    "expected id:controllers:path, got {:?}",
                    String::from_utf8_lossy(line)
                ),
            ));
        };
        out.push(CgroupLine {
            hierarchy: parse_u64("cgroup hierarchy id", h)?,
            controllers: c
                .split(|&x| x == b',')
                .filter(|x| !x.is_empty())
                .map(|x| String::from_utf8_lossy(x).into_owned())
                .collect(),
            path: String::from_utf8_lossy(p).into_owned(),
        });
    }
    if out.is_empty() {
        return Err(err("cgroup", "empty file"));
    }
    Ok(out)
}

/// A container found in a cgroup path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    /// `podman`, `docker`, `containerd`, `cri-o` or `unknown`.
    pub runtime: &'static str,
    /// The 64-hex-digit container id.
    pub id: String,
    /// Kubernetes pod UID when the path is under `kubepods`.
    pub pod_uid: Option<String>,
}

/// A Kubernetes pod, named by the kubelet's log directory for its uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// Most directory entries looked at under the pods log directory (a node runs at most a few hundred pods).
pub const MAX_POD_DIRS: usize = 16 * 1024;

fn is_pod_uid(s: &str) -> bool {
    s.len() == 36 && s.bytes().all(|c| c.is_ascii_hexdigit() || c == b'-')
}

/// A DNS-1123 name (label when `max` is 63, subdomain when 253): what Kubernetes allows, so anything
/// else in a directory name is not the kubelet's.
fn is_k8s_name(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.')
        && s.bytes().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.bytes().last().is_some_and(|c| c.is_ascii_alphanumeric())
        && (max > 63 || !s.contains('.'))
}

/// `<namespace>_<name>_<uid>` (a pods log directory entry's raw name), when it is one for `uid`.
pub fn pod_dir_name(entry: &[u8], uid: &str) -> Option<Pod> {
    let entry = std::str::from_utf8(entry).ok()?;
    let mut parts = entry.split('_');
    let (namespace, name, dir_uid) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || dir_uid != uid || !is_pod_uid(uid) {
        return None;
    }
    (is_k8s_name(namespace, 63) && is_k8s_name(name, 253)).then(|| Pod {
        namespace: namespace.to_string(),
        name: name.to_string(),
        uid: uid.to_string(),
    })
}

/// The pod of `uid` under `pods_log_dir` (the kubelet's `/var/log/pods`): only directory entry names are
/// read, at most [`MAX_POD_DIRS`] of them; nothing is opened or followed.
pub fn find_pod(pods_log_dir: &std::path::Path, uid: &str) -> Option<Pod> {
    use std::os::unix::ffi::OsStrExt;
    if !is_pod_uid(uid) {
        return None;
    }
    let entries = std::fs::read_dir(pods_log_dir).ok()?;
    entries
        .take(MAX_POD_DIRS)
        .filter_map(|e| e.ok())
        .find_map(|e| pod_dir_name(e.file_name().as_bytes(), uid))
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|c| c.is_ascii_hexdigit())
}

/// Looks for a container id in one cgroup path (v1 or v2 layouts, systemd or cgroupfs drivers).
pub fn container_id(path: &str) -> Option<Container> {
    let mut pod_uid = None;
    let mut found = None;
    for comp in path.split('/') {
        let comp = comp.strip_suffix(".scope").unwrap_or(comp);
        // Kubernetes: `kubepods-burstable-pod<uid>.slice` (systemd, `-` for `_`) or `pod<uid>`.
        if let Some(pos) = comp.rfind("pod") {
            let uid = comp[pos + 3..].trim_end_matches(".slice").replace('_', "-");
            if is_pod_uid(&uid) {
                pod_uid = Some(uid);
            }
        }
        let (runtime, id) = if let Some(id) = comp.strip_prefix("libpod-") {
            ("podman", id)
        } else if let Some(id) = comp.strip_prefix("docker-") {
            ("docker", id)
        } else if let Some(id) = comp.strip_prefix("cri-containerd-") {
            ("containerd", id)
        } else if let Some(id) = comp.strip_prefix("crio-") {
            ("cri-o", id)
        } else {
            ("unknown", comp)
        };
        if is_hex64(id) {
            // cgroupfs driver: /docker/<id>, /kubepods/burstable/pod<uid>/<id>.
            // Under kubepods without a prefix: containerd (dockershim is gone; CRI-O says `crio-`).
            let runtime = match runtime {
                "unknown" if path.contains("/docker/") || path.starts_with("/docker") => "docker",
                "unknown" if path.contains("kubepods") => "containerd",
                r => r,
            };
            found = Some((runtime, id.to_string()));
        }
    }
    found.map(|(runtime, id)| Container {
        runtime,
        id,
        pod_uid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8";

    #[test]
    fn v1_and_v2() {
        let v2 = parse(b"0::/user.slice/user-0.slice/session-3.scope\n").unwrap();
        assert_eq!(v2.len(), 1);
        assert!(v2[0].is_v2());
        assert_eq!(v2[0].path, "/user.slice/user-0.slice/session-3.scope");
        let v1 = parse(b"12:cpu,cpuacct:/docker/abc\n11:memory:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n").unwrap();
        assert_eq!(v1.len(), 4);
        assert_eq!(v1[0].controllers, vec!["cpu", "cpuacct"]);
        assert!(!v1[0].is_v2());
        assert!(v1[3].is_v2());
    }

    #[test]
    fn container_ids() {
        let podman = format!("/machine.slice/libpod-{ID}.scope/container");
        let c = container_id(&podman).unwrap();
        assert_eq!((c.runtime, c.id.as_str()), ("podman", ID));
        let docker = format!("/system.slice/docker-{ID}.scope");
        assert_eq!(container_id(&docker).unwrap().runtime, "docker");
        let docker_v1 = format!("/docker/{ID}");
        assert_eq!(container_id(&docker_v1).unwrap().runtime, "docker");
        let k8s = format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b3c4d_0000_1111_2222_333344445555.slice/cri-containerd-{ID}.scope");
        let c = container_id(&k8s).unwrap();
        assert_eq!(c.runtime, "containerd");
        assert_eq!(
            c.pod_uid.as_deref(),
            Some("1a2b3c4d-0000-1111-2222-333344445555")
        );
        assert_eq!(
            container_id("/user.slice/user-0.slice/session-3.scope"),
            None
        );
        assert_eq!(container_id("/"), None);
    }

    #[test]
    fn every_runtime_and_driver() {
        let uid = "1a2b3c4d-0000-1111-2222-333344445555";
        let uid_ = "1a2b3c4d_0000_1111_2222_333344445555";
        for (path, runtime, pod) in [
            // containerd, systemd driver (cgroup v2) and cgroupfs driver.
            (format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/cri-containerd-{ID}.scope"), "containerd", true),
            (format!("/kubepods/burstable/pod{uid}/{ID}"), "containerd", true),
            (format!("/kubepods/pod{uid}/{ID}"), "containerd", true),
            // CRI-O, systemd and cgroupfs drivers.
            (format!("/kubepods.slice/kubepods-pod{uid_}.slice/crio-{ID}.scope"), "cri-o", true),
            (format!("/kubepods/besteffort/pod{uid}/crio-{ID}"), "cri-o", true),
            // Docker, systemd and cgroupfs.
            (format!("/system.slice/docker-{ID}.scope"), "docker", false),
            (format!("/docker/{ID}"), "docker", false),
            // podman, rootful and rootless.
            (format!("/machine.slice/libpod-{ID}.scope/container"), "podman", false),
            (format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"), "podman", false),
        ] {
            let c = container_id(&path).unwrap_or_else(|| panic!("{path}"));
            assert_eq!((c.runtime, c.id.as_str()), (runtime, ID), "{path}");
            assert_eq!(c.pod_uid.as_deref(), pod.then_some(uid), "{path}");
        }
        // conmon (podman's and CRI-O's monitor) is not the container.
        for conmon in [
            format!("/machine.slice/libpod-conmon-{ID}.scope"),
            format!("/kubepods.slice/kubepods-pod{uid_}.slice/crio-conmon-{ID}.scope"),
        ] {
            assert_eq!(container_id(&conmon), None, "{conmon}");
        }
        // Hostile paths: ids that are not 64 hex digits, uids that are not uids.
        assert_eq!(container_id(&format!("/docker/{}", "g".repeat(64))), None);
        let bad_uid = container_id(&format!("/kubepods/pod../../etc/{ID}")).unwrap();
        assert_eq!(bad_uid.pod_uid, None);
    }

    #[test]
    fn pods_log_names_are_believed_only_when_they_are_kubernetes_names() {
        let uid = "1a2b3c4d-0000-1111-2222-333344445555";
        let pod = pod_dir_name(format!("gpu-jobs_trainer-7f9c-0_{uid}").as_bytes(), uid).unwrap();
        assert_eq!(
            (pod.namespace.as_str(), pod.name.as_str()),
            ("gpu-jobs", "trainer-7f9c-0")
        );
        assert!(pod_dir_name(format!("ns_my.pod.name_{uid}").as_bytes(), uid).is_some());
        for hostile in [
            format!("ns_name_{uid}_extra"),
            "ns_name_other-uid".to_string(),
            format!("NS_name_{uid}"),
            format!("ns_na\nme_{uid}"),
            format!("ns_\x1b[31mred_{uid}"),
            format!("_name_{uid}"),
            format!("ns.dot_name_{uid}"),
            format!("ns_{}_{uid}", "a".repeat(254)),
            format!("ns_-name_{uid}"),
        ] {
            assert_eq!(pod_dir_name(hostile.as_bytes(), uid), None, "{hostile}");
        }
        assert_eq!(pod_dir_name(&[0xff, b'_', b'a', b'_'], uid), None);
        assert_eq!(
            pod_dir_name(format!("ns_name_{uid}").as_bytes(), "../etc"),
            None
        );
    }

    #[test]
    fn find_pod_reads_entry_names_only() {
        let dir = tempfile::tempdir().unwrap();
        let uid = "1a2b3c4d-0000-1111-2222-333344445555";
        std::fs::create_dir(
            dir.path()
                .join(format!("kube-system_other_{}", "0".repeat(36))),
        )
        .unwrap();
        std::fs::write(dir.path().join(format!("EVIL_x_{uid}")), b"").unwrap();
        std::os::unix::fs::symlink("/etc", dir.path().join(format!("ml_trainer-0_{uid}"))).unwrap();
        let pod = find_pod(dir.path(), uid).unwrap();
        assert_eq!(
            (pod.namespace.as_str(), pod.name.as_str()),
            ("ml", "trainer-0")
        );
        assert_eq!(
            find_pod(dir.path(), "1a2b3c4d-0000-1111-2222-999999999999"),
            None
        );
        assert_eq!(find_pod(&dir.path().join("missing"), uid), None);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse(b"").is_err());
        assert!(parse(b"no colons here").is_err());
        assert!(parse(b"x:cpu:/").is_err());
    }
}
