//! The host daemon behind `wedge-capture agent`: the shared watch loop ([`crate::watch::Watcher`]) fed by
//! the host target sources ([`crate::watch::sources`]), driven by signals and the service manager.
//!
//! Map:
//! - [`config`]: the JSON config file, command-line overrides, validation (reloaded on SIGHUP).
//! - [`log`]: one line per event on stderr (journald priority prefixes, plain or JSON).
//! - [`notify`]: sd_notify (READY, RELOADING, STOPPING, WATCHDOG, STATUS).
//! - [`ratelimit`]: at most one new incident per process per window.
//! - [`bench`]: the cost of finding targets (`agent --bench-scans N`).
//!
//! The loop (`below`-style): signals arrive on a channel, the loop waits on it with a timeout until the
//! next scan, so SIGTERM/SIGINT end the agent at once, after the scan or capture in progress (an incident
//! being written is finished first). SIGHUP re-reads the config (a bad one keeps the old settings);
//! SIGUSR1 writes an on-demand incident for every current target. WATCHDOG=1 is sent by this loop, after
//! scans that could list the host's processes, so a stuck or blind agent is restarted by systemd.

pub mod bench;
pub mod config;
pub mod log;
pub mod notify;
pub mod ratelimit;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use capture::ProcRoot;
use reports::retention::Retention;
use reports::store::Store;

use crate::exit::{ExitCode, Failure};
use crate::watch::launch::{signal_name, SignalChannel};
use crate::watch::sources::{HostSource, SharedSource};
use crate::watch::tracker::TrackerConfig;
use crate::watch::{CaptureEvent, CaptureSettings, Capturer, WatchConfig, Watcher};

use config::{Overrides, Settings};
use log::{Level, Logger};
use notify::Notifier;
use ratelimit::RateLimit;

/// Most on-demand incidents written for one SIGUSR1 (each runs the risky probes).
pub const MAX_ON_DEMAND: usize = 64;

fn watch_config(settings: &Settings) -> WatchConfig {
    WatchConfig {
        interval: settings.interval,
        tracker: TrackerConfig {
            threshold: settings.threshold,
            samples: settings.samples,
        },
    }
}

/// Where the settings come from (kept for reloads).
#[derive(Debug, Clone)]
pub struct Origin {
    pub config: Option<PathBuf>,
    pub overrides: Overrides,
}

struct Daemon {
    origin: Origin,
    settings: Settings,
    logger: Logger,
    proc_root: ProcRoot,
    source: SharedSource,
    watcher: Watcher,
    notifier: Notifier,
    rate: RateLimit,
    /// pid → why, as of the last scan (to log targets that come and go).
    watched: HashMap<i32, String>,
    healthy: bool,
    incidents_written: u64,
    /// Episodes open after the last scan.
    open_count: usize,
    /// The last STATUS= sent to the service manager.
    last_status: String,
}

/// Run the agent until SIGTERM or SIGINT.
pub fn run(origin: Origin) -> anyhow::Result<ExitCode> {
    let settings = config::resolve(origin.config.as_deref(), &origin.overrides)
        .map_err(|e| Failure::new(ExitCode::USAGE, format!("bad configuration: {e}")))?;
    let logger = Logger::new(settings.log_format);
    crate::cmd::run::check_writable(&settings.out)?;
    let store = Store::open(&settings.out, Retention::DEFAULT)
        .with_context(|| format!("cannot open the incident store {}", settings.out.display()))?;
    // Before anything else can run: no signal may be lost.
    let signals = SignalChannel::new(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1])
        .context("cannot install signal handlers")?;
    let proc_root = ProcRoot::default();
    for (cap, cost) in crate::cmd::run::missing_capabilities(&proc_root) {
        logger.warning(&format!("missing {cap}: {cost}"));
    }
    let mut capture = CaptureSettings::new(proc_root.clone());
    capture.ring_dirs = settings.ring_dirs.clone();
    capture.probe_timeout = settings.probe_timeout;
    capture.nvidia_smi = settings.nvidia_smi;
    capture.resample_every = settings.resample_every;
    let source = SharedSource::new(HostSource::new(
        settings.selection(),
        settings.source_settings(),
    ));
    let watcher = Watcher::new(
        watch_config(&settings),
        Box::new(source.clone()),
        Capturer::new(capture, store),
        proc_root.clone(),
    );
    let mut daemon = Daemon {
        rate: RateLimit::new(settings.rate_limit),
        origin,
        logger,
        proc_root,
        source,
        watcher,
        notifier: Notifier::from_env(),
        watched: HashMap::new(),
        healthy: true,
        incidents_written: 0,
        open_count: 0,
        last_status: String::new(),
        settings,
    };
    daemon.logger.notice(&format!(
        "started (pid {}): {}",
        std::process::id(),
        daemon.settings.summary()
    ));
    daemon.run_loop(&signals);
    Ok(ExitCode::OK)
}

