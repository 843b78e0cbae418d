//! The wait graph of a pasted kernel log (`explain`): the hung-task detector's own lines (kernels with
//! `CONFIG_DETECT_HUNG_TASK_BLOCKER`) say what each reported task was blocked on and who likely owns it:
//!
//! - `INFO: task A:1 is blocked on a mutex likely owned by task B:2.`
//! - `INFO: task A:1 blocked on a semaphore likely last held by task B:2`
//! - `INFO: task A:1 <writer> blocked on an rw-semaphore likely owned by task B:2 <reader>`
//! - `INFO: task A:1 is blocked on a mutex, but the owner is not found.`
//!
//! [`parse_blocker`] reads one (pure). [`from_explained`] groups the tasks of a paste by (lock kind, owner):
//! tasks blocked on the same kind of lock owned by the same task are shown as one lock (the log has no lock
//! address: two different locks of one owner would be merged, which the lock's name says). An owner that is
//! itself a task of the paste is described by its site, and when it is blocked too, linked to its own lock:
//! chains, and cycles (deadlocks).

use std::collections::BTreeMap;

use super::{
    link_chains, Evidence, Holder, LockIdentity, LockKind, LockNode, Mode, WaitGraph, Waiter,
};
use crate::explained_task::{ExplainedTask, KernelBlocker};

fn role(word: &str) -> Option<Mode> {
    match word.trim().trim_start_matches('<').trim_end_matches('>') {
        "reader" => Some(Mode::Read),
        "writer" => Some(Mode::Write),
        _ => None,
    }
}

/// One blocker line's words (from "blocked …", as `explain` keeps them) and the blocked task's role
/// (`writer`/`reader`, the bracket after its name), read.
pub fn parse_blocker(words: &str, waiter_role: Option<&str>) -> Option<KernelBlocker> {
    let rest = words.trim().strip_prefix("blocked on ")?;
    let (kind, rest) = [
        ("a mutex", LockKind::Mutex),
        ("a semaphore", LockKind::Semaphore),
        ("an rw-semaphore", LockKind::Rwsem),
    ]
    .into_iter()
    .find_map(|(word, kind)| Some((kind, rest.strip_prefix(word)?)))?;
    let mut blocker = KernelBlocker {
        kind,
        mode: waiter_role.and_then(role),
        owner: None,
        owner_pid: None,
        owner_mode: None,
    };
    let owner = rest
        .trim()
        .strip_prefix("likely owned by task ")
        .or_else(|| rest.trim().strip_prefix("likely last held by task "));
    if let Some(owner) = owner {
        let owner = owner.trim().trim_end_matches('.');
        let (who, owner_role) = match owner.rsplit_once(" <") {
            Some((who, r)) if r.ends_with('>') => (who, role(r)),
            _ => (owner, None),
        };
        let (name, pid) = match who.rsplit_once(':') {
            Some((name, pid)) => (name.to_string(), pid.trim().parse().ok()),
            None => (who.to_string(), None),
        };
        blocker.owner = Some(name);
        blocker.owner_pid = pid;
        blocker.owner_mode = owner_role;
    }
    Some(blocker)
}

/// The wait graph of a paste's tasks, when any carries a blocker line; None otherwise.
pub fn from_explained(tasks: &[ExplainedTask]) -> Option<WaitGraph> {
    let blocked: Vec<(&ExplainedTask, &KernelBlocker)> = tasks
        .iter()
        .filter_map(|t| Some((t, t.blocked_on.as_ref()?)))
        .collect();
    if blocked.is_empty() {
        return None;
    }
    let mut order: Vec<LockKey> = Vec::new();
    for (_, b) in &blocked {
        let k = lock_key(b);
        if !order.contains(&k) {
            order.push(k);
        }
    }
    let id_of: BTreeMap<LockKey, String> = order
        .iter()
        .enumerate()
        .map(|(i, k)| (k.clone(), format!("L{}", i + 1)))
        .collect();
    let mut graph = WaitGraph {
        records: "the kernel's hung-task detector (its \"blocked on … likely owned by task …\" lines in the paste)"
            .to_string(),
        kernel_records: true,
        ..WaitGraph::default()
    };
    for k in &order {
        let mine: Vec<(&ExplainedTask, &KernelBlocker)> = blocked
            .iter()
            .filter(|(_, b)| lock_key(b) == *k)
            .copied()
            .collect();
        graph.locks.push(lock_node(tasks, &mine, &id_of));
    }
    link_chains(&mut graph);
    Some(graph)
}

