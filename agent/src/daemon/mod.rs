//! The host daemon behind `wedge-capture agent`: the shared watch loop ([`crate::watch::Watcher`]) fed by
//! the host target sources ([`sources`]), driven by signals and the service manager.
//!
//! Map:
//! - [`config`]: the JSON config file, command-line overrides, validation (reloaded on SIGHUP).
//! - [`log`]: one line per event on stderr (journald priority prefixes, plain or JSON); what a container
//!   can cause goes through its per-cause, per-minute [`log::Limiter`].
//! - [`notify`]: sd_notify (READY, RELOADING, STOPPING, WATCHDOG, STATUS).
//! - [`ratelimit`]: at most one new incident per process per window; one on-demand incident per process
//!   per `on_demand_rate_limit`.
//! - [`sources`]: the host target sources (comm, cgroup, processes holding `/dev/nvidia*`, ring directories).
//! - [`metrics`], [`http`]: Prometheus metrics (`--metrics-listen`, `--textfile-dir`), published by the
//!   loop after each scan and served by a bounded server thread that the loop never waits on.
//! - [`xids`]: the kernel log's Xid lines counted once each, across restarts (`wedge_capture_xid_total`).
//! - ring files (discovery, trust checks, reading) live in [`crate::rings`], which `run` uses too.
//!
//! The loop (`below`-style): signals arrive on a channel, the loop waits on it with a timeout until the
//! next scan. Signals are coalesced ([`Pending`]) and served by priority: SIGTERM/SIGINT first, ahead of
//! any queued work; then SIGHUP (re-read the config, at most once per interval; a bad one keeps the old
//! settings; a storm is summed up in one line), a due scan, and
//! SIGUSR1 (an on-demand incident for every current target, at most one per process per
//! `on_demand_rate_limit`). Any number of SIGUSR1 arriving during a capture make one more run, and a
//! burst of them is summed up in one log line when it is over. SIGTERM also sets a flag the probe runner
//! polls, so a stop never waits out a probe deadline: the agent exits within 2 s under any storm (the
//! incident being written is finished first, its interrupted probes marked as such). WATCHDOG=1 is sent
//! by this loop, after scans that could list the host's processes, so a stuck or blind agent is
//! restarted by systemd.

pub mod config;
pub mod http;
pub mod log;
pub mod metrics;
pub mod notify;
pub mod ratelimit;
pub mod sources;
pub mod xids;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use capture::ProcRoot;
use reports::retention::Retention;
use reports::store::Store;

use crate::exit::{ExitCode, Failure};
use crate::preflight;
use crate::watch::launch::{signal_name, SignalChannel};
use crate::watch::{CaptureEvent, Capturer, Watcher};
use sources::{HostSource, SharedSource};

use crate::settings::Settings;
use log::{Level, Logger};
use notify::Notifier;
use ratelimit::{OnDemandLimit, RateLimit};

/// Most on-demand incidents written for one SIGUSR1 (each runs the risky probes).
pub const MAX_ON_DEMAND: usize = 64;
/// A SIGUSR1 burst is over when none came for this long; then it is summed up in one log line.
const BURST_QUIET: Duration = Duration::from_secs(1);
/// A scan this recent is fresh enough for an on-demand run: a SIGUSR1 storm must not become a scan storm.
const FRESH_SCAN: Duration = Duration::from_millis(200);
/// How long to wait for the channel to name a stop signal whose flag is already set.
const STOP_NAME_WAIT: Duration = Duration::from_millis(50);

/// Signals received and not acted on yet, coalesced: one reload for any number of SIGHUP, one on-demand
/// run for any number of SIGUSR1, and a stop that wins over both.
#[derive(Debug, Default)]
struct Pending {
    stop: Option<i32>,
    reload: bool,
    /// SIGUSR1 received since the last on-demand run started.
    capture: u64,
}

