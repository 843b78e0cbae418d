//! The wait graph of a process under a proc root: the snapshot, the records (given by the caller: only it
//! knows whether the BPF program is loaded), the lookups and the samples. Every read is one that cannot
//! hang: stat, status, wchan, syscall, stack, sched, schedstat, fdinfo, mountinfo, fd links, kallsyms.
//!
//! [`capture`] samples a live tree over time; [`capture_series`] replays recorded trees (one per sample,
//! each with its CLOCK_MONOTONIC), as `capture --pid … --proc-root DIR …` and the recordings' tests do.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::build::build;
use super::holders::{self, Candidate};
use super::identity::Symbols;
use super::SymbolHit;
use super::{Lookup, Records, Sampling, WaitGraph};
use crate::blockers::BlockerRecord;
use crate::error::Result;
use crate::proc_root::{ProcRoot, TaskFile};
use crate::snapshot::ThreadSnapshot;
use crate::{snapshot_process, Arch, SnapshotOptions};

/// How to sample.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Samples of the candidate holders (0: none).
    pub samples: usize,
    pub interval: Duration,
    /// Threads sampled at most.
    pub max_candidates: usize,
    pub arch: Arch,
    /// Stop sampling at this moment (the stage's deadline).
    pub until: Option<Instant>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            samples: 6,
            interval: Duration::from_millis(200),
            max_candidates: 64,
            arch: Arch::host(),
            until: None,
        }
    }
}

/// The lookups under a proc root.
pub struct RootLookup<'a> {
    root: &'a ProcRoot,
    arch: Arch,
    /// "Now" on the scheduler's clock (ms), to turn `se.exec_start` into an age.
    now_ms: Option<f64>,
    symbols: Option<Symbols>,
}

impl<'a> RootLookup<'a> {
    /// For a live tree "now" is this thread's own `se.exec_start` (it is running); for a recorded one, the
    /// recording's CLOCK_MONOTONIC (close to the scheduler's clock: both count from boot).
    pub fn new(root: &'a ProcRoot, arch: Arch, recorded_now_ns: Option<u64>) -> RootLookup<'a> {
        let now_ms = match recorded_now_ns {
            Some(ns) => Some(ns as f64 / 1e6),
            None if root.is_live() => {
                let me = std::process::id() as i32;
                let tid = nix::unistd::gettid().as_raw();
                exec_start_ms(root, me, tid)
            }
            None => None,
        };
        RootLookup {
            root,
            arch,
            now_ms,
            symbols: None,
        }
    }
}

/// `se.exec_start` (ms on the scheduler's clock) from `<tid>/sched`.
fn exec_start_ms(root: &ProcRoot, pid: i32, tid: i32) -> Option<f64> {
    let text = root.read_task_file(pid, tid, TaskFile::Sched).ok()?;
    parse_exec_start(&text)
}

/// `se.exec_start                                :        517562.429094` → 517562.429094.
pub fn parse_exec_start(text: &[u8]) -> Option<f64> {
    String::from_utf8_lossy(text).lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        (key.trim() == "se.exec_start")
            .then(|| value.trim().parse::<f64>().ok())
            .flatten()
            .filter(|v| v.is_finite() && *v >= 0.0)
    })
}

/// `ino:` and `mnt_id:` of an fdinfo file.
pub fn parse_fdinfo(text: &[u8]) -> (Option<u64>, Option<i64>) {
    let text = String::from_utf8_lossy(text);
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<i64>().ok())
    };
    (
        field("ino:").and_then(|i| u64::try_from(i).ok()),
        field("mnt_id:"),
    )
}

/// The device (`major`, `minor`) of mount `mnt_id` in mountinfo text.
pub fn mount_device(mountinfo: &[u8], mnt_id: i64) -> Option<(u32, u32)> {
    String::from_utf8_lossy(mountinfo).lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let id: i64 = f.next()?.parse().ok()?;
        if id != mnt_id {
            return None;
        }
        let (major, minor) = f.nth(1)?.split_once(':')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    })
}

/// Most fds examined per process when looking for a file's path.
const MAX_FDS: usize = 4096;

