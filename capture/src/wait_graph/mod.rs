//! Who holds what: the wait graph of the threads in D — each lock, its holder, its waiters — from the
//! kernel's own records where it keeps them, and the running holder named from samples where it does not.
//!
//! Map:
//! - this module: the graph as data ([`WaitGraph`], [`LockNode`], [`Holder`], [`Waiter`]; incident.json's
//!   `wait_graph`), its chains and cycles ([`link_chains`]) and the sites it refines ([`refine_with_graph`]).
//! - [`build`]: [`build::build`], which is pure: the threads of one process (a snapshot), the blocker records
//!   of the host's tasks ([`crate::blockers`]) or why there are none, and a [`Lookup`] for what lies outside
//!   the process (other processes' threads, file paths, kernel symbols) → locks grouped by identity, their
//!   holders by the kernel's owner word, chains (holder → what the holder waits for) and cycles (deadlocks).
//! - `waits`: what one thread waits for (the record first, then its stack) and is doing, in words.
//! - [`identity`]: what a lock is (the mmap_lock of which process, an inode's lock and which file, a static
//!   lock of the kernel or a module by `/proc/kallsyms`), the symbol tables' pure parsers.
//! - [`holders`]: the fallback for locks no record names a holder of (rwsem readers, kernels without
//!   `task_struct::blocker`, killable waits, RM locks): candidate threads sampled several times during the
//!   capture and judged ([`holders::judge`], pure) — the one that stayed inside a lock-taking call the whole
//!   time is named; a waiter is never a candidate.
//! - [`live`]: the I/O around it for a live (or recorded) proc tree: [`live::capture`] reads the records, the
//!   snapshot, the lookups and the samples; used by the agent's `wait_graph` stage and `capture --pid`.
//! - [`explain`]: the same graph from a pasted kernel log's "blocked on … likely owned by task …" lines.
//! - [`render`]: the one-line sentence a driver engineer reads first ([`render::sentence`]), the Markdown
//!   section and the plain text.
//!
//! Where the edges come from, in order of trust: the kernel's owner word (a mutex's owner, an rwsem's
//! writer, a semaphore's last holder: [`Evidence::Owner`], [`Evidence::Writer`], [`Evidence::LastHolder`]);
//! an rwsem's last reader (the kernel's own "likely", [`Evidence::LastReader`]), confirmed or corrected by
//! samples; the stack (a thread in D inside a page fault holds its VMA's lock, a thread inside an RM call may
//! hold the RM lock: [`Evidence::Stack`]); samples alone ([`Evidence::Sampled`]).
//!
//! The kernel records a blocker only for TASK_UNINTERRUPTIBLE sleeps: a killable wait (mmap, munmap and page
//! faults wait for the mmap_lock killably) has no record. Such a waiter's lock is known from its stack
//! ([`crate::site::mm_lock::lock_class`]), and for the mmap_lock its owner word is read all the same (the records carry
//! every mm's mmap_lock words).

pub mod build;
pub mod explain;
pub mod holders;
pub mod identity;
pub mod live;
pub mod render;
#[cfg(test)]
mod tests;
mod waits;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::blockers::BlockerRecord;
use crate::site;
use crate::snapshot::ThreadSnapshot;

/// At most this many waiters are listed per lock (the rest are counted).
pub const MAX_WAITERS: usize = 64;
/// At most this many locks are kept.
pub const MAX_LOCKS: usize = 64;
/// Chains are followed at most this deep.
pub const MAX_CHAIN: usize = 16;

/// Who holds what, for the threads in D of one process and everything they lead to.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WaitGraph {
    /// Where the edges come from: "kernel blocker records (task_struct::blocker) of N tasks", or why there
    /// were none ("no task_struct::blocker on this kernel", "the blocker iterator is unavailable: …").
    pub records: String,
    /// Whether the kernel's records were read (false: the stack and samples alone).
    pub kernel_records: bool,
    /// Every lock some thread waits for, the incident's own first.
    pub locks: Vec<LockNode>,
    /// Wait chains: lock ids, each lock's holder waiting for the next (`["L1", "L2"]`); the longest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chains: Vec<Vec<String>>,
    /// Cycles of the chains: a deadlock (each lock's holder waits for the next, the last for the first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deadlocks: Vec<Vec<String>>,
    /// How the candidate holders were sampled, when they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<Sampling>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// How the candidate holders were sampled.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Sampling {
    pub samples: usize,
    /// From the first sample to the last.
    pub window_s: f64,
    /// Threads sampled.
    pub candidates: usize,
}

