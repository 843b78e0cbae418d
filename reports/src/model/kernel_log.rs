//! Kernel log lines kept with an incident ([`KernelLogLine`]), flagged ([`KernelLogFlags`]) and classified by
//! whom they concern ([`Relevance`]).

use serde::{Deserialize, Serialize};

/// One /dev/kmsg record.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct KernelLogLine {
    pub seq: Option<u64>,
    /// Syslog priority 0 (emerg) … 7 (debug).
    pub level: Option<u8>,
    /// printk timestamp: µs since boot on the kernel's local clock (close to CLOCK_MONOTONIC; excludes suspend).
    pub kernel_time_us: Option<u64>,
    pub text: String,
    pub flags: KernelLogFlags,
    /// Whether the line concerns the wedge (schema 2; None in older files and before classification).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relevance: Option<Relevance>,
}

/// Whom a kernel log line is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Relevance {
    /// Names a pid or tid of the watched process (`task python3:4242 blocked…`, `python3[4242]: segfault`).
    Target,
    /// From the NVIDIA driver: NVRM, Xid, GSP, fallen off the bus.
    Nvidia,
    /// About another process: a hung-task report, an oops or an OOM kill naming another pid (or the same comm
    /// with another pid).
    OtherProcess,
    /// Anything else in the window.
    Context,
    /// Written by a newer version with a value this one does not know.
    #[serde(other)]
    Unknown,
}

/// The pids a kernel line names, in the forms the kernel prints them: `comm:pid` (hung task), `comm[pid]`
/// (segfault, audit), `pid N`, `pid=N`, `pid: N`, `tid N`, `Killed process N`.
pub fn pids_named(text: &str) -> Vec<i64> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() || (i > 0 && bytes[i - 1].is_ascii_digit()) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let before = &text[..start];
        let after = bytes.get(i).copied();
        let lower = before.to_ascii_lowercase();
        // `comm:pid`: the word before the colon has a letter (not a bus address `0000:01`), and the number is
        // not itself followed by `:`/`.` (a `PCI:0000:01:00.0`).
        let comm_colon = before.strip_suffix(':').is_some_and(|word| {
            let word = word.rsplit(char::is_whitespace).next().unwrap_or("");
            word.chars().any(|c| c.is_ascii_alphabetic())
                && word.chars().last().is_some_and(|c| !c.is_whitespace())
        }) && !matches!(after, Some(b':' | b'.'));
        let named = comm_colon
            || (before.ends_with('[') && after == Some(b']') && before.len() > 1)
            || [
                "pid ",
                "pid=",
                "pid: ",
                "pid:",
                "tid ",
                "tid=",
                "killed process ",
            ]
            .iter()
            .any(|p| lower.ends_with(p));
        if named {
            if let Ok(n) = text[start..i].parse::<i64>() {
                out.push(n);
            }
        }
    }
    out
}

impl Relevance {
    /// Whom `text` is about, for a process `pid` with threads `tids` (precedence: target, nvidia, other process).
    pub fn classify(text: &str, flags: &KernelLogFlags, pid: i32, tids: &[i32]) -> Relevance {
        let named = pids_named(text);
        let ours = |n: &i64| *n == i64::from(pid) || tids.iter().any(|t| i64::from(*t) == *n);
        if named.iter().any(ours) {
            return Relevance::Target;
        }
        if flags.nvrm || flags.xid || flags.fallen_off_bus || text.contains("GSP") {
            return Relevance::Nvidia;
        }
        let lower = text.to_ascii_lowercase();
        let about_a_process = flags.hung_task
            || lower.contains("segfault")
            || lower.contains("killed process")
            || lower.contains("oom-kill")
            || lower.contains("general protection");
        if !named.is_empty() || about_a_process {
            return Relevance::OtherProcess;
        }
        Relevance::Context
    }
}

impl KernelLogLine {
    /// A line with its flags classified from the text.
    pub fn new(
        seq: Option<u64>,
        level: Option<u8>,
        kernel_time_us: Option<u64>,
        text: impl Into<String>,
    ) -> Self {
        let text = text.into();
        KernelLogLine {
            seq,
            level,
            kernel_time_us,
            flags: KernelLogFlags::classify(&text),
            text,
            relevance: None,
        }
    }
}

/// What makes a kernel log line relevant to a GPU wedge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct KernelLogFlags {
    /// From the NVIDIA resource manager (`NVRM:`).
    pub nvrm: bool,
    /// An NVIDIA Xid error report.
    pub xid: bool,
    /// The hung-task detector (`blocked for more than N seconds`).
    pub hung_task: bool,
    /// `GPU has fallen off the bus`.
    pub fallen_off_bus: bool,
}

impl KernelLogFlags {
    pub fn classify(text: &str) -> KernelLogFlags {
        let lower = text.to_ascii_lowercase();
        KernelLogFlags {
            nvrm: text.contains("NVRM"),
            xid: text.contains("Xid") || lower.contains(" xid "),
            hung_task: lower.contains("blocked for more than") || lower.contains("hung_task"),
            fallen_off_bus: lower.contains("fallen off the bus"),
        }
    }

    pub fn any(&self) -> bool {
        self.nvrm || self.xid || self.hung_task || self.fallen_off_bus
    }
}
