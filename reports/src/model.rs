//! The incident model: everything one wedge report holds, schema-versioned (docs/report-schema.md).
//!
//! Every struct is `#[serde(default)]`: a file written by an older version, or a partial file written early in
//! a capture, still parses; fields added later are additive. Thread snapshots are `capture::ProcessSnapshot`,
//! embedded unchanged (the capture issue's JSON contract); ring records are the breadcrumb reader's types.
//!
//! Every time carries its clock: `wall` (CLOCK_REALTIME, RFC 3339 UTC), `monotonic_ns` (CLOCK_MONOTONIC, the ring's
//! clock), `boottime_ns` (CLOCK_BOOTTIME), and `kernel_time_us` for kernel log lines (the printk clock).

use std::collections::BTreeMap;

pub use capture::python_stack::{PythonFrame, PythonThread};
pub use capture::user_frame::{CandidateFrame, UserFrame};
use capture::{ProcessSnapshot, ThreadSnapshot};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use breadcrumb::{Args, InFlight, Record, RecordKind, RingHeader, RingSnapshot};

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

/// One instant on every clock that was read. A clock that was not read is None.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Timestamp {
    /// CLOCK_REALTIME, RFC 3339 in UTC. Jumps with NTP and settimeofday; for humans.
    pub wall: Option<DateTime<Utc>>,
    /// CLOCK_MONOTONIC in nanoseconds: the breadcrumb ring's clock; stops during suspend.
    pub monotonic_ns: Option<u64>,
    /// CLOCK_BOOTTIME in nanoseconds: like monotonic, but counts suspend.
    pub boottime_ns: Option<u64>,
}

impl Timestamp {
    /// Read all three clocks now.
    pub fn now() -> Timestamp {
        Timestamp {
            wall: Some(Utc::now()),
            monotonic_ns: clock_ns(nix::time::ClockId::CLOCK_MONOTONIC),
            boottime_ns: clock_ns(nix::time::ClockId::CLOCK_BOOTTIME),
        }
    }

    /// A past CLOCK_MONOTONIC time on this boot with its wall-clock and boot-time equivalents: each clock now
    /// minus the monotonic time elapsed since (exact to the nanosecond unless the host was suspended in
    /// between or the wall clock was stepped; the boot time from /proc/stat's `btime` plus the monotonic
    /// time gives the same within its one-second resolution). A time after now keeps only `monotonic_ns`.
    pub fn at_monotonic(ns: u64) -> Timestamp {
        let now = Timestamp::now();
        let Some(elapsed) = now.monotonic_ns.and_then(|now| now.checked_sub(ns)) else {
            return Timestamp::monotonic(ns);
        };
        Timestamp {
            wall: now.wall.and_then(|wall| {
                wall.checked_sub_signed(chrono::Duration::nanoseconds(i64::try_from(elapsed).ok()?))
            }),
            monotonic_ns: Some(ns),
            boottime_ns: now.boottime_ns.and_then(|b| b.checked_sub(elapsed)),
        }
    }

    /// Only a monotonic time (e.g. a ring record's).
    pub fn monotonic(ns: u64) -> Timestamp {
        Timestamp {
            monotonic_ns: Some(ns),
            ..Timestamp::default()
        }
    }
}

fn clock_ns(clock: nix::time::ClockId) -> Option<u64> {
    let ts = nix::time::clock_gettime(clock).ok()?;
    let secs = u64::try_from(ts.tv_sec()).ok()?;
    let nanos = u64::try_from(ts.tv_nsec()).ok()?;
    secs.checked_mul(1_000_000_000)?.checked_add(nanos)
}

/// What made the watchdog write the incident.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// A thread sat in D without progress for the threshold.
    #[default]
    Wedge,
    /// Asked for (SIGUSR1 to the agent), whether or not anything is wedged: no episode to follow.
    OnDemand,
    /// Written by a newer version with a trigger this one does not know.
    #[serde(other)]
    Unknown,
}

/// Whether the wedge is still going on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EpisodeStatus {
    /// At least one thread is still stuck.
    #[default]
    Open,
    /// Every wedged thread left D (or the process was reaped).
    Resolved,
    /// wedge-capture stopped (`run` exited, the agent was stopped) while a thread was still wedged: nothing
    /// after `Episode::watcher_exited_at` was watched.
    #[serde(rename = "still_wedged_at_exit")]
    StillWedgedAtExit,
    /// The outcome is not known: nobody watched the episode until its end (its process was gone, or was
    /// another process, when a watcher started again: `Episode::outcome_unknown` says between when and
    /// when). Also what a file written by a newer version with a status this one does not know reads as.
    #[serde(other)]
    Unknown,
}

