//! The thread-snapshot JSON contract. Other tools parse it: keep these field names.
//!
//! Top level: `pid`, `threads[]`. Each thread: `tid`, `comm`, `state` (one letter), `wchan`,
//! `syscall` ({`nr`,`name`,`args`,`sp`,`pc`} or {`running`: true}), `ioctl`, `stack[]`, `site`.
//! Extra fields (`gone`, `notes`, counters, `syscall_files`, `waits_for`, `blocked_behind`) are additive and
//! optional for readers. A process with more threads than a snapshot lists (`SnapshotOptions`' bounds) has the
//! rest counted in `summarized` ([`ThreadsSummary`]): `threads[]` is then not every thread.

use serde::{Deserialize, Serialize};

use crate::decode::nvidia::{self, ArgumentKind, IoctlArgument};

/// All threads of one process, read at one moment from outside.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ProcessSnapshot {
    pub pid: i32,
    /// Architecture whose syscall table decoded `syscall.name` ("x86_64" or "aarch64").
    pub arch: String,
    /// CLOCK_MONOTONIC (ns) when the snapshot started, for aligning with ring records.
    #[serde(default)]
    pub monotonic_ns: u64,
    /// CLOCK_BOOTTIME (ns) when the snapshot started, for aligning with kernel log lines.
    #[serde(default)]
    pub boottime_ns: u64,
    pub threads: Vec<ThreadSnapshot>,
    /// What could not be read and why (e.g. missing CAP_SYS_ADMIN for stacks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The threads beyond those listed in `threads`, counted (a very wide process); absent when every thread is
    /// listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarized: Option<ThreadsSummary>,
}

impl ProcessSnapshot {
    /// Every thread the snapshot saw: listed and summarized.
    pub fn thread_count(&self) -> usize {
        self.threads.len() + self.summarized.as_ref().map_or(0, |s| s.threads)
    }

    /// Threads in D the snapshot saw: listed and summarized.
    pub fn threads_in_d(&self) -> usize {
        self.threads.iter().filter(|t| t.state == "D").count()
            + self
                .summarized
                .as_ref()
                .and_then(|s| s.by_state.get("D").copied())
                .unwrap_or(0)
    }
}

/// Threads a snapshot counted without listing them (beyond its bounds): by state from their `stat`, in groups of
/// state and wchan; their stack, syscall, status and fd links were never read.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ThreadsSummary {
    /// How many threads this summary counts.
    pub threads: usize,
    /// Per state letter (`S`, `R`, `D`, …; `gone` for a thread that exited while it was listed): how many.
    pub by_state: std::collections::BTreeMap<String, usize>,
    /// The largest groups by state and wchan, largest first (wchan None: not read, the read bound was reached).
    pub groups: Vec<ThreadGroup>,
    /// Threads of the groups beyond those listed in `groups`.
    #[serde(skip_serializing_if = "is_zero")]
    pub other_groups: usize,
    /// Why these threads are not listed (the bounds that applied).
    pub why: String,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Threads of one state sleeping in one kernel function.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ThreadGroup {
    pub state: String,
    pub wchan: Option<String>,
    pub threads: usize,
}

impl ThreadsSummary {
    /// `19,744 more threads: 19,740 S in futex_wait_queue, 4 R` (groups in order; one line).
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .groups
            .iter()
            .map(|g| match g.wchan.as_deref() {
                Some(w) if !w.is_empty() && w != "0" => {
                    format!("{} {} in {w}", thousands(g.threads), g.state)
                }
                _ => format!("{} {}", thousands(g.threads), g.state),
            })
            .collect();
        if self.other_groups > 0 {
            parts.push(format!("{} in other groups", thousands(self.other_groups)));
        }
        format!(
            "{} more thread{}: {}",
            thousands(self.threads),
            if self.threads == 1 { "" } else { "s" },
            parts.join(", ")
        )
    }
}

