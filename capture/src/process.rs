//! `snapshot_process`: every thread of one process, read at one moment from outside.
//!
//! Cheap first: `stat` of every task. Then, only for threads in `D` (or all threads on request, or the
//! one `only_tid`): `wchan`, `syscall`, `stack`, `status` (context-switch counters), and for ioctl the fd
//! link, decoded against the device's table. A thread that vanishes mid-read is marked `gone`; a refused
//! read leaves the field empty with a note naming the missing privilege.

use crate::arch::Arch;
use crate::decode::device::{self, DeviceKind};
use crate::decode::ioctl;
use crate::error::{Error, Result};
use crate::parse::syscall::Syscall;
use crate::proc_root::{ProcRoot, TaskFile};
use crate::site;
use crate::snapshot::{ProcessSnapshot, SyscallFile, SyscallInfo, ThreadSnapshot};
use crate::syscalls;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotOptions {
    /// Read wchan/syscall/stack for every thread, not only those in D.
    pub all_threads: bool,
    /// Only this thread (read in full whatever its state).
    pub only_tid: Option<i32>,
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
        .filter(|t| t.state == "D" && site::holds_fault_lock(&t.stack, t.wchan.as_deref()))
        .map(|t| t.tid)
        .collect();
    for t in threads.iter_mut().filter(|t| t.state == "D") {
        let Some(class) = site::lock_class(&t.stack, t.wchan.as_deref()) else {
            continue;
        };
        t.waits_for = Some(class.to_string());
        t.blocked_behind = holders.iter().copied().filter(|&h| h != t.tid).collect();
    }
    crate::rm_lock::link_rm_lock_holders(threads);
}

/// Snapshot of every thread of `pid` under `root`.
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
    let tids = match opts.only_tid {
        Some(tid) => {
            // Make sure the process exists, then take the one thread (it may not be listed yet).
            root.tasks(pid)?;
            vec![tid]
        }
        None => root.tasks(pid)?,
    };
    let mut threads = Vec::with_capacity(tids.len());
    for tid in tids {
        let mut t = ThreadSnapshot {
            tid,
            ..ThreadSnapshot::default()
        };
        let hints: KernelThreadHints;
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
                threads.push(t);
                continue;
            }
            Err(e) => {
                t.notes.extend(note_for(TaskFile::Stat, &e));
                threads.push(t);
                continue;
            }
        }
        let deep = opts.all_threads || opts.only_tid.is_some() || t.state == "D";
        if deep && !read_deep(root, pid, &mut t, opts, hints) {
            t.gone = true;
        }
        threads.push(t);
    }
    // A thread waiting for an RM lock waits behind a thread inside another RM call, which is often not in D
    // (running, pinning pages, asleep on a GSP reply): read the others too, so the holder can be named.
    if !opts.all_threads && opts.only_tid.is_none() && crate::rm_lock::any_rm_lock_waiter(&threads)
    {
        for t in threads.iter_mut() {
            if !t.gone && t.state != "D" && t.syscall.is_none() {
                // A thread that vanishes now holds nothing; its stat (read above) stays the record of it.
                read_deep(root, pid, t, opts, KernelThreadHints::default());
            }
        }
    }
    link_blockers(&mut threads);
    if threads.iter().all(|t| t.gone) && !root.exists(pid) {
        return Err(Error::NoSuchProcess {
            pid,
            root: root.path().to_path_buf(),
        });
    }
    // One process-level note per missing privilege, so a reader sees it without scanning threads.
    let mut notes: Vec<String> = Vec::new();
    for t in &threads {
        for n in &t.notes {
            if n.contains("needs ") && !notes.contains(n) {
                notes.push(n.clone());
            }
        }
    }
    Ok(ProcessSnapshot {
        pid,
        arch: opts.arch.as_str().to_string(),
        monotonic_ns,
        boottime_ns,
        threads,
        notes,
    })
}