/// A stretch of an episode that no wedge-capture watched (between a watcher's exit or death and the start
/// of the next one on the same store).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Unwatched {
    /// The last time a watcher said anything about the episode (its exit, or its last write if it died).
    pub from: Timestamp,
    /// When the next watcher looked again.
    pub until: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Episode {
    pub status: EpisodeStatus,
    /// When the first thread of the episode was first seen in D.
    pub started_at: Timestamp,
    pub resolved_at: Option<Timestamp>,
    /// Seconds from `started_at` to `resolved_at` (monotonic clock).
    pub resolved_after_s: Option<f64>,
    /// When wedge-capture stopped watching an episode that was still open (status `still_wedged_at_exit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watcher_exited_at: Option<Timestamp>,
    /// Stretches nobody watched: each time a watcher adopted the episode (it was still in D), or closed it
    /// (status `unknown`), the gap since the previous watcher's last word.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unwatched: Vec<Unwatched>,
    /// With status `unknown`: why the outcome is not known ("not watched between … and …: the process is
    /// gone").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome_unknown: Option<String>,
}

/// The host, as passed in by the caller (the reports crate reads nothing from the kernel).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct HostInfo {
    pub hostname: String,
    /// The kernel's random `boot_id`: tells whether two incidents come from the same boot.
    pub boot_id: String,
    /// `uname -r`.
    pub kernel_release: String,
    /// `x86_64` or `aarch64`.
    pub arch: String,
    /// NVIDIA kernel driver version when known (e.g. `580.159.04`).
    pub nvidia_driver_version: Option<String>,
}

/// The watched process.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessInfo {
    /// PID in the host's PID namespace.
    pub pid: i32,
    /// Start time of the process (field 22 of /proc/<pid>/stat, clock ticks since boot): with the boot id
    /// and the pid, the process's identity (a reused pid has another start time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
    /// NSpid from status: the PID in each nested namespace, outermost first (last = inside the container).
    pub nspid: Vec<i32>,
    pub comm: String,
    /// cgroup v2 path.
    pub cgroup: Option<String>,
    /// Container id derived from the cgroup path, if any.
    pub container_id: Option<String>,
    /// The container (and Kubernetes pod) the process runs in, from its cgroup and the kubelet's pod
    /// log directories.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerInfo>,
    /// Command line, read in a sacrificial child (it can hang); always redacted before it is stored.
    /// Environment variables are never captured.
    pub cmdline: Option<Vec<String>>,
}

/// A process's container: `runtime` is `containerd`, `cri-o`, `docker`, `podman` or `unknown`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ContainerInfo {
    pub runtime: String,
    pub id: String,
    pub pod_uid: Option<String>,
    /// Found under the kubelet's pod log directory for `pod_uid` (or in the container runtime's state).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodInfo>,
    /// How `pod_uid` was established (issue 35); absent without one. Older files lack it: their pod was only
    /// claimed by the cgroup name ([`ContainerInfo::pod_confirmed`] reads them so).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_identity: Option<PodIdentity>,
    /// Why: the node state that confirmed the pod, or what was missing or disagreed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_identity_note: Option<String>,
}

/// How a container's pod was established: the cgroup path only *claims* one (a process with a delegated cgroup
/// can name its cgroups like another pod's); the node's own state confirms it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PodIdentity {
    /// The container runtime's state names the container in that pod, at or above the process's cgroup.
    ContainerRuntime,
    /// The kubelet's pod directory for the UID exists and the cgroup's kubelet levels start at its root.
    Kubelet,
    /// Claimed by the cgroup name: nothing the node keeps confirms it.
    CgroupName,
}

impl PodIdentity {
    /// `confirmed by the container runtime`, `confirmed by the kubelet`, `claimed by the cgroup name only`.
    pub fn describe(self) -> &'static str {
        match self {
            PodIdentity::ContainerRuntime => "confirmed by the container runtime's state",
            PodIdentity::Kubelet => "confirmed by the kubelet's pod directory",
            PodIdentity::CgroupName => "claimed by the cgroup name only (not confirmed)",
        }
    }
}

