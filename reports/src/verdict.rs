//! The one-line verdict: which thread, in which call, for how long, the last breadcrumb, and how it ended.
//!
//! Built clause by clause: each clause is one function of a [`Judged`] (schema 2: the evidence as of detection)
//! or a [`Sampled`] (older incidents: the latest sample) view, listed in [`EPISODE_CLAUSES`] or
//! [`SAMPLE_CLAUSES`] in the order they are read, joined with `; `. A new clause is one function and one table
//! entry. Used by report.md's head, `report list`, the agent's log and incident.json's `verdict`.

use std::fmt::Write as _;

use capture::{SyscallInfo, ThreadSnapshot};

use crate::model::{
    EpisodeStatus, InFlight, Incident, PythonFrame, RecordKind, Sample, ThreadFate, WedgedThread,
};
use crate::text::{call_text, code, duration, plain, plural, secs, time_text};

/// The one-line verdict: which thread, in which call, for how long, and the last breadcrumb.
///
/// Built from the latest sample, the wedged-thread list and the ring's in-flight calls, e.g.
/// "thread 4242 `main` has been in D for 312 s in ioctl `NV_ESC_RM_CONTROL` on `/dev/nvidiactl`; last breadcrumb
/// `cuMemAlloc_v2(48 B)` entered 312 s ago and never returned".
pub fn verdict(incident: &Incident) -> String {
    if let Some(judged) = Judged::of(incident) {
        return join(EPISODE_CLAUSES.iter().filter_map(|clause| clause(&judged)));
    }
    let pid = incident.process.pid;
    let Some(sample) = incident.latest_sample() else {
        if let Some(w) = incident.wedged_threads.first() {
            return format!(
                "thread {} {} is in D (no thread snapshot captured yet)",
                w.tid,
                code(&w.comm)
            );
        }
        return format!("pid {pid}: no thread snapshot captured");
    };
    match Sampled::of(incident, sample) {
        Some(sampled) => join(SAMPLE_CLAUSES.iter().filter_map(|clause| clause(&sampled))),
        None => match (incident.episode.status, incident.episode.resolved_after_s) {
            (EpisodeStatus::Resolved, Some(s)) => format!(
                "pid {pid}: no thread in D any more; the episode resolved after {}",
                secs(s)
            ),
            _ => format!("pid {pid}: no thread in D in the latest sample"),
        },
    }
}

fn join(clauses: impl Iterator<Item = String>) -> String {
    clauses.collect::<Vec<String>>().join("; ")
}

/// A schema-2 incident as judged at detection: the thread to read first (longest in D, not waiting behind
/// another) and its evidence. None for older incidents (no evidence as of detection).
struct Judged<'a> {
    incident: &'a Incident,
    wedged: &'a WedgedThread,
    thread: &'a ThreadSnapshot,
    /// Every judged thread with its evidence, the one read first first.
    all: Vec<(&'a WedgedThread, &'a ThreadSnapshot)>,
    /// Tids of the threads that wait behind the first one.
    waiters: Vec<i32>,
}

