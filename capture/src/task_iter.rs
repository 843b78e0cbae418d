//! Per-thread change detection from a BPF task iterator: one read gives every thread of one process
//! with its scheduler state and context-switch count, without the kernel formatting a `stat` line per
//! thread (issue 30: busy workers are never quiet, so the per-process taskstats shortcut never applies).
//!
//! Map:
//! - [`TaskIter::load`]: the checked-in program (`capture/bpf/task_states.bpf.c`, built by
//!   `gen_task_states.sh` into `task_states.bpf.o`), CO-RE relocated by aya against the running kernel's
//!   BTF, then tried on this process. Every refusal (no BTF, no CAP_BPF/CAP_PERFMON, the verifier, a kernel
//!   older than 6.1) is an [`Error::TaskIterUnavailable`] whose text says why: the caller falls back to /proc.
//! - [`TaskIter::watch`]: an iterator link for one process. Two programs answer the same question: the
//!   group walk (`group_states`, issue 40), linked to the process's leader only
//!   (`bpf_iter_link_info.task.tid`), walks the thread list itself in one call, as `for_each_thread()`
//!   does; the per-thread program (`task_states`), linked to the whole process
//!   (`bpf_iter_link_info.task.pid`), is called by the kernel once per thread. The walk spares the kernel
//!   a pid lookup, a pid-number translation and a task reference per thread (~40 % of a busy scan's
//!   CPU, cache misses on every thread's `struct pid`); its answer must fit one seq_file buffer, so a
//!   process of more than [`GROUP_MAX_THREADS`] threads is asked per thread, as is every process where
//!   the walk could not be loaded.
//! - [`ProcessThreads::visit`]: one pass of the process's iterator (a fresh iterator per call), each
//!   thread handed to a closure. [`ProcessThreads::read`] is the raw bytes of one pass.
//! - [`parse_records`] (per-thread answers) and [`parse_group`] (group walks), pure → [`ThreadRecord`]:
//!   `letter` (the `stat` state letter, computed as the kernel's `task_state_index` does) and `asleep`.
//!
//! Why switch counts: a thread enters D (or exits, stops, renames itself) only while it runs, and a thread
//! that went to sleep since the previous scan was switched out on the way (nvcsw or nivcsw grew). A thread
//! the iterator shows sleeping (S/I) whose count has not moved since the previous scan has not slept
//! anywhere since; its last `stat` still holds. The scanner reads every other thread, so a thread in D at
//! the moment the iterator visits it is always read ([`crate::scan::Scanner::scan_with`]).
//!
//! Raw `bpf(2)` calls only for what aya 0.14 lacks: a link with the process filter and a new iterator per
//! scan from the same link (aya's `IterLink::into_file` consumes the link).

use crate::error::{Error, Result};
use crate::le::{u32_at, u64_at};
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

/// Bytes per record: `struct thread_record` in task_states.bpf.c.
pub const RECORD_LEN: usize = 32;

/// The compiled programs, checked in (see the module doc); 8-byte aligned for the ELF parser.
static OBJECT: &[u8] = aya::include_bytes_aligned!("../bpf/task_states.bpf.o");
/// Where the running kernel describes its own types (CONFIG_DEBUG_INFO_BTF).
pub(crate) const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";
/// The per-thread program's function name in the object (its `SEC("iter/task")`).
const PROGRAM: &str = "task_states";
/// The group walk's function name in the object.
const GROUP_PROGRAM: &str = "group_states";

/// Bytes per thread in a group walk's answer (`struct group_thread`), and of its trailer.
pub const GROUP_RECORD_LEN: usize = 16;
/// The most threads one group walk writes (`GROUP_MAX_THREADS` in task_states.bpf.c: its answer must fit
/// the iterator's 32 KiB seq_file buffer, and a full buffer counts as overflowed).
pub const GROUP_MAX_THREADS: usize = 2046;
const GROUP_MAGIC: u32 = 0x5447_4357;

/// `enum bpf_cmd` and `enum bpf_attach_type` values (include/uapi/linux/bpf.h, stable UAPI).
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_ITER_CREATE: libc::c_long = 33;
const BPF_TRACE_ITER: u32 = 28;

