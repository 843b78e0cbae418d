//! The incident model: everything one wedge report holds, schema-versioned (docs/report-schema.md).
//!
//! Every struct is `#[serde(default)]`: a file written by an older version, or a partial file written early in
//! a capture, still parses; fields added later are additive. Thread snapshots are `capture::ProcessSnapshot`,
//! embedded unchanged (the capture issue's JSON contract); ring records are the breadcrumb reader's types.
//!
//! Every time carries its clock: `wall` (CLOCK_REALTIME, RFC 3339 UTC), `monotonic_ns` (CLOCK_MONOTONIC, the ring's
//! clock), `boottime_ns` (CLOCK_BOOTTIME), and `kernel_time_us` for kernel log lines (the printk clock).

//!
//! Map: this file holds the [`Incident`] itself (its schema, its parts in order, the kernel log's classification
//! and the id); each part's types are in a file of their own, named here once (`model::X` is their one path):
//! `time.rs` ([`Timestamp`]), `episode.rs` ([`Trigger`], [`Episode`]), `process.rs` (host, process, container),
//! `threads.rs` (judged threads and samples), `ring.rs` ([`RingExcerpt`]), `kernel_log.rs` ([`KernelLogLine`] and
//! its classification), `context.rs` (host context, probes, timeline, not captured).

mod context;
mod episode;
mod kernel_log;
mod process;
mod ring;
mod threads;
mod time;

#[cfg(test)]
mod tests;

pub use capture::python_stack::{PythonFrame, PythonThread};
pub use capture::user_frame::{CandidateFrame, UserFrame};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use breadcrumb::{Args, InFlight, Record, RecordKind, RingHeader, RingSnapshot};
pub use context::{
    DStateTask, HostContext, NotCaptured, Probe, ProbeOutcome, PsiLine, TimelineEvent,
};
pub use episode::{Episode, EpisodeStatus, Trigger, Unwatched};
pub use kernel_log::{pids_named, KernelLogFlags, KernelLogLine, Relevance};
pub use process::{ContainerInfo, HostInfo, PodIdentity, PodInfo, ProcessInfo};
pub use ring::{breadcrumb_path_of, RingExcerpt};
pub use threads::{HistorySample, HistoryThread, Sample, ThreadFate, WedgedThread};
pub use time::Timestamp;

/// The value of [`Incident::schema`].
pub const SCHEMA_NAME: &str = "wedge-capture.incident";
/// Bumped only for a change that is not additive (a field renamed, removed, or its meaning changed).
pub const SCHEMA_VERSION: u32 = 2;

/// One wedge of one process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Incident {
    /// Always [`SCHEMA_NAME`].
    pub schema: String,
    /// [`SCHEMA_VERSION`] of the writer.
    pub schema_version: u32,
    /// Directory name in the store: `<UTC time>-<host>-<pid>`, e.g. `20261202T113400Z-gpu01-4242`.
    pub id: String,
    /// False until the last part of the capture was written.
    pub complete: bool,
    /// One line: which thread, which call, which kernel frame, since when.
    pub verdict: String,
    /// When the watchdog decided this is a wedge.
    pub detected_at: Timestamp,
    /// When this version of the file was written.
    pub updated_at: Timestamp,
    /// `wedge-capture <version>` of the writer.
    pub written_by: String,
    /// Why this incident exists: a detected wedge, or a capture someone asked for (the agent's SIGUSR1).
    pub trigger: Trigger,
    pub episode: Episode,
    pub host: HostInfo,
    pub process: ProcessInfo,
    /// Threads seen in D with no progress, and since when.
    pub wedged_threads: Vec<WedgedThread>,
    /// Thread snapshots over time, oldest first.
    pub samples: Vec<Sample>,
    /// The watcher's cheap samples of the process from before the detection (schema 2), oldest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<HistorySample>,
    /// The breadcrumb ring as read at capture time; None when the process has no ring.
    pub ring: Option<RingExcerpt>,
    /// Other rings of the same process (e.g. the CUPTI injection's beside the worker's own), same shape.
    /// `ring` is the one with the oldest in-flight call; these follow in the same order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extra_rings: Vec<RingExcerpt>,
    /// Kernel log lines around the wedge (from /dev/kmsg), oldest first.
    pub kernel_log: Vec<KernelLogLine>,
    /// The NVIDIA Xid / NVSwitch SXid lines of `kernel_log`, parsed (number, device, pid and name when printed,
    /// meaning and what to do from the Xid catalogue), oldest first. The verdict names the latest one from
    /// before or during the wedge.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub xids: Vec<capture::xid::XidEvent>,
    pub host_context: HostContext,
    /// Risky reads done in a sacrificial child with a deadline, and their outcome.
    pub probes: Vec<Probe>,
    /// Events in time order.
    pub timeline: Vec<TimelineEvent>,
    /// What could not be captured, and why.
    pub not_captured: Vec<NotCaptured>,
    /// Who holds what the threads in D wait for: every lock, its holder and its waiters (the capture's
    /// `wait_graph` stage; `capture::wait_graph`). Null when the stage did not run (older incidents).
    pub wait_graph: Option<capture::wait_graph::WaitGraph>,
}

