//! Incremental discovery: the netlink proc connector's fork, exec, comm and exit events name the pids
//! whose `stat` is read at the next scan, so that the proc root need not be listed at every scan.

use std::collections::{HashMap, HashSet};

use capture::proc_events::{ProcEvent, ProcEvents};
use capture::ProcRoot;

use super::table::{leader_stat, ProcEntry, FULL_WALK_EVERY};

/// Incremental discovery: the proc connector's subscription and what it reported since the last scan.
#[derive(Default)]
pub(super) struct Discovery {
    pub(super) socket: Option<ProcEvents>,
    /// Subscribing was tried (once: a refusal does not change while the agent runs).
    pub(super) tried: bool,
    /// Full listings made while subscribed (the first one is what the events start from).
    pub(super) walks: u64,
    /// The next scan must list the proc root (events were lost, or the socket failed).
    pub(super) walk_due: bool,
    pub(super) buffer: Vec<ProcEvent>,
    /// Processes whose leader exited: re-read each scan until gone (a zombie is still listed, and
    /// its reaping sends no event).
    pub(super) exiting: HashSet<i32>,
    pub(super) dirty: HashSet<i32>,
    /// Scans done from events alone, and full listings (for tests and the benchmark).
    pub(super) incremental_scans: u64,
    pub(super) full_walks: u64,
}

/// What a scan from events needs of the source besides its table.
pub(super) struct Pass {
    /// The listing generation entries seen now get.
    pub(super) generation: u64,
    /// The agent itself, never a target.
    pub(super) me: i32,
    /// A cgroup selector is set (cgroups are then kept until they may have changed).
    pub(super) cgroup_selected: bool,
}

impl Discovery {
    /// Whether this scan may skip the listing: subscribed (first scan: subscribe now, before the
    /// listing, so nothing falls between), nothing lost, not a safety-net scan. Drains the events.
    pub(super) fn suffices(
        &mut self,
        root: &ProcRoot,
        healthy: bool,
        scan: u64,
        notes: &mut Vec<String>,
    ) -> bool {
        if !root.is_live() {
            return false;
        }
        let events = self;
        if !events.tried {
            events.tried = true;
            match ProcEvents::open() {
                Ok(socket) => {
                    events.socket = Some(socket);
                    notes.push(format!(
                        "incremental discovery: proc connector subscribed (full listing every {FULL_WALK_EVERY} scans)"
                    ));
                }
                Err(err) => notes.push(format!(
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
            || !healthy
            || scan.checked_rem(FULL_WALK_EVERY) == Some(0);
        if walk {
            events.buffer.clear();
            events.walk_due = false;
            events.walks += 1;
        }
        !walk
    }

    /// A scan from the events alone: the pids they name, the young ones and the exiting ones get
    /// their `stat` read; the gone ones leave the table.
    pub(super) fn apply(
        &mut self,
        root: &ProcRoot,
        procs: &mut HashMap<i32, ProcEntry>,
        pass: Pass,
    ) {
        let events = &mut *self;
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
        let generation = pass.generation;
        for pid in dirty {
            if pid == pass.me || pid <= 0 {
                continue;
            }
            // Born and dead since the last scan (a build's compiler runs): nothing to watch.
            if exited.contains(&pid) && !procs.contains_key(&pid) {
                self.exiting.remove(&pid);
                continue;
            }
            let Ok(stat) = leader_stat(root, pid) else {
                procs.remove(&pid);
                self.exiting.remove(&pid);
                continue;
            };
            let exec = exec.contains(&pid);
            match procs.get_mut(&pid) {
                Some(entry) if entry.start == stat.starttime => {
                    if exec || entry.comm != stat.comm || !pass.cgroup_selected {
                        // A runtime moves the process, then execs the workload: cgroup again.
                        entry.cgroups = None;
                    }
                    entry.comm = stat.comm;
                    entry.seen = generation;
                    entry.young_scans = entry.young_scans.saturating_sub(1);
                }
                _ => {
                    self.exiting.remove(&pid);
                    procs.insert(
                        pid,
                        // No young-process re-reads: the exec after a fork is an event of its own.
                        ProcEntry::new(stat, generation, 0),
                    );
                }
            }
        }
    }
}
