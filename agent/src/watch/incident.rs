//! The episode lifecycle: what happens when the tracker declares a wedge, and how an episode's incident
//! evolves (open, update, retry, resolve, gone). What an incident holds is gathered by the stages of
//! [`super::stages::STAGES`], run in table order; this module decides when each phase runs and writes.
//!
//! Order matters for "nothing lost": the minimal stages (process, threads: reads that cannot hang) go into
//! a minimal `incident.json` that is durable before anything slower runs; then the safe stages (rings,
//! kernel log, host context) and an update; then the risky stages (probes in sacrificial children with one
//! deadline, the optional kill); then the incident is finished (`complete=true`, report.md). One incident
//! per episode: later wedged threads of the same process and periodic re-samples update it; when every
//! wedged thread left D it is closed as resolved. The verdict is computed in one place, `set_verdict`,
//! called by the two functions every durable write goes through (`create`, `write`).
//!
//! No wedge is lost to a full disk: an episode whose first write fails stays in memory with the evidence
//! as of detection (the snapshot taken then) and every write that failed is retried at each tick until it
//! lands ([`CaptureEvent::WritePending`] once, then [`CaptureEvent::Landed`] with the delay). A wedge whose
//! process or thread (tid + start time) is gone by the time the capture begins yields no incident, only
//! [`CaptureEvent::Gone`] with a counter.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use capture::{ProcRoot, SnapshotOptions};
use reports::model::{
    EpisodeStatus, HostInfo, Incident, Sample, ThreadFate, Timestamp, WedgedThread,
};
use reports::store::{IncidentHandle, Store};

use super::stages::{self, not_captured, timeline, Capture, Phase};
use crate::host::identity::HostIdentity;
use crate::probe::ProbeRunner;

mod adopt;

pub use super::capture_settings::CaptureSettings;

/// What happened to an incident (printed by `run`, logged by the daemon).
#[derive(Debug, Clone, PartialEq)]
pub enum CaptureEvent {
    /// The minimal incident is durable.
    Opened {
        pid: i32,
        tid: i32,
        path: PathBuf,
        /// From the scan that detected the wedge to the durable minimal incident.
        durable_after: Duration,
    },
    /// Every part of the capture is written (complete=true).
    Completed {
        pid: i32,
        path: PathBuf,
        verdict: String,
        /// With --kill-on-wedge: whether the process died.
        killed: Option<bool>,
    },
    /// A new sample or a newly wedged thread was added.
    Updated { pid: i32, path: PathBuf },
    /// Every wedged thread left D (or exited).
    Resolved {
        pid: i32,
        path: PathBuf,
        after: Duration,
    },
    /// Something could not be written; the message says what. For a write of an open episode it is
    /// raised once per outage (the write is retried at every tick until it lands: see `Landed`).
    Failed { pid: i32, message: String },
    /// A wedge was detected but its first durable write failed (full or read-only output filesystem):
    /// the incident, with the evidence as of detection, is kept in memory and the write retried at every
    /// tick. Raised once per episode; `Opened` and `Landed` follow when the write succeeds.
    WritePending { pid: i32, tid: i32, message: String },
    /// Writes of an incident that had failed are durable now, `after` the detection; `why` says what held
    /// them up ("the output filesystem was full").
    Landed {
        pid: i32,
        path: PathBuf,
        after: Duration,
        why: String,
    },
    /// An episode an earlier watcher left open or still wedged at its exit was taken up: its thread is still
    /// in D, `in_d` since the episode began. Not a new incident (not counted again).
    Adopted {
        pid: i32,
        path: PathBuf,
        in_d: Duration,
    },
    /// An episode an earlier watcher left was closed without being watched to its end: `why` says how
    /// ("outcome unknown: not watched between … and …: the process is gone", or resolved while unwatched).
    Unwatched {
        pid: i32,
        path: PathBuf,
        why: String,
    },
    /// The process (or the wedged thread) was gone before its capture began: no incident is written.
    /// `total` counts such captures since the start.
    Gone { pid: i32, tid: i32, total: u64 },
}

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
    /// The ring, kernel log, host context and probes were captured (they follow the first durable write:
    /// the ring copy is a file of the incident).
    captured: bool,
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
        self.handle.is_none() || self.unwritten || (self.complete_wanted && !self.finished)
    }
}

/// Turns wedges into incidents.
pub struct Capturer {
    settings: CaptureSettings,
    store: Store,
    probes: ProbeRunner,
    host: HostIdentity,
    episodes: BTreeMap<i32, Episode>,
    /// Episodes that ended while some of their writes were still failing: retried at every tick.
    closing: Vec<Episode>,
    /// Wedges whose process or thread was gone before the capture began.
    gone_before_capture: u64,
    /// The watcher's pre-wedge history of a process about to open an episode (see [`Capturer::offer_history`]).
    pending_history: BTreeMap<i32, Vec<reports::model::HistorySample>>,
}

