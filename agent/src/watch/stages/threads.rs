//! Stage `threads`: a snapshot of every thread of the process, the evidence of the minimal incident.

use capture::{ProcRoot, SnapshotOptions};
use reports::model::{Incident, Sample, Timestamp};

use super::{not_captured, Capture, Deadline};

pub fn run(capture: &mut Capture<'_>, _deadline: &Deadline) -> Result<(), String> {
    push_all_threads_sample(&capture.settings.proc_root, capture.pid, capture.incident);
    Ok(())
}

/// A snapshot of every thread of `pid` (not only the wedged one: siblings in page faults matter), or a
/// note saying why there is none.
fn push_all_threads_sample(root: &ProcRoot, pid: i32, incident: &mut Incident) {
    let options = SnapshotOptions {
        all_threads: true,
        ..SnapshotOptions::default()
    };
    match capture::snapshot_process(root, pid, &options) {
        Ok(snapshot) => incident.samples.push(Sample {
            taken_at: Timestamp::now(),
            snapshot,
            python_threads: Vec::new(),
        }),
        Err(err) => not_captured(incident, "thread snapshot", err.to_string()),
    }
}
