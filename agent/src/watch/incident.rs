//! The capture path: what happens when the tracker declares a wedge, and how an episode's incident evolves.
//!
//! Order matters for "nothing lost": the thread snapshot (reads that cannot hang) goes into a minimal
//! `incident.json` that is durable before anything slower runs; then the ring, the kernel log and the host
//! context are added; then the risky probes run in sacrificial children with one deadline; then the incident
//! is finished (`complete=true`, report.md). One incident per episode: later wedged threads of the same
//! process and periodic re-samples update it; when every wedged thread left D it is closed as resolved.
//!
//! No wedge is lost to a full disk: an episode whose first write fails stays in memory with the evidence
//! as of detection (the snapshot taken then) and every write that failed is retried at each tick until it
//! lands ([`CaptureEvent::WritePending`] once, then [`CaptureEvent::Landed`] with the delay). A wedge whose
//! process or thread (tid + start time) is gone by the time the capture begins yields no incident, only
//! [`CaptureEvent::Gone`] with a counter.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use capture::{ProcRoot, SnapshotOptions};
use reports::model::{
    DStateTask, EpisodeStatus, HostContext, HostInfo, Incident, KernelLogLine, NotCaptured,
    PsiLine as ReportPsiLine, RingExcerpt, Sample, TimelineEvent, Timestamp, WedgedThread,
};
use reports::store::{IncidentHandle, Store};

use crate::host::identity::HostIdentity;
use crate::host::kmsg::{self, KmsgWindow};
use crate::host::pressure;
use crate::probe::{self, Probe, ProbeOutcome, ProbeRunner, ProbeStatus};
use crate::settings;

/// How to capture.
#[derive(Debug, Clone)]
pub struct CaptureSettings {
    pub proc_root: ProcRoot,
    /// Directories holding ring files (`*.ring`), searched for the wedged process's ring.
    pub ring_dirs: Vec<PathBuf>,
    pub probe_timeout: Duration,
    pub max_stuck_probes: usize,
    /// Run `nvidia-smi -q` as a probe when it is installed.
    pub nvidia_smi: bool,
    /// Extra files to read as probes (a test stand-in for a driver file that hangs).
    pub extra_probe_files: Vec<PathBuf>,
    pub kmsg_path: PathBuf,
    /// Kernel log kept from this long before the wedge began.
    pub kmsg_before: Duration,
    /// While an episode is open, add a new thread snapshot this often.
    pub resample_every: Duration,
    /// Samples kept per incident (the first and the latest ones).
    pub max_samples: usize,
    /// Send SIGKILL to the wedged process after the capture, and record whether it died.
    pub kill_on_wedge: bool,
    /// Most D-state tasks listed in the host census.
    pub max_census: usize,
}

impl CaptureSettings {
    pub fn new(proc_root: ProcRoot) -> CaptureSettings {
        CaptureSettings {
            proc_root,
            ring_dirs: Vec::new(),
            probe_timeout: settings::PROBE_TIMEOUT,
            max_stuck_probes: settings::MAX_STUCK_PROBES,
            nvidia_smi: true,
            extra_probe_files: Vec::new(),
            kmsg_path: PathBuf::from(kmsg::KMSG_PATH),
            kmsg_before: settings::KMSG_BEFORE,
            resample_every: settings::RESAMPLE_EVERY,
            max_samples: settings::MAX_SAMPLES,
            kill_on_wedge: false,
            max_census: settings::MAX_CENSUS,
        }
    }
}

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
}

fn now_mono_ns() -> u64 {
    Timestamp::now().monotonic_ns.unwrap_or(0)
}

fn timeline(incident: &mut Incident, event: impl Into<String>) {
    incident.timeline.push(TimelineEvent {
        at: Timestamp::now(),
        event: event.into(),
    });
}