impl<'a> Judged<'a> {
    fn of(incident: &'a Incident) -> Option<Judged<'a>> {
        let all = judged_threads(incident);
        let (wedged, thread) = *all.first()?;
        Some(Judged {
            incident,
            wedged,
            thread,
            waiters: waiting_behind(incident, wedged.tid),
            all,
        })
    }

    /// Whether the episode is over for good (resolved or exited), not merely left behind by the watcher.
    fn ended(&self) -> bool {
        let status = self.incident.episode.status;
        let over = status != EpisodeStatus::Open
            || matches!(self.wedged.fate, ThreadFate::Resolved | ThreadFate::Exited);
        over && status != EpisodeStatus::StillWedgedAtExit
    }
}

/// The verdict of a schema-2 incident, clause by clause.
const EPISODE_CLAUSES: &[fn(&Judged) -> Option<String>] = &[
    wait_graph_first_clause,
    judged_thread_clause,
    judged_breadcrumb_clause,
    waiters_clause,
    lock_holder_clause,
    wait_graph_clause,
    more_wedged_clause,
    xid_clause,
    outcome_clause,
];

/// The lock the judged thread waits for, read first when the wait graph has it: "4 threads wait for the
/// mmap_lock of pid 1059 (`uvmlock`) (for writing, in mmap); held by tid 1059 `uvmlock`, running in the kernel
/// (…) — breadcrumb `cuMemPrefetchAsync(48 GiB)` entered 8.9 s ago", followed along its chain.
fn wait_graph_first_clause(j: &Judged) -> Option<String> {
    let graph = j.incident.wait_graph.as_ref()?;
    graph.lock_waited_by(j.wedged.tid)?;
    capture::wait_graph::render::sentence(graph, Some(j.wedged.tid), &|tid| {
        holder_breadcrumb(j, tid)
    })
}

/// The graph's first lock, when the judged thread waits for none of its locks (it holds one, or waits for
/// something no lock names, a freeze say).
fn wait_graph_clause(j: &Judged) -> Option<String> {
    let graph = j.incident.wait_graph.as_ref()?;
    if graph.lock_waited_by(j.wedged.tid).is_some() {
        return None;
    }
    capture::wait_graph::render::sentence(graph, None, &|tid| holder_breadcrumb(j, tid))
}

/// A holder's call in flight in the rings: "breadcrumb `cuMemPrefetchAsync(48 GiB)` entered 8.9 s ago".
fn holder_breadcrumb(j: &Judged, tid: i32) -> Option<String> {
    let at = j.wedged.detected_at.as_ref().and_then(|d| d.monotonic_ns);
    let f = in_flight_of(j.incident, tid)?;
    let age = in_flight_age(f, at)
        .map(|ns| format!(" entered {} ago", duration(ns)))
        .unwrap_or_default();
    Some(format!(
        "breadcrumb {}{age}",
        code(&call_text(&f.call, &f.args, &f.label))
    ))
}

/// Whether the wait graph already says who holds the lock the judged thread waits for.
fn graph_covers(j: &Judged) -> bool {
    j.incident
        .wait_graph
        .as_ref()
        .is_some_and(|g| g.lock_waited_by(j.wedged.tid).is_some())
}

/// "thread 7 `python3` has been in D for 312 s in ioctl `X` on `/dev/nvidiactl`".
fn judged_thread_clause(j: &Judged) -> Option<String> {
    let w = j.wedged;
    let mut out = format!("thread {} {}", w.tid, code(&w.comm));
    let ended = j.ended();
    let verb = if ended { "was" } else { "has been" };
    match in_d_ns(j.incident, w) {
        Some(ns) => write!(out, " {verb} in D for {}", duration(ns)).unwrap(),
        None if ended => out.push_str(" was in D"),
        None => out.push_str(" is in D"),
    }
    out.push_str(&where_blocked(j.thread));
    out.push_str(&python_clause(w).unwrap_or_default());
    Some(out)
}

/// The breadcrumb as of detection.
fn judged_breadcrumb_clause(j: &Judged) -> Option<String> {
    let at = j.wedged.detected_at.as_ref().and_then(|d| d.monotonic_ns);
    breadcrumb_or_no_ring(j.incident, j.wedged.tid, at)
}

/// "2 threads wait behind tid 7 (page fault on a frozen filesystem)".
fn waiters_clause(j: &Judged) -> Option<String> {
    let n = j.waiters.len();
    (n > 0).then(|| {
        format!(
            "{n} thread{} wait{} behind tid {} ({})",
            plural(n),
            if n == 1 { "s" } else { "" },
            j.wedged.tid,
            holder_text(j.thread)
        )
    })
}

/// Who holds the lock the wedged thread waits for. For an RM lock: "3 threads wait for the RM API lock; likely
/// held by tid 9 (`rmA`) in RM alloc …, running", from the threads as of detection. For any lock (RM or
/// mmap_lock) whose holder is not visible in the kernel: the driver calls other threads have in flight in
/// the breadcrumb ring — a thread pinning or allocating memory runs (or sleeps outside D) while it holds the
/// lock, so only its breadcrumb names it (on an H100: `mmap` waited 8.3 s for the mmap_lock while
/// another thread's `cuMemHostRegister_v2(32 GiB)` pinned).
fn lock_holder_clause(j: &Judged) -> Option<String> {
    let lock = j.thread.waits_for.as_deref()?;
    if graph_covers(j) {
        return None;
    }
    let threads = threads_at_detection(j);
    let rm_lock = lock == "RM API lock" || lock == "GPU lock";
    let mut sentence = if rm_lock {
        capture::rm_lock::holder_sentence(&threads)?
    } else {
        String::new()
    };
    if !j.thread.blocked_behind.is_empty() {
        return (!sentence.is_empty()).then_some(sentence);
    }
    let others = other_threads_in_flight(j, &threads);
    if others.is_empty() {
        return (!sentence.is_empty()).then_some(sentence);
    }
    if sentence.is_empty() {
        write!(
            sentence,
            "no thread in D holds the {}; in flight on other threads (breadcrumbs): {}",
            code(lock),
            others.join(", ")
        )
        .unwrap();
    } else {
        write!(
            sentence,
            "; in flight on other threads (breadcrumbs): {}",
            others.join(", ")
        )
        .unwrap();
    }
    Some(sentence)
}

/// Driver calls in flight in the ring on threads that are not themselves in D, oldest first (at most 3).
fn other_threads_in_flight(j: &Judged, threads: &[ThreadSnapshot]) -> Vec<String> {
    let at = j.wedged.detected_at.as_ref().and_then(|d| d.monotonic_ns);
    let mut calls: Vec<&InFlight> = j
        .incident
        .ring
        .iter()
        .chain(&j.incident.extra_rings)
        .flat_map(|r| &r.in_flight)
        .filter(|f| i64::from(f.tid) != i64::from(j.wedged.tid))
        .filter(|f| {
            !threads
                .iter()
                .any(|t| t.state == "D" && i64::from(t.tid) == i64::from(f.tid))
        })
        .collect();
    calls.sort_by_key(|f| std::cmp::Reverse(in_flight_age(f, at)));
    calls
        .into_iter()
        .take(3)
        .map(|f| {
            let age = in_flight_age(f, at)
                .map(|ns| format!(" entered {} ago", duration(ns)))
                .unwrap_or_default();
            format!(
                "tid {} {}{age}",
                f.tid,
                code(&call_text(&f.call, &f.args, &f.label))
            )
        })
        .collect()
}

/// The threads as the capture saw them at detection: the judged threads' evidence, then the first sample's
/// other threads (a holder is often not in D, so only a sample has it).
fn threads_at_detection(j: &Judged) -> Vec<ThreadSnapshot> {
    let mut threads: Vec<ThreadSnapshot> = j.all.iter().map(|(_, t)| (*t).clone()).collect();
    if let Some(sample) = j.incident.samples.first() {
        for t in &sample.snapshot.threads {
            if !threads.iter().any(|have| have.tid == t.tid) {
                threads.push(t.clone());
            }
        }
    }
    threads
}

/// "2 more threads wedged" (those not waiting behind the first, nor counted by the wait graph's sentence).
fn more_wedged_clause(j: &Judged) -> Option<String> {
    let in_graph = j
        .incident
        .wait_graph
        .as_ref()
        .map(|g| g.waiter_tids())
        .unwrap_or_default();
    let others = j
        .all
        .iter()
        .filter(|(o, _)| {
            o.tid != j.wedged.tid && !j.waiters.contains(&o.tid) && !in_graph.contains(&o.tid)
        })
        .count();
    (others > 0).then(|| format!("{others} more thread{} wedged", plural(others)))
}

/// How long before the wedge an Xid still counts as "before the wedge" (the kernel log window's default reach).
pub const XID_BEFORE: std::time::Duration = std::time::Duration::from_secs(600);

/// The latest Xid (or SXid) of the kernel log from [`XID_BEFORE`] before the judged thread entered D until the
/// end of the episode: "latest Xid 79 (GPU has fallen off the bus) on `0000:3b:00`, 2.0 s into the wedge
/// (2026-12-07T12:00:00.000Z), printed for this process". The printk clock and CLOCK_MONOTONIC agree to within
/// milliseconds (both count from boot, neither counts suspend).
fn xid_clause(j: &Judged) -> Option<String> {
    let start_ns = j.wedged.d_since.monotonic_ns?;
    let end_ns = if j.ended() {
        last_look_ns(j.incident)
    } else {
        None
    };
    let window_ns = XID_BEFORE.as_nanos() as u64;
    let in_range: Vec<(&capture::xid::XidEvent, u64)> = j
        .incident
        .xids
        .iter()
        .filter_map(|x| Some((x, x.kernel_time_us?.checked_mul(1000)?)))
        .filter(|(_, t)| {
            t.saturating_add(window_ns) >= start_ns
                && end_ns.is_none_or(|end| *t <= end.saturating_add(1_000_000_000))
        })
        .collect();
    let (latest, at_ns) = *in_range.iter().max_by_key(|(_, t)| *t)?;
    let mut out = format!(
        "latest {} on {}",
        code(&latest.summary()),
        code(&latest.device)
    );
    if at_ns < start_ns {
        write!(
            out,
            ", {} before the thread entered D",
            duration(start_ns - at_ns)
        )
        .unwrap();
    } else {
        write!(out, ", {} into the wedge", duration(at_ns - start_ns)).unwrap();
    }
    if let Some(wall) = wall_of(j.incident, at_ns) {
        write!(out, " ({})", time_text(&wall)).unwrap();
    }
    match (latest.pid, &latest.name) {
        (Some(pid), _) if pid == j.incident.process.pid => {
            out.push_str(", printed for this process")
        }
        (Some(pid), Some(name)) => write!(out, ", printed for pid {pid} {}", code(name)).unwrap(),
        (Some(pid), None) => write!(out, ", printed for pid {pid}").unwrap(),
        (None, _) => {}
    }
    if in_range.len() > 1 {
        write!(out, " ({} Xid lines in all)", in_range.len()).unwrap();
    }
    Some(out)
}

/// The wall time of a monotonic instant, from a moment the incident read on both clocks (its detection).
fn wall_of(incident: &Incident, monotonic_ns: u64) -> Option<crate::model::Timestamp> {
    let at = &incident.detected_at;
    let (wall, mono) = (at.wall?, at.monotonic_ns?);
    let delta = chrono::Duration::nanoseconds(i64::try_from(mono.abs_diff(monotonic_ns)).ok()?);
    let wall = if monotonic_ns <= mono {
        wall.checked_sub_signed(delta)?
    } else {
        wall.checked_add_signed(delta)?
    };
    Some(crate::model::Timestamp {
        wall: Some(wall),
        monotonic_ns: Some(monotonic_ns),
        boottime_ns: None,
    })
}

/// "resolved (the thread exited)", "still wedged when wedge-capture exited at …".
fn outcome_clause(j: &Judged) -> Option<String> {
    let episode = &j.incident.episode;
    match episode.status {
        EpisodeStatus::Resolved if j.wedged.fate == ThreadFate::Exited => {
            Some("resolved (the thread exited)".into())
        }
        EpisodeStatus::Resolved => Some("resolved".into()),
        EpisodeStatus::StillWedgedAtExit => {
            let mut out = "still wedged when wedge-capture exited".to_string();
            if let Some(at) = &episode.watcher_exited_at {
                write!(out, " at {}", time_text(at)).unwrap();
            }
            Some(out)
        }
        EpisodeStatus::Open | EpisodeStatus::Unknown => None,
    }
}

/// An older incident seen through its latest sample: the D thread to read first.
struct Sampled<'a> {
    incident: &'a Incident,
    now_ns: Option<u64>,
    primary: &'a ThreadSnapshot,
    d_threads: usize,
}