fn now_mono_ns() -> u64 {
    Timestamp::now().monotonic_ns.unwrap_or(0)
}

/// The verdict an incident is written with, from what it holds at this write; an on-demand incident says
/// so first ("on-demand capture (SIGUSR1): …"). Called only by [`create`] and [`write()`]: the verdict is
/// computed once per durable write, here.
fn set_verdict(incident: &mut Incident, on_demand: Option<&str>) {
    let verdict = reports::render::verdict(incident);
    incident.verdict = match (on_demand, &incident.episode.outcome_unknown) {
        (Some(reason), _) => format!("on-demand capture ({reason}): {verdict}"),
        (None, Some(why)) if incident.episode.status == EpisodeStatus::Unknown => {
            format!("{verdict}; outcome unknown: {why}")
        }
        (None, _) => verdict,
    };
}

/// An incident's first durable write.
fn create(
    store: &Store,
    incident: &mut Incident,
    on_demand: Option<&str>,
) -> Result<IncidentHandle, reports::Error> {
    set_verdict(incident, on_demand);
    store.create(incident)
}

/// Every later durable write: an update, or the final one (`finish`: complete=true, report.md).
fn write(
    handle: &mut IncidentHandle,
    incident: &mut Incident,
    finish: bool,
    on_demand: Option<&str>,
) -> Result<(), reports::Error> {
    set_verdict(incident, on_demand);
    if finish {
        handle.finish(incident)
    } else {
        handle.update(incident)
    }
}

/// What kind of capture a run of the stages belongs to.
#[derive(Debug, Clone, Copy)]
struct StageRun {
    /// When the wedge began (now, on demand): the kernel log is kept from before it.
    since_ns: u64,
    /// A wedge capture (the kill stage may act), not an on-demand one.
    wedge: bool,
    /// The episode ended before its first write landed.
    episode_ended: bool,
}

/// Why a durable write failed, in words for the log and the incident's timeline.
fn write_failure_reason(err: &reports::Error) -> String {
    let errno = match err {
        reports::Error::Io { source, .. } => source.raw_os_error(),
        _ => None,
    };
    match errno {
        Some(libc::ENOSPC) => "the output filesystem was full".to_string(),
        Some(libc::EDQUOT) => "the output filesystem's quota was exceeded".to_string(),
        Some(libc::EROFS) => "the output filesystem was read-only".to_string(),
        _ => format!("writing failed: {err}"),
    }
}

/// Whether thread `tid` of `pid` is still the thread with this start time (not exited, tid not reused).
fn same_thread(root: &ProcRoot, pid: i32, tid: i32, start_time: u64) -> bool {
    root.read_task_stat(pid, tid)
        .is_ok_and(|stat| stat.starttime == start_time && stat.state != 'Z' && stat.state != 'X')
}

/// Keep thread `tid`'s evidence as of detection: its record in the newest sample (taken at detection).
fn keep_evidence(incident: &mut Incident, tid: i32) {
    let Some(thread) = incident
        .latest_sample()
        .and_then(|s| s.snapshot.threads.iter().find(|t| t.tid == tid))
        .cloned()
    else {
        not_captured(
            incident,
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
            "judged wedged after the maps were read (read once per episode, in a sacrificial child)"
                .to_string()
        }));
    }
}

/// Record what became of a thread judged wedged.
fn set_fate(incident: &mut Incident, tid: i32, fate: ThreadFate, in_d: Duration) {
    if let Some(w) = incident
        .wedged_threads
        .iter_mut()
        .rev()
        .find(|w| w.tid == tid)
    {
        w.fate = fate;
        w.fate_at = Some(Timestamp::now());
        w.in_d_s = Some(in_d.as_secs_f64());
    }
}

/// What an incident path looks like before its first write succeeded.
const UNWRITTEN: &str = "(not written yet)";

impl Capturer {
    pub fn new(settings: CaptureSettings, store: Store) -> Capturer {
        let probes = ProbeRunner::new(settings.probe_timeout, settings.max_stuck_probes);
        let host = HostIdentity::read(&settings.proc_root);
        Capturer {
            settings,
            store,
            probes,
            host,
            episodes: BTreeMap::new(),
            closing: Vec::new(),
            gone_before_capture: 0,
            pending_history: BTreeMap::new(),
        }
    }

