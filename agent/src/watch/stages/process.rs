//! Stage `process`: who the process is (NSpid, comm, cgroup, container), from reads that cannot hang.

use capture::ProcRoot;
use reports::model::Incident;

use super::{not_captured, Capture, Deadline};

pub fn run(capture: &mut Capture<'_>, _deadline: &Deadline) -> Result<(), String> {
    fill_process_info(&capture.settings.proc_root, capture.pid, capture.incident);
    fill_pod(&capture.settings.pods_log_dir, capture.incident);
    Ok(())
}

/// The pod's namespace and name, from the kubelet's pod log directories (entry names only).
fn fill_pod(pods_log_dir: &std::path::Path, incident: &mut Incident) {
    let Some(container) = incident.process.container.as_mut() else {
        return;
    };
    let Some(uid) = container.pod_uid.as_deref() else {
        return;
    };
    container.pod =
        capture::parse::cgroup::find_pod(pods_log_dir, uid).map(|pod| reports::model::PodInfo {
            namespace: pod.namespace,
            name: pod.name,
        });
}

/// NSpid, comm, cgroup and container of the process (reads that cannot hang).
fn fill_process_info(root: &ProcRoot, pid: i32, incident: &mut Incident) {
    match root.read_task_status(pid, pid) {
        Ok(status) => {
            incident.process.nspid = status.nspid.clone();
            incident.process.comm = status.name.clone().unwrap_or_default();
        }
        Err(err) => not_captured(incident, "process status (NSpid)", err.to_string()),
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
                .and_then(capture::parse::cgroup::container_id)
                .or_else(|| {
                    lines
                        .iter()
                        .find_map(|l| capture::parse::cgroup::container_id(&l.path))
                });
            incident.process.container_id = container
                .as_ref()
                .map(|c| format!("{}:{}", c.runtime, c.id));
            incident.process.container = container.map(|c| reports::model::ContainerInfo {
                runtime: c.runtime.to_string(),
                id: c.id,
                pod_uid: c.pod_uid,
                pod: None,
            });
            incident.process.cgroup = line;
        }
        Err(err) => not_captured(incident, "cgroup", err.to_string()),
    }
}
