//! The threads judged wedged ([`WedgedThread`], its [`ThreadFate`]) and the samples taken of the process
//! ([`Sample`], the short history of earlier looks).

use super::time::Timestamp;
use capture::python_stack::{PythonFrame, PythonThread};
use capture::user_frame::UserFrame;
use capture::{ProcessSnapshot, ThreadSnapshot};
use serde::{Deserialize, Serialize};

/// A thread the watchdog judged wedged.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct WedgedThread {
    pub tid: i32,
    /// Start time of the thread (field 22 of its stat): with the tid, the thread's identity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
    pub comm: String,
    /// When the watchdog first saw this thread in D (the episode may have begun earlier, between scans).
    pub d_since: Timestamp,
    /// When the watchdog judged it wedged (schema 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detected_at: Option<Timestamp>,
    /// The thread as read at detection: the evidence the verdict and the "Wedged threads" section show,
    /// whatever later samples say (schema 2; None in older files: their readers fall back to the latest sample).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at_detection: Option<ThreadSnapshot>,
    /// What became of it: still wedged, left D, exited, or still wedged when wedge-capture stopped.
    #[serde(skip_serializing_if = "ThreadFate::is_wedged")]
    pub fate: ThreadFate,
    /// When `fate` was seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fate_at: Option<Timestamp>,
    /// Seconds in D from `d_since` to `fate_at` (monotonic clock).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_d_s: Option<f64>,
    /// The user-space pc at detection located in the process's mappings (read in a sacrificial child).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_frame: Option<UserFrame>,
    /// Why `user_frame` is absent (the maps read timed out: the mmap lock is held; no pc; …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_frame_not_captured: Option<String>,
    /// The thread's Python frames at capture (`py-spy dump`, matched by native tid), innermost first; None when
    /// not read (not CPython, no py-spy, timed out: see `not_captured`) or the thread runs no Python code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub python_stack: Option<Vec<PythonFrame>>,
}

/// What became of a thread judged wedged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadFate {
    /// Still in D at the last look.
    #[default]
    Wedged,
    /// Left D and lives on.
    Resolved,
    /// Exited (or was reaped) while or after being in D.
    Exited,
    /// Still in D when wedge-capture stopped watching.
    StillWedgedAtExit,
    /// Not known: nobody watched the thread until its end (see `Episode::outcome_unknown`). Also what a
    /// fate written by a newer version reads as.
    #[serde(other)]
    Unknown,
}

impl ThreadFate {
    pub fn is_wedged(&self) -> bool {
        *self == ThreadFate::Wedged
    }
}

/// One thread snapshot of the process.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Sample {
    pub taken_at: Timestamp,
    /// The capture issue's thread-snapshot contract, unchanged.
    pub snapshot: ProcessSnapshot,
    /// Every Python thread's stack (`py-spy dump`, each with its native tid: the `snapshot.threads[].tid` it
    /// belongs to), read once per capture into the sample taken then; empty when not read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub python_threads: Vec<PythonThread>,
}

/// One scan of the watcher, kept from before the wedge was detected: what the threads were doing.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct HistorySample {
    /// When the scan ran (monotonic only: the watcher reads no other clock per scan).
    pub taken_at: Timestamp,
    /// Threads of the process in this scan, in D, and running (`R`).
    pub thread_count: u32,
    pub in_d: u32,
    pub running: u32,
    /// The threads that matter (ever in D in the history, or judged wedged), at most a few dozen.
    pub threads: Vec<HistoryThread>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct HistoryThread {
    pub tid: i32,
    /// One state letter from stat.
    pub state: String,
    /// Where it slept, when in D.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wchan: Option<String>,
    /// Voluntary + involuntary context switches, when in D.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ctxt_switches: Option<u64>,
    /// Change of `ctxt_switches` since this thread's previous sample in D.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ctxt_delta: Option<u64>,
}
