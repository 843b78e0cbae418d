//! The capture side: worker threads that run the slow stages of a capture, off the watch loop.
//!
//! Detection never waits for a capture (design invariant 10). The watch loop ([`super::Watcher`]) scans,
//! judges, writes the minimal incident in the same scan and hands the rest of the capture to this pool as
//! a [`CaptureJob`]; a worker runs the job's [`Phase::Safe`] and [`Phase::Risky`] stages on its own copy of
//! the incident and reports back ([`WorkerReport`]); the watch loop merges the report into the episode and
//! makes it durable (it alone writes incident.json, so one writer commits an incident's state).
//!
//! Bounds, so that no tenant can turn the capture side against the others:
//! - [`FairQueue`]: jobs wait per tenant and are served round robin, one job per tenant in flight;
//! - at most `workers` captures run at once (threads started on the first job);
//! - each capture has a total deadline ([`CaptureDeadline`]): a stage that would start after it is recorded
//!   as not run; each stage keeps its own deadline, and probes their sacrificial children;
//! - a capture still not back [`defaults::CAPTURE_GIVE_UP_AFTER`] after its deadline is given up
//!   ([`CapturePool::overdue`]): the loop finishes the incident without it and a new worker takes the lost
//!   one's place (at most as many again as `workers`).
//!
//! A worker that panics reports [`WorkerReport::Failed`] and goes on with the next job.

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reports::model::Incident;
use reports::store::write::IncidentFiles;

use super::capture_settings::CaptureSettings;
use super::queue::FairQueue;
use super::stages::context::{Capture, CaptureDeadline, SkippedStage};
use super::stages::{self, Phase, STAGES};

use crate::probe::ProbeRunner;

/// The rest of one capture, after its minimal incident is durable.
pub struct CaptureJob {
    /// Unique per pool: the report names it.
    pub id: u64,
    pub pid: i32,
    pub tenant: String,
    /// The incident as of its first durable write (the worker's own copy).
    pub incident: Incident,
    /// Its directory, for the ring copies and the kernel log.
    pub files: IncidentFiles,
    pub settings: CaptureSettings,
    /// This capture's probe runner (its target and tenant; the stuck children are shared).
    pub probes: ProbeRunner,
    /// When the wedge began (now, on demand): the kernel log is kept from before it.
    pub since_ns: u64,
    /// A wedge capture (the kill stage may act), not an on-demand one.
    pub wedge: bool,
    /// The episode ended before its first write landed: only the stages marked for it run.
    pub episode_ended: bool,
    /// Stages not to run (an earlier agent died during them).
    pub skip: Vec<SkippedStage>,
    /// When it was queued.
    pub queued_at: Instant,
}

/// What a worker sends back.
#[derive(Debug)]
pub enum WorkerReport {
    /// The safe stages ran: the incident with their evidence, for an update before the slow part.
    SafeDone { id: u64, incident: Box<Incident> },
    /// Every stage ran (or was recorded as not captured): the incident to finish.
    Finished {
        id: u64,
        incident: Box<Incident>,
        killed: Option<bool>,
    },
    /// The worker failed (a panic in a stage): the loop finishes the incident without its evidence.
    Failed { id: u64, why: String },
}

impl WorkerReport {
    pub fn id(&self) -> u64 {
        match self {
            WorkerReport::SafeDone { id, .. }
            | WorkerReport::Finished { id, .. }
            | WorkerReport::Failed { id, .. } => *id,
        }
    }
}

/// A job a worker is running.
#[derive(Debug)]
struct Busy {
    tenant: String,
    pid: i32,
    started: Instant,
}

/// The capture workers and the fair queue in front of them. Owned by the watch loop's capturer; every
/// method returns at once.
pub struct CapturePool {
    queue: FairQueue<CaptureJob>,
    jobs_tx: Sender<CaptureJob>,
    jobs_rx: Arc<Mutex<Receiver<CaptureJob>>>,
    reports_tx: Sender<WorkerReport>,
    reports_rx: Receiver<WorkerReport>,
    /// Worker threads wanted.
    workers: usize,
    /// Worker threads started and not lost to an overdue job.
    alive: usize,
    /// Worker threads lost to overdue jobs (never more than `workers` are replaced).
    lost: usize,
    busy: HashMap<u64, Busy>,
    deadline: Duration,
    next_id: u64,
}

impl CapturePool {
    pub fn new(workers: usize, deadline: Duration, max_queued_per_tenant: usize) -> CapturePool {
        let (jobs_tx, jobs_rx) = mpsc::channel();
        let (reports_tx, reports_rx) = mpsc::channel();
        CapturePool {
            queue: FairQueue::new(max_queued_per_tenant),
            jobs_tx,
            jobs_rx: Arc::new(Mutex::new(jobs_rx)),
            reports_tx,
            reports_rx,
            workers: workers.max(1),
            alive: 0,
            lost: 0,
            busy: HashMap::new(),
            deadline,
            next_id: 1,
        }
    }