/// The kind of lock, as the kernel's blocker type (or the stack) says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LockKind {
    Mutex,
    Semaphore,
    Rwsem,
    /// An NVIDIA RM lock (rwlock or semaphore inside the driver), known from the stack.
    RmLock,
    /// A VMA lock (per-VMA lock of the page-fault path), known from the stack.
    VmaLock,
    Unknown,
}

impl LockKind {
    pub fn word(self) -> &'static str {
        match self {
            LockKind::Mutex => "mutex",
            LockKind::Semaphore => "semaphore",
            LockKind::Rwsem => "rw-semaphore",
            LockKind::RmLock => "RM lock",
            LockKind::VmaLock => "VMA lock",
            LockKind::Unknown => "lock",
        }
    }

    /// "a mutex", "an rw-semaphore", "an RM lock".
    pub fn with_article(self) -> String {
        match self {
            LockKind::Rwsem | LockKind::RmLock => format!("an {}", self.word()),
            _ => format!("a {}", self.word()),
        }
    }
}

/// How a lock is held or wanted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Read,
    Write,
}

impl Mode {
    /// "for reading" / "for writing".
    pub fn words(self) -> &'static str {
        match self {
            Mode::Read => "for reading",
            Mode::Write => "for writing",
        }
    }
}

/// What a lock is.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LockIdentity {
    /// `mmap_lock`, `i_rwsem`, `invalidate_lock`, `s_umount`, `f_pos_lock`, `vma_lock`, `RM API lock`,
    /// `GPU lock`, `kernel static`, `module static`, or `unknown`.
    pub class: String,
    /// The process whose lock it is (mmap_lock, VMA lock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// `major:minor` of the inode's or superblock's device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ino: Option<u64>,
    /// The file, when a thread of the graph has it open (its fd link).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// A static lock's symbol (`rtnl_mutex`, `g_uvm_global+0x10`), from /proc/kallsyms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbol: Option<String>,
    /// The module a static lock lies in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// The function that takes it: the first frame past the lock primitives in a waiter's stack.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken_in: Option<String>,
}

/// One lock, its holder and its waiters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockNode {
    /// `L1`, `L2`, …: the graph's own names, for chains.
    pub id: String,
    pub kind: LockKind,
    /// The lock's kernel address (`0xffff…`), when a record gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// In words: "the mmap_lock of pid 1059 (`uvmlock`)" (not escaped: renderers escape).
    pub name: String,
    pub identity: LockIdentity,
    /// Who holds it, best evidence first (rwsem readers and RM locks may name several).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<Holder>,
    /// Why no holder is named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_unknown: Option<String>,
    /// Readers holding it, by the rwsem's count (when the kernel's words were read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readers: Option<u64>,
    pub waiters: Vec<Waiter>,
    /// Waiters not listed (past [`MAX_WAITERS`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_waiters: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Why a holder is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Evidence {
    /// The mutex's owner field.
    Owner,
    /// The rwsem's owner field with the writer bit in its count.
    Writer,
    /// The rwsem is reader-owned and this task was the last reader to take it (the kernel's "likely").
    LastReader,
    /// The semaphore's last holder (the kernel's "likely").
    LastHolder,
    /// The stack: inside a page fault (holds its VMA's lock), inside an RM call.
    Stack,
    /// Sampled: inside a lock-taking call in every sample of the capture.
    Sampled,
}

impl Evidence {
    /// How sure the graph is, in words for the report.
    pub fn words(self) -> &'static str {
        match self {
            Evidence::Owner => "the kernel's owner field",
            Evidence::Writer => "the kernel's owner field (writer)",
            Evidence::LastReader => "the kernel's last reader (its \"likely\")",
            Evidence::LastHolder => "the semaphore's last holder (the kernel's \"likely\")",
            Evidence::Stack => "its stack",
            Evidence::Sampled => "samples: inside a lock-taking call in every one",
        }
    }
}

