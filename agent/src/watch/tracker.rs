//! Per-thread D-state episodes and the no-progress test (pure: samples in, events out).
//!
//! A thread is **wedged** when it has been seen in D at every sample for at least `threshold` and its progress
//! signature — wchan, a hash of its kernel stack, and voluntary+involuntary context switches — did not change
//! across the last `samples` samples spanning at least `threshold`. That is the kernel's hung-task test (a task
//! in D whose switch count did not move for `hung_task_timeout_secs`), done from outside. A thread that keeps
//! entering and leaving D (disk I/O, page faults) moves its switch counters or leaves D between samples, so it
//! never qualifies, however busy the disk is.
//!
//! Threads are keyed by (tid, start time): tids are reused (`pid_max` is often 32768), and a new thread
//! that got an old tid is a new track, never the continuation of the old one's episode.

use std::collections::HashMap;
use std::time::Duration;

/// What changes when a thread makes progress. Read only for threads in D.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Progress {
    pub wchan: Option<String>,
    /// Hash of the kernel stack's function names (None when the stack is unreadable).
    pub stack_hash: Option<u64>,
    /// voluntary + nonvoluntary context switches.
    pub ctxt_switches: Option<u64>,
}

/// One thread as seen by one scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    /// Start time of the thread (field 22 of its stat, clock ticks since boot): with the tid, the thread's
    /// identity. Read for threads in D (and those in D at the previous scan); None otherwise.
    pub start_time: Option<u64>,
    /// State letter from stat (`R`, `S`, `D`, …).
    pub state: u8,
    /// Present for threads in D.
    pub progress: Option<Progress>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrackerConfig {
    pub threshold: Duration,
    /// K: unchanged samples needed, on top of the threshold.
    pub samples: u32,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        TrackerConfig {
            threshold: crate::defaults::THRESHOLD,
            samples: crate::defaults::SAMPLES,
        }
    }
}

/// What the tracker concluded from a scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrackerEvent {
    /// The thread just passed the wedge test.
    Wedged {
        pid: i32,
        tid: i32,
        /// The thread's start time (ticks since boot): a capture checks it is still the same thread.
        start_time: u64,
        comm: String,
        /// First scan that saw it in D (monotonic ns).
        d_since_ns: u64,
        /// First scan of the unchanged signature (monotonic ns).
        stable_since_ns: u64,
    },
    /// A wedged thread left D (it made progress after all).
    Resolved {
        pid: i32,
        tid: i32,
        /// From `d_since_ns` to the scan that saw it out of D.
        after: Duration,
    },
    /// A wedged thread is no longer there (it exited or its process was reaped).
    Vanished { pid: i32, tid: i32, after: Duration },
}

/// A thread's identity: a tid alone is reused by later threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadKey {
    pub tid: i32,
    pub start_time: u64,
}

#[derive(Debug, Clone)]
struct Track {
    pid: i32,
    comm: String,
    d_since_ns: u64,
    signature: Progress,
    stable_since_ns: u64,
    stable_samples: u32,
    wedged: bool,
    seen_in_scan: u64,
}

/// Per-thread episode state across scans.
#[derive(Debug, Default)]
pub struct Tracker {
    config: TrackerConfig,
    threads: HashMap<ThreadKey, Track>,
    scan: u64,
}

impl Tracker {
    pub fn new(config: TrackerConfig) -> Tracker {
        Tracker {
            config,
            threads: HashMap::new(),
            scan: 0,
        }
    }

    /// Change the threshold and K for the next scans (tracked threads keep their history).
    pub fn set_config(&mut self, config: TrackerConfig) {
        self.config = config;
    }

    /// Threads currently tracked in D.
    pub fn in_d(&self) -> usize {
        self.threads.len()
    }

    /// Threads judged wedged now, and how long the oldest of them has been in D (the metrics).
    pub fn wedged_now(&self, now_ns: u64) -> (usize, Option<Duration>) {
        let wedged = self.threads.values().filter(|t| t.wedged);
        let oldest = wedged.clone().map(|t| t.d_since_ns).min();
        (
            wedged.count(),
            oldest.map(|since| Duration::from_nanos(now_ns.saturating_sub(since))),
        )
    }

    /// Whether a thread with this tid is currently judged wedged.
    #[cfg(test)]
    pub fn is_wedged(&self, tid: i32) -> bool {
        self.threads
            .iter()
            .any(|(key, track)| key.tid == tid && track.wedged)
    }