/// One thread as the iterator saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadRecord {
    pub tid: i32,
    pub tgid: i32,
    /// `task_struct.__state`, raw bits.
    pub state: u32,
    pub exit_state: u32,
    /// nvcsw + nivcsw: grows whenever the thread is switched out.
    pub switches: u64,
}

// include/linux/sched.h: the state bits `stat` reports, and the two that change the letter.
const TASK_UNINTERRUPTIBLE: u32 = 0x2;
const TASK_REPORT: u32 = 0x7f;
const TASK_NOLOAD: u32 = 0x400;
const TASK_IDLE: u32 = TASK_UNINTERRUPTIBLE | TASK_NOLOAD;
const TASK_RTLOCK_WAIT: u32 = 0x1000;

impl ThreadRecord {
    /// The letter `/proc/<pid>/task/<tid>/stat` shows for these bits (`task_state_index`): R S D T t X Z
    /// P I. Bits outside TASK_REPORT (TASK_FREEZABLE, TASK_WAKEKILL…) do not change it.
    pub fn letter(&self) -> char {
        if self.state & TASK_IDLE == TASK_IDLE {
            return 'I';
        }
        if self.state & TASK_RTLOCK_WAIT != 0 {
            // A sleeping spinlock on PREEMPT_RT: reported as D.
            return 'D';
        }
        let report = (self.state | self.exit_state) & TASK_REPORT;
        // fls(): 0 for none, else 1 + the index of the highest set bit.
        let index = (u32::BITS - report.leading_zeros()) as usize;
        b"RSDTtXZP"[index.min(7)] as char
    }

    /// Sleeping in a way that can be skipped: exactly the S or I letters. Anything else (D, R, stopped,
    /// zombie, unknown bits) is read.
    pub fn asleep(&self) -> bool {
        matches!(self.letter(), 'S' | 'I')
    }
}

/// The records of one iterator read. A length that is not a whole number of records is an error (a
/// program and parser out of step), never a partial answer.
pub fn parse_records(bytes: &[u8]) -> Result<impl Iterator<Item = ThreadRecord> + '_> {
    if !bytes.len().is_multiple_of(RECORD_LEN) {
        return Err(Error::Parse {
            what: "task iterator records",
            why: format!(
                "{} bytes is not a whole number of {RECORD_LEN}-byte records",
                bytes.len()
            ),
        });
    }
    Ok(bytes.chunks_exact(RECORD_LEN).map(|r| ThreadRecord {
        tid: u32_at(r, 0) as i32,
        tgid: u32_at(r, 4) as i32,
        state: u32_at(r, 8),
        exit_state: u32_at(r, 12),
        switches: u64_at(r, 16).wrapping_add(u64_at(r, 24)),
    }))
}

/// A group walk's answer, parsed ([`parse_group`]).
#[derive(Debug)]
pub enum GroupAnswer<'a> {
    /// Every thread of the group, each as a [`ThreadRecord`].
    Threads(GroupThreads<'a>),
    /// The group has more than [`GROUP_MAX_THREADS`] threads: ask the per-thread program.
    TooMany,
}

/// The threads of a complete group walk.
#[derive(Debug)]
pub struct GroupThreads<'a> {
    tgid: i32,
    records: std::slice::ChunksExact<'a, u8>,
}

impl Iterator for GroupThreads<'_> {
    type Item = ThreadRecord;
    fn next(&mut self) -> Option<ThreadRecord> {
        let r = self.records.next()?;
        let word = u32_at(r, 4);
        Some(ThreadRecord {
            tid: u32_at(r, 0) as i32,
            tgid: self.tgid,
            state: word & 0x00ff_ffff,
            exit_state: word >> 24,
            switches: u64_at(r, 8),
        })
    }
}

