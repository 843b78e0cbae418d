//! The running holder: when threads wait for a lock and no record names who holds it (rwsem readers, a
//! kernel without `task_struct::blocker`, killable waits, RM locks held across a long operation), the
//! candidate holders are sampled several times during the capture and the thread that stayed inside a
//! lock-taking call the whole time is named.
//!
//! - [`read_obs`]: one sample of one thread, from files that cannot hang: `stat` (state, utime, stime),
//!   `syscall` (including `running`), `stack` when readable, `schedstat`, and the fd link of an ioctl's fd.
//!   Never cmdline, maps or mem.
//! - [`judge`] (pure): per candidate, in how many samples it was inside a lock-taking call, which call,
//!   whether it ran in the kernel (system time grew, user time did not), and whether it qualifies: inside
//!   in every sample, the same call each time. A waiter is never a candidate (the caller leaves them out).
//! - [`apply`] (pure): the judgement into the graph: a record's "likely" holder confirmed (or replaced when
//!   it left), an unnamed holder named, with what it was doing.
//!
//! Why samples work: a thread that holds a kernel lock is inside the kernel for as long as it holds it.
//! A thread asleep in `futex` or `poll`, or running in user space, holds no mmap_lock; the thread that is
//! in `mmap` (or running with only system time growing) in every sample over a second is the one the
//! waiters wait for. On a busy CPU a running thread is sometimes caught off-CPU: its `syscall` then shows
//! the call itself (`9 … 0x8022`: mmap with MAP_POPULATE), which names it better still.

use serde::{Deserialize, Serialize};

use super::{Evidence, Holder, LockNode, Mode, WaitGraph};
use crate::parse::syscall::Syscall;
use crate::proc_root::ProcRoot;
use crate::site::frame_name::base_name;
use crate::snapshot::StackFrame;
use crate::Arch;

/// Clock ticks a second (`USER_HZ`; 100 on every Linux ABI wedge-capture runs on).
const USER_HZ: f64 = 100.0;

/// Calls that sleep without holding a kernel lock: never a holder's call.
const IDLE_CALLS: &[&str] = &[
    "futex",
    "futex_waitv",
    "poll",
    "ppoll",
    "select",
    "pselect6",
    "epoll_wait",
    "epoll_pwait",
    "epoll_pwait2",
    "nanosleep",
    "clock_nanosleep",
    "wait4",
    "waitid",
    "pause",
    "rt_sigsuspend",
    "rt_sigtimedwait",
    "sched_yield",
    "accept",
    "accept4",
    "io_getevents",
    "io_pgetevents",
];

/// Whether `name` is a call that sleeps without holding a kernel lock (futex, poll, nanosleep…).
pub fn is_idle_call(name: &str) -> bool {
    IDLE_CALLS.contains(&name)
}

/// Calls that take a process's mmap_lock (or run page faults under it) for as long as they run.
const MMAP_LOCK_CALLS: &[&str] = &[
    "mmap",
    "munmap",
    "mremap",
    "mprotect",
    "pkey_mprotect",
    "madvise",
    "process_madvise",
    "mlock",
    "mlock2",
    "munlock",
    "mlockall",
    "munlockall",
    "brk",
    "mincore",
    "msync",
    "remap_file_pages",
    "mbind",
    "migrate_pages",
    "move_pages",
    "set_mempolicy_home_node",
    "process_vm_readv",
    "process_vm_writev",
    "ioctl",
    "io_uring_register",
    "userfaultfd",
    "shmat",
    "shmdt",
    "execve",
    "execveat",
    "exit",
    "exit_group",
];

/// One look at one thread.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Obs {
    /// CLOCK_MONOTONIC (ns) of the sample.
    pub at_ns: u64,
    pub state: char,
    pub utime: u64,
    pub stime: u64,
    /// `/proc/<tid>/syscall`: `running`, or the call it is in (name, first argument), or a fault/user
    /// entry (nr -1); None when unreadable.
    pub call: Option<SeenCall>,
    /// Kernel stack when readable (empty for a task on a CPU: the kernel does not unwind it).
    pub stack: Vec<StackFrame>,
}

/// What `/proc/<tid>/syscall` showed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum SeenCall {
    Running,
    /// Outside a syscall (a page fault, or user space).
    NoSyscall,
    /// In a syscall: its name (or `#nr`), its first argument, and for an ioctl the request's name and the
    /// fd's target when known.
    In {
        name: String,
        arg0: u64,
        detail: Option<String>,
        /// mmap's flags (fourth argument) or madvise's advice (third): what a populate is.
        flags: u64,
    },
}

