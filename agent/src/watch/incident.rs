//! The episode lifecycle: what happens when the tracker declares a wedge, and how an episode's incident
//! evolves (open, update, retry, resolve, gone). What an incident holds is gathered by the stages of
//! [`super::stages::STAGES`]; this module decides when each phase runs and writes.
//!
//! Detection and capture are two sides ([`super::workers`]): on the watch loop, the minimal stages
//! (process, threads: reads that cannot hang) go into a minimal `incident.json` that is durable in the scan
//! that judged the wedge; the rest of the capture (the safe stages, an update, the risky stages) is a
//! [`CaptureJob`] for the capture workers, queued fairly per tenant ([`super::queue`]). The watch loop
//! alone writes incident.json: it merges each worker report into the episode ([`changes::merged`]: the
//! worker's copy with every change the loop made meanwhile replayed) and writes it; the final report
//! finishes the incident (`complete=true`, report.md). One incident per episode: later wedged threads of
//! the same process and periodic re-samples update it; when every wedged thread left D it is closed as
//! resolved, once its capture is back. The verdict is computed in one place, `set_verdict`, called by the
//! two functions every durable write goes through (`create`, `write`), in [`writes`].
//!
//! No wedge is lost to a full disk: an episode whose first write fails stays in memory with the evidence
//! as of detection (the snapshot taken then) and every write that failed is retried at each tick until it
//! lands ([`CaptureEvent::WritePending`] once, then [`CaptureEvent::Landed`] with the delay). A wedge whose
//! process or thread (tid + start time) is gone by the time the capture begins yields no incident, only
//! [`CaptureEvent::Gone`] with a counter.

//!
//! Map: this module (open, update, persist, merge the workers' reports), [`writes`] (every durable write and
//! its verdict), [`changes`] (what the loop changed while a job ran), [`adopt`] (episodes an earlier watcher
//! left), [`on_demand`] (SIGUSR1 incidents), [`stop`] (the end of watching), [`super::wedge::Wedge`] (what
//! opens an episode).
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use capture::ProcRoot;
use reports::model::{HostInfo, Incident, Sample, ThreadFate, Timestamp, WedgedThread};
use reports::store::write::IncidentHandle;
use reports::store::Store;

use super::queue::tenant_of;
use super::stages::context::{Capture, SkippedStage};
use super::stages::{self, Phase};
use super::wedge::Wedge;
use super::workers::{CaptureJob, CapturePool, WorkerReport};
use crate::host::identity::HostIdentity;
use crate::probe::ProbeRunner;
use changes::{apply, merged, Change};
use hourly_cap::HourlyCap;
use writes::{create, finish_on_demand, write, write_failure_reason};

mod adopt;
mod changes;
mod hourly_cap;
mod on_demand;
mod stop;
mod writes;

pub use super::capture_settings::CaptureSettings;
use super::event::CaptureEvent;

/// One wedge episode of one process, from detection until its last state is durable.
struct Episode {
    /// None until the first durable write succeeded.
    handle: Option<IncidentHandle>,
    incident: Incident,
    /// tid → first scan that saw it in D (monotonic ns).
    wedged: BTreeMap<i32, u64>,
    /// The thread whose wedge opened the episode.
    first_tid: i32,
    started_ns: u64,
    /// The scan that detected the wedge.
    detected: Instant,
    last_sample: Instant,
    /// The rest of the capture (ring, kernel log, host context, probes) was queued: it follows the first
    /// durable write (the ring copy is a file of the incident).
    captured: bool,
    /// The capture job in flight (queued or running), if any.
    job: Option<u64>,
    /// Every change the loop made to `incident` since the job in flight took its copy: replayed on the
    /// copy the worker sends back.
    changes: Vec<Change>,
    /// Stages the capture must not run (an earlier agent died during them).
    skip: Vec<SkippedStage>,
    /// The store's quota removed the incident: nothing of it is written again.
    dropped: bool,
    /// The capture's last step: write report.md and complete=true.
    complete_wanted: bool,
    /// report.md and complete=true are durable.
    finished: bool,
    /// The in-memory incident holds changes that are not durable yet.
    unwritten: bool,
    /// Why the latest write failed, while writes fail (the alarm is raised once per outage).
    write_failure: Option<String>,
    /// The first failure of the current outage: what `Landed` reports.
    outage_reason: Option<String>,
    killed: Option<bool>,
    /// Every wedged thread left D or exited; `Resolved` is reported once that state is durable.
    resolved_after: Option<Duration>,
}