/// A thread that holds a lock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Holder {
    pub tid: i32,
    pub pid: i32,
    pub comm: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    pub evidence: Evidence,
    /// Its state letter when read.
    pub state: String,
    /// What it is doing, in words: "running in the kernel in `mmap` (5 of 5 samples, 0.8 s of system time)",
    /// "in D: page fault → filesystem freeze (percpu_rwsem_wait)".
    pub doing: String,
    /// The lock it waits for itself (a chain), by id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits_for: Option<String>,
    /// Samples that saw it inside the same call, of all taken (fallback and confirmation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inside_samples: Option<(usize, usize)>,
    /// The call it is inside (`mmap`, `ioctl`, `page fault`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// Seconds since it last ran (a holder asleep in D), or of CPU used in the kernel over the samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_ran_s_ago: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_s: Option<f64>,
}

/// A thread that waits for a lock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Waiter {
    pub tid: i32,
    pub pid: i32,
    pub comm: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    pub state: String,
    /// Where it waits: `mmap`, `page fault`, `write on /mnt/x`.
    pub call: String,
    /// How it is known to wait for this lock: `kernel record`, `stack`.
    pub by: String,
    /// Seconds since it last ran (≈ how long it has waited).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waited_s: Option<f64>,
}

/// An address placed by /proc/kallsyms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolHit {
    /// `rtnl_mutex` or `rtnl_mutex+0x10`; None when only the region is known.
    pub symbol: Option<String>,
    pub module: Option<String>,
}

/// What [`build::build`] needs beyond the process's own threads.
pub trait Lookup {
    /// A snapshot of a thread of another process (stat, wchan, syscall, stack; cannot hang).
    fn thread(&mut self, pid: i32, tid: i32) -> Option<ThreadSnapshot>;
    /// The comm of a process.
    fn comm(&mut self, pid: i32) -> Option<String>;
    /// Seconds since the thread last ran (`se.exec_start` against ours).
    fn last_ran_s_ago(&mut self, pid: i32, tid: i32) -> Option<f64>;
    /// The path of an open file on `dev`:`ino` held by one of `pids` (fdinfo + fd link).
    fn path_of(&mut self, pids: &[i32], dev: (u32, u32), ino: u64) -> Option<String>;
    /// The static symbol an address lies in (/proc/kallsyms), and its module.
    fn symbol(&mut self, address: u64) -> Option<SymbolHit>;
}

/// A lookup with nothing outside the process (a recorded tree without records; tests).
pub struct NoLookup;

impl Lookup for NoLookup {
    fn thread(&mut self, _: i32, _: i32) -> Option<ThreadSnapshot> {
        None
    }
    fn comm(&mut self, _: i32) -> Option<String> {
        None
    }
    fn last_ran_s_ago(&mut self, _: i32, _: i32) -> Option<f64> {
        None
    }
    fn path_of(&mut self, _: &[i32], _: (u32, u32), _: u64) -> Option<String> {
        None
    }
    fn symbol(&mut self, _: u64) -> Option<SymbolHit> {
        None
    }
}