impl<'a> Sampled<'a> {
    fn of(incident: &'a Incident, sample: &'a Sample) -> Option<Sampled<'a>> {
        let now_ns = sample_monotonic(sample);
        let d: Vec<&ThreadSnapshot> = sample
            .snapshot
            .threads
            .iter()
            .filter(|t| t.state == "D")
            .collect();
        Some(Sampled {
            incident,
            now_ns,
            primary: primary_thread(incident, &d, now_ns)?,
            d_threads: d.len(),
        })
    }
}

/// The verdict from the latest sample, clause by clause.
const SAMPLE_CLAUSES: &[fn(&Sampled) -> Option<String>] = &[
    sampled_thread_clause,
    sampled_breadcrumb_clause,
    more_in_d_clause,
];

fn sampled_thread_clause(s: &Sampled) -> Option<String> {
    let mut out = format!("thread {} {}", s.primary.tid, code(&s.primary.comm));
    match d_for_ns(s.incident, s.primary.tid, s.now_ns) {
        Some(ns) => write!(out, " has been in D for {}", duration(ns)).unwrap(),
        None => out.push_str(" is in D"),
    }
    out.push_str(&where_blocked(s.primary));
    Some(out)
}

fn sampled_breadcrumb_clause(s: &Sampled) -> Option<String> {
    breadcrumb_or_no_ring(s.incident, s.primary.tid, s.now_ns)
}