impl Episode {
    fn pending_work(&self) -> bool {
        if self.dropped {
            return self.job.is_some();
        }
        self.handle.is_none()
            || self.unwritten
            || (self.complete_wanted && !self.finished)
            || self.job.is_some()
    }

    /// A change of the watch loop: applied now, and replayed on the worker's copy when a capture is in
    /// flight.
    fn change(&mut self, change: Change) {
        apply(&mut self.incident, &change);
        if self.job.is_some() {
            self.changes.push(change);
        }
    }

    /// A fresh episode state for an incident (not yet written, nothing captured).
    fn new(incident: Incident, first_tid: i32, started_ns: u64, detected: Instant) -> Episode {
        Episode {
            handle: None,
            incident,
            wedged: BTreeMap::new(),
            first_tid,
            started_ns,
            detected,
            last_sample: Instant::now(),
            captured: false,
            job: None,
            changes: Vec::new(),
            skip: Vec::new(),
            dropped: false,
            complete_wanted: false,
            finished: false,
            unwritten: true,
            write_failure: None,
            outage_reason: None,
            killed: None,
            resolved_after: None,
        }
    }
}

/// An on-demand capture whose job is in flight: its handle and why it was asked for.
struct OnDemand {
    pid: i32,
    handle: IncidentHandle,
    reason: String,
}

/// Turns wedges into incidents.
pub struct Capturer {
    settings: CaptureSettings,
    store: Store,
    /// The template of every capture's probe runner: the stuck children, the stop request and the
    /// timeout counter they share.
    probes: ProbeRunner,
    /// The capture side: workers behind a queue fair per tenant.
    pool: CapturePool,
    /// On-demand captures in flight, by job id.
    on_demand: BTreeMap<u64, OnDemand>,
    host: HostIdentity,
    episodes: BTreeMap<i32, Episode>,
    /// Episodes that ended while some of their writes were still failing: retried at every tick.
    closing: Vec<Episode>,
    /// Wedges whose process or thread was gone before the capture began.
    gone_before_capture: u64,
    /// The watcher's pre-wedge history of a process about to open an episode (see [`Capturer::offer_history`]).
    pending_history: BTreeMap<i32, Vec<reports::model::HistorySample>>,
    /// When the incidents of the last hour were opened (`max_incidents_per_hour`).
    opened_last_hour: HourlyCap,
}

fn now_mono_ns() -> u64 {
    Timestamp::now().monotonic_ns.unwrap_or(0)
}

/// Whether thread `tid` of `pid` is still the thread with this start time (not exited, tid not reused).
fn same_thread(root: &ProcRoot, pid: i32, tid: i32, start_time: u64) -> bool {
    root.read_task_stat(pid, tid)
        .is_ok_and(|stat| stat.starttime == start_time && stat.state != 'Z' && stat.state != 'X')
}

/// What an incident path looks like before its first write succeeded.
const UNWRITTEN: &str = "(not written yet)";

impl Capturer {
    pub fn new(settings: CaptureSettings, store: Store) -> Capturer {
        let probes = ProbeRunner::new(settings.watch.probe_timeout, settings.max_stuck_probes);
        let host = HostIdentity::read(&settings.proc_root);
        let pool = CapturePool::new(
            settings.capture_workers,
            settings.capture_deadline,
            settings.max_queued_per_tenant,
        );
        Capturer {
            settings,
            store,
            probes,
            pool,
            on_demand: BTreeMap::new(),
            host,
            episodes: BTreeMap::new(),
            closing: Vec::new(),
            gone_before_capture: 0,
            pending_history: BTreeMap::new(),
            opened_last_hour: HourlyCap::default(),
        }
    }