/// The kernel's records for [`build::build`], or why there are none.
#[derive(Debug, Clone, Copy)]
pub enum Records<'a> {
    Read(&'a [BlockerRecord]),
    Missing(&'a str),
}

/// Chains (each lock's holder waiting for the next) and cycles, from the holders' `waits_for`; then the
/// locks renumbered in reading order: each chain from its start (the longest first), the cycles, the rest.
pub fn link_chains(graph: &mut WaitGraph) {
    find_chains(graph);
    let mut order: Vec<String> = Vec::new();
    for id in graph.chains.iter().chain(&graph.deadlocks).flatten() {
        if !order.contains(id) {
            order.push(id.clone());
        }
    }
    for l in &graph.locks {
        if !order.contains(&l.id) {
            order.push(l.id.clone());
        }
    }
    let renamed: BTreeMap<String, String> = order
        .iter()
        .enumerate()
        .map(|(i, id)| (id.clone(), format!("L{}", i + 1)))
        .collect();
    if renamed.iter().all(|(old, new)| old == new) {
        return;
    }
    for l in graph.locks.iter_mut() {
        l.id = renamed[&l.id].clone();
        for h in l.holders.iter_mut() {
            if let Some(w) = h.waits_for.as_mut() {
                if let Some(n) = renamed.get(w.as_str()) {
                    *w = n.clone();
                }
            }
        }
    }
    graph.locks.sort_by_key(|l| lock_number(&l.id));
    find_chains(graph);
}

fn find_chains(graph: &mut WaitGraph) {
    graph.chains.clear();
    graph.deadlocks.clear();
    let next: BTreeMap<&str, &str> = graph
        .locks
        .iter()
        .filter_map(|l| {
            let h = l.holders.first()?;
            Some((l.id.as_str(), h.waits_for.as_deref()?))
        })
        .collect();
    let pointed: Vec<&str> = next.values().copied().collect();
    let mut chains: Vec<Vec<String>> = Vec::new();
    let mut cycles: Vec<Vec<String>> = Vec::new();
    for l in &graph.locks {
        let start = l.id.as_str();
        if !next.contains_key(start) {
            continue;
        }
        let mut path = vec![start];
        let mut at = start;
        while let Some(&n) = next.get(at) {
            if let Some(i) = path.iter().position(|p| *p == n) {
                let mut cycle: Vec<String> = path[i..].iter().map(|s| s.to_string()).collect();
                // One rotation per cycle: the smallest id first.
                let min = (0..cycle.len())
                    .min_by_key(|&j| lock_number(&cycle[j]))
                    .unwrap_or(0);
                cycle.rotate_left(min);
                if !cycles.contains(&cycle) {
                    cycles.push(cycle);
                }
                break;
            }
            if path.len() >= MAX_CHAIN {
                break;
            }
            path.push(n);
            at = n;
        }
        // A chain starts where nothing points (or is a cycle, listed once above).
        if !pointed.contains(&start) && path.len() > 1 {
            chains.push(path.iter().map(|s| s.to_string()).collect());
        }
    }
    chains.sort_by_key(|c| std::cmp::Reverse(c.len()));
    graph.chains = chains;
    graph.deadlocks = cycles;
}

fn lock_number(id: &str) -> usize {
    id.trim_start_matches('L').parse().unwrap_or(usize::MAX)
}

impl WaitGraph {
    pub fn lock(&self, id: &str) -> Option<&LockNode> {
        self.locks.iter().find(|l| l.id == id)
    }

    /// The lock thread `tid` waits for, if the graph has it as a waiter.
    pub fn lock_waited_by(&self, tid: i32) -> Option<&LockNode> {
        self.locks
            .iter()
            .find(|l| l.waiters.iter().any(|w| w.tid == tid))
    }

    /// Every thread the graph lists as a waiter.
    pub fn waiter_tids(&self) -> Vec<i32> {
        let mut tids: Vec<i32> = self
            .locks
            .iter()
            .flat_map(|l| l.waiters.iter().map(|w| w.tid))
            .collect();
        tids.sort_unstable();
        tids.dedup();
        tids
    }

    /// Every thread named as a holder.
    pub fn holder_tids(&self) -> Vec<i32> {
        let mut tids: Vec<i32> = self
            .locks
            .iter()
            .flat_map(|l| l.holders.iter().map(|h| h.tid))
            .collect();
        tids.sort_unstable();
        tids.dedup();
        tids
    }
}

/// Every thread the wait graph knows from a kernel record to wait for a lock gets that lock in its site
/// ([`site::with_recorded_lock`]).
pub fn refine_with_graph(threads: &mut [ThreadSnapshot], graph: &WaitGraph) {
    for lock in &graph.locks {
        let kind = match lock.kind {
            LockKind::Mutex => "mutex",
            LockKind::Semaphore => "semaphore",
            LockKind::Rwsem => "rwsem",
            _ => continue,
        };
        for w in lock.waiters.iter().filter(|w| w.by == "kernel record") {
            let mode = w.mode.map(|m| match m {
                Mode::Read => "read",
                Mode::Write => "write",
            });
            if let Some(t) = threads.iter_mut().find(|t| t.tid == w.tid) {
                if let Some(site) = &t.site {
                    t.site = Some(site::with_recorded_lock(site, kind, mode, &lock.name));
                }
            }
        }
    }
}