fn more_in_d_clause(s: &Sampled) -> Option<String> {
    let others = s.d_threads.saturating_sub(1);
    (others > 0).then(|| format!("{others} more thread{} in D", plural(others)))
}

/// The breadcrumb clause, or "no breadcrumb ring" when the process had none.
fn breadcrumb_or_no_ring(incident: &Incident, tid: i32, now_ns: Option<u64>) -> Option<String> {
    match breadcrumb_clause(incident, tid, now_ns) {
        Some(clause) => Some(clause),
        None if incident.ring.is_none() => Some("no breadcrumb ring".into()),
        None => None,
    }
}

/// Threads judged wedged with their evidence as of detection, the one to read first first: longest in D,
/// then the main thread, then the lowest tid.
pub(crate) fn judged_threads(incident: &Incident) -> Vec<(&WedgedThread, &ThreadSnapshot)> {
    let mut judged: Vec<(&WedgedThread, &ThreadSnapshot)> = incident
        .wedged_threads
        .iter()
        .filter_map(|w| Some((w, w.at_detection.as_ref()?)))
        .collect();
    // A thread that waits behind another judged thread is never read first: the one it waits for is. (An RM
    // lock's likely holder is often not wedged itself, running or pinning: then the waiter is the story.)
    let judged_tids: Vec<i32> = judged.iter().map(|(w, _)| w.tid).collect();
    judged.sort_by_key(|(w, t)| {
        (
            t.blocked_behind.iter().any(|h| judged_tids.contains(h)),
            w.d_since.monotonic_ns.unwrap_or(u64::MAX),
            w.tid != incident.process.pid,
            w.tid,
        )
    });
    judged
}

