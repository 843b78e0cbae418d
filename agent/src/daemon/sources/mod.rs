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
//!   at the next scan, and the full listing runs every [`table::FULL_WALK_EVERY`] scans (re-reading the `stat`
//!   and `cgroup` of a quarter of the known pids, staggered) and at once after lost events (`ENOBUFS`). Without it (no privilege, a fake
//!   proc root) every scan lists the proc root, as follows;
//! - `stat` is read for a new pid at once and then every [`table::REFRESH_EVERY`] scans (staggered by pid), which
//!   catches a comm changed by exec or `prctl(PR_SET_NAME)` within a few intervals;
//! - `cgroup` (only with a cgroup selector) for a new pid, when its comm changed, and every
//!   [`table::CGROUP_REFRESH_EVERY`] scans;
//! - the fd directory is looked at once per `gpu_rescan` per process (only with `--gpu`): its size (the
//!   fd count since Linux 6.2), and the links only for a new pid or when the count changed or is
//!   unknown, stopping at the first `/dev/nvidia*` link and after [`table::MAX_FDS_READ`] links;
//! - ring directories are the rings room's ([`crate::rings::discovery`]): inotify plus resumable
//!   listing passes, ring headers read through `capture::untrusted`, a header's claim believed only
//!   when the kernel confirms it, a bounded number of reads and entries per scan.
//!
//! Every cache is keyed by a live pid and pruned when the pid leaves the listing: memory and fds stay
//! bounded by the host's process count, not by how many processes ever existed.
//!
//! Map: [`select`] (what to watch, what an NVIDIA device is), [`table`] (the process table and its refresh
//! schedule), [`incremental`] (the proc connector's events), this module (the listing and the selectors).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use capture::parse::fd::FdTarget;
use capture::ProcRoot;

use crate::rings::discovery::RingWatch;
use crate::rings::files::printable_path;
use crate::watch::targets::{Target, TargetSource};
use incremental::{Discovery, Pass};
pub use select::{is_nvidia_device, Selection, SourceSettings};
use table::{
    leader_stat, CommMatch, ProcEntry, CGROUP_REFRESH_EVERY, MAX_FDS_READ, REFRESH_EVERY,
    YOUNG_SCANS,
};

mod incremental;
mod select;
mod table;

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
        if self
            .events
            .suffices(root, self.healthy, self.scan, &mut self.notes)
        {
            let pass = Pass {
                generation: self.generation,
                me: self.me,
                cgroup_selected: !self.selection.cgroup.is_empty(),
            };
            self.events.apply(root, &mut self.procs, pass);
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
                    // Subscribed, the exec after a fork is an event: no re-reads needed.
                    let young_scans = if subscribed { 0 } else { YOUNG_SCANS };
                    let fresh = ProcEntry::new(stat, generation, young_scans);
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
mod tests;
