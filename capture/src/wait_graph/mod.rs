//! Who holds what: the wait graph of the threads in D — each lock, its holder, its waiters — from the
//! Who holds what: the wait graph of the threads in D — each lock, its holder, its waiters — from the
//! kernel's own records where it keeps them, and the running holder named from samples where it does not.
//!
//! Map:
//! - this module: the graph as data ([`WaitGraph`], [`LockNode`], [`Holder`], [`Waiter`]; incident.json's
//!   `wait_graph`) and [`build`], which is pure: the threads of one process (a snapshot), the blocker records
//!   of the host's tasks ([`crate::blockers`]) or why there are none, and a [`Lookup`] for what lies outside
//!   the process (other processes' threads, file paths, kernel symbols) → locks grouped by identity, their
//!   holders by the kernel's owner word, chains (holder → what the holder waits for) and cycles (deadlocks).
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
//! ([`crate::site::lock_class`]), and for the mmap_lock its owner word is read all the same (the records carry
//! every mm's mmap_lock words).

pub mod explain;
pub mod holders;
pub mod identity;
pub mod live;
pub mod render;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::blockers::{BlockerRecord, BlockerType, OwnerWord};
use crate::site::{self, base_name};
use crate::snapshot::{SyscallInfo, ThreadSnapshot};

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

/// What [`build`] needs beyond the process's own threads.
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
    fn symbol(&mut self, address: u64) -> Option<identity::SymbolHit>;
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
    fn symbol(&mut self, _: u64) -> Option<identity::SymbolHit> {
        None
    }
}