/// Tids of the threads that wait behind `tid` (`blocked_behind`), as judged at detection or in the latest sample.
pub(crate) fn waiting_behind(incident: &Incident, tid: i32) -> Vec<i32> {
    let mut tids: Vec<i32> = incident
        .wedged_threads
        .iter()
        .filter_map(|w| w.at_detection.as_ref())
        .chain(
            incident
                .latest_sample()
                .into_iter()
                .flat_map(|s| s.snapshot.threads.iter()),
        )
        .filter(|t| t.blocked_behind.contains(&tid))
        .map(|t| t.tid)
        .collect();
    tids.sort_unstable();
    tids.dedup();
    tids
}

/// What the thread others wait behind is doing, in words: "page fault on a frozen filesystem".
fn holder_text(t: &ThreadSnapshot) -> String {
    match t.site.as_deref() {
        Some(site) if site.starts_with("page fault") && site.contains("filesystem freeze") => {
            "page fault on a frozen filesystem".to_string()
        }
        Some(site) => plain(site),
        None => "in a page fault".to_string(),
    }
}

/// The latest moment the incident knows about (monotonic): its newest sample, detection, resolution or the
/// watcher's exit.
fn last_look_ns(incident: &Incident) -> Option<u64> {
    let e = &incident.episode;
    incident
        .latest_sample()
        .and_then(sample_monotonic)
        .into_iter()
        .chain(incident.wedged_threads.iter().filter_map(|w| {
            w.detected_at
                .as_ref()
                .and_then(|d| d.monotonic_ns)
                .max(w.fate_at.as_ref().and_then(|f| f.monotonic_ns))
        }))
        .chain(e.resolved_at.as_ref().and_then(|t| t.monotonic_ns))
        .chain(e.watcher_exited_at.as_ref().and_then(|t| t.monotonic_ns))
        .max()
}

