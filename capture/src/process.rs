//! `snapshot_process`: every thread of one process, read at one moment from outside.
//!
//! Cheap first: `stat` of every task. Then, only for threads in `D` (or all threads on request, or the
//! one `only_tid`): `wchan`, `syscall`, `stack`, `status` (context-switch counters), and for ioctl the fd
//! link, decoded against the device's table. A thread that vanishes mid-read is marked `gone`; a refused
//! read leaves the field empty with a note naming the missing privilege.
//!
//! Bounded for very wide processes (a process with 20,000 idle threads chooses how much a snapshot reads and
//! stores): the threads listed are the `only_tid` and `wedged_tids`, at most [`SnapshotOptions::max_in_d`]
//! threads in D and at most [`SnapshotOptions::max_others`] others (running ones first, then lowest tid), and
//! only while their estimated bytes stay within [`SnapshotOptions::max_bytes`]. The rest are counted in
//! [`crate::ThreadsSummary`] by state (from the `stat` already read) and by wchan (read for at most
//! [`MAX_SUMMARY_WCHAN_READS`] of them); their stack, syscall, status and fd links are never read.

use crate::decode::arch::Arch;
use crate::decode::device::{self, DeviceKind};
use crate::decode::ioctl;
use crate::decode::syscalls;
use crate::error::{Error, Result};
use crate::parse::syscall::Syscall;
use crate::proc_root::{ProcRoot, TaskFile};
use crate::site;
use crate::snapshot::{ProcessSnapshot, SyscallFile, SyscallInfo, ThreadSnapshot, ThreadsSummary};

/// [`SnapshotOptions::max_others`] by default: threads listed beyond the wedged ones and those in D.
pub const DEFAULT_MAX_OTHERS: usize = 256;
/// [`SnapshotOptions::max_in_d`] by default: a process can put any number of its threads in D on purpose.
pub const DEFAULT_MAX_IN_D: usize = 256;
/// [`SnapshotOptions::max_bytes`] by default: with the 8 samples an incident keeps, 4 MiB of threads.
pub const DEFAULT_MAX_BYTES: usize = 512 << 10;
/// Most summarized threads whose wchan is read (one small /proc read each); beyond, counted by state only.
pub const MAX_SUMMARY_WCHAN_READS: usize = 32_768;
/// Most (state, wchan) groups a summary lists; the rest are counted together.
pub const MAX_SUMMARY_GROUPS: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotOptions {
    /// Read wchan/syscall/stack for every thread listed, not only those in D.
    pub all_threads: bool,
    /// Only this thread (read in full whatever its state).
    pub only_tid: Option<i32>,
    /// Threads always listed and read in full, whatever the bounds (the threads judged wedged).
    pub wedged_tids: Vec<i32>,
    /// Most threads in D listed (and read in full) besides `wedged_tids`; the rest are summarized.
    pub max_in_d: usize,
    /// Most other threads listed (read in full with `all_threads`), running ones first, then lowest tid; the rest
    /// are summarized.
    pub max_others: usize,
    /// Most bytes the listed threads may add to an incident, estimated ([`estimated_bytes`]): once spent, the
    /// threads not listed yet are summarized (the wedged ones are listed whatever they cost). A thread's stack
    /// can hold 64 frames: the counts alone do not bound the bytes.
    pub max_bytes: usize,
    /// Syscall ABI of the target (the host's unless the snapshot comes from another machine).
    pub arch: Arch,
    /// Where sysfs is, to name the driver bound to a DRM node an ioctl works on
    /// (`<sys>/class/drm/<node>/device/driver`). None: `/sys` for the live `/proc`, nothing for a fake or
    /// recorded tree (its DRM driver ioctls then read "driver unknown").
    pub sys_root: Option<std::path::PathBuf>,
}

