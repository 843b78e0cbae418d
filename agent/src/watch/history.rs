//! Pre-wedge history: per watched process, a bounded ring of the watcher's own cheap samples (what every scan
//! reads anyway: each thread's state; for threads in D, wchan and context switches), so that an incident can
//! say what the threads did before the threshold passed. Nothing is read for it.
//!
//! Memory: per sample and thread, a tid and a state byte (5 bytes), plus wchan and switches for threads in D
//! only; samples per process cover `threshold + HISTORY_BEYOND_THRESHOLD` at the scan interval, at most
//! `HISTORY_MAX_SAMPLES`, with at most `HISTORY_MAX_THREADS` threads each: ≤ 1.2 MiB per 1,000 threads (plus the
//! D threads' wchans). A process that is no longer a target is forgotten at the next scan.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use reports::model::{HistorySample, HistoryThread, Timestamp};

use super::tracker::Observation;
use crate::defaults;

/// One scan of one process, compact.
struct Scan {
    at_ns: u64,
    /// (tid, state letter) of every thread (at most `HISTORY_MAX_THREADS`).
    threads: Vec<(i32, u8)>,
    thread_count: u32,
    /// Threads in D: (tid, wchan, context switches).
    in_d: Vec<(i32, Option<Box<str>>, Option<u64>)>,
}

/// The rings of every watched process.
#[derive(Default)]
pub struct History {
    per_pid: HashMap<i32, VecDeque<Scan>>,
    /// Samples kept per process.
    keep: usize,
}

impl History {
    /// Rings long enough for `threshold` plus [`defaults::HISTORY_BEYOND_THRESHOLD`] at `interval`.
    pub fn new(interval: Duration, threshold: Duration) -> History {
        let mut history = History::default();
        history.configure(interval, threshold);
        history
    }

    /// A new interval or threshold (the daemon's reload): rings keep what they hold, trimmed to the new length.
    pub fn configure(&mut self, interval: Duration, threshold: Duration) {
        let span = threshold + defaults::HISTORY_BEYOND_THRESHOLD;
        let per_interval = interval.max(Duration::from_millis(1));
        let needed = span.as_nanos().div_ceil(per_interval.as_nanos()) as usize + 1;
        self.keep = needed.clamp(2, defaults::HISTORY_MAX_SAMPLES);
    }

    /// Record one scan (observations of every target, grouped by pid as the scanner emits them).
    pub fn record(&mut self, at_ns: u64, observations: &[Observation]) {
        let mut seen: HashSet<i32> = HashSet::new();
        let mut i = 0;
        while i < observations.len() {
            let pid = observations[i].pid;
            let end = observations[i..]
                .iter()
                .position(|o| o.pid != pid)
                .map_or(observations.len(), |n| i + n);
            let group = &observations[i..end];
            i = end;
            seen.insert(pid);
            let scan = Scan {
                at_ns,
                threads: group
                    .iter()
                    .take(defaults::HISTORY_MAX_THREADS)
                    .map(|o| (o.tid, o.state))
                    .collect(),
                thread_count: group.len() as u32,
                in_d: group
                    .iter()
                    .filter(|o| o.state == b'D')
                    .take(defaults::HISTORY_THREADS_WRITTEN)
                    .map(|o| {
                        let progress = o.progress.as_ref();
                        (
                            o.tid,
                            progress.and_then(|p| p.wchan.as_deref()).map(Box::from),
                            progress.and_then(|p| p.ctxt_switches),
                        )
                    })
                    .collect(),
            };
            let ring = self.per_pid.entry(pid).or_default();
            ring.push_back(scan);
            while ring.len() > self.keep {
                ring.pop_front();
            }
        }
        self.per_pid.retain(|pid, _| seen.contains(pid));
    }