    /// Pids of our probe children that are still stuck (never watch or reap them elsewhere).
    pub fn probe_children(&self) -> Vec<i32> {
        self.probes.stuck_children().pids()
    }

    /// From now on every capture's probes stop waiting as soon as `flag` is true (a stop request).
    pub fn set_cancel(&mut self, flag: std::sync::Arc<std::sync::atomic::AtomicBool>) {
        self.probes.set_cancel(flag);
    }

    /// Probes that ran into their deadline since the start, every capture together (the metrics).
    pub fn probe_timeouts(&self) -> u64 {
        self.probes.timeouts()
    }

    /// Captures waiting in the queue and running in the workers (the metrics).
    pub fn captures_pending(&self) -> (usize, usize) {
        self.pool.pending()
    }

    /// Whether an episode is open for `pid`.
    pub fn is_open(&self, pid: i32) -> bool {
        self.episodes.contains_key(&pid)
    }

    /// Paths of the incidents of open episodes (an episode whose first write has not landed yet shows
    /// as `<output dir>/(not written yet)`).
    pub fn open_incidents(&self) -> Vec<(i32, PathBuf)> {
        self.episodes
            .iter()
            .map(|(&pid, e)| {
                let path = match &e.handle {
                    Some(handle) => handle.path().to_path_buf(),
                    None => self.store.dir().join(UNWRITTEN),
                };
                (pid, path)
            })
            .collect()
    }

