//! What the daemon logs and counts of what happens: capture events (in their one wording,
//! [`CaptureEvent`]'s), targets that come and go, the host sources' notes; all through the limiter.

use std::collections::HashMap;
use std::time::Instant;

use super::log::Level;
use super::metrics;
use super::state::Daemon;
use crate::watch::CaptureEvent;

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

impl Daemon {
    /// The host sources' notes (what containers put on the host: ring files, processes), through the
    /// limiter.
    pub(super) fn log_source_notes(&mut self, notes: Vec<String>) {
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
    }

    pub(super) fn log_target_changes(&mut self) {
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

    pub(super) fn log_event(&mut self, event: &CaptureEvent) {
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
            let said = event.describe();
            self.limiter.event(
                &self.logger,
                said.cause,
                level_of(event),
                &said.text,
                said.fields,
            );
        }
    }

    /// The rate limit counts from the incident, per process (pid and start time).
    pub(super) fn record_rate(&mut self, pid: i32) {
        if let Ok(stat) = self.proc_root.read_stat(pid) {
            self.rate.record(pid, stat.starttime, Instant::now());
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