    /// Tids currently tracked in D for `pid`, with how long each has been in D.
    #[cfg(test)]
    pub fn d_threads_of(&self, pid: i32, now_ns: u64) -> Vec<(i32, Duration)> {
        let mut out: Vec<(i32, Duration)> = self
            .threads
            .iter()
            .filter(|(_, t)| t.pid == pid)
            .map(|(key, t)| {
                (
                    key.tid,
                    Duration::from_nanos(now_ns.saturating_sub(t.d_since_ns)),
                )
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// Take up a thread an earlier watcher judged wedged (episode continuity): tracked as wedged since
    /// `d_since_ns`, so it is not judged (and reported) again, and leaving D or vanishing reports it with
    /// its whole time in D. Its progress signature starts with the next scan.
    pub fn adopt(&mut self, pid: i32, key: ThreadKey, comm: &str, d_since_ns: u64) {
        self.threads.insert(
            key,
            Track {
                pid,
                comm: comm.to_string(),
                d_since_ns,
                signature: Progress::default(),
                stable_since_ns: d_since_ns,
                stable_samples: 0,
                wedged: true,
                seen_in_scan: self.scan,
            },
        );
    }

    /// Feed one complete scan taken at `now_ns` (CLOCK_MONOTONIC). Threads absent from the scan are gone.
    pub fn observe<'a>(
        &mut self,
        now_ns: u64,
        observations: impl IntoIterator<Item = &'a Observation>,
    ) -> Vec<TrackerEvent> {
        self.scan += 1;
        let scan = self.scan;
        let mut events = Vec::new();
        let threshold_ns = self.config.threshold.as_nanos().min(u64::MAX as u128) as u64;
        for obs in observations {
            if obs.state != b'D' {
                // Out of D. Without a start time this cannot be a tracked thread (the scan reads it for
                // every thread that was in D); a track of the same tid with another start time belonged
                // to a thread that is gone, which the sweep below reports as vanished.
                let Some(start_time) = obs.start_time else {
                    continue;
                };
                let key = ThreadKey {
                    tid: obs.tid,
                    start_time,
                };
                if let Some(track) = self.threads.remove(&key) {
                    if track.wedged {
                        events.push(TrackerEvent::Resolved {
                            pid: track.pid,
                            tid: obs.tid,
                            after: Duration::from_nanos(now_ns.saturating_sub(track.d_since_ns)),
                        });
                    }
                }
                continue;
            }
            // A thread in D whose start time could not be read exited between two reads: it is gone.
            let Some(start_time) = obs.start_time else {
                continue;
            };
            let key = ThreadKey {
                tid: obs.tid,
                start_time,
            };
            let signature = obs.progress.clone().unwrap_or_default();
            let track = self.threads.entry(key).or_insert_with(|| Track {
                pid: obs.pid,
                comm: obs.comm.clone(),
                d_since_ns: now_ns,
                signature: signature.clone(),
                stable_since_ns: now_ns,
                stable_samples: 0,
                wedged: false,
                seen_in_scan: scan,
            });
            track.seen_in_scan = scan;
            track.comm.clone_from(&obs.comm);
            if track.signature == signature {
                track.stable_samples = track.stable_samples.saturating_add(1);
            } else {
                // Progress: the wait is a new one. A wedge already reported stays reported until it leaves D.
                track.signature = signature;
                track.stable_since_ns = now_ns;
                track.stable_samples = 1;
            }
            let stable_for = now_ns.saturating_sub(track.stable_since_ns);
            if !track.wedged
                && track.stable_samples >= self.config.samples
                && stable_for >= threshold_ns
            {
                track.wedged = true;
                events.push(TrackerEvent::Wedged {
                    pid: track.pid,
                    tid: obs.tid,
                    start_time,
                    comm: track.comm.clone(),
                    d_since_ns: track.d_since_ns,
                    stable_since_ns: track.stable_since_ns,
                });
            }
        }
        self.threads.retain(|key, track| {
            if track.seen_in_scan == scan {
                return true;
            }
            if track.wedged {
                events.push(TrackerEvent::Vanished {
                    pid: track.pid,
                    tid: key.tid,
                    after: Duration::from_nanos(now_ns.saturating_sub(track.d_since_ns)),
                });
            }
            false
        });
        events
    }
}

/// A stable 64-bit hash of kernel stack function names (FNV-1a: the same across runs and builds).
pub fn stack_hash<'a>(functions: impl IntoIterator<Item = &'a str>) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for function in functions {
        for &byte in function.as_bytes().iter().chain(b"\n") {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const START: u64 = 4242;

    fn d(tid: i32, wchan: &str, switches: u64) -> Observation {
        Observation {
            pid: 100,
            tid,
            comm: "worker".into(),
            start_time: Some(START),
            state: b'D',
            progress: Some(Progress {
                wchan: Some(wchan.into()),
                stack_hash: Some(stack_hash([wchan, "do_vfs_ioctl"])),
                ctxt_switches: Some(switches),
            }),
        }
    }

    fn s(tid: i32) -> Observation {
        Observation {
            pid: 100,
            tid,
            comm: "worker".into(),
            start_time: Some(START),
            state: b'S',
            progress: None,
        }
    }

    fn tracker(threshold_s: u64, k: u32) -> Tracker {
        Tracker::new(TrackerConfig {
            threshold: Duration::from_secs(threshold_s),
            samples: k,
        })
    }

    #[test]
    fn an_adopted_thread_is_not_judged_again_and_resolves_with_its_whole_time_in_d() {
        let mut t = tracker(3, 3);
        let key = ThreadKey {
            tid: 101,
            start_time: START,
        };
        // Judged wedged by an earlier watcher, in D since 2 s.
        t.adopt(100, key, "worker", 2 * S);
        assert_eq!(t.wedged_now(10 * S), (1, Some(Duration::from_secs(8))));
        for second in 10..20 {
            let events = t.observe(second * S, &[d(101, "percpu_rwsem_wait", 7)]);
            assert!(events.is_empty(), "{events:?}");
        }
        let events = t.observe(20 * S, &[s(101)]);
        assert_eq!(
            events,
            vec![TrackerEvent::Resolved {
                pid: 100,
                tid: 101,
                after: Duration::from_secs(18)
            }]
        );
        // Gone before the first scan after the adoption: vanished, with its time in D.
        t.adopt(100, key, "worker", 2 * S);
        let events = t.observe(21 * S, &[]);
        assert_eq!(
            events,
            vec![TrackerEvent::Vanished {
                pid: 100,
                tid: 101,
                after: Duration::from_secs(19)
            }]
        );
    }

    #[test]
    fn a_thread_stuck_without_progress_is_wedged_once() {
        let mut t = tracker(3, 3);
        let mut wedged_at = None;
        for second in 0..10 {
            let events = t.observe(second * S, &[d(101, "percpu_rwsem_wait", 7), s(102)]);
            for event in events {
                match event {
                    TrackerEvent::Wedged {
                        tid, d_since_ns, ..
                    } => {
                        assert_eq!(tid, 101);
                        assert_eq!(d_since_ns, 0);
                        assert!(wedged_at.is_none(), "reported twice");
                        wedged_at = Some(second);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        // In D at 0 s; the signature has been stable for 3 s at the 4th sample.
        assert_eq!(wedged_at, Some(3));
        assert!(t.is_wedged(101));
    }

    #[test]
    fn needs_k_samples_as_well_as_the_threshold() {
        // Threshold 1 s but K = 5 at 1 Hz: only the 5th sample qualifies.
        let mut t = tracker(1, 5);
        let first = (0..10)
            .find(|&sec| !t.observe(sec * S, &[d(1, "w", 1)]).is_empty())
            .unwrap();
        assert_eq!(first, 4);
    }

    #[test]
    fn short_d_states_never_raise() {
        // Heavy I/O: in D at many samples, but out of D in between or with moving switch counters.
        let mut t = tracker(2, 3);
        let mut switches = 0;
        for tick in 0..200u64 {
            let now = tick * S / 4;
            let obs = if tick % 7 == 3 {
                s(5)
            } else {
                switches += 3;
                d(
                    5,
                    if tick % 2 == 0 {
                        "io_schedule"
                    } else {
                        "folio_wait_bit"
                    },
                    switches,
                )
            };
            assert!(t.observe(now, &[obs]).is_empty(), "tick {tick}");
        }
        // Same wchan and stack but the switch count moves: progress.
        let mut t = tracker(2, 3);
        for tick in 0..100u64 {
            assert!(t.observe(tick * S, &[d(6, "io_schedule", tick)]).is_empty());
        }
    }

    #[test]
    fn resolution_and_vanishing_are_reported_for_wedged_threads_only() {
        let mut t = tracker(2, 2);
        for sec in 0..3 {
            t.observe(sec * S, &[d(1, "w", 1), d(2, "w", 1)]);
        }
        assert!(t.is_wedged(1) && t.is_wedged(2));
        let events = t.observe(10 * S, &[s(1)]);
        assert_eq!(
            events,
            vec![
                TrackerEvent::Resolved {
                    pid: 100,
                    tid: 1,
                    after: Duration::from_secs(10)
                },
                TrackerEvent::Vanished {
                    pid: 100,
                    tid: 2,
                    after: Duration::from_secs(10)
                },
            ]
        );
        assert_eq!(t.in_d(), 0);
        // A short D thread that leaves says nothing.
        t.observe(11 * S, &[d(3, "w", 1)]);
        assert!(t.observe(12 * S, &[s(3)]).is_empty());
    }

    #[test]
    fn a_thread_that_changes_wait_restarts_the_clock() {
        let mut t = tracker(3, 2);
        t.observe(0, &[d(1, "a", 1)]);
        t.observe(2 * S, &[d(1, "a", 1)]);
        t.observe(3 * S, &[d(1, "b", 1)]); // new wait: stable since 3 s
        assert!(t.observe(5 * S, &[d(1, "b", 1)]).is_empty());
        let events = t.observe(6 * S, &[d(1, "b", 1)]);
        assert!(matches!(
            events[..],
            [TrackerEvent::Wedged {
                d_since_ns: 0,
                stable_since_ns,
                ..
            }] if stable_since_ns == 3 * S
        ));
    }

    #[test]
    fn unreadable_progress_degrades_to_continuous_d() {
        let mut t = tracker(1, 2);
        let blind = Observation {
            progress: None,
            ..d(9, "x", 0)
        };
        t.observe(0, std::slice::from_ref(&blind));
        assert_eq!(t.observe(S, std::slice::from_ref(&blind)).len(), 1);
    }

    fn started(obs: Observation, start_time: u64) -> Observation {
        Observation {
            start_time: Some(start_time),
            ..obs
        }
    }

    #[test]
    fn a_reused_tid_is_a_new_track_not_a_continuation() {
        // Threshold 2 s, K = 2. Thread 7 (start 100) is in D at 0 s and 1 s, then exits; by 2 s a new
        // thread got tid 7 (start 200), also in D with the same signature. Keyed by tid alone, the new
        // thread would be judged wedged at 2 s, having been in D "since 0 s".
        let mut t = tracker(2, 2);
        assert!(t.observe(0, &[started(d(7, "w", 1), 100)]).is_empty());
        assert!(t.observe(S, &[started(d(7, "w", 1), 100)]).is_empty());
        assert!(t.observe(2 * S, &[started(d(7, "w", 1), 200)]).is_empty());
        assert!(!t.is_wedged(7));
        assert_eq!(t.d_threads_of(100, 2 * S), vec![(7, Duration::ZERO)]);
        assert!(t.observe(3 * S, &[started(d(7, "w", 1), 200)]).is_empty());
        // Its own clock: in D since 2 s, wedged at 4 s.
        let events = t.observe(4 * S, &[started(d(7, "w", 1), 200)]);
        assert!(
            matches!(
                events[..],
                [TrackerEvent::Wedged {
                    tid: 7,
                    start_time: 200,
                    d_since_ns,
                    ..
                }] if d_since_ns == 2 * S
            ),
            "{events:?}"
        );
    }

    #[test]
    fn a_wedged_thread_whose_tid_is_reused_vanished() {
        let mut t = tracker(1, 2);
        t.observe(0, &[started(d(7, "w", 1), 100)]);
        assert_eq!(t.observe(S, &[started(d(7, "w", 1), 100)]).len(), 1);
        // tid 7 now belongs to a sleeping thread that started later: the wedged one is gone, not resolved.
        let events = t.observe(2 * S, &[started(s(7), 300)]);
        assert_eq!(
            events,
            vec![TrackerEvent::Vanished {
                pid: 100,
                tid: 7,
                after: Duration::from_secs(2)
            }]
        );
        assert_eq!(t.in_d(), 0);
        // A thread in D whose start time could not be read (it exited between reads) is not tracked.
        let ghost = Observation {
            start_time: None,
            ..d(8, "w", 1)
        };
        t.observe(3 * S, std::slice::from_ref(&ghost));
        assert_eq!(t.in_d(), 0);
    }

    #[test]
    fn stack_hash_is_stable_and_order_sensitive() {
        assert_eq!(stack_hash(["a", "b"]), stack_hash(["a", "b"]));
        assert_ne!(stack_hash(["a", "b"]), stack_hash(["b", "a"]));
        assert_ne!(stack_hash(["ab"]), stack_hash(["a", "b"]));
    }
}