/// A group walk's answer (`struct group_thread` records, then `struct group_trailer`; nothing at all for a
/// process that has exited), checked whole
/// before any thread is given out: the trailer's magic, its count against the records, and that the walk
/// came back to the list head. A walk cut by a fault (or anything else out of step) is an error, never
/// a partial answer; one cut at [`GROUP_MAX_THREADS`] is [`GroupAnswer::TooMany`].
pub fn parse_group(bytes: &[u8]) -> Result<GroupAnswer<'_>> {
    let bad = |why: String| Error::Parse {
        what: "task iterator group walk",
        why,
    };
    if bytes.is_empty() {
        // No leader to visit: the process has exited (a live group's leader stays, a zombie at worst).
        return Ok(GroupAnswer::Threads(GroupThreads {
            tgid: 0,
            records: bytes.chunks_exact(GROUP_RECORD_LEN),
        }));
    }
    if bytes.len() < GROUP_RECORD_LEN || !bytes.len().is_multiple_of(GROUP_RECORD_LEN) {
        return Err(bad(format!(
            "{} bytes is not whole {GROUP_RECORD_LEN}-byte records and a trailer",
            bytes.len()
        )));
    }
    let (records, trailer) = bytes.split_at(bytes.len() - GROUP_RECORD_LEN);
    let (magic, tgid, walked, complete) = (
        u32_at(trailer, 0),
        u32_at(trailer, 4),
        u32_at(trailer, 8) as usize,
        u32_at(trailer, 12),
    );
    if magic != GROUP_MAGIC {
        return Err(bad(format!("trailer magic {magic:#x}")));
    }
    if walked != records.len() / GROUP_RECORD_LEN {
        return Err(bad(format!(
            "the trailer counts {walked} threads, {} written",
            records.len() / GROUP_RECORD_LEN
        )));
    }
    match complete {
        1 => Ok(GroupAnswer::Threads(GroupThreads {
            tgid: tgid as i32,
            records: records.chunks_exact(GROUP_RECORD_LEN),
        })),
        0 if walked == GROUP_MAX_THREADS => Ok(GroupAnswer::TooMany),
        0 => Err(bad(format!(
            "the walk was cut after {walked} threads (a thread's fields could not be read)"
        ))),
        other => Err(bad(format!("trailer completion word {other}"))),
    }
}

/// The loaded programs (their fds; the kernel keeps a program while any link uses it).
pub struct TaskIter {
    program: Arc<OwnedFd>,
    /// The group walk, where this kernel loaded it (None: every process is asked per thread).
    group: Option<Arc<OwnedFd>>,
}

impl fmt::Debug for TaskIter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskIter")
            .field("program_fd", &self.program.as_raw_fd())
            .field("group_fd", &self.group.as_ref().map(|g| g.as_raw_fd()))
            .finish()
    }
}

/// Whether an error chain bottoms out in a refused privilege.
pub(crate) fn permission_refused(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if matches!(io.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)) {
                return true;
            }
        }
        cur = e.source();
    }
    false
}

/// One line of an error and its causes (aya nests the syscall error under the program error).
pub(crate) fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let more = e.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cur = e.source();
    }
    text
}

pub(crate) const PRIVILEGE: &str = "needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)";