impl Default for Incident {
    fn default() -> Self {
        Incident {
            schema: SCHEMA_NAME.to_string(),
            schema_version: SCHEMA_VERSION,
            id: String::new(),
            complete: false,
            verdict: String::new(),
            detected_at: Timestamp::default(),
            updated_at: Timestamp::default(),
            written_by: String::new(),
            trigger: Trigger::default(),
            episode: Episode::default(),
            host: HostInfo::default(),
            process: ProcessInfo::default(),
            wedged_threads: Vec::new(),
            samples: Vec::new(),
            history: Vec::new(),
            ring: None,
            extra_rings: Vec::new(),
            kernel_log: Vec::new(),
            xids: Vec::new(),
            host_context: HostContext::default(),
            probes: Vec::new(),
            timeline: Vec::new(),
            not_captured: Vec::new(),
            wait_graph: None,
        }
    }
}

impl Incident {
    /// An empty incident for `pid`, detected now.
    pub fn new(pid: i32) -> Incident {
        let now = Timestamp::now();
        Incident {
            detected_at: now.clone(),
            process: ProcessInfo {
                pid,
                ..ProcessInfo::default()
            },
            episode: Episode {
                started_at: now,
                ..Episode::default()
            },
            ..Incident::default()
        }
    }

    /// The most recent thread snapshot.
    pub fn latest_sample(&self) -> Option<&Sample> {
        self.samples
            .iter()
            .max_by_key(|s| s.taken_at.monotonic_ns.unwrap_or(0))
    }

    /// A copy safe to store: the command line redacted (see [`crate::redact`]).
    pub fn redacted(&self) -> Incident {
        let mut copy = self.clone();
        copy.process.redact();
        copy
    }
}

impl Incident {
    /// Mark every kernel log line with whom it concerns: the process, every tid it is known to have had (its
    /// samples and judged threads).
    pub fn classify_kernel_log(&mut self) {
        let mut tids: Vec<i32> = self
            .samples
            .iter()
            .flat_map(|s| s.snapshot.threads.iter().map(|t| t.tid))
            .chain(self.wedged_threads.iter().map(|w| w.tid))
            .collect();
        tids.sort_unstable();
        tids.dedup();
        let pid = self.process.pid;
        for line in &mut self.kernel_log {
            line.relevance = Some(Relevance::classify(&line.text, &line.flags, pid, &tids));
        }
    }
}

/// `<UTC time>-<host>-<pid>`, e.g. `20261202T113400Z-gpu01-4242`. The host is reduced to `[A-Za-z0-9.-]`.
pub fn incident_id(wall: DateTime<Utc>, hostname: &str, pid: i32) -> String {
    let mut host: String = hostname
        .chars()
        .take(63)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if host.is_empty() {
        host = "host".to_string();
    }
    format!("{}-{host}-{pid}", wall.format("%Y%m%dT%H%M%SZ"))
}
