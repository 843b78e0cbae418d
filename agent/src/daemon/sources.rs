//! Target sources of the host daemon (`wedge-capture agent`): processes chosen by comm regex, by cgroup
//! substring, by an open `/dev/nvidia*` fd, or by a breadcrumb ring file in a watched directory.
//!
//! One [`HostSource`] holds every selector and one table of the host's processes, so the host's pid
//! directories are listed once per scan whatever the number of selectors. Everything read is a file that
//! cannot block on the target (procfs-facts.md §6): `stat`, `cgroup` (an RCU/spinlock read on current
//! kernels), `fd/` links, `ns/pid`, `status`, and ring headers.
//!
//! Costs are bounded, whatever comes and goes:
//! - with the netlink proc connector ([`capture::proc_events`], root in the host namespaces), the proc
//!   root is not listed at every scan: fork, exec, comm and exit events name the pids whose `stat` is read
//!   at the next scan, and the full listing runs every [`FULL_WALK_EVERY`] scans (re-reading the `stat`
//!   and `cgroup` of a quarter of the known pids, staggered) and at once after lost events (`ENOBUFS`). Without it (no privilege, a fake
//!   proc root) every scan lists the proc root, as follows;
//! - `stat` is read for a new pid at once and then every [`REFRESH_EVERY`] scans (staggered by pid), which
//!   catches a comm changed by exec or `prctl(PR_SET_NAME)` within a few intervals;
//! - `cgroup` (only with a cgroup selector) for a new pid, when its comm changed, and every
//!   [`CGROUP_REFRESH_EVERY`] scans;
//! - the fd directory is looked at once per `gpu_rescan` per process (only with `--gpu`): its size (the
//!   fd count since Linux 6.2), and the links only for a new pid or when the count changed or is
//!   unknown, stopping at the first `/dev/nvidia*` link and after [`MAX_FDS_READ`] links;
//! - ring directories are the rings room's ([`crate::rings::discovery`]): inotify plus resumable
//!   listing passes, ring headers read through `capture::untrusted`, a header's claim believed only
//!   when the kernel confirms it, a bounded number of reads and entries per scan.
//!
//! Every cache is keyed by a live pid and pruned when the pid leaves the listing: memory and fds stay
//! bounded by the host's process count, not by how many processes ever existed.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use capture::parse::fd::FdTarget;
use capture::proc_events::{ProcEvent, ProcEvents};
use capture::ProcRoot;
use regex::Regex;

use crate::rings::discovery::RingWatch;
use crate::rings::files::printable_path;
use crate::watch::targets::{Target, TargetSource};

/// `stat` refresh period of a known pid, in scans.
pub const REFRESH_EVERY: u64 = 4;
/// Scans between full listings of the proc root while the proc connector reports every change.
pub const FULL_WALK_EVERY: u64 = 16;
/// `cgroup` refresh period of a known pid whose comm did not change, in scans (a multiple of
/// [`REFRESH_EVERY`]: checked when `stat` is).
pub const CGROUP_REFRESH_EVERY: u64 = 16;
/// Scans after a pid first appears in which its `stat` is read at every scan (see `ProcEntry::young_scans`).
const YOUNG_SCANS: u8 = REFRESH_EVERY as u8;
/// Most fd links read per process per fd scan.
pub const MAX_FDS_READ: usize = 65_536;
/// `PF_KTHREAD` in stat's flags: kernel threads are never targets.
const PF_KTHREAD: u32 = 0x0020_0000;

/// What to watch.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Unanchored regexes matched against the process comm (stat field 2, at most 15 bytes), like pgrep.
    pub comm: Vec<Regex>,
    /// Substrings matched against every line of the process's cgroup file.
    pub cgroup: Vec<String>,
    /// Every process holding an open `/dev/nvidia*` fd.
    pub gpu: bool,
    /// Directories of breadcrumb rings: the writer of every `*.ring` file there is a target.
    pub ring_dirs: Vec<PathBuf>,
}

impl Selection {
    pub fn is_empty(&self) -> bool {
        self.comm.is_empty() && self.cgroup.is_empty() && !self.gpu && self.ring_dirs.is_empty()
    }

    fn needs_host_table(&self) -> bool {
        !self.comm.is_empty() || !self.cgroup.is_empty() || self.gpu
    }
}

