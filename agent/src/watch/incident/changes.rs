//! What the watch loop changes in an episode's incident, as data: so that the changes it makes while a
//! capture worker holds its own copy of the incident can be applied again to the copy the worker sends
//! back ([`merged`]). The watch loop applies each change at once to its copy (and writes it: a thread
//! that left D is durable at the next write, not when the capture ends); the worker's copy holds the
//! stages' evidence; the merge is the worker's copy with the loop's changes replayed in order.
//!
//! Every change the loop makes to an incident after its capture was queued goes through [`apply`]; what
//! the stages fill is never touched here.

use std::time::Duration;

use reports::model::{
    EpisodeStatus, Incident, Sample, ThreadFate, TimelineEvent, Timestamp, WedgedThread,
};

/// One change of the watch loop.
#[derive(Debug, Clone)]
pub enum Change {
    Timeline(TimelineEvent),
    /// Another thread of the process judged wedged.
    AddWedged(Box<WedgedThread>),
    /// A new snapshot of the process (the first and the latest `max` kept).
    Sample {
        sample: Box<Sample>,
        max: usize,
    },
    /// A thread's record in the newest sample is its evidence as of detection.
    KeepEvidence(i32),
    /// A thread judged wedged after the maps were read: its user frame is not located.
    LateUserFrame(i32),
    /// What became of a wedged thread.
    Fate {
        tid: i32,
        fate: ThreadFate,
        at: Timestamp,
        in_d: Duration,
    },
    /// Every wedged thread left D.
    Resolved {
        at: Timestamp,
        after: Duration,
    },
    /// wedge-capture stopped watching while threads were still wedged.
    StillWedgedAtExit {
        at: Timestamp,
    },
    NotCaptured {
        what: String,
        why: String,
    },
}

impl Change {
    /// A timeline line stamped now.
    pub fn timeline(event: impl Into<String>) -> Change {
        Change::Timeline(TimelineEvent {
            at: Timestamp::now(),
            event: event.into(),
        })
    }
}

/// Apply one change.
pub fn apply(incident: &mut Incident, change: &Change) {
    match change {
        Change::Timeline(event) => incident.timeline.push(event.clone()),
        Change::AddWedged(thread) => incident.wedged_threads.push((**thread).clone()),
        Change::Sample { sample, max } => {
            let samples = &mut incident.samples;
            samples.push((**sample).clone());
            // Keep the first sample and the latest ones.
            if samples.len() > (*max).max(2) {
                samples.remove(1);
            }
        }
        Change::KeepEvidence(tid) => keep_evidence(incident, *tid),
        Change::LateUserFrame(tid) => late_user_frame(incident, *tid),
        Change::Fate {
            tid,
            fate,
            at,
            in_d,
        } => {
            if let Some(w) = incident
                .wedged_threads
                .iter_mut()
                .rev()
                .find(|w| w.tid == *tid)
            {
                w.fate = *fate;
                w.fate_at = Some(at.clone());
                w.in_d_s = Some(in_d.as_secs_f64());
            }
        }
        Change::Resolved { at, after } => {
            incident.episode.status = EpisodeStatus::Resolved;
            incident.episode.resolved_at = Some(at.clone());
            incident.episode.resolved_after_s = Some(after.as_secs_f64());
        }
        Change::StillWedgedAtExit { at } => {
            incident.episode.status = EpisodeStatus::StillWedgedAtExit;
            incident.episode.watcher_exited_at = Some(at.clone());
        }
        Change::NotCaptured { what, why } => incident.push_not_captured(what.clone(), why.clone()),
    }
}

/// The worker's copy with the loop's changes made since the copy was taken; the timeline in time order.
pub fn merged(mut from_worker: Incident, changes: &[Change]) -> Incident {
    for change in changes {
        apply(&mut from_worker, change);
    }
    // Stable: lines of one clock reading keep their order.
    from_worker
        .timeline
        .sort_by_key(|event| event.at.monotonic_ns.unwrap_or(0));
    from_worker
}

