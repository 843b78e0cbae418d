//! The watch loop and capture path, independent of how targets are found.
//!
//! Map:
//! - [`targets`]: the [`targets::TargetSource`] trait; [`targets::ChildTree`] for `run`.
//! - [`scan`]: one scan of the targets' threads (stat for all, progress signature for threads in D).
//! - [`tracker`]: pure per-thread D-state episodes (keyed by tid + start time) and the no-progress test.
//! - [`history`]: per target, a bounded ring of the scans' cheap samples: the incident's pre-wedge `history`.
//! - [`incident`]: the episode lifecycle: one incident per episode (open, update, retry until durable,
//!   resolve, gone before its capture); every durable write and the verdict it carries.
//! - [`stages`]: what an incident holds, gathered by a table of named stages in a fixed order (process,
//!   threads, rings, kernel log, host context, wait graph, probes, kill), each with its deadline and `not_captured` entry.
//! - [`queue`]: the queue between detection and capture, fair per tenant.
//! - [`workers`]: the capture side: threads that run the slow stages off the watch loop.
//! - [`launch`]: start the command of `run` (own process group, subreaper, signal forwarding).
//!
//! Two sides. **Detection** (this module's [`Watcher::tick`], [`scan`], [`tracker`]): targets → scan →
//! tracker → the minimal incident of each new wedge, durable in the same scan, and the capture workers'
//! reports merged and written; it never waits on a probe. **Capture** ([`workers`], behind [`queue`]): the
//! safe and risky stages of each incident, with their deadlines. `run`, `selftest` and the host daemon all
//! drive the same `Watcher`; they differ only in their target source and in what they do between ticks.
//!
//! `run` and the agent ask for real-time round-robin scheduling at the lowest priority for the thread that
//! ticks the `Watcher` ([`raise_watch_priority`]): a fork/exit storm of thousands of runnable threads
//! otherwise keeps the watch loop waiting on the run queue for most of each interval (measured: 4.7 s of
//! 8 s), and a wedge started during the storm is seen late. The loop uses a few percent of one CPU. The
//! policy is set with `SCHED_RESET_ON_FORK`: nothing the agent forks (probe children, `nvidia-smi`, `run`'s
//! command) ever inherits a real-time policy; a starved probe is bounded by its deadline like any other.

pub mod capture_settings;
pub mod history;
pub mod incident;
pub mod launch;
pub mod queue;
pub mod scan;
pub mod stages;
pub mod targets;
pub mod tracker;
pub mod workers;

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use capture::ProcRoot;
use reports::model::ThreadFate;

use crate::settings::WatchSettings;
pub use incident::{CaptureEvent, CaptureSettings, Capturer};
use scan::{ScanShortcuts, ScanStats, ThreadScanner};
use targets::{Target, TargetSource};
use tracker::{Observation, ThreadKey, Tracker, TrackerConfig, TrackerEvent};

/// Watch-loop settings shared by every front end.
#[derive(Debug, Clone, Copy)]
pub struct WatchConfig {
    pub interval: Duration,
    pub tracker: TrackerConfig,
    /// The scan shortcuts to try (fixed at the start: a reload does not rebuild the scanner).
    pub scan: ScanShortcuts,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchSettings::default().watch_config()
    }
}

impl WatchSettings {
    /// The watch loop's part of the resolved settings.
    pub fn watch_config(&self) -> WatchConfig {
        WatchConfig {
            interval: self.interval,
            tracker: TrackerConfig {
                threshold: self.threshold,
                samples: self.samples,
            },
            scan: ScanShortcuts {
                taskstats: self.taskstats,
                task_iter: self.task_iter,
            },
        }
    }
}

/// The watch loop's state. Not a thread: the front end calls [`Watcher::tick`] every interval.
pub struct Watcher {
    config: WatchConfig,
    proc_root: ProcRoot,
    source: Box<dyn TargetSource + Send>,
    scanner: ThreadScanner,
    tracker: Tracker,
    history: history::History,
    capturer: Capturer,
    targets: Vec<Target>,
    pids: Vec<i32>,
    observations: Vec<Observation>,
    last_stats: ScanStats,
    /// How long the last scan took to list the targets and read their threads (not the capture).
    last_scan_duration: Duration,
    /// The store's episodes left by an earlier watcher were looked at (done by the first tick).
    adoption_done: bool,
    /// Processes of adopted episodes: scanned whether or not the target source names them, until their
    /// episode closes (an episode is followed to its end).
    adopted: BTreeSet<i32>,
    /// When the last scan ended (wall clock): the metrics' last-scan timestamp.
    last_scan_at: Option<std::time::SystemTime>,
}

/// What the watch loop knows now, for the metrics: threads wedged and in D, the oldest wedge.
#[derive(Debug, Clone, Copy, Default)]
pub struct WedgeSummary {
    pub wedged_threads: usize,
    pub dstate_threads: usize,
    pub oldest_wedge: Option<Duration>,
    pub scan_duration: Duration,
}

/// Ask for `SCHED_RR` priority 1 for the calling thread only (children it forks start with the normal
/// policy again: `SCHED_RESET_ON_FORK`); says what the thread got (without the privilege: the normal
/// policy).
pub fn raise_watch_priority() -> &'static str {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: sched_setscheduler(2) on the calling thread (0) reads one sched_param, which `param` is.
    let rc =
        unsafe { libc::sched_setscheduler(0, libc::SCHED_RR | libc::SCHED_RESET_ON_FORK, &param) };
    if rc == 0 {
        "real-time round robin, priority 1"
    } else {
        "normal (no privilege for real-time scheduling)"
    }
}

