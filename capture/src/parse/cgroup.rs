//! `/proc/<pid>/cgroup`: `hierarchy-id:controllers:path` lines; v2 is the single `0::/path` line.
//! [`container_id`] finds the container a path belongs to (podman, docker, containerd/CRI-O under
//! kubernetes): the outermost one, since a process with a delegated cgroup can create nested cgroups named like
//! any container. [`kubelet_cgroup`] reads a pod UID only where the kubelet's layouts put it (the levels right
//! under the first `kubepods`), never from a name deeper in a tenant's own subtree; the pod is believed only once
//! the node's own state confirms it (`crate::pod`), whose pure parts are here: [`runtime_container`] (a runtime's
//! OCI `config.json`) and [`expand_cgroups_path`] (its `linux.cgroupsPath`). [`pod_dir_name`] and [`find_pod`]
//! name the pod from the kubelet's `/var/log/pods/<namespace>_<name>_<uid>` directories (names others create:
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

/// A cgroup path component as a container: `(runtime, 64-hex id)` for `docker-<id>`, `libpod-<id>`,
/// `cri-containerd-<id>`, `crio-<id>` (a `.scope` suffix dropped) or a bare id (`unknown`, named by the caller).
/// conmon's scopes (`libpod-conmon-…`, `crio-conmon-…`) are not containers.
fn container_component(comp: &str) -> Option<(&'static str, &str)> {
    let comp = comp.strip_suffix(".scope").unwrap_or(comp);
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
    is_hex64(id).then_some((runtime, id))
}

/// Looks for a container id in one cgroup path (v1 or v2 layouts, systemd or cgroupfs drivers): the outermost
/// container component (a process inside a container may nest cgroups named like other containers below it).
/// Under `kubepods`, the pod UID comes only from [`kubelet_cgroup`].
pub fn container_id(path: &str) -> Option<Container> {
    let (runtime, id) = path.split('/').find_map(container_component)?;
    // cgroupfs driver: /docker/<id>, /kubepods/burstable/pod<uid>/<id>.
    // Under kubepods without a prefix: containerd (dockershim is gone; CRI-O says `crio-`).
    let runtime = match runtime {
        "unknown" if path.contains("/docker/") || path.starts_with("/docker") => "docker",
        "unknown" if path.contains("kubepods") => "containerd",
        r => r,
    };
    Some(Container {
        runtime,
        id: id.to_string(),
        pod_uid: kubelet_cgroup(path).map(|k| k.pod_uid),
    })
}

/// Where the kubelet's cgroup layouts put a pod, found in a process's cgroup path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletCgroup {
    /// The pod UID, with dashes (`1a2b3c4d-0000-…`), from the pod level only.
    pub pod_uid: String,
    /// The container at the level right under the pod, when the path reaches it: `(runtime, id)`.
    pub container: Option<(&'static str, String)>,
    /// The path from the hierarchy's root down to the container level (or the pod level without one), without
    /// the `..` a cgroup namespace puts before paths outside it: what a runtime's state must name.
    pub kubelet_path: String,
    /// The first `kubepods` level is at the hierarchy's root (or under systemd slices that are its own parents,
    /// as with a kubelet `--cgroup-root`): no cgroup a tenant could create sits above the pod level.
    pub anchored: bool,
}

/// The kubelet's QoS levels between `kubepods` and the pod (Guaranteed pods sit right under `kubepods`).
const QOS_CLASSES: [&str; 2] = ["burstable", "besteffort"];