    /// A fresh job id.
    pub fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The capture's total deadline.
    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    /// Queue a job (and start it if a worker is free). Gives it back when its tenant already has as many
    /// waiting as the queue takes.
    pub fn submit(&mut self, job: CaptureJob) -> Result<(), Box<CaptureJob>> {
        let tenant = job.tenant.clone();
        self.queue.push(&tenant, job).map_err(Box::new)?;
        self.dispatch();
        Ok(())
    }

    /// Jobs waiting and running.
    pub fn pending(&self) -> (usize, usize) {
        (self.queue.len(), self.busy.len())
    }

    /// Start waiting jobs on free workers: one per tenant at a time, tenants in turn.
    fn dispatch(&mut self) {
        loop {
            if self.busy.len() >= self.workers || self.queue.is_empty() {
                return;
            }
            let busy = &self.busy;
            let Some((tenant, mut job)) = self.queue.pop(|t| busy.values().any(|b| b.tenant == t))
            else {
                return;
            };
            while self.alive < self.busy.len() + 1 {
                self.start_worker();
            }
            self.busy.insert(
                job.id,
                Busy {
                    tenant,
                    pid: job.pid,
                    started: Instant::now(),
                },
            );
            let id = job.id;
            job.queued_at = job.queued_at.min(Instant::now());
            if let Err(mpsc::SendError(_)) = self.jobs_tx.send(job) {
                // The receiver lives in `self`: cannot happen; the job is reported failed regardless.
                self.busy.remove(&id);
                let _ = self.reports_tx.send(WorkerReport::Failed {
                    id,
                    why: "no capture worker could take it".to_string(),
                });
            }
        }
    }

    fn start_worker(&mut self) {
        let jobs = self.jobs_rx.clone();
        let reports = self.reports_tx.clone();
        let name = format!("capture-{}", self.alive + self.lost);
        let started = std::thread::Builder::new()
            .name(name)
            .spawn(move || worker(&jobs, &reports));
        // A thread that cannot start leaves the count as is: the job waits in the channel for the others.
        if started.is_ok() {
            self.alive += 1;
        } else {
            self.alive = self.alive.max(1);
        }
    }

    /// The reports that arrived, without waiting; then free workers take waiting jobs.
    pub fn poll(&mut self) -> Vec<WorkerReport> {
        let mut reports = Vec::new();
        while let Ok(report) = self.reports_rx.try_recv() {
            self.note(&report);
            reports.push(report);
        }
        self.dispatch();
        reports
    }

    /// Wait up to `limit` for the running jobs to report (a stop: their probes were told to stop early).
    pub fn wait_running(&mut self, limit: Duration) -> Vec<WorkerReport> {
        let until = Instant::now() + limit;
        let mut reports = Vec::new();
        while !self.busy.is_empty() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match self.reports_rx.recv_timeout(left) {
                Ok(report) => {
                    self.note(&report);
                    reports.push(report);
                }
                Err(_) => break,
            }
        }
        reports
    }

    fn note(&mut self, report: &WorkerReport) {
        if !matches!(report, WorkerReport::SafeDone { .. }) {
            self.busy.remove(&report.id());
        }
    }

    /// Jobs running past their deadline and the grace after it: given up (their later reports are
    /// ignored by whoever no longer knows the id); a new worker replaces each lost one, up to `workers`.
    pub fn overdue(&mut self, give_up_after: Duration) -> Vec<(u64, i32, Duration)> {
        let limit = self.deadline + give_up_after;
        let late: Vec<(u64, i32, Duration)> = self
            .busy
            .iter()
            .filter(|(_, b)| b.started.elapsed() > limit)
            .map(|(&id, b)| (id, b.pid, b.started.elapsed()))
            .collect();
        for (id, _, _) in &late {
            self.busy.remove(id);
            self.alive = self.alive.saturating_sub(1);
            self.lost += 1;
            if self.lost > self.workers {
                // Enough threads were lost: run with fewer rather than pile up stuck threads.
                self.workers = self.workers.saturating_sub(1).max(1);
            }
        }
        self.dispatch();
        late
    }

    /// Every job still waiting, taken out (a stop).
    pub fn drain_queue(&mut self) -> Vec<CaptureJob> {
        self.queue.drain().into_iter().map(|(_, job)| job).collect()
    }

    /// Ids of the running jobs, taken out of the pool's books (a stop that cannot wait for them).
    pub fn abandon_running(&mut self) -> Vec<u64> {
        self.busy.drain().map(|(id, _)| id).collect()
    }
}

