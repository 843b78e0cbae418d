//! The loop: signals arrive on a channel, the loop waits on it with a timeout until the next scan, serves
//! them by priority (stop, reload, a due scan, on-demand runs), scans, and stops.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::log::Level;
use super::metrics;
use super::state::{Burst, Daemon, BURST_QUIET};
use crate::watch::launch::{signal_name, SignalChannel};

/// How long to wait for the channel to name a stop signal whose flag is already set.
const STOP_NAME_WAIT: Duration = Duration::from_millis(50);
/// How long a stop waits for the captures in flight (their probes end at the stop request; SIGTERM must
/// be done within 2 s).
const STOP_CAPTURE_WAIT: Duration = Duration::from_millis(1000);

impl Daemon {
    pub(super) fn run_loop(&mut self, signals: &SignalChannel) {
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

    /// Record a received signal in [`Pending`](super::state::Pending) (coalescing) and in the current SIGUSR1 burst.
    pub(super) fn note(&mut self, signal: i32) {
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
    pub(super) fn stop_signal(&mut self, signals: &SignalChannel) -> Option<i32> {
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

    pub(super) fn stopping(&self) -> bool {
        self.pending.stop.is_some() || self.stop_requested.load(Ordering::SeqCst)
    }

    pub(super) fn status(&self) -> String {
        format!(
            "watching {} processes; {} incidents open; {} written since start",
            self.watched.len(),
            self.open_count,
            self.incidents_written
        )
    }

    pub(super) fn ping(&self, last_ping: &mut Instant) {
        if self.healthy {
            self.notifier.watchdog_ping();
            *last_ping = Instant::now();
        }
    }

    pub(super) fn stop(&mut self, signal: i32) {
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

    /// One scan: rate limit, targets, capture; log what changed.
    pub(super) fn scan(&mut self) {
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
        self.log_source_notes(notes);
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
    pub(super) fn count_xids(&mut self) {
        let Some(counter) = self.xids.as_mut() else {
            return;
        };
        if let Err(err) = counter.poll(&mut self.metrics) {
            self.limiter
                .log(&self.logger, "xid-state", Level::Warning, &err);
        }
    }
}