impl Watcher {
    pub fn new(
        config: WatchConfig,
        source: Box<dyn TargetSource + Send>,
        capturer: Capturer,
        proc_root: ProcRoot,
    ) -> Watcher {
        Watcher {
            config,
            scanner: ThreadScanner::with_shortcuts(&proc_root, config.scan),
            proc_root,
            source,
            tracker: Tracker::new(config.tracker),
            history: history::History::new(config.interval, config.tracker.threshold),
            capturer,
            targets: Vec::new(),
            pids: Vec::new(),
            observations: Vec::new(),
            last_stats: ScanStats::default(),
            last_scan_duration: Duration::ZERO,
            adoption_done: false,
            adopted: BTreeSet::new(),
            last_scan_at: None,
        }
    }

    /// Pids of adopted episodes still open.
    pub fn adopted_pids(&self) -> &BTreeSet<i32> {
        &self.adopted
    }

    /// When the last scan ended (wall clock), None before the first.
    pub fn last_scan_at(&self) -> Option<std::time::SystemTime> {
        self.last_scan_at
    }

    /// Take up the episodes an earlier watcher left in the store (see `incident::adopt`); done once, by
    /// the first tick, before its scan.
    fn adopt_episodes(&mut self, out: &mut Vec<CaptureEvent>) {
        self.adoption_done = true;
        for thread in self.capturer.adopt_episodes(out) {
            let key = ThreadKey {
                tid: thread.tid,
                start_time: thread.start_time,
            };
            self.tracker
                .adopt(thread.pid, key, &thread.comm, thread.d_since_ns);
            self.adopted.insert(thread.pid);
        }
    }

    /// The targets of the last scan.
    pub fn targets(&self) -> &[Target] {
        &self.targets
    }

    /// Whether the scan's quiet-process shortcut (taskstats) is in use, and why not.
    pub fn quiet_shortcut(&self) -> &str {
        self.scanner.quiet_shortcut()
    }

    /// Whether the scan's busy-process shortcut (BPF task iterator) is in use, and why not.
    pub fn thread_shortcut(&self) -> &str {
        self.scanner.thread_shortcut()
    }

    pub fn last_stats(&self) -> ScanStats {
        self.last_stats
    }

    /// The state of the last scan, for the metrics.
    pub fn wedge_summary(&self) -> WedgeSummary {
        let (wedged_threads, oldest_wedge) = self.tracker.wedged_now(capture_clock_ns());
        WedgeSummary {
            wedged_threads,
            dstate_threads: self.tracker.in_d(),
            oldest_wedge,
            scan_duration: self.last_scan_duration,
        }
    }

    pub fn capturer(&mut self) -> &mut Capturer {
        &mut self.capturer
    }

    /// New interval and wedge test (the daemon's reload); threads already in D keep their history.
    pub fn set_config(&mut self, config: WatchConfig) {
        self.config = config;
        self.tracker.set_config(config.tracker);
        self.history
            .configure(config.interval, config.tracker.threshold);
    }

    /// One scan: find targets, read their threads, judge, capture. Returns what happened to incidents.
    pub fn tick(&mut self) -> Vec<CaptureEvent> {
        let mut out = Vec::new();
        if !self.adoption_done {
            self.adopt_episodes(&mut out);
        }
        let scan_started = Instant::now();
        let probe_children: HashSet<i32> = self.capturer.probe_children().into_iter().collect();
        self.source.exclude(&probe_children);
        self.targets = self.source.targets(&self.proc_root);
        self.pids.clear();
        self.pids.extend(self.targets.iter().map(|t| t.pid));
        let capturer = &self.capturer;
        self.adopted.retain(|&pid| capturer.is_open(pid));
        for &pid in &self.adopted {
            if !self.pids.contains(&pid) {
                self.pids.push(pid);
            }
        }
        self.last_stats = self
            .scanner
            .scan(&self.proc_root, &self.pids, &mut self.observations);
        let detected = Instant::now();
        self.last_scan_duration = detected.duration_since(scan_started);
        let now_ns = capture_clock_ns();
        self.history.record(now_ns, &self.observations);
        self.last_scan_at = Some(std::time::SystemTime::now());
        let events = self.tracker.observe(now_ns, &self.observations);
        for event in events {
            match event {
                TrackerEvent::Wedged {
                    pid,
                    tid,
                    start_time,
                    comm,
                    d_since_ns,
                    ..
                } => {
                    if !self.capturer.is_open(pid) {
                        let history = self.history.for_incident(pid, now_ns, &[tid]);
                        self.capturer.offer_history(pid, history);
                    }
                    self.capturer
                        .on_wedged(pid, tid, start_time, &comm, d_since_ns, detected, &mut out)
                }
                TrackerEvent::Resolved { pid, tid, after } => {
                    self.capturer
                        .on_thread_done(pid, tid, ThreadFate::Resolved, after, &mut out)
                }
                TrackerEvent::Vanished { pid, tid, after } => {
                    self.capturer
                        .on_thread_done(pid, tid, ThreadFate::Exited, after, &mut out)
                }
            }
        }
        self.capturer.tick(&mut out);
        out
    }
}

/// CLOCK_MONOTONIC in ns (the ring's clock, and the tracker's).
pub fn capture_clock_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| {
            (t.tv_sec() as u64)
                .saturating_mul(1_000_000_000)
                .saturating_add(t.tv_nsec() as u64)
        })
        .unwrap_or(0)
}
