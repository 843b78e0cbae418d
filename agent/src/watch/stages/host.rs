//! Stage `host`: what the rest of the host was doing (PSI, meminfo, loadavg, every task in D).

use capture::ProcRoot;
use reports::model::{DStateTask, HostContext, Incident, PsiLine as ReportPsiLine, Timestamp};

use super::context::{Capture, Deadline};
use crate::watch::capture_settings::CaptureSettings;

pub fn run(capture: &mut Capture<'_>, _deadline: &Deadline) -> Result<(), String> {
    capture.incident.host_context = host_context(capture.settings, capture.incident);
    Ok(())
}

/// PSI, meminfo, loadavg and the census of D-state tasks.
pub fn host_context(settings: &CaptureSettings, incident: &mut Incident) -> HostContext {
    let root = &settings.proc_root;
    let mut context = HostContext {
        captured_at: Timestamp::now(),
        ..HostContext::default()
    };
    for resource in capture::parse::pressure::RESOURCES {
        let Ok(pressure) = root.pressure(resource) else {
            continue;
        };
        for line in pressure.text.lines() {
            context.psi.push(ReportPsiLine {
                resource: resource.to_string(),
                line: line.to_string(),
            });
        }
    }
    match root.meminfo() {
        Ok(all) => {
            context.meminfo_kb = capture::parse::meminfo::HIGHLIGHTS
                .iter()
                .filter_map(|&k| all.get(k).map(|&v| (k.to_string(), v)))
                .collect();
        }
        Err(err) => incident.push_not_captured("meminfo", err.to_string()),
    }
    context.loadavg = root.loadavg().ok();
    let (tasks, total) = d_state_census(&settings.proc_root, settings.max_census);
    if total as usize > tasks.len() {
        context.d_state_total = Some(total);
    }
    context.d_state_tasks = tasks;
    context
}

/// Every task of the host in D (pid, tid, comm, wchan, cgroup), at most `max` listed; and the total.
pub fn d_state_census(root: &ProcRoot, max: usize) -> (Vec<DStateTask>, u64) {
    let mut out = Vec::new();
    let mut total = 0u64;
    let Ok(pids) = root.pids() else {
        return (out, 0);
    };
    for pid in pids {
        let Ok(tids) = root.tasks(pid) else {
            continue;
        };
        let mut cgroup: Option<Option<String>> = None;
        for tid in tids {
            let Ok(stat) = root.read_task_stat(pid, tid) else {
                continue;
            };
            if stat.state != 'D' {
                continue;
            }
            total += 1;
            if out.len() >= max {
                continue;
            }
            let cgroup = cgroup
                .get_or_insert_with(|| {
                    root.cgroup(pid)
                        .ok()
                        .and_then(|lines| lines.into_iter().find(|l| l.is_v2()).map(|l| l.path))
                })
                .clone();
            out.push(DStateTask {
                pid,
                tid,
                comm: stat.comm.clone(),
                wchan: root.read_wchan(pid, tid).ok().flatten(),
                cgroup,
            });
        }
    }
    (out, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn census_sees_no_impossible_tasks() {
        let (tasks, total) = d_state_census(&ProcRoot::default(), 3);
        assert!(tasks.len() <= 3);
        assert!(total >= tasks.len() as u64);
    }
}