/// One sample of thread `tid` of `pid` under `root`; None when the thread is gone.
pub fn read_obs(root: &ProcRoot, pid: i32, tid: i32, arch: Arch, at_ns: u64) -> Option<Obs> {
    let stat = root.read_task_stat(pid, tid).ok()?;
    let call = root.read_syscall(pid, tid).ok().map(|s| match s {
        Syscall::Running => SeenCall::Running,
        Syscall::NotInSyscall { .. } => SeenCall::NoSyscall,
        Syscall::InSyscall { nr, args, .. } => {
            let name = crate::decode::syscalls::name(arch, nr)
                .map(str::to_string)
                .unwrap_or_else(|| format!("#{nr}"));
            let detail = (name == "ioctl").then(|| {
                let fd = i64::from(args[0] as u32 as i32);
                let target = root.fd_target(pid, Some(tid), fd).ok().map(|t| match t {
                    crate::parse::fd::FdTarget::Path { path, .. } => path,
                    crate::parse::fd::FdTarget::Special { kind, detail } => {
                        format!("{kind}:{detail}")
                    }
                });
                let decoded = crate::decode::ioctl::decode(args[1] as u32, target.as_deref());
                let request = decoded
                    .name
                    .unwrap_or_else(|| format!("{:#x}", args[1] as u32));
                match target {
                    Some(t) => format!("{request} on {t}"),
                    None => request,
                }
            });
            let flags = match name.as_str() {
                "mmap" => args[3],
                "madvise" => args[2],
                _ => 0,
            };
            SeenCall::In {
                name,
                arg0: args[0],
                detail,
                flags,
            }
        }
    });
    let stack = root.read_stack(pid, tid).unwrap_or_default();
    Some(Obs {
        at_ns,
        state: stat.state,
        utime: stat.utime,
        stime: stat.stime,
        call,
        stack,
    })
}

/// The samples of one candidate.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Candidate {
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    pub obs: Vec<Obs>,
}

/// Which calls can hold the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takers {
    /// The mmap_lock (and VMA locks): address-space calls, ioctls, page faults.
    MmapLock,
    /// Anything but an idle call.
    Any,
}

/// A candidate judged.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    pub pid: i32,
    pub tid: i32,
    pub comm: String,
    /// Samples inside a lock-taking call, of all taken.
    pub inside: usize,
    pub of: usize,
    /// The call it was inside (`mmap`, `ioctl UVM_MIGRATE on /dev/nvidia-uvm`, `page fault`), when a sample
    /// showed it; None when it was only ever seen running.
    pub call: Option<String>,
    /// It ran in the kernel over the samples: system time grew, user time (nearly) did not.
    pub in_kernel: bool,
    pub system_s: f64,
    pub user_s: f64,
    pub window_s: f64,
    /// Kernel modules in its stacks (`nvidia_uvm`), and in how many samples.
    pub modules: Vec<(String, usize)>,
    /// States seen (`R`, `D`…), in order of first sight.
    pub states: String,
    /// mmap with MAP_POPULATE, or madvise(MADV_POPULATE_*): it holds the mmap_lock for reading.
    pub populating: bool,
    /// Inside the same call in every sample: a holder.
    pub qualifies: bool,
}

const FAULT_FRAMES: &[&str] = &[
    "exc_page_fault",
    "do_user_addr_fault",
    "handle_mm_fault",
    "do_page_fault",
    "__do_page_fault",
    "asm_exc_page_fault",
];

const MAP_POPULATE: u64 = 0x8000;
const MADV_POPULATE_READ: u64 = 22;
const MADV_POPULATE_WRITE: u64 = 23;

