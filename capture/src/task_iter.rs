//! Per-thread change detection from a BPF task iterator: one read gives every thread of one process
//! with its scheduler state and context-switch count, without the kernel formatting a `stat` line per
//! thread (issue 30: busy workers are never quiet, so the per-process taskstats shortcut never applies).
//!
//! Map:
//! - [`TaskIter::load`]: the checked-in program (`capture/bpf/task_states.bpf.c`, built by
//!   `gen_task_states.sh` into `task_states.bpf.o`), CO-RE relocated by aya against the running kernel's
//!   BTF, then tried on this process. Every refusal (no BTF, no CAP_BPF/CAP_PERFMON, the verifier, a kernel
//!   older than 6.1) is an [`Error::TaskIterUnavailable`] whose text says why: the caller falls back to /proc.
//! - [`TaskIter::watch`]: an iterator link limited to one process (`bpf_iter_link_info.task.pid`).
//! - [`ProcessThreads::read`]: one pass of that iterator into a byte buffer (a fresh iterator per call).
//! - [`parse_records`] (pure) → [`ThreadRecord`]: `letter` (the `stat` state letter, computed as the
//!   kernel's `task_state_index` does) and `asleep`.
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

/// Bytes per record: `struct thread_record` in task_states.bpf.c.
pub const RECORD_LEN: usize = 32;

/// The compiled program, checked in (see the module doc); 8-byte aligned for the ELF parser.
static OBJECT: &[u8] = aya::include_bytes_aligned!("../bpf/task_states.bpf.o");
/// Where the running kernel describes its own types (CONFIG_DEBUG_INFO_BTF).
pub(crate) const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";
/// The program's function name in the object (its `SEC("iter/task")`).
const PROGRAM: &str = "task_states";

/// `enum bpf_cmd` and `enum bpf_attach_type` values (include/uapi/linux/bpf.h, stable UAPI).
pub(crate) const BPF_LINK_CREATE: libc::c_long = 28;
pub(crate) const BPF_ITER_CREATE: libc::c_long = 33;
pub(crate) const BPF_TRACE_ITER: u32 = 28;

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

/// The loaded program (its fd; the kernel keeps it while any link uses it).
pub struct TaskIter {
    program: OwnedFd,
}

impl fmt::Debug for TaskIter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskIter")
            .field("program_fd", &self.program.as_raw_fd())
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
        let program: &mut aya::programs::Iter = object
            .program_mut(PROGRAM)
            .ok_or_else(|| {
                Error::TaskIterUnavailable(format!("no program {PROGRAM} in the object"))
            })?
            .try_into()
            .map_err(|e| refused("the task iterator's program type", &e))?;
        program.load("task", &btf).map_err(|e| {
            // The verifier refuses an unsafe program with EACCES too: its log, not the errno, tells
            // a refusal from a missing privilege (EPERM, no log).
            if permission_refused(&e) && !has_verifier_log(&e) {
                Error::TaskIterUnavailable(format!(
                    "loading the task iterator refused ({PRIVILEGE})"
                ))
            } else {
                Error::TaskIterUnavailable(format!(
                    "the kernel refused the task iterator: {}",
                    verifier_summary(&e)
                ))
            }
        })?;
        let fd = program
            .fd()
            .map_err(|e| refused("the task iterator's fd", &e))?
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Error::TaskIterUnavailable(format!("dup of the program fd: {e}")))?;
        // `object` (and aya's own fd) go here; ours keeps the program loaded.
        drop(object);
        drop(btf);
        release_freed_memory();
        let iter = TaskIter { program: fd };
        iter.prove()?;
        Ok(iter)
    }

    fn prove(&self) -> Result<()> {
        let me = std::process::id() as i32;
        let tid = nix::unistd::gettid().as_raw();
        let threads = self.watch(me)?;
        let mut buf = Vec::new();
        threads.read(&mut buf)?;
        let records: Vec<ThreadRecord> = parse_records(&buf)?.collect();
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

    /// An iterator over the threads of `pid` only (pid as this process's pid namespace numbers it).
    pub fn watch(&self, pid: i32) -> Result<ProcessThreads> {
        let pid = u32::try_from(pid)
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| Error::TaskIterUnavailable(format!("not a pid: {pid}")))?;
        // union bpf_iter_link_info: task = { tid, pid, pid_fd }; 16 bytes (the cgroup member's size).
        let info: [u32; 4] = [0, pid, 0, 0];
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
            prog_fd: self.program.as_raw_fd() as u32,
            target_fd: 0,
            attach_type: BPF_TRACE_ITER,
            flags: 0,
            iter_info: info.as_ptr() as u64,
            iter_info_len: std::mem::size_of_val(&info) as u32,
            pad: 0,
        };
        // The kernel copies `info` (pointed to by `attr`) before the call returns.
        let link = bpf_fd(BPF_LINK_CREATE, &attr).map_err(|err| {
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
        Ok(ProcessThreads { link })
    }
}