    /// Pids of our probe children that are still stuck (never watch or reap them elsewhere).
    pub fn probe_children(&self) -> Vec<i32> {
        self.probes.stuck_pids()
    }

    /// The runner, so a caller that reaps children can leave ours alone.
    pub fn probe_runner(&mut self) -> &mut ProbeRunner {
        &mut self.probes
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

    /// Ring directories searched for a process's ring (the daemon's reload).
    pub fn set_ring_dirs(&mut self, dirs: Vec<PathBuf>) {
        self.settings.ring_dirs = dirs;
    }

    /// Run the stages of `phase`, in table order, on `incident`; returns whether the kill stage killed.
    fn run_stages(
        &mut self,
        phase: Phase,
        pid: i32,
        incident: &mut Incident,
        handle: Option<&IncidentHandle>,
        run: StageRun,
    ) -> Option<bool> {
        let mut capture = Capture {
            settings: &self.settings,
            pid,
            incident,
            handle,
            probes: &mut self.probes,
            since_ns: run.since_ns,
            wedge: run.wedge,
            episode_ended: run.episode_ended,
            killed: None,
            maps: None,
        };
        stages::run_phase(stages::STAGES, phase, &mut capture);
        capture.killed
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

    /// An on-demand incident for `pid` (the daemon's SIGUSR1), whether or not it is wedged: every thread,
    /// the ring, the kernel log, host context and the risky probes, like a wedge capture, but outside any
    /// episode. The verdict and the timeline say it was asked for (`reason`).
    pub fn capture_on_demand(&mut self, pid: i32, reason: &str, out: &mut Vec<CaptureEvent>) {
        let detected = Instant::now();
        let on_demand = Some(reason);
        let mut incident = Incident::new(pid);
        incident.trigger = reports::model::Trigger::OnDemand;
        incident.written_by = format!("wedge-capture {}", env!("CARGO_PKG_VERSION"));
        incident.host = self.host_info();
        timeline(
            &mut incident,
            format!("on-demand capture ({reason}): not a detected wedge"),
        );
        let run = StageRun {
            since_ns: now_mono_ns(),
            wedge: false,
            episode_ended: false,
        };
        self.run_stages(Phase::Minimal, pid, &mut incident, None, run);
        let mut handle = match create(&self.store, &mut incident, on_demand) {
            Ok(handle) => handle,
            Err(err) => {
                out.push(CaptureEvent::Failed {
                    pid,
                    message: format!(
                        "cannot write the incident under {}: {err}",
                        self.store.dir().display()
                    ),
                });
                return;
            }
        };
        let path = handle.path().to_path_buf();
        incident.id = handle.id().to_string();
        out.push(CaptureEvent::Opened {
            pid,
            tid: pid,
            path: path.clone(),
            durable_after: detected.elapsed(),
        });
        self.run_stages(Phase::Safe, pid, &mut incident, Some(&handle), run);
        // A richer incident.json before the slow part; what fails here is in the final write too.
        let _ = write(&mut handle, &mut incident, false, on_demand);
        self.run_stages(Phase::Risky, pid, &mut incident, Some(&handle), run);
        timeline(&mut incident, "capture complete");
        incident.complete = true;
        match write(&mut handle, &mut incident, true, on_demand) {
            Ok(()) => out.push(CaptureEvent::Completed {
                pid,
                path,
                verdict: incident.verdict.clone(),
                killed: None,
            }),
            Err(err) => out.push(CaptureEvent::Failed {
                pid,
                message: format!("cannot finish the incident: {err}"),
            }),
        }
    }

    /// A thread of `pid` was judged wedged at the scan taken at `detected`.
    #[allow(clippy::too_many_arguments)]
    pub fn on_wedged(
        &mut self,
        pid: i32,
        tid: i32,
        start_time: u64,
        comm: &str,
        d_since_ns: u64,
        detected: Instant,
        out: &mut Vec<CaptureEvent>,
    ) {
        if let Some(mut episode) = self.episodes.remove(&pid) {
            if episode.wedged.contains_key(&tid) {
                // Already part of the episode (an adopted thread): nothing new.
                self.episodes.insert(pid, episode);
                return;
            }
            episode.wedged.insert(tid, d_since_ns);
            episode.incident.wedged_threads.push(WedgedThread {
                tid,
                start_time: Some(start_time),
                comm: comm.to_string(),
                d_since: Timestamp::monotonic(d_since_ns),
                detected_at: Some(Timestamp::now()),
                ..WedgedThread::default()
            });
            timeline(
                &mut episode.incident,
                format!("thread {tid} `{comm}` also wedged"),
            );
            Self::resample(&self.settings, &mut episode);
            keep_evidence(&mut episode.incident, tid);
            if episode.captured {
                late_user_frame(&mut episode.incident, tid);
            }
            episode.unwritten = true;
            self.advance(pid, &mut episode, out);
            self.episodes.insert(pid, episode);
            return;
        }
        self.open(pid, tid, start_time, comm, d_since_ns, detected, out);
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

    #[allow(clippy::too_many_arguments)]
    fn open(
        &mut self,
        pid: i32,
        tid: i32,
        start_time: u64,
        comm: &str,
        d_since_ns: u64,
        detected: Instant,
        out: &mut Vec<CaptureEvent>,
    ) {
        let history = self.pending_history.remove(&pid).unwrap_or_default();
        let root = &self.settings.proc_root;
        // Under fork/exit churn a thread can pass the wedge test in its last moments, or its tid can already
        // belong to another thread: an incident for it would be empty. Checked before and after the snapshot.
        if !same_thread(root, pid, tid, start_time) {
            self.gone(pid, tid, out);
            return;
        }
        let mut incident = Incident::new(pid);
        incident.written_by = format!("wedge-capture {}", env!("CARGO_PKG_VERSION"));
        incident.episode.started_at = Timestamp::monotonic(d_since_ns);
        incident.host = self.host_info();
        incident.history = history;
        // With the boot id and the pid, the process's identity: what a later watcher (or npd-check) checks.
        incident.process.start_time = root.read_stat(pid).ok().map(|stat| stat.starttime);
        incident.wedged_threads.push(WedgedThread {
            tid,
            start_time: Some(start_time),
            comm: comm.to_string(),
            d_since: Timestamp::monotonic(d_since_ns),
            detected_at: Some(Timestamp::now()),
            ..WedgedThread::default()
        });
        timeline(
            &mut incident,
            format!(
                "thread {tid} `{comm}` judged wedged: in D without progress for {:.1} s",
                now_mono_ns().saturating_sub(d_since_ns) as f64 / 1e9
            ),
        );
        let run = StageRun {
            since_ns: d_since_ns,
            wedge: true,
            episode_ended: false,
        };
        self.run_stages(Phase::Minimal, pid, &mut incident, None, run);
        if incident.samples.is_empty()
            || !same_thread(&self.settings.proc_root, pid, tid, start_time)
        {
            self.gone(pid, tid, out);
            return;
        }
        keep_evidence(&mut incident, tid);
        let mut wedged = BTreeMap::new();
        wedged.insert(tid, d_since_ns);
        let mut episode = Episode {
            handle: None,
            incident,
            wedged,
            first_tid: tid,
            started_ns: d_since_ns,
            detected,
            last_sample: Instant::now(),
            captured: false,
            complete_wanted: false,
            finished: false,
            unwritten: true,
            write_failure: None,
            outage_reason: None,
            killed: None,
            resolved_after: None,
        };
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

    /// Take the episode as far as it can go now: first durable write, then the rest of the capture, then
    /// whatever state is not durable yet. Called at detection and again at every tick while work is left.
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
                    timeline(&mut episode.incident, line);
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
            self.capture_rest(pid, episode);
            // The minimal incident's own write already told the reader what is missing until this lands.
            episode.complete_wanted = true;
            episode.unwritten = true;
        }
        self.persist(pid, episode, out);
    }

    /// The safe stages, an update, the risky stages (the probes and the optional kill): everything after
    /// the minimal incident. An episode that ended before its first write landed gets no host context, no
    /// probes and no kill (they would describe the process after its wedge).
    fn capture_rest(&mut self, pid: i32, episode: &mut Episode) {
        let Some(handle) = episode.handle.as_mut() else {
            return;
        };
        let incident = &mut episode.incident;
        let ended = episode.resolved_after.is_some();
        let run = StageRun {
            since_ns: episode.started_ns,
            wedge: true,
            episode_ended: ended,
        };
        self.run_stages(Phase::Safe, pid, incident, Some(&*handle), run);
        if ended {
            not_captured(
                incident,
                "host context and probes",
                "the episode ended before the incident could be written",
            );
        } else {
            // A richer incident.json before the slow part; a failure here is retried with the final write.
            let _ = write(handle, incident, false, None);
            episode.killed = self.run_stages(Phase::Risky, pid, incident, Some(&*handle), run);
        }
        timeline(incident, "capture complete");
        incident.complete = true;
    }

    /// Write whatever of the episode is not durable yet (finish, or update), and report it: `Completed`,
    /// `Resolved`, `Updated`; on failure one `Failed` per outage, and `Landed` when it ends.
    fn persist(&mut self, pid: i32, episode: &mut Episode, out: &mut Vec<CaptureEvent>) {
        let Some(handle) = episode.handle.as_mut() else {
            return;
        };
        if !episode.unwritten && (!episode.complete_wanted || episode.finished) {
            return;
        }
        let path = handle.path().to_path_buf();
        let finishing = episode.complete_wanted && !episode.finished;
        if let Err(err) = write(handle, &mut episode.incident, finishing, None) {
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
            timeline(
                &mut episode.incident,
                format!(
                    "durable {:.1} s after detection; {why}",
                    after.as_secs_f64()
                ),
            );
            // The line above must be durable too; if this write fails the next tick retries it.
            episode.unwritten = write(handle, &mut episode.incident, false, None).is_err();
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
        set_fate(&mut episode.incident, tid, fate, in_d);
        timeline(&mut episode.incident, format!("thread {tid} {how}"));
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
        let incident = &mut episode.incident;
        incident.episode.status = EpisodeStatus::Resolved;
        incident.episode.resolved_at = Some(Timestamp::now());
        incident.episode.resolved_after_s = Some(after.as_secs_f64());
        timeline(
            incident,
            format!("resolved after {} s", after.as_secs_f64().round() as u64),
        );
        episode.resolved_after = Some(after);
        self.advance(pid, &mut episode, out);
        if episode.pending_work() {
            self.closing.push(episode);
        }
    }

    /// Periodic work: retry writes that failed, a new sample of open episodes every `resample_every`;
    /// reap probe children.
    pub fn tick(&mut self, out: &mut Vec<CaptureEvent>) {
        self.probes.reap_stuck();
        let pids: Vec<i32> = self.episodes.keys().copied().collect();
        for pid in pids {
            let Some(mut episode) = self.episodes.remove(&pid) else {
                continue;
            };
            if episode.last_sample.elapsed() >= self.settings.resample_every {
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

    /// wedge-capture is stopping (`run` exits, the agent is stopped): every open episode gets its final write,
    /// saying which threads were still wedged and when watching stopped, so that the incident never reads
    /// "still open" after nobody watches it any more. Writes that fail stay listed by [`Capturer::unwritten`].
    pub fn shutdown(&mut self, out: &mut Vec<CaptureEvent>) {
        let pids: Vec<i32> = self.episodes.keys().copied().collect();
        for pid in pids {
            let Some(mut episode) = self.episodes.remove(&pid) else {
                continue;
            };
            if self.settings.proc_root.exists(pid) {
                Self::resample(&self.settings, &mut episode);
            }
            let now = Timestamp::now();
            let now_ns = now.monotonic_ns.unwrap_or(0);
            let incident = &mut episode.incident;
            for (&tid, &since_ns) in &episode.wedged {
                let in_d = Duration::from_nanos(now_ns.saturating_sub(since_ns));
                set_fate(incident, tid, ThreadFate::StillWedgedAtExit, in_d);
            }
            incident.episode.status = EpisodeStatus::StillWedgedAtExit;
            incident.episode.watcher_exited_at = Some(now);
            timeline(
                incident,
                format!(
                    "still wedged when wedge-capture exited ({} thread{} in D)",
                    episode.wedged.len(),
                    if episode.wedged.len() == 1 { "" } else { "s" }
                ),
            );
            episode.unwritten = true;
            self.advance(pid, &mut episode, out);
            if episode.pending_work() {
                self.closing.push(episode);
            }
        }
    }

    /// A new sample of the process; once the kernel log was first read, it is read again so that its window
    /// runs until this update.
    fn resample(settings: &CaptureSettings, episode: &mut Episode) {
        if episode.captured {
            stages::kernel_log::refresh(
                settings,
                episode.started_ns,
                &mut episode.incident,
                episode.handle.as_ref(),
            );
        }
        episode.last_sample = Instant::now();
        let pid = episode.incident.process.pid;
        match capture::snapshot_process(
            &settings.proc_root,
            pid,
            &SnapshotOptions {
                all_threads: true,
                ..SnapshotOptions::default()
            },
        ) {
            Ok(snapshot) => {
                let samples = &mut episode.incident.samples;
                samples.push(Sample {
                    taken_at: Timestamp::now(),
                    snapshot,
                    python_threads: Vec::new(),
                });
                // Keep the first sample and the latest ones.
                let max = settings.max_samples.max(2);
                if samples.len() > max {
                    samples.remove(1);
                }
            }
            Err(err) => timeline(&mut episode.incident, format!("new sample failed: {err}")),
        }
    }
}

#[cfg(test)]
mod tests;
