//! What happened to an incident ([`CaptureEvent`]), and its one wording: `run` prints it, the daemon logs it
//! (the same sentence, with the JSON fields and the rate-limit cause of its log line).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

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

/// An event in words: the sentence `run` prints and the daemon logs, the fields of the daemon's JSON log
/// line (`event` names it), and the daemon's rate-limit cause for the line.
#[derive(Debug, Clone, PartialEq)]
pub struct Described {
    pub cause: &'static str,
    pub text: String,
    pub fields: serde_json::Value,
}

impl CaptureEvent {
    /// Whether the event is said at all (`run`'s output, the daemon's log): an update of an open incident
    /// is not.
    pub fn is_said(&self) -> bool {
        !matches!(self, CaptureEvent::Updated { .. })
    }

    /// The one wording of the event, for `run`'s output and the daemon's log alike.
    pub fn describe(&self) -> Described {
        use serde_json::json;
        match self {
            CaptureEvent::Opened {
                pid,
                tid,
                path,
                durable_after,
            } => said(
                "incident",
                format!(
                    "incident {}: pid {pid} thread {tid} (durable {} ms after detection)",
                    path.display(),
                    durable_after.as_millis()
                ),
                json!({"event": "incident", "pid": pid, "tid": tid,
                    "incident": path, "durable_ms": durable_after.as_secs_f64() * 1e3}),
            ),
            CaptureEvent::Completed {
                pid,
                path,
                verdict,
                killed,
            } => said(
                "complete",
                format!(
                    "incident {} complete: {verdict}{}",
                    path.display(),
                    kill_outcome(*killed)
                ),
                json!({"event": "complete", "pid": pid, "incident": path, "verdict": verdict}),
            ),
            CaptureEvent::Updated { pid, path } => said(
                "updated",
                format!("incident {}: pid {pid} updated", path.display()),
                json!({"event": "updated", "pid": pid, "incident": path}),
            ),
            CaptureEvent::Resolved { pid, path, after } => said(
                "resolved",
                format!(
                    "incident {}: pid {pid} recovered after {} s",
                    path.display(),
                    after.as_secs_f64().round() as u64
                ),
                json!({"event": "resolved", "pid": pid, "incident": path,
                    "after_s": after.as_secs_f64()}),
            ),
            CaptureEvent::Failed { pid, message } => said(
                "capture-failed",
                format!("capture of pid {pid} failed: {message}"),
                json!({"event": "failed", "pid": pid}),
            ),
            CaptureEvent::WritePending { pid, tid, message } => said(
                "write-pending",
                format!("pid {pid}: {message}"),
                json!({"event": "write-pending", "pid": pid, "tid": tid}),
            ),
            CaptureEvent::Landed {
                pid,
                path,
                after,
                why,
            } => said(
                "landed",
                format!(
                    "incident {}: pid {pid} durable {:.1} s after detection; {why}",
                    path.display(),
                    after.as_secs_f64()
                ),
                json!({"event": "landed", "pid": pid, "incident": path,
                    "after_s": after.as_secs_f64(), "why": why}),
            ),
            CaptureEvent::Adopted { pid, path, in_d } => said(
                "adopted",
                format!(
                    "incident {}: pid {pid} still in D after {:.1} s: episode taken up \
                     (left by an earlier watcher)",
                    path.display(),
                    in_d.as_secs_f64()
                ),
                json!({"event": "adopted", "pid": pid, "incident": path,
                    "in_d_s": in_d.as_secs_f64()}),
            ),
            CaptureEvent::Unwatched { pid, path, why } => said(
                "closed-unwatched",
                format!("incident {}: pid {pid} closed: {why}", path.display()),
                json!({"event": "closed-unwatched", "pid": pid, "incident": path, "why": why}),
            ),
            CaptureEvent::Gone { pid, tid, total } => said(
                "gone-before-capture",
                format!(
                    "pid {pid} thread {tid} was gone before its capture began: no incident \
                     ({total} such wedges so far)"
                ),
                json!({"event": "gone-before-capture", "pid": pid, "tid": tid, "total": total}),
            ),
        }
    }
}

/// An event's words (shorthand for the arms of [`CaptureEvent::describe`]).
fn said(cause: &'static str, text: String, fields: serde_json::Value) -> Described {
    Described {
        cause,
        text,
        fields,
    }
}

/// What `--kill-on-wedge` did, as the end of a completed capture's sentence ("" without it).
fn kill_outcome(killed: Option<bool>) -> &'static str {
    match killed {
        Some(true) => "; --kill-on-wedge: the process died after SIGKILL",
        Some(false) => "; --kill-on-wedge: the process survived SIGKILL (uninterruptible sleep)",
        None => "",
    }
}

/// The event's sentence ([`CaptureEvent::describe`]'s text).
impl fmt::Display for CaptureEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe().text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_event_has_one_sentence_and_the_log_fields() {
        let path = PathBuf::from("/srv/incidents/x");
        let opened = CaptureEvent::Opened {
            pid: 7,
            tid: 8,
            path: path.clone(),
            durable_after: Duration::from_millis(3),
        };
        assert_eq!(
            opened.to_string(),
            "incident /srv/incidents/x: pid 7 thread 8 (durable 3 ms after detection)"
        );
        let said = opened.describe();
        assert_eq!(said.cause, "incident");
        assert_eq!(said.fields["durable_ms"], 3.0);
        let killed = CaptureEvent::Completed {
            pid: 7,
            path: path.clone(),
            verdict: "v".into(),
            killed: Some(false),
        };
        assert_eq!(
            killed.to_string(),
            "incident /srv/incidents/x complete: v; --kill-on-wedge: the process survived SIGKILL \
             (uninterruptible sleep)"
        );
        assert_eq!(killed.describe().fields["event"], "complete");
        let resolved = CaptureEvent::Resolved {
            pid: 7,
            path: path.clone(),
            after: Duration::from_millis(95_400),
        };
        assert_eq!(
            resolved.to_string(),
            "incident /srv/incidents/x: pid 7 recovered after 95 s"
        );
        let failed = CaptureEvent::Failed {
            pid: 7,
            message: "m".into(),
        };
        let said = failed.describe();
        assert_eq!(said.cause, "capture-failed");
        assert_eq!(said.fields["event"], "failed");
        assert!(!CaptureEvent::Updated { pid: 7, path }.is_said());
        assert!(failed.is_said());
    }
}