/// The SIGUSR1 signals of one burst (until [`BURST_QUIET`] passes without one), for its summary line.
#[derive(Debug)]
struct Burst {
    signals: u64,
    runs: u64,
    captured: u64,
    /// Targets left out of a run because they had an on-demand incident within the window.
    limited: u64,
    first: Instant,
    last: Instant,
}

/// Where the settings come from (kept for reloads).
#[derive(Debug, Clone)]
pub struct Origin {
    pub config: Option<PathBuf>,
    /// The flags given (they win over the file).
    pub flags: crate::settings::Options,
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
    on_demand: OnDemandLimit,
    /// Set from the SIGTERM/SIGINT handler itself; the probe runner polls it.
    stop_requested: Arc<AtomicBool>,
    pending: Pending,
    burst: Option<Burst>,
    last_scan: Instant,
    /// pid → why, as of the last scan (to log targets that come and go).
    watched: HashMap<i32, String>,
    healthy: bool,
    incidents_written: u64,
    /// Episodes open after the last scan.
    open_count: usize,
    /// The last STATUS= sent to the service manager.
    last_status: String,
    metrics: metrics::Metrics,
    /// Log lines a container can cause, capped per cause and per minute (see [`log::Limiter`]).
    limiter: log::Limiter,
    /// SIGHUPs coalesced into at most one reload per interval, summed up in one line per storm.
    reloads: Reloads,
    /// The kernel log's Xid lines, counted once each across restarts (`wedge_capture_xid_total`).
    xids: Option<xids::XidCounter>,
    /// Where the node's root is (the kubelet's container log names, for the wedged-process info labels).
    node_root: PathBuf,
    /// Container names by container id, for the wedged processes only.
    container_names: HashMap<String, Option<String>>,
}

/// SIGHUPs of one storm (until [`BURST_QUIET`] passes without one and no reload is due).
#[derive(Debug, Default)]
struct Reloads {
    last: Option<Instant>,
    signals: u64,
    done: u64,
    failed: u64,
    first: Option<Instant>,
    last_signal: Option<Instant>,
    /// What the previous reload of the storm logged: a later one logs only when it differs.
    last_outcome: String,
}

/// The limiter's cause of a host source's note: ring files refused, ring writers found (both made by
/// containers, each capped on its own so one never hides the other), and the rest.
fn note_cause(note: &str) -> &'static str {
    if note.starts_with("ring ") && note.contains(": writer is pid ") {
        "ring-writer"
    } else if note.starts_with("ring ") || note.contains(" ring files ") {
        "ring-refused"
    } else {
        "source-note"
    }
}