/// The pod (and its container) where the kubelet's layouts put them, or None when the path has no `kubepods`
/// level followed by a pod level:
/// - cgroupfs driver: `/kubepods[/burstable|/besteffort]/pod<uid>/<container>`, the container a bare id or
///   `crio-<id>`;
/// - systemd driver: `/kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid with _>.slice/`
///   `cri-containerd-<id>.scope` (or `crio-<id>.scope`, `docker-<id>.scope`), each slice named after its parent.
///
/// Only the first `kubepods` level counts, and only the levels right under it: a tenant with a delegated cgroup
/// can create `…/pod<its uid>/<its container>/kubepods/burstable/pod<another uid>/…`, which names nothing here.
pub fn kubelet_cgroup(path: &str) -> Option<KubeletCgroup> {
    let comps: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty())
        .skip_while(|c| *c == "..")
        .collect();
    let k = comps.iter().position(|c| {
        *c == "kubepods" || *c == "kubepods.slice" || c.ends_with("-kubepods.slice")
    })?;
    let systemd = comps[k].ends_with(".slice");
    let (pod_at, pod_uid) = if systemd {
        let mut stem = comps[k].strip_suffix(".slice")?.to_string();
        let mut at = k + 1;
        let child = |stem: &str, comp: &str| -> Option<String> {
            Some(
                comp.strip_suffix(".slice")?
                    .strip_prefix(stem)?
                    .strip_prefix('-')?
                    .to_string(),
            )
        };
        let mut part = child(&stem, comps.get(at)?)?;
        if QOS_CLASSES.contains(&part.as_str()) {
            stem = format!("{stem}-{part}");
            at += 1;
            part = child(&stem, comps.get(at)?)?;
        }
        // systemd reads `-` in a slice name as nesting: the kubelet writes the UID with `_`.
        let uid = part.strip_prefix("pod")?;
        if uid.contains('-') {
            return None;
        }
        (at, uid.replace('_', "-"))
    } else {
        let mut at = k + 1;
        if QOS_CLASSES.contains(comps.get(at)?) {
            at += 1;
        }
        (at, comps.get(at)?.strip_prefix("pod")?.to_string())
    };
    if !is_pod_uid(&pod_uid) {
        return None;
    }
    let container = comps
        .get(pod_at + 1)
        .and_then(|c| container_component(c))
        .map(|(runtime, id)| {
            let runtime = if runtime == "unknown" {
                "containerd"
            } else {
                runtime
            };
            (runtime, id.to_string())
        });
    let last = if container.is_some() {
        pod_at + 1
    } else {
        pod_at
    };
    // Slices above the first kubepods level are the kubelet's own only when each is the parent of the next
    // (systemd names a slice after its parents: `kubelet.slice/kubelet-kubepods.slice`).
    let anchored = comps[..=k].windows(2).all(|w| {
        let parent = w[0].strip_suffix(".slice");
        let child = w[1].strip_suffix(".slice");
        matches!((parent, child), (Some(p), Some(c)) if c.strip_prefix(p).is_some_and(|r| r.starts_with('-')))
    });
    Some(KubeletCgroup {
        pod_uid,
        container,
        kubelet_path: format!("/{}", comps[..=last].join("/")),
        anchored,
    })
}

/// What a container runtime's state says of one container: its OCI `config.json` (containerd's task bundle,
/// CRI-O's `userdata`), only the fields that name its pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeContainer {
    /// `linux.cgroupsPath`: where the runtime put the container (see [`expand_cgroups_path`]).
    pub cgroups_path: Option<String>,
    /// `io.kubernetes.cri.sandbox-uid` (containerd) or `io.kubernetes.pod.uid` (CRI-O).
    pub pod_uid: Option<String>,
    /// `io.kubernetes.cri.sandbox-namespace` / `io.kubernetes.pod.namespace`.
    pub pod_namespace: Option<String>,
    /// `io.kubernetes.cri.sandbox-name` / `io.kubernetes.pod.name`.
    pub pod_name: Option<String>,
}

