//! A ring header is a claim, not proof: who may a ring file in a directory others can write make a
//! target, and which rings belong to a wedged process.
//!
//! Map:
//! - [`Claim`]: what a header says (writer pid in its own namespace, start time, pid namespace).
//! - [`Verifier`]: believes a claim only when the kernel confirms it — the process exists, is not pid 1,
//!   a kernel thread, the agent or one of its ancestors, its start time and pid namespace match, and
//!   it holds the ring file's (dev, inode) open (stat of `/proc/<pid>/fd/N`: no mmap lock taken; the
//!   breadcrumb writer keeps its fd open for its life). [`Refusal`] says why not.
//! - [`NamespaceIndex`]: namespace pid → host pid, from one walk of the host's pids for every namespace
//!   asked about since the last walk (at most one walk per [`MIN_WALK_INTERVAL`]).
//! - [`Budget`]: most reads one scan may spend on rings; what is left over waits for the next scan.
//! - [`RejectionLog`]: each rejected file logged once, at most [`LOGGED_PER_WINDOW`] per minute, the rest
//!   counted in one summary line per minute.
//! - [`Rejected`]: refused files by identity, examined again only when they change; forgotten when a
//!   full listing pass no longer sees them.
//!
//! Every read here is a file that cannot block on the target (procfs-facts.md §6): `stat`, `status`,
//! `ns/pid` and `fd/` links.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use capture::untrusted::FileIdentity;
use capture::ProcRoot;

use super::files::held_files;

/// `PF_KTHREAD` in stat's flags.
const PF_KTHREAD: u32 = 0x0020_0000;
/// Shortest time between two walks of the host's pids for namespace pids.
pub const MIN_WALK_INTERVAL: Duration = Duration::from_secs(1);
/// Rejected ring files logged one by one per [`LOG_WINDOW`]; the rest are counted.
pub const LOGGED_PER_WINDOW: u64 = 8;
/// The period of the rejected-rings summary line.
pub const LOG_WINDOW: Duration = Duration::from_secs(60);
/// Most levels of parents followed up from the agent.
const MAX_ANCESTRY: usize = 256;

/// What a ring header claims about its writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// The writer's pid in its own pid namespace.
    pub pid: u32,
    pub start_time_ticks: u64,
    pub pidns_inode: u64,
}

impl Claim {
    pub fn of(header: &breadcrumb::RingHeader) -> Claim {
        Claim {
            pid: header.writer_pid,
            start_time_ticks: header.start_time_ticks,
            pidns_inode: header.pidns_inode,
        }
    }
}

/// Why a claim is not believed. The messages never repeat the claimed values (file content).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    ZeroStartTime,
    NoNamespace,
    InvalidPid,
    NoProcessInNamespace,
    Init,
    KernelThread,
    Agent,
    AgentAncestor,
    NoSuchProcess,
    StartMismatch,
    NamespaceMismatch,
    NotHeld,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Refusal::ZeroStartTime => "its header gives no writer start time",
            Refusal::NoNamespace => "its header gives no writer pid namespace",
            Refusal::InvalidPid => "its header gives an impossible writer pid",
            Refusal::NoProcessInNamespace => {
                "no process of the claimed pid namespace has the claimed pid"
            }
            Refusal::Init => "the claimed writer is pid 1 (never a target)",
            Refusal::KernelThread => "the claimed writer is a kernel thread (never a target)",
            Refusal::Agent => "the claimed writer is this agent",
            Refusal::AgentAncestor => "the claimed writer is an ancestor of this agent",
            Refusal::NoSuchProcess => "the claimed writer does not exist",
            Refusal::StartMismatch => "the claimed writer's start time does not match",
            Refusal::NamespaceMismatch => "the claimed writer's pid namespace does not match",
            Refusal::NotHeld => "the claimed writer does not hold this file open",
        })
    }
}

impl Refusal {
    /// A ring left behind by a writer that exited (its pid gone or reused): ordinary, not hostile.
    pub fn is_stale(self) -> bool {
        matches!(
            self,
            Refusal::NoSuchProcess | Refusal::StartMismatch | Refusal::NoProcessInNamespace
        )
    }
}

/// A confirmed writer: host pid and start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Confirmed {
    pub pid: i32,
    pub start: u64,
}