impl Daemon {
    fn run_loop(&mut self, signals: &SignalChannel) {
        // Ready means watching: the first scan is done before READY=1.
        self.scan();
        self.notifier.ready(&self.status());
        let mut last_ping = Instant::now();
        self.ping(&mut last_ping);
        let mut next_scan = Instant::now() + self.settings.interval;
        let mut queued: VecDeque<i32> = VecDeque::new();
        loop {
            let now = Instant::now();
            if now >= next_scan {
                self.scan();
                self.ping(&mut last_ping);
                next_scan += self.settings.interval;
                if next_scan < Instant::now() {
                    // A capture took longer than an interval: don't burst scans to catch up.
                    next_scan = Instant::now() + self.settings.interval;
                }
            }
            let mut wait = next_scan.saturating_duration_since(Instant::now());
            if let Some(watchdog) = self.notifier.watchdog() {
                wait = wait.min(watchdog / 4);
                if last_ping.elapsed() >= watchdog / 4 {
                    self.ping(&mut last_ping);
                }
            }
            let signal = match queued.pop_front() {
                Some(signal) => signal,
                None => match signals.wait(wait) {
                    Some(signal) => signal,
                    None => continue,
                },
            };
            match signal {
                libc::SIGTERM | libc::SIGINT => {
                    self.stop(signal);
                    return;
                }
                libc::SIGHUP => {
                    self.reload();
                    next_scan = Instant::now();
                }
                libc::SIGUSR1 => {
                    self.capture_now(signals, &mut queued);
                    if queued
                        .iter()
                        .any(|&s| s == libc::SIGTERM || s == libc::SIGINT)
                    {
                        continue;
                    }
                }
                other => self
                    .logger
                    .info(&format!("ignoring {}", signal_name(other))),
            }
        }
    }

    fn status(&self) -> String {
        format!(
            "watching {} processes; {} incidents open; {} written since start",
            self.watched.len(),
            self.open_count,
            self.incidents_written
        )
    }

    fn ping(&self, last_ping: &mut Instant) {
        if self.healthy {
            self.notifier.watchdog_ping();
            *last_ping = Instant::now();
        }
    }

