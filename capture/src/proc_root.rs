//! `ProcRoot`: the one place that opens files under a proc root. The default is the live `/proc`; any
//! directory laid out the same way (a recorded or hand-built fake tree) works through [`ProcRoot::new`].
//!
//! Every read of a kernel file by the workspace goes through here: per-task files, fd links and the
//! identity of what they point at, `children`, `ns/pid`, and the host files (meminfo, loadavg, pressure,
//! boot id, sysctls). Each read is bounded (size, entry count).
//!
//! Only files that cannot block on the target are read here: stat, status, wchan, syscall, stack, fd
//! links, cgroup, ns links. Never cmdline, environ, maps, smaps or mem: they take the target's
//! mmap_lock, which a wedged driver call may hold forever (procfs-facts.md §6). Those, and the NVIDIA
//! driver's files (behind the RM lock), are only *named* here ([`ProcRoot::risky_path`]): a sacrificial
//! child with a deadline opens them (agent/src/probe/).
//!
//! Errors are classified: ENOENT/ESRCH → [`Error::Gone`] (the task exited; a marker, not a failure);
//! EACCES/EPERM → [`Error::PermissionDenied`] naming the privilege the file needs.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;

use crate::parse::Parse;
use crate::parse::{
    self, cgroup::CgroupLine, fd::FdTarget, pressure::Psi, stat::Stat, status::Status,
};
use crate::snapshot::StackFrame;

/// The workspace's one "/proc" outside tests, besides breadcrumb's (a worker reading its own identity
/// cannot depend on capture).
const DEFAULT_ROOT: &str = "/proc";

/// Per-file read limits: far above what the kernel prints, small enough to bound a hostile tree.
const SMALL: usize = 4096;
const STATUS_LIMIT: usize = 16 * 1024;
const STACK_LIMIT: usize = 64 * 1024;
const CGROUP_LIMIT: usize = 64 * 1024;
const MEMINFO_LIMIT: usize = 64 * 1024;
/// `children` of one thread: up to ~50k pids of 10 digits and a space.
const CHILDREN_LIMIT: usize = 512 * 1024;
/// `mountinfo`: thousands of mounts on a container host.
const MOUNTINFO_LIMIT: usize = 4 << 20;
/// `kallsyms`: ~10 MB on a distribution kernel with every symbol.
const KALLSYMS_LIMIT: usize = 64 << 20;

const PTRACE_READ: &str = "ptrace read access (same user or CAP_SYS_PTRACE)";
const WORLD_READABLE: &str = "nothing (world-readable)";

/// A per-task file and what reading it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskFile {
    Stat,
    Status,
    Wchan,
    Syscall,
    Stack,
    /// `sum_exec_runtime run_delay pcount`: changes whenever the task runs.
    Schedstat,
    /// The scheduler's fields (`se.exec_start`: when the task last ran).
    Sched,
}

impl TaskFile {
    pub fn name(self) -> &'static str {
        match self {
            TaskFile::Stat => "stat",
            TaskFile::Status => "status",
            TaskFile::Wchan => "wchan",
            TaskFile::Syscall => "syscall",
            TaskFile::Stack => "stack",
            TaskFile::Schedstat => "schedstat",
            TaskFile::Sched => "sched",
        }
    }

    /// The privilege named when the read is refused (procfs-facts.md §2).
    pub fn needs(self) -> &'static str {
        match self {
            TaskFile::Stack => "CAP_SYS_ADMIN and ptrace attach access (same user or CAP_SYS_PTRACE; Yama ptrace_scope applies)",
            TaskFile::Syscall => "ptrace attach access (same user or CAP_SYS_PTRACE; Yama ptrace_scope applies)",
            TaskFile::Wchan
            | TaskFile::Stat
            | TaskFile::Status
            | TaskFile::Schedstat
            | TaskFile::Sched => {
                "ptrace read access (same user or CAP_SYS_PTRACE)"
            }
        }
    }

    fn limit(self) -> usize {
        match self {
            TaskFile::Stat | TaskFile::Wchan | TaskFile::Syscall | TaskFile::Schedstat => SMALL,
            TaskFile::Status | TaskFile::Sched => STATUS_LIMIT,
            TaskFile::Stack => STACK_LIMIT,
        }
    }
}

