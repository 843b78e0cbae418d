//! The table of the host's processes the selectors read from: one entry per live pid (comm, start time,
//! cgroups, GPU fds), refreshed on the schedule the constants say.

use capture::ProcRoot;
use std::time::Instant;

/// `stat` refresh period of a known pid, in scans.
pub const REFRESH_EVERY: u64 = 4;
/// Scans between full listings of the proc root while the proc connector reports every change.
pub const FULL_WALK_EVERY: u64 = 16;
/// `cgroup` refresh period of a known pid whose comm did not change, in scans (a multiple of
/// [`REFRESH_EVERY`]: checked when `stat` is).
pub const CGROUP_REFRESH_EVERY: u64 = 16;
/// Scans after a pid first appears in which its `stat` is read at every scan (see `ProcEntry::young_scans`).
pub(super) const YOUNG_SCANS: u8 = REFRESH_EVERY as u8;
/// Most fd links read per process per fd scan.
pub const MAX_FDS_READ: usize = 65_536;
/// `PF_KTHREAD` in stat's flags: kernel threads are never targets.
pub(super) const PF_KTHREAD: u32 = 0x0020_0000;

#[derive(Debug, Default)]
pub(super) struct GpuState {
    pub(super) checked: Option<Instant>,
    /// `fd/` size at the last fd scan (the fd count on Linux ≥ 6.2; 0 = unknown).
    pub(super) fd_count: u64,
    pub(super) holds: Option<String>,
}

#[derive(Debug)]
pub(super) struct ProcEntry {
    pub(super) start: u64,
    pub(super) comm: String,
    pub(super) kernel_thread: bool,
    /// cgroup paths, all hierarchies (None until read or when unreadable).
    pub(super) cgroups: Option<Vec<String>>,
    pub(super) gpu: GpuState,
    /// Listing generation that last saw this pid.
    pub(super) seen: u64,
    /// Scans left in which `stat` is re-read every scan: a process is often listed between its fork and
    /// its exec, with its parent's comm, and the exec's comm must be seen at the next scan, not up to
    /// [`REFRESH_EVERY`] scans later (a wedge right after exec would be seen that much later).
    pub(super) young_scans: u8,
    /// Which comm selector matched `comm`, remembered for that comm and selection: comms change
    /// rarely, and every regex ran against every process at every scan (issue 40).
    pub(super) comm_match: Option<CommMatch>,
}

impl ProcEntry {
    /// A process first seen (or seen again after its pid was reused) in listing `generation`; its stat
    /// re-read at each of the next `young_scans` scans.
    pub(super) fn new(
        stat: capture::parse::stat::Stat,
        generation: u64,
        young_scans: u8,
    ) -> ProcEntry {
        ProcEntry {
            start: stat.starttime,
            comm: stat.comm,
            kernel_thread: stat.flags & PF_KTHREAD != 0,
            cgroups: None,
            gpu: GpuState::default(),
            seen: generation,
            young_scans,
            comm_match: None,
        }
    }
}

#[derive(Debug)]
pub(super) struct CommMatch {
    pub(super) comm: String,
    /// [`super::HostSource`]`::selection_generation` it was computed for.
    pub(super) selection: u64,
    /// Index into `Selection::comm`.
    pub(super) regex: Option<usize>,
}

/// The stat of a process's leader thread (`task/<pid>/stat`): the same comm, start time and flags as the
/// process's own `stat`, which the kernel makes by walking every thread (costly for a worker with
/// thousands). A tree without task directories (a fake one) falls back to the process's `stat`.
pub(super) fn leader_stat(
    root: &ProcRoot,
    pid: i32,
) -> capture::Result<capture::parse::stat::Stat> {
    match root.read_task_stat(pid, pid) {
        Err(_) if !root.is_live() => root.read_stat(pid),
        other => other,
    }
}
