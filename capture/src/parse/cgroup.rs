//! `/proc/<pid>/cgroup`: `hierarchy-id:controllers:path` lines; v2 is the single `0::/path` line.
//! [`container_id`] finds the container a path belongs to (podman, docker, containerd/CRI-O under
//! kubernetes), which is how a report names the wedged container.

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
            if uid.len() == 36 && uid.bytes().all(|c| c.is_ascii_hexdigit() || c == b'-') {
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
            let runtime = match runtime {
                "unknown" if path.contains("/docker/") || path.starts_with("/docker") => "docker",
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
    fn rejects_garbage() {
        assert!(parse(b"").is_err());
        assert!(parse(b"no colons here").is_err());
        assert!(parse(b"x:cpu:/").is_err());
    }
}