/// The kernel's records for [`build`], or why there are none.
#[derive(Debug, Clone, Copy)]
pub enum Records<'a> {
    Read(&'a [BlockerRecord]),
    Missing(&'a str),
}

/// How a lock is told apart before it is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    /// A kernel address (blocker record, or a known mmap_lock address).
    Addr(u64),
    /// The mmap_lock of a process, address unknown (no records).
    Mmap(i32),
    /// A VMA lock of a process (the stack says so; the kernel keeps no record of it).
    Vma(i32),
    /// An NVIDIA RM lock of the host, by its label.
    Rm(&'static str),
}

/// One thread waiting, before grouping.
struct Wait {
    key: Key,
    kind: LockKind,
    mode: Option<Mode>,
    by: &'static str,
}

/// A thread the graph knows: its process, its snapshot, its record.
struct Known {
    pid: i32,
    t: ThreadSnapshot,
    record: Option<BlockerRecord>,
}

/// Calls that change the address space: they wait for (and take) the mmap_lock for writing.
const MM_WRITERS: &[&str] = &[
    "mmap",
    "munmap",
    "mremap",
    "mprotect",
    "pkey_mprotect",
    "brk",
    "mlock",
    "mlock2",
    "munlock",
    "mlockall",
    "munlockall",
    "remap_file_pages",
    "mbind",
    "shmat",
    "shmdt",
];

/// The frames of a VMA write-lock wait (mprotect/munmap waiting for a fault on that VMA to end).
const VMA_LOCK_WAITS: &[&str] = &[
    "__vma_start_write",
    "vma_start_write",
    "vma_start_write_killable",
];

/// Functions that are the lock itself, not who takes it (skipped when naming the taker).
const LOCK_PRIMITIVES: &[&str] = &[
    "mutex_lock",
    "mutex_lock_nested",
    "mutex_lock_killable",
    "mutex_lock_interruptible",
    "__mutex_lock",
    "__mutex_lock_slowpath",
    "__mutex_lock_killable_slowpath",
    "__mutex_lock_interruptible_slowpath",
    "mutex_lock_io",
    "down",
    "down_killable",
    "down_interruptible",
    "down_timeout",
    "__down",
    "__down_common",
    "___down_common",
    "__down_killable",
    "__down_interruptible",
    "__down_timeout",
    "down_read",
    "down_write",
    "down_read_killable",
    "down_write_killable",
    "down_read_interruptible",
    "rwsem_down_read_slowpath",
    "rwsem_down_write_slowpath",
    "__down_read",
    "__down_write",
    "__down_read_common",
    "__down_write_common",
    "ww_mutex_lock",
    "ww_mutex_lock_interruptible",
    "__ww_mutex_lock",
    "__ww_mutex_lock_slowpath",
    "os_acquire_mutex",
    "os_acquire_semaphore",
    "os_acquire_rwlock_read",
    "os_acquire_rwlock_write",
];

/// The function that takes the lock: the first frame that is neither the scheduler nor a lock primitive.
pub fn taken_in(t: &ThreadSnapshot) -> Option<String> {
    t.stack
        .iter()
        .map(|f| (base_name(&f.function), f.module.as_deref()))
        .find(|(n, _)| !site::rules::SCHEDULER_FRAMES.contains(n) && !LOCK_PRIMITIVES.contains(n))
        .map(|(n, module)| match module {
            Some(m) => format!("{n} [{m}]"),
            None => n.to_string(),
        })
}

/// The syscall name `t` is blocked in, if any.
pub(crate) fn syscall_name(t: &ThreadSnapshot) -> Option<&str> {
    match &t.syscall {
        Some(SyscallInfo::Blocked { nr, name, .. }) if *nr >= 0 => name.as_deref(),
        _ => None,
    }
}

fn in_page_fault(t: &ThreadSnapshot) -> bool {
    matches!(&t.syscall, Some(SyscallInfo::Blocked { nr, .. }) if *nr < 0)
        || t.stack.iter().any(|f| {
            matches!(
                base_name(&f.function),
                "exc_page_fault"
                    | "do_user_addr_fault"
                    | "handle_mm_fault"
                    | "do_page_fault"
                    | "lock_mm_and_find_vma"
                    | "asm_exc_page_fault"
                    | "__do_page_fault"
            )
        })
}

/// Where a waiter waits, in words: `mmap`, `page fault`, `write on /mnt/x`, `ioctl UVM_MIGRATE on /dev/…`.
pub fn call_words(t: &ThreadSnapshot) -> String {
    if let Some(ioctl) = &t.ioctl {
        let name = ioctl.name.clone().unwrap_or_else(|| ioctl.request.clone());
        return match &ioctl.fd_target {
            Some(target) => format!("ioctl {name} on {target}"),
            None => format!("ioctl {name}"),
        };
    }
    if let Some(name) = syscall_name(t) {
        return match t.syscall_files.iter().find_map(|f| f.target.as_deref()) {
            Some(target) => format!("{name} on {target}"),
            None => name.to_string(),
        };
    }
    if in_page_fault(t) {
        return "page fault".to_string();
    }
    t.site
        .clone()
        .or_else(|| t.wchan.clone())
        .unwrap_or_else(|| "the kernel".to_string())
}

/// The first frame past the scheduler: a VMA write-lock wait?
fn waits_for_vma(t: &ThreadSnapshot) -> bool {
    t.stack
        .iter()
        .map(|f| base_name(&f.function))
        .find(|n| !site::rules::SCHEDULER_FRAMES.contains(n))
        .is_some_and(|n| VMA_LOCK_WAITS.contains(&n))
        || t.wchan
            .as_deref()
            .is_some_and(|w| VMA_LOCK_WAITS.contains(&w))
}

/// The mode an mmap_lock waiter wants, from its call: address-space changers write, faults read.
fn mmap_mode(t: &ThreadSnapshot) -> Option<Mode> {
    match syscall_name(t) {
        Some(name) if MM_WRITERS.contains(&name) => Some(Mode::Write),
        Some(_) => None,
        None if in_page_fault(t) => Some(Mode::Read),
        None => None,
    }
}

/// What `t` (in D) waits for, if it waits for a lock: its record first, then its stack.
fn wait_of(pid: i32, t: &ThreadSnapshot, record: Option<&BlockerRecord>) -> Option<Wait> {
    if let Some((lock, kind)) = record.and_then(|r| r.blocked_on()) {
        let (kind, mode) = match kind {
            BlockerType::Mutex => (LockKind::Mutex, None),
            BlockerType::Semaphore => (LockKind::Semaphore, None),
            BlockerType::RwsemReader => (LockKind::Rwsem, Some(Mode::Read)),
            BlockerType::RwsemWriter => (LockKind::Rwsem, Some(Mode::Write)),
        };
        return Some(Wait {
            key: Key::Addr(lock),
            kind,
            mode,
            by: "kernel record",
        });
    }
    if waits_for_vma(t) {
        return Some(Wait {
            key: Key::Vma(pid),
            kind: LockKind::VmaLock,
            mode: Some(Mode::Write),
            by: "stack",
        });
    }
    if site::lock_class(&t.stack, t.wchan.as_deref()) == Some("mmap_lock") {
        let key = match record.filter(|r| r.mmap_lock != 0) {
            Some(r) => Key::Addr(r.mmap_lock),
            None => Key::Mmap(pid),
        };
        return Some(Wait {
            key,
            kind: LockKind::Rwsem,
            mode: mmap_mode(t),
            by: "stack",
        });
    }
    if let Some(lock) = crate::rm_lock::rm_lock_waited(t) {
        return Some(Wait {
            key: Key::Rm(lock.label()),
            kind: LockKind::RmLock,
            mode: None,
            by: "stack",
        });
    }
    None
}

fn waiter_of(k: &Known, w: &Wait, lookup: &mut dyn Lookup) -> Waiter {
    Waiter {
        tid: k.t.tid,
        pid: k.pid,
        comm: k.t.comm.clone(),
        mode: w.mode,
        state: k.t.state.clone(),
        call: call_words(&k.t),
        by: w.by.to_string(),
        waited_s: lookup.last_ran_s_ago(k.pid, k.t.tid),
    }
}

/// What a thread is doing, in words, from one snapshot (samples say more: [`holders`]).
pub fn doing_words(t: &ThreadSnapshot) -> String {
    let call = call_words(t);
    let site = t
        .site
        .clone()
        .or_else(|| site::classify(&t.stack, t.wchan.as_deref(), syscall_name(t)));
    match t.state.as_str() {
        "D" => match &site {
            Some(site) if !call.starts_with("page fault") && !site.starts_with(&call) => {
                format!("in D in {call}: {site}")
            }
            Some(site) => format!("in D: {site}"),
            None => format!("in D in {call}"),
        },
        "R" if matches!(t.syscall, Some(SyscallInfo::Running { .. })) => "running".to_string(),
        "R" => format!("runnable in {call}"),
        "S" => format!("asleep (S) in {call}"),
        "" => "gone".to_string(),
        other => format!("in state {other} in {call}"),
    }
}

/// Builds the graph for process `pid` from its threads (a snapshot with stacks of its D threads) and the
/// records. Holders are named from the records and stacks only; [`holders`] adds what samples show.
pub fn build(
    pid: i32,
    threads: &[ThreadSnapshot],
    records: Records<'_>,
    lookup: &mut dyn Lookup,
) -> WaitGraph {
    let by_tid: BTreeMap<i32, &BlockerRecord> = match records {
        Records::Read(r) => r.iter().map(|r| (r.tid, r)).collect(),
        Records::Missing(_) => BTreeMap::new(),
    };
    let by_task: BTreeMap<u64, &BlockerRecord> = match records {
        Records::Read(r) => r.iter().map(|r| (r.task, r)).collect(),
        Records::Missing(_) => BTreeMap::new(),
    };
    let field = match records {
        Records::Read(r) => r.first().is_none_or(|r| r.blocker_field()),
        Records::Missing(_) => false,
    };
    let mut graph = WaitGraph {
        records: match records {
            Records::Read(r) if field => format!(
                "kernel blocker records (task_struct::blocker) of {} tasks",
                r.len()
            ),
            Records::Read(r) => format!(
                "no task_struct::blocker on this kernel (CONFIG_DETECT_HUNG_TASK_BLOCKER, Linux 6.16+){}: \
                 the stacks and samples of {} tasks alone",
                if r.first().is_some_and(|r| r.mm_owner == 0 && r.mm_count == 0) {
                    " and no lock words read"
                } else {
                    ""
                },
                r.len()
            ),
            Records::Missing(why) => format!("no kernel records ({why}): the stacks and samples alone"),
        },
        kernel_records: field,
        ..WaitGraph::default()
    };
    let mut known: BTreeMap<i32, Known> = threads
        .iter()
        .filter(|t| !t.gone)
        .map(|t| {
            (
                t.tid,
                Known {
                    pid,
                    t: t.clone(),
                    record: by_tid.get(&t.tid).map(|r| **r),
                },
            )
        })
        .collect();
    // Waits: the process's D threads, then everyone else the records show blocked on the same locks.
    let mut waits: BTreeMap<i32, Wait> = BTreeMap::new();
    for k in known.values().filter(|k| k.t.state == "D") {
        if let Some(w) = wait_of(pid, &k.t, k.record.as_ref()) {
            waits.insert(k.t.tid, w);
        }
    }
    let mut order: Vec<Key> = Vec::new();
    for w in waits.values() {
        if !order.contains(&w.key) {
            order.push(w.key);
        }
    }
    let mut next = 0;
    while next < order.len() && order.len() <= MAX_LOCKS {
        let key = order[next];
        next += 1;
        // Host-wide waiters of an address the records show.
        if let Key::Addr(lock) = key {
            let others: Vec<&BlockerRecord> = by_tid
                .values()
                .filter(|r| {
                    r.blocked_on().map(|(l, _)| l) == Some(lock) && !known.contains_key(&r.tid)
                })
                .copied()
                .collect();
            for r in others {
                if let Some(t) = lookup.thread(r.tgid, r.tid) {
                    known.insert(
                        r.tid,
                        Known {
                            pid: r.tgid,
                            t,
                            record: Some(*r),
                        },
                    );
                }
            }
            for (&tid, k) in known.iter() {
                if waits.contains_key(&tid)
                    || k.record.and_then(|r| r.blocked_on()).map(|(l, _)| l) != Some(lock)
                {
                    continue;
                }
                if let Some(w) = wait_of(k.pid, &k.t, k.record.as_ref()) {
                    waits.insert(tid, w);
                }
            }
        }
        // The holder, and what the holder waits for itself.
        for (tid, hpid) in holder_tasks(key, &waits, &known, &by_task, &by_tid) {
            if let std::collections::btree_map::Entry::Vacant(slot) = known.entry(tid) {
                let Some(t) = lookup.thread(hpid, tid) else {
                    continue;
                };
                slot.insert(Known {
                    pid: hpid,
                    t,
                    record: by_tid.get(&tid).map(|r| **r),
                });
            }
            let k = &known[&tid];
            if k.t.state == "D" && !waits.contains_key(&tid) {
                if let Some(w) = wait_of(k.pid, &k.t, k.record.as_ref()) {
                    if !order.contains(&w.key) {
                        order.push(w.key);
                    }
                    waits.insert(tid, w);
                }
            }
        }
    }
    let ids: BTreeMap<Key, String> = order
        .iter()
        .enumerate()
        .map(|(i, k)| (*k, format!("L{}", i + 1)))
        .collect();
    for key in order.iter().take(MAX_LOCKS) {
        graph
            .locks
            .push(node(*key, &ids, &waits, &known, &by_task, &by_tid, lookup));
    }
    if order.len() > MAX_LOCKS {
        graph.notes.push(format!(
            "more than {MAX_LOCKS} locks: the rest are not listed"
        ));
    }
    link_chains(&mut graph);
    graph
}

/// The holders a key's records or stacks name, as (tid, pid), before they are described.
fn holder_tasks(
    key: Key,
    waits: &BTreeMap<i32, Wait>,
    known: &BTreeMap<i32, Known>,
    by_task: &BTreeMap<u64, &BlockerRecord>,
    by_tid: &BTreeMap<i32, &BlockerRecord>,
) -> Vec<(i32, i32)> {
    match key {
        Key::Addr(lock) => match owner_of(lock, waits, known, by_tid).0 {
            OwnerWord::Task(task) | OwnerWord::Readers { last: task, .. } => by_task
                .get(&task)
                .map(|r| vec![(r.tid, r.tgid)])
                .unwrap_or_default(),
            OwnerWord::None => Vec::new(),
        },
        Key::Vma(pid) | Key::Mmap(pid) => known
            .values()
            .filter(|k| k.pid == pid && k.t.state == "D" && !waits.contains_key(&k.t.tid))
            .filter(|k| site::holds_fault_lock(&k.t.stack, k.t.wchan.as_deref()))
            .map(|k| (k.t.tid, k.pid))
            .collect(),
        Key::Rm(label) => known
            .values()
            .filter(|k| !waits.contains_key(&k.t.tid))
            .filter(|k| rm_lock_of(label).is_some_and(|lock| crate::rm_lock::may_hold(&k.t, lock)))
            .map(|k| (k.t.tid, k.pid))
            .collect(),
    }
}

/// The owner word of the lock at `lock`, with its type: from a waiter's blocker record, else (a killable
/// mmap_lock wait leaves no record) from the mmap_lock words of the mm it is.
fn owner_of(
    lock: u64,
    waits: &BTreeMap<i32, Wait>,
    known: &BTreeMap<i32, Known>,
    by_tid: &BTreeMap<i32, &BlockerRecord>,
) -> (OwnerWord, Option<BlockerType>, Option<u64>) {
    let waiter_record = waits
        .iter()
        .filter(|(_, w)| w.key == Key::Addr(lock))
        .filter_map(|(tid, _)| known.get(tid).and_then(|k| k.record))
        .find(|r| r.blocked_on().map(|(l, _)| l) == Some(lock));
    if let Some(r) = waiter_record {
        let kind = r.blocked_on().map(|(_, k)| k);
        let readers = match r.owner_task() {
            OwnerWord::Readers { count, .. } => Some(count),
            _ => None,
        };
        return (r.owner_task(), kind, readers);
    }
    match by_tid.values().find(|r| r.mmap_lock == lock) {
        Some(r) if r.mm_owner != 0 || r.mm_count != 0 => {
            let owner = r.mmap_lock_owner();
            let readers = match owner {
                OwnerWord::Readers { count, .. } => Some(count),
                _ => None,
            };
            (owner, Some(BlockerType::RwsemWriter), readers)
        }
        _ => (OwnerWord::None, None, None),
    }
}

#[allow(clippy::too_many_arguments)]
fn node(
    key: Key,
    ids: &BTreeMap<Key, String>,
    waits: &BTreeMap<i32, Wait>,
    known: &BTreeMap<i32, Known>,
    by_task: &BTreeMap<u64, &BlockerRecord>,
    by_tid: &BTreeMap<i32, &BlockerRecord>,
    lookup: &mut dyn Lookup,
) -> LockNode {
    let mine: Vec<(&Known, &Wait)> = waits
        .iter()
        .filter(|(_, w)| w.key == key)
        .filter_map(|(tid, w)| Some((known.get(tid)?, w)))
        .collect();
    let kind = mine
        .first()
        .map(|(_, w)| w.kind)
        .unwrap_or(LockKind::Unknown);
    let mut waiters: Vec<Waiter> = mine.iter().map(|(k, w)| waiter_of(k, w, lookup)).collect();
    // Those waiting longest first.
    waiters.sort_by(|a, b| {
        b.waited_s
            .unwrap_or(0.0)
            .total_cmp(&a.waited_s.unwrap_or(0.0))
            .then(a.tid.cmp(&b.tid))
    });
    let more_waiters = waiters.len().saturating_sub(MAX_WAITERS);
    waiters.truncate(MAX_WAITERS);
    let pids: Vec<i32> = {
        let mut p: Vec<i32> = mine.iter().map(|(k, _)| k.pid).collect();
        p.sort_unstable();
        p.dedup();
        p
    };
    let mut identity = identity::identify(
        key_parts(key),
        mine.first().and_then(|(k, _)| k.record),
        by_tid,
        lookup,
        &pids,
    );
    if identity.taken_in.is_none() {
        identity.taken_in = mine.iter().find_map(|(k, _)| taken_in(&k.t));
    }
    // A driver lock the stack names (the RM API lock, a UVM lock…) is that lock, wherever it lies.
    if matches!(
        identity.class.as_str(),
        "unknown" | "kernel static" | "module static"
    ) {
        if let Some(label) = mine.iter().find_map(|(k, _)| nvidia_lock_label(&k.t)) {
            identity.class = label.to_string();
        }
    }
    let mut node = LockNode {
        id: ids[&key].clone(),
        kind,
        address: match key {
            Key::Addr(a) => Some(format!("{a:#x}")),
            _ => None,
        },
        name: identity::name(&identity, kind),
        identity,
        holders: Vec::new(),
        holder_unknown: None,
        readers: None,
        waiters,
        more_waiters,
    };
    let describe = |tid: i32, evidence: Evidence, mode: Option<Mode>| -> Option<Holder> {
        let k = known.get(&tid)?;
        Some(Holder {
            tid,
            pid: k.pid,
            comm: k.t.comm.clone(),
            mode,
            evidence,
            state: k.t.state.clone(),
            doing: doing_words(&k.t),
            waits_for: waits.get(&tid).and_then(|w| ids.get(&w.key).cloned()),
            inside_samples: None,
            call: (k.t.state == "D").then(|| call_words(&k.t)),
            last_ran_s_ago: None,
            system_s: None,
        })
    };
    match key {
        Key::Addr(lock) => {
            let (owner, btype, readers) = owner_of(lock, waits, known, by_tid);
            node.readers = readers;
            let (task, evidence, mode) = match (owner, btype) {
                (OwnerWord::Task(t), Some(BlockerType::Mutex)) => (t, Evidence::Owner, None),
                (OwnerWord::Task(t), Some(BlockerType::Semaphore)) => {
                    (t, Evidence::LastHolder, None)
                }
                (OwnerWord::Task(t), _) => (t, Evidence::Writer, Some(Mode::Write)),
                (OwnerWord::Readers { last, .. }, _) => {
                    (last, Evidence::LastReader, Some(Mode::Read))
                }
                (OwnerWord::None, Some(BlockerType::Semaphore))
                    if mine
                        .iter()
                        .any(|(k, _)| k.record.is_some_and(|r| r.no_semaphore_holder_field())) =>
                {
                    node.holder_unknown = Some(
                        "a semaphore has no owner, and this kernel keeps no last holder"
                            .to_string(),
                    );
                    return node;
                }
                (OwnerWord::None, Some(BlockerType::Semaphore)) => {
                    node.holder_unknown = Some(
                        "a semaphore has no owner, and its last holder released it (or none was recorded)"
                            .to_string(),
                    );
                    return node;
                }
                (OwnerWord::None, Some(_)) => {
                    node.holder_unknown = Some(
                        if mine
                            .iter()
                            .any(|(k, _)| k.record.is_some_and(|r| r.lock_unreadable()))
                        {
                            "the lock's words could not be read".to_string()
                        } else {
                            "no owner recorded in the lock (released as it was read, or held by readers the kernel does not name)".to_string()
                        },
                    );
                    return node;
                }
                (OwnerWord::None, None) => {
                    node.holder_unknown = Some("no record of this lock's owner".to_string());
                    return node;
                }
            };
            match by_task.get(&task).and_then(|r| describe(r.tid, evidence, mode)) {
                Some(h) => node.holders.push(h),
                None => {
                    node.holder_unknown = Some(match evidence {
                        Evidence::LastReader => format!(
                            "held for reading{}; its last reader is no longer a task (it exited)",
                            readers.map(|n| format!(" by {n}")).unwrap_or_default()
                        ),
                        _ => "its owner is no longer a task (it exited, or the lock was just handed over)".to_string(),
                    })
                }
            }
        }
        Key::Mmap(_) | Key::Vma(_) | Key::Rm(_) => {
            for (tid, _) in holder_tasks(key, waits, known, by_task, by_tid) {
                let mode = match key {
                    Key::Vma(_) | Key::Mmap(_) => Some(Mode::Read),
                    _ => None,
                };
                if let Some(h) = describe(tid, Evidence::Stack, mode) {
                    node.holders.push(h);
                }
            }
            if node.holders.is_empty() {
                node.holder_unknown = Some(match key {
                    Key::Rm(_) => "no other thread inside an NVIDIA RM call".to_string(),
                    _ => "no thread of the process in D holds it by its stack".to_string(),
                });
            }
        }
    }
    node
}

/// What [`identity::identify`] needs of a key.
fn key_parts(key: Key) -> identity::KeyParts {
    match key {
        Key::Addr(a) => identity::KeyParts::Address(a),
        Key::Mmap(pid) => identity::KeyParts::MmapOf(pid),
        Key::Vma(pid) => identity::KeyParts::VmaOf(pid),
        Key::Rm(label) => identity::KeyParts::Named(label),
    }
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

/// The NVIDIA driver lock `t`'s stack waits for, by its label (`RM API lock`, `UVM global lock`, …).
fn nvidia_lock_label(t: &ThreadSnapshot) -> Option<&'static str> {
    use site::nvidia::NvidiaWait as W;
    match site::nvidia::nvidia_site(&t.stack)? {
        w @ (W::RmApiLock
        | W::RmApiLockMode { .. }
        | W::GpuLock
        | W::RmSemaphore
        | W::UvmGlobalLock
        | W::UvmPageTreeLock
        | W::UvmVaSpaceLock
        | W::UvmLock
        | W::ModesetPmSemaphore
        | W::ModesetGlobalLock) => Some(w.label()),
        _ => None,
    }
}

/// The RM lock a [`Key::Rm`] label names.
fn rm_lock_of(label: &str) -> Option<site::nvidia::NvidiaWait> {
    [
        site::nvidia::NvidiaWait::RmApiLock,
        site::nvidia::NvidiaWait::GpuLock,
    ]
    .into_iter()
    .find(|l| l.label() == label)
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
