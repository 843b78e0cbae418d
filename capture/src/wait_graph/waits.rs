//! What one thread waits for and is doing, from its stack, its syscall and the kernel's record: the lock
//! [`Key`] it waits on ([`wait_of`]: the record first, then a VMA or mmap_lock wait the stack shows, then an
//! NVIDIA RM lock), the function that took the lock ([`taken_in`]), and its call and state in words
//! ([`call_words`], [`doing_words`]) for the graph's waiters and holders.

use super::{LockKind, Lookup, Mode, Waiter};
use crate::blockers::{BlockerRecord, BlockerType};
use crate::site;
use crate::site::frame_name::base_name;
use crate::snapshot::{SyscallInfo, ThreadSnapshot};

/// How a lock is told apart before it is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Key {
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
pub(super) struct Wait {
    pub(super) key: Key,
    pub(super) kind: LockKind,
    pub(super) mode: Option<Mode>,
    pub(super) by: &'static str,
}

/// A thread the graph knows: its process, its snapshot, its record.
pub(super) struct Known {
    pub(super) pid: i32,
    pub(super) t: ThreadSnapshot,
    pub(super) record: Option<BlockerRecord>,
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
pub(super) fn wait_of(
    pid: i32,
    t: &ThreadSnapshot,
    record: Option<&BlockerRecord>,
) -> Option<Wait> {
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
    if site::mm_lock::lock_class(&t.stack, t.wchan.as_deref()) == Some("mmap_lock") {
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

pub(super) fn waiter_of(k: &Known, w: &Wait, lookup: &mut dyn Lookup) -> Waiter {
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

/// What a thread is doing, in words, from one snapshot (samples say more: [`super::holders`]).
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

/// The NVIDIA driver lock `t`'s stack waits for, by its label (`RM API lock`, `UVM global lock`, …).
pub(super) fn nvidia_lock_label(t: &ThreadSnapshot) -> Option<&'static str> {
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
pub(super) fn rm_lock_of(label: &str) -> Option<site::nvidia::NvidiaWait> {
    [
        site::nvidia::NvidiaWait::RmApiLock,
        site::nvidia::NvidiaWait::GpuLock,
    ]
    .into_iter()
    .find(|l| l.label() == label)
}