/// Judges one candidate's samples for a lock taken by `takers`.
pub fn judge(c: &Candidate, takers: Takers) -> Judged {
    let obs = &c.obs;
    let (first, last) = (obs.first(), obs.last());
    let delta = |f: fn(&Obs) -> u64| match (first, last) {
        (Some(a), Some(b)) => f(b).saturating_sub(f(a)),
        _ => 0,
    };
    let (dsys, dusr) = (delta(|o| o.stime), delta(|o| o.utime));
    let window_s = match (first, last) {
        (Some(a), Some(b)) => b.at_ns.saturating_sub(a.at_ns) as f64 / 1e9,
        _ => 0.0,
    };
    let in_kernel = dsys > 0 && dusr * 4 <= dsys;
    let mut inside = 0;
    let mut call: Option<String> = None;
    let mut same = true;
    let mut first_call: Option<(String, u64)> = None;
    let mut populating = false;
    let mut states = String::new();
    let mut modules: Vec<(String, usize)> = Vec::new();
    for o in obs {
        if !states.contains(o.state) {
            states.push(o.state);
        }
        let mut seen_modules: Vec<&str> =
            o.stack.iter().filter_map(|f| f.module.as_deref()).collect();
        seen_modules.sort_unstable();
        seen_modules.dedup();
        for m in seen_modules {
            match modules.iter_mut().find(|(n, _)| n == m) {
                Some((_, k)) => *k += 1,
                None => modules.push((m.to_string(), 1)),
            }
        }
        let in_fault = o
            .stack
            .iter()
            .any(|f| FAULT_FRAMES.contains(&base_name(&f.function)));
        let here = match &o.call {
            Some(SeenCall::Running) => in_kernel,
            Some(SeenCall::NoSyscall) if in_fault => {
                call.get_or_insert_with(|| "page fault".to_string());
                true
            }
            Some(SeenCall::NoSyscall) | None => false,
            Some(SeenCall::In {
                name,
                arg0,
                detail,
                flags,
            }) => {
                let takes = !IDLE_CALLS.contains(&name.as_str())
                    && (takers == Takers::Any || MMAP_LOCK_CALLS.contains(&name.as_str()));
                if takes {
                    match &first_call {
                        Some((n, a)) if n != name || a != arg0 => same = false,
                        Some(_) => {}
                        None => first_call = Some((name.clone(), *arg0)),
                    }
                    populating |= (name == "mmap" && flags & MAP_POPULATE != 0)
                        || (name == "madvise"
                            && matches!(*flags, MADV_POPULATE_READ | MADV_POPULATE_WRITE));
                    call.get_or_insert_with(|| match detail {
                        Some(d) => format!("{name} {d}"),
                        None => name.clone(),
                    });
                }
                takes
            }
        };
        if here {
            inside += 1;
        }
    }
    Judged {
        pid: c.pid,
        tid: c.tid,
        comm: c.comm.clone(),
        inside,
        of: obs.len(),
        call,
        in_kernel,
        system_s: dsys as f64 / USER_HZ,
        user_s: dusr as f64 / USER_HZ,
        window_s,
        modules,
        states,
        populating,
        qualifies: obs.len() >= 2 && inside == obs.len() && same,
    }
}

impl Judged {
    /// "running in the kernel in mmap (6 of 6 samples over 7.5 s, 7.50 s of system time; nvidia_uvm (1 of
    /// 6) in its stack)" — plain text (renderers escape it).
    pub fn doing(&self) -> String {
        let how = if self.in_kernel && self.states.contains('R') {
            "running in the kernel".to_string()
        } else if self.states == "D" {
            "in D".to_string()
        } else {
            format!("in state {}", self.states)
        };
        let call = self
            .call
            .as_ref()
            .map(|c| format!(" in {c}"))
            .unwrap_or_default();
        let modules = if self.modules.is_empty() {
            String::new()
        } else {
            let list: Vec<String> = self
                .modules
                .iter()
                .map(|(m, n)| format!("{m} frames in {n} of {} stacks", self.of))
                .collect();
            format!("; {}", list.join(", "))
        };
        format!(
            "{how}{call} ({} of {} samples over {:.1} s, {:.2} s of system time{modules})",
            self.inside, self.of, self.window_s, self.system_s
        )
    }

    /// The mode it holds an mmap_lock in, when its call says: a populate or a fault reads.
    fn mmap_mode(&self) -> Option<Mode> {
        (self.populating || self.call.as_deref() == Some("page fault")).then_some(Mode::Read)
    }
}

/// Which candidates to sample for `lock`: the holder a record names first (to confirm it), then the threads
/// of the waiters' processes (and of the mmap_lock's owner) that are not waiters, at most `max`.
pub fn candidates_for(
    lock: &LockNode,
    graph: &WaitGraph,
    threads_of: &mut dyn FnMut(i32) -> Vec<(i32, String)>,
    max: usize,
) -> Vec<(i32, i32, String)> {
    let waiters = graph.waiter_tids();
    let mut out: Vec<(i32, i32, String)> = lock
        .holders
        .iter()
        .filter(|h| h.state != "D" || h.evidence == Evidence::LastReader)
        .map(|h| (h.pid, h.tid, h.comm.clone()))
        .collect();
    let mut pids: Vec<i32> = lock.identity.pid.into_iter().collect();
    pids.extend(lock.waiters.iter().map(|w| w.pid));
    pids.sort_unstable();
    pids.dedup();
    // Only when no record names a holder is everyone else a candidate.
    let named = lock.holders.iter().any(|h| {
        matches!(
            h.evidence,
            Evidence::Owner | Evidence::Writer | Evidence::LastHolder
        )
    });
    if !named {
        for pid in pids {
            for (tid, comm) in threads_of(pid) {
                if out.len() >= max {
                    break;
                }
                if waiters.contains(&tid) || out.iter().any(|(_, t, _)| *t == tid) {
                    continue;
                }
                out.push((pid, tid, comm));
            }
        }
    }
    out.truncate(max);
    out
}

