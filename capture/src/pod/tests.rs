//! The pod identity checks against a fake node root: what confirms a pod, what only claims one (issue 35).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::*;
use crate::parse::cgroup::kubelet_cgroup;

const A: &str = "1a2b3c4d-0000-1111-2222-333344445555";
const B: &str = "9f8e7d6c-0000-1111-2222-999999999999";
const ID_A: &str = "aaaa2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8";
const ID_B: &str = "bbbb2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8";

fn underscored(uid: &str) -> String {
    uid.replace('-', "_")
}

/// A containerd task bundle for container `id` of pod `uid`, its cgroup as the systemd driver names it.
fn containerd_task(root: &Path, id: &str, uid: &str) {
    let dir = root
        .join("run/containerd/io.containerd.runtime.v2.task/k8s.io")
        .join(id);
    std::fs::create_dir_all(&dir).unwrap();
    let spec = serde_json::json!({
        "ociVersion": "1.1.0",
        "process": {"env": ["SECRET=not-kept"]},
        "annotations": {
            "io.kubernetes.cri.container-type": "container",
            "io.kubernetes.cri.sandbox-uid": uid,
            "io.kubernetes.cri.sandbox-name": "trainer-0",
            "io.kubernetes.cri.sandbox-namespace": "ml",
        },
        "linux": {"cgroupsPath": format!("kubepods-burstable-pod{}.slice:cri-containerd:{id}", underscored(uid))}
    });
    std::fs::write(dir.join("config.json"), spec.to_string()).unwrap();
}

fn systemd_path(uid: &str, id: &str) -> String {
    format!(
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{id}.scope",
        underscored(uid)
    )
}

fn check(root: &Path, path: &str) -> PodCheck {
    confirm(root, &kubelet_cgroup(path).unwrap(), path)
}

#[test]
fn the_runtime_confirms_its_own_container_and_refutes_a_nested_imitation() {
    let root = tempfile::tempdir().unwrap();
    containerd_task(root.path(), ID_A, A);
    containerd_task(root.path(), ID_B, B);
    let real = systemd_path(A, ID_A);
    let got = check(root.path(), &real);
    assert_eq!(got.identity, PodIdentity::ContainerRuntime, "{got:?}");
    assert_eq!(got.names, Some(("ml".into(), "trainer-0".into())));
    // The process in a cgroup of its own below its container: still its pod.
    let below = format!("{real}/worker");
    assert_eq!(
        check(root.path(), &below).identity,
        PodIdentity::ContainerRuntime
    );
    // Pod A's tenant nests cgroups named like pod B: the kubelet's levels still say pod A, confirmed.
    let nested = format!("{real}/{}", systemd_path(B, ID_B).trim_start_matches('/'));
    let k = kubelet_cgroup(&nested).unwrap();
    assert_eq!(
        (
            k.pod_uid.as_str(),
            k.container.as_ref().map(|c| c.1.as_str())
        ),
        (A, Some(ID_A))
    );
    assert_eq!(
        check(root.path(), &nested).identity,
        PodIdentity::ContainerRuntime
    );
    // A user slice imitating pod B's whole path, even with B's real container id: B's cgroup is elsewhere.
    let imitation = format!(
        "/user.slice/user-1000.slice/user@1000.service/app.slice{}",
        systemd_path(B, ID_B)
    );
    let got = check(root.path(), &imitation);
    assert_eq!(got.identity, PodIdentity::CgroupName, "{got:?}");
    assert!(
        got.note.contains("not above this process's cgroup"),
        "{got:?}"
    );
    // A container id the runtime does not know.
    let unknown = systemd_path(B, &"c".repeat(64));
    let got = check(root.path(), &unknown);
    assert_eq!(got.identity, PodIdentity::CgroupName, "{got:?}");
    assert!(got.note.contains("has no container"), "{got:?}");
}