/// Run the agent until SIGTERM or SIGINT.
pub fn run(origin: Origin) -> anyhow::Result<ExitCode> {
    let settings = Settings::load(origin.config.as_deref(), &origin.flags)
        .map_err(|e| Failure::new(ExitCode::USAGE, format!("bad configuration: {e}")))?;
    let logger = Logger::new(settings.agent.log_format);
    // The store creates a missing directory with its own restrictive mode (0700, like `run`); then
    // prove it can be written.
    let store = Store::open(&settings.watch.out, Retention::DEFAULT)
        .with_context(|| {
            format!(
                "cannot open the incident store {}",
                settings.watch.out.display()
            )
        })?
        .log_removals(move |removal| {
            let fields = serde_json::to_value(removal).unwrap_or_default();
            logger.event(Level::Notice, &removal.to_string(), fields)
        });
    preflight::check_writable(&settings.watch.out)?;
    // Before anything else can run: no signal may be lost.
    let stop_requested = Arc::new(AtomicBool::new(false));
    for signal in [libc::SIGINT, libc::SIGTERM] {
        signal_hook::flag::register(signal, stop_requested.clone())
            .context("cannot install signal handlers")?;
    }
    let signals = SignalChannel::new(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1])
        .context("cannot install signal handlers")?;
    let proc_root = ProcRoot::default();
    for (cap, cost) in preflight::missing_capabilities(&proc_root) {
        logger.warning(&format!("missing {cap}: {cost}"));
    }
    let capture = settings.capture_settings(proc_root.clone());
    let node_root = capture.node_root.clone();
    let xid_counter = match xids::XidCounter::open(
        &capture.kmsg_path,
        &settings.watch.out,
        proc_root.boot_id().ok(),
    ) {
        Ok(counter) => Some(counter),
        Err(err) => {
            logger.warning(&format!("Xid lines will not be counted: {err}"));
            None
        }
    };
    let source = SharedSource::new(HostSource::new(
        settings.selection(),
        settings.source_settings(),
    ));
    // Before the endpoint: the watcher's set-up (the BPF task iterator's load, ~0.1 s) must not sit
    // between "serving metrics" and the first scan.
    let mut watcher = Watcher::new(
        settings.watch.watch_config(),
        Box::new(source.clone()),
        Capturer::new(capture, store),
        proc_root.clone(),
    );
    let metrics = start_metrics(&settings, &logger)?;
    let scheduling = crate::watch::raise_watch_priority();
    watcher.capturer().set_cancel(stop_requested.clone());
    let mut daemon = Daemon {
        rate: RateLimit::new(settings.agent.rate_limit),
        on_demand: OnDemandLimit::new(settings.agent.on_demand_rate_limit),
        stop_requested,
        pending: Pending::default(),
        burst: None,
        last_scan: Instant::now(),
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
        metrics,
        limiter: log::Limiter::default(),
        reloads: Reloads::default(),
        xids: xid_counter,
        node_root,
        container_names: HashMap::new(),
        settings,
    };
    daemon.logger.notice(&format!(
        "started (pid {}): {}; watch loop scheduling: {scheduling}; quiet-process shortcut: {}; busy-process shortcut: {}",
        std::process::id(),
        daemon.settings.summary(),
        daemon.watcher.quiet_shortcut(),
        daemon.watcher.thread_shortcut()
    ));
    daemon.run_loop(&signals);
    Ok(ExitCode::OK)
}

/// The metrics, and their server when `metrics_listen` is set (started before the loop gets its real-time
/// priority: the server's threads keep the normal policy).
fn start_metrics(settings: &Settings, logger: &Logger) -> anyhow::Result<metrics::Metrics> {
    // Generous: a capture's probes can hold the loop for several probe deadlines.
    let stale_after = (settings.watch.interval * 10).max(crate::defaults::METRICS_STALE_AFTER);
    let metrics = metrics::Metrics::new(settings.agent.textfile_dir.clone(), stale_after);
    if let Some(addr) = settings.agent.metrics_listen {
        let bound = http::serve(addr, metrics.published()).map_err(|e| {
            Failure::new(
                ExitCode::ERROR,
                format!(
                    "cannot serve metrics on {addr} (metrics_listen): {e}{}",
                    crate::host::sandbox::bind_hint(&e)
                ),
            )
        })?;
        logger.notice(&format!("serving metrics on http://{bound}/metrics"));
    }
    Ok(metrics)
}

/// How long a stop waits for the captures in flight (their probes end at the stop request; SIGTERM must
/// be done within 2 s).
const STOP_CAPTURE_WAIT: Duration = Duration::from_millis(1000);