impl Default for SnapshotOptions {
    fn default() -> Self {
        SnapshotOptions {
            all_threads: false,
            only_tid: None,
            wedged_tids: Vec::new(),
            max_in_d: DEFAULT_MAX_IN_D,
            max_others: DEFAULT_MAX_OTHERS,
            max_bytes: DEFAULT_MAX_BYTES,
            arch: Arch::host(),
            sys_root: None,
        }
    }
}

pub(crate) fn clock_ns(id: nix::time::ClockId) -> u64 {
    nix::time::clock_gettime(id)
        .map(|t| {
            (t.tv_sec() as u64)
                .saturating_mul(1_000_000_000)
                .saturating_add(t.tv_nsec() as u64)
        })
        .unwrap_or(0)
}

/// A note for a refused or failed read; `None` when the task is simply gone.
fn note_for(file: TaskFile, e: &Error) -> Option<String> {
    match e {
        Error::Gone { .. } => None,
        Error::PermissionDenied { needs, .. } => {
            Some(format!("{} unreadable: needs {needs}", file.name()))
        }
        other => Some(format!("{} unreadable: {other}", file.name())),
    }
}

fn hex(v: u64) -> String {
    format!("{v:#x}")
}

/// The link target of `fd` of the process, or why there is none.
fn fd_link(root: &ProcRoot, pid: i32, tid: i32, fd: i64) -> (Option<String>, Option<String>) {
    match root.fd_target(pid, Some(tid), fd) {
        Ok(target) => (
            Some(match &target {
                crate::parse::fd::FdTarget::Path { path, .. } => path.clone(),
                crate::parse::fd::FdTarget::Special { kind, detail } => format!("{kind}:{detail}"),
            }),
            None,
        ),
        Err(Error::Gone { .. }) => (
            None,
            Some(format!("fd {fd} is closed or the thread exited")),
        ),
        Err(e) => (None, Some(format!("fd {fd} link unreadable: {e}"))),
    }
}

/// The file behind each file-descriptor argument of syscall `name` (see `syscalls::fd_args`). Descriptors are
/// `int`: the low 32 bits count; a negative one (mmap of anonymous memory passes -1) names no file.
fn syscall_files(
    root: &ProcRoot,
    pid: i32,
    tid: i32,
    name: &str,
    args: &[u64; 6],
) -> Vec<SyscallFile> {
    // MAP_ANONYMOUS (0x20 on x86_64 and aarch64): the fd argument is ignored.
    if name == "mmap" && args[3] & 0x20 != 0 {
        return Vec::new();
    }
    syscalls::fd_args(name)
        .iter()
        .filter_map(|&arg| {
            let fd = i64::from(args[arg] as u32 as i32);
            if fd < 0 {
                return None;
            }
            let (target, not_captured) = fd_link(root, pid, tid, fd);
            Some(SyscallFile {
                arg,
                fd,
                target,
                not_captured,
            })
        })
        .collect()
}

/// Names the request on the fd's device; for a DRM node, with the driver sysfs says is bound to it.
fn decode_ioctl(
    root: &ProcRoot,
    opts: &SnapshotOptions,
    request: u32,
    fd_target: Option<&str>,
) -> ioctl::Decoded {
    let live_sys = || root.is_live().then(|| std::path::PathBuf::from("/sys"));
    let drm_driver = fd_target
        .filter(|path| DeviceKind::of(path) == DeviceKind::Drm)
        .and_then(|path| device::drm_driver(&opts.sys_root.clone().or_else(live_sys)?, path));
    ioctl::decode_on(request, fd_target, drm_driver.as_deref())
}

/// What `stat` says about a kernel thread: `PF_KTHREAD`, or a parent of pid 2 (kthreadd on the host).
#[derive(Debug, Clone, Copy, Default)]
struct KernelThreadHints {
    flagged: bool,
    child_of_kthreadd: bool,
}