pub(crate) fn refused(what: &str, err: &(dyn std::error::Error + 'static)) -> Error {
    if permission_refused(err) {
        Error::TaskIterUnavailable(format!("{what} refused ({PRIVILEGE})"))
    } else {
        Error::TaskIterUnavailable(format!("{what}: {}", chain(err)))
    }
}

impl TaskIter {
    /// Loads the program and proves it on this process (a link, one read that must list the calling
    /// thread). Takes ~0.1 s (BTF parsing, the verifier): once per agent.
    pub fn load() -> Result<TaskIter> {
        TaskIter::load_object(KERNEL_BTF, OBJECT)
    }

    /// [`TaskIter::load`] with another BTF file or object (tests: a missing BTF, a damaged object, a
    /// program the verifier refuses are each a reason, never a panic).
    fn load_object(btf_path: &str, object: &[u8]) -> Result<TaskIter> {
        let btf = aya::Btf::parse_file(btf_path, aya::Endianness::default()).map_err(|e| {
            Error::TaskIterUnavailable(format!(
                "no kernel BTF at {btf_path} (CONFIG_DEBUG_INFO_BTF): {}",
                chain(&e)
            ))
        })?;
        let mut object = aya::EbpfLoader::new()
            .btf(Some(&btf))
            .load(object)
            .map_err(|e| refused("loading the task iterator", &e))?;
        let program = load_program(&mut object, PROGRAM, &btf)?;
        // The group walk is a speed-up, not a requirement: a kernel that refuses it (or a walk that does
        // not prove itself below) leaves every process to the per-thread program.
        let group = load_program(&mut object, GROUP_PROGRAM, &btf).ok();
        // `object` (and aya's own fds) go here; ours keep the programs loaded.
        drop(object);
        drop(btf);
        release_freed_memory();
        let mut iter = TaskIter {
            program: Arc::new(program),
            group: group.map(Arc::new),
        };
        iter.prove_per_thread()?;
        if iter.group.is_some() && iter.prove_group().is_err() {
            iter.group = None;
        }
        Ok(iter)
    }

    /// Whether processes are asked by the group walk (else per thread).
    pub fn walks_groups(&self) -> bool {
        self.group.is_some()
    }

    /// The per-thread program must list the calling thread, and only this process.
    fn prove_per_thread(&self) -> Result<()> {
        let me = std::process::id() as i32;
        let mut buf = Vec::new();
        self.watch_per_thread(me)?.read(&mut buf)?;
        let records: Vec<ThreadRecord> = parse_records(&buf)?.collect();
        Self::proven(&records, me)
    }

    /// The group walk must come back whole (its trailer says so), list the calling thread, and only this
    /// process. Not compared by count with the per-thread program: this process's other threads start and
    /// exit between two reads (tests, the agent's own start), and every scan checks the walk's count against
    /// the task directory anyway.
    fn prove_group(&self) -> Result<()> {
        let me = std::process::id() as i32;
        let mut records = Vec::new();
        self.watch(me)?
            .visit(&mut Vec::new(), |r| records.push(r))?;
        Self::proven(&records, me)
    }

    fn proven(records: &[ThreadRecord], me: i32) -> Result<()> {
        let tid = nix::unistd::gettid().as_raw();
        if !records.iter().any(|r| r.tid == tid && r.tgid == me) {
            return Err(Error::TaskIterUnavailable(format!(
                "the task iterator did not list this thread (tid {tid}; {} records for pid {me}): \
                 it numbers tasks as the host does, so a pid namespace other than the host's cannot use it",
                records.len()
            )));
        }
        if records.iter().any(|r| r.tgid != me) {
            return Err(Error::TaskIterUnavailable(
                "the task iterator is not limited to one process on this kernel".into(),
            ));
        }
        Ok(())
    }

    /// An iterator over the threads of `pid` (pid as this process's pid namespace numbers it): the group
    /// walk where it loaded, else the per-thread program.
    pub fn watch(&self, pid: i32) -> Result<ProcessThreads> {
        match &self.group {
            Some(group) => Ok(ProcessThreads {
                pid,
                link: link_create(group, pid, Filter::Leader)?,
                per_thread: Some(self.program.clone()),
                per_thread_link: None,
            }),
            None => self.watch_per_thread(pid),
        }
    }

    /// [`TaskIter::watch`] with the per-thread program whatever the kernel allows (benchmarks, tests).
    pub fn watch_per_thread(&self, pid: i32) -> Result<ProcessThreads> {
        Ok(ProcessThreads {
            pid,
            link: link_create(&self.program, pid, Filter::Process)?,
            per_thread: None,
            per_thread_link: None,
        })
    }
}

/// Loads one `iter/task` program of the object and returns our own fd of it.
fn load_program(object: &mut aya::Ebpf, name: &str, btf: &aya::Btf) -> Result<OwnedFd> {
    let program: &mut aya::programs::Iter = object
        .program_mut(name)
        .ok_or_else(|| Error::TaskIterUnavailable(format!("no program {name} in the object")))?
        .try_into()
        .map_err(|e| refused("the task iterator's program type", &e))?;
    program.load("task", btf).map_err(|e| {
        // The verifier refuses an unsafe program with EACCES too: its log, not the errno, tells
        // a refusal from a missing privilege (EPERM, no log).
        if permission_refused(&e) && !has_verifier_log(&e) {
            Error::TaskIterUnavailable(format!("loading the task iterator refused ({PRIVILEGE})"))
        } else {
            Error::TaskIterUnavailable(format!(
                "the kernel refused the task iterator: {}",
                verifier_summary(&e)
            ))
        }
    })?;
    program
        .fd()
        .map_err(|e| refused("the task iterator's fd", &e))?
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| Error::TaskIterUnavailable(format!("dup of the program fd: {e}")))
}