/// How long a judged thread was (or has been, so far) in D.
fn in_d_ns(incident: &Incident, w: &WedgedThread) -> Option<u64> {
    if let Some(s) = w.in_d_s.filter(|s| s.is_finite() && *s >= 0.0) {
        return Some((s * 1e9) as u64);
    }
    last_look_ns(incident)?.checked_sub(w.d_since.monotonic_ns?)
}

/// A judged thread's fate in words.
pub(crate) fn fate_text(incident: &Incident, w: &WedgedThread) -> String {
    let how_long = in_d_ns(incident, w)
        .map(duration)
        .unwrap_or_else(|| "? s".into());
    let at = w
        .fate_at
        .as_ref()
        .map(|t| format!(" ({})", time_text(t)))
        .unwrap_or_default();
    match w.fate {
        ThreadFate::Wedged => format!("still in D at the last look, {how_long} so far"),
        ThreadFate::Resolved => format!("left D after {how_long}{at}"),
        ThreadFate::Exited => format!("exited after {how_long} in D{at}"),
        ThreadFate::StillWedgedAtExit => {
            format!("still in D after {how_long} when wedge-capture exited{at}")
        }
        ThreadFate::Unknown => "unknown".into(),
    }
}

/// ` in ioctl `X` on `/dev/…``, ` in syscall `write` at `wchan``, or ` at `wchan``.
pub(crate) fn where_blocked(t: &ThreadSnapshot) -> String {
    if let Some(ioctl) = &t.ioctl {
        let name = ioctl.name.clone().unwrap_or_else(|| ioctl.request.clone());
        let dev = ioctl
            .fd_target
            .clone()
            .unwrap_or_else(|| format!("fd {}", ioctl.fd));
        let operation = ioctl
            .argument
            .as_ref()
            .and_then(|a| a.operation.clone().or_else(|| a.summary.clone()))
            .map(|op| format!(" ({})", plain(&op)))
            .unwrap_or_default();
        return format!(" in ioctl {} on {}{operation}", code(&name), code(&dev));
    }
    let wchan = t.wchan.as_deref().filter(|w| !w.is_empty() && *w != "0");
    let mut out = String::new();
    if let Some(SyscallInfo::Blocked { nr, name, .. }) = &t.syscall {
        if *nr >= 0 {
            let name = name.clone().unwrap_or_else(|| format!("#{nr}"));
            write!(out, " in syscall {}", code(&name)).unwrap();
            if let Some(target) = t.syscall_files.iter().find_map(|f| f.target.as_deref()) {
                write!(out, " on {}", code(target)).unwrap();
            }
        } else if let Some(site) = &t.site {
            // A page fault (nr -1): the site says more than "outside a syscall".
            write!(out, " in {}", plain(site)).unwrap();
            return out;
        } else {
            out.push_str(" outside a syscall");
        }
    }
    if let Some(w) = wchan {
        write!(out, " at {}", code(w)).unwrap();
    } else if let Some(site) = &t.site {
        write!(out, " ({})", plain(site)).unwrap();
    }
    out
}