/// Source settings besides the selection.
#[derive(Debug, Clone)]
pub struct SourceSettings {
    /// Shortest time between two fd scans of one process.
    pub gpu_rescan: Duration,
    /// Most targets returned (the lowest pids win); the excess is reported once per change.
    pub max_targets: usize,
    /// Find new processes from proc connector events (false: list the proc root every scan). Fixed at the
    /// start: a reconfiguration does not change it.
    pub proc_events: bool,
}

impl Default for SourceSettings {
    /// The agent's settings at their defaults.
    fn default() -> Self {
        SourceSettings::from(&crate::settings::AgentOptions::default().resolve())
    }
}

#[derive(Debug, Default)]
struct GpuState {
    checked: Option<Instant>,
    /// `fd/` size at the last fd scan (the fd count on Linux ≥ 6.2; 0 = unknown).
    fd_count: u64,
    holds: Option<String>,
}

#[derive(Debug)]
struct ProcEntry {
    start: u64,
    comm: String,
    kernel_thread: bool,
    /// cgroup paths, all hierarchies (None until read or when unreadable).
    cgroups: Option<Vec<String>>,
    gpu: GpuState,
    /// Listing generation that last saw this pid.
    seen: u64,
    /// Scans left in which `stat` is re-read every scan: a process is often listed between its fork and
    /// its exec, with its parent's comm, and the exec's comm must be seen at the next scan, not up to
    /// [`REFRESH_EVERY`] scans later (a wedge right after exec would be seen that much later).
    young_scans: u8,
    /// Which comm selector matched `comm`, remembered for that comm and selection: comms change
    /// rarely, and every regex ran against every process at every scan (issue 40).
    comm_match: Option<CommMatch>,
}

#[derive(Debug)]
struct CommMatch {
    comm: String,
    /// [`HostSource::selection_generation`] it was computed for.
    selection: u64,
    /// Index into `Selection::comm`.
    regex: Option<usize>,
}

/// The stat of a process's leader thread (`task/<pid>/stat`): the same comm, start time and flags as the
/// process's own `stat`, which the kernel makes by walking every thread (costly for a worker with
/// thousands). A tree without task directories (a fake one) falls back to the process's `stat`.
fn leader_stat(root: &ProcRoot, pid: i32) -> capture::Result<capture::parse::stat::Stat> {
    match root.read_task_stat(pid, pid) {
        Err(_) if !root.is_live() => root.read_stat(pid),
        other => other,
    }
}

/// Whether an fd link target is an NVIDIA device node (`/dev/nvidia0`, `/dev/nvidiactl`,
/// `/dev/nvidia-uvm`, `/dev/nvidia-caps/…`). A container's private `/dev` seen from the host may lose
/// its `/dev` prefix, so a top-level `/nvidia*` counts too.
pub fn is_nvidia_device(path: &str) -> bool {
    // Wider than the ioctl decode's classifier on purpose: `--gpu` is documented as every `/dev/nvidia*`
    // holder (nvswitch, caps and future nodes included), the decode only names the nodes it has tables for.
    path.strip_prefix("/dev/")
        .or_else(|| path.strip_prefix('/').filter(|rest| !rest.contains('/')))
        .is_some_and(|rest| rest.starts_with("nvidia"))
}

/// The host daemon's target source. Shared with the daemon loop through [`SharedSource`].
pub struct HostSource {
    selection: Selection,
    settings: SourceSettings,
    procs: HashMap<i32, ProcEntry>,
    rings: RingWatch,
    generation: u64,
    scan: u64,
    me: i32,
    excluded: HashSet<i32>,
    suppressed: HashSet<i32>,
    healthy: bool,
    notes: Vec<String>,
    over_limit: usize,
    events: Discovery,
    /// Bumped by every [`HostSource::reconfigure`]: remembered comm matches of older selections are stale.
    selection_generation: u64,
}

/// Incremental discovery: the proc connector's subscription and what it reported since the last scan.
#[derive(Default)]
struct Discovery {
    socket: Option<ProcEvents>,
    /// Subscribing was tried (once: a refusal does not change while the agent runs).
    tried: bool,
    /// Full listings made while subscribed (the first one is what the events start from).
    walks: u64,
    /// The next scan must list the proc root (events were lost, or the socket failed).
    walk_due: bool,
    buffer: Vec<ProcEvent>,
    /// Processes whose leader exited: re-read each scan until gone (a zombie is still listed, and
    /// its reaping sends no event).
    exiting: HashSet<i32>,
    dirty: HashSet<i32>,
    /// Scans done from events alone, and full listings (for tests and the benchmark).
    incremental_scans: u64,
    full_walks: u64,
}