/// A file only a sacrificial child with a deadline may open: reading it can block forever on the
/// target's mmap lock or on the NVIDIA driver's locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RiskyFile {
    /// `<pid>/cmdline` (the target's mmap lock).
    Cmdline(i32),
    /// `<pid>/mem`, read at an ioctl's pointer (the target's mmap lock, killable; may queue behind a writer).
    Mem(i32),
    /// `<pid>/maps` (the target's mmap lock, on kernels that take it to list mappings).
    Maps(i32),
    /// `<pid>/root`: the process's root directory, under which a helper opens the files its maps name (the
    /// files may sit on a hung filesystem).
    Root(i32),
    /// `driver/nvidia/version` (the RM lock).
    NvidiaVersion,
    /// `driver/nvidia/gpus`: a directory, one subdirectory per GPU with an `information` file.
    NvidiaGpus,
}

/// One open file of a process, as its fd link shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FdLink {
    pub fd: i64,
    pub target: FdTarget,
}

/// The identity of the file behind an fd link (stat of the magic link, without opening it), and the
/// link itself: opening it reaches the file even when no path does (unlinked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldFile {
    pub fd: i64,
    pub dev: u64,
    pub ino: u64,
    pub link: PathBuf,
}

/// A pressure file: parsed, and the text as the kernel printed it (what reports keep).
#[derive(Debug, Clone, PartialEq)]
pub struct Pressure {
    pub psi: Psi,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcRoot {
    root: PathBuf,
}

impl std::fmt::Display for ProcRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.root.display().fmt(f)
    }
}

impl Default for ProcRoot {
    fn default() -> Self {
        ProcRoot {
            root: PathBuf::from(DEFAULT_ROOT),
        }
    }
}

pub(crate) fn classify_io(path: &Path, e: std::io::Error, needs: &'static str) -> Error {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ESRCH) => Error::Gone {
            path: path.to_path_buf(),
        },
        Some(libc::EACCES) | Some(libc::EPERM) => Error::PermissionDenied {
            path: path.to_path_buf(),
            needs,
        },
        _ if e.kind() == ErrorKind::NotFound => Error::Gone {
            path: path.to_path_buf(),
        },
        _ if e.kind() == ErrorKind::PermissionDenied => Error::PermissionDenied {
            path: path.to_path_buf(),
            needs,
        },
        _ => Error::Io {
            path: path.to_path_buf(),
            source: e,
        },
    }
}

