//! One scan of the targets' threads: the cheap `stat` state of every thread, and the progress signature
//! (wchan, stack hash, context switches) of the threads in D only, with their start time, which also
//! is read for the threads that were in D at the previous scan (so the tracker can tell a thread that left
//! D from a new thread that got its tid).
//!
//! Quiet processes are nearly free: before scanning a process its summed activity counters are asked of
//! taskstats (one netlink round trip, [`capture::taskstats`]); unchanged since the previous scan, its
//! sleeping threads are not read at all ([`Scanner::scan_with`]). Without the privilege (`CAP_NET_ADMIN`)
//! or on a fake proc root every thread is read as before; [`ThreadScanner::quiet_shortcut`]
//! says which. The `taskstats` setting (`--no-taskstats`, or `WEDGE_CAPTURE_TASKSTATS=off`) turns the shortcut
//! off (for benchmarks and doubting users).
//!
//! Busy processes (a training worker: some thread wakes every millisecond, so its counters always move)
//! cost little too: each process's scanner gets a BPF task iterator limited to it ([`capture::task_iter`]),
//! read once per scan; a thread it shows asleep whose switch count has not moved since the previous scan
//! is not read. Without the privilege (CAP_BPF + CAP_PERFMON), kernel BTF or Linux >= 6.1, or on a fake
//! proc root, each sleeper's `schedstat` is read instead; [`ThreadScanner::thread_shortcut`] says which,
//! the `task_iter` setting (`--no-task-iter`, or `WEDGE_CAPTURE_TASK_ITER=off`) turns it off.

use std::collections::{HashMap, HashSet};

use capture::scan::{Scanner, TaskSample};
use capture::task_iter::TaskIter;
use capture::taskstats::Taskstats;
use capture::ProcRoot;

use super::tracker::{stack_hash, Observation, Progress};

/// Counters of one scan, for the benchmark and `--json` progress.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanStats {
    pub processes: usize,
    pub threads: usize,
    pub in_d: usize,
    /// Sleeping threads not read because their process's counters had not moved (the quiet shortcut).
    pub quiet: usize,
    /// Sleeping threads not read because the task iterator showed them asleep and not switched since
    /// the previous scan (the busy-process shortcut).
    pub unswitched: usize,
}

/// Which of the two scan shortcuts to try (each still falls back, with a reason, when it cannot work).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanShortcuts {
    /// The quiet-process shortcut (taskstats).
    pub taskstats: bool,
    /// The busy-process shortcut (BPF task iterator).
    pub task_iter: bool,
}

/// Why a shortcut is off: the environment variable when it says so (what a benchmark or test set), else the
/// setting.
fn turned_off_by(env: &str, key: &str) -> String {
    if crate::settings::env_says_off(env) {
        format!("{env}=off")
    } else {
        format!("{key}: false")
    }
}

/// Reads the threads of the target processes: one capture [`Scanner`] per process keeps its threads' stat
/// files open between scans.
#[derive(Default)]
pub struct ThreadScanner {
    scanners: HashMap<i32, Scanner>,
    /// The quiet-process shortcut's counters (None: unavailable or turned off, see `shortcut`).
    taskstats: Option<Taskstats>,
    shortcut: String,
    /// The busy-process shortcut's program (None: unavailable or turned off, see `thread_shortcut`).
    task_iter: Option<TaskIter>,
    thread_shortcut: String,
    /// Stacks are unreadable (no CAP_SYS_ADMIN): don't retry at every scan.
    stack_denied: bool,
    /// Tids seen in D by the previous scan, and by this one (swapped at each scan).
    in_d_before: HashSet<i32>,
    in_d_now: HashSet<i32>,
}

impl ThreadScanner {
    /// The scanner with the shortcuts `wanted`, each tried for real and said why not (tests compare a
    /// scanner with and without them over the same threads).
    pub fn with_shortcuts(proc_root: &ProcRoot, wanted: ScanShortcuts) -> ThreadScanner {
        let off = !wanted.taskstats;
        let (taskstats, shortcut) = if !proc_root.is_live() {
            // taskstats describes the running kernel's processes, not a fake or recorded tree's pids.
            (
                None,
                "off (not the live /proc): every thread read every scan".to_string(),
            )
        } else if off {
            (
                None,
                format!(
                    "off ({}): every thread read every scan",
                    turned_off_by(crate::settings::ENV_TASKSTATS, "taskstats")
                ),
            )
        } else {
            match Taskstats::open() {
                Ok(t) => (
                    Some(t),
                    "on (taskstats): quiet processes' sleeping threads skipped".to_string(),
                ),
                Err(err) => (
                    None,
                    format!(
                        "unavailable ({err}; needs CAP_NET_ADMIN): every thread read every scan"
                    ),
                ),
            }
        };
        let (task_iter, thread_shortcut) = if !proc_root.is_live() {
            (
                None,
                "off (not the live /proc): sleepers' schedstat read every scan".to_string(),
            )
        } else if !wanted.task_iter {
            (
                None,
                format!(
                    "off ({}): sleepers' schedstat read every scan",
                    turned_off_by(crate::settings::ENV_TASK_ITER, "task_iter")
                ),
            )
        } else {
            match TaskIter::load() {
                Ok(iter) => {
                    let how = if iter.walks_groups() {
                        "each process's threads walked in one call"
                    } else {
                        "asked per thread"
                    };
                    (
                        Some(iter),
                        format!("on (BPF task iterator, {how}): sleepers that have not run since the last scan skipped"),
                    )
                }
                Err(err) => (
                    None,
                    format!("unavailable ({err}): sleepers' schedstat read every scan"),
                ),
            }
        };
        ThreadScanner {
            taskstats,
            shortcut,
            task_iter,
            thread_shortcut,
            ..ThreadScanner::default()
        }
    }