/// Which tasks a link visits: the process's leader only (the group walk), or each of its threads.
#[derive(Clone, Copy)]
enum Filter {
    Leader,
    Process,
}

/// A link of `program` to `pid`'s leader or to each of its threads.
fn link_create(program: &OwnedFd, pid: i32, filter: Filter) -> Result<OwnedFd> {
    let pid = u32::try_from(pid)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| Error::TaskIterUnavailable(format!("not a pid: {pid}")))?;
    // union bpf_iter_link_info: task = { tid, pid, pid_fd }; 16 bytes (the cgroup member's size).
    let info: [u32; 4] = match filter {
        Filter::Leader => [pid, 0, 0, 0],
        Filter::Process => [0, pid, 0, 0],
    };
    let link = iter_link(program, Some(&info)).map_err(|err| {
        Error::TaskIterUnavailable(match err.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => {
                format!("creating a task iterator link refused ({PRIVILEGE})")
            }
            Some(libc::EINVAL) | Some(libc::E2BIG) => format!(
                "this kernel cannot limit a task iterator to one process (Linux >= 6.1): {err}"
            ),
            Some(libc::ESRCH) | Some(libc::ENOENT) => format!("no process {pid}: {err}"),
            _ => format!("creating a task iterator link: {err}"),
        })
    })?;
    Ok(link)
}

/// A `BPF_LINK_CREATE` of an iterator program, with its `union bpf_iter_link_info` (None: every task).
pub(crate) fn iter_link(program: &OwnedFd, info: Option<&[u32; 4]>) -> std::io::Result<OwnedFd> {
    // The BPF_LINK_CREATE member of union bpf_attr: prog_fd, target_fd, attach_type, flags,
    // iter_info (aligned u64), iter_info_len.
    #[repr(C, align(8))]
    struct LinkCreate {
        prog_fd: u32,
        target_fd: u32,
        attach_type: u32,
        flags: u32,
        iter_info: u64,
        iter_info_len: u32,
        pad: u32,
    }
    let attr = LinkCreate {
        prog_fd: program.as_raw_fd() as u32,
        target_fd: 0,
        attach_type: BPF_TRACE_ITER,
        flags: 0,
        iter_info: info.map_or(0, |i| i.as_ptr() as u64),
        iter_info_len: info.map_or(0, |i| std::mem::size_of_val(i) as u32),
        pad: 0,
    };
    // The kernel copies `info` (pointed to by `attr`) before the call returns.
    bpf_fd(BPF_LINK_CREATE, &attr)
}

/// One pass of an iterator link into `buf` (cleared first; a fresh iterator per call); `what` names the
/// iterator in errors.
pub(crate) fn read_iter(link: &OwnedFd, buf: &mut Vec<u8>, what: &'static str) -> Result<()> {
    buf.clear();
    #[repr(C)]
    struct IterCreate {
        link_fd: u32,
        flags: u32,
    }
    let attr = IterCreate {
        link_fd: link.as_raw_fd() as u32,
        flags: 0,
    };
    let mut file =
        File::from(bpf_fd(BPF_ITER_CREATE, &attr).map_err(|source| Error::Bpf { what, source })?);
    file.read_to_end(buf)
        .map_err(|source| Error::Bpf { what, source })?;
    Ok(())
}

/// `bpf(cmd, attr, sizeof attr)` for a command that returns a new fd.
fn bpf_fd<T>(cmd: libc::c_long, attr: &T) -> std::io::Result<OwnedFd> {
    // SAFETY: `attr` is a valid, initialised attribute struct of the size passed for `cmd` (the callers
    // build `#[repr(C)]` kernel structs); the kernel only reads it. The return value is checked first.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *const T,
            std::mem::size_of::<T>(),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new fd the kernel just returned, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Parsing the kernel's BTF (~5 MB) takes ~35 MB of heap for a moment; give it back to the system rather
/// than keep it in the allocator's arenas for the agent's lifetime (+16 MB RSS otherwise).
pub(crate) fn release_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free heap pages to the kernel; no pointer is involved.
    unsafe {
        libc::malloc_trim(0);
    }
}