impl Daemon {
    fn run_loop(&mut self, signals: &SignalChannel) {
        // Ready means watching: the first scan is done before READY=1.
        self.scan();
        self.notifier.ready(&self.status());
        let mut last_ping = Instant::now();
        self.ping(&mut last_ping);
        let mut next_scan = Instant::now() + self.settings.watch.interval;
        loop {
            while let Ok(signal) = signals.receiver.try_recv() {
                self.note(signal);
            }
            if let Some(signal) = self.stop_signal(signals) {
                self.stop(signal);
                return;
            }
            if let Some(watchdog) = self.notifier.watchdog() {
                if last_ping.elapsed() >= watchdog / 4 {
                    self.ping(&mut last_ping);
                }
            }
            if self.pending.reload && self.reload_due() {
                self.pending.reload = false;
                self.reload();
                next_scan = Instant::now();
            }
            if Instant::now() >= next_scan {
                self.scan();
                self.ping(&mut last_ping);
                next_scan += self.settings.watch.interval;
                if next_scan < Instant::now() {
                    // A capture took longer than an interval: don't burst scans to catch up.
                    next_scan = Instant::now() + self.settings.watch.interval;
                }
                continue;
            }
            if self.pending.capture > 0 {
                self.capture_now();
                continue;
            }
            self.end_burst(false);
            self.end_reload_storm(false);
            let mut wait = next_scan.saturating_duration_since(Instant::now());
            if let Some(due) = self.next_reload() {
                wait = wait.min(due.saturating_duration_since(Instant::now()));
            }
            if let Some(watchdog) = self.notifier.watchdog() {
                wait = wait.min(watchdog / 4);
            }
            if let Some(burst) = &self.burst {
                wait =
                    wait.min((burst.last + BURST_QUIET).saturating_duration_since(Instant::now()));
            }
            if let Some(signal) = signals.wait(wait) {
                self.note(signal);
            }
        }
    }

    /// Record a received signal in [`Pending`] (coalescing) and in the current SIGUSR1 burst.
    fn note(&mut self, signal: i32) {
        match signal {
            libc::SIGTERM | libc::SIGINT => {
                self.pending.stop.get_or_insert(signal);
            }
            libc::SIGHUP => {
                self.pending.reload = true;
                let now = Instant::now();
                self.reloads.signals += 1;
                self.reloads.first.get_or_insert(now);
                self.reloads.last_signal = Some(now);
            }
            libc::SIGUSR1 => {
                self.pending.capture += 1;
                let now = Instant::now();
                let burst = self.burst.get_or_insert(Burst {
                    signals: 0,
                    runs: 0,
                    captured: 0,
                    limited: 0,
                    first: now,
                    last: now,
                });
                burst.signals += 1;
                burst.last = now;
            }
            other => self
                .logger
                .info(&format!("ignoring {}", signal_name(other))),
        }
    }

    /// The stop signal, when one was received: from the channel, or from the flag the handler sets (then
    /// the channel names it a moment later).
    fn stop_signal(&mut self, signals: &SignalChannel) -> Option<i32> {
        if self.pending.stop.is_none() && self.stop_requested.load(Ordering::SeqCst) {
            let until = Instant::now() + STOP_NAME_WAIT;
            while self.pending.stop.is_none() {
                match signals.wait(until.saturating_duration_since(Instant::now())) {
                    Some(signal) => self.note(signal),
                    None => break,
                }
            }
            return Some(self.pending.stop.unwrap_or(libc::SIGTERM));
        }
        self.pending.stop
    }

    fn stopping(&self) -> bool {
        self.pending.stop.is_some() || self.stop_requested.load(Ordering::SeqCst)
    }

