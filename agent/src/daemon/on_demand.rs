//! SIGUSR1: an on-demand incident for every current target (at most one per process per
//! `on_demand_rate_limit`), and a burst of signals summed up in one line.

use std::time::{Duration, Instant};

use super::log::Level;
use super::metrics;
use super::state::{Daemon, BURST_QUIET};
use crate::watch::CaptureEvent;

/// Most on-demand incidents written for one SIGUSR1 (each runs the risky probes).
pub const MAX_ON_DEMAND: usize = 64;
/// A scan this recent is fresh enough for an on-demand run: a SIGUSR1 storm must not become a scan storm.
const FRESH_SCAN: Duration = Duration::from_millis(200);

impl Daemon {
    /// Log the SIGUSR1 burst's summary once it is over (`force`: now, at stop). One line per burst, never
    /// one per signal; nothing when every signal got its own run and nothing was left out.
    pub(super) fn end_burst(&mut self, force: bool) {
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

    /// SIGUSR1 (any number received since the last run): a fresh scan, then an on-demand incident for every
    /// target without one within `on_demand_rate_limit` (at most [`MAX_ON_DEMAND`]). A stop request ends the
    /// series between targets, and cuts the probes of the one in progress short.
    pub(super) fn capture_now(&mut self) {
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
