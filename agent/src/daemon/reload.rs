//! SIGHUP: re-read the config (at most once per interval; a bad one keeps the current settings), and a
//! storm of them summed up in one line.

use std::time::Instant;

use super::log::{Level, Logger};
use super::state::{Daemon, BURST_QUIET};
use crate::settings::Settings;

impl Daemon {
    /// A reload may run now: none ran within the last interval (a SIGHUP storm is one reload per interval).
    pub(super) fn reload_due(&self) -> bool {
        self.next_reload().is_none_or(|due| Instant::now() >= due)
    }

    /// When a pending reload may run (None: no reload ran yet, it may run at once).
    pub(super) fn next_reload(&self) -> Option<Instant> {
        if !self.pending.reload {
            return None;
        }
        self.reloads
            .last
            .map(|last| last + self.settings.watch.interval)
    }

    /// Sum up a SIGHUP storm in one line once it is over (`force`: now, at stop): nothing when every
    /// signal got its own reload.
    pub(super) fn end_reload_storm(&mut self, force: bool) {
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

    /// SIGHUP: re-read the config; a bad one keeps the current settings.
    pub(super) fn reload(&mut self) {
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
}