/// The calls that can hold `lock`.
pub fn takers_of(lock: &LockNode) -> Takers {
    match lock.identity.class.as_str() {
        "mmap_lock" | "vma_lock" => Takers::MmapLock,
        _ => Takers::Any,
    }
}

/// Puts the judgement of `lock`'s candidates into the graph.
pub fn apply(lock: &mut LockNode, judged: &[Judged]) {
    let dropped = confirm_recorded(lock, judged);
    let named = lock.holders.iter().any(|h| h.evidence != Evidence::Stack);
    if !named {
        add_sampled(lock, judged);
    }
    say_why_unknown(lock, judged);
    if !dropped.is_empty() {
        let note = dropped.join("; ");
        lock.holder_unknown = match lock.holder_unknown.take() {
            Some(w) => Some(format!("{w}; {note}")),
            None if lock.holders.is_empty() => Some(note),
            None => {
                // Named by samples instead: say why the record's holder is not.
                if let Some(h) = lock.holders.first_mut() {
                    h.doing = format!("{} — {note}", h.doing);
                }
                None
            }
        };
    }
}

/// A holder a record names: confirmed (described by its samples), or dropped when it left every
/// lock-taking call; returns why each dropped one was.
fn confirm_recorded(lock: &mut LockNode, judged: &[Judged]) -> Vec<String> {
    let mut dropped: Vec<String> = Vec::new();
    for h in lock.holders.iter_mut() {
        if let Some(j) = judged.iter().find(|j| j.tid == h.tid) {
            h.inside_samples = Some((j.inside, j.of));
            h.system_s = Some(j.system_s);
            if j.call.is_some() {
                h.call = j.call.clone();
            }
            if h.state != "D" {
                h.doing = j.doing();
            }
            if h.evidence == Evidence::LastReader && !j.qualifies && j.inside == 0 {
                dropped.push(format!(
                    "the kernel's last reader, tid {} ({}), was outside any lock-taking call in all {} samples \
                     (it has released it)",
                    h.tid, h.comm, j.of
                ));
                h.tid = -1;
            }
        }
    }
    lock.holders.retain(|h| h.tid >= 0);
    dropped
}

/// The candidates that stayed inside a lock-taking call, as holders named by samples: inside an
/// address-space call or a fault first, then the most system time.
fn add_sampled(lock: &mut LockNode, judged: &[Judged]) {
    let mut qualified: Vec<&Judged> = judged
        .iter()
        .filter(|j| j.qualifies && !lock.holders.iter().any(|h| h.tid == j.tid))
        .collect();
    qualified.sort_by(|a, b| {
        b.call
            .is_some()
            .cmp(&a.call.is_some())
            .then(b.system_s.total_cmp(&a.system_s))
            .then(a.tid.cmp(&b.tid))
    });
    for j in qualified {
        let mode = match takers_of(lock) {
            Takers::MmapLock => j.mmap_mode(),
            Takers::Any => None,
        };
        lock.holders.push(Holder {
            tid: j.tid,
            pid: j.pid,
            comm: j.comm.clone(),
            mode,
            evidence: Evidence::Sampled,
            state: j
                .states
                .chars()
                .last()
                .map(String::from)
                .unwrap_or_default(),
            doing: j.doing(),
            waits_for: None,
            inside_samples: Some((j.inside, j.of)),
            call: j.call.clone(),
            last_ran_s_ago: None,
            system_s: Some(j.system_s),
        });
    }
}

/// No holder after the samples: why (none to sample, or none stayed inside); a holder: no reason kept.
fn say_why_unknown(lock: &mut LockNode, judged: &[Judged]) {
    if !lock.holders.is_empty() {
        lock.holder_unknown = None;
        return;
    }
    let of = judged.iter().map(|j| j.of).max().unwrap_or(0);
    lock.holder_unknown = Some(if judged.is_empty() {
        lock.holder_unknown
            .clone()
            .unwrap_or_else(|| "no candidate thread to sample".to_string())
    } else {
        format!(
            "none of the {} threads sampled stayed inside a lock-taking call in all {of} samples{}",
            judged.len(),
            lock.holder_unknown
                .as_ref()
                .map(|w| format!(" ({w})"))
                .unwrap_or_default()
        )
    });
}
