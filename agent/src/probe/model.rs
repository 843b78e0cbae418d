//! What a probe is (a risky read and what its timeout would mean) and how it ended.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::confine::Confinement;

/// Largest output kept from one probe; the rest is counted but dropped.
pub const MAX_PROBE_OUTPUT: usize = 64 * 1024;

/// What a probe does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeKind {
    /// Read one file whole.
    ReadFile(PathBuf),
    /// Read `file_name` inside every subdirectory of `dir` (e.g. `gpus/*/information`).
    ReadEachSubdir { dir: PathBuf, file_name: String },
    /// Run a program and keep its stdout and stderr; `confinement` (none by default) is what the child takes
    /// on between fork and exec: the target's credentials, memory limits.
    Command {
        program: String,
        args: Vec<String>,
        confinement: Confinement,
    },
    /// Read `len` bytes of a process's `mem` file at `offset` (an ioctl's pointer); with `follow_xfer`, then
    /// read the struct an `nv_ioctl_xfer_t` there points at. Output: one line of hex per region read
    /// (hex survives the lossy text of [`ProbeOutcome::output`]).
    ReadMem {
        path: PathBuf,
        offset: u64,
        len: usize,
        follow_xfer: bool,
    },
}

/// One risky read, with what a timeout would mean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// Short stable name, e.g. `cmdline`, `nvidia-version`.
    pub name: String,
    pub kind: ProbeKind,
    /// Completes "timed out after N s: …", e.g. "the RM lock is probably held".
    pub timeout_meaning: String,
}

impl Probe {
    pub fn read_file(name: &str, path: PathBuf, timeout_meaning: &str) -> Probe {
        Probe {
            name: name.to_string(),
            kind: ProbeKind::ReadFile(path),
            timeout_meaning: timeout_meaning.to_string(),
        }
    }

    /// What the probe reads or runs, for the report.
    pub fn target(&self) -> String {
        match &self.kind {
            ProbeKind::ReadFile(path) => path.display().to_string(),
            ProbeKind::ReadMem {
                path, offset, len, ..
            } => format!("{} @ {offset:#x} ({len} bytes)", path.display()),
            ProbeKind::ReadEachSubdir { dir, file_name } => {
                format!("{}/*/{}", dir.display(), file_name)
            }
            ProbeKind::Command { program, args, .. } => {
                let mut text = program.clone();
                for arg in args {
                    text.push(' ');
                    text.push_str(arg);
                }
                text
            }
        }
    }
}

/// How a probe ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeStatus {
    /// Read everything (the program exited 0).
    Ok,
    /// The read or program failed quickly; `detail` says how.
    Failed,
    /// The deadline passed; the child was sent SIGKILL.
    TimedOut,
    /// Not started: too many earlier probes are still stuck.
    Skipped,
}

/// The recorded outcome of one probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeOutcome {
    pub name: String,
    /// The path read or the command run.
    pub target: String,
    pub status: ProbeStatus,
    /// One line for the report, e.g. "timed out after 2 s: the RM lock is probably held".
    pub detail: String,
    /// What the child wrote (lossy UTF-8), up to [`MAX_PROBE_OUTPUT`] bytes.
    pub output: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_truncated: bool,
    pub elapsed_ms: u64,
    /// After a timeout: whether the child was reaped after SIGKILL (false: stuck in the kernel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub killed: Option<bool>,
}

impl ProbeOutcome {
    /// The outcome of a probe whose child never started: `status` is Skipped or Failed, `detail` says why.
    pub(super) fn not_started(probe: &Probe, status: ProbeStatus, detail: String) -> ProbeOutcome {
        ProbeOutcome {
            name: probe.name.clone(),
            target: probe.target(),
            status,
            detail,
            output: String::new(),
            output_truncated: false,
            elapsed_ms: 0,
            killed: None,
        }
    }
}

/// "2 s", "500 ms".
pub fn human_duration(duration: Duration) -> String {
    if duration.subsec_millis() == 0 && duration.as_secs() > 0 {
        format!("{} s", duration.as_secs())
    } else if duration.as_secs() == 0 {
        format!("{} ms", duration.as_millis())
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}