/// `bpf(cmd, attr, sizeof attr)` for a command that returns a new fd.
pub(crate) fn bpf_fd<T>(cmd: libc::c_long, attr: &T) -> std::io::Result<OwnedFd> {
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

/// The iterator link of one process; each [`ProcessThreads::read`] walks its threads once.
#[derive(Debug)]
pub struct ProcessThreads {
    link: OwnedFd,
}

impl ProcessThreads {
    /// One pass over the process's threads into `buf` (cleared first); parse with [`parse_records`].
    /// A process that has exited reads as no records.
    pub fn read(&self, buf: &mut Vec<u8>) -> Result<()> {
        buf.clear();
        #[repr(C)]
        struct IterCreate {
            link_fd: u32,
            flags: u32,
        }
        let attr = IterCreate {
            link_fd: self.link.as_raw_fd() as u32,
            flags: 0,
        };
        let mut file = File::from(bpf_fd(BPF_ITER_CREATE, &attr).map_err(|source| Error::Bpf {
            what: "task iterator create",
            source,
        })?);
        file.read_to_end(buf).map_err(|source| Error::Bpf {
            what: "task iterator read",
            source,
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(tid: u32, tgid: u32, state: u32, exit_state: u32, nv: u64, niv: u64) -> Vec<u8> {
        let mut r = Vec::new();
        for w in [tid, tgid, state, exit_state] {
            r.extend_from_slice(&w.to_le_bytes());
        }
        r.extend_from_slice(&nv.to_le_bytes());
        r.extend_from_slice(&niv.to_le_bytes());
        r
    }

    #[test]
    fn records_parse_and_sum_the_switch_counts() {
        let mut bytes = record(10, 10, 0x1, 0, 5, 2);
        bytes.extend(record(11, 10, 0x2, 0, 1, 0));
        let records: Vec<_> = parse_records(&bytes).unwrap().collect();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].switches, 7);
        assert_eq!((records[1].tid, records[1].tgid), (11, 10));
        assert_eq!(records[1].letter(), 'D');
        assert!(parse_records(&[]).unwrap().next().is_none());
    }

    #[test]
    fn a_partial_record_is_an_error_not_a_short_answer() {
        let mut bytes = record(10, 10, 1, 0, 0, 0);
        bytes.pop();
        assert!(parse_records(&bytes).is_err());
        assert!(parse_records(&[0u8; 31]).is_err());
    }

    /// The letters of fs/proc/array.c's task_state_array for the bits include/linux/sched.h defines.
    #[test]
    fn state_bits_give_the_letters_stat_shows() {
        let letter = |state, exit| ThreadRecord {
            tid: 1,
            tgid: 1,
            state,
            exit_state: exit,
            switches: 0,
        };
        let cases = [
            (0x0, 0, 'R', false),
            (0x1, 0, 'S', true),
            (0x2001, 0, 'S', true), // TASK_INTERRUPTIBLE | TASK_FREEZABLE (nanosleep)
            (0x2, 0, 'D', false),
            (0x102, 0, 'D', false), // TASK_KILLABLE
            (0x402, 0, 'I', true),  // TASK_IDLE
            (0x2402, 0, 'I', true),
            (0x1000, 0, 'D', false), // TASK_RTLOCK_WAIT
            (0x4, 0, 'T', false),
            (0x8, 0, 't', false),
            (0x0, 0x10, 'X', false),
            (0x0, 0x20, 'Z', false),
            (0x40, 0, 'P', false),
            (0x8000, 0, 'R', false), // TASK_FROZEN alone: not a reported sleep, so read
            (0x3, 0, 'D', false),    // two report bits: the highest wins, and it is not skipped
        ];
        for (state, exit, want, asleep) in cases {
            let r = letter(state, exit);
            assert_eq!(r.letter(), want, "state {state:#x} exit {exit:#x}");
            assert_eq!(r.asleep(), asleep, "state {state:#x}");
        }
    }

    /// The checked-in object was built from the checked-in source (gen_task_states.sh records the hash).
    #[test]
    fn the_object_matches_its_source() {
        use std::fmt::Write;
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bpf");
        let source = std::fs::read(dir.join("task_states.bpf.c")).unwrap();
        let recorded =
            std::fs::read_to_string(dir.join("task_states.bpf.o.source-sha256")).unwrap();
        let digest = <sha2::Sha256 as sha2::Digest>::digest(&source);
        let mut hex = String::new();
        for b in digest {
            write!(hex, "{b:02x}").unwrap();
        }
        assert_eq!(
            recorded.trim(),
            hex,
            "task_states.bpf.c changed: run sh capture/bpf/gen_task_states.sh"
        );
    }

    /// The loaded iterator, or None (skipped, with a line) when this machine cannot: not root and not
    /// CI. As root or under CI a refusal is a failure.
    fn load_for_test(test: &str) -> Option<TaskIter> {
        match TaskIter::load() {
            Ok(iter) => Some(iter),
            Err(e) if !nix::unistd::Uid::effective().is_root() && !breadcrumb::in_ci() => {
                eprintln!("skipping {test}: {e}");
                None
            }
            Err(e) => panic!("{test}: the task iterator is unavailable as root: {e}"),
        }
    }

    fn records_of(threads: &ProcessThreads) -> Vec<ThreadRecord> {
        let mut buf = Vec::new();
        threads.read(&mut buf).unwrap();
        parse_records(&buf).unwrap().collect()
    }

    /// The real kernel: for threads of this process in known states (running, a parked sleeper, a thread
    /// in D on a frozen ext4) the iterator's letters are the ones `/proc/<pid>/task/<tid>/stat` shows,
    /// and a thread that wakes and sleeps again has a larger switch count.
    #[test]
    fn the_iterator_agrees_with_proc_including_a_real_d_thread() {
        use crate::frozen_fs::{spawn_blocked_thread, wait_for_state, BlockingCall, FrozenFs};
        use crate::ProcRoot;
        use std::time::Duration;
        let Some(iter) = load_for_test("the_iterator_agrees_with_proc_including_a_real_d_thread")
        else {
            return;
        };
        let Some(mut fs) =
            FrozenFs::for_test("the_iterator_agrees_with_proc_including_a_real_d_thread")
        else {
            return;
        };
        let root = ProcRoot::default();
        let me = std::process::id() as i32;
        let running = nix::unistd::gettid().as_raw();

        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (wake_tx, wake_rx) = std::sync::mpsc::channel::<bool>();
        let sleeper = std::thread::spawn(move || {
            tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
            while wake_rx.recv() == Ok(true) {}
        });
        let sleeper_tid = tid_rx.recv().unwrap();
        wait_for_state(&root, me, sleeper_tid, 'S', Duration::from_secs(5)).unwrap();

        let path = fs.create_file("victim", b"x").unwrap();
        fs.freeze().unwrap();
        let blocked = spawn_blocked_thread(&path, BlockingCall::Write, "iter-d-victim").unwrap();
        wait_for_state(&root, me, blocked.tid, 'D', Duration::from_secs(10)).unwrap();

        let threads = iter.watch(me).unwrap();
        let records = records_of(&threads);
        assert!(records.iter().all(|r| r.tgid == me), "only this process");
        let find = |records: &[ThreadRecord], tid: i32| {
            *records
                .iter()
                .find(|r| r.tid == tid)
                .unwrap_or_else(|| panic!("tid {tid} missing from {records:?}"))
        };
        for (tid, want) in [(running, 'R'), (sleeper_tid, 'S'), (blocked.tid, 'D')] {
            let seen = find(&records, tid);
            let proc_state = root.read_task_stat(me, tid).unwrap().state;
            assert_eq!(seen.letter(), want, "iterator, tid {tid}");
            assert_eq!(proc_state, want, "/proc, tid {tid}");
        }
        assert!(find(&records, sleeper_tid).asleep());
        assert!(!find(&records, blocked.tid).asleep());

        // Unchanged while it sleeps; larger once it has run and slept again.
        let before = find(&records, sleeper_tid).switches;
        assert_eq!(find(&records_of(&threads), sleeper_tid).switches, before);
        wake_tx.send(true).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let now = find(&records_of(&threads), sleeper_tid);
            if now.switches > before && now.asleep() {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{now:?} vs {before}");
            std::thread::sleep(Duration::from_millis(5));
        }

        fs.thaw().unwrap();
        blocked.join().unwrap();
        drop(wake_tx);
        sleeper.join().unwrap();
    }

    /// A damaged object (truncated, or not ELF) is an unavailability with a reason, never a panic.
    #[test]
    fn a_damaged_object_is_a_reason_not_a_panic() {
        if load_for_test("a_damaged_object_is_a_reason_not_a_panic").is_none() {
            return;
        }
        for damaged in [
            &OBJECT[..OBJECT.len() / 2],
            &OBJECT[..64],
            &b"not an ELF object"[..],
        ] {
            match TaskIter::load_object(KERNEL_BTF, damaged) {
                Err(Error::TaskIterUnavailable(why)) => {
                    assert!(why.starts_with("loading the task iterator"), "{why}")
                }
                other => panic!("{other:?}"),
            }
        }
    }

    /// The fallbacks' reasons, for real: a kernel without BTF, and a program the verifier refuses (the
    /// same source built without its NULL check by gen_task_states.sh).
    #[test]
    fn no_btf_and_a_verifier_refusal_are_reasons() {
        if load_for_test("no_btf_and_a_verifier_refusal_are_reasons").is_none() {
            return;
        }
        match TaskIter::load_object("/nonexistent/btf/vmlinux", OBJECT) {
            Err(Error::TaskIterUnavailable(why)) => {
                assert!(why.starts_with("no kernel BTF at /nonexistent"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        match TaskIter::load_object("/proc/self/stat", OBJECT) {
            Err(Error::TaskIterUnavailable(why)) => {
                assert!(why.starts_with("no kernel BTF"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        static REFUSED: &[u8] = aya::include_bytes_aligned!("../bpf/task_states_refused.bpf.o");
        match TaskIter::load_object(KERNEL_BTF, REFUSED) {
            Err(Error::TaskIterUnavailable(why)) => {
                assert!(
                    why.starts_with("the kernel refused the task iterator: "),
                    "{why}"
                );
                // The verifier's own words (the possibly-NULL task pointer), not just an errno.
                assert!(
                    why.contains("R1") || why.contains("invalid mem access"),
                    "{why}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    /// A process that has exited reads as no records, not an error; a pid that never existed cannot
    /// be watched.
    #[test]
    fn an_exited_process_reads_as_no_threads() {
        let Some(iter) = load_for_test("an_exited_process_reads_as_no_threads") else {
            return;
        };
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let threads = iter.watch(child.id() as i32).unwrap();
        assert_eq!(records_of(&threads).len(), 1);
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(records_of(&threads).len(), 0);
        assert!(iter.watch(0).is_err());
        assert!(iter.watch(-5).is_err());
    }
}