/// A worker thread: jobs until the pool is dropped.
fn worker(jobs: &Mutex<Receiver<CaptureJob>>, reports: &Sender<WorkerReport>) {
    loop {
        let job = {
            let receiver = jobs.lock().unwrap_or_else(|p| p.into_inner());
            receiver.recv()
        };
        let Ok(job) = job else {
            return;
        };
        let id = job.id;
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_job(job, reports)));
        if let Err(panic) = outcome {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_string());
            let _ = reports.send(WorkerReport::Failed {
                id,
                why: format!("the capture worker failed: {why}"),
            });
        }
    }
}

/// The safe stages, a report, the risky stages (the probes and the optional kill), a report. An episode
/// that ended before its first write landed gets no host context, no probes and no kill (they would
/// describe the process after its wedge).
fn run_job(mut job: CaptureJob, reports: &Sender<WorkerReport>) {
    let started = Instant::now();
    let limit = job.settings.capture_deadline;
    job.incident.push_timeline(format!(
        "capture started by a worker {} ms after it was queued",
        started.duration_since(job.queued_at).as_millis()
    ));
    let mut capture = Capture {
        settings: &job.settings,
        pid: job.pid,
        incident: &mut job.incident,
        handle: Some(&job.files),
        probes: &mut job.probes,
        since_ns: job.since_ns,
        wedge: job.wedge,
        episode_ended: job.episode_ended,
        killed: None,
        maps: None,
        capture_deadline: Some(CaptureDeadline {
            at: started + limit,
            limit,
        }),
        skip: &job.skip,
    };
    stages::run_phase(STAGES, Phase::Safe, &mut capture);
    if job.episode_ended {
        capture.incident.push_not_captured(
            "host context and probes",
            "the episode ended before the incident could be written",
        );
    } else {
        let _ = reports.send(WorkerReport::SafeDone {
            id: job.id,
            incident: Box::new(capture.incident.clone()),
        });
        stages::run_phase(STAGES, Phase::Risky, &mut capture);
    }
    let killed = capture.killed;
    stages::mark_done(&job.files);
    job.incident.push_timeline("capture complete");
    job.incident.complete = true;
    let _ = reports.send(WorkerReport::Finished {
        id: job.id,
        incident: Box::new(job.incident),
        killed,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use capture::ProcRoot;
    use reports::store::Store;

    fn job(pool: &mut CapturePool, store: &Store, tenant: &str, pid: i32) -> CaptureJob {
        let mut incident = Incident::new(pid);
        incident.process.comm = "t".into();
        let handle = store.create(&incident).unwrap();
        let files = handle.files();
        drop(handle);
        let mut settings = CaptureSettings::new(ProcRoot::new("/nonexistent-proc"));
        settings.watch.nvidia_smi = false;
        CaptureJob {
            id: pool.next_id(),
            pid,
            tenant: tenant.into(),
            incident,
            files,
            settings,
            probes: ProbeRunner::default(),
            since_ns: 0,
            wedge: false,
            episode_ended: false,
            skip: Vec::new(),
            queued_at: Instant::now(),
        }
    }

    #[test]
    fn jobs_run_on_workers_and_report_safe_then_finished() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), reports::retention::Retention::UNLIMITED).unwrap();
        let mut pool = CapturePool::new(2, Duration::from_secs(30), 4);
        let mut ids = Vec::new();
        for (tenant, pid) in [("a", 11), ("a", 12), ("b", 13)] {
            let j = job(&mut pool, &store, tenant, pid);
            ids.push(j.id);
            pool.submit(j).map_err(|_| "refused").unwrap();
        }
        // One per tenant in flight: a's second job waits.
        assert_eq!(pool.pending(), (1, 2));
        let mut finished = Vec::new();
        let until = Instant::now() + Duration::from_secs(60);
        while finished.len() < 3 && Instant::now() < until {
            for report in pool.wait_running(Duration::from_millis(100)) {
                if let WorkerReport::Finished { id, incident, .. } = report {
                    assert!(incident.complete);
                    assert!(
                        incident
                            .timeline
                            .iter()
                            .any(|t| t.event.starts_with("capture started by a worker")),
                        "{incident:?}"
                    );
                    finished.push(id);
                }
            }
            pool.poll();
        }
        finished.sort_unstable();
        assert_eq!(finished, ids);
        assert_eq!(pool.pending(), (0, 0));
    }

    #[test]
    fn a_tenant_over_its_queue_bound_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), reports::retention::Retention::UNLIMITED).unwrap();
        // No worker may start a job of tenant a while one runs: the queue holds the rest.
        let mut pool = CapturePool::new(1, Duration::from_secs(30), 1);
        let first = job(&mut pool, &store, "a", 1);
        pool.submit(first).map_err(|_| "refused").unwrap();
        let second = job(&mut pool, &store, "a", 2);
        pool.submit(second).map_err(|_| "refused").unwrap();
        let third = job(&mut pool, &store, "a", 3);
        assert!(pool.submit(third).is_err());
        let drained = pool.drain_queue();
        assert_eq!(drained.len(), 1);
        let _ = pool.wait_running(Duration::from_secs(30));
    }
}