impl HostSource {
    pub fn new(selection: Selection, settings: SourceSettings) -> HostSource {
        let proc_events = settings.proc_events;
        let me = std::process::id() as i32;
        let rings = RingWatch::new(selection.ring_dirs.clone(), me);
        HostSource {
            selection,
            settings,
            procs: HashMap::new(),
            rings,
            generation: 0,
            scan: 0,
            me,
            excluded: HashSet::new(),
            suppressed: HashSet::new(),
            healthy: true,
            notes: Vec::new(),
            over_limit: 0,
            selection_generation: 0,
            // proc_events off (--no-proc-events, WEDGE_CAPTURE_PROC_EVENTS=off): list the proc root every scan.
            events: Discovery {
                tried: !proc_events,
                ..Discovery::default()
            },
        }
    }

    /// (Scans done from proc connector events alone, full listings of the proc root.)
    #[cfg(test)]
    pub fn discovery_counts(&self) -> (u64, u64) {
        (self.events.incremental_scans, self.events.full_walks)
    }

    /// Whether this scan may skip the listing: subscribed (first scan: subscribe now, before the
    /// listing, so nothing falls between), nothing lost, not a safety-net scan. Drains the events.
    fn events_suffice(&mut self, root: &ProcRoot) -> bool {
        if !root.is_live() {
            return false;
        }
        let events = &mut self.events;
        if !events.tried {
            events.tried = true;
            match ProcEvents::open() {
                Ok(socket) => {
                    events.socket = Some(socket);
                    self.notes.push(format!(
                        "incremental discovery: proc connector subscribed (full listing every {FULL_WALK_EVERY} scans)"
                    ));
                }
                Err(err) => self.notes.push(format!(
                    "incremental discovery unavailable ({err}; needs CAP_NET_ADMIN in the host namespaces): the proc root is listed every scan"
                )),
            }
        }
        let Some(socket) = events.socket.as_mut() else {
            return false;
        };
        events.buffer.clear();
        let drained = socket.drain(&mut events.buffer);
        if drained.overrun {
            events.walk_due = true;
        }
        let walk = events.walk_due
            || events.walks == 0
            || !self.healthy
            || self.scan.checked_rem(FULL_WALK_EVERY) == Some(0);
        if walk {
            events.buffer.clear();
            events.walk_due = false;
            events.walks += 1;
        }
        !walk
    }

    /// A scan from the events alone: the pids they name, the young ones and the exiting ones get
    /// their `stat` read; the gone ones leave the table.
    fn apply_events(&mut self, root: &ProcRoot) {
        let events = &mut self.events;
        events.incremental_scans += 1;
        events.dirty.clear();
        let mut exec = HashSet::new();
        let mut exited = HashSet::new();
        for event in events.buffer.drain(..) {
            match event {
                ProcEvent::Fork {
                    child_pid,
                    child_tgid,
                } if child_pid == child_tgid => {
                    events.dirty.insert(child_tgid);
                }
                ProcEvent::Exec { tgid, .. } => {
                    events.dirty.insert(tgid);
                    exec.insert(tgid);
                }
                // The process's comm is its leader's.
                ProcEvent::Comm { pid, tgid } if pid == tgid => {
                    events.dirty.insert(tgid);
                }
                ProcEvent::Exit { pid, tgid } if pid == tgid => {
                    events.exiting.insert(tgid);
                    exited.insert(tgid);
                }
                _ => {}
            }
        }
        // No young-process re-reads here: the exec that follows a fork is an event of its own.
        events.dirty.extend(events.exiting.iter().copied());
        let dirty: Vec<i32> = events.dirty.iter().copied().collect();
        let generation = self.generation;
        for pid in dirty {
            if pid == self.me || pid <= 0 {
                continue;
            }
            // Born and dead since the last scan (a build's compiler runs): nothing to watch.
            if exited.contains(&pid) && !self.procs.contains_key(&pid) {
                self.events.exiting.remove(&pid);
                continue;
            }
            let Ok(stat) = leader_stat(root, pid) else {
                self.procs.remove(&pid);
                self.events.exiting.remove(&pid);
                continue;
            };
            let exec = exec.contains(&pid);
            match self.procs.get_mut(&pid) {
                Some(entry) if entry.start == stat.starttime => {
                    if exec || entry.comm != stat.comm || self.selection.cgroup.is_empty() {
                        // A runtime moves the process, then execs the workload: cgroup again.
                        entry.cgroups = None;
                    }
                    entry.comm = stat.comm;
                    entry.seen = generation;
                    entry.young_scans = entry.young_scans.saturating_sub(1);
                }
                _ => {
                    self.events.exiting.remove(&pid);
                    self.procs.insert(
                        pid,
                        ProcEntry {
                            start: stat.starttime,
                            comm: stat.comm,
                            kernel_thread: stat.flags & PF_KTHREAD != 0,
                            cgroups: None,
                            gpu: GpuState::default(),
                            seen: generation,
                            young_scans: 0,
                            comm_match: None,
                        },
                    );
                }
            }
        }
    }