/// Fills wchan, syscall (+ioctl), stack, counters and site for one thread. Returns false when the
/// thread vanished.
fn read_deep(
    root: &ProcRoot,
    pid: i32,
    t: &mut ThreadSnapshot,
    opts: &SnapshotOptions,
    stat: KernelThreadHints,
) -> bool {
    let mut kernel_thread = stat.flagged;
    let tid = t.tid;
    match root.read_wchan(pid, tid) {
        Ok(w) => t.wchan = w,
        Err(e) if e.is_gone() => return false,
        Err(e) => t.notes.extend(note_for(TaskFile::Wchan, &e)),
    }
    let mut syscall_name: Option<&'static str> = None;
    let syscall = root.read_syscall(pid, tid);
    // A kernel thread never entered through a syscall: its line reads `0 0x0 … 0x0` (nr 0, zero sp and pc),
    // which would decode as read (x86_64) or io_setup (aarch64).
    if let Ok(Syscall::InSyscall {
        nr: 0,
        args,
        sp: 0,
        pc: 0,
    }) = &syscall
    {
        kernel_thread |= args.iter().all(|&a| a == 0);
    }
    match syscall {
        Ok(_) if kernel_thread => {}
        Ok(line) => syscall_name = fill_syscall(root, pid, t, opts, line),
        Err(e) if e.is_gone() => return false,
        Err(e) => t.notes.extend(note_for(TaskFile::Syscall, &e)),
    }
    match root.read_stack_noting(pid, tid) {
        Ok(parsed) => {
            t.notes.extend(parsed.note());
            t.stack = parsed.frames;
        }
        Err(e) if e.is_gone() => return false,
        Err(e) => t.notes.extend(note_for(TaskFile::Stack, &e)),
    }
    match root.read_task_status(pid, tid) {
        Ok(s) => {
            t.voluntary_ctxt_switches = s.voluntary_ctxt_switches;
            t.nonvoluntary_ctxt_switches = s.nonvoluntary_ctxt_switches;
        }
        Err(e) if e.is_gone() => return false,
        Err(e) => t.notes.extend(note_for(TaskFile::Status, &e)),
    }
    // Right after a task goes to sleep it is still on the runqueue for a moment and wchan reads 0;
    // by now (after syscall and stack) it has settled.
    if t.wchan.is_none() && t.state == "D" {
        if let Ok(w) = root.read_wchan(pid, tid) {
            t.wchan = w;
        }
    }
    // A child of kthreadd whose stack starts in kthread (ppid 2 alone may be a container's pid 2).
    if !kernel_thread && stat.child_of_kthreadd && site::is_kernel_thread_stack(&t.stack) {
        kernel_thread = true;
        // What was decoded from task/<tid>/syscall is no system call.
        if let Some(SyscallInfo::Blocked { name, .. }) = &mut t.syscall {
            *name = None;
        }
        t.ioctl = None;
        t.syscall_files.clear();
    }
    if kernel_thread {
        t.notes.push(
            "kernel thread: task/<tid>/syscall names no system call; classified from the stack only"
                .to_string(),
        );
    }
    let origin = if kernel_thread {
        site::Origin::KernelThread {
            comm: &t.comm,
            workqueue: None,
        }
    } else {
        site::Origin::Syscall(syscall_name)
    };
    t.site = site::classify_from(origin, &t.stack, t.wchan.as_deref());
    if let (Some(site), Some(name)) = (&t.site, syscall_name) {
        if site.starts_with("process exit") && name != "exit" && name != "exit_group" {
            t.notes.push(format!(
                "task/<tid>/syscall says {name}, but the stack is on the exit path: the syscall number is stale"
            ));
        }
    }
    true
}