    /// The history of `pid` up to `until_ns` (the detection), for an incident: every sample's counts, and for the
    /// threads that matter (`tids`, and every thread ever in D in the ring, at most
    /// [`defaults::HISTORY_THREADS_WRITTEN`]) their state, wchan and switch deltas.
    pub fn for_incident(&self, pid: i32, until_ns: u64, tids: &[i32]) -> Vec<HistorySample> {
        let Some(ring) = self.per_pid.get(&pid) else {
            return Vec::new();
        };
        let mut wanted: Vec<i32> = tids.to_vec();
        for scan in ring {
            for (tid, _, _) in &scan.in_d {
                if !wanted.contains(tid) {
                    wanted.push(*tid);
                }
            }
        }
        wanted.truncate(defaults::HISTORY_THREADS_WRITTEN);
        let mut last_switches: HashMap<i32, u64> = HashMap::new();
        ring.iter()
            .filter(|scan| scan.at_ns <= until_ns)
            .map(|scan| {
                let threads = wanted
                    .iter()
                    .filter_map(|&tid| {
                        let state = scan.threads.iter().find(|(t, _)| *t == tid)?.1;
                        let d = scan.in_d.iter().find(|(t, _, _)| *t == tid);
                        let switches = d.and_then(|(_, _, c)| *c);
                        let delta = switches.and_then(|now| {
                            let before = last_switches.insert(tid, now)?;
                            now.checked_sub(before)
                        });
                        Some(HistoryThread {
                            tid,
                            state: char::from(state).to_string(),
                            wchan: d.and_then(|(_, w, _)| w.as_deref().map(str::to_string)),
                            ctxt_switches: switches,
                            ctxt_delta: delta,
                        })
                    })
                    .collect();
                HistorySample {
                    taken_at: Timestamp::monotonic(scan.at_ns),
                    thread_count: scan.thread_count,
                    in_d: scan.threads.iter().filter(|(_, s)| *s == b'D').count() as u32,
                    running: scan.threads.iter().filter(|(_, s)| *s == b'R').count() as u32,
                    threads,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::tracker::Progress;

    fn obs(pid: i32, tid: i32, state: u8, switches: u64) -> Observation {
        Observation {
            pid,
            tid,
            comm: "t".into(),
            start_time: None,
            state,
            progress: (state == b'D').then(|| Progress {
                wchan: Some("percpu_rwsem_wait".into()),
                stack_hash: None,
                ctxt_switches: Some(switches),
            }),
        }
    }

    #[test]
    fn keeps_threshold_plus_30_s_and_reports_states_deltas_and_counts() {
        // 250 ms over 3 s + 30 s: 133 samples.
        let mut history = History::new(Duration::from_millis(250), Duration::from_secs(3));
        assert_eq!(history.keep, 133);
        let states = [b'S', b'S', b'R', b'D', b'D', b'D'];
        for (i, &state) in states.iter().enumerate() {
            let at = i as u64 * 250_000_000;
            history.record(
                at,
                &[
                    obs(7, 7, b'S', 0),
                    obs(7, 8, state, 10 + i as u64 / 4),
                    obs(9, 9, b'R', 0),
                ],
            );
        }
        let samples = history.for_incident(7, 4 * 250_000_000, &[8]);
        assert_eq!(
            samples.len(),
            5,
            "the sample after the detection is left out"
        );
        let strip: String = samples.iter().map(|s| s.threads[0].state.clone()).collect();
        assert_eq!(strip, "SSRDD");
        assert_eq!(
            samples[3].threads[0].wchan.as_deref(),
            Some("percpu_rwsem_wait")
        );
        assert_eq!(samples[3].threads[0].ctxt_delta, None);
        assert_eq!(samples[4].threads[0].ctxt_delta, Some(1));
        assert_eq!(
            (samples[4].thread_count, samples[4].in_d, samples[2].running),
            (2, 1, 1)
        );
        // A process that is no longer scanned is forgotten; the ring never outgrows its bound.
        history.record(10, &[obs(9, 9, b'R', 0)]);
        assert!(history.for_incident(7, u64::MAX, &[8]).is_empty());
        for i in 0..1000u64 {
            history.record(i, &[obs(9, 9, b'R', 0)]);
        }
        assert_eq!(history.per_pid[&9].len(), 133);
    }
}
