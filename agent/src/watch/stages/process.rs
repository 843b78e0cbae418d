//! Stage `process`: who the process is (NSpid, comm, cgroup, container, pod), from reads that cannot hang.
//!
//! The pod: its UID only where the kubelet's cgroup layouts put it (`capture::parse::cgroup::kubelet_cgroup`),
//! then confirmed by the node's own state under `node_root` (the container runtime's, else the kubelet's pod
//! directory: `capture::pod`), or marked "claimed by the cgroup name". Its namespace and name come from the
//! kubelet's `/var/log/pods` entry for the UID (root-owned), else from the runtime's annotations when it
//! confirmed the pod.

use std::path::Path;

use capture::parse::cgroup;
use capture::ProcRoot;
use reports::model::{ContainerInfo, Incident, PodIdentity, PodInfo};

use super::context::{Capture, Deadline};

pub fn run(capture: &mut Capture<'_>, _deadline: &Deadline) -> Result<(), String> {
    let claiming = fill_process_info(&capture.settings.proc_root, capture.pid, capture.incident);
    fill_pod(
        &capture.settings.pods_log_dir,
        &capture.settings.node_root,
        claiming.as_deref(),
        capture.incident,
    );
    Ok(())
}

/// How the pod was established, and its namespace and name; `claiming` is the cgroup path that named the pod.
fn fill_pod(
    pods_log_dir: &Path,
    node_root: &Path,
    claiming: Option<&str>,
    incident: &mut Incident,
) {
    let Some(container) = incident.process.container.as_mut() else {
        return;
    };
    let Some(uid) = container.pod_uid.clone() else {
        return;
    };
    let Some((path, kube)) = claiming.and_then(|p| Some((p, cgroup::kubelet_cgroup(p)?))) else {
        container.pod_identity = Some(PodIdentity::CgroupName);
        container.pod_identity_note =
            Some("no cgroup path holds the pod at a kubelet position".into());
        return;
    };
    let check = capture::pod::confirm(node_root, &kube, path);
    container.pod_identity = Some(match check.identity {
        capture::pod::PodIdentity::ContainerRuntime => PodIdentity::ContainerRuntime,
        capture::pod::PodIdentity::Kubelet => PodIdentity::Kubelet,
        capture::pod::PodIdentity::CgroupName => PodIdentity::CgroupName,
    });
    container.pod_identity_note = Some(check.note);
    let from_logs = cgroup::find_pod(pods_log_dir, &uid).map(|pod| PodInfo {
        namespace: pod.namespace,
        name: pod.name,
    });
    container.pod = from_logs.or_else(|| {
        check
            .names
            .map(|(namespace, name)| PodInfo { namespace, name })
    });
}