/// `t.syscall` (and, for an ioctl, `t.ioctl`; for a file syscall, `t.syscall_files`) from its syscall line;
/// the syscall's name when it has one.
fn fill_syscall(
    root: &ProcRoot,
    pid: i32,
    t: &mut ThreadSnapshot,
    opts: &SnapshotOptions,
    line: Syscall,
) -> Option<&'static str> {
    let tid = t.tid;
    match line {
        Syscall::Running => {
            t.syscall = Some(SyscallInfo::Running { running: true });
            None
        }
        Syscall::NotInSyscall { nr, sp, pc } => {
            t.syscall = Some(SyscallInfo::Blocked {
                nr,
                name: None,
                args: Vec::new(),
                sp: hex(sp),
                pc: hex(pc),
            });
            None
        }
        Syscall::InSyscall { nr, args, sp, pc } => {
            let syscall_name = syscalls::name(opts.arch, nr);
            if syscall_name == Some("ioctl") {
                // sys_ioctl(unsigned int fd, unsigned int cmd, …): only the low 32 bits count.
                let fd = i64::from(args[0] as u32 as i32);
                let request = args[1] as u32;
                let (fd_target, note) = fd_link(root, pid, tid, fd);
                t.notes.extend(note);
                let decoded = decode_ioctl(root, opts, request, fd_target.as_deref());
                t.ioctl = Some(decoded.into_info(fd, fd_target));
            }
            if let Some(name) = syscall_name.filter(|&n| n != "ioctl") {
                t.syscall_files = syscall_files(root, pid, tid, name, &args);
            }
            t.syscall = Some(SyscallInfo::Blocked {
                nr,
                name: syscall_name.map(str::to_string),
                args: args.iter().map(|&a| hex(a)).collect(),
                sp: hex(sp),
                pc: hex(pc),
            });
            syscall_name
        }
    }
}

/// Who blocks whom inside the process: every thread in D waiting for the mmap lock is `blocked_behind` the threads
/// in D inside a page fault (they hold the mmap lock, or their VMA's lock, while they sleep); every thread in D
/// waiting for an NVIDIA RM lock is `blocked_behind` the threads inside another RM call ([`crate::rm_lock`]).
pub fn link_blockers(threads: &mut [ThreadSnapshot]) {
    let holders: Vec<i32> = threads
        .iter()
        .filter(|t| t.state == "D" && site::mm_lock::holds_fault_lock(&t.stack, t.wchan.as_deref()))
        .map(|t| t.tid)
        .collect();
    for t in threads.iter_mut().filter(|t| t.state == "D") {
        let Some(class) = site::mm_lock::lock_class(&t.stack, t.wchan.as_deref()) else {
            continue;
        };
        t.waits_for = Some(class.to_string());
        t.blocked_behind = holders.iter().copied().filter(|&h| h != t.tid).collect();
    }
    crate::rm_lock::link_rm_lock_holders(threads);
}

/// A thread as its `stat` read it, before the choice of what is listed.
struct Seen {
    t: ThreadSnapshot,
    hints: KernelThreadHints,
    /// `stat` could not be read (gone or refused): listed only within the bounds, as it is.
    unread: bool,
}

/// The candidates for listing among `seen`, in the order they are read: `only_tid` and `wedged_tids` (always
/// listed), at most `max_in_d` threads in D (lowest tid first), at most `max_others` others (running first, then
/// the process's main thread, then lowest tid). Indices into `seen`, with whether each must be listed.
fn listing_order(seen: &[Seen], pid: i32, opts: &SnapshotOptions) -> Vec<(usize, bool)> {
    let must =
        |t: &ThreadSnapshot| Some(t.tid) == opts.only_tid || opts.wedged_tids.contains(&t.tid);
    let mut order: Vec<(usize, bool)> = (0..seen.len())
        .filter(|&i| must(&seen[i].t))
        .map(|i| (i, true))
        .collect();
    order.extend(
        (0..seen.len())
            .filter(|&i| !must(&seen[i].t) && seen[i].t.state == "D")
            .take(opts.max_in_d)
            .map(|i| (i, false)),
    );
    let mut others: Vec<usize> = (0..seen.len())
        .filter(|&i| !must(&seen[i].t) && seen[i].t.state != "D")
        .collect();
    others.sort_by_key(|&i| (seen[i].t.state != "R", seen[i].t.tid != pid, seen[i].t.tid));
    order.extend(others.into_iter().take(opts.max_others).map(|i| (i, false)));
    order
}