    /// The incidents of open episodes with a thread still wedged (the metrics' wedged-process series).
    pub fn wedged_incidents(&self) -> impl Iterator<Item = &Incident> + '_ {
        self.episodes
            .values()
            .map(|e| &e.incident)
            .filter(|i| i.wedged_threads.iter().any(|w| w.fate.is_wedged()))
    }

    /// Ring directories searched for a process's ring (the daemon's reload; captures queued later use them).
    pub fn set_ring_dirs(&mut self, dirs: Vec<PathBuf>) {
        self.settings.ring_dirs = dirs;
    }

    fn host_info(&self) -> HostInfo {
        HostInfo {
            hostname: self.host.hostname.clone(),
            boot_id: self.host.boot_id.clone().unwrap_or_default(),
            kernel_release: self.host.kernel.clone(),
            arch: self.host.arch.clone(),
            nvidia_driver_version: None,
        }
    }

    /// The minimal stages on the watch loop (process, threads: reads that cannot hang).
    fn run_minimal(&mut self, pid: i32, incident: &mut Incident, since_ns: u64, wedge: bool) {
        let mut capture = Capture {
            settings: &self.settings,
            pid,
            incident,
            handle: None,
            probes: &mut self.probes,
            since_ns,
            wedge,
            episode_ended: false,
            killed: None,
            maps: None,
            capture_deadline: None,
            skip: &[],
        };
        stages::run_phase(stages::STAGES, Phase::Minimal, &mut capture);
    }

    /// The rest of a capture, as a job for the workers. The tenant is read now (its pod, container or
    /// uid: see [`tenant_of`]).
    fn job(
        &mut self,
        pid: i32,
        incident: &Incident,
        handle: &IncidentHandle,
        kind: JobKind,
        skip: Vec<SkippedStage>,
    ) -> CaptureJob {
        let uid = self
            .settings
            .proc_root
            .read_task_status(pid, pid)
            .ok()
            .and_then(|status| status.uid.get(1).copied());
        let tenant = tenant_of(incident, uid);
        CaptureJob {
            id: self.pool.next_id(),
            pid,
            probes: self.probes.for_target(pid, &tenant),
            tenant,
            incident: incident.clone(),
            files: handle.files(),
            settings: self.settings.clone(),
            since_ns: kind.since_ns,
            wedge: kind.wedge,
            episode_ended: kind.episode_ended,
            skip,
            queued_at: Instant::now(),
        }
    }

    fn queue_full_reason(&self) -> String {
        format!(
            "not run: {} captures of this tenant were already waiting (the bound per tenant); the minimal \
             incident above is what was captured",
            self.settings.max_queued_per_tenant
        )
    }

    /// A thread was judged wedged: a new episode for its process, or one more thread of the open one.
    pub fn on_wedged(&mut self, wedge: &Wedge, out: &mut Vec<CaptureEvent>) {
        let (pid, tid) = (wedge.pid, wedge.tid);
        if let Some(mut episode) = self.episodes.remove(&pid) {
            if episode.wedged.contains_key(&tid) {
                // Already part of the episode (an adopted thread): nothing new.
                self.episodes.insert(pid, episode);
                return;
            }
            episode.wedged.insert(tid, wedge.d_since_ns);
            episode.change(Change::AddWedged(Box::new(WedgedThread {
                tid,
                start_time: Some(wedge.start_time),
                comm: wedge.comm.clone(),
                d_since: Timestamp::at_monotonic(wedge.d_since_ns),
                detected_at: Some(Timestamp::now()),
                ..WedgedThread::default()
            })));
            episode.change(Change::timeline(format!(
                "thread {tid} {} also wedged",
                capture::escape::code(&wedge.comm)
            )));
            Self::resample(&self.settings, &mut episode);
            episode.change(Change::KeepEvidence(tid));
            if episode.captured {
                episode.change(Change::LateUserFrame(tid));
            }
            episode.unwritten = true;
            self.advance(pid, &mut episode, out);
            self.episodes.insert(pid, episode);
            return;
        }
        self.open(wedge, out);
    }

    /// The watcher's samples of `pid` from before its wedge, for the episode the next [`Capturer::on_wedged`]
    /// opens (written with its first write, as the incident's `history`).
    pub fn offer_history(&mut self, pid: i32, history: Vec<reports::model::HistorySample>) {
        self.pending_history.insert(pid, history);
    }

    /// Wedges whose capture found the process or the thread gone (no incident was written for them).
    #[cfg(test)]
    pub fn gone_before_capture(&self) -> u64 {
        self.gone_before_capture
    }

    /// Detected wedges of which nothing is durable yet: (pid, wedged tid, detected, why the write fails).
    pub fn unwritten(&self) -> Vec<(i32, i32, Instant, String)> {
        self.episodes
            .iter()
            .map(|(&pid, e)| (pid, e))
            .chain(self.closing.iter().map(|e| (e.incident.process.pid, e)))
            .filter(|(_, e)| e.handle.is_none())
            .map(|(pid, e)| {
                (
                    pid,
                    e.first_tid,
                    e.detected,
                    e.write_failure
                        .clone()
                        .unwrap_or_else(|| "not attempted".to_string()),
                )
            })
            .collect()
    }

    /// The first wedged thread of a process: a new episode, its minimal incident durable now.
    fn open(&mut self, wedge: &Wedge, out: &mut Vec<CaptureEvent>) {
        let &Wedge {
            pid,
            tid,
            start_time,
            ref comm,
            d_since_ns,
            detected,
        } = wedge;
        let history = self.pending_history.remove(&pid).unwrap_or_default();
        let cap = self.settings.watch.max_incidents_per_hour;
        if let Some(refused) = self.opened_last_hour.refuse(cap, wedge) {
            out.push(refused);
            return;
        }
        let root = &self.settings.proc_root;
        // Under fork/exit churn a thread can pass the wedge test in its last moments, or its tid can already
        // belong to another thread: an incident for it would be empty. Checked before and after the snapshot.
        if !same_thread(root, pid, tid, start_time) {
            self.gone(pid, tid, out);
            return;
        }
        let mut incident = Incident::new(pid);
        incident.written_by = format!("wedge-capture {}", env!("CARGO_PKG_VERSION"));
        incident.episode.started_at = Timestamp::at_monotonic(d_since_ns);
        incident.host = self.host_info();
        incident.history = history;
        // With the boot id and the pid, the process's identity: what a later watcher (or npd-check) checks.
        incident.process.start_time = root.read_stat(pid).ok().map(|stat| stat.starttime);
        incident.wedged_threads.push(WedgedThread {
            tid,
            start_time: Some(start_time),
            comm: comm.to_string(),
            d_since: Timestamp::at_monotonic(d_since_ns),
            detected_at: Some(Timestamp::now()),
            ..WedgedThread::default()
        });
        incident.push_timeline(format!(
            "thread {tid} {} judged wedged: in D without progress for {:.1} s",
            capture::escape::code(comm),
            now_mono_ns().saturating_sub(d_since_ns) as f64 / 1e9
        ));
        self.run_minimal(pid, &mut incident, d_since_ns, true);
        if incident.samples.is_empty()
            || !same_thread(&self.settings.proc_root, pid, tid, start_time)
        {
            self.gone(pid, tid, out);
            return;
        }
        changes::keep_evidence(&mut incident, tid);
        self.opened_last_hour.record(cap, detected);
        let mut episode = Episode::new(incident, tid, d_since_ns, detected);
        episode.wedged.insert(tid, d_since_ns);
        self.advance(pid, &mut episode, out);
        self.episodes.insert(pid, episode);
    }

    fn gone(&mut self, pid: i32, tid: i32, out: &mut Vec<CaptureEvent>) {
        self.gone_before_capture += 1;
        out.push(CaptureEvent::Gone {
            pid,
            tid,
            total: self.gone_before_capture,
        });
    }

    /// Take the episode as far as it can go now: first durable write, then the rest of the capture queued,
    /// then whatever state is not durable yet. Called at detection and again at every tick while work is
    /// left.
    fn advance(&mut self, pid: i32, episode: &mut Episode, out: &mut Vec<CaptureEvent>) {
        if episode.handle.is_none() {
            // 1. Durable minimal incident (the evidence as of detection).
            match create(&self.store, &mut episode.incident, None) {
                Ok(handle) => {
                    let durable_after = episode.detected.elapsed();
                    let path = handle.path().to_path_buf();
                    episode.incident.id = handle.id().to_string();
                    episode.handle = Some(handle);
                    let mut line = format!(
                        "minimal incident durable {} ms after detection",
                        durable_after.as_millis()
                    );
                    if let Some(why) = &episode.outage_reason {
                        line = format!(
                            "minimal incident durable {:.1} s after detection; {why} (kept in memory, written \
                             as of detection, retried every interval)",
                            durable_after.as_secs_f64()
                        );
                    }
                    episode.incident.push_timeline(line);
                    episode.unwritten = true;
                    out.push(CaptureEvent::Opened {
                        pid,
                        tid: episode.first_tid,
                        path,
                        durable_after,
                    });
                }
                Err(err) => {
                    let why = write_failure_reason(&err);
                    if episode.write_failure.is_none() {
                        out.push(CaptureEvent::WritePending {
                            pid,
                            tid: episode.first_tid,
                            message: format!(
                                "wedge of thread {} detected but its incident cannot be written under {} \
                                 ({why}): kept in memory, retried every interval",
                                episode.first_tid,
                                self.store.dir().display()
                            ),
                        });
                        episode.outage_reason = Some(why.clone());
                    }
                    episode.write_failure = Some(why);
                    return;
                }
            }
        }
        if !episode.captured {
            episode.captured = true;
            self.queue_capture(pid, episode);
        }
        self.persist(pid, episode, out);
    }

    /// Queue the rest of the capture (safe stages, update, risky stages) for the workers. A tenant whose
    /// queue is full gets its incident finished as it is, saying why.
    fn queue_capture(&mut self, pid: i32, episode: &mut Episode) {
        let Some(handle) = episode.handle.as_ref() else {
            return;
        };
        let ended = episode.resolved_after.is_some();
        let skip = std::mem::take(&mut episode.skip);
        let kind = JobKind {
            since_ns: episode.started_ns,
            wedge: true,
            episode_ended: ended,
        };
        let job = self.job(pid, &episode.incident, handle, kind, skip);
        let id = job.id;
        match self.pool.submit(job) {
            Ok(()) => {
                episode.job = Some(id);
                episode.changes.clear();
            }
            Err(_) => {
                let why = self.queue_full_reason();
                episode.change(Change::NotCaptured {
                    what: "capture".to_string(),
                    why,
                });
                Self::capture_done(episode, None);
            }
        }
    }

    /// The capture is over (its report merged, or given up): the incident is to be finished.
    fn capture_done(episode: &mut Episode, killed: Option<bool>) {
        episode.job = None;
        episode.changes.clear();
        episode.killed = killed;
        if !episode.incident.complete {
            episode.incident.push_timeline("capture complete");
            episode.incident.complete = true;
        }
        episode.complete_wanted = true;
        episode.unwritten = true;
    }

    /// Write whatever of the episode is not durable yet (finish, or update), and report it: `Completed`,
    /// `Resolved`, `Updated`; on failure one `Failed` per outage, and `Landed` when it ends.
    fn persist(&mut self, pid: i32, episode: &mut Episode, out: &mut Vec<CaptureEvent>) {
        let Some(handle) = episode.handle.as_mut() else {
            return;
        };
        if episode.dropped {
            episode.unwritten = false;
            return;
        }
        if !episode.unwritten && (!episode.complete_wanted || episode.finished) {
            return;
        }
        let path = handle.path().to_path_buf();
        let finishing = episode.complete_wanted && !episode.finished;
        if let Err(err) = write(handle, &mut episode.incident, finishing, None) {
            if let reports::Error::Dropped { why, .. } = &err {
                // The store's quota removed this incident (its tree had newer ones): writing it again would
                // only bring back what the quota took. Said once; the episode is followed no further on disk.
                out.push(CaptureEvent::Failed {
                    pid,
                    message: format!(
                        "the incident {} was removed by the store's quota ({why}); it is not written again",
                        path.display()
                    ),
                });
                episode.dropped = true;
                episode.unwritten = false;
                episode.complete_wanted = true;
                episode.finished = true;
                episode.write_failure = None;
                return;
            }
            let why = write_failure_reason(&err);
            if episode.write_failure.is_none() {
                out.push(CaptureEvent::Failed {
                    pid,
                    message: format!(
                        "cannot {} the incident {} ({why}): kept in memory, retried every interval",
                        if finishing { "finish" } else { "update" },
                        path.display()
                    ),
                });
                episode.outage_reason = Some(why.clone());
            }
            episode.write_failure = Some(why);
            return;
        }
        episode.unwritten = false;
        episode.write_failure = None;
        if let Some(why) = episode.outage_reason.take() {
            let after = episode.detected.elapsed();
            episode.change(Change::timeline(format!(
                "durable {:.1} s after detection; {why}",
                after.as_secs_f64()
            )));
            // The line above must be durable too; if this write fails the next tick retries it.
            if let Some(handle) = episode.handle.as_mut() {
                episode.unwritten = write(handle, &mut episode.incident, false, None).is_err();
            }
            out.push(CaptureEvent::Landed {
                pid,
                path: path.clone(),
                after,
                why,
            });
        }
        if finishing {
            episode.finished = true;
            out.push(CaptureEvent::Completed {
                pid,
                path: path.clone(),
                verdict: episode.incident.verdict.clone(),
                killed: episode.killed,
            });
        } else if episode.resolved_after.is_none() {
            out.push(CaptureEvent::Updated {
                pid,
                path: path.clone(),
            });
        }
        if let Some(after) = episode.resolved_after {
            if !episode.pending_work() {
                out.push(CaptureEvent::Resolved { pid, path, after });
            }
        }
    }

    /// A wedged thread left D (`ThreadFate::Resolved`) or vanished (`ThreadFate::Exited`), `in_d` after it was
    /// first seen in D.
    pub fn on_thread_done(
        &mut self,
        pid: i32,
        tid: i32,
        fate: ThreadFate,
        in_d: Duration,
        out: &mut Vec<CaptureEvent>,
    ) {
        let Some(mut episode) = self.episodes.remove(&pid) else {
            return;
        };
        if episode.wedged.remove(&tid).is_none() {
            self.episodes.insert(pid, episode);
            return;
        }
        let how = match fate {
            ThreadFate::Exited => format!("exited after {:.1} s in D", in_d.as_secs_f64()),
            _ => format!("left D after {:.1} s", in_d.as_secs_f64()),
        };
        episode.change(Change::Fate {
            tid,
            fate,
            at: Timestamp::now(),
            in_d,
        });
        episode.change(Change::timeline(format!("thread {tid} {how}")));
        episode.unwritten = true;
        if !episode.wedged.is_empty() {
            self.advance(pid, &mut episode, out);
            self.episodes.insert(pid, episode);
            return;
        }
        let after = Duration::from_nanos(now_mono_ns().saturating_sub(episode.started_ns));
        if self.settings.proc_root.exists(pid) {
            Self::resample(&self.settings, &mut episode);
        }
        episode.change(Change::Resolved {
            at: Timestamp::now(),
            after,
        });
        episode.change(Change::timeline(format!(
            "resolved after {} s",
            after.as_secs_f64().round() as u64
        )));
        episode.resolved_after = Some(after);
        self.advance(pid, &mut episode, out);
        if episode.pending_work() {
            self.closing.push(episode);
        }
    }

    /// Periodic work: the capture workers' reports merged and written, captures past their deadline given
    /// up, writes that failed retried, a new sample of open episodes every `resample_every`; stuck probe
    /// children reaped.
    pub fn tick(&mut self, out: &mut Vec<CaptureEvent>) {
        self.probes.reap_stuck();
        for report in self.pool.poll() {
            self.on_report(report, out);
        }
        for (id, pid, running) in self.pool.overdue(crate::defaults::CAPTURE_GIVE_UP_AFTER) {
            let why = format!(
                "the capture of pid {pid} was given up after {:.0} s (its total deadline is {} s): its \
                 worker did not come back; what the minimal incident holds is kept",
                running.as_secs_f64(),
                self.pool.deadline().as_secs()
            );
            self.on_report(WorkerReport::Failed { id, why }, out);
        }
        let pids: Vec<i32> = self.episodes.keys().copied().collect();
        for pid in pids {
            let Some(mut episode) = self.episodes.remove(&pid) else {
                continue;
            };
            // Not while a capture is in flight: its worker reads the kernel log itself.
            if episode.job.is_none()
                && episode.last_sample.elapsed() >= self.settings.watch.resample_every
            {
                Self::resample(&self.settings, &mut episode);
                episode.unwritten = true;
            }
            if episode.pending_work() {
                self.advance(pid, &mut episode, out);
            }
            self.episodes.insert(pid, episode);
        }
        let closing = std::mem::take(&mut self.closing);
        for mut episode in closing {
            let pid = episode.incident.process.pid;
            self.advance(pid, &mut episode, out);
            if episode.pending_work() {
                self.closing.push(episode);
            }
        }
    }

    /// A worker's report: merged into its episode (or on-demand incident) and written.
    fn on_report(&mut self, report: WorkerReport, out: &mut Vec<CaptureEvent>) {
        let id = report.id();
        if let Some(mut on_demand) = self.on_demand.remove(&id) {
            match report {
                WorkerReport::SafeDone { mut incident, .. } => {
                    // A richer incident.json before the slow part; what fails here is in the final write too.
                    let _ = write(
                        &mut on_demand.handle,
                        &mut incident,
                        false,
                        Some(&on_demand.reason),
                    );
                    self.on_demand.insert(id, on_demand);
                }
                WorkerReport::Finished { mut incident, .. } => finish_on_demand(
                    on_demand.pid,
                    &mut on_demand.handle,
                    &mut incident,
                    &on_demand.reason,
                    out,
                ),
                WorkerReport::Failed { why, .. } => {
                    // The minimal incident is what was captured.
                    let mut incident = match reports::store::read::read_incident(
                        &on_demand.handle.path().join(reports::layout::INCIDENT_FILE),
                    ) {
                        Ok(incident) => incident,
                        Err(_) => Incident::new(on_demand.pid),
                    };
                    incident.push_not_captured("capture", why);
                    incident.complete = true;
                    finish_on_demand(
                        on_demand.pid,
                        &mut on_demand.handle,
                        &mut incident,
                        &on_demand.reason,
                        out,
                    );
                }
            }
            return;
        }
        let (slot, mut episode) = match self.take_episode_of_job(id) {
            Some(found) => found,
            // Given up earlier, or its episode is gone: nothing to merge into.
            None => return,
        };
        let pid = episode.incident.process.pid;
        match report {
            WorkerReport::SafeDone { incident, .. } => {
                episode.incident = merged(*incident, &episode.changes);
                episode.unwritten = true;
            }
            WorkerReport::Finished {
                incident, killed, ..
            } => {
                episode.incident = merged(*incident, &episode.changes);
                Self::capture_done(&mut episode, killed);
            }
            WorkerReport::Failed { why, .. } => {
                episode.incident.push_not_captured("capture", why);
                Self::capture_done(&mut episode, None);
            }
        }
        self.advance(pid, &mut episode, out);
        match slot {
            Slot::Open => {
                self.episodes.insert(pid, episode);
            }
            Slot::Closing => {
                if episode.pending_work() {
                    self.closing.push(episode);
                }
            }
        }
    }

    /// The episode (open or closing) whose capture job is `id`, taken out.
    fn take_episode_of_job(&mut self, id: u64) -> Option<(Slot, Episode)> {
        if let Some(pid) = self
            .episodes
            .iter()
            .find(|(_, e)| e.job == Some(id))
            .map(|(&pid, _)| pid)
        {
            return self.episodes.remove(&pid).map(|e| (Slot::Open, e));
        }
        let at = self.closing.iter().position(|e| e.job == Some(id))?;
        Some((Slot::Closing, self.closing.remove(at)))
    }

    /// A new sample of the process; once the kernel log was first read (and no capture reads it now), it
    /// is read again so that its window runs until this update.
    fn resample(settings: &CaptureSettings, episode: &mut Episode) {
        if episode.captured && episode.job.is_none() {
            stages::kernel_log::refresh(
                settings,
                episode.started_ns,
                &mut episode.incident,
                episode.handle.as_ref().map(|h| h.files()).as_ref(),
            );
        }
        episode.last_sample = Instant::now();
        let pid = episode.incident.process.pid;
        match capture::snapshot_process(
            &settings.proc_root,
            pid,
            // Bounded like the first sample; every thread judged wedged listed in full.
            &stages::threads::sample_options(episode.wedged.keys().copied().collect()),
        ) {
            Ok(snapshot) => episode.change(Change::Sample {
                sample: Box::new(Sample {
                    taken_at: Timestamp::now(),
                    snapshot,
                    python_threads: Vec::new(),
                }),
                max: settings.max_samples,
            }),
            Err(err) => episode.change(Change::timeline(format!("new sample failed: {err}"))),
        }
    }
}

/// What kind of capture a job is.
#[derive(Debug, Clone, Copy)]
struct JobKind {
    /// When the wedge began (now, on demand): the kernel log is kept from before it.
    since_ns: u64,
    /// A wedge capture (the kill stage may act), not an on-demand one.
    wedge: bool,
    /// The episode ended before its first write landed.
    episode_ended: bool,
}

/// Where an episode was found.
enum Slot {
    Open,
    Closing,
}

#[cfg(test)]
mod tests;