impl Lookup for RootLookup<'_> {
    fn thread(&mut self, pid: i32, tid: i32) -> Option<ThreadSnapshot> {
        let opts = SnapshotOptions {
            only_tid: Some(tid),
            arch: self.arch,
            ..SnapshotOptions::default()
        };
        let snap = snapshot_process(self.root, pid, &opts).ok()?;
        snap.threads.into_iter().find(|t| t.tid == tid && !t.gone)
    }

    fn comm(&mut self, pid: i32) -> Option<String> {
        self.root.read_task_stat(pid, pid).ok().map(|s| s.comm)
    }

    fn last_ran_s_ago(&mut self, pid: i32, tid: i32) -> Option<f64> {
        let now = self.now_ms?;
        let then = exec_start_ms(self.root, pid, tid)?;
        Some(((now - then) / 1000.0).max(0.0))
    }

    fn path_of(&mut self, pids: &[i32], dev: (u32, u32), ino: u64) -> Option<String> {
        for &pid in pids {
            let mountinfo = self.root.mountinfo(pid).ok();
            for fd in self.root.fds(pid, MAX_FDS).ok()? {
                let Ok(info) = self.root.fdinfo(pid, fd) else {
                    continue;
                };
                let (Some(fd_ino), mnt) = parse_fdinfo(&info) else {
                    continue;
                };
                if fd_ino != ino {
                    continue;
                }
                let same_dev = match (mnt, &mountinfo) {
                    (Some(m), Some(text)) => mount_device(text, m) == Some(dev),
                    _ => true,
                };
                if !same_dev {
                    continue;
                }
                if let Ok(target) = self.root.fd_target(pid, None, fd) {
                    return Some(match target {
                        crate::parse::fd::FdTarget::Path { path, .. } => path,
                        crate::parse::fd::FdTarget::Special { kind, detail } => {
                            format!("{kind}:{detail}")
                        }
                    });
                }
            }
        }
        None
    }

    fn symbol(&mut self, address: u64) -> Option<SymbolHit> {
        let root = self.root;
        let symbols = self.symbols.get_or_insert_with(|| {
            root.kallsyms()
                .map(|text| Symbols::parse(&text))
                .unwrap_or_default()
        });
        symbols.place(address)
    }
}

/// The wait graph of `pid` under a live `root`, the candidate holders sampled `opts.samples` times.
pub fn capture(
    root: &ProcRoot,
    pid: i32,
    records: std::result::Result<&[BlockerRecord], &str>,
    opts: &Options,
) -> Result<WaitGraph> {
    let snapshot = snapshot_process(
        root,
        pid,
        &SnapshotOptions {
            all_threads: true,
            arch: opts.arch,
            ..SnapshotOptions::default()
        },
    )?;
    let mut lookup = RootLookup::new(root, opts.arch, None);
    let mut graph = build(pid, &snapshot.threads, as_records(records), &mut lookup);
    let mut clock = |_: usize| {
        Some((
            root.clone(),
            crate::process::clock_ns(nix::time::ClockId::CLOCK_MONOTONIC),
        ))
    };
    sample(&mut graph, &snapshot.threads, &mut clock, opts, &mut lookup);
    Ok(graph)
}

/// The wait graph of `pid` from recorded trees, one per sample in time order, each with its
/// CLOCK_MONOTONIC (ns); the first is the snapshot. No records: a recording has none.
pub fn capture_series(
    series: &[(ProcRoot, u64)],
    pid: i32,
    records: std::result::Result<&[BlockerRecord], &str>,
    arch: Arch,
) -> Result<WaitGraph> {
    let (first, at) = series.first().ok_or_else(|| crate::Error::Parse {
        what: "recorded proc trees",
        why: "none given".into(),
    })?;
    let snapshot = snapshot_process(
        first,
        pid,
        &SnapshotOptions {
            all_threads: true,
            arch,
            ..SnapshotOptions::default()
        },
    )?;
    let mut lookup = RootLookup::new(first, arch, Some(*at));
    let mut graph = build(pid, &snapshot.threads, as_records(records), &mut lookup);
    let opts = Options {
        samples: series.len(),
        interval: Duration::ZERO,
        arch,
        ..Options::default()
    };
    let mut clock = |k: usize| series.get(k).cloned();
    sample(
        &mut graph,
        &snapshot.threads,
        &mut clock,
        &opts,
        &mut lookup,
    );
    Ok(graph)
}

fn as_records<'a>(records: std::result::Result<&'a [BlockerRecord], &'a str>) -> Records<'a> {
    match records {
        Ok(r) => Records::Read(r),
        Err(why) => Records::Missing(why),
    }
}