/// `19744` → `19,744`.
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ThreadSnapshot {
    pub tid: i32,
    pub comm: String,
    /// One letter from /proc/<tid>/stat: R S D T t Z X I P …; empty when the thread is gone.
    pub state: String,
    /// Kernel symbol the thread sleeps in; None when not read (thread not in D and not requested) or unreadable.
    pub wchan: Option<String>,
    pub syscall: Option<SyscallInfo>,
    /// Present when the syscall is ioctl.
    pub ioctl: Option<IoctlInfo>,
    #[serde(default)]
    pub stack: Vec<StackFrame>,
    /// One-line classification of where the thread is, e.g. `ioctl → nvidia_uvm: uvm_ioctl … mutex wait`.
    pub site: Option<String>,
    /// The thread vanished while it was being read.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gone: bool,
    /// Per-thread notes: unreadable fields and the privilege that is missing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Scheduler progress counters from status (the hung-task "no progress" test).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub voluntary_ctxt_switches: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonvoluntary_ctxt_switches: Option<u64>,
    /// utime+stime in clock ticks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_ticks: Option<u64>,
    /// CPU the thread last ran on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processor: Option<i32>,
    /// The files the blocked syscall works on: every file-descriptor argument (per `syscall-fd-args.tsv`) with
    /// its /proc/<pid>/fd link, e.g. `write` on fd 3 → `/mnt/data/out.bin`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub syscall_files: Vec<SyscallFile>,
    /// The lock class the thread waits for (`mmap_lock`), so threads stuck on the same lock are grouped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits_for: Option<String>,
    /// Threads of the same process in D that hold what this one waits for (for `mmap_lock`: the threads inside a
    /// page fault), lowest tid first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_behind: Vec<i32>,
}

/// `{"running": true}` or `{"nr", "name", "args", "sp", "pc"}` (nr -1: blocked outside a syscall, args empty).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SyscallInfo {
    Running {
        running: bool,
    },
    Blocked {
        nr: i64,
        name: Option<String>,
        /// Six hex strings (`0x…`) as the kernel printed them; empty when nr is -1.
        args: Vec<String>,
        sp: String,
        pc: String,
    },
}

/// One file-descriptor argument of a blocked syscall.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyscallFile {
    /// Which argument (0-based).
    pub arg: usize,
    pub fd: i64,
    /// Link target of /proc/<pid>/fd/<fd> (`/dev/nvidiactl`, `socket:[123]`, `anon_inode:[eventfd]`).
    pub target: Option<String>,
    /// Why there is no target (fd closed, link unreadable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_captured: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IoctlInfo {
    pub fd: i64,
    /// Link target of /proc/<pid>/fd/<fd>, e.g. `/dev/nvidiactl`.
    pub fd_target: Option<String>,
    /// The 32-bit request word as a hex string, e.g. `0xc020462a`.
    pub request: String,
    /// `none`, `write`, `read` or `read|write` (as `_IOC_DIR`), or `raw` for UVM commands that are not `_IOC`-encoded.
    pub dir: String,
    #[serde(rename = "type")]
    pub ioctl_type: u32,
    pub nr: u32,
    pub size: u32,
    /// Symbolic name, None if unknown.
    pub name: Option<String>,
    /// Which driver/table named it: `nvidia-rm`, `nvidia-uvm`, `nvidia-modeset`, `linux-fs`, `tty`, `drm`, …
    pub driver: Option<String>,
    /// What the name alone does not say: an indirection (NV_ESC_IOCTL_XFER_CMD), a size mismatch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The struct at the ioctl's pointer, decoded (NVIDIA RM/UVM, wedged threads only; read by the agent in a
    /// sacrificial child), or the reason it is missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argument: Option<IoctlArgument>,
}

impl IoctlInfo {
    /// Which struct the ioctl's pointer holds: only the NVIDIA escapes and commands with a decoder.
    pub fn argument_kind(&self) -> Option<ArgumentKind> {
        match self.driver.as_deref()? {
            "nvidia-rm" => {
                nvidia::rm_struct_size(self.nr, self.size)?;
                Some(ArgumentKind::Rm {
                    nr: self.nr,
                    size: self.size,
                })
            }
            "nvidia-uvm" if nvidia::uvm_read_size(self.nr) > 0 => {
                Some(ArgumentKind::Uvm { cmd: self.nr })
            }
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StackFrame {
    pub function: String,
    /// `+0x177/0x650` parts: offset and function size.
    pub offset: u64,
    #[serde(default)]
    pub size: u64,
    /// Kernel module in brackets, e.g. `nvidia_uvm`; None for the core kernel.
    pub module: Option<String>,
}