/// A runtime's OCI `config.json` (bytes read bounded by the caller): a clear error for anything that is not
/// one; unknown fields are ignored (the file holds the container's whole spec, environment included, none of
/// which is kept).
pub fn runtime_container(config_json: &[u8]) -> Result<RuntimeContainer> {
    #[derive(serde::Deserialize)]
    struct Linux {
        #[serde(rename = "cgroupsPath", default)]
        cgroups_path: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct Spec {
        #[serde(default)]
        annotations: std::collections::BTreeMap<String, String>,
        #[serde(default)]
        linux: Option<Linux>,
    }
    let spec: Spec = serde_json::from_slice(config_json)
        .map_err(|e| err("runtime config.json", e.to_string()))?;
    let annotation = |keys: [&str; 2]| keys.iter().find_map(|k| spec.annotations.get(*k).cloned());
    Ok(RuntimeContainer {
        cgroups_path: spec.linux.and_then(|l| l.cgroups_path),
        pod_uid: annotation(["io.kubernetes.cri.sandbox-uid", "io.kubernetes.pod.uid"]),
        pod_namespace: annotation([
            "io.kubernetes.cri.sandbox-namespace",
            "io.kubernetes.pod.namespace",
        ]),
        pod_name: annotation(["io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name"]),
    })
}

/// The cgroup path a runtime's `linux.cgroupsPath` names: absolute (cgroupfs driver) as it is; systemd's
/// `slice:prefix:name` (`kubepods-burstable-pod<uid>.slice:cri-containerd:<id>`) expanded as systemd nests
/// slices, `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope`.
pub fn expand_cgroups_path(cgroups_path: &str) -> Option<String> {
    if cgroups_path.starts_with('/') {
        return Some(cgroups_path.trim_end_matches('/').to_string());
    }
    let mut parts = cgroups_path.splitn(3, ':');
    let (slice, prefix, name) = (parts.next()?, parts.next()?, parts.next()?);
    if name.is_empty() || name.contains('/') || slice.contains('/') || prefix.contains('/') {
        return None;
    }
    let mut out = String::new();
    if !slice.is_empty() && slice != "-.slice" {
        let stem = slice.strip_suffix(".slice")?;
        let mut parent = String::new();
        for word in stem.split('-') {
            if word.is_empty() {
                return None;
            }
            if !parent.is_empty() {
                parent.push('-');
            }
            parent.push_str(word);
            out.push('/');
            out.push_str(&parent);
            out.push_str(".slice");
        }
    }
    out.push('/');
    if name.ends_with(".slice") {
        out.push_str(name);
    } else if prefix.is_empty() {
        out.push_str(&format!("{name}.scope"));
    } else {
        out.push_str(&format!("{prefix}-{name}.scope"));
    }
    Some(out)
}

/// Whether `name` is a valid Kubernetes namespace (`namespace`: DNS label) or object name (DNS subdomain).
pub fn is_kubernetes_name(name: &str, namespace: bool) -> bool {
    is_k8s_name(name, if namespace { 63 } else { 253 })
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

    /// Issue 35: only the kubelet's levels name the pod. A tenant with a delegated cgroup nests cgroups named like
    /// another pod's below its own container; the first `kubepods` level and the two or three under it decide.
    #[test]
    fn the_pod_comes_from_the_kubelets_levels_only() {
        let a = "1a2b3c4d-0000-1111-2222-333344445555";
        let b = "9f8e7d6c-0000-1111-2222-999999999999";
        let (a_, b_) = (a.replace('-', "_"), b.replace('-', "_"));
        let other = "b".repeat(64);
        for (path, runtime) in [
            (format!("/kubepods/burstable/pod{a}/{ID}/kubepods/burstable/pod{b}/{other}"), "containerd"),
            (format!("/kubepods/pod{a}/{ID}/kubepods/pod{b}/{other}"), "containerd"),
            (format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{a_}.slice/cri-containerd-{ID}.scope/kubepods.slice/kubepods-pod{b_}.slice/cri-containerd-{other}.scope"), "containerd"),
            (format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{a_}.slice/crio-{ID}.scope/x/kubepods-besteffort-pod{b_}.slice"), "cri-o"),
        ] {
            let k = kubelet_cgroup(&path).unwrap_or_else(|| panic!("{path}"));
            assert_eq!(k.pod_uid, a, "{path}");
            assert_eq!(k.container, Some((runtime, ID.to_string())), "{path}");
            assert!(k.anchored, "{path}");
            let c = container_id(&path).unwrap();
            assert_eq!((c.id.as_str(), c.pod_uid.as_deref()), (ID, Some(a)), "{path}");
        }
        // kind's kubelet (--cgroup-root=/kubelet, systemd driver) and a cgroup namespace's `..`: anchored.
        let kind = format!("/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{a_}.slice/cri-containerd-{ID}.scope");
        let k = kubelet_cgroup(&kind).unwrap();
        assert!(k.anchored && k.pod_uid == a, "{k:?}");
        let k = kubelet_cgroup(&format!("/../../../kubepods/pod{a}/{ID}")).unwrap();
        assert!(k.anchored, "{k:?}");
        assert_eq!(k.kubelet_path, format!("/kubepods/pod{a}/{ID}"));
        // Under a cgroup a tenant owns: the layout is read, but it is not anchored.
        let deep = format!(
            "/user.slice/user-1000.slice/user@1000.service/kubepods/burstable/pod{b}/{other}"
        );
        let k = kubelet_cgroup(&deep).unwrap();
        assert!(!k.anchored && k.pod_uid == b, "{k:?}");
        // Names that are not at a kubelet position name no pod.
        for path in [
            format!("/kubepods/burstable/notpod{a}/{ID}"),
            format!("/kubepods/burstable/x/pod{a}/{ID}"),
            format!("/kubepods.slice/other.slice/kubepods-pod{a_}.slice/cri-containerd-{ID}.scope"),
            format!("/kubepods.slice/kubepods-pod{a}.slice/cri-containerd-{ID}.scope"),
            format!("/system.slice/pod{a}/{ID}"),
            format!("/kubepods/pod{a}x/{ID}"),
        ] {
            assert_eq!(kubelet_cgroup(&path), None, "{path}");
            assert_eq!(container_id(&path).and_then(|c| c.pod_uid), None, "{path}");
        }
        // A container level that is not a container (conmon) is none.
        let conmon = format!("/kubepods.slice/kubepods-pod{a_}.slice/crio-conmon-{ID}.scope");
        assert_eq!(kubelet_cgroup(&conmon).unwrap().container, None);
    }

    #[test]
    fn runtime_cgroups_paths_expand_as_systemd_nests_slices() {
        let a_ = "1a2b3c4d_0000_1111_2222_333344445555";
        assert_eq!(
            expand_cgroups_path(&format!("kubepods-burstable-pod{a_}.slice:cri-containerd:{ID}")).unwrap(),
            format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{a_}.slice/cri-containerd-{ID}.scope")
        );
        assert_eq!(
            expand_cgroups_path(&format!("kubepods-pod{a_}.slice:crio:{ID}")).unwrap(),
            format!("/kubepods.slice/kubepods-pod{a_}.slice/crio-{ID}.scope")
        );
        assert_eq!(
            expand_cgroups_path("/kubepods/burstable/podx/abc/").unwrap(),
            "/kubepods/burstable/podx/abc"
        );
        for bad in [
            "",
            "a.slice",
            "a.slice:b",
            "a--b.slice:x:y",
            "a.slice:x:../y",
            "nope:x:y",
        ] {
            assert_eq!(expand_cgroups_path(bad), None, "{bad}");
        }
    }

    #[test]
    fn runtime_configs_give_only_the_pod_fields() {
        let c = runtime_container(br#"{"annotations":{"io.kubernetes.cri.sandbox-uid":"u","io.kubernetes.cri.sandbox-name":"n","io.kubernetes.cri.sandbox-namespace":"ns"},"linux":{"cgroupsPath":"/x"},"process":{"env":["A=b"]}}"#).unwrap();
        assert_eq!(
            c,
            RuntimeContainer {
                cgroups_path: Some("/x".into()),
                pod_uid: Some("u".into()),
                pod_namespace: Some("ns".into()),
                pod_name: Some("n".into()),
            }
        );
        assert_eq!(
            runtime_container(b"{}").unwrap(),
            RuntimeContainer::default()
        );
        assert!(runtime_container(b"not json").is_err());
        assert!(runtime_container(br#"{"annotations":[1]}"#).is_err());
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse(b"").is_err());
        assert!(parse(b"no colons here").is_err());
        assert!(parse(b"x:cpu:/").is_err());
    }
}