pub(crate) fn breadcrumb_clause(
    incident: &Incident,
    tid: i32,
    now_ns: Option<u64>,
) -> Option<String> {
    let ring = incident.ring.as_ref()?;
    let own = ring
        .in_flight
        .iter()
        .chain(incident.extra_rings.iter().flat_map(|r| &r.in_flight))
        .find(|f| i64::from(f.tid) == i64::from(tid));
    // Another thread's call stands in only when it may be the cause: a holder the wait graph names first,
    // never a thread the graph shows waiting (a victim's call is no culprit).
    let graph = incident.wait_graph.as_ref();
    let waiters = graph.map(|g| g.waiter_tids()).unwrap_or_default();
    let holders = graph.map(|g| g.holder_tids()).unwrap_or_default();
    let other = |f: &&InFlight| {
        let t = i32::try_from(f.tid).unwrap_or(i32::MIN);
        !waiters.contains(&t)
    };
    let holding = |f: &&InFlight| {
        let t = i32::try_from(f.tid).unwrap_or(i32::MIN);
        holders.contains(&t)
    };
    if let Some(f) = own
        .or_else(|| {
            ring.in_flight
                .iter()
                .filter(holding)
                .max_by_key(|f| in_flight_age(f, now_ns))
        })
        .or_else(|| {
            ring.in_flight
                .iter()
                .filter(other)
                .max_by_key(|f| in_flight_age(f, now_ns))
        })
    {
        let age = in_flight_age(f, now_ns)
            .map(|ns| format!(" {} ago", duration(ns)))
            .unwrap_or_default();
        let other = if i64::from(f.tid) == i64::from(tid) {
            String::new()
        } else {
            format!(" on thread {}", f.tid)
        };
        return Some(format!(
            "last breadcrumb {}{other} entered{age} and never returned",
            code(&call_text(&f.call, &f.args, &f.label))
        ));
    }
    let last = ring
        .records
        .iter()
        .rev()
        .find(|r| i64::from(r.tid) == i64::from(tid))
        .or_else(|| {
            ring.records
                .iter()
                .rev()
                .find(|r| !waiters.contains(&i32::try_from(r.tid).unwrap_or(i32::MIN)))
        })?;
    let age = now_ns
        .and_then(|now| now.checked_sub(last.monotonic_ns))
        .map(|ns| format!(" {} before the sample", duration(ns)))
        .unwrap_or_default();
    let what = match last.kind {
        RecordKind::Enter => "entered",
        RecordKind::Exit => "returned",
    };
    Some(format!(
        "no call in flight; last breadcrumb {} {what}{age}",
        code(&call_text(&last.call, &last.args, &last.label))
    ))
}

/// The call in flight on thread `tid` in any ring of the process.
pub(crate) fn in_flight_of(incident: &Incident, tid: i32) -> Option<&InFlight> {
    incident
        .ring
        .iter()
        .chain(&incident.extra_rings)
        .flat_map(|r| &r.in_flight)
        .find(|f| i64::from(f.tid) == i64::from(tid))
}

pub(crate) fn in_flight_age(f: &InFlight, now_ns: Option<u64>) -> Option<u64> {
    f.age_ns
        .or_else(|| now_ns?.checked_sub(f.entered_monotonic_ns))
}

/// The thread a reader should look at first: longest in D, then the main thread, then the lowest tid.
pub(crate) fn primary_thread<'a>(
    incident: &Incident,
    d: &[&'a ThreadSnapshot],
    now_ns: Option<u64>,
) -> Option<&'a ThreadSnapshot> {
    d.iter().copied().max_by_key(|t| {
        (
            d_for_ns(incident, t.tid, now_ns).unwrap_or(0),
            t.tid == incident.process.pid,
            -t.tid,
        )
    })
}

pub(crate) fn d_for_ns(incident: &Incident, tid: i32, now_ns: Option<u64>) -> Option<u64> {
    let since = incident
        .wedged_threads
        .iter()
        .find(|w| w.tid == tid)?
        .d_since
        .monotonic_ns?;
    now_ns?.checked_sub(since)
}

pub(crate) fn sample_monotonic(sample: &Sample) -> Option<u64> {
    sample
        .taken_at
        .monotonic_ns
        .or((sample.snapshot.monotonic_ns > 0).then_some(sample.snapshot.monotonic_ns))
}

