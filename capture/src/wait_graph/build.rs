//! [`build`]: the graph of one process, pure. Its D threads' waits (`waits`) grouped by lock; each lock
//! in turn followed — the host's other waiters the records show on it, its holder, and what the holder waits for
//! itself (a new lock, followed in turn, at most [`MAX_LOCKS`]) — then each lock described as a [`LockNode`]
//! (waiters, identity, holder by the owner word or by the stack) and the locks chained.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use super::identity;
use super::waits::{
    call_words, doing_words, nvidia_lock_label, rm_lock_of, taken_in, wait_of, waiter_of, Key,
    Known, Wait,
};
use super::{
    link_chains, Evidence, Holder, LockIdentity, LockKind, LockNode, Lookup, Mode, Records,
    WaitGraph, Waiter, MAX_LOCKS, MAX_WAITERS,
};
use crate::blockers::{BlockerRecord, BlockerType, OwnerWord};
use crate::site;
use crate::snapshot::ThreadSnapshot;

/// Builds the graph for process `pid` from its threads (a snapshot with stacks of its D threads) and the
/// records. Holders are named from the records and stacks only; [`super::holders`] adds what samples show.
pub fn build(
    pid: i32,
    threads: &[ThreadSnapshot],
    records: Records<'_>,
    lookup: &mut dyn Lookup,
) -> WaitGraph {
    let field = has_blocker_field(records);
    let mut graph = WaitGraph {
        records: records_words(records, field),
        kernel_records: field,
        ..WaitGraph::default()
    };
    let mut builder = Builder::new(pid, threads, records);
    builder.follow(lookup);
    let ids: BTreeMap<Key, String> = builder
        .order
        .iter()
        .enumerate()
        .map(|(i, k)| (*k, format!("L{}", i + 1)))
        .collect();
    for key in builder.order.iter().take(MAX_LOCKS) {
        graph.locks.push(builder.node(*key, &ids, lookup));
    }
    if builder.order.len() > MAX_LOCKS {
        graph.notes.push(format!(
            "more than {MAX_LOCKS} locks: the rest are not listed"
        ));
    }
    link_chains(&mut graph);
    graph
}

/// Whether the records carry `task_struct::blocker` (no records: no).
fn has_blocker_field(records: Records<'_>) -> bool {
    match records {
        Records::Read(r) => r.first().is_none_or(|r| r.blocker_field()),
        Records::Missing(_) => false,
    }
}

/// Where the graph's edges come from, in words (the graph's `records`).
fn records_words(records: Records<'_>, field: bool) -> String {
    match records {
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
    }
}

/// The threads and waits known so far, and the locks in the order they were found.
struct Builder<'r> {
    by_tid: BTreeMap<i32, &'r BlockerRecord>,
    by_task: BTreeMap<u64, &'r BlockerRecord>,
    known: BTreeMap<i32, Known>,
    waits: BTreeMap<i32, Wait>,
    order: Vec<Key>,
}