/// One lock per (kind, owner pid or name).
type LockKey = (&'static str, String);

fn lock_key(b: &KernelBlocker) -> LockKey {
    (
        b.kind.word(),
        b.owner_pid
            .map(|p| p.to_string())
            .or_else(|| b.owner.clone())
            .unwrap_or_default(),
    )
}

/// The lock the tasks of `mine` wait for (all blocked on the same kind of lock of the same owner): named
/// after where the first took it, its holder the owner the kernel names.
fn lock_node(
    tasks: &[ExplainedTask],
    mine: &[(&ExplainedTask, &KernelBlocker)],
    id_of: &BTreeMap<LockKey, String>,
) -> LockNode {
    let (first_task, b) = mine[0];
    let taken_in = taken_in(first_task);
    let identity = LockIdentity {
        class: "unknown".into(),
        taken_in: taken_in.clone(),
        ..LockIdentity::default()
    };
    let name = match (&taken_in, &b.owner) {
        (Some(f), _) => format!("{} taken in {f}", b.kind.with_article()),
        (None, Some(o)) => format!("{} owned by {o}", b.kind.with_article()),
        _ => b.kind.with_article(),
    };
    let mut node = LockNode {
        id: id_of[&lock_key(b)].clone(),
        kind: b.kind,
        address: None,
        name,
        identity,
        holders: Vec::new(),
        holder_unknown: None,
        readers: None,
        waiters: mine.iter().map(|(t, w)| waiter(t, w)).collect(),
        more_waiters: 0,
    };
    match &b.owner {
        Some(owner) => node.holders.push(holder(tasks, b, owner, id_of)),
        None => node.holder_unknown = Some("the kernel did not find the owner".to_string()),
    }
    node
}

/// The function that took the lock: the first frame of the task's stack past the scheduler and the lock's
/// own functions.
fn taken_in(task: &ExplainedTask) -> Option<String> {
    task.stack
        .iter()
        .map(|f| crate::site::frame_name::base_name(&f.function))
        .find(|n| {
            !crate::site::rules::SCHEDULER_FRAMES.contains(n)
                && !n.contains("mutex_lock")
                && !n.starts_with("down")
                && !n.starts_with("rwsem_")
                && !n.starts_with("__down")
        })
        .map(str::to_string)
}

/// A blocked task of the paste as a waiter.
fn waiter(t: &ExplainedTask, w: &KernelBlocker) -> Waiter {
    Waiter {
        tid: t.pid.unwrap_or(0),
        pid: t.pid.unwrap_or(0),
        comm: t.task.clone(),
        mode: w.mode,
        state: "D".into(),
        call: t.site.clone().unwrap_or_else(|| "the kernel".into()),
        by: "kernel record".into(),
        waited_s: None,
    }
}

/// The owner the kernel names, described by its own task in the paste (if it is one) and linked to the
/// lock it waits for itself.
fn holder(
    tasks: &[ExplainedTask],
    b: &KernelBlocker,
    owner: &str,
    id_of: &BTreeMap<LockKey, String>,
) -> Holder {
    let pid = b.owner_pid;
    let task = pid.and_then(|pid| tasks.iter().find(|t| t.pid == Some(pid)));
    let evidence = match (b.kind, b.owner_mode) {
        (LockKind::Semaphore, _) => Evidence::LastHolder,
        (_, Some(Mode::Read)) => Evidence::LastReader,
        (LockKind::Rwsem, _) => Evidence::Writer,
        _ => Evidence::Owner,
    };
    let waits_for = task
        .and_then(|t| t.blocked_on.as_ref())
        .and_then(|ob| id_of.get(&lock_key(ob)).cloned());
    Holder {
        tid: pid.unwrap_or(0),
        pid: pid.unwrap_or(0),
        comm: owner.to_string(),
        mode: b.owner_mode,
        evidence,
        state: if task.is_some_and(|t| t.blocked_on.is_some()) {
            "D".into()
        } else {
            String::new()
        },
        doing: match task.and_then(|t| t.site.clone()) {
            Some(site) => format!("in the paste: {site}"),
            None => "not in the paste".to_string(),
        },
        waits_for,
        inside_samples: None,
        call: None,
        last_ran_s_ago: None,
        system_s: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_blocker_lines_read() {
        let m = parse_blocker("blocked on a mutex likely owned by task qemu:42.", None).unwrap();
        assert_eq!(
            (m.kind, m.owner.as_deref(), m.owner_pid),
            (LockKind::Mutex, Some("qemu"), Some(42))
        );
        let s = parse_blocker(
            "blocked on a semaphore likely last held by task CPU 6/KVM:7",
            None,
        )
        .unwrap();
        assert_eq!(
            (s.kind, s.owner.as_deref(), s.owner_pid),
            (LockKind::Semaphore, Some("CPU 6/KVM"), Some(7))
        );
        let r = parse_blocker(
            "blocked on an rw-semaphore likely owned by task kworker/3:1:2248 <reader>",
            Some("writer"),
        )
        .unwrap();
        assert_eq!(
            (
                r.kind,
                r.mode,
                r.owner.as_deref(),
                r.owner_pid,
                r.owner_mode
            ),
            (
                LockKind::Rwsem,
                Some(Mode::Write),
                Some("kworker/3:1"),
                Some(2248),
                Some(Mode::Read)
            )
        );
        let none = parse_blocker("blocked on a mutex, but the owner is not found.", None).unwrap();
        assert_eq!((none.kind, none.owner), (LockKind::Mutex, None));
        assert_eq!(
            parse_blocker("blocked for more than 120 seconds.", None),
            None
        );
    }

    /// A paste of three hung tasks: `app` waits for a mutex owned by `flusher`, itself blocked on an
    /// rw-semaphore owned by `kworker` (a writer, not hung: its stack shown after the line); two tasks waiting
    /// on each other's mutexes. The graph links them: one chain, one deadlock.
    #[test]
    fn a_paste_links_tasks_waiting_on_tasks_of_the_same_paste() {
        let log = "\
INFO: task app:100 blocked for more than 122 seconds.
Call Trace:
 __mutex_lock.constprop.0+0x1f/0x2f
 ext4_sync_file+0x4e/0x2a0
INFO: task app:100 is blocked on a mutex likely owned by task flusher:200.
INFO: task flusher:200 blocked for more than 122 seconds.
Call Trace:
 rwsem_down_write_slowpath+0x27e/0x550
 down_write+0x5c/0x80
 jbd2_journal_lock_updates+0x10/0x80
INFO: task flusher:200 <writer> blocked on an rw-semaphore likely owned by task kworker/1:2:300 <writer>
task:kworker/1:2 state:R stack:0 pid:300 tgid:300 ppid:2 flags:0x00004000
Call Trace:
 jbd2_journal_commit_transaction+0x100/0x1200
INFO: task left:400 blocked for more than 122 seconds.
Call Trace:
 mutex_lock+0x1f/0x2f
 left_path+0x10/0x20
INFO: task left:400 is blocked on a mutex likely owned by task right:500.
INFO: task right:500 blocked for more than 122 seconds.
Call Trace:
 mutex_lock+0x1f/0x2f
 right_path+0x10/0x20
INFO: task right:500 is blocked on a mutex likely owned by task left:400.
";
        let e = crate::explain::explain(log.as_bytes()).unwrap();
        let flusher = e.tasks.iter().find(|t| t.pid == Some(200)).unwrap();
        assert_eq!(flusher.blocked_on.as_ref().unwrap().mode, Some(Mode::Write));
        let g = e.wait_graph.as_ref().expect("a wait graph");
        assert_eq!(g.locks.len(), 4, "{g:#?}");
        let app_lock = g.lock_waited_by(100).unwrap();
        assert_eq!(app_lock.kind, LockKind::Mutex);
        assert_eq!(
            app_lock.identity.taken_in.as_deref(),
            Some("ext4_sync_file")
        );
        let h = &app_lock.holders[0];
        assert_eq!((h.tid, h.evidence), (200, Evidence::Owner));
        let next = g.lock(h.waits_for.as_deref().unwrap()).unwrap();
        assert_eq!(next.kind, LockKind::Rwsem);
        assert_eq!(next.waiters[0].mode, Some(Mode::Write));
        let writer = &next.holders[0];
        assert_eq!((writer.tid, writer.evidence), (300, Evidence::Writer));
        assert!(
            writer.doing.contains("kernel thread kworker/1:2"),
            "{}",
            writer.doing
        );
        assert_eq!(g.chains, vec![vec![app_lock.id.clone(), next.id.clone()]]);
        assert_eq!(g.deadlocks.len(), 1, "{:?}", g.deadlocks);
        let md = crate::explain::markdown(&e);
        assert!(md.contains("## Wait graph"), "{md}");
        assert!(md.contains("**Deadlock:**"), "{md}");
        assert!(
            md.contains("1 thread waits for a mutex taken in ext4_sync_file ("),
            "{md}"
        );
        assert!(
            md.contains("; held by tid 200 `flusher`, in the paste:"),
            "{md}"
        );
        assert!(
            md.contains("an rw-semaphore taken in jbd2_journal_lock_updates"),
            "{md}"
        );
    }
}
