//! On-demand incidents (the daemon's SIGUSR1): the same stages as a wedge capture, outside any episode.

use std::time::Instant;

use reports::model::Incident;

use super::writes::{create, finish_on_demand};
use super::{now_mono_ns, Capturer, JobKind, OnDemand};
use crate::watch::event::CaptureEvent;

impl Capturer {
    /// An on-demand incident for `pid` (the daemon's SIGUSR1), whether or not it is wedged: every thread,
    /// the ring, the kernel log, host context and the risky probes, like a wedge capture, but outside any
    /// episode. The verdict and the timeline say it was asked for (`reason`). The minimal incident is
    /// written now; the rest is a capture job like any other (`Completed` follows from [`Capturer::tick`]).
    pub fn capture_on_demand(&mut self, pid: i32, reason: &str, out: &mut Vec<CaptureEvent>) {
        let detected = Instant::now();
        let on_demand = Some(reason);
        let mut incident = Incident::new(pid);
        incident.trigger = reports::model::Trigger::OnDemand;
        incident.written_by = format!("wedge-capture {}", env!("CARGO_PKG_VERSION"));
        incident.host = self.host_info();
        incident.push_timeline(format!(
            "on-demand capture ({reason}): not a detected wedge"
        ));
        let since_ns = now_mono_ns();
        self.run_minimal(pid, &mut incident, since_ns, false);
        let mut handle = match create(&self.store, &mut incident, on_demand) {
            Ok(handle) => handle,
            Err(err) => {
                out.push(CaptureEvent::Failed {
                    pid,
                    message: format!(
                        "cannot write the incident under {}: {err}",
                        self.store.dir().display()
                    ),
                });
                return;
            }
        };
        let path = handle.path().to_path_buf();
        incident.id = handle.id().to_string();
        out.push(CaptureEvent::Opened {
            pid,
            tid: pid,
            path,
            durable_after: detected.elapsed(),
        });
        let kind = JobKind {
            since_ns,
            wedge: false,
            episode_ended: false,
        };
        let job = self.job(pid, &incident, &handle, kind, Vec::new());
        let id = job.id;
        match self.pool.submit(job) {
            Ok(()) => {
                self.on_demand.insert(
                    id,
                    OnDemand {
                        pid,
                        handle,
                        reason: reason.to_string(),
                    },
                );
            }
            Err(_) => {
                incident.push_not_captured("capture", self.queue_full_reason());
                incident.push_timeline("capture complete");
                incident.complete = true;
                finish_on_demand(pid, &mut handle, &mut incident, reason, out);
            }
        }
    }
}