#[test]
fn runtime_state_that_disagrees_or_is_not_roots_confirms_nothing() {
    let root = tempfile::tempdir().unwrap();
    // The runtime put container ID_A in pod B: a cgroup path naming pod A for it is refuted.
    containerd_task(root.path(), ID_A, B);
    let got = check(root.path(), &systemd_path(A, ID_A));
    assert_eq!(got.identity, PodIdentity::CgroupName, "{got:?}");
    // A config.json owned by someone else, or a symlink, is not the runtime's.
    let root = tempfile::tempdir().unwrap();
    containerd_task(root.path(), ID_A, A);
    let config = root
        .path()
        .join("run/containerd/io.containerd.runtime.v2.task/k8s.io")
        .join(ID_A)
        .join("config.json");
    std::os::unix::fs::chown(&config, Some(65534), None).unwrap();
    let got = check(root.path(), &systemd_path(A, ID_A));
    assert_eq!(got.identity, PodIdentity::CgroupName, "{got:?}");
    std::fs::remove_file(&config).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", &config).unwrap();
    let got = check(root.path(), &systemd_path(A, ID_A));
    assert_eq!(got.identity, PodIdentity::CgroupName, "{got:?}");
    // The annotation disagreeing with the cgroup: refuted.
    let root = tempfile::tempdir().unwrap();
    containerd_task(root.path(), ID_A, A);
    let config = root
        .path()
        .join("run/containerd/io.containerd.runtime.v2.task/k8s.io")
        .join(ID_A)
        .join("config.json");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        &format!("\"io.kubernetes.cri.sandbox-uid\":\"{A}\""),
        &format!("\"io.kubernetes.cri.sandbox-uid\":\"{B}\""),
    );
    std::fs::write(&config, text).unwrap();
    let got = check(root.path(), &systemd_path(A, ID_A));
    assert_eq!(got.identity, PodIdentity::CgroupName, "{got:?}");
    assert!(got.note.contains(B), "{got:?}");
}

#[test]
fn the_kubelet_directory_confirms_only_an_anchored_claim() {
    let root = tempfile::tempdir().unwrap();
    let pods = root.path().join(KUBELET_PODS_DIR);
    std::fs::create_dir_all(pods.join(A)).unwrap();
    let cgroupfs = format!("/kubepods/burstable/pod{A}/{ID_A}");
    let got = check(root.path(), &cgroupfs);
    assert_eq!(got.identity, PodIdentity::Kubelet, "{got:?}");
    // The same under a cgroup namespace's `..`.
    let in_ns = format!("/../../..{cgroupfs}");
    assert_eq!(check(root.path(), &in_ns).identity, PodIdentity::Kubelet);
    // No such pod on this node.
    let got = check(root.path(), &format!("/kubepods/pod{B}/{ID_B}"));
    assert_eq!(got.identity, PodIdentity::CgroupName, "{got:?}");
    // A real pod's UID named under a cgroup a tenant created: the directory exists, the claim is not anchored.
    let deep = format!("/user.slice/user-1000.slice/user@1000.service{cgroupfs}");
    let got = check(root.path(), &deep);
    assert_eq!(got.identity, PodIdentity::CgroupName, "{got:?}");
    assert!(got.note.contains("not at the hierarchy's root"), "{got:?}");
    // A pod directory that is a symlink, or not root's.
    std::fs::remove_dir(pods.join(A)).unwrap();
    std::os::unix::fs::symlink("/tmp", pods.join(A)).unwrap();
    assert_eq!(
        check(root.path(), &cgroupfs).identity,
        PodIdentity::CgroupName
    );
    std::fs::remove_file(pods.join(A)).unwrap();
    std::fs::create_dir(pods.join(A)).unwrap();
    std::os::unix::fs::chown(pods.join(A), Some(65534), None).unwrap();
    std::fs::set_permissions(pods.join(A), std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(
        check(root.path(), &cgroupfs).identity,
        PodIdentity::CgroupName
    );
    // Nothing of the node's state visible at all.
    let empty = tempfile::tempdir().unwrap();
    let got = check(empty.path(), &cgroupfs);
    assert_eq!(got.identity, PodIdentity::CgroupName, "{got:?}");
    assert!(got.note.contains("no container runtime state"), "{got:?}");
}

#[test]
fn cri_o_state_confirms_its_containers() {
    let root = tempfile::tempdir().unwrap();
    let dir = root
        .path()
        .join("run/containers/storage/overlay-containers")
        .join(ID_A)
        .join("userdata");
    std::fs::create_dir_all(&dir).unwrap();
    let spec = serde_json::json!({
        "annotations": {"io.kubernetes.pod.uid": A, "io.kubernetes.pod.name": "web-1",
            "io.kubernetes.pod.namespace": "shop"},
        "linux": {"cgroupsPath": format!("/kubepods/besteffort/pod{A}/crio-{ID_A}")}
    });
    std::fs::write(dir.join("config.json"), spec.to_string()).unwrap();
    let got = check(
        root.path(),
        &format!("/kubepods/besteffort/pod{A}/crio-{ID_A}"),
    );
    assert_eq!(got.identity, PodIdentity::ContainerRuntime, "{got:?}");
    assert_eq!(got.names, Some(("shop".into(), "web-1".into())));
}