/// Keep thread `tid`'s evidence as of detection: its record in the newest sample (taken at detection).
pub fn keep_evidence(incident: &mut Incident, tid: i32) {
    let Some(thread) = incident
        .latest_sample()
        .and_then(|s| s.snapshot.threads.iter().find(|t| t.tid == tid))
        .cloned()
    else {
        incident.push_not_captured(
            "evidence as of detection",
            format!("thread {tid} was not in the snapshot taken at detection"),
        );
        return;
    };
    if let Some(w) = incident
        .wedged_threads
        .iter_mut()
        .rev()
        .find(|w| w.tid == tid)
    {
        w.at_detection = Some(thread);
    }
}

/// A thread judged wedged after the probes ran: its user frame is not located (the maps are read once per
/// episode, in a sacrificial child); when that read timed out, the same holds for this thread.
fn late_user_frame(incident: &mut Incident, tid: i32) {
    let timed_out = incident
        .wedged_threads
        .iter()
        .filter_map(|w| w.user_frame_not_captured.as_deref())
        .find(|why| why.contains("timed out"))
        .map(str::to_string);
    if let Some(w) = incident
        .wedged_threads
        .iter_mut()
        .rev()
        .find(|w| w.tid == tid)
    {
        w.user_frame_not_captured = Some(timed_out.unwrap_or_else(|| {
            "judged wedged after the capture of the episode began (the maps are read once per episode, \
             in a sacrificial child)"
                .to_string()
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loops_changes_survive_the_workers_copy() {
        let mut at_queue = Incident::new(7);
        at_queue.wedged_threads.push(WedgedThread {
            tid: 8,
            ..WedgedThread::default()
        });
        at_queue.samples.push(Sample::default());
        // The worker fills the stages' evidence on its copy.
        let mut worker = at_queue.clone();
        worker.process.cmdline = Some(vec!["from the worker".into()]);
        worker.timeline.push(TimelineEvent {
            at: Timestamp::monotonic(20),
            event: "worker".into(),
        });
        // Meanwhile the loop: another thread wedged, then the first left D, then all resolved.
        let changes = vec![
            Change::Timeline(TimelineEvent {
                at: Timestamp::monotonic(10),
                event: "loop".into(),
            }),
            Change::AddWedged(Box::new(WedgedThread {
                tid: 9,
                ..WedgedThread::default()
            })),
            Change::LateUserFrame(9),
            Change::Fate {
                tid: 8,
                fate: ThreadFate::Resolved,
                at: Timestamp::monotonic(30),
                in_d: Duration::from_secs(3),
            },
            Change::Resolved {
                at: Timestamp::monotonic(40),
                after: Duration::from_secs(4),
            },
        ];
        let mut loop_copy = at_queue.clone();
        for change in &changes {
            apply(&mut loop_copy, change);
        }
        let merged = merged(worker, &changes);
        assert_eq!(
            merged.process.cmdline,
            Some(vec!["from the worker".to_string()])
        );
        assert_eq!(merged.wedged_threads.len(), 2);
        assert_eq!(merged.wedged_threads[0].fate, ThreadFate::Resolved);
        assert!(merged.wedged_threads[1].user_frame_not_captured.is_some());
        assert_eq!(merged.episode.status, EpisodeStatus::Resolved);
        let lines: Vec<&str> = merged.timeline.iter().map(|t| t.event.as_str()).collect();
        assert_eq!(lines, ["loop", "worker"]);
        // What the loop's own copy says about the episode is what the merge says.
        assert_eq!(loop_copy.episode, merged.episode);
        assert_eq!(loop_copy.wedged_threads, merged.wedged_threads);
    }

    #[test]
    fn samples_keep_the_first_and_the_latest() {
        let mut incident = Incident::new(1);
        for n in 0..5u64 {
            let sample = Sample {
                taken_at: Timestamp::monotonic(n),
                ..Sample::default()
            };
            apply(
                &mut incident,
                &Change::Sample {
                    sample: Box::new(sample),
                    max: 3,
                },
            );
        }
        let taken: Vec<u64> = incident
            .samples
            .iter()
            .map(|s| s.taken_at.monotonic_ns.unwrap())
            .collect();
        assert_eq!(taken, [0, 3, 4]);
    }
}