/// What a listed thread adds to an incident, estimated: its compact JSON twice over (an incident is written
/// indented, five levels deep), so that the estimate stays above the bytes it costs.
fn estimated_bytes(t: &ThreadSnapshot) -> usize {
    serde_json::to_vec(t).map_or(4096, |v| 2 * v.len())
}

/// The threads not listed, counted by state and (where read) wchan.
fn summarize(
    root: &ProcRoot,
    pid: i32,
    unlisted: Vec<&Seen>,
    opts: &SnapshotOptions,
) -> Option<crate::snapshot::ThreadsSummary> {
    use std::collections::BTreeMap;
    if unlisted.is_empty() {
        return None;
    }
    let mut by_state: BTreeMap<String, usize> = BTreeMap::new();
    let mut groups: BTreeMap<(String, Option<String>), usize> = BTreeMap::new();
    for (i, s) in unlisted.iter().enumerate() {
        let state = if s.unread || s.t.state.is_empty() {
            "gone".to_string()
        } else {
            s.t.state.clone()
        };
        *by_state.entry(state.clone()).or_default() += 1;
        // A running thread has no wchan; one that vanished has none to read.
        let wchan = (i < MAX_SUMMARY_WCHAN_READS && state != "R" && state != "gone")
            .then(|| root.read_wchan(pid, s.t.tid).ok().flatten())
            .flatten();
        *groups.entry((state, wchan)).or_default() += 1;
    }
    let mut groups: Vec<crate::snapshot::ThreadGroup> = groups
        .into_iter()
        .map(|((state, wchan), threads)| crate::snapshot::ThreadGroup {
            state,
            wchan,
            threads,
        })
        .collect();
    groups.sort_by(|a, b| {
        b.threads
            .cmp(&a.threads)
            .then_with(|| a.state.cmp(&b.state))
    });
    let other_groups = groups
        .iter()
        .skip(MAX_SUMMARY_GROUPS)
        .map(|g| g.threads)
        .sum();
    groups.truncate(MAX_SUMMARY_GROUPS);
    Some(crate::snapshot::ThreadsSummary {
        threads: unlisted.len(),
        by_state,
        groups,
        other_groups,
        why: format!(
            "a snapshot lists the wedged threads, at most {} in D and {} others, within {} KiB; the rest are \
             counted from their stat and wchan (wchan read for at most {MAX_SUMMARY_WCHAN_READS}), their stacks, \
             syscalls and fds not read",
            opts.max_in_d,
            opts.max_others,
            opts.max_bytes >> 10
        ),
    })
}

/// Snapshot of every thread of `pid` under `root` (bounded: see the module map).
pub fn snapshot_process(
    root: &ProcRoot,
    pid: i32,
    opts: &SnapshotOptions,
) -> Result<ProcessSnapshot> {
    use nix::time::ClockId;
    let monotonic_ns = clock_ns(ClockId::CLOCK_MONOTONIC);
    let boottime_ns = clock_ns(ClockId::CLOCK_BOOTTIME);
    if pid <= 0 {
        return Err(Error::NoSuchProcess {
            pid,
            root: root.path().to_path_buf(),
        });
    }
    let tids = thread_ids(root, pid, opts)?;
    // Every thread's stat first (cheap): the state decides what is listed and read further.
    let seen: Vec<Seen> = tids
        .into_iter()
        .map(|tid| read_stat(root, pid, tid))
        .collect();
    let (mut threads, listed, mut spent) = read_listed(root, pid, &seen, opts);
    read_rm_lock_holders(root, pid, &mut threads, opts, &mut spent);
    threads.sort_by_key(|t| t.tid);
    link_blockers(&mut threads);
    let unlisted: Vec<&Seen> = seen
        .iter()
        .zip(&listed)
        .filter(|(_, l)| !**l)
        .map(|(s, _)| s)
        .collect();
    // After the listed threads' evidence: counting the rest reads one wchan each.
    let summarized = summarize(root, pid, unlisted, opts);
    if threads.iter().all(|t| t.gone) && !root.exists(pid) {
        return Err(Error::NoSuchProcess {
            pid,
            root: root.path().to_path_buf(),
        });
    }
    let notes = process_notes(&threads, summarized.as_ref());
    Ok(ProcessSnapshot {
        pid,
        arch: opts.arch.as_str().to_string(),
        monotonic_ns,
        boottime_ns,
        threads,
        notes,
        summarized,
    })
}

