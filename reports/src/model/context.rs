//! The host around the wedge ([`HostContext`]: pressure, other D tasks), the probes run, the timeline and what
//! was not captured.

use std::collections::BTreeMap;

use super::time::Timestamp;
use serde::{Deserialize, Serialize};

/// The state of the host around the wedge.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct HostContext {
    pub captured_at: Timestamp,
    /// Pressure stall lines, e.g. resource `memory`, line `some avg10=0.00 avg60=0.00 avg300=0.00 total=0`.
    pub psi: Vec<PsiLine>,
    /// A subset of meminfo, in kB (MemTotal, MemAvailable, Dirty, Writeback, …).
    pub meminfo_kb: BTreeMap<String, u64>,
    /// The `loadavg` line as read.
    pub loadavg: Option<String>,
    /// Every task of the host in D at capture time (other processes stuck on the same lock tell a lot).
    pub d_state_tasks: Vec<DStateTask>,
    /// How many D tasks there were in all, when the census was cut short.
    pub d_state_total: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PsiLine {
    /// `cpu`, `memory` or `io`.
    pub resource: String,
    pub line: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct DStateTask {
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    pub wchan: Option<String>,
    pub cgroup: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeOutcome {
    #[default]
    Ok,
    /// The read did not finish before its deadline (itself evidence: it would have hung the agent).
    Timeout,
    Error,
    #[serde(other)]
    Unknown,
}

/// A risky read (cmdline, the NVIDIA driver's proc files, nvidia-smi …) done in a sacrificial child with a deadline.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Probe {
    pub name: String,
    pub outcome: ProbeOutcome,
    pub started_at: Timestamp,
    pub duration_ms: f64,
    /// The start of what it printed or read (bounded by the caller).
    pub output_excerpt: String,
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TimelineEvent {
    pub at: Timestamp,
    pub event: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NotCaptured {
    pub what: String,
    pub why: String,
}