/// The outcome of one verification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Writer(Confirmed),
    Refused(Refusal),
    /// Not decided this scan: the budget is spent, or the namespace needs a walk of the host's pids.
    Later,
}

/// Reads one scan may still spend on rings.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    left: usize,
}

impl Budget {
    pub fn new(reads: usize) -> Budget {
        Budget { left: reads }
    }

    /// Spend `n` reads; false (nothing spent) when fewer are left.
    pub fn spend(&mut self, n: usize) -> bool {
        if self.left < n {
            return false;
        }
        self.left -= n;
        true
    }

    pub fn left(&self) -> usize {
        self.left
    }

    pub fn is_spent(&self) -> bool {
        self.left == 0
    }
}

/// Namespace pid → host pid for the namespaces asked about, as of the last walk of the host's pids.
#[derive(Debug, Default)]
pub struct NamespaceIndex {
    /// ns inode → (innermost namespace pid → host pid).
    maps: HashMap<u64, HashMap<i32, i32>>,
    /// Namespaces asked about since the last walk (walked next time).
    wanted: HashSet<u64>,
    /// The namespaces the last walk looked for.
    looked_for: HashSet<u64>,
    /// Walks done so far: a claim first looked at after walk N is decided by walk N + 1.
    walks: u64,
    last_walk: Option<Instant>,
}

enum Lookup {
    Host(i32),
    Absent,
    NeedWalk,
}

impl NamespaceIndex {
    /// Walks done so far (stamp a claim with it when first seen).
    pub fn walks(&self) -> u64 {
        self.walks
    }

    /// Decided only by a walk made after the claim was first seen (`seen_at_walk`) that looked for
    /// its namespace: a writer's ring appears after the writer started, so that walk saw it.
    fn lookup(&mut self, ns: u64, nspid: i32, seen_at_walk: u64) -> Lookup {
        if self.walks > seen_at_walk && self.looked_for.contains(&ns) {
            return self
                .maps
                .get(&ns)
                .and_then(|map| map.get(&nspid))
                .map_or(Lookup::Absent, |&host| Lookup::Host(host));
        }
        self.wanted.insert(ns);
        Lookup::NeedWalk
    }

    /// Whether a walk is wanted and allowed now.
    pub fn walk_due(&self) -> bool {
        !self.wanted.is_empty()
            && self
                .last_walk
                .is_none_or(|at| at.elapsed() >= MIN_WALK_INTERVAL)
    }

    /// One pass over the host's pids: `ns/pid` of each, `status` (NSpid) only for those in a wanted
    /// namespace or one that had processes at the last walk (kept fresh: bounded by the host's real
    /// namespaces, not by what ring headers claim). Returns the reads spent.
    pub fn walk(&mut self, root: &ProcRoot) -> usize {
        let mut wanted = std::mem::take(&mut self.wanted);
        wanted.extend(self.maps.keys().copied());
        let mut maps: HashMap<u64, HashMap<i32, i32>> = HashMap::new();
        let mut reads = 1;
        for pid in root.pids().unwrap_or_default() {
            reads += 1;
            let Ok(ns) = root.pid_ns(pid) else {
                continue;
            };
            if !wanted.contains(&ns) {
                continue;
            }
            reads += 1;
            let inner = root
                .read_task_status(pid, pid)
                .ok()
                .and_then(|status| status.nspid.last().copied());
            if let Some(inner) = inner {
                maps.entry(ns).or_default().insert(inner, pid);
            }
        }
        self.maps = maps;
        self.looked_for = wanted;
        self.walks += 1;
        self.last_walk = Some(Instant::now());
        reads
    }
}

/// Believes ring claims only when the kernel confirms them (see the module map).
#[derive(Debug)]
pub struct Verifier {
    me: i32,
    own_pidns: Option<u64>,
    /// The agent's ancestors as of this scan (a parent can die and the agent be reparented).
    ancestors: Option<HashSet<i32>>,
    /// Files held open per host pid (with its start time), for this scan.
    held: HashMap<i32, (u64, HashSet<(u64, u64)>)>,
    pub namespaces: NamespaceIndex,
}

impl Verifier {
    pub fn new(me: i32) -> Verifier {
        Verifier {
            me,
            own_pidns: None,
            ancestors: None,
            held: HashMap::new(),
            namespaces: NamespaceIndex::default(),
        }
    }