fn not_captured(incident: &mut Incident, what: impl Into<String>, why: impl Into<String>) {
    incident.not_captured.push(NotCaptured {
        what: what.into(),
        why: why.into(),
    });
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

/// What an incident path looks like before its first write succeeded.
const UNWRITTEN: &str = "(not written yet)";

impl Capturer {
    pub fn new(settings: CaptureSettings, store: Store) -> Capturer {
        let probes = ProbeRunner::new(settings.probe_timeout, settings.max_stuck_probes);
        let host = HostIdentity::read(settings.proc_root.path());
        Capturer {
            settings,
            store,
            probes,
            host,
            episodes: BTreeMap::new(),
            closing: Vec::new(),
            gone_before_capture: 0,
        }
    }

    pub fn store_dir(&self) -> &Path {
        self.store.dir()
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

    /// The first durable write of an incident; on failure the event says where it could not be written.
    fn create_or_report(
        &self,
        pid: i32,
        incident: &Incident,
        out: &mut Vec<CaptureEvent>,
    ) -> Option<IncidentHandle> {
        match self.store.create(incident) {
            Ok(handle) => Some(handle),
            Err(err) => {
                out.push(CaptureEvent::Failed {
                    pid,
                    message: format!(
                        "cannot write the incident under {}: {err}",
                        self.store.dir().display()
                    ),
                });
                None
            }
        }
    }

    /// An on-demand incident for `pid` (the daemon's SIGUSR1), whether or not it is wedged: every thread,
    /// the ring, the kernel log, host context and the risky probes, like a wedge capture, but outside any
    /// episode. The verdict and the timeline say it was asked for (`reason`).
    pub fn capture_on_demand(&mut self, pid: i32, reason: &str, out: &mut Vec<CaptureEvent>) {
        let detected = Instant::now();
        let settings = &self.settings;
        let root = &settings.proc_root;
        let mut incident = Incident::new(pid);
        incident.trigger = reports::model::Trigger::OnDemand;
        incident.written_by = format!("wedge-capture {}", env!("CARGO_PKG_VERSION"));
        incident.host = HostInfo {
            hostname: self.host.hostname.clone(),
            boot_id: self.host.boot_id.clone().unwrap_or_default(),
            kernel_release: self.host.kernel.clone(),
            arch: self.host.arch.clone(),
            nvidia_driver_version: None,
        };
        timeline(
            &mut incident,
            format!("on-demand capture ({reason}): not a detected wedge"),
        );
        fill_process_info(root, pid, &mut incident);
        push_all_threads_sample(root, pid, &mut incident);
        let on_demand = |incident: &Incident| {
            format!(
                "on-demand capture ({reason}): {}",
                reports::render::verdict(incident)
            )
        };
        incident.verdict = on_demand(&incident);
        let Some(mut handle) = self.create_or_report(pid, &incident, out) else {
            return;
        };
        let path = handle.path().to_path_buf();
        incident.id = handle.id().to_string();
        out.push(CaptureEvent::Opened {
            pid,
            tid: pid,
            path: path.clone(),
            durable_after: detected.elapsed(),
        });
        capture_ring(settings, pid, &mut incident, &handle);
        capture_kernel_log(settings, now_mono_ns(), &mut incident);
        incident.host_context = host_context(settings, &mut incident);
        let probes = probe::standard_probes(root.path(), pid, settings.nvidia_smi);
        let started_at = Timestamp::now();
        let outcomes = self.probes.run_all(&probes);
        apply_probes(&outcomes, &started_at, &mut incident);
        incident.verdict = on_demand(&incident);
        timeline(&mut incident, "capture complete");
        incident.complete = true;
        match handle.finish(&incident) {
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
            episode.wedged.insert(tid, d_since_ns);
            episode.incident.wedged_threads.push(WedgedThread {
                tid,
                comm: comm.to_string(),
                d_since: Timestamp::monotonic(d_since_ns),
            });
            timeline(
                &mut episode.incident,
                format!("thread {tid} `{comm}` also wedged"),
            );
            Self::resample(&self.settings, &mut episode);
            episode.unwritten = true;
            self.advance(pid, &mut episode, out);
            self.episodes.insert(pid, episode);
            return;
        }
        self.open(pid, tid, start_time, comm, d_since_ns, detected, out);
    }

    /// Wedges whose capture found the process or the thread gone (no incident was written for them).
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
        incident.host = HostInfo {
            hostname: self.host.hostname.clone(),
            boot_id: self.host.boot_id.clone().unwrap_or_default(),
            kernel_release: self.host.kernel.clone(),
            arch: self.host.arch.clone(),
            nvidia_driver_version: None,
        };
        incident.wedged_threads.push(WedgedThread {
            tid,
            comm: comm.to_string(),
            d_since: Timestamp::monotonic(d_since_ns),
        });
        timeline(
            &mut incident,
            format!(
                "thread {tid} `{comm}` judged wedged: in D without progress for {:.1} s",
                now_mono_ns().saturating_sub(d_since_ns) as f64 / 1e9
            ),
        );
        fill_process_info(root, pid, &mut incident);
        push_all_threads_sample(root, pid, &mut incident);
        if incident.samples.is_empty() || !same_thread(root, pid, tid, start_time) {
            self.gone(pid, tid, out);
            return;
        }
        incident.verdict = reports::render::verdict(&incident);
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
            match self.store.create(&episode.incident) {
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

    /// Ring, kernel log, host context, the risky probes and the optional kill: everything after the minimal
    /// incident. An episode that ended before its first write landed gets no probes (they would describe
    /// the process after its wedge).
    fn capture_rest(&mut self, pid: i32, episode: &mut Episode) {
        let settings = &self.settings;
        let root = &settings.proc_root;
        let Some(handle) = episode.handle.as_ref() else {
            return;
        };
        let incident = &mut episode.incident;
        // 2. Ring, kernel log, host context: safe reads.
        capture_ring(settings, pid, incident, handle);
        capture_kernel_log(settings, episode.started_ns, incident);
        if episode.resolved_after.is_some() {
            not_captured(
                incident,
                "host context and probes",
                "the episode ended before the incident could be written",
            );
        } else {
            incident.host_context = host_context(settings, incident);
            incident.verdict = reports::render::verdict(incident);
            // A richer incident.json before the slow part; a failure here is retried with the final write.
            let _ = handle.update(incident);

            // 3. Risky probes, in sacrificial children with one deadline.
            let mut probes = probe::standard_probes(root.path(), pid, settings.nvidia_smi);
            for (i, file) in settings.extra_probe_files.iter().enumerate() {
                probes.push(Probe::read_file(
                    &format!("extra-{}", i + 1),
                    file.clone(),
                    "the file's driver is probably blocked",
                ));
            }
            let started_at = Timestamp::now();
            let outcomes = self.probes.run_all(&probes);
            apply_probes(&outcomes, &started_at, incident);

            // 4. Optional kill.
            if settings.kill_on_wedge {
                let died = kill_and_check(root, pid);
                episode.killed = Some(died);
                timeline(
                    incident,
                    if died {
                        "SIGKILL sent (--kill-on-wedge): the process died".to_string()
                    } else {
                        "SIGKILL sent (--kill-on-wedge): the process is still there after 1 s (unkillable: \
                         uninterruptible sleep)"
                            .to_string()
                    },
                );
            }
        }
        incident.verdict = reports::render::verdict(incident);
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
        let result = if finishing {
            handle.finish(&episode.incident)
        } else {
            handle.update(&episode.incident)
        };
        if let Err(err) = result {
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
            episode.unwritten = handle.update(&episode.incident).is_err();
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

    /// A wedged thread left D (`resolved`) or vanished.
    pub fn on_thread_done(&mut self, pid: i32, tid: i32, how: &str, out: &mut Vec<CaptureEvent>) {
        let Some(mut episode) = self.episodes.remove(&pid) else {
            return;
        };
        episode.wedged.remove(&tid);
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

    fn resample(settings: &CaptureSettings, episode: &mut Episode) {
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
                });
                // Keep the first sample and the latest ones.
                let max = settings.max_samples.max(2);
                if samples.len() > max {
                    samples.remove(1);
                }
                episode.incident.verdict = reports::render::verdict(&episode.incident);
            }
            Err(err) => timeline(&mut episode.incident, format!("new sample failed: {err}")),
        }
    }
}

/// NSpid, comm, cgroup and container of the process (reads that cannot hang).
fn fill_process_info(root: &ProcRoot, pid: i32, incident: &mut Incident) {
    match root.read_task_status(pid, pid) {
        Ok(status) => {
            incident.process.nspid = status.nspid.clone();
            incident.process.comm = status.name.clone().unwrap_or_default();
        }
        Err(err) => not_captured(incident, "process status (NSpid)", err.to_string()),
    }
    match root.cgroup(pid) {
        Ok(lines) => {
            let line = lines
                .iter()
                .find(|l| l.is_v2())
                .or_else(|| lines.first())
                .map(|l| l.path.clone());
            incident.process.container_id = line
                .as_deref()
                .and_then(capture::parse::cgroup::container_id)
                .map(|c| format!("{}:{}", c.runtime, c.id));
            incident.process.cgroup = line;
        }
        Err(err) => not_captured(incident, "cgroup", err.to_string()),
    }
}

/// Ring files that belong to `pid`: files the process holds open (stat of each fd link: no lock taken)
/// whose name ends in `.ring` — opened by the fd link's path when that path resolves here to the very
/// inode held, else found in the ring directories by that inode (a worker in a container sees the ring
/// under another path than the host does), else (unlinked, or a directory the agent does not watch)
/// through the fd link itself. A ring the process does not hold open never belongs to it, whatever its
/// header claims: a forged ring can never become another process's ring. A path is opened through
/// `capture::untrusted` (no symlink followed, no FIFO or device opened, bounded).
fn find_rings(settings: &CaptureSettings, pid: i32) -> Vec<crate::watch::ring_trust::RingFile> {
    use crate::watch::ring_trust::{self, RingFile};
    use std::os::unix::fs::MetadataExt;
    let max_len = wedge_breadcrumb::reader::DEFAULT_MAX_FILE_BYTES;
    let held = ring_trust::held_files(&settings.proc_root, pid);
    let mut found = Vec::new();
    let mut unmatched = std::collections::HashMap::new();
    for (&inode, link) in &held {
        let Ok(target) = std::fs::read_link(link) else {
            continue;
        };
        if !ring_trust::names_a_ring(&target) {
            continue;
        }
        match ring_trust::open_ring(&target, max_len) {
            Ok(file) if (file.identity().dev, file.identity().ino) == inode => {
                found.extend(RingFile::from_untrusted(&file).ok());
            }
            _ => {
                unmatched.insert(inode, (link.clone(), target));
            }
        }
    }
    if !unmatched.is_empty() {
        for dir in &settings.ring_dirs {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.flatten().take(100_000) {
                let path = entry.path();
                if path.extension().is_none_or(|e| e != "ring") {
                    continue;
                }
                let Ok(meta) = std::fs::symlink_metadata(&path) else {
                    continue;
                };
                let inode = (meta.dev(), meta.ino());
                if !unmatched.contains_key(&inode) {
                    continue;
                }
                if let Ok(file) = ring_trust::open_ring(&path, max_len) {
                    if (file.identity().dev, file.identity().ino) == inode {
                        if let Ok(ring) = RingFile::from_untrusted(&file) {
                            unmatched.remove(&inode);
                            found.push(ring);
                        }
                    }
                }
            }
        }
    }
    for (inode, (link, target)) in unmatched {
        if let Ok(file) = ring_trust::open_held(&link, inode, max_len) {
            found.push(RingFile { file, path: target });
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}

/// A snapshot of every thread of `pid` (not only the wedged one: siblings in page faults matter), or a
/// note saying why there is none.
fn push_all_threads_sample(root: &ProcRoot, pid: i32, incident: &mut Incident) {
    let options = SnapshotOptions {
        all_threads: true,
        ..SnapshotOptions::default()
    };
    match capture::snapshot_process(root, pid, &options) {
        Ok(snapshot) => incident.samples.push(Sample {
            taken_at: Timestamp::now(),
            snapshot,
        }),
        Err(err) => not_captured(incident, "thread snapshot", err.to_string()),
    }
}

fn capture_ring(
    settings: &CaptureSettings,
    pid: i32,
    incident: &mut Incident,
    handle: &IncidentHandle,
) {
    let mut rings = find_rings(settings, pid);
    if rings.is_empty() {
        not_captured(
            incident,
            "breadcrumb ring",
            "no ring file found (the process holds no *.ring file open)",
        );
        return;
    }
    if rings.len() > MAX_RINGS_PER_INCIDENT {
        timeline(
            incident,
            format!(
                "{} ring files belong to the process; the first {MAX_RINGS_PER_INCIDENT} are in the report",
                rings.len()
            ),
        );
        rings.truncate(MAX_RINGS_PER_INCIDENT);
    }
    // A process can hold several rings (its own breadcrumbs and the CUPTI injection's): read them all,
    // then put first the one that explains the wedge — an in-flight call, the oldest one first.
    let mut excerpts: Vec<(RingExcerpt, Vec<u8>)> = rings
        .iter()
        .map(|ring| read_ring_excerpt(settings, pid, ring, incident))
        .collect();
    excerpts.sort_by_key(|(excerpt, _)| {
        let oldest_in_flight = excerpt
            .in_flight
            .iter()
            .map(|f| f.entered_monotonic_ns)
            .min();
        (
            oldest_in_flight.is_none(),
            oldest_in_flight.unwrap_or(u64::MAX),
        )
    });
    for (n, (mut excerpt, bytes)) in excerpts.into_iter().enumerate() {
        if !bytes.is_empty() {
            let name = if n == 0 {
                reports::store::RING_FILE.to_string()
            } else {
                format!("ring-{}.bin", n + 1)
            };
            match handle.write_file(&name, &bytes) {
                Ok(()) => excerpt.copy = Some(name),
                Err(err) => not_captured(incident, "ring copy", format!("{name}: {err}")),
            }
        }
        if n == 0 {
            incident.ring = Some(excerpt);
        } else {
            incident.extra_rings.push(excerpt);
        }
    }
}

/// At most this many rings of one process are read into an incident.
const MAX_RINGS_PER_INCIDENT: usize = 4;

/// One ring, read from outside; the bytes are empty when it could not be read.
fn read_ring_excerpt(
    settings: &CaptureSettings,
    pid: i32,
    ring: &crate::watch::ring_trust::RingFile,
    incident: &mut Incident,
) -> (RingExcerpt, Vec<u8>) {
    let read_at = Timestamp::now();
    // Entry names are chosen by whoever writes the ring directory: escaped before they reach a report.
    let shown = crate::watch::ring_trust::printable_path(&ring.path);
    match wedge_breadcrumb::reader::read_ring_from_file_with_bytes(
        &ring.file,
        &wedge_breadcrumb::reader::ReadOptions::default(),
    ) {
        Ok((snapshot, bytes)) => {
            let mut excerpt = RingExcerpt::from_snapshot(Some(shown.clone()), &snapshot, 256);
            excerpt.read_at = read_at;
            if incident.process.nspid.len() > 1 {
                let translated = namespace_tids_to_host(&settings.proc_root, pid, &mut excerpt);
                if translated > 0 {
                    timeline(
                        incident,
                        format!(
                            "ring {shown} thread ids translated from the process's PID namespace to host ids \
                             ({translated} records; the ring copy keeps the original)"
                        ),
                    );
                }
            }
            (excerpt, bytes)
        }
        Err(err) => {
            // The reader's errors say what is wrong with the file, never what it holds.
            let mut excerpt = RingExcerpt::unreadable(Some(shown), err.to_string());
            excerpt.read_at = read_at;
            (excerpt, Vec::new())
        }
    }
}

/// A worker in a PID namespace writes its own (namespace) thread ids into the ring; the snapshot has host
/// ids. Map them through each thread's NSpid (innermost id → host id). Returns how many ids were changed.
fn namespace_tids_to_host(root: &ProcRoot, pid: i32, excerpt: &mut RingExcerpt) -> usize {
    let mut map = std::collections::HashMap::new();
    for tid in root.tasks(pid).unwrap_or_default() {
        if let Ok(status) = root.read_task_status(pid, tid) {
            if let Some(&inner) = status.nspid.last() {
                if let Ok(inner) = u32::try_from(inner) {
                    map.insert(inner, tid as u32);
                }
            }
        }
    }
    let mut changed = 0;
    for record in &mut excerpt.records {
        if let Some(&host) = map.get(&record.tid) {
            changed += usize::from(host != record.tid);
            record.tid = host;
        }
    }
    for call in &mut excerpt.in_flight {
        if let Some(&host) = map.get(&call.tid) {
            changed += usize::from(host != call.tid);
            call.tid = host;
        }
    }
    changed
}

fn capture_kernel_log(settings: &CaptureSettings, d_since_ns: u64, incident: &mut Incident) {
    let since_us = (d_since_ns / 1000).saturating_sub(settings.kmsg_before.as_micros() as u64);
    let window = KmsgWindow {
        since_usec: since_us,
        max_recent: 400,
        max_flagged_before: 100,
    };
    match kmsg::read_around(&settings.kmsg_path, &window) {
        Ok(capture) => {
            incident.kernel_log = capture
                .records
                .into_iter()
                .map(|r| KernelLogLine::new(Some(r.seq), Some(r.level), Some(r.usec), r.message))
                .collect();
            if capture.lost > 0 {
                timeline(
                    incident,
                    format!(
                        "{} kernel log records were overwritten while being read",
                        capture.lost
                    ),
                );
            }
        }
        Err(err) => not_captured(
            incident,
            "kernel log",
            format!(
                "{}: {err}{}",
                settings.kmsg_path.display(),
                if err.kind() == std::io::ErrorKind::PermissionDenied {
                    " (needs CAP_SYSLOG when kernel.dmesg_restrict=1)"
                } else {
                    ""
                }
            ),
        ),
    }
}

/// PSI, meminfo, loadavg and the census of D-state tasks.
pub fn host_context(settings: &CaptureSettings, incident: &mut Incident) -> HostContext {
    let root = settings.proc_root.path();
    let mut context = HostContext {
        captured_at: Timestamp::now(),
        ..HostContext::default()
    };
    for resource in ["cpu", "memory", "io", "irq"] {
        let path = root.join("pressure").join(resource);
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        if pressure::parse_psi(&bytes).is_err() {
            continue;
        }
        for line in String::from_utf8_lossy(&bytes).lines() {
            context.psi.push(ReportPsiLine {
                resource: resource.to_string(),
                line: line.to_string(),
            });
        }
    }
    match std::fs::read(root.join("meminfo"))
        .map_err(|e| e.to_string())
        .and_then(|b| pressure::parse_meminfo(&b).map_err(|e| e.to_string()))
    {
        Ok(all) => {
            context.meminfo_kb = pressure::MEMINFO_HIGHLIGHTS
                .iter()
                .filter_map(|&k| all.get(k).map(|&v| (k.to_string(), v)))
                .collect();
        }
        Err(err) => not_captured(incident, "meminfo", err),
    }
    context.loadavg = std::fs::read_to_string(root.join("loadavg"))
        .ok()
        .map(|s| s.trim().to_string());
    let (tasks, total) = d_state_census(&settings.proc_root, settings.max_census);
    if total as usize > tasks.len() {
        context.d_state_total = Some(total);
    }
    context.d_state_tasks = tasks;
    context
}

/// Every task of the host in D (pid, tid, comm, wchan, cgroup), at most `max` listed; and the total.
pub fn d_state_census(root: &ProcRoot, max: usize) -> (Vec<DStateTask>, u64) {
    let mut out = Vec::new();
    let mut total = 0u64;
    let Ok(pids) = root.pids() else {
        return (out, 0);
    };
    for pid in pids {
        let Ok(tids) = root.tasks(pid) else {
            continue;
        };
        let mut cgroup: Option<Option<String>> = None;
        for tid in tids {
            let Ok(stat) = root.read_task_stat(pid, tid) else {
                continue;
            };
            if stat.state != 'D' {
                continue;
            }
            total += 1;
            if out.len() >= max {
                continue;
            }
            let cgroup = cgroup
                .get_or_insert_with(|| {
                    root.cgroup(pid)
                        .ok()
                        .and_then(|lines| lines.into_iter().find(|l| l.is_v2()).map(|l| l.path))
                })
                .clone();
            out.push(DStateTask {
                pid,
                tid,
                comm: stat.comm.clone(),
                wchan: root.read_wchan(pid, tid).ok().flatten(),
                cgroup,
            });
        }
    }
    (out, total)
}

fn apply_probes(outcomes: &[ProbeOutcome], started_at: &Timestamp, incident: &mut Incident) {
    for outcome in outcomes {
        let report_outcome = match outcome.status {
            ProbeStatus::Ok => reports::model::ProbeOutcome::Ok,
            ProbeStatus::TimedOut => reports::model::ProbeOutcome::Timeout,
            ProbeStatus::Failed | ProbeStatus::Skipped => reports::model::ProbeOutcome::Error,
        };
        if outcome.status == ProbeStatus::TimedOut {
            timeline(
                incident,
                format!(
                    "probe {} ({}) {}",
                    outcome.name, outcome.target, outcome.detail
                ),
            );
        }
        match (outcome.name.as_str(), &outcome.status) {
            ("cmdline", ProbeStatus::Ok) => {
                let args: Vec<String> = outcome
                    .output
                    .split('\0')
                    .filter(|a| !a.is_empty())
                    .map(str::to_string)
                    .collect();
                if !args.is_empty() {
                    incident.process.cmdline = Some(args);
                }
            }
            ("nvidia-version", ProbeStatus::Ok) => {
                incident.host.nvidia_driver_version = parse_nvidia_version(&outcome.output);
            }
            _ => {}
        }
        // The command line goes into `process.cmdline` (redacted), never raw into an excerpt.
        let excerpt = if outcome.name == "cmdline" {
            String::new()
        } else {
            outcome.output.chars().take(4096).collect()
        };
        incident.probes.push(reports::model::Probe {
            name: format!("{} ({})", outcome.name, outcome.target),
            outcome: report_outcome,
            started_at: started_at.clone(),
            duration_ms: outcome.elapsed_ms as f64,
            output_excerpt: excerpt,
            error: (outcome.status != ProbeStatus::Ok).then(|| outcome.detail.clone()),
        });
    }
}

/// `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build …` → `580.95.05`.
pub fn parse_nvidia_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    line.split_whitespace()
        .find(|w| {
            w.contains('.')
                && w.split('.').count() >= 2
                && w.split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
}

/// SIGKILL `pid` and watch for 1 s whether it dies: gone, or every thread a zombie. (A killed group leader
/// shows `Z` while a sibling thread is still stuck in D: that process has not died.)
fn kill_and_check(root: &ProcRoot, pid: i32) -> bool {
    crate::watch::launch::signal_process(pid, libc::SIGKILL);
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        let alive = match root.tasks(pid) {
            Err(_) => false,
            Ok(tids) => tids.iter().any(|&tid| {
                root.read_task_stat(pid, tid)
                    .is_ok_and(|stat| stat.state != 'Z' && stat.state != 'X')
            }),
        };
        if !alive {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvidia_version_lines() {
        assert_eq!(
            parse_nvidia_version(
                "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Sep 23 09:47:54 UTC 2025\nGCC version:  gcc version 13.3.0\n"
            )
            .as_deref(),
            Some("580.95.05")
        );
        assert_eq!(parse_nvidia_version("garbage"), None);
    }

    fn capturer(dir: &Path) -> Capturer {
        let mut settings = CaptureSettings::new(ProcRoot::default());
        settings.nvidia_smi = false;
        settings.probe_timeout = Duration::from_millis(500);
        let store = Store::open(dir, reports::retention::Retention::DEFAULT).unwrap();
        Capturer::new(settings, store)
    }

    fn my_start_time() -> u64 {
        let me = std::process::id() as i32;
        ProcRoot::default()
            .read_task_stat(me, me)
            .unwrap()
            .starttime
    }

    fn incident_dirs(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| e.path().join(reports::store::INCIDENT_FILE).exists())
            .count()
    }

    #[test]
    fn no_incident_for_a_process_or_thread_gone_before_the_capture() {
        let dir = tempfile::tempdir().unwrap();
        let mut capturer = capturer(dir.path());
        let mut out = Vec::new();
        // A process that exited (and was reaped) before its capture began.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id() as i32;
        child.wait().unwrap();
        capturer.on_wedged(gone, gone, 1, "true", 0, Instant::now(), &mut out);
        // A live tid whose start time is not the one judged wedged: the tid was reused.
        let me = std::process::id() as i32;
        let reused = my_start_time() + 1;
        capturer.on_wedged(me, me, reused, "test", 0, Instant::now(), &mut out);
        assert_eq!(
            out,
            vec![
                CaptureEvent::Gone {
                    pid: gone,
                    tid: gone,
                    total: 1
                },
                CaptureEvent::Gone {
                    pid: me,
                    tid: me,
                    total: 2
                },
            ]
        );
        assert_eq!(capturer.gone_before_capture(), 2);
        assert!(capturer.open_incidents().is_empty());
        assert_eq!(incident_dirs(dir.path()), 0);
        // The same thread with its real start time is captured.
        out.clear();
        capturer.on_wedged(me, me, my_start_time(), "test", 0, Instant::now(), &mut out);
        assert!(
            matches!(out.first(), Some(CaptureEvent::Opened { pid, .. }) if *pid == me),
            "{out:?}"
        );
        assert_eq!(incident_dirs(dir.path()), 1);
    }

    #[test]
    fn a_first_write_that_fails_is_kept_and_retried_until_it_lands() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("incidents");
        let mut capturer = capturer(&dir);
        // The output directory replaced by a file: every write fails (root ignores permission bits).
        let aside = parent.path().join("aside");
        std::fs::rename(&dir, &aside).unwrap();
        std::fs::write(&dir, b"not a directory").unwrap();
        let me = std::process::id() as i32;
        let detected = Instant::now();
        let mut out = Vec::new();
        capturer.on_wedged(me, me, my_start_time(), "test", 0, detected, &mut out);
        assert!(
            matches!(&out[..], [CaptureEvent::WritePending { pid, tid, .. }] if *pid == me && *tid == me),
            "{out:?}"
        );
        assert_eq!(capturer.unwritten().len(), 1);
        assert!(capturer.is_open(me));
        // Retried at every tick, the alarm raised once.
        out.clear();
        for _ in 0..3 {
            capturer.tick(&mut out);
        }
        assert!(out.is_empty(), "{out:?}");
        // The directory comes back: the next tick writes the incident as of detection, then completes it.
        std::fs::remove_file(&dir).unwrap();
        std::fs::rename(&aside, &dir).unwrap();
        capturer.tick(&mut out);
        assert!(capturer.unwritten().is_empty());
        let kinds: Vec<&str> = out
            .iter()
            .map(|e| match e {
                CaptureEvent::Opened { .. } => "opened",
                CaptureEvent::Landed { .. } => "landed",
                CaptureEvent::Completed { .. } => "completed",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["opened", "landed", "completed"], "{out:?}");
        let Some(CaptureEvent::Landed { path, after, .. }) = out.get(1) else {
            unreachable!()
        };
        assert!(*after <= detected.elapsed());
        let incident =
            reports::store::read_incident(&path.join(reports::store::INCIDENT_FILE)).unwrap();
        assert!(incident.complete);
        let first_sample = incident.samples[0].taken_at.monotonic_ns.unwrap();
        let timeline: Vec<&str> = incident.timeline.iter().map(|t| t.event.as_str()).collect();
        assert!(
            timeline
                .iter()
                .any(|t| t.contains("s after detection; writing failed")),
            "{timeline:?}"
        );
        // The evidence is the snapshot taken at detection, before the first successful write.
        let landed_at = incident
            .timeline
            .iter()
            .find(|t| t.event.contains("minimal incident durable"))
            .and_then(|t| t.at.monotonic_ns)
            .unwrap();
        assert!(first_sample < landed_at);
    }

    #[test]
    fn census_sees_no_impossible_tasks() {
        let (tasks, total) = d_state_census(&ProcRoot::default(), 3);
        assert!(tasks.len() <= 3);
        assert!(total >= tasks.len() as u64);
    }
}