pub(crate) fn has_verifier_log(err: &aya::programs::ProgramError) -> bool {
    matches!(err, aya::programs::ProgramError::LoadError { verifier_log, .. }
        if !verifier_log.to_string().trim().is_empty())
}

/// The first lines of the verifier's verdict (aya keeps the whole log; the reason is at its end).
pub(crate) fn verifier_summary(err: &aya::programs::ProgramError) -> String {
    if let aya::programs::ProgramError::LoadError {
        io_error,
        verifier_log,
    } = err
    {
        let log = verifier_log.to_string();
        // The verdict is the last line before the statistics the verifier appends.
        let verdict = log
            .lines()
            .map(str::trim)
            .rfind(|l| {
                !l.is_empty()
                    && !l.starts_with("processed ")
                    && !l.starts_with("stack depth")
                    && !l.starts_with("verification time")
            })
            .unwrap_or("(no verifier log)");
        return format!("{io_error}: {verdict}");
    }
    chain(err)
}

/// The iterator link of one process; each [`ProcessThreads::visit`] walks its threads once.
#[derive(Debug)]
pub struct ProcessThreads {
    pid: i32,
    /// The group walk's link (with `per_thread` set), else the per-thread program's.
    link: OwnedFd,
    /// The per-thread program, for a group too large for one walk.
    per_thread: Option<Arc<OwnedFd>>,
    /// Its link, made the first time the group was too large; from then on this process is asked per
    /// thread (a process that large rarely shrinks, and the per-thread answer is as good, only dearer).
    per_thread_link: Option<OwnedFd>,
}

impl ProcessThreads {
    /// Whether this process is asked by the group walk.
    pub fn walks_group(&self) -> bool {
        self.per_thread.is_some() && self.per_thread_link.is_none()
    }

    /// The raw bytes of one pass of this process's link (cleared first): a group walk's answer
    /// ([`parse_group`]) while [`ProcessThreads::walks_group`], else per-thread records
    /// ([`parse_records`]). A process that has exited reads as no records (per thread) or as a walk of
    /// no thread.
    pub fn read(&self, buf: &mut Vec<u8>) -> Result<()> {
        read_link(self.per_thread_link.as_ref().unwrap_or(&self.link), buf)
    }

    /// One pass over the process's threads, each handed to `each` once the whole answer has been read
    /// and checked (an error hands out none). `buf` is scratch space kept by the caller.
    pub fn visit(&mut self, buf: &mut Vec<u8>, mut each: impl FnMut(ThreadRecord)) -> Result<()> {
        if let (Some(program), None) = (&self.per_thread, &self.per_thread_link) {
            read_link(&self.link, buf)?;
            match parse_group(buf)? {
                GroupAnswer::Threads(threads) => {
                    threads.for_each(each);
                    return Ok(());
                }
                GroupAnswer::TooMany => {
                    self.per_thread_link = Some(link_create(program, self.pid, Filter::Process)?);
                }
            }
        }
        self.read(buf)?;
        parse_records(buf)?.for_each(&mut each);
        Ok(())
    }
}

/// One pass of a task iterator link into `buf`.
fn read_link(link: &OwnedFd, buf: &mut Vec<u8>) -> Result<()> {
    read_iter(link, buf, "task iterator read")
}

/// Test support: the checked-in object of `source` (a file of capture/bpf) was built from it: the
/// generator (gen_task_states.sh) records the source's sha256 next to the object.
#[cfg(test)]
pub(crate) fn assert_object_matches_source(source: &str) {
    use std::fmt::Write;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bpf");
    let text = std::fs::read(dir.join(source)).unwrap();
    let object = source.replace(".bpf.c", ".bpf.o.source-sha256");
    let recorded = std::fs::read_to_string(dir.join(object)).unwrap();
    let digest = <sha2::Sha256 as sha2::Digest>::digest(&text);
    let mut hex = String::new();
    for b in digest {
        write!(hex, "{b:02x}").unwrap();
    }
    assert_eq!(
        recorded.trim(),
        hex,
        "{source} changed: run sh capture/bpf/gen_task_states.sh"
    );
}

#[cfg(test)]
mod tests;