    /// Forget what was learnt for the previous scan (fd tables and ancestry change).
    pub fn begin_scan(&mut self) {
        self.ancestors = None;
        self.held.clear();
    }

    fn ancestors(&mut self, root: &ProcRoot) -> &HashSet<i32> {
        let me = self.me;
        self.ancestors.get_or_insert_with(|| {
            let mut found = HashSet::new();
            let mut pid = me;
            for _ in 0..MAX_ANCESTRY {
                let Ok(stat) = root.read_stat(pid) else {
                    break;
                };
                if stat.ppid <= 0 || !found.insert(stat.ppid) {
                    break;
                }
                pid = stat.ppid;
            }
            found
        })
    }

    /// Decides whether `claim`, found in the file `file` (dev, inode), names a live writer. `seen_at_walk`
    /// is [`NamespaceIndex::walks`] when the claim was first looked at.
    pub fn verify(
        &mut self,
        root: &ProcRoot,
        claim: &Claim,
        file: (u64, u64),
        seen_at_walk: u64,
        budget: &mut Budget,
    ) -> Verdict {
        if claim.start_time_ticks == 0 {
            return Verdict::Refused(Refusal::ZeroStartTime);
        }
        if claim.pidns_inode == 0 {
            return Verdict::Refused(Refusal::NoNamespace);
        }
        let Some(pid) = i32::try_from(claim.pid).ok().filter(|&p| p > 0) else {
            return Verdict::Refused(Refusal::InvalidPid);
        };
        if self.own_pidns.is_none() {
            if !budget.spend(1) {
                return Verdict::Later;
            }
            self.own_pidns = root.pid_ns(self.me).ok();
        }
        let host = if Some(claim.pidns_inode) == self.own_pidns {
            pid
        } else {
            match self.namespaces.lookup(claim.pidns_inode, pid, seen_at_walk) {
                Lookup::Host(host) => host,
                Lookup::Absent => return Verdict::Refused(Refusal::NoProcessInNamespace),
                Lookup::NeedWalk => return Verdict::Later,
            }
        };
        if host == 1 {
            return Verdict::Refused(Refusal::Init);
        }
        if host == self.me {
            return Verdict::Refused(Refusal::Agent);
        }
        if !budget.spend(1) {
            return Verdict::Later;
        }
        if self.ancestors(root).contains(&host) {
            return Verdict::Refused(Refusal::AgentAncestor);
        }
        if !budget.spend(2) {
            return Verdict::Later;
        }
        let Ok(stat) = root.read_stat(host) else {
            return Verdict::Refused(Refusal::NoSuchProcess);
        };
        if stat.flags & PF_KTHREAD != 0 {
            return Verdict::Refused(Refusal::KernelThread);
        }
        if stat.starttime != claim.start_time_ticks {
            return Verdict::Refused(Refusal::StartMismatch);
        }
        if root.pid_ns(host).ok() != Some(claim.pidns_inode) {
            return Verdict::Refused(Refusal::NamespaceMismatch);
        }
        let held = match self.held.get(&host) {
            Some((start, held)) if *start == stat.starttime => held,
            _ => {
                if budget.is_spent() {
                    return Verdict::Later;
                }
                let files: HashSet<(u64, u64)> = held_files(root, host).into_keys().collect();
                // Spent after the fact: one process's fd table is never split across scans.
                let _ = budget.spend(files.len().min(budget.left()));
                &self
                    .held
                    .entry(host)
                    .insert_entry((stat.starttime, files))
                    .into_mut()
                    .1
            }
        };
        if !held.contains(&file) {
            return Verdict::Refused(Refusal::NotHeld);
        }
        Verdict::Writer(Confirmed {
            pid: host,
            start: stat.starttime,
        })
    }
}

/// Logs each rejected ring file once (a path already logged is only counted when it is refused again),
/// at most [`LOGGED_PER_WINDOW`] per [`LOG_WINDOW`], and the rest as one summary line per window.
#[derive(Debug)]
pub struct RejectionLog {
    window_start: Instant,
    logged: u64,
    suppressed: u64,
    total: u64,
    logged_paths: HashSet<PathBuf>,
}

impl Default for RejectionLog {
    fn default() -> Self {
        RejectionLog {
            window_start: Instant::now(),
            logged: 0,
            suppressed: 0,
            total: 0,
            logged_paths: HashSet::new(),
        }
    }
}