/// The threads to snapshot: every task of the process, or the one asked for.
fn thread_ids(root: &ProcRoot, pid: i32, opts: &SnapshotOptions) -> Result<Vec<i32>> {
    Ok(match opts.only_tid {
        Some(tid) => {
            // Make sure the process exists, then take the one thread (it may not be listed yet).
            root.tasks(pid)?;
            vec![tid]
        }
        None => root.tasks(pid)?,
    })
}

/// One thread's stat: its comm, state and counters, or why it could not be read.
fn read_stat(root: &ProcRoot, pid: i32, tid: i32) -> Seen {
    let mut t = ThreadSnapshot {
        tid,
        ..ThreadSnapshot::default()
    };
    let mut hints = KernelThreadHints::default();
    let mut unread = false;
    match root.read_task_stat(pid, tid) {
        Ok(stat) => {
            hints = KernelThreadHints {
                flagged: stat.is_kernel_thread(),
                child_of_kthreadd: stat.ppid == 2,
            };
            t.comm = stat.comm.clone();
            t.state = stat.state.to_string();
            t.cpu_ticks = Some(stat.cpu_ticks());
            t.processor = stat.processor;
        }
        Err(e) if e.is_gone() => {
            t.gone = true;
            unread = true;
        }
        Err(e) => {
            t.notes.extend(note_for(TaskFile::Stat, &e));
            unread = true;
        }
    }
    Seen { t, hints, unread }
}

/// The listed threads, read in their order until the byte budget is spent (the wedged ones whatever it
/// costs); every other thread is counted in the summary. Returns them, which of `seen` were listed, and the
/// bytes spent.
fn read_listed(
    root: &ProcRoot,
    pid: i32,
    seen: &[Seen],
    opts: &SnapshotOptions,
) -> (Vec<ThreadSnapshot>, Vec<bool>, usize) {
    let mut listed = vec![false; seen.len()];
    let mut spent = 0usize;
    let mut threads = Vec::new();
    for (i, must) in listing_order(seen, pid, opts) {
        if !must && spent >= opts.max_bytes {
            continue;
        }
        let Seen { t, hints, unread } = &seen[i];
        let mut t = t.clone();
        let deep = opts.all_threads || opts.only_tid.is_some() || t.state == "D" || must;
        if !unread && deep && !read_deep(root, pid, &mut t, opts, *hints) {
            t.gone = true;
        }
        spent += estimated_bytes(&t);
        listed[i] = true;
        threads.push(t);
    }
    (threads, listed, spent)
}

/// A thread waiting for an RM lock waits behind a thread inside another RM call, which is often not in D
/// (running, pinning pages, asleep on a GSP reply): read the others too, so the holder can be named.
fn read_rm_lock_holders(
    root: &ProcRoot,
    pid: i32,
    threads: &mut [ThreadSnapshot],
    opts: &SnapshotOptions,
    spent: &mut usize,
) {
    if opts.all_threads || opts.only_tid.is_some() || !crate::rm_lock::any_rm_lock_waiter(threads) {
        return;
    }
    for t in threads.iter_mut() {
        if *spent >= opts.max_bytes {
            break;
        }
        if !t.gone && t.state != "D" && t.syscall.is_none() {
            // A thread that vanishes now holds nothing; its stat (read above) stays the record of it.
            let before = estimated_bytes(t);
            read_deep(root, pid, t, opts, KernelThreadHints::default());
            *spent += estimated_bytes(t).saturating_sub(before);
        }
    }
}