    fn stop(&mut self, signal: i32) {
        self.notifier.stopping();
        let open = self.watcher.capturer().open_incidents();
        let mut message = format!("{}: stopping", signal_name(signal));
        if !open.is_empty() {
            message.push_str(&format!(
                "; {} incidents stay open (their process is still wedged): {}",
                open.len(),
                open.iter()
                    .map(|(_, p)| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        self.logger.notice(&message);
    }

    /// One scan: rate limit, targets, capture; log what changed.
    fn scan(&mut self) {
        let now = Instant::now();
        let open: std::collections::HashSet<i32> = self
            .watcher
            .capturer()
            .open_incidents()
            .into_iter()
            .map(|(pid, _)| pid)
            .collect();
        let proc_root = &self.proc_root;
        let suppressed = self.rate.suppressed(
            now,
            |pid| open.contains(&pid),
            |pid| proc_root.read_stat(pid).ok().map(|s| s.starttime),
        );
        self.source.lock().set_suppressed(suppressed);
        let events = self.watcher.tick();
        for event in &events {
            self.log_event(event);
        }
        self.open_count = self.watcher.capturer().open_incidents().len();
        let (notes, healthy) = {
            let mut source = self.source.lock();
            (source.take_notes(), source.healthy())
        };
        for note in notes {
            if let Some(rest) = note.strip_prefix("warning: ") {
                self.logger.warning(rest);
            } else if let Some(rest) = note.strip_prefix("error: ") {
                self.logger.error(rest);
            } else {
                self.logger.info(&note);
            }
        }
        if healthy != self.healthy {
            if healthy {
                self.logger
                    .notice("the host's processes can be listed again");
            } else {
                self.logger
                    .error("cannot list the host's processes: watchdog pings withheld");
            }
        }
        self.healthy = healthy;
        self.log_target_changes();
        let status = self.status();
        if status != self.last_status {
            self.notifier.status(&status);
            self.last_status = status;
        }
    }

    fn log_target_changes(&mut self) {
        let targets = self.watcher.targets();
        let mut current = HashMap::with_capacity(targets.len());
        for target in targets {
            if !self.watched.contains_key(&target.pid) {
                self.logger.event(
                    Level::Info,
                    &format!("watching pid {}: {}", target.pid, target.why),
                    serde_json::json!({"event": "target", "pid": target.pid, "why": target.why}),
                );
            }
            current.insert(target.pid, target.why.clone());
        }
        for pid in self.watched.keys() {
            if !current.contains_key(pid) {
                self.logger.event(
                    Level::Info,
                    &format!("pid {pid} no longer watched"),
                    serde_json::json!({"event": "target-gone", "pid": pid}),
                );
            }
        }
        self.watched = current;
    }

    fn log_event(&mut self, event: &CaptureEvent) {
        match event {
            CaptureEvent::Opened {
                pid,
                tid,
                path,
                durable_after,
            } => {
                self.incidents_written += 1;
                if let Ok(stat) = self.proc_root.read_stat(*pid) {
                    self.rate.record(*pid, stat.starttime, Instant::now());
                }
                self.logger.event(
                    Level::Notice,
                    &format!(
                        "incident {}: pid {pid} thread {tid} (durable {} ms after detection)",
                        path.display(),
                        durable_after.as_millis()
                    ),
                    serde_json::json!({"event": "incident", "pid": pid, "tid": tid,
                        "incident": path, "durable_ms": durable_after.as_secs_f64() * 1e3}),
                );
            }
            CaptureEvent::Completed {
                pid, path, verdict, ..
            } => self.logger.event(
                Level::Info,
                &format!("incident {} complete: {verdict}", path.display()),
                serde_json::json!({"event": "complete", "pid": pid, "incident": path,
                    "verdict": verdict}),
            ),
            CaptureEvent::Updated { .. } => {}
            CaptureEvent::Resolved { pid, path, after } => self.logger.event(
                Level::Notice,
                &format!(
                    "incident {}: pid {pid} recovered after {} s",
                    path.display(),
                    after.as_secs_f64().round() as u64
                ),
                serde_json::json!({"event": "resolved", "pid": pid, "incident": path,
                    "after_s": after.as_secs_f64()}),
            ),
            CaptureEvent::Failed { pid, message } => self.logger.event(
                Level::Error,
                &format!("capture of pid {pid} failed: {message}"),
                serde_json::json!({"event": "failed", "pid": pid}),
            ),
            // Raised once per episode by the capturer, which retries the write at every scan.
            CaptureEvent::WritePending { pid, tid, message } => self.logger.event(
                Level::Error,
                &format!("pid {pid}: {message}"),
                serde_json::json!({"event": "write-pending", "pid": pid, "tid": tid}),
            ),
            CaptureEvent::Landed {
                pid,
                path,
                after,
                why,
            } => self.logger.event(
                Level::Warning,
                &format!(
                    "incident {}: pid {pid} durable {:.1} s after detection; {why}",
                    path.display(),
                    after.as_secs_f64()
                ),
                serde_json::json!({"event": "landed", "pid": pid, "incident": path,
                    "after_s": after.as_secs_f64(), "why": why}),
            ),
            CaptureEvent::Gone { pid, tid, total } => self.logger.event(
                Level::Info,
                &format!(
                    "pid {pid} thread {tid} was gone before its capture began: no incident \
                     ({total} such wedges so far)"
                ),
                serde_json::json!({"event": "gone-before-capture", "pid": pid, "tid": tid,
                    "total": total}),
            ),
        }
    }

    /// SIGHUP: re-read the config; a bad one keeps the current settings.
    fn reload(&mut self) {
        self.notifier.reloading();
        match config::resolve(self.origin.config.as_deref(), &self.origin.overrides) {
            Ok(new) => {
                let fixed = self.settings.needs_restart(&new);
                if !fixed.is_empty() {
                    self.logger.warning(&format!(
                        "reload: {} cannot change without a restart; keeping the current value",
                        fixed.join(", ")
                    ));
                }
                let new = Settings {
                    out: self.settings.out.clone(),
                    probe_timeout: self.settings.probe_timeout,
                    nvidia_smi: self.settings.nvidia_smi,
                    resample_every: self.settings.resample_every,
                    ..new
                };
                self.source
                    .lock()
                    .reconfigure(new.selection(), new.source_settings());
                self.watcher.set_config(watch_config(&new));
                self.watcher.capturer().set_ring_dirs(new.ring_dirs.clone());
                self.rate.set_window(new.rate_limit);
                self.logger = Logger::new(new.log_format);
                self.settings = new;
                self.logger.notice(&format!(
                    "SIGHUP: configuration reloaded: {}",
                    self.settings.summary()
                ));
            }
            Err(err) => self.logger.error(&format!(
                "SIGHUP: reload failed, keeping the previous configuration: {err}"
            )),
        }
        self.notifier.ready(&self.status());
    }

    /// SIGUSR1: a fresh scan, then an on-demand incident for every target (at most [`MAX_ON_DEMAND`]).
    /// Signals arriving meanwhile are queued; SIGTERM/SIGINT stop the series after the incident in progress.
    fn capture_now(&mut self, signals: &SignalChannel, queued: &mut VecDeque<i32>) {
        self.scan();
        let pids: Vec<i32> = self.watcher.targets().iter().map(|t| t.pid).collect();
        if pids.is_empty() {
            self.logger
                .notice("SIGUSR1: no process is watched now; nothing captured");
            return;
        }
        self.logger.notice(&format!(
            "SIGUSR1: on-demand capture of {} processes{}",
            pids.len().min(MAX_ON_DEMAND),
            if pids.len() > MAX_ON_DEMAND {
                format!(" (the first {MAX_ON_DEMAND} of {})", pids.len())
            } else {
                String::new()
            }
        ));
        for pid in pids.into_iter().take(MAX_ON_DEMAND) {
            let mut events = Vec::new();
            self.watcher
                .capturer()
                .capture_on_demand(pid, "SIGUSR1", &mut events);
            for event in &events {
                if let CaptureEvent::Opened { path, .. } = event {
                    // Counted, but not rate-limited: it was asked for.
                    self.incidents_written += 1;
                    self.logger.event(
                        Level::Notice,
                        &format!("on-demand incident {}: pid {pid}", path.display()),
                        serde_json::json!({"event": "on-demand", "pid": pid, "incident": path}),
                    );
                } else {
                    self.log_event(event);
                }
            }
            while let Ok(signal) = signals.receiver.try_recv() {
                queued.push_back(signal);
            }
            if queued
                .iter()
                .any(|&s| s == libc::SIGTERM || s == libc::SIGINT)
            {
                self.logger
                    .notice("stop requested: on-demand capture interrupted");
                return;
            }
        }
    }
}