/// ` (from train.py:142 `optimizer.step()`)`: the judged thread's innermost Python frame, when known.
pub(crate) fn python_clause(w: &WedgedThread) -> Option<String> {
    let frame = w.python_stack.as_ref()?.first()?;
    Some(format!(" (from {})", frame_with_code(frame)))
}

fn frame_with_code(frame: &PythonFrame) -> String {
    let name = frame.file.rsplit('/').next().unwrap_or(&frame.file);
    let place = match frame.line {
        Some(line) => format!("{name}:{line}"),
        None => name.to_string(),
    };
    match &frame.code {
        Some(text) if !text.is_empty() => format!("{} {}", code(&place), code(text)),
        _ => format!("{} in {}", code(&place), code(&frame.function)),
    }
}

#[cfg(test)]
mod xid_tests {
    use super::*;
    use crate::model::{EpisodeStatus, Timestamp, WedgedThread};

    fn wedged_at(d_since_s: u64) -> Incident {
        let mut incident = Incident::new(4242);
        incident.detected_at = Timestamp {
            wall: Some(
                chrono::DateTime::parse_from_rfc3339("2026-12-07T12:00:00Z")
                    .unwrap()
                    .with_timezone(&chrono::Utc),
            ),
            monotonic_ns: Some((d_since_s + 5) * 1_000_000_000),
            boottime_ns: None,
        };
        incident.wedged_threads.push(WedgedThread {
            tid: 4242,
            comm: "python3".into(),
            d_since: Timestamp::monotonic(d_since_s * 1_000_000_000),
            detected_at: Some(incident.detected_at.clone()),
            at_detection: Some(capture::ThreadSnapshot {
                tid: 4242,
                comm: "python3".into(),
                state: "D".into(),
                ..Default::default()
            }),
            ..WedgedThread::default()
        });
        incident
    }

    fn xid_at(line: &str, us: u64) -> capture::xid::XidEvent {
        let mut e = capture::xid::parse_xid_line(line.as_bytes()).unwrap();
        e.kernel_time_us = Some(us);
        e
    }

    #[test]
    fn the_latest_xid_before_or_during_the_wedge_is_in_the_verdict() {
        let mut incident = wedged_at(1000);
        // Long before the wedge: not this wedge.
        incident.xids.push(xid_at(
            "NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=old, Graphics Exception",
            100_000_000,
        ));
        assert!(
            !verdict(&incident).contains("Xid"),
            "{}",
            verdict(&incident)
        );
        // 3 s before the thread entered D.
        incident.xids.push(xid_at(
            "NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus.",
            997_000_000,
        ));
        let v = verdict(&incident);
        assert!(
            v.contains("latest `Xid 79 (GPU has fallen off the bus)` on `0000:3b:00`, 3.0 s before the thread entered D (2026-12-07T11:59:52.000Z), printed for this process"),
            "{v}"
        );
        // Two seconds into the wedge, for another process: the latest wins, and the count says there were two.
        incident.xids.push(xid_at(
            "NVRM: Xid (PCI:0000:3b:00): 48, pid=77, name=other, DBE",
            1_002_000_000,
        ));
        let v = verdict(&incident);
        assert!(
            v.contains("latest `Xid 48 (double-bit (uncorrectable) ECC error)`"),
            "{v}"
        );
        assert!(v.contains("2.0 s into the wedge"), "{v}");
        assert!(
            v.contains("printed for pid 77 `other` (2 Xid lines in all)"),
            "{v}"
        );
        // After the episode ended: not this wedge.
        incident.episode.status = EpisodeStatus::Resolved;
        incident.wedged_threads[0].fate = crate::model::ThreadFate::Resolved;
        incident.wedged_threads[0].fate_at = Some(Timestamp::monotonic(1_001_000_000_000));
        incident.xids.pop();
        incident.xids.push(xid_at(
            "NVRM: Xid (PCI:0000:3b:00): 48, pid=77, name=other, DBE",
            1_100_000_000,
        ));
        let v = verdict(&incident);
        assert!(v.contains("latest `Xid 79"), "{v}");
    }
}