    /// Replace the selection (a reload). Caches stay valid; ring directories are re-listed.
    pub fn reconfigure(&mut self, selection: Selection, settings: SourceSettings) {
        if selection.ring_dirs != self.selection.ring_dirs {
            self.rings = RingWatch::new(selection.ring_dirs.clone(), self.me);
        }
        if selection.cgroup.is_empty() {
            for entry in self.procs.values_mut() {
                entry.cgroups = None;
            }
        }
        self.selection = selection;
        self.selection_generation += 1;
        self.settings = settings;
        self.over_limit = 0;
    }

    /// Pids left out of the next scans (rate-limited targets).
    pub fn set_suppressed(&mut self, pids: HashSet<i32>) {
        self.suppressed = pids;
    }

    /// False when the last scan could not list the host's processes.
    pub fn healthy(&self) -> bool {
        self.healthy
    }

    /// Messages for the log since the last call.
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    /// Processes in the host table, ring files with a live writer (for resource checks).
    #[cfg(test)]
    pub fn cache_sizes(&self) -> (usize, usize) {
        (self.procs.len(), self.rings.writer_count())
    }

    fn refresh_table(&mut self, root: &ProcRoot) {
        if self.events_suffice(root) {
            self.apply_events(root);
            return;
        }
        // Subscribed: events name every exec, rename and fork as it happens (a comm cannot be written
        // from outside the process), so the `stat` (and `cgroup`) re-read of a known pid is only a
        // safety net: at every REFRESH_EVERY-th listing per pid, staggered by listing.
        let subscribed = self.events.socket.is_some();
        let walks = self.events.walks;
        if subscribed {
            self.events.full_walks += 1;
        }
        let pids = match root.pids() {
            Ok(pids) => pids,
            Err(err) => {
                if self.healthy {
                    self.notes
                        .push(format!("error: cannot list processes: {err}"));
                }
                self.healthy = false;
                return;
            }
        };
        self.healthy = true;
        self.generation += 1;
        let generation = self.generation;
        let scan = self.scan;
        for pid in pids {
            if pid == self.me {
                continue;
            }
            let stagger = if subscribed { walks } else { scan };
            let due = stagger.wrapping_add(pid as u64).checked_rem(REFRESH_EVERY) == Some(0);
            match self.procs.get_mut(&pid) {
                Some(entry) if !due && entry.young_scans == 0 => entry.seen = generation,
                known => {
                    let Ok(stat) = leader_stat(root, pid) else {
                        continue; // Gone since the listing.
                    };
                    let fresh = ProcEntry {
                        start: stat.starttime,
                        comm: stat.comm,
                        kernel_thread: stat.flags & PF_KTHREAD != 0,
                        cgroups: None,
                        gpu: GpuState::default(),
                        seen: generation,
                        // Subscribed, the exec after a fork is an event: no re-reads needed.
                        young_scans: if subscribed { 0 } else { YOUNG_SCANS },
                        comm_match: None,
                    };
                    match known {
                        // Same process: keep its cgroup and fd knowledge.
                        Some(entry) if entry.start == fresh.start => {
                            // cgroup membership changes rarely, and mostly just before an exec
                            // (a runtime moves the process, then execs the workload): re-read it
                            // when the comm changed, else every CGROUP_REFRESH_EVERY scans.
                            let cgroup_due = subscribed
                                || entry.comm != fresh.comm
                                || scan
                                    .wrapping_add(pid as u64)
                                    .checked_rem(CGROUP_REFRESH_EVERY)
                                    == Some(0);
                            entry.comm = fresh.comm;
                            entry.seen = generation;
                            entry.young_scans = entry.young_scans.saturating_sub(1);
                            if cgroup_due || self.selection.cgroup.is_empty() {
                                // Read again (lazily, by the cgroup selector) at this scan.
                                entry.cgroups = None;
                            }
                        }
                        // New, or the pid was reused by another process.
                        _ => {
                            self.procs.insert(pid, fresh);
                        }
                    }
                }
            }
        }
        self.procs.retain(|_, entry| entry.seen == generation);
        let procs = &self.procs;
        self.events.exiting.retain(|pid| procs.contains_key(pid));
    }