/// One process-level note per missing privilege, so a reader sees it without scanning threads; and where
/// an RM lock's holder may hide among the threads counted but not read.
fn process_notes(threads: &[ThreadSnapshot], summarized: Option<&ThreadsSummary>) -> Vec<String> {
    let mut notes: Vec<String> = Vec::new();
    if let Some(summary) = summarized.filter(|_| crate::rm_lock::any_rm_lock_waiter(threads)) {
        notes.push(format!(
            "threads wait for an NVIDIA RM lock: its holder may be among the {} threads counted but not read",
            summary.threads
        ));
    }
    for t in threads {
        for n in &t.notes {
            if n.contains("needs ") && !notes.contains(n) {
                notes.push(n.clone());
            }
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeProc;

    /// A stack as deep as `/proc/<tid>/stack` shows (64 frames), with long names.
    fn deep_stack() -> String {
        (0..64)
            .map(|i| format!("[<0>] a_rather_long_kernel_function_name_number_{i:02}+0x1a4/0x3c0 [some_module]\n"))
            .collect()
    }

    /// Issue 35: a process that puts hundreds of threads with the deepest stacks in D cannot make a snapshot
    /// larger than its byte budget; the wedged thread is listed whatever the budget, the rest are counted.
    #[test]
    fn the_byte_budget_bounds_a_snapshot_of_deep_stacks() {
        let fake = FakeProc::new();
        let pid = 6000;
        fake.process(pid).comm("deep");
        let total = 600;
        for i in 0..total {
            fake.task(pid, pid + i)
                .comm("d")
                .state(if i == 0 { 'S' } else { 'D' })
                .wchan("rwsem_down_write_slowpath")
                .syscall("16 0x3 0xc020462a 0x7ffd 0x0 0x0 0x0 0x7ffd 0x7f00")
                .stack(&deep_stack());
        }
        let wedged = pid + total - 1;
        let opts = SnapshotOptions {
            all_threads: true,
            wedged_tids: vec![wedged],
            ..SnapshotOptions::default()
        };
        let snap = snapshot_process(&fake.root(), pid, &opts).unwrap();
        let listed_bytes: usize = snap.threads.iter().map(estimated_bytes).sum();
        let one = estimated_bytes(&snap.threads[0]);
        assert!(
            listed_bytes <= opts.max_bytes + 2 * one,
            "{listed_bytes} bytes listed, budget {}",
            opts.max_bytes
        );
        assert!(snap.threads.len() < opts.max_in_d, "{}", snap.threads.len());
        let w = snap.threads.iter().find(|t| t.tid == wedged).unwrap();
        assert_eq!(w.stack.len(), 64);
        let summary = snap.summarized.as_ref().unwrap();
        assert_eq!(snap.thread_count(), total as usize);
        assert_eq!(snap.threads_in_d(), total as usize - 1);
        assert_eq!(summary.by_state.values().sum::<usize>(), summary.threads);
        assert!(
            summary
                .describe()
                .contains(" D in rwsem_down_write_slowpath"),
            "{}",
            summary.describe()
        );
        // The estimate stays above what the thread costs in an incident (written indented, five levels deep).
        let pretty =
            serde_json::to_string_pretty(&serde_json::json!({"a": {"b": {"c": [[w]]}}})).unwrap();
        assert!(
            estimated_bytes(w) >= pretty.len(),
            "{} < {}",
            estimated_bytes(w),
            pretty.len()
        );
        // Within the bounds nothing is summarized.
        let small = SnapshotOptions {
            max_in_d: 1000,
            max_bytes: usize::MAX,
            ..opts
        };
        let snap = snapshot_process(&fake.root(), pid, &small).unwrap();
        assert_eq!(
            (snap.threads.len(), snap.summarized),
            (total as usize, None)
        );
    }
}