/// Reads at most `limit` bytes; more is an error (no real /proc file of these kinds is that large).
fn read_bounded(path: &Path, limit: usize, needs: &'static str) -> Result<Vec<u8>> {
    let file = File::open(path).map_err(|e| classify_io(path, e, needs))?;
    let mut buf = Vec::with_capacity(limit.min(4096));
    file.take(limit as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| classify_io(path, e, needs))?;
    if buf.len() > limit {
        return Err(Error::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    Ok(buf)
}

/// A host file (not a task's): missing means absent (no PSI, no such sysctl), not "the task exited".
fn read_host_file(path: &Path, limit: usize) -> Result<Vec<u8>> {
    read_bounded(path, limit, WORLD_READABLE).map_err(|e| match e {
        Error::Gone { path } => Error::Io {
            path,
            source: std::io::Error::from(ErrorKind::NotFound),
        },
        other => other,
    })
}

fn parse_fd_name(name: &std::ffi::OsStr) -> Option<i32> {
    let s = name.to_str()?;
    if s.is_empty() || s.len() > 10 || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_id(name: &std::ffi::OsStr) -> Option<i32> {
    let s = name.to_str()?;
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().filter(|&n: &i32| n > 0)
}

impl ProcRoot {
    /// A proc tree rooted at `dir` (a fake or recorded tree laid out like `/proc`).
    pub fn new(dir: impl Into<PathBuf>) -> ProcRoot {
        ProcRoot { root: dir.into() }
    }

    /// Whether this is the running kernel's own `/proc` (not a fake or recorded tree): only then do
    /// kernel sources (the proc connector, taskstats) describe it.
    pub fn is_live(&self) -> bool {
        self.root == Path::new(DEFAULT_ROOT)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.root
    }

    /// Whether the root is a directory at all (a mistyped `--proc-root`).
    pub fn is_dir(&self) -> bool {
        self.root.is_dir()
    }

    pub fn is_default(&self) -> bool {
        self.root == Path::new(DEFAULT_ROOT)
    }

    pub(crate) fn pid_dir(&self, pid: i32) -> PathBuf {
        self.root.join(pid.to_string())
    }

    pub(crate) fn task_dir(&self, pid: i32) -> PathBuf {
        self.pid_dir(pid).join("task")
    }

    pub(crate) fn task_path(&self, pid: i32, tid: i32, file: TaskFile) -> PathBuf {
        self.task_dir(pid).join(tid.to_string()).join(file.name())
    }

    /// Whether `/proc/<pid>` exists (the process has not been reaped).
    pub fn exists(&self, pid: i32) -> bool {
        pid > 0 && self.pid_dir(pid).join("stat").exists()
    }

    /// Thread ids of `pid`, sorted. The process gone → [`Error::NoSuchProcess`].
    pub fn tasks(&self, pid: i32) -> Result<Vec<i32>> {
        let dir = self.task_dir(pid);
        let entries = std::fs::read_dir(&dir).map_err(|e| {
            match classify_io(&dir, e, "ptrace read access") {
                Error::Gone { .. } => Error::NoSuchProcess {
                    pid,
                    root: self.root.clone(),
                },
                other => other,
            }
        })?;
        let mut tids: Vec<i32> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| parse_id(&e.file_name()))
            .collect();
        tids.sort_unstable();
        Ok(tids)
    }

    /// Process ids under the root, sorted (for host-wide censuses).
    pub fn pids(&self) -> Result<Vec<i32>> {
        let entries = std::fs::read_dir(&self.root).map_err(|e| Error::Io {
            path: self.root.clone(),
            source: e,
        })?;
        let mut pids: Vec<i32> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| parse_id(&e.file_name()))
            .collect();
        pids.sort_unstable();
        Ok(pids)
    }

    pub fn read_task_file(&self, pid: i32, tid: i32, file: TaskFile) -> Result<Vec<u8>> {
        read_bounded(&self.task_path(pid, tid, file), file.limit(), file.needs())
    }

    /// Opens a task's stat file to keep (the hot scan re-reads it with pread).
    pub fn open_task_stat(&self, pid: i32, tid: i32) -> Result<File> {
        self.open_task_file(pid, tid, TaskFile::Stat)
    }

    /// Opens a per-task file to keep and re-read with pread.
    pub fn open_task_file(&self, pid: i32, tid: i32, file: TaskFile) -> Result<File> {
        let path = self.task_path(pid, tid, file);
        File::open(&path).map_err(|e| classify_io(&path, e, file.needs()))
    }

    pub fn read_task_stat(&self, pid: i32, tid: i32) -> Result<Stat> {
        parse::stat::Stat::parse(&self.read_task_file(pid, tid, TaskFile::Stat)?)
    }

    pub fn read_task_status(&self, pid: i32, tid: i32) -> Result<Status> {
        parse::status::Status::parse(&self.read_task_file(pid, tid, TaskFile::Status)?)
    }

    pub fn read_wchan(&self, pid: i32, tid: i32) -> Result<Option<String>> {
        parse::wchan::parse(&self.read_task_file(pid, tid, TaskFile::Wchan)?)
    }

    pub fn read_syscall(&self, pid: i32, tid: i32) -> Result<parse::syscall::Syscall> {
        parse::syscall::Syscall::parse(&self.read_task_file(pid, tid, TaskFile::Syscall)?)
    }

    pub fn read_stack(&self, pid: i32, tid: i32) -> Result<Vec<StackFrame>> {
        parse::stack::parse(&self.read_task_file(pid, tid, TaskFile::Stack)?)
    }

    /// [`Self::read_stack`] with the lines that were not frames (skipped, for a note).
    pub fn read_stack_noting(&self, pid: i32, tid: i32) -> Result<parse::stack::Parsed> {
        parse::stack::parse_noting(&self.read_task_file(pid, tid, TaskFile::Stack)?)
    }

    /// Process-level stat (`/proc/<pid>/stat`): a missing file means no such process.
    pub fn read_stat(&self, pid: i32) -> Result<Stat> {
        let path = self.pid_dir(pid).join("stat");
        let b = read_bounded(&path, SMALL, TaskFile::Stat.needs()).map_err(|e| match e {
            Error::Gone { .. } => Error::NoSuchProcess {
                pid,
                root: self.root.clone(),
            },
            other => other,
        })?;
        parse::stat::Stat::parse(&b)
    }

    /// The link target of fd `fd`, read through the thread (`task/<tid>/fd`, the thread's own fd
    /// table) and, failing that, the process.
    pub fn fd_target(&self, pid: i32, tid: Option<i32>, fd: i64) -> Result<FdTarget> {
        if fd < 0 {
            return Err(Error::Parse {
                what: "fd",
                why: format!("negative fd {fd}"),
            });
        }
        let mut paths = Vec::with_capacity(2);
        if let Some(tid) = tid {
            paths.push(
                self.task_dir(pid)
                    .join(tid.to_string())
                    .join("fd")
                    .join(fd.to_string()),
            );
        }
        paths.push(self.pid_dir(pid).join("fd").join(fd.to_string()));
        let mut last = None;
        for path in paths {
            match std::fs::read_link(&path) {
                Ok(target) => {
                    return parse::fd::parse_link(target.as_os_str().as_encoded_bytes());
                }
                Err(e) => {
                    last = Some(classify_io(
                        &path,
                        e,
                        "ptrace read access (same user or CAP_SYS_PTRACE)",
                    ))
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::Gone {
            path: self.pid_dir(pid),
        }))
    }

    pub fn cgroup(&self, pid: i32) -> Result<Vec<CgroupLine>> {
        let path = self.pid_dir(pid).join("cgroup");
        parse::cgroup::parse(&read_bounded(&path, CGROUP_LIMIT, WORLD_READABLE)?)
    }

    /// The open files of `pid` (at most `max` links read), each link parsed; unreadable links (the fd
    /// closed meanwhile) are skipped.
    pub fn fd_links(&self, pid: i32, max: usize) -> Result<Vec<FdLink>> {
        let mut links = Vec::new();
        self.find_fd_link(pid, max, |link| {
            links.push(link.clone());
            false
        })?;
        Ok(links)
    }

    /// The first fd link of `pid` that `wanted` accepts, reading at most `max` links and none after
    /// the match.
    pub fn find_fd_link(
        &self,
        pid: i32,
        max: usize,
        mut wanted: impl FnMut(&FdLink) -> bool,
    ) -> Result<Option<FdLink>> {
        for (fd, link) in self.fd_entries(pid)?.take(max) {
            let Ok(target) = std::fs::read_link(&link) else {
                continue;
            };
            let Ok(target) = parse::fd::parse_link(target.as_os_str().as_encoded_bytes()) else {
                continue;
            };
            let link = FdLink { fd, target };
            if wanted(&link) {
                return Ok(Some(link));
            }
        }
        Ok(None)
    }

    /// The (dev, inode) of every file `pid` holds open (stat, not lstat, of each `fd/N`: the open
    /// file's inode, without opening it), at most `max` links stated.
    pub fn held_files(&self, pid: i32, max: usize) -> Result<Vec<HeldFile>> {
        let mut held = Vec::new();
        for (fd, link) in self.fd_entries(pid)?.take(max) {
            if let Ok(meta) = std::fs::metadata(&link) {
                held.push(HeldFile {
                    fd,
                    dev: meta.dev(),
                    ino: meta.ino(),
                    link,
                });
            }
        }
        Ok(held)
    }

    /// The raw target of fd link `fd` of `pid` (a path, possibly ending in ` (deleted)`, or
    /// `socket:[…]`-style), unparsed: for opening what it names.
    pub fn fd_link_target(&self, pid: i32, fd: i64) -> Result<PathBuf> {
        let path = self.pid_dir(pid).join("fd").join(fd.to_string());
        std::fs::read_link(&path).map_err(|e| classify_io(&path, e, PTRACE_READ))
    }

    /// The target of `<pid>/exe` (the executable's path, possibly ending in ` (deleted)`). The kernel answers
    /// from the task's `exe_file` under RCU: no mmap lock is taken.
    pub fn exe_link(&self, pid: i32) -> Result<PathBuf> {
        let path = self.pid_dir(pid).join("exe");
        std::fs::read_link(&path).map_err(|e| classify_io(&path, e, PTRACE_READ))
    }

    /// The size the kernel reports for `<pid>/fd`: the number of open fds (one stat, no listing), 0
    /// on kernels that do not report it.
    pub fn fd_count(&self, pid: i32) -> Result<u64> {
        let path = self.pid_dir(pid).join("fd");
        std::fs::metadata(&path)
            .map(|m| m.len())
            .map_err(|e| classify_io(&path, e, PTRACE_READ))
    }

    /// `(fd, link path)` of each entry of `<pid>/fd`, listed lazily.
    fn fd_entries(&self, pid: i32) -> Result<impl Iterator<Item = (i64, PathBuf)>> {
        let dir = self.pid_dir(pid).join("fd");
        let entries = std::fs::read_dir(&dir).map_err(|e| classify_io(&dir, e, PTRACE_READ))?;
        Ok(entries
            .flatten()
            .filter_map(|e| Some((i64::from(parse_fd_name(&e.file_name())?), e.path()))))
    }

    /// The fd numbers of `pid` (at most `max`), unread.
    pub fn fds(&self, pid: i32, max: usize) -> Result<Vec<i64>> {
        Ok(self.fd_entries(pid)?.take(max).map(|(fd, _)| fd).collect())
    }

    /// `fdinfo/<fd>` of `pid` (`pos`, `flags`, `mnt_id`, `ino`): read without touching the file itself,
    /// unlike a stat of the fd link (a getattr can wait on a hung network filesystem).
    pub fn fdinfo(&self, pid: i32, fd: i64) -> Result<Vec<u8>> {
        let path = self.pid_dir(pid).join("fdinfo").join(fd.to_string());
        read_bounded(&path, SMALL, PTRACE_READ)
    }

    /// `mountinfo` of `pid` (its mount namespace's mounts, with their devices), bounded.
    pub fn mountinfo(&self, pid: i32) -> Result<Vec<u8>> {
        let path = self.pid_dir(pid).join("mountinfo");
        read_bounded(&path, MOUNTINFO_LIMIT, WORLD_READABLE)
    }

    /// `kallsyms` (the kernel's and modules' symbols; addresses read as zero without CAP_SYSLOG).
    pub fn kallsyms(&self) -> Result<Vec<u8>> {
        read_bounded(
            &self.root.join("kallsyms"),
            KALLSYMS_LIMIT,
            "CAP_SYSLOG for the addresses (kptr_restrict)",
        )
    }

    /// The children of thread `tid` of `pid` (`task/<tid>/children`; needs CONFIG_PROC_CHILDREN).
    pub fn children(&self, pid: i32, tid: i32) -> Result<Vec<i32>> {
        let path = self.task_dir(pid).join(tid.to_string()).join("children");
        let bytes = read_bounded(&path, CHILDREN_LIMIT, PTRACE_READ)?;
        Ok(parse::children::parse(&bytes).collect())
    }

    /// Whether the kernel has `task/<tid>/children` at all (CONFIG_PROC_CHILDREN), judged on `pid`.
    pub fn has_children_files(&self, pid: i32) -> bool {
        self.task_dir(pid)
            .join(pid.to_string())
            .join("children")
            .exists()
    }

    /// `meminfo` as name → value (kB for most, a count for `HugePages_*`).
    pub fn meminfo(&self) -> Result<BTreeMap<String, u64>> {
        let path = self.root.join("meminfo");
        parse::meminfo::parse(&read_host_file(&path, MEMINFO_LIMIT)?)
    }

    /// `loadavg`, trimmed (kept as the kernel printed it).
    pub fn loadavg(&self) -> Result<String> {
        let path = self.root.join("loadavg");
        let bytes = read_host_file(&path, SMALL)?;
        Ok(String::from_utf8_lossy(&bytes).trim().to_string())
    }

    /// `pressure/<resource>` (one of [`parse::pressure::RESOURCES`]); a file that does not parse is an error.
    pub fn pressure(&self, resource: &str) -> Result<Pressure> {
        if !parse::pressure::RESOURCES.contains(&resource) {
            return Err(Error::Parse {
                what: "pressure",
                why: format!("unknown resource {resource:?}"),
            });
        }
        let path = self.root.join("pressure").join(resource);
        let bytes = read_host_file(&path, SMALL)?;
        Ok(Pressure {
            psi: parse::pressure::Psi::parse(&bytes)?,
            text: String::from_utf8_lossy(&bytes).into_owned(),
        })
    }

    /// `sys/kernel/random/boot_id`.
    pub fn boot_id(&self) -> Result<String> {
        let path = self.root.join("sys/kernel/random/boot_id");
        parse::boot_id::parse(&read_host_file(&path, SMALL)?)
    }

    /// A sysctl by its dotted name (`kernel.hung_task_timeout_secs`), trimmed.
    pub fn sysctl(&self, name: &str) -> Result<String> {
        if name.is_empty() || name.split('.').any(|part| part.is_empty() || part == "..") {
            return Err(Error::Parse {
                what: "sysctl name",
                why: format!("{name:?}"),
            });
        }
        let path = self.root.join("sys").join(name.replace('.', "/"));
        let bytes = read_host_file(&path, SMALL)?;
        Ok(String::from_utf8_lossy(&bytes).trim().to_string())
    }

    /// Where a risky file is. Never open it in the agent: only a sacrificial child with a deadline
    /// may (agent/src/probe/), because the read can sleep forever on a lock the wedge holds.
    pub fn risky_path(&self, file: RiskyFile) -> PathBuf {
        match file {
            RiskyFile::Cmdline(pid) => self.pid_dir(pid).join("cmdline"),
            RiskyFile::Mem(pid) => self.pid_dir(pid).join("mem"),
            RiskyFile::Maps(pid) => self.pid_dir(pid).join("maps"),
            RiskyFile::Root(pid) => self.pid_dir(pid).join("root"),
            RiskyFile::NvidiaVersion => self.root.join("driver/nvidia/version"),
            RiskyFile::NvidiaGpus => self.root.join("driver/nvidia/gpus"),
        }
    }

    /// The pid namespace inode (`ns/pid` → `pid:[4026531836]`).
    pub fn pid_ns(&self, pid: i32) -> Result<u64> {
        let path = self.pid_dir(pid).join("ns").join("pid");
        let target = std::fs::read_link(&path).map_err(|e| {
            classify_io(&path, e, "ptrace read access (same user or CAP_SYS_PTRACE)")
        })?;
        parse::fd::parse_ns_inode(target.as_os_str().as_encoded_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_process() {
        let root = ProcRoot::default();
        let me = std::process::id() as i32;
        assert!(root.exists(me));
        let tids = root.tasks(me).unwrap();
        assert!(tids.contains(&me));
        // The test runs on a non-main thread: that one is running.
        let tid = nix::unistd::gettid().as_raw();
        assert!(tids.contains(&tid));
        let stat = root.read_task_stat(me, tid).unwrap();
        assert_eq!(stat.pid, tid);
        assert_eq!(stat.state, 'R');
        let status = root.read_task_status(me, me).unwrap();
        assert!(status.ctxt_switches().is_some());
        assert!(root.pid_ns(me).unwrap() > 0);
        assert!(!root.cgroup(me).unwrap().is_empty());
        assert!(root.pids().unwrap().contains(&me));
    }

    #[test]
    fn missing_process_and_task() {
        let dir = tempfile::tempdir().unwrap();
        let root = ProcRoot::new(dir.path());
        assert!(!root.exists(42));
        assert!(matches!(
            root.tasks(42),
            Err(Error::NoSuchProcess { pid: 42, .. })
        ));
        assert!(root.read_task_stat(42, 43).unwrap_err().is_gone());
        assert!(matches!(
            root.read_stat(42),
            Err(Error::NoSuchProcess { .. })
        ));
    }

    #[test]
    fn oversized_files_are_refused() {
        let fake = crate::testing::FakeProc::new();
        fake.task(7, 7).file("wchan", vec![b'a'; SMALL + 1]);
        let root = fake.root();
        assert!(matches!(root.read_wchan(7, 7), Err(Error::TooLarge { .. })));
    }

    #[test]
    fn fd_links_are_bounded_parsed_and_searched() {
        let fake = crate::testing::FakeProc::new();
        fake.process(7)
            .fds(&["/dev/null", "socket:[5]", "/dev/nvidia0"])
            .fd(9, "/tmp/gone.ring (deleted)");
        fake.file("7/fd/not-a-number", b"");
        let root = fake.root();
        let mut links = root.fd_links(7, 100).unwrap();
        links.sort_by_key(|l| l.fd);
        let fds: Vec<i64> = links.iter().map(|l| l.fd).collect();
        assert_eq!(fds, [0, 1, 2, 9]);
        assert!(matches!(&links[1].target, FdTarget::Special { kind, .. } if kind == "socket"));
        assert!(matches!(
            &links[3].target,
            FdTarget::Path { deleted: true, .. }
        ));
        assert_eq!(root.fd_links(7, 2).unwrap().len(), 2);
        let hit = root
            .find_fd_link(7, 100, |l| l.target.path() == Some("/dev/nvidia0"))
            .unwrap()
            .unwrap();
        assert_eq!(hit.fd, 2);
        assert_eq!(root.find_fd_link(7, 100, |_| false).unwrap(), None);
        assert_eq!(
            root.fd_link_target(7, 9).unwrap(),
            Path::new("/tmp/gone.ring (deleted)")
        );
        assert!(root.fd_link_target(7, 42).unwrap_err().is_gone());
        assert!(root.fd_links(8, 10).unwrap_err().is_gone());
    }

    #[test]
    fn held_files_name_the_inode_behind_each_link() {
        let fake = crate::testing::FakeProc::new();
        let file = fake.path().join("held");
        std::fs::write(&file, b"x").unwrap();
        fake.process(3).fd(4, &file).fd(5, "/nonexistent/target");
        let held = fake.root().held_files(3, 10).unwrap();
        // The dangling link cannot be stated: left out.
        assert_eq!(held.len(), 1);
        let meta = std::fs::metadata(&file).unwrap();
        assert_eq!(
            (held[0].fd, held[0].dev, held[0].ino),
            (4, meta.dev(), meta.ino())
        );
        assert_eq!(std::fs::read(&held[0].link).unwrap(), b"x");
        // The live kernel reports the fd count as the directory size since Linux 6.2; 0 before (Debian 12's
        // 6.1, as the aarch64 VM of tests/aarch64/ showed), which callers read as "unknown".
        let me = std::process::id() as i32;
        let count = ProcRoot::default().fd_count(me).unwrap();
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
        let mut numbers = release.split(|c: char| !c.is_ascii_digit());
        let version: (u32, u32) = (
            numbers.next().unwrap().parse().unwrap(),
            numbers.next().unwrap().parse().unwrap(),
        );
        if version >= (6, 2) {
            assert!(count >= 3, "{count} on {release}");
        } else {
            assert_eq!(count, 0, "on {release}");
        }
        assert!(!ProcRoot::default().held_files(me, 1000).unwrap().is_empty());
    }

    fn is_not_found(e: Error) -> bool {
        matches!(e, Error::Io { source, .. } if source.kind() == ErrorKind::NotFound)
    }

    #[test]
    fn host_files_parse_and_refuse_hostile_content() {
        let fake = crate::testing::FakeProc::new();
        let root = fake.root();
        assert!(is_not_found(root.meminfo().unwrap_err()));
        fake.meminfo("MemTotal:  100 kB\nHugePages_Total:  2\n")
            .loadavg("0.50 0.40 0.30 1/200 4242\n")
            .pressure("cpu", "some avg10=1.00 avg60=0.00 avg300=0.00 total=5\n")
            .pressure("memory", "some")
            .boot_id("0f6c2e0a-1111-2222-3333-444455556666\n")
            .sysctl("kernel.hung_task_timeout_secs", "120\n");
        assert_eq!(root.meminfo().unwrap()["MemTotal"], 100);
        assert_eq!(root.loadavg().unwrap(), "0.50 0.40 0.30 1/200 4242");
        let cpu = root.pressure("cpu").unwrap();
        assert_eq!(cpu.psi.some.unwrap().total_us, 5);
        assert!(cpu.text.starts_with("some avg10=1.00"));
        assert!(matches!(root.pressure("memory"), Err(Error::Parse { .. })));
        assert!(matches!(
            root.pressure("../meminfo"),
            Err(Error::Parse { .. })
        ));
        assert!(is_not_found(root.pressure("io").unwrap_err()));
        assert_eq!(
            root.boot_id().unwrap(),
            "0f6c2e0a-1111-2222-3333-444455556666"
        );
        assert_eq!(root.sysctl("kernel.hung_task_timeout_secs").unwrap(), "120");
        for bad in ["", "kernel..x", "..", "kernel."] {
            assert!(
                matches!(root.sysctl(bad), Err(Error::Parse { .. })),
                "{bad}"
            );
        }
        // Hostile sizes and bytes: errors, never a panic.
        fake.meminfo(&"MemTotal: 1 kB\n".repeat(8000))
            .file("loadavg", vec![b'1'; SMALL + 1])
            .boot_id("\u{ff}not a uuid");
        assert!(matches!(root.meminfo(), Err(Error::TooLarge { .. })));
        assert!(matches!(root.loadavg(), Err(Error::TooLarge { .. })));
        assert!(root.boot_id().is_err());
        fake.meminfo("MemTotal: 18446744073709551616 kB\n");
        assert!(matches!(root.meminfo(), Err(Error::Parse { .. })));
    }

    #[test]
    fn risky_files_are_only_named() {
        let root = ProcRoot::new("/fake");
        assert_eq!(
            root.risky_path(RiskyFile::Cmdline(42)),
            Path::new("/fake/42/cmdline")
        );
        assert_eq!(
            root.risky_path(RiskyFile::NvidiaVersion),
            Path::new("/fake/driver/nvidia/version")
        );
        assert_eq!(
            root.risky_path(RiskyFile::NvidiaGpus),
            Path::new("/fake/driver/nvidia/gpus")
        );
        assert_eq!(root.to_string(), "/fake");
    }

    #[test]
    fn children_of_a_live_thread() {
        let root = ProcRoot::default();
        let me = std::process::id() as i32;
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let found = root.tasks(me).unwrap().into_iter().any(|tid| {
            root.children(me, tid)
                .unwrap_or_default()
                .contains(&(child.id() as i32))
        });
        let _ = child.kill();
        let _ = child.wait();
        if root.has_children_files(me) {
            assert!(found);
        }
    }
}