impl<'r> Builder<'r> {
    /// The process's live threads, and the waits of those in D.
    fn new(pid: i32, threads: &[ThreadSnapshot], records: Records<'r>) -> Builder<'r> {
        let (by_tid, by_task): (BTreeMap<i32, &BlockerRecord>, BTreeMap<u64, &BlockerRecord>) =
            match records {
                Records::Read(r) => (
                    r.iter().map(|r| (r.tid, r)).collect(),
                    r.iter().map(|r| (r.task, r)).collect(),
                ),
                Records::Missing(_) => (BTreeMap::new(), BTreeMap::new()),
            };
        let known: BTreeMap<i32, Known> = threads
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
        Builder {
            by_tid,
            by_task,
            known,
            waits,
            order,
        }
    }

    /// Each lock in turn: everyone else the records show blocked on it, then its holder and what the holder
    /// waits for itself (a lock not seen yet joins the end of the order).
    fn follow(&mut self, lookup: &mut dyn Lookup) {
        let mut next = 0;
        while next < self.order.len() && self.order.len() <= MAX_LOCKS {
            let key = self.order[next];
            next += 1;
            if let Key::Addr(lock) = key {
                self.add_host_waiters(lock, lookup);
            }
            self.add_holders(key, lookup);
        }
    }

    /// Host-wide waiters of an address the records show.
    fn add_host_waiters(&mut self, lock: u64, lookup: &mut dyn Lookup) {
        let others: Vec<&BlockerRecord> = self
            .by_tid
            .values()
            .filter(|r| {
                r.blocked_on().map(|(l, _)| l) == Some(lock) && !self.known.contains_key(&r.tid)
            })
            .copied()
            .collect();
        for r in others {
            if let Some(t) = lookup.thread(r.tgid, r.tid) {
                self.known.insert(
                    r.tid,
                    Known {
                        pid: r.tgid,
                        t,
                        record: Some(*r),
                    },
                );
            }
        }
        for (&tid, k) in self.known.iter() {
            if self.waits.contains_key(&tid)
                || k.record.and_then(|r| r.blocked_on()).map(|(l, _)| l) != Some(lock)
            {
                continue;
            }
            if let Some(w) = wait_of(k.pid, &k.t, k.record.as_ref()) {
                self.waits.insert(tid, w);
            }
        }
    }

    /// The holder, and what the holder waits for itself.
    fn add_holders(&mut self, key: Key, lookup: &mut dyn Lookup) {
        for (tid, hpid) in self.holder_tasks(key) {
            if let Entry::Vacant(slot) = self.known.entry(tid) {
                let Some(t) = lookup.thread(hpid, tid) else {
                    continue;
                };
                slot.insert(Known {
                    pid: hpid,
                    t,
                    record: self.by_tid.get(&tid).map(|r| **r),
                });
            }
            let k = &self.known[&tid];
            if k.t.state == "D" && !self.waits.contains_key(&tid) {
                if let Some(w) = wait_of(k.pid, &k.t, k.record.as_ref()) {
                    if !self.order.contains(&w.key) {
                        self.order.push(w.key);
                    }
                    self.waits.insert(tid, w);
                }
            }
        }
    }

    /// The holders a key's records or stacks name, as (tid, pid), before they are described.
    fn holder_tasks(&self, key: Key) -> Vec<(i32, i32)> {
        match key {
            Key::Addr(lock) => match self.owner_of(lock).0 {
                OwnerWord::Task(task) | OwnerWord::Readers { last: task, .. } => self
                    .by_task
                    .get(&task)
                    .map(|r| vec![(r.tid, r.tgid)])
                    .unwrap_or_default(),
                OwnerWord::None => Vec::new(),
            },
            Key::Vma(pid) | Key::Mmap(pid) => self
                .known
                .values()
                .filter(|k| k.pid == pid && k.t.state == "D" && !self.waits.contains_key(&k.t.tid))
                .filter(|k| site::mm_lock::holds_fault_lock(&k.t.stack, k.t.wchan.as_deref()))
                .map(|k| (k.t.tid, k.pid))
                .collect(),
            Key::Rm(label) => self
                .known
                .values()
                .filter(|k| !self.waits.contains_key(&k.t.tid))
                .filter(|k| {
                    rm_lock_of(label).is_some_and(|lock| crate::rm_lock::may_hold(&k.t, lock))
                })
                .map(|k| (k.t.tid, k.pid))
                .collect(),
        }
    }

    /// The owner word of the lock at `lock`, with its type: from a waiter's blocker record, else (a killable
    /// mmap_lock wait leaves no record) from the mmap_lock words of the mm it is.
    fn owner_of(&self, lock: u64) -> (OwnerWord, Option<BlockerType>, Option<u64>) {
        let waiter_record = self
            .waits
            .iter()
            .filter(|(_, w)| w.key == Key::Addr(lock))
            .filter_map(|(tid, _)| self.known.get(tid).and_then(|k| k.record))
            .find(|r| r.blocked_on().map(|(l, _)| l) == Some(lock));
        if let Some(r) = waiter_record {
            let kind = r.blocked_on().map(|(_, k)| k);
            let readers = match r.owner_task() {
                OwnerWord::Readers { count, .. } => Some(count),
                _ => None,
            };
            return (r.owner_task(), kind, readers);
        }
        match self.by_tid.values().find(|r| r.mmap_lock == lock) {
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

    /// One lock described: its waiters, what it is, and its holder (by the owner word or by the stack).
    fn node(&self, key: Key, ids: &BTreeMap<Key, String>, lookup: &mut dyn Lookup) -> LockNode {
        let mine: Vec<(&Known, &Wait)> = self
            .waits
            .iter()
            .filter(|(_, w)| w.key == key)
            .filter_map(|(tid, w)| Some((self.known.get(tid)?, w)))
            .collect();
        let kind = mine
            .first()
            .map(|(_, w)| w.kind)
            .unwrap_or(LockKind::Unknown);
        let (waiters, more_waiters) = listed_waiters(&mine, lookup);
        let identity = self.identity_of(key, &mine, lookup);
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
        match key {
            Key::Addr(lock) => self.recorded_holder(&mut node, lock, &mine, ids),
            Key::Mmap(_) | Key::Vma(_) | Key::Rm(_) => self.stack_holders(&mut node, key, ids),
        }
        node
    }

    /// What the lock is: by its key and record ([`identity::identify`]), the function that took it, and a
    /// driver lock the stack names (the RM API lock, a UVM lock…), which is that lock wherever it lies.
    fn identity_of(
        &self,
        key: Key,
        mine: &[(&Known, &Wait)],
        lookup: &mut dyn Lookup,
    ) -> LockIdentity {
        let pids: Vec<i32> = {
            let mut p: Vec<i32> = mine.iter().map(|(k, _)| k.pid).collect();
            p.sort_unstable();
            p.dedup();
            p
        };
        let mut identity = identity::identify(
            key_parts(key),
            mine.first().and_then(|(k, _)| k.record),
            &self.by_tid,
            lookup,
            &pids,
        );
        if identity.taken_in.is_none() {
            identity.taken_in = mine.iter().find_map(|(k, _)| taken_in(&k.t));
        }
        if matches!(
            identity.class.as_str(),
            "unknown" | "kernel static" | "module static"
        ) {
            if let Some(label) = mine.iter().find_map(|(k, _)| nvidia_lock_label(&k.t)) {
                identity.class = label.to_string();
            }
        }
        identity
    }

    /// The holder of a lock at a kernel address, by its owner word; or why none is named.
    fn recorded_holder(
        &self,
        node: &mut LockNode,
        lock: u64,
        mine: &[(&Known, &Wait)],
        ids: &BTreeMap<Key, String>,
    ) {
        let (owner, btype, readers) = self.owner_of(lock);
        node.readers = readers;
        let (task, evidence, mode) = match owner_claim(owner, btype, mine) {
            Ok(claim) => claim,
            Err(why) => {
                node.holder_unknown = Some(why);
                return;
            }
        };
        match self
            .by_task
            .get(&task)
            .and_then(|r| self.describe(r.tid, evidence, mode, ids))
        {
            Some(h) => node.holders.push(h),
            None => node.holder_unknown = Some(match evidence {
                Evidence::LastReader => format!(
                    "held for reading{}; its last reader is no longer a task (it exited)",
                    readers.map(|n| format!(" by {n}")).unwrap_or_default()
                ),
                _ => "its owner is no longer a task (it exited, or the lock was just handed over)"
                    .to_string(),
            }),
        }
    }

    /// The holders of the mmap_lock, a VMA lock or an RM lock, by their stacks; or why none is named.
    fn stack_holders(&self, node: &mut LockNode, key: Key, ids: &BTreeMap<Key, String>) {
        for (tid, _) in self.holder_tasks(key) {
            let mode = match key {
                Key::Vma(_) | Key::Mmap(_) => Some(Mode::Read),
                _ => None,
            };
            if let Some(h) = self.describe(tid, Evidence::Stack, mode, ids) {
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

    /// A known thread as a holder, linked to the lock it waits for itself.
    fn describe(
        &self,
        tid: i32,
        evidence: Evidence,
        mode: Option<Mode>,
        ids: &BTreeMap<Key, String>,
    ) -> Option<Holder> {
        let k = self.known.get(&tid)?;
        Some(Holder {
            tid,
            pid: k.pid,
            comm: k.t.comm.clone(),
            mode,
            evidence,
            state: k.t.state.clone(),
            doing: doing_words(&k.t),
            waits_for: self.waits.get(&tid).and_then(|w| ids.get(&w.key).cloned()),
            inside_samples: None,
            call: (k.t.state == "D").then(|| call_words(&k.t)),
            last_ran_s_ago: None,
            system_s: None,
        })
    }
}

/// A lock's waiters, those waiting longest first, at most [`MAX_WAITERS`]; and how many more there are.
fn listed_waiters(mine: &[(&Known, &Wait)], lookup: &mut dyn Lookup) -> (Vec<Waiter>, usize) {
    let mut waiters: Vec<Waiter> = mine.iter().map(|(k, w)| waiter_of(k, w, lookup)).collect();
    waiters.sort_by(|a, b| {
        b.waited_s
            .unwrap_or(0.0)
            .total_cmp(&a.waited_s.unwrap_or(0.0))
            .then(a.tid.cmp(&b.tid))
    });
    let more_waiters = waiters.len().saturating_sub(MAX_WAITERS);
    waiters.truncate(MAX_WAITERS);
    (waiters, more_waiters)
}

/// Who the owner word names (task, evidence, mode), or why it names no one.
fn owner_claim(
    owner: OwnerWord,
    btype: Option<BlockerType>,
    mine: &[(&Known, &Wait)],
) -> Result<(u64, Evidence, Option<Mode>), String> {
    match (owner, btype) {
        (OwnerWord::Task(t), Some(BlockerType::Mutex)) => Ok((t, Evidence::Owner, None)),
        (OwnerWord::Task(t), Some(BlockerType::Semaphore)) => Ok((t, Evidence::LastHolder, None)),
        (OwnerWord::Task(t), _) => Ok((t, Evidence::Writer, Some(Mode::Write))),
        (OwnerWord::Readers { last, .. }, _) => Ok((last, Evidence::LastReader, Some(Mode::Read))),
        (OwnerWord::None, Some(BlockerType::Semaphore))
            if mine
                .iter()
                .any(|(k, _)| k.record.is_some_and(|r| r.no_semaphore_holder_field())) =>
        {
            Err("a semaphore has no owner, and this kernel keeps no last holder".to_string())
        }
        (OwnerWord::None, Some(BlockerType::Semaphore)) => Err(
            "a semaphore has no owner, and its last holder released it (or none was recorded)"
                .to_string(),
        ),
        (OwnerWord::None, Some(_)) => Err(
            if mine
                .iter()
                .any(|(k, _)| k.record.is_some_and(|r| r.lock_unreadable()))
            {
                "the lock's words could not be read".to_string()
            } else {
                "no owner recorded in the lock (released as it was read, or held by readers the kernel does not name)".to_string()
            },
        ),
        (OwnerWord::None, None) => Err("no record of this lock's owner".to_string()),
    }
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