/// Samples the candidate holders of every lock that needs it (no holder named, a "likely" one, or one not
/// asleep in D) and applies the judgement. `at(k)` gives the tree and CLOCK_MONOTONIC of sample `k`.
fn sample(
    graph: &mut WaitGraph,
    threads: &[ThreadSnapshot],
    at: &mut dyn FnMut(usize) -> Option<(ProcRoot, u64)>,
    opts: &Options,
    lookup: &mut RootLookup<'_>,
) {
    let Some((root0, _)) = at(0) else {
        return;
    };
    let mut threads_of = |p: i32| likeliest_holders(&root0, threads, p);
    let plan: BTreeMap<usize, Vec<(i32, i32, String)>> = graph
        .locks
        .iter()
        .enumerate()
        .filter(|(_, l)| needs_samples(l))
        .map(|(i, l)| {
            (
                i,
                holders::candidates_for(l, graph, &mut threads_of, opts.max_candidates),
            )
        })
        .filter(|(_, c)| !c.is_empty())
        .collect();
    // D holders named by a record: how long they have slept.
    for lock in graph.locks.iter_mut() {
        for h in lock.holders.iter_mut().filter(|h| h.state == "D") {
            h.last_ran_s_ago = lookup.last_ran_s_ago(h.pid, h.tid);
        }
    }
    if plan.is_empty() || opts.samples == 0 {
        return;
    }
    let mut all = candidates(&plan, opts.max_candidates);
    let (sampling, taken) = take_samples(&mut all, at, opts);
    graph.sampling = Some(sampling);
    for (i, candidates) in plan {
        let lock = &mut graph.locks[i];
        let takers = holders::takers_of(lock);
        let judged: Vec<holders::Judged> = all
            .iter()
            .filter(|c| candidates.iter().any(|(_, t, _)| *t == c.tid))
            // A thread gone before the last sample held nothing to the end.
            .filter(|c| c.obs.len() == taken)
            .map(|c| holders::judge(c, takers))
            .collect();
        holders::apply(lock, &judged);
    }
    super::link_chains(graph);
}

/// A process's threads, likeliest holders first: running or in D, then asleep in a call that is not an idle
/// wait; a thread asleep in futex, poll and the like holds no kernel lock and is not sampled.
fn likeliest_holders(root: &ProcRoot, threads: &[ThreadSnapshot], p: i32) -> Vec<(i32, String)> {
    let Ok(tids) = root.tasks(p) else {
        return Vec::new();
    };
    let mut ranked: Vec<(u8, i32, String)> = tids
        .into_iter()
        .filter_map(|tid| {
            let (state, comm, call) = match threads.iter().find(|t| t.tid == tid) {
                Some(t) => (
                    t.state.chars().next().unwrap_or('?'),
                    t.comm.clone(),
                    super::waits::syscall_name(t).map(str::to_string),
                ),
                None => {
                    let stat = root.read_task_stat(p, tid).ok()?;
                    (stat.state, stat.comm, None)
                }
            };
            let rank = match state {
                'R' | 'D' => 0,
                _ if call.as_deref().is_some_and(holders::is_idle_call) => return None,
                _ => 1,
            };
            Some((rank, tid, comm))
        })
        .collect();
    ranked.sort_by_key(|(rank, tid, _)| (*rank, *tid));
    ranked
        .into_iter()
        .map(|(_, tid, comm)| (tid, comm))
        .collect()
}

/// Every lock's candidates, each thread once, at most `max` in all.
fn candidates(plan: &BTreeMap<usize, Vec<(i32, i32, String)>>, max: usize) -> Vec<Candidate> {
    let mut all: Vec<Candidate> = Vec::new();
    for (pid, tid, comm) in plan.values().flatten() {
        if all.len() >= max {
            break;
        }
        if !all.iter().any(|c| c.tid == *tid) {
            all.push(Candidate {
                pid: *pid,
                tid: *tid,
                comm: comm.clone(),
                obs: Vec::new(),
            });
        }
    }
    all
}

/// Up to `opts.samples` observations of every candidate, `opts.interval` apart, until the deadline; the
/// sampling done and how many samples were taken.
fn take_samples(
    all: &mut [Candidate],
    at: &mut dyn FnMut(usize) -> Option<(ProcRoot, u64)>,
    opts: &Options,
) -> (Sampling, usize) {
    let mut taken = 0;
    let (mut first_ns, mut last_ns) = (None, 0u64);
    for k in 0..opts.samples {
        if opts.until.is_some_and(|u| Instant::now() >= u) {
            break;
        }
        if k > 0 && !opts.interval.is_zero() {
            std::thread::sleep(opts.interval);
        }
        let Some((root, at_ns)) = at(k) else {
            break;
        };
        for c in all.iter_mut() {
            if let Some(o) = holders::read_obs(&root, c.pid, c.tid, opts.arch, at_ns) {
                c.obs.push(o);
            }
        }
        first_ns.get_or_insert(at_ns);
        last_ns = at_ns;
        taken += 1;
    }
    let sampling = Sampling {
        samples: taken,
        window_s: last_ns.saturating_sub(first_ns.unwrap_or(last_ns)) as f64 / 1e9,
        candidates: all.len(),
    };
    (sampling, taken)
}

/// A lock whose holder is unnamed, only "likely" (a last reader), or named but not asleep (described by
/// samples).
fn needs_samples(lock: &super::LockNode) -> bool {
    lock.holders.is_empty()
        || lock.holders.iter().any(|h| {
            h.evidence == super::Evidence::LastReader
                || h.evidence == super::Evidence::Stack
                || h.state != "D"
        })
}