    fn matches(&mut self, root: &ProcRoot, out: &mut Vec<Target>) {
        let now = Instant::now();
        let gpu_rescan = self.settings.gpu_rescan;
        for (&pid, entry) in self.procs.iter_mut() {
            if entry.kernel_thread || self.excluded.contains(&pid) {
                continue;
            }
            let selection = self.selection_generation;
            let regex = match &entry.comm_match {
                Some(m) if m.selection == selection && m.comm == entry.comm => m.regex,
                _ => {
                    let regex = self
                        .selection
                        .comm
                        .iter()
                        .position(|re| re.is_match(&entry.comm));
                    entry.comm_match = Some(CommMatch {
                        comm: entry.comm.clone(),
                        selection,
                        regex,
                    });
                    regex
                }
            };
            if let Some(re) = regex.and_then(|i| self.selection.comm.get(i)) {
                out.push(Target {
                    pid,
                    parent: 0,
                    why: format!("comm `{}` matches /{}/", entry.comm, re.as_str()),
                });
                continue;
            }
            if !self.selection.cgroup.is_empty() {
                if entry.cgroups.is_none() {
                    entry.cgroups = root
                        .cgroup(pid)
                        .ok()
                        .map(|lines| lines.into_iter().map(|l| l.path).collect());
                }
                let hit = entry.cgroups.as_ref().and_then(|paths| {
                    self.selection
                        .cgroup
                        .iter()
                        .find_map(|s| paths.iter().find(|p| p.contains(s.as_str())))
                });
                if let Some(path) = hit {
                    out.push(Target {
                        pid,
                        parent: 0,
                        why: format!("cgroup {path}"),
                    });
                    continue;
                }
            }
            if self.selection.gpu {
                // At most one look at the fd directory per process per gpu_rescan: its size (the
                // fd count) first, the links only when that changed or is unknown.
                let due = entry
                    .gpu
                    .checked
                    .is_none_or(|at| now.duration_since(at) >= gpu_rescan);
                if due {
                    let count = root.fd_count(pid).unwrap_or(0);
                    let changed =
                        entry.gpu.checked.is_none() || count == 0 || count != entry.gpu.fd_count;
                    entry.gpu.checked = Some(now);
                    entry.gpu.fd_count = count;
                    if changed {
                        entry.gpu.holds = nvidia_fd(root, pid);
                    }
                }
                if let Some(device) = &entry.gpu.holds {
                    out.push(Target {
                        pid,
                        parent: 0,
                        why: format!("holds {device} open"),
                    });
                }
            }
        }
    }
}

/// The first NVIDIA device among a process's fd links (at most [`MAX_FDS_READ`] read).
fn nvidia_fd(root: &ProcRoot, pid: i32) -> Option<String> {
    let link = root
        .find_fd_link(
            pid,
            MAX_FDS_READ,
            |link| matches!(&link.target, FdTarget::Path { path, .. } if is_nvidia_device(path)),
        )
        .ok()??;
    match link.target {
        FdTarget::Path { path, .. } => Some(path),
        _ => None,
    }
}

