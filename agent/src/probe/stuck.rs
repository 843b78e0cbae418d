//! Probe children stuck in the kernel after SIGKILL, counted per target, per tenant and for the host.

use std::sync::{Arc, Mutex};

/// A probe child that did not go away after SIGKILL.
#[derive(Debug, Clone)]
pub(super) struct StuckChild {
    pub(super) pid: i32,
    pub(super) name: String,
    /// The watched process the probe was about (0: none).
    pub(super) target: i32,
    /// The tenant of that process (see `watch::queue::tenant_of`).
    pub(super) tenant: String,
}

/// Probe children stuck in the kernel after SIGKILL, shared by every runner of the process (the capture
/// workers each have one): counted per target process and per tenant, so that a target whose probes get
/// stuck (a real mmap-lock wedge does that to every reader of its memory) loses its own probes, never
/// another target's. A host-wide valve ([`MAX_STUCK_PROBES_HOST`]) only bounds the pids they hold. The
/// children running now are listed too: probes run in capture workers while the watch loop scans, and a
/// target source that follows our own children (`run`'s, as the subreaper) must never watch them.
#[derive(Debug, Clone, Default)]
pub struct StuckChildren(Arc<Mutex<ProbeChildren>>);

#[derive(Debug, Default)]
struct ProbeChildren {
    stuck: Vec<StuckChild>,
    running: std::collections::HashSet<i32>,
}

/// Stuck probe children of the whole host beyond which no probe starts (each holds a pid until its wedge
/// clears); far above what the per-target and per-tenant bounds let any one tenant reach.
pub const MAX_STUCK_PROBES_HOST: usize = 256;

impl StuckChildren {
    fn lock(&self) -> std::sync::MutexGuard<'_, ProbeChildren> {
        // A panic while holding the lock cannot leave the lists inconsistent (plain inserts and retains).
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Reap those that finally died; never blocks.
    pub fn reap(&self) {
        self.lock().stuck.retain(|child| !try_reap(child.pid));
    }

    /// Pids of every probe child, running or stuck (never watch or reap them elsewhere).
    pub fn pids(&self) -> Vec<i32> {
        let children = self.lock();
        children
            .stuck
            .iter()
            .map(|child| child.pid)
            .chain(children.running.iter().copied())
            .collect()
    }

    pub(super) fn started(&self, pid: i32) {
        self.lock().running.insert(pid);
    }

    pub(super) fn ended(&self, pid: i32) {
        self.lock().running.remove(&pid);
    }

    pub(super) fn push(&self, child: StuckChild) {
        let mut children = self.lock();
        children.running.remove(&child.pid);
        children.stuck.push(child);
    }

    /// (this target's stuck children, this tenant's, the host's), and this target's names.
    pub(super) fn counts(&self, target: i32, tenant: &str) -> (usize, usize, usize, Vec<String>) {
        let children = self.lock();
        let list = &children.stuck;
        let mine: Vec<String> = list
            .iter()
            .filter(|c| c.target == target)
            .map(|c| c.name.clone())
            .collect();
        let tenant_count = list.iter().filter(|c| c.tenant == tenant).count();
        (mine.len(), tenant_count, list.len(), mine)
    }

    pub(super) fn of_target(&self, target: i32) -> Vec<StuckChild> {
        self.lock()
            .stuck
            .iter()
            .filter(|c| c.target == target)
            .cloned()
            .collect()
    }
}

/// Reap `pid` if it has ended; never blocks. True when reaped (or already gone).
fn try_reap(pid: i32) -> bool {
    let mut status = 0;
    // SAFETY: waitpid on a specific child pid with WNOHANG; `status` is a valid out pointer.
    let ret = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    ret == pid || (ret < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD))
}