impl ContainerInfo {
    /// Whether the node's own state confirmed the pod (a file without `pod_identity`: no).
    pub fn pod_confirmed(&self) -> bool {
        matches!(
            self.pod_identity,
            Some(PodIdentity::ContainerRuntime | PodIdentity::Kubelet)
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
}

impl ProcessInfo {
    /// Redact secrets in the command line (idempotent).
    pub fn redact(&mut self) {
        if let Some(args) = &self.cmdline {
            self.cmdline = Some(crate::redact::redact_cmdline(args));
        }
    }
}

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

/// The breadcrumb ring as read from outside.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RingExcerpt {
    /// Path of the ring file on the host.
    pub path: Option<String>,
    /// Name of the byte-exact copy inside the incident directory (`ring.bin`), if one was written.
    pub copy: Option<String>,
    pub read_at: Timestamp,
    pub header: Option<RingHeader>,
    /// The last records, oldest first (times: CLOCK_MONOTONIC).
    pub records: Vec<Record>,
    /// Calls entered and never exited, per thread.
    pub in_flight: Vec<InFlight>,
    /// Slots being rewritten while read (skipped).
    pub torn_slots: u64,
    /// Slots whose content failed validation (skipped).
    pub invalid_slots: u64,
    /// Whether the ring was written on this boot (then its monotonic times compare with ours).
    pub same_boot: Option<bool>,
    /// Records in the ring that are not in `records` (the excerpt keeps the newest).
    pub records_omitted: u64,
    /// Calls in flight not in `in_flight` (the excerpt keeps the oldest; a hostile ring can hold 2^20).
    #[serde(skip_serializing_if = "is_zero")]
    pub in_flight_omitted: u64,
    /// What the copy (`copy`) leaves out of the ring when it is not the whole ring: a ring over the incident's
    /// ring-copy budget is copied as a valid smaller ring of its newest records.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy_note: Option<String>,
    /// Why the ring could not be read, when it could not.
    pub error: Option<String>,
    /// Which breadcrumb path wrote the ring, from its file name (docs/inject.md): `<pid>-<start>.driver.ring`
    /// "breadcrumbs by driver-API interposition (LD_PRELOAD)", `.cupti.ring` "breadcrumbs by CUPTI: NVML
    /// clients may stall during long UVM operations"; absent for other names (the program's own rings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breadcrumbs: Option<String>,
}

/// [`RingExcerpt::breadcrumbs`] of a ring file path.
pub fn breadcrumb_path_of(path: &str) -> Option<String> {
    let file = path.rsplit('/').next().unwrap_or(path);
    if file.ends_with(".driver.ring") {
        Some("breadcrumbs by driver-API interposition (LD_PRELOAD)".to_string())
    } else if file.ends_with(".cupti.ring") {
        Some("breadcrumbs by CUPTI: NVML clients may stall during long UVM operations".to_string())
    } else {
        None
    }
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl RingExcerpt {
    /// The excerpt of a ring read: header, in-flight calls and the newest `max_records` records.
    pub fn from_snapshot(
        path: Option<String>,
        snapshot: &RingSnapshot,
        max_records: usize,
    ) -> RingExcerpt {
        let keep = snapshot.records.len().min(max_records);
        let omitted = snapshot.records.len() - keep;
        RingExcerpt {
            breadcrumbs: path.as_deref().and_then(breadcrumb_path_of),
            path,
            copy: None,
            // The reader's clock when it computed the ages: `ring dump` of the copy counts ages from it.
            read_at: match snapshot.reader_monotonic_ns {
                Some(ns) => Timestamp::at_monotonic(ns),
                None => Timestamp::now(),
            },
            header: Some(snapshot.header.clone()),
            records: snapshot.records[omitted..].to_vec(),
            in_flight: snapshot.in_flight.clone(),
            torn_slots: snapshot.torn_slots,
            invalid_slots: snapshot.invalid_slots,
            same_boot: snapshot.same_boot,
            records_omitted: omitted as u64,
            in_flight_omitted: snapshot.in_flight_omitted,
            copy_note: None,
            error: None,
        }
    }

    /// The ring could not be read.
    pub fn unreadable(path: Option<String>, error: impl Into<String>) -> RingExcerpt {
        RingExcerpt {
            breadcrumbs: path.as_deref().and_then(breadcrumb_path_of),
            path,
            read_at: Timestamp::now(),
            error: Some(error.into()),
            ..RingExcerpt::default()
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// `d_since.wall` is never null for a time on this boot: the wall clock of a monotonic time is the
    /// wall clock now less the monotonic time elapsed since.
    #[test]
    fn a_monotonic_time_gets_its_wall_clock_time() {
        let now = Timestamp::now();
        let mono_now = now.monotonic_ns.unwrap();
        let ten_s_ago = Timestamp::at_monotonic(mono_now - 10_000_000_000);
        let wall = ten_s_ago.wall.expect("wall filled");
        let back = (now.wall.unwrap() - wall).num_milliseconds();
        // 10 s, plus what passed between the two reads of the clocks (generous: a loaded CI).
        assert!((9_990..12_000).contains(&back), "{back} ms");
        let boottime_back = now.boottime_ns.unwrap() - ten_s_ago.boottime_ns.unwrap();
        assert!((9_990_000_000..12_000_000_000).contains(&boottime_back));
        assert_eq!(ten_s_ago.monotonic_ns, Some(mono_now - 10_000_000_000));
        // A time that is not in the past has no wall-clock time to give.
        let future = Timestamp::at_monotonic(u64::MAX);
        assert_eq!((future.wall, future.boottime_ns), (None, None));
        // The wall time is in the JSON, not null.
        let json = serde_json::to_value(&ten_s_ago).unwrap();
        assert!(json["wall"].is_string(), "{json}");
    }

    #[test]
    fn a_ring_says_which_breadcrumb_path_wrote_it() {
        let of = |p: &str| breadcrumb_path_of(p).unwrap_or_default();
        assert!(of("/run/rings/4242-99.driver.ring").contains("driver-API interposition"));
        assert!(
            of("4242-99.cupti.ring").contains("NVML clients may stall during long UVM operations")
        );
        assert_eq!(
            breadcrumb_path_of("/run/rings/4242-99.ring"),
            None,
            "the program's own ring"
        );
        let excerpt = RingExcerpt::unreadable(Some("/r/1-2.cupti.ring".into()), "gone");
        assert!(excerpt
            .breadcrumbs
            .unwrap()
            .starts_with("breadcrumbs by CUPTI"));
    }

    #[test]
    fn empty_and_partial_json_parse() {
        let empty: Incident = serde_json::from_str("{}").unwrap();
        assert!(!empty.complete);
        let partial: Incident = serde_json::from_str(
            r#"{"id":"x","verdict":"v","episode":{"status":"weird"},"samples":[{"snapshot":{"pid":1,"arch":"x86_64","threads":[]}}],"future_field":1}"#,
        )
        .unwrap();
        assert_eq!(partial.episode.status, EpisodeStatus::Unknown);
        assert_eq!(partial.samples[0].snapshot.pid, 1);
    }

    #[test]
    fn round_trip() {
        let mut inc = Incident::new(4242);
        inc.kernel_log.push(KernelLogLine::new(
            Some(1),
            Some(3),
            Some(5),
            "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
        ));
        let json = serde_json::to_string(&inc).unwrap();
        let back: Incident = serde_json::from_str(&json).unwrap();
        assert_eq!(back, inc);
        let f = back.kernel_log[0].flags;
        assert!(f.nvrm && f.xid && f.fallen_off_bus && !f.hung_task);
    }

    #[test]
    fn kernel_lines_are_marked_by_whom_they_concern() {
        let classify = |text: &str| {
            Relevance::classify(text, &KernelLogFlags::classify(text), 4242, &[4242, 4251])
        };
        assert_eq!(
            classify("INFO: task python3:4251 blocked for more than 122 seconds."),
            Relevance::Target
        );
        assert_eq!(
            classify("python3[4242]: segfault at 0 ip 0"),
            Relevance::Target
        );
        // The same comm with another pid is another process.
        assert_eq!(
            classify("INFO: task python3:977 blocked for more than 122 seconds."),
            Relevance::OtherProcess
        );
        assert_eq!(
            classify("Out of memory: Killed process 31337 (java)"),
            Relevance::OtherProcess
        );
        assert_eq!(
            classify("NVRM: Xid (PCI:0000:01:00): 79, pid=977, GPU has fallen off the bus."),
            Relevance::Nvidia
        );
        assert_eq!(
            classify("NVRM: Xid (PCI:0000:01:00): 13, pid=4242, name=python3"),
            Relevance::Target
        );
        // Bus addresses, times and sizes are not pids.
        assert_eq!(
            classify("pci 0000:01:00.0: BAR 0 [mem 0x4242]"),
            Relevance::Context
        );
        assert_eq!(
            classify("EXT4-fs (loop7): mounted filesystem 4242 r/w"),
            Relevance::Context
        );
    }

    #[test]
    fn clocks_are_read() {
        let t = Timestamp::now();
        assert!(
            t.wall.is_some()
                && t.monotonic_ns.unwrap() > 0
                && t.boottime_ns.unwrap() >= t.monotonic_ns.unwrap() / 2
        );
    }

    #[test]
    fn id_format() {
        let wall = DateTime::parse_from_rfc3339("2026-12-02T11:34:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            incident_id(wall, "gpu01", 4242),
            "20261202T113400Z-gpu01-4242"
        );
        assert_eq!(
            incident_id(wall, "a/../b c", 1),
            "20261202T113400Z-a_.._b_c-1"
        );
        assert_eq!(incident_id(wall, "", 1), "20261202T113400Z-host-1");
    }

    #[test]
    fn redacted_copy_hides_secrets() {
        let mut inc = Incident::new(1);
        inc.process.cmdline = Some(vec!["x".into(), "--token".into(), "t".into()]);
        assert_eq!(inc.redacted().process.cmdline.unwrap()[2], "[REDACTED]");
    }
}
