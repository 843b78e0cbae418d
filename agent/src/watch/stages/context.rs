//! What every stage works on ([`Capture`]: one incident of one process) and its deadline ([`Deadline`]): the
//! leaf each stage and the table in [`super`] use.

use std::time::{Duration, Instant};

use reports::model::Incident;
use reports::store::write::IncidentFiles;

use crate::probe::ProbeRunner;
use crate::watch::capture_settings::CaptureSettings;

/// What the stages work on: one incident of one process.
pub struct Capture<'a> {
    pub settings: &'a CaptureSettings,
    pub pid: i32,
    pub incident: &'a mut Incident,
    /// The incident's directory (files beside incident.json: the ring copies); None before the first write.
    pub handle: Option<&'a IncidentFiles>,
    pub probes: &'a mut ProbeRunner,
    /// When the wedge began (monotonic ns): the kernel log is kept from before it. Now, on demand.
    pub since_ns: u64,
    /// A wedge capture (the kill stage may act); never an on-demand one.
    pub wedge: bool,
    /// The episode ended before its first write landed: only the stages marked `after_episode_end` run.
    pub episode_ended: bool,
    /// Set by the kill stage: whether the process died.
    pub killed: Option<bool>,
    /// The process's maps text, when the probes stage's sacrificial child read it (later risky stages use it).
    pub maps: Option<String>,
    /// The capture's total deadline: a stage that would start after it is recorded as not run.
    pub capture_deadline: Option<CaptureDeadline>,
    /// Stages not to run, with why (the previous agent died during them: see [`super::STAGE_MARKER_FILE`]).
    pub skip: &'a [SkippedStage],
}

/// A stage not to run, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedStage {
    pub stage: String,
    pub why: String,
}

/// The total deadline of one capture.
#[derive(Debug, Clone, Copy)]
pub struct CaptureDeadline {
    pub at: Instant,
    pub limit: Duration,
}

/// A stage's deadline, started when the stage starts.
pub struct Deadline {
    started: Instant,
    limit: Duration,
}

impl Deadline {
    pub fn start(limit: Duration) -> Deadline {
        Deadline {
            started: Instant::now(),
            limit,
        }
    }

    pub fn passed(&self) -> bool {
        self.started.elapsed() > self.limit
    }

    /// For a stage that stops at a check between its steps: why the rest is missing.
    pub fn stopped(&self, left_out: &str) -> String {
        format!(
            "stopped after {} ms, past its deadline of {} ms: {left_out} not read",
            self.started.elapsed().as_millis(),
            self.limit.as_millis()
        )
    }

    pub(super) fn overdue(&self) -> String {
        format!(
            "took {} ms, past its deadline of {} ms (what it read is kept)",
            self.started.elapsed().as_millis(),
            self.limit.as_millis()
        )
    }
}