    /// Log the SIGUSR1 burst's summary once it is over (`force`: now, at stop). One line per burst, never
    /// one per signal; nothing when every signal got its own run and nothing was left out.
    fn end_burst(&mut self, force: bool) {
        let Some(burst) = &self.burst else { return };
        if !force && (self.pending.capture > 0 || burst.last.elapsed() < BURST_QUIET) {
            return;
        }
        let Some(burst) = self.burst.take() else {
            return;
        };
        if burst.signals <= burst.runs && burst.limited == 0 {
            return;
        }
        let window = self.on_demand.window();
        self.logger.event(
            Level::Notice,
            &format!(
                "SIGUSR1 burst: {} signals in {:.1} s served by {} on-demand runs (the rest coalesced): \
                 {} incidents written, {} captures skipped (at most one on-demand incident per process \
                 per {}, on_demand_rate_limit)",
                burst.signals,
                burst.last.duration_since(burst.first).as_secs_f64(),
                burst.runs,
                burst.captured,
                burst.limited,
                crate::probe::human_duration(window),
            ),
            serde_json::json!({"event": "on-demand-burst", "signals": burst.signals,
                "runs": burst.runs, "incidents": burst.captured, "skipped": burst.limited,
                "window_s": window.as_secs_f64()}),
        );
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
        self.end_burst(true);
        self.end_reload_storm(true);
        let open = self.watcher.capturer().open_incidents();
        // Their final write says they were still wedged when the agent stopped watching.
        let mut events = Vec::new();
        // The stop request has cut the captures' probes short: a moment for them to come back.
        self.watcher
            .capturer()
            .shutdown(STOP_CAPTURE_WAIT, &mut events);
        for event in &events {
            self.log_event(event);
        }
        // Where Xid counting stands, for the next start.
        self.count_xids();
        if let Some(Err(err)) = self.xids.as_mut().map(|c| c.save()) {
            self.logger.warning(&err);
        }
        // The textfile keeps the last numbers and says when the agent stopped (never numbers that look current).
        if let Err(err) = self.metrics.stopped() {
            self.logger.warning(&err);
        }
        let mut message = format!("{}: stopping", signal_name(signal));
        if !open.is_empty() {
            message.push_str(&format!(
                "; {} incidents recorded as still wedged at exit: {}",
                open.len(),
                open.iter()
                    .map(|(_, p)| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        self.limiter.flush_now(&self.logger);
        self.logger.notice(&message);
    }

    /// A reload may run now: none ran within the last interval (a SIGHUP storm is one reload per interval).
    fn reload_due(&self) -> bool {
        self.next_reload().is_none_or(|due| Instant::now() >= due)
    }

    /// When a pending reload may run (None: no reload ran yet, it may run at once).
    fn next_reload(&self) -> Option<Instant> {
        if !self.pending.reload {
            return None;
        }
        self.reloads
            .last
            .map(|last| last + self.settings.watch.interval)
    }

    /// Sum up a SIGHUP storm in one line once it is over (`force`: now, at stop): nothing when every
    /// signal got its own reload.
    fn end_reload_storm(&mut self, force: bool) {
        let Some(last_signal) = self.reloads.last_signal else {
            return;
        };
        if !force && (self.pending.reload || last_signal.elapsed() < BURST_QUIET) {
            return;
        }
        let storm = std::mem::take(&mut self.reloads);
        self.reloads.last = storm.last;
        if storm.signals <= storm.done.max(1) {
            return;
        }
        let first = storm.first.unwrap_or(last_signal);
        self.logger.event(
            Level::Notice,
            &format!(
                "SIGHUP storm: {} signals in {:.1} s served by {} reloads (at most one per interval; {} failed)",
                storm.signals,
                last_signal.duration_since(first).as_secs_f64(),
                storm.done,
                storm.failed
            ),
            serde_json::json!({"event": "reload-storm", "signals": storm.signals,
                "reloads": storm.done, "failed": storm.failed}),
        );
    }

    /// One scan: rate limit, targets, capture; log what changed.
    fn scan(&mut self) {
        let now = Instant::now();
        self.last_scan = now;
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
        // The sources' notes are about what containers put on the host (ring files, processes): limited.
        for note in notes {
            let (level, text) = if let Some(rest) = note.strip_prefix("warning: ") {
                (Level::Warning, rest)
            } else if let Some(rest) = note.strip_prefix("error: ") {
                (Level::Error, rest)
            } else {
                (Level::Info, note.as_str())
            };
            self.limiter
                .log(&self.logger, note_cause(text), level, text);
        }
        self.limiter.flush(&self.logger);
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
        self.count_xids();
        let wedged: Vec<&reports::model::Incident> =
            self.watcher.capturer().wedged_incidents().collect();
        let ids: std::collections::HashSet<&str> = wedged
            .iter()
            .filter_map(|i| i.process.container.as_ref().map(|c| c.id.as_str()))
            .collect();
        self.container_names
            .retain(|id, _| ids.contains(id.as_str()));
        let labels = wedged
            .iter()
            .map(|i| metrics::wedged_process_labels(i, &self.node_root, &mut self.container_names))
            .collect();
        self.metrics.set_wedged_processes(labels);
        let numbers = metrics::ScanNumbers {
            summary: self.watcher.wedge_summary(),
            targets: self.watcher.targets().len(),
            probe_timeouts: self.watcher.capturer().probe_timeouts(),
            captures: self.watcher.capturer().captures_pending(),
            finished_at: self
                .watcher
                .last_scan_at()
                .unwrap_or_else(std::time::SystemTime::now),
        };
        if let Err(err) = self.metrics.observe_scan(numbers) {
            self.logger.warning(&err);
        }
        let status = self.status();
        if status != self.last_status {
            self.notifier.status(&status);
            self.last_status = status;
        }
    }

    /// The kernel log's new Xid and SXid lines, each counted once.
    fn count_xids(&mut self) {
        let Some(counter) = self.xids.as_mut() else {
            return;
        };
        if let Err(err) = counter.poll(&mut self.metrics) {
            self.limiter
                .log(&self.logger, "xid-state", Level::Warning, &err);
        }
    }

    fn log_target_changes(&mut self) {
        let targets = self.watcher.targets();
        let mut current = HashMap::with_capacity(targets.len());
        for target in targets {
            if !self.watched.contains_key(&target.pid) {
                self.limiter.event(
                    &self.logger,
                    "target",
                    Level::Info,
                    &format!("watching pid {}: {}", target.pid, target.why),
                    serde_json::json!({"event": "target", "pid": target.pid, "why": target.why}),
                );
            }
            current.insert(target.pid, target.why.clone());
        }
        for pid in self.watched.keys() {
            if !current.contains_key(pid) {
                self.limiter.event(
                    &self.logger,
                    "target-gone",
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
            CaptureEvent::Opened { pid, .. } => {
                self.incidents_written += 1;
                self.metrics.incident(metrics::IncidentTrigger::Wedge);
                self.record_rate(*pid);
            }
            // Not a new incident: neither `incidents_written` nor the incidents counter moves.
            CaptureEvent::Adopted { pid, .. } => self.record_rate(*pid),
            _ => {}
        }
        if event.is_said() {
            self.limiter.event(
                &self.logger,
                event.cause(),
                level_of(event),
                &event.to_string(),
                event.fields(),
            );
        }
    }

    /// The rate limit counts from the incident, per process (pid and start time).
    fn record_rate(&mut self, pid: i32) {
        if let Ok(stat) = self.proc_root.read_stat(pid) {
            self.rate.record(pid, stat.starttime, Instant::now());
        }
    }

    /// SIGHUP: re-read the config; a bad one keeps the current settings.
    fn reload(&mut self) {
        self.notifier.reloading();
        self.reloads.last = Some(Instant::now());
        self.reloads.done += 1;
        let (level, outcome) =
            match Settings::load(self.origin.config.as_deref(), &self.origin.flags) {
                Ok(new) => {
                    let fixed = self.settings.needs_restart(&new);
                    let new = self.settings.reloaded(new);
                    self.source
                        .lock()
                        .reconfigure(new.selection(), new.source_settings());
                    self.watcher.set_config(new.watch.watch_config());
                    self.watcher
                        .capturer()
                        .set_ring_dirs(new.agent.ring_dir.clone());
                    self.rate.set_window(new.agent.rate_limit);
                    self.on_demand.set_window(new.agent.on_demand_rate_limit);
                    self.metrics
                        .set_textfile_dir(new.agent.textfile_dir.clone());
                    self.logger = Logger::new(new.agent.log_format);
                    self.settings = new;
                    let mut line = format!(
                        "SIGHUP: configuration reloaded: {}",
                        self.settings.summary()
                    );
                    if !fixed.is_empty() {
                        line.push_str(&format!(
                            "; {} cannot change without a restart: kept the current value",
                            fixed.join(", ")
                        ));
                    }
                    (Level::Notice, line)
                }
                Err(err) => {
                    self.reloads.failed += 1;
                    (
                        Level::Error,
                        format!("SIGHUP: reload failed, keeping the previous configuration: {err}"),
                    )
                }
            };
        // In a storm, a reload that changed nothing says nothing: the storm's summary line counts it.
        if outcome != self.reloads.last_outcome {
            self.logger.log(level, &outcome);
            self.reloads.last_outcome = outcome;
        }
        self.notifier.ready(&self.status());
    }

    /// SIGUSR1 (any number received since the last run): a fresh scan, then an on-demand incident for every
    /// target without one within `on_demand_rate_limit` (at most [`MAX_ON_DEMAND`]). A stop request ends the
    /// series between targets, and cuts the probes of the one in progress short.
    fn capture_now(&mut self) {
        self.pending.capture = 0;
        if self.last_scan.elapsed() >= FRESH_SCAN {
            self.scan();
        }
        let first_run = match self.burst.as_mut() {
            Some(burst) => {
                burst.runs += 1;
                burst.runs == 1
            }
            None => true,
        };
        let targets: Vec<i32> = self.watcher.targets().iter().map(|t| t.pid).collect();
        if targets.is_empty() {
            if first_run {
                self.logger
                    .notice("SIGUSR1: no process is watched now; nothing captured");
            }
            return;
        }
        let now = Instant::now();
        let mut due = Vec::new();
        let mut limited = 0u64;
        for pid in targets {
            // Gone since the scan: nothing to capture.
            let Ok(stat) = self.proc_root.read_stat(pid) else {
                continue;
            };
            if self.on_demand.allows(pid, stat.starttime, now) {
                due.push((pid, stat.starttime));
            } else {
                limited += 1;
            }
        }
        if let Some(burst) = self.burst.as_mut() {
            burst.limited += limited;
        }
        if due.is_empty() {
            // Counted; the burst's summary says it (one line per burst, not one per signal).
            return;
        }
        let count = due.len();
        self.logger.notice(&format!(
            "SIGUSR1: on-demand capture of {} processes{}{}",
            count.min(MAX_ON_DEMAND),
            if count > MAX_ON_DEMAND {
                format!(" (the first {MAX_ON_DEMAND} of {count})")
            } else {
                String::new()
            },
            if limited > 0 {
                format!(
                    "; {limited} captured on demand less than on_demand_rate_limit ago are skipped"
                )
            } else {
                String::new()
            }
        ));
        for (pid, start) in due.into_iter().take(MAX_ON_DEMAND) {
            if self.stopping() {
                self.logger
                    .notice("stop requested: on-demand capture interrupted");
                return;
            }
            let mut events = Vec::new();
            self.watcher
                .capturer()
                .capture_on_demand(pid, "SIGUSR1", &mut events);
            for event in &events {
                if let CaptureEvent::Opened { path, .. } = event {
                    // Counted, and limited per process apart from wedges: it was asked for.
                    self.incidents_written += 1;
                    self.metrics.incident(metrics::IncidentTrigger::OnDemand);
                    self.on_demand.record(pid, start, Instant::now());
                    if let Some(burst) = self.burst.as_mut() {
                        burst.captured += 1;
                    }
                    self.logger.event(
                        Level::Notice,
                        &format!("on-demand incident {}: pid {pid}", path.display()),
                        serde_json::json!({"event": "on-demand", "pid": pid, "incident": path}),
                    );
                } else {
                    self.log_event(event);
                }
            }
        }
    }
}

/// The level of a capture event's log line (its words, fields and rate-limit cause are the event's own).
fn level_of(event: &CaptureEvent) -> Level {
    match event {
        CaptureEvent::Opened { .. }
        | CaptureEvent::Resolved { .. }
        | CaptureEvent::Adopted { .. }
        | CaptureEvent::Unwatched { .. } => Level::Notice,
        CaptureEvent::Completed { .. }
        | CaptureEvent::Updated { .. }
        | CaptureEvent::Gone { .. } => Level::Info,
        // Raised once per episode by the capturer, which retries the write at every scan.
        CaptureEvent::Failed { .. } | CaptureEvent::WritePending { .. } => Level::Error,
        CaptureEvent::Landed { .. } => Level::Warning,
    }
}
