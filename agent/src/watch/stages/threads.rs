//! Stage `threads`: a snapshot of the process's threads, the evidence of the minimal incident.
//!
//! Bounded for very wide processes (issue 35): the threads judged wedged, at most
//! [`defaults::SNAPSHOT_MAX_IN_D`] threads in D and [`defaults::SNAPSHOT_MAX_OTHERS`] others are read in full;
//! the rest are counted by state and wchan in the snapshot's `summarized`, without reading their stacks,
//! syscalls or fds (`capture::process`).

use capture::{ProcRoot, SnapshotOptions};
use reports::model::{Incident, Sample, Timestamp};

use super::context::{Capture, Deadline};
use crate::defaults;

pub fn run(capture: &mut Capture<'_>, _deadline: &Deadline) -> Result<(), String> {
    push_all_threads_sample(&capture.settings.proc_root, capture.pid, capture.incident);
    Ok(())
}

/// The snapshot options of an incident's samples: every listed thread read in full, the wedged ones always.
pub fn sample_options(wedged_tids: Vec<i32>) -> SnapshotOptions {
    SnapshotOptions {
        all_threads: true,
        wedged_tids,
        max_in_d: defaults::SNAPSHOT_MAX_IN_D,
        max_others: defaults::SNAPSHOT_MAX_OTHERS,
        max_bytes: defaults::SNAPSHOT_MAX_BYTES,
        ..SnapshotOptions::default()
    }
}

/// A snapshot of the process's threads (not only the wedged one: siblings in page faults matter), or a note
/// saying why there is none.
fn push_all_threads_sample(root: &ProcRoot, pid: i32, incident: &mut Incident) {
    let wedged = incident.wedged_threads.iter().map(|w| w.tid).collect();
    match capture::snapshot_process(root, pid, &sample_options(wedged)) {
        Ok(snapshot) => incident.samples.push(Sample {
            taken_at: Timestamp::now(),
            snapshot,
            python_threads: Vec::new(),
        }),
        Err(err) => incident.push_not_captured("thread snapshot", err.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use capture::testing::FakeProc;

    use super::*;

    /// The resample of an open episode (`watch::incident`) takes `SnapshotOptions::default()` with
    /// `all_threads`: its bounds must be the agent's.
    #[test]
    fn capture_default_bounds_are_the_agents() {
        let default = SnapshotOptions::default();
        assert_eq!(default.max_in_d, defaults::SNAPSHOT_MAX_IN_D);
        assert_eq!(default.max_others, defaults::SNAPSHOT_MAX_OTHERS);
        assert_eq!(default.max_bytes, defaults::SNAPSHOT_MAX_BYTES);
    }

    /// A process wider than the bounds: the wedged thread read in full even when it is not in D any more and
    /// lies beyond every bound, the rest counted honestly.
    #[test]
    fn a_wide_process_is_listed_within_bounds_and_the_rest_counted() {
        let fake = FakeProc::new();
        let pid = 5000;
        fake.process(pid).comm("wide");
        let total = defaults::SNAPSHOT_MAX_OTHERS + defaults::SNAPSHOT_MAX_IN_D + 300;
        let wedged = pid + total as i32 - 1;
        for i in 0..total as i32 {
            let tid = pid + i;
            let task = fake.task(pid, tid).comm("w");
            let task = match i {
                _ if tid == wedged => task.state('S'),
                i if i % 50 == 7 => task.state('D'),
                i if i % 100 == 3 => task.state('R'),
                _ => task.state('S'),
            };
            task.wchan(if tid == wedged {
                "pipe_read"
            } else {
                "futex_wait_queue"
            })
            .syscall("202 0x1 0x2 0x3 0x4 0x5 0x6 0x7ffd 0x7f00")
            .stack("[<0>] futex_wait_queue+0x1/0x2\n");
        }
        let mut incident = Incident::new(pid);
        incident.wedged_threads.push(reports::model::WedgedThread {
            tid: wedged,
            ..Default::default()
        });
        push_all_threads_sample(&fake.root(), pid, &mut incident);
        let snap = &incident.samples[0].snapshot;
        assert_eq!(snap.thread_count(), total);
        let in_d = (0..total).filter(|i| i % 50 == 7).count();
        assert!(in_d <= defaults::SNAPSHOT_MAX_IN_D);
        assert_eq!(snap.threads.len(), 1 + in_d + defaults::SNAPSHOT_MAX_OTHERS);
        let w = snap.threads.iter().find(|t| t.tid == wedged).unwrap();
        assert_eq!(w.wchan.as_deref(), Some("pipe_read"));
        assert!(!w.stack.is_empty() && w.syscall.is_some());
        // Running threads are listed first among the others.
        let running = (0..total).filter(|i| i % 100 == 3 && i % 50 != 7).count();
        assert_eq!(
            snap.threads.iter().filter(|t| t.state == "R").count(),
            running
        );
        let summary = snap.summarized.as_ref().unwrap();
        assert_eq!(summary.threads, total - snap.threads.len());
        assert_eq!(summary.by_state.values().sum::<usize>(), summary.threads);
        assert_eq!(
            summary.groups.iter().map(|g| g.threads).sum::<usize>() + summary.other_groups,
            summary.threads
        );
        assert_eq!(
            summary.describe(),
            format!(
                "{} more threads: {} S in futex_wait_queue",
                summary.threads, summary.threads
            )
        );
    }
}