impl RejectionLog {
    /// Count one rejection of `path`; the line to log, if it may be logged now.
    pub fn reject(&mut self, path: &Path, line: impl FnOnce() -> String) -> Option<String> {
        self.total += 1;
        if self.logged < LOGGED_PER_WINDOW && !self.logged_paths.contains(path) {
            if self.logged_paths.len() >= MAX_REMEMBERED {
                self.logged_paths.clear();
            }
            self.logged_paths.insert(path.to_path_buf());
            self.logged += 1;
            Some(line())
        } else {
            self.suppressed += 1;
            None
        }
    }

    /// The summary line when a window ended with suppressed rejections.
    pub fn summary(&mut self, now: Instant) -> Option<String> {
        if now.duration_since(self.window_start) < LOG_WINDOW {
            return None;
        }
        self.window_start = now;
        self.logged = 0;
        let suppressed = std::mem::take(&mut self.suppressed);
        (suppressed > 0).then(|| {
            format!(
                "warning: {suppressed} more ring files rejected in the last {} s, not logged one by one \
                 ({} rejected since start)",
                LOG_WINDOW.as_secs(),
                self.total
            )
        })
    }

    /// Ring files rejected since start (each counted once per version of the file).
    #[cfg(test)]
    pub fn total(&self) -> u64 {
        self.total
    }
}

/// Rejected files remembered by (dev, inode, mtime, length) of the directory entry (`lstat`): an
/// unchanged file is not examined again; a changed one is. Each is stamped with the listing pass that
/// last saw it, so a full pass forgets the files it no longer lists.
#[derive(Debug, Default)]
pub struct Rejected {
    files: HashMap<PathBuf, (FileIdentity, u64)>,
    pass: u64,
}

/// Most rejected files remembered (beyond it the memory is cleared: files are examined again).
pub const MAX_REMEMBERED: usize = 200_000;

impl Rejected {
    /// The entry's identity, and whether it is the rejected file unchanged.
    pub fn unchanged(&self, path: &Path) -> (Option<FileIdentity>, bool) {
        let identity = std::fs::symlink_metadata(path)
            .ok()
            .map(|m| FileIdentity::of(&m));
        let same =
            identity.is_some() && self.files.get(path).map(|(known, _)| known) == identity.as_ref();
        (identity, same)
    }

    pub fn remember(&mut self, path: PathBuf, identity: FileIdentity) {
        if self.files.len() >= MAX_REMEMBERED {
            self.files.clear();
        }
        self.files.insert(path, (identity, self.pass));
    }

    pub fn forget(&mut self, path: &Path) {
        self.files.remove(path);
    }

    /// A full listing pass begins: files it does not list (or remember anew) are forgotten at its end.
    pub fn begin_pass(&mut self) {
        self.pass += 1;
    }

    /// The current pass listed `path`.
    pub fn listed(&mut self, path: &Path) {
        if let Some((_, seen)) = self.files.get_mut(path) {
            *seen = self.pass;
        }
    }