impl TargetSource for HostSource {
    fn targets(&mut self, proc_root: &ProcRoot) -> Vec<Target> {
        self.scan += 1;
        let mut out = Vec::new();
        if self.selection.needs_host_table() {
            self.refresh_table(proc_root);
            self.matches(proc_root, &mut out);
        } else {
            self.procs.clear();
            self.healthy = true;
        }
        if !self.selection.ring_dirs.is_empty() {
            self.rings.refresh(proc_root, &mut self.notes);
            for (path, writer) in self.rings.writers() {
                if writer.pid == self.me || self.excluded.contains(&writer.pid) {
                    continue;
                }
                out.push(Target {
                    pid: writer.pid,
                    parent: 0,
                    why: format!("writes ring {}", printable_path(path)),
                });
            }
        }
        out.retain(|t| !self.suppressed.contains(&t.pid));
        out.sort_by_key(|t| t.pid);
        out.dedup_by_key(|t| t.pid);
        if out.len() <= self.settings.max_targets {
            self.over_limit = 0;
        } else {
            if self.over_limit == 0 {
                self.notes.push(format!(
                    "warning: {} processes match; watching the first {} (raise max_targets)",
                    out.len(),
                    self.settings.max_targets
                ));
            }
            self.over_limit = out.len();
            out.truncate(self.settings.max_targets);
        }
        out
    }

    fn exclude(&mut self, pids: &HashSet<i32>) {
        self.excluded.clone_from(pids);
    }
}

/// A [`HostSource`] the watch loop owns and the daemon reconfigures between scans.
#[derive(Clone)]
pub struct SharedSource(Arc<Mutex<HostSource>>);

impl SharedSource {
    pub fn new(source: HostSource) -> SharedSource {
        SharedSource(Arc::new(Mutex::new(source)))
    }

    /// The source (never poisoned in practice: a panic in it would end the agent).
    pub fn lock(&self) -> MutexGuard<'_, HostSource> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl TargetSource for SharedSource {
    fn targets(&mut self, proc_root: &ProcRoot) -> Vec<Target> {
        self.lock().targets(proc_root)
    }

    fn exclude(&mut self, pids: &HashSet<i32>) {
        self.lock().exclude(pids);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capture::testing::FakeProc;
    use std::path::Path;

    /// `/proc/<pid>` with stat (comm, start), cgroup and fd links, in the shared fake tree builder.
    fn fake_process(root: &Path, pid: i32, comm: &str, start: u64, cgroup: &str, fds: &[&str]) {
        FakeProc::at(root)
            .process(pid)
            .comm(comm)
            .start(start)
            .cgroup(cgroup)
            .fds(fds);
    }

    fn pids(targets: &[Target]) -> Vec<i32> {
        targets.iter().map(|t| t.pid).collect()
    }

    #[test]
    fn nvidia_device_names() {
        for yes in [
            "/dev/nvidia0",
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/nvidia1",
        ] {
            assert!(is_nvidia_device(yes), "{yes}");
        }
        assert!(is_nvidia_device("/dev/nvidia-caps/nvidia-cap1"));
        for no in [
            "/tmp/nvidia0",
            "/dev/null",
            "/home/x/nvidia/log",
            "socket:[1]",
            "",
        ] {
            assert!(!is_nvidia_device(no), "{no}");
        }
    }

    #[test]
    fn selects_by_comm_cgroup_and_gpu_in_a_fake_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fake_process(root, 10, "python3", 100, "/user.slice", &["/dev/null"]);
        fake_process(
            root,
            11,
            "bash",
            101,
            "/machine.slice/libpod-abc.scope",
            &[],
        );
        fake_process(
            root,
            12,
            "worker",
            102,
            "/",
            &["/dev/nvidiactl", "/dev/nvidia0"],
        );
        fake_process(root, 13, "sshd", 103, "/system.slice", &["socket:[5]"]);
        let proc_root = ProcRoot::new(root);
        let selection = Selection {
            comm: vec![Regex::new("^pyth").unwrap()],
            cgroup: vec!["libpod-abc".into()],
            gpu: true,
            ring_dirs: Vec::new(),
        };
        let mut source = HostSource::new(selection, SourceSettings::default());
        let targets = source.targets(&proc_root);
        assert_eq!(pids(&targets), vec![10, 11, 12], "{targets:?}");
        assert!(targets[0].why.contains("python3"), "{targets:?}");
        assert!(targets[1].why.contains("libpod-abc"), "{targets:?}");
        assert!(targets[2].why.contains("/dev/nvidiactl"), "{targets:?}");

        // An exited process leaves the targets and the cache; a new one joins.
        std::fs::remove_dir_all(root.join("10")).unwrap();
        fake_process(root, 14, "python3.11", 104, "/", &[]);
        let targets = source.targets(&proc_root);
        assert_eq!(pids(&targets), vec![11, 12, 14], "{targets:?}");
        assert_eq!(source.cache_sizes().0, 4);

        // Suppressed and excluded pids are left out.
        source.set_suppressed([11].into_iter().collect());
        source.exclude(&[12].into_iter().collect());
        assert_eq!(pids(&source.targets(&proc_root)), vec![14]);

        // A reload to another selection applies at the next scan.
        source.reconfigure(
            Selection {
                comm: vec![Regex::new("ssh").unwrap()],
                ..Selection::default()
            },
            SourceSettings::default(),
        );
        source.set_suppressed(HashSet::new());
        assert_eq!(pids(&source.targets(&proc_root)), vec![13]);
    }