    /// Whether the busy-process shortcut (BPF task iterator) is in use, and why not.
    pub fn thread_shortcut(&self) -> &str {
        &self.thread_shortcut
    }

    /// Whether the quiet-process shortcut is in use, and why not, for the start-up log.
    pub fn quiet_shortcut(&self) -> &str {
        &self.shortcut
    }

    /// Processes with an open scanner.
    pub fn processes(&self) -> usize {
        self.scanners.len()
    }

    /// Scan the threads of `pids` into `out` (replacing what it held). Processes not in `pids` are forgotten.
    pub fn scan(
        &mut self,
        proc_root: &ProcRoot,
        pids: &[i32],
        out: &mut Vec<Observation>,
    ) -> ScanStats {
        // Filled in place and truncated at the end: a thread's comm is copied into the String it had
        // at the previous scan (no allocation per thread per scan when the threads stay the same).
        let mut filled = 0;
        std::mem::swap(&mut self.in_d_before, &mut self.in_d_now);
        self.in_d_now.clear();
        let mut stats = ScanStats::default();
        if !self.scanners.is_empty() {
            let wanted: std::collections::HashSet<i32> = pids.iter().copied().collect();
            self.scanners.retain(|pid, _| wanted.contains(pid));
        }
        for &pid in pids {
            let scanner = match self.scanners.entry(pid) {
                std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
                std::collections::hash_map::Entry::Vacant(entry) => {
                    match open_scanner(proc_root, self.task_iter.as_ref(), pid) {
                        Some(scanner) => entry.insert(scanner),
                        None => continue,
                    }
                }
            };
            // Queried before any of the process's files is read (see Scanner::scan_with); a failed query
            // (the process just exited, a full socket buffer) only means this scan reads every thread.
            // Not asked of a busy process the task iterator covers (Scanner::wants_counters).
            let counters = match self.taskstats.as_mut() {
                Some(t) if scanner.wants_counters() => t.tgid(pid).ok(),
                _ => None,
            };
            match scanner.scan_with(counters) {
                Ok(summary) => {
                    stats.quiet += summary.quiet;
                    stats.unswitched += summary.unswitched;
                }
                Err(_) => {
                    // Gone (or unreadable): its threads are absent from this scan, which the tracker
                    // reads as gone.
                    self.scanners.remove(&pid);
                    continue;
                }
            }
            stats.processes += 1;
            for sample in scanner.samples() {
                stats.threads += 1;
                let state = u8::try_from(sample.state).unwrap_or(b'?');
                let in_d = state == b'D';
                let start_time = if in_d || self.in_d_before.contains(&sample.tid) {
                    // None when the thread exited since its stat was read: the tracker drops it.
                    proc_root
                        .read_task_stat(pid, sample.tid)
                        .ok()
                        .map(|stat| stat.starttime)
                } else {
                    None
                };
                let progress = if in_d {
                    stats.in_d += 1;
                    self.in_d_now.insert(sample.tid);
                    Some(progress_of(
                        proc_root,
                        scanner,
                        pid,
                        sample.tid,
                        &mut self.stack_denied,
                    ))
                } else {
                    None
                };
                let observation = (pid, sample, start_time, state, progress);
                store_observation(out, filled, observation);
                filled += 1;
            }
        }
        out.truncate(filled);
        stats
    }
}

/// A new process's scanner, with its task-iterator link (none when the process just exited: it is then read
/// as before). None: the process is gone.
fn open_scanner(proc_root: &ProcRoot, task_iter: Option<&TaskIter>, pid: i32) -> Option<Scanner> {
    let mut scanner = Scanner::new(proc_root, pid).ok()?;
    scanner.set_thread_iter(task_iter.and_then(|t| t.watch(pid).ok()));
    Some(scanner)
}

/// One thread as the tracker sees it: pid, its sample, start time, state byte and progress.
type ObservationParts<'a> = (i32, &'a TaskSample, Option<u64>, u8, Option<Progress>);

/// Writes `parts` into `out[filled]`, reusing the slot's comm String (no allocation per thread per scan when
/// the threads stay the same), or appends it.
fn store_observation(out: &mut Vec<Observation>, filled: usize, parts: ObservationParts) {
    let (pid, sample, start_time, state, progress) = parts;
    match out.get_mut(filled) {
        Some(slot) => {
            slot.pid = pid;
            slot.tid = sample.tid;
            slot.comm.clone_from(&sample.comm);
            slot.start_time = start_time;
            slot.state = state;
            slot.progress = progress;
        }
        None => out.push(Observation {
            pid,
            tid: sample.tid,
            comm: sample.comm.clone(),
            start_time,
            state,
            progress,
        }),
    }
}

/// wchan, stack hash and switch counters of one thread in D (reads that cannot hang).
fn progress_of(
    proc_root: &ProcRoot,
    scanner: &Scanner,
    pid: i32,
    tid: i32,
    stack_denied: &mut bool,
) -> Progress {
    let wchan = proc_root.read_wchan(pid, tid).ok().flatten();
    let stack_hash = if *stack_denied {
        None
    } else {
        match proc_root.read_stack(pid, tid) {
            Ok(frames) => Some(stack_hash(frames.iter().map(|f| f.function.as_str()))),
            Err(err) => {
                if err.is_permission_denied() {
                    *stack_denied = true;
                }
                None
            }
        }
    };
    Progress {
        wchan,
        stack_hash,
        ctxt_switches: scanner.ctxt_switches(tid).ok().flatten(),
    }
}