/// NSpid, comm, cgroup and container of the process (reads that cannot hang); returns the cgroup path that
/// claims a pod (the v2 path, or a v1 hierarchy's), if one does.
fn fill_process_info(root: &ProcRoot, pid: i32, incident: &mut Incident) -> Option<String> {
    match root.read_task_status(pid, pid) {
        Ok(status) => {
            incident.process.nspid = status.nspid.clone();
            incident.process.comm = status.name.clone().unwrap_or_default();
        }
        Err(err) => incident.push_not_captured("process status (NSpid)", err.to_string()),
    }
    match root.cgroup(pid) {
        Ok(lines) => {
            let line = lines
                .iter()
                .find(|l| l.is_v2())
                .or_else(|| lines.first())
                .map(|l| l.path.clone());
            // cgroup v1: the container shows in some hierarchies only.
            let container = line
                .as_deref()
                .and_then(cgroup::container_id)
                .or_else(|| lines.iter().find_map(|l| cgroup::container_id(&l.path)));
            incident.process.container_id = container
                .as_ref()
                .map(|c| format!("{}:{}", c.runtime, c.id));
            incident.process.container = container.map(|c| ContainerInfo {
                runtime: c.runtime.to_string(),
                id: c.id,
                pod_uid: c.pod_uid,
                ..ContainerInfo::default()
            });
            // The hierarchy whose path names the pod: the recorded one first.
            let claiming = line
                .iter()
                .chain(lines.iter().map(|l| &l.path))
                .find(|p| cgroup::kubelet_cgroup(p).is_some())
                .cloned();
            incident.process.cgroup = line;
            claiming
        }
        Err(err) => {
            incident.push_not_captured("cgroup", err.to_string());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use capture::testing::FakeProc;
    use reports::model::{Incident, PodIdentity};

    use super::*;

    const A: &str = "1a2b3c4d-0000-1111-2222-333344445555";
    const B: &str = "9f8e7d6c-0000-1111-2222-999999999999";
    const ID_A: &str = "aaaa2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8";
    const ID_B: &str = "bbbb2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8";

    fn incident_of(cgroup: &str, pods_log_dir: &Path, node_root: &Path) -> Incident {
        let fake = FakeProc::new();
        fake.process(4100).comm("python3").cgroup(cgroup);
        let mut incident = Incident::new(4100);
        let claiming = fill_process_info(&fake.root(), 4100, &mut incident);
        fill_pod(pods_log_dir, node_root, claiming.as_deref(), &mut incident);
        incident
    }

    fn kubelet_pod(node: &Path, logs: &Path, uid: &str, namespace: &str, name: &str) {
        std::fs::create_dir_all(node.join("var/lib/kubelet/pods").join(uid)).unwrap();
        std::fs::create_dir_all(logs.join(format!("{namespace}_{name}_{uid}"))).unwrap();
    }

    /// Issue 35: pod A's process nests cgroups named like pod B's; on main the incident blamed pod B (its
    /// name from /var/log/pods), now it is pod A's, confirmed by the kubelet's pod directory.
    #[test]
    fn a_cgroup_named_like_another_pod_does_not_blame_that_pod() {
        let node = tempfile::tempdir().unwrap();
        let logs = tempfile::tempdir().unwrap();
        kubelet_pod(node.path(), logs.path(), A, "tenant-a", "job-a");
        kubelet_pod(node.path(), logs.path(), B, "tenant-b", "victim-b");
        let path = format!("/kubepods/burstable/pod{A}/{ID_A}/kubepods/burstable/pod{B}/{ID_B}");
        let incident = incident_of(&path, logs.path(), node.path());
        let c = incident.process.container.unwrap();
        assert_eq!((c.id.as_str(), c.pod_uid.as_deref()), (ID_A, Some(A)));
        let pod = c.pod.unwrap();
        assert_eq!(
            (pod.namespace.as_str(), pod.name.as_str()),
            ("tenant-a", "job-a")
        );
        assert_eq!(
            c.pod_identity,
            Some(PodIdentity::Kubelet),
            "{:?}",
            c.pod_identity_note
        );
    }

    /// A process outside Kubernetes whose own cgroups imitate pod B's whole layout: the claim stays a claim.
    #[test]
    fn an_imitated_pod_path_is_marked_claimed_by_the_cgroup_name() {
        let node = tempfile::tempdir().unwrap();
        let logs = tempfile::tempdir().unwrap();
        kubelet_pod(node.path(), logs.path(), B, "tenant-b", "victim-b");
        let path = format!(
            "/user.slice/user-1000.slice/user@1000.service/app.slice/kubepods/burstable/pod{B}/{ID_B}"
        );
        let incident = incident_of(&path, logs.path(), node.path());
        let c = incident.process.container.unwrap();
        assert_eq!(c.pod_uid.as_deref(), Some(B));
        assert_eq!(c.pod_identity, Some(PodIdentity::CgroupName));
        assert!(!c.pod_confirmed());
        assert!(
            c.pod_identity_note
                .unwrap()
                .contains("not at the hierarchy's root"),
            "the note says why"
        );
        // Without any node state visible, a well-formed path is a claim too.
        let empty = tempfile::tempdir().unwrap();
        let incident = incident_of(
            &format!("/kubepods/pod{A}/{ID_A}"),
            logs.path(),
            empty.path(),
        );
        let c = incident.process.container.unwrap();
        assert_eq!(c.pod_identity, Some(PodIdentity::CgroupName));
    }

    #[test]
    fn no_pod_no_identity() {
        let node = tempfile::tempdir().unwrap();
        let incident = incident_of(&format!("/docker/{ID_A}"), node.path(), node.path());
        let c = incident.process.container.unwrap();
        assert_eq!((c.pod_uid, c.pod_identity), (None, None));
    }
}