    #[test]
    fn a_reused_pid_is_a_new_process() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fake_process(root, 20, "python", 100, "/", &[]);
        let proc_root = ProcRoot::new(root);
        let mut source = HostSource::new(
            Selection {
                comm: vec![Regex::new("^bash$").unwrap()],
                ..Selection::default()
            },
            SourceSettings::default(),
        );
        assert!(source.targets(&proc_root).is_empty());
        std::fs::remove_dir_all(root.join("20")).unwrap();
        fake_process(root, 20, "bash", 200, "/", &[]);
        // Within REFRESH_EVERY scans the new process is read afresh.
        let found = (0..REFRESH_EVERY).any(|_| !source.targets(&proc_root).is_empty());
        assert!(found);
    }

    #[test]
    fn an_exec_right_after_the_fork_is_seen_at_the_next_scan() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let proc_root = ProcRoot::new(root);
        let mut source = HostSource::new(
            Selection {
                comm: vec![Regex::new("^worker$").unwrap()],
                ..Selection::default()
            },
            SourceSettings::default(),
        );
        // Every pid residue modulo REFRESH_EVERY: none may wait for its periodic refresh.
        for pid in 40..40 + REFRESH_EVERY as i32 {
            // Listed between fork and exec: still the parent's comm.
            fake_process(root, pid, "launcher", 500, "/", &[]);
        }
        assert!(source.targets(&proc_root).is_empty());
        for pid in 40..40 + REFRESH_EVERY as i32 {
            fake_process(root, pid, "worker", 500, "/", &[]);
        }
        assert_eq!(
            source.targets(&proc_root).len(),
            REFRESH_EVERY as usize,
            "the exec's comm must be seen at the next scan"
        );
    }

    /// A process of our own that renames itself (`prctl(PR_SET_NAME)`, no exec) when told to through a
    /// pipe, then sleeps until killed.
    struct Renamer {
        pid: i32,
        go: std::os::fd::OwnedFd,
    }

    impl Renamer {
        fn start(name: &std::ffi::CStr) -> Renamer {
            let (read, write) = nix::unistd::pipe().unwrap();
            // SAFETY: fork(2) in a threaded process: the child below makes raw system calls only.
            match unsafe { libc::fork() } {
                // SAFETY: async-signal-safe calls only (read, prctl, pause) on memory that exists in
                // the child after fork (the pipe fd, the name, a stack byte).
                0 => unsafe {
                    use std::os::fd::AsRawFd;
                    let mut byte = 0u8;
                    libc::read(read.as_raw_fd(), std::ptr::addr_of_mut!(byte).cast(), 1);
                    libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0);
                    loop {
                        libc::pause();
                    }
                },
                pid if pid > 0 => Renamer { pid, go: write },
                _ => panic!("fork failed"),
            }
        }

        fn rename_now(&self) {
            nix::unistd::write(&self.go, b"x").unwrap();
        }
    }

    impl Drop for Renamer {
        fn drop(&mut self) {
            // SAFETY: kill(2) and waitpid(2) on our own child.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
                libc::waitpid(self.pid, std::ptr::null_mut(), 0);
            }
        }
    }

    fn live_source(comm: &str) -> HostSource {
        HostSource::new(
            Selection {
                comm: vec![Regex::new(&format!("^{comm}$")).unwrap()],
                ..Selection::default()
            },
            SourceSettings::default(),
        )
    }

    fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if done() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// With the proc connector (root), a process that execs or renames itself after the subscription
    /// is found at the next scan, from the events alone: no listing of the proc root.
    #[test]
    fn exec_and_rename_are_found_from_events_without_a_listing() {
        let root = ProcRoot::default();
        let comm = format!("wcq{}", std::process::id() % 100_000);
        let mut source = live_source(&comm);
        source.targets(&root); // subscribes, then the first listing
        if source.events.socket.is_none() {
            assert!(
                !nix::unistd::Uid::effective().is_root() && !breadcrumb::in_ci(),
                "the proc connector must work as root: {:?}",
                source.take_notes()
            );
            eprintln!("skipping: {:?}", source.take_notes());
            return;
        }
        // Past the young-process window of everything listed, and not at a safety-net scan.
        for _ in 0..(YOUNG_SCANS as u64 + 1) {
            source.targets(&root);
        }
        let (_, walks) = source.discovery_counts();

        let renamer = Renamer::start(&std::ffi::CString::new(comm.clone()).unwrap());
        // Old enough that the young-process re-reads no longer look at it.
        for _ in 0..(YOUNG_SCANS as u64 + 1) {
            assert!(source.targets(&root).iter().all(|t| t.pid != renamer.pid));
        }
        renamer.rename_now();
        assert!(wait_until(Duration::from_secs(5), || {
            std::fs::read_to_string(format!("/proc/{}/comm", renamer.pid))
                .is_ok_and(|c| c.trim() == comm)
        }));
        let found = pids(&source.targets(&root));
        assert!(found.contains(&renamer.pid), "renamed: {found:?}");

        let (_dir, mut exec) = sleep_named(&comm);
        let exec_pid = exec.id() as i32;
        let found = pids(&source.targets(&root));
        assert!(found.contains(&exec_pid), "exec'd: {found:?}");
        assert_eq!(
            source.discovery_counts().1,
            walks,
            "found from events, without listing the proc root"
        );

        // Exit: gone from the targets at the next scan, still without a listing.
        exec.kill().unwrap();
        exec.wait().unwrap();
        let found = pids(&source.targets(&root));
        assert!(!found.contains(&exec_pid), "reaped: {found:?}");
        assert_eq!(source.discovery_counts().1, walks);
        drop(renamer);
    }

    /// `sleep 30` exec'd under the name `comm` (a symlink in a temporary directory, kept alive by the
    /// returned guard), once its comm reads `comm`.
    fn sleep_named(comm: &str) -> (tempfile::TempDir, std::process::Child) {
        let dir = tempfile::tempdir().unwrap();
        let program = dir.path().join(comm);
        std::os::unix::fs::symlink("/bin/sleep", &program).unwrap();
        let child = std::process::Command::new(&program)
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        assert!(wait_until(Duration::from_secs(5), || {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm)
        }));
        (dir, child)
    }

    /// Lost events (an overrun) or a lost socket: the proc root is listed again, and what appeared in
    /// between is found.
    #[test]
    fn losing_the_events_falls_back_to_listing() {
        let root = ProcRoot::default();
        let comm = format!("wcl{}", std::process::id() % 100_000);
        let mut source = live_source(&comm);
        source.targets(&root);
        if source.events.socket.is_none() {
            assert!(
                !nix::unistd::Uid::effective().is_root() && !breadcrumb::in_ci(),
                "the proc connector must work as root"
            );
            return;
        }
        source.targets(&root);
        let (_, walks) = source.discovery_counts();
        // An overrun: the next scan lists.
        source.events.walk_due = true;
        source.targets(&root);
        assert_eq!(source.discovery_counts().1, walks + 1);
        source.targets(&root);
        assert_eq!(source.discovery_counts().1, walks + 1, "then events again");

        // The socket gone: every scan lists, and a process that execs is found.
        source.events.socket = None;
        let (_dir, mut child) = sleep_named(&comm);
        let pid = child.id() as i32;
        let found = pids(&source.targets(&root));
        assert!(found.contains(&pid), "{found:?}");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!pids(&source.targets(&root)).contains(&pid));
    }

    #[test]
    fn max_targets_bounds_the_list() {
        let dir = tempfile::tempdir().unwrap();
        for pid in 30..40 {
            fake_process(dir.path(), pid, "many", pid as u64, "/", &[]);
        }
        let mut source = HostSource::new(
            Selection {
                comm: vec![Regex::new("many").unwrap()],
                ..Selection::default()
            },
            SourceSettings {
                max_targets: 3,
                ..SourceSettings::default()
            },
        );
        let targets = source.targets(&ProcRoot::new(dir.path()));
        assert_eq!(pids(&targets), vec![30, 31, 32]);
        assert!(source
            .take_notes()
            .iter()
            .any(|n| n.contains("10 processes match")));
    }
}
