//! Stage `process`: who the process is (NSpid, comm, cgroup, container), from reads that cannot hang.

use capture::ProcRoot;
use reports::model::Incident;

use super::{not_captured, Capture, Deadline};

pub fn run(capture: &mut Capture<'_>, _deadline: &Deadline) -> Result<(), String> {
    fill_process_info(&capture.settings.proc_root, capture.pid, capture.incident);
    Ok(())
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
            incident.process.container_id = line
                .as_deref()
                .and_then(capture::parse::cgroup::container_id)
                .map(|c| format!("{}:{}", c.runtime, c.id));
            incident.process.cgroup = line;
        }
        Err(err) => not_captured(incident, "cgroup", err.to_string()),
    }
}