    /// The current pass is complete: forget the files it did not see.
    pub fn end_pass(&mut self) {
        let pass = self.pass;
        self.files.retain(|_, (_, seen)| *seen == pass);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.files.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capture::testing::FakeProc;
    use std::os::unix::fs::MetadataExt;

    /// A fake `/proc/<pid>` with stat (ppid, flags, start), ns/pid, NSpid and fd links.
    fn fake(
        root: &Path,
        (pid, ppid): (i32, i32),
        flags: u32,
        start: u64,
        ns: u64,
        nspid: &[i32],
        fds: &[&Path],
    ) {
        FakeProc::at(root)
            .process(pid)
            .comm(&format!("p{pid}"))
            .ppid(ppid)
            .flags(flags)
            .start(start)
            .nspid(nspid)
            .pid_ns(ns)
            .fds(fds);
    }

    fn inode(path: &Path) -> (u64, u64) {
        let meta = std::fs::metadata(path).unwrap();
        (meta.dev(), meta.ino())
    }

    const HOST_NS: u64 = 4_026_531_836;
    const CONTAINER_NS: u64 = 4_026_532_999;

    struct Tree {
        _dir: tempfile::TempDir,
        root: ProcRoot,
        ring: PathBuf,
        other: PathBuf,
    }

    /// pid 1 (init), 2 (kthreadd), 100 (agent's parent), 200 (the agent), 300 (a ring writer holding
    /// `ring`), 301 (a process holding only `other`), 400 (a container's pid 1 holding `ring`).
    fn tree() -> Tree {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("proc");
        let ring = dir.path().join("w.ring");
        let other = dir.path().join("other");
        std::fs::write(&ring, b"ring").unwrap();
        std::fs::write(&other, b"other").unwrap();
        fake(&root, (1, 0), 0x100, 5, HOST_NS, &[1], &[&ring]);
        fake(&root, (2, 0), PF_KTHREAD, 6, HOST_NS, &[2], &[]);
        fake(&root, (100, 1), 0, 50, HOST_NS, &[100], &[&ring]);
        fake(&root, (200, 100), 0, 60, HOST_NS, &[200], &[&ring]);
        fake(&root, (300, 1), 0, 70, HOST_NS, &[300], &[&other, &ring]);
        fake(&root, (301, 1), 0, 71, HOST_NS, &[301], &[&other]);
        fake(&root, (400, 1), 0, 80, CONTAINER_NS, &[400, 1], &[&ring]);
        Tree {
            root: ProcRoot::new(&root),
            _dir: dir,
            ring,
            other,
        }
    }

    fn claim(pid: u32, start: u64, ns: u64) -> Claim {
        Claim {
            pid,
            start_time_ticks: start,
            pidns_inode: ns,
        }
    }

    fn verify(t: &Tree, verifier: &mut Verifier, c: Claim) -> Verdict {
        verifier.begin_scan();
        verifier.verify(&t.root, &c, inode(&t.ring), 0, &mut Budget::new(10_000))
    }

    #[test]
    fn only_a_confirmed_writer_holding_the_file_is_believed() {
        let t = tree();
        let mut v = Verifier::new(200);
        assert_eq!(
            verify(&t, &mut v, claim(300, 70, HOST_NS)),
            Verdict::Writer(Confirmed {
                pid: 300,
                start: 70
            })
        );
        let refused = |c| match verify(&t, &mut Verifier::new(200), c) {
            Verdict::Refused(why) => why,
            other => panic!("{c:?}: {other:?}"),
        };
        // The forged header: pid 1, no start time, no namespace.
        assert_eq!(refused(claim(1, 0, 0)), Refusal::ZeroStartTime);
        assert_eq!(refused(claim(1, 5, 0)), Refusal::NoNamespace);
        // Pid 1 even with the right start time and namespace (and it holds the file).
        assert_eq!(refused(claim(1, 5, HOST_NS)), Refusal::Init);
        assert_eq!(refused(claim(2, 6, HOST_NS)), Refusal::KernelThread);
        assert_eq!(refused(claim(200, 60, HOST_NS)), Refusal::Agent);
        assert_eq!(refused(claim(100, 50, HOST_NS)), Refusal::AgentAncestor);
        assert_eq!(refused(claim(300, 71, HOST_NS)), Refusal::StartMismatch);
        assert_eq!(refused(claim(999, 70, HOST_NS)), Refusal::NoSuchProcess);
        assert_eq!(refused(claim(0, 70, HOST_NS)), Refusal::InvalidPid);
        // A real process that does not hold the ring open.
        assert_eq!(refused(claim(301, 71, HOST_NS)), Refusal::NotHeld);
        // Host pid 400 claimed as if in the host namespace: it lives in another one.
        assert_eq!(refused(claim(400, 80, HOST_NS)), Refusal::NamespaceMismatch);
        let held = held_files(&t.root, 301);
        assert!(held.contains_key(&inode(&t.other)) && !held.contains_key(&inode(&t.ring)));
    }

    #[test]
    fn namespace_pids_resolve_through_one_walk() {
        let t = tree();
        let mut v = Verifier::new(200);
        let c = claim(1, 80, CONTAINER_NS);
        let mut budget = Budget::new(10_000);
        // First look: the namespace needs a walk; no pid is guessed meanwhile.
        assert_eq!(
            v.verify(&t.root, &c, inode(&t.ring), 0, &mut budget),
            Verdict::Later
        );
        assert!(v.namespaces.walk_due());
        v.namespaces.walk(&t.root);
        assert!(!v.namespaces.walk_due());
        assert_eq!(
            v.verify(&t.root, &c, inode(&t.ring), 0, &mut budget),
            Verdict::Writer(Confirmed {
                pid: 400,
                start: 80
            })
        );
        // Pid 7 of that namespace does not exist; a namespace nobody is in is refused after the walk
        // that looked for it, never resolved to a host process.
        assert_eq!(
            v.verify(
                &t.root,
                &claim(7, 80, CONTAINER_NS),
                inode(&t.ring),
                0,
                &mut budget
            ),
            Verdict::Refused(Refusal::NoProcessInNamespace)
        );
        let nowhere = claim(1, 80, 12345);
        let seen = v.namespaces.walks();
        assert_eq!(
            v.verify(&t.root, &nowhere, inode(&t.ring), seen, &mut budget),
            Verdict::Later
        );
        v.namespaces.walk(&t.root);
        assert_eq!(
            v.verify(&t.root, &nowhere, inode(&t.ring), seen, &mut budget),
            Verdict::Refused(Refusal::NoProcessInNamespace)
        );
        // The walk is rate-limited: asking again right away does not make one due.
        let seen = v.namespaces.walks();
        assert_eq!(
            v.verify(
                &t.root,
                &claim(1, 80, 777),
                inode(&t.ring),
                seen,
                &mut budget
            ),
            Verdict::Later
        );
        assert!(!v.namespaces.walk_due());
    }

    #[test]
    fn a_spent_budget_defers_instead_of_reading() {
        let t = tree();
        let mut v = Verifier::new(200);
        let mut budget = Budget::new(0);
        assert_eq!(
            v.verify(
                &t.root,
                &claim(300, 70, HOST_NS),
                inode(&t.ring),
                0,
                &mut budget
            ),
            Verdict::Later
        );
        // Refusals that need no read are decided whatever the budget.
        assert_eq!(
            v.verify(&t.root, &claim(1, 0, 0), inode(&t.ring), 0, &mut budget),
            Verdict::Refused(Refusal::ZeroStartTime)
        );
        let mut budget = Budget::new(10_000);
        assert!(matches!(
            v.verify(
                &t.root,
                &claim(300, 70, HOST_NS),
                inode(&t.ring),
                0,
                &mut budget
            ),
            Verdict::Writer(_)
        ));
        assert!(budget.left() < 10_000);
    }

    #[test]
    fn rejections_are_logged_a_bounded_number_of_times() {
        let mut log = RejectionLog::default();
        let lines = (0..20_000)
            .filter_map(|n| {
                let path = PathBuf::from(format!("{n}.ring"));
                log.reject(&path, || format!("ring {n} ignored"))
            })
            .count() as u64;
        assert_eq!(lines, LOGGED_PER_WINDOW);
        assert_eq!(log.total(), 20_000);
        assert_eq!(log.summary(Instant::now()), None, "the window is not over");
        let summary = log.summary(Instant::now() + LOG_WINDOW).unwrap();
        assert!(
            summary.contains(&format!("{} more", 20_000 - LOGGED_PER_WINDOW)),
            "{summary}"
        );
        assert!(log
            .reject(Path::new("new.ring"), || "next window".into())
            .is_some());
        // A file logged once is only counted when refused again (it changed, and still is junk).
        assert!(log
            .reject(Path::new("new.ring"), || "again".into())
            .is_none());
    }

    #[test]
    fn a_rejected_file_is_examined_again_only_when_it_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.ring");
        std::fs::write(&path, b"junk").unwrap();
        let mut rejected = Rejected::default();
        let (identity, same) = rejected.unchanged(&path);
        assert!(!same);
        rejected.remember(path.clone(), identity.unwrap());
        assert!(rejected.unchanged(&path).1);
        std::fs::write(&path, b"other junk").unwrap();
        assert!(!rejected.unchanged(&path).1);
        rejected.forget(&path);
        assert!(rejected.is_empty());

        // A pass forgets what it did not list.
        let other = dir.path().join("y.ring");
        std::fs::write(&other, b"junk").unwrap();
        rejected.remember(path.clone(), rejected.unchanged(&path).0.unwrap());
        rejected.remember(other.clone(), rejected.unchanged(&other).0.unwrap());
        rejected.begin_pass();
        rejected.listed(&path);
        rejected.end_pass();
        assert!(rejected.unchanged(&path).1 && rejected.len() == 1);
    }
}
