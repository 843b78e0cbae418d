//! The watch loop's hot path: the state of every thread of a process, every interval, cheaply.
//!
//! Each task's `stat` file is opened once and kept; every scan re-reads it with `pread` at offset 0
//! (no open/close, no path walk, no dentry lookup). A kept fd also pins the task: a reused tid can never
//! be mistaken for the old thread (the old fd reads ESRCH and is dropped, the new task is opened afresh).
//!
//! New tasks are found by re-listing the task directory (kept open, rewound), but only when needed:
//! the process's own `stat` (also kept open) gives `num_threads`, and the directory is re-listed when
//! that differs from the threads we hold, when a thread vanished, and every [`RELIST_EVERY`] scans
//! as a safety net (not needed by a scan whose task-iterator answer named exactly the threads held: the
//! kernel's own list of the group is that check). A thread created while a scan runs is picked up by the next scan.
//! A listing taken while other threads exit can skip a live one (procfs resumes a task listing by
//! position once the thread it stopped at is gone); the count then differs from the threads held, so the
//! next scan re-lists.
//!
//! Sleeping threads cost less: before re-reading the `stat` of a thread last seen sleeping (`S`/`I`),
//! the scanner reads its `schedstat` (`sum_exec_runtime run_delay pcount`, ~4× cheaper to generate).
//! If those bytes are unchanged the thread has not run since, and since a thread can only enter `D`
//! (or exit, or stop) by running, its state is still what we saw; `stat` is skipped. Threads last seen
//! in any other state (R, D, T…) always get `stat`. The one staleness this allows is a sleeper woken
//! but not yet run (`S`→`R` on a runqueue), which is harmless for finding D threads. Every
//! [`RELIST_EVERY`] scans each thread's `stat` is read anyway (staggered by tid), which also refreshes
//! a comm renamed from outside; where a shortcut below would skip the sleeper, that forced read is its
//! `schedstat` against the baseline instead (a second witness that it has not run; a sleeper's comm is
//! read by nobody: the watch loop keeps the comm of threads in D, which are always read).
//!
//! Quiet processes cost less still ([`Scanner::scan_with`]): given the process's summed activity counters
//! ([`crate::taskstats`], one netlink round trip for the whole thread group), a scan whose counters equal
//! the previous scan's skips every thread last seen sleeping, without even its `schedstat`: no thread of
//! the group ran in between, so none entered D, exited, stopped or renamed itself. Threads last seen in any
//! other state (D, R, T…) are still read (the tracker's no-progress proof needs the D ones); every thread
//! is read whenever the thread count differs from the threads held. The safety nets stay: the staggered
//! forced reads (each thread every [`RELIST_EVERY`] scans; in a quiet scan a sleeper's `schedstat` against
//! the baseline taken before its latest `stat`, and `stat` only if it moved or is gone) and the relist
//! every [`RELIST_EVERY`] scans; with a task iterator, one walk of the group when a check is due, which
//! vouches for every sleeper at once (see [`Scanner::refresh_held`]). They cover the one case the sums
//! could hide, a thread exiting (its
//! counters leave the live sums) while another is created with exactly the same sums, within one interval;
//! a comm cannot be written from outside the process (`/proc/<tid>/comm` refuses other writers). The counters are taken
//! before the thread count and before any thread is read, so whatever runs after the query shows at the
//! next scan.
//!
//! `stat` has no context-switch counters; those are in `status`, which costs ~10× more to generate.
//! The watchdog therefore reads `status` ([`Scanner::ctxt_switches`]) only for threads already seen
//! in `D`, to prove they make no progress.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use nix::dir::Dir;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::error::{Error, Result};
use crate::parse::stat::{parse_lite, Stat};
use crate::parse::Parse;
use crate::proc_root::{classify_io, ProcRoot, TaskFile};
use crate::task_iter::ProcessThreads;
use crate::taskstats::TgidCounters;

/// One thread as of the latest scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSample {
    pub tid: i32,
    /// One letter from stat (R S D T t Z X I P).
    pub state: char,
    pub comm: String,
    /// utime + stime in clock ticks.
    pub cpu_ticks: u64,
}

/// What changed in one scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScanSummary {
    pub threads: usize,
    pub new: usize,
    pub gone: usize,
    /// Threads read through open/read/close because no fd could be kept (RLIMIT_NOFILE).
    pub unkept: usize,
    /// Sleeping threads whose `stat` was skipped because `schedstat` showed they had not run.
    pub unchanged: usize,
    /// Sleeping threads not read at all because the process's counters had not moved (a quiet scan).
    pub quiet: usize,
    /// Sleeping threads not read because the task iterator showed them asleep with the switch count of
    /// the previous scan (busy processes; [`Scanner::set_thread_iter`]).
    pub unswitched: usize,
    /// Whether this scan used the task iterator's answer (false: none set, a quiet scan, a failed read,
    /// or an answer whose thread count differs from the task directory's).
    pub iterated: bool,
    /// Whether this scan re-listed the task directory.
    pub relisted: bool,
    /// Of `quiet`: sleepers whose safety-net check this scan was the task iterator's walk (asleep,
    /// unswitched), not a `schedstat` read.
    pub walked: usize,
}

struct Slot {
    /// None when the fd limit was reached: read by path instead.
    file: Option<File>,
    /// None when schedstat is unavailable (no CONFIG_SCHED_INFO, fd limit): stat every scan.
    schedstat: Option<File>,
    /// schedstat bytes read just before the latest `stat` of a sleeping thread; len 0 = none.
    sched: [u8; 64],
    sched_len: u8,
    sample: TaskSample,
    /// The task iterator's switch count taken before the latest `stat` read (None: not known).
    switches: Option<u64>,
    /// What the task iterator showed this thread at scan `hint_gen`: (asleep, switch count).
    hint: (bool, u64),
    hint_gen: u64,
    /// The scan from which this thread's safety-net check is due (see [`Scanner::refresh_held`]).
    net_due: u64,
}

/// Fds kept by all scanners of this process, against the RLIMIT_NOFILE soft limit: fds are kept while
/// under 90% of it, stat fds first (for every thread), schedstat fds (an optimisation) from what is
/// left, so scanners never take the last descriptors the rest of the program needs.
static KEPT_FDS: AtomicUsize = AtomicUsize::new(0);

fn fd_limit() -> usize {
    static LIMIT: OnceLock<usize> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        usize::try_from(raise_nofile_limit())
            .unwrap_or(1024)
            .max(64)
    })
}

/// Opens a per-task file to keep if the budget allows (`share` = fraction of the limit, in percent).
fn open_kept(
    root: &ProcRoot,
    pid: i32,
    tid: i32,
    file: TaskFile,
    share: usize,
) -> Result<Option<File>> {
    if KEPT_FDS.load(Ordering::Relaxed) >= fd_limit() * share / 100 {
        return Ok(None);
    }
    match root.open_task_file(pid, tid, file) {
        Ok(f) => {
            KEPT_FDS.fetch_add(1, Ordering::Relaxed);
            Ok(Some(f))
        }
        Err(Error::Io { source, .. })
            if matches!(
                source.raw_os_error(),
                Some(libc::EMFILE) | Some(libc::ENFILE)
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let kept = usize::from(self.file.is_some()) + usize::from(self.schedstat.is_some());
        KEPT_FDS.fetch_sub(kept, Ordering::Relaxed);
    }
}

/// Outcome of refreshing one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refresh {
    Read,
    /// schedstat shows the thread has not run since before its latest `stat`.
    Unchanged,
    /// Out of descriptors: the previous sample kept, nothing learnt.
    Kept,
    Gone,
}

/// Scans between unconditional re-listings of the task directory, and at most between two safety-net
/// checks of a sleeper.
pub const RELIST_EVERY: u64 = 16;

/// The next scan after `gen` at which thread `tid`'s staggered safety-net check falls: `(scan + tid)`
/// a multiple of [`RELIST_EVERY`], so the checks of a process's threads spread over the scans.
fn staggered_net_due(gen: u64, tid: u64) -> u64 {
    gen + RELIST_EVERY - (gen.wrapping_add(tid) % RELIST_EVERY)
}

pub struct Scanner {
    root: ProcRoot,
    pid: i32,
    task_dir: Dir,
    /// `/proc/<pid>/stat`, for `num_threads`.
    process_stat: Option<File>,
    slots: Vec<Slot>,
    index: HashMap<i32, usize>,
    generation: u64,
    buf: Vec<u8>,
    listed: Vec<i32>,
    skip_unchanged_sleepers: bool,
    /// The process's counters given to the previous scan.
    last_counters: Option<TgidCounters>,
    /// The busy-process shortcut: this process's task iterator, and the buffer its answers land in.
    threads_iter: Option<ProcessThreads>,
    iter_buf: Vec<u8>,
    /// Scans left before the counters are worth asking for again (see [`Scanner::wants_counters`]).
    busy_skips_left: u32,
    /// The scan from which the periodic re-listing is due.
    relist_due: u64,
}

/// What one task-iterator read of a scan told ([`Scanner::apply_thread_iter`]).
#[derive(Debug, Clone, Copy, Default)]
struct IterAnswer {
    trustworthy: bool,
    listed_held: bool,
}

/// With a task iterator, a process whose counters moved is asked for them again only after this many
/// scans (then twice in a row, to tell whether it went quiet).
const BUSY_SKIPS: u32 = 8;

/// Raises the soft RLIMIT_NOFILE to the hard limit (best effort) and returns the soft limit now in
/// force: a scanner keeps up to two fds per thread. The hard limit is left alone (set it with the
/// service's LimitNOFILE=). Note that children started afterwards inherit the raised soft limit.
pub fn raise_nofile_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => {
            if setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
                hard
            } else {
                soft
            }
        }
        Ok((soft, _)) => soft,
        Err(_) => 0,
    }
}

fn is_gone_errno(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ESRCH) | Some(libc::ENOENT))
}

impl Scanner {
    /// Starts watching `pid`; no such process → [`Error::NoSuchProcess`].
    pub fn new(root: &ProcRoot, pid: i32) -> Result<Scanner> {
        fd_limit();
        let path = root.task_dir(pid);
        let task_dir = Dir::open(
            &path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            nix::errno::Errno::ENOENT | nix::errno::Errno::ESRCH => Error::NoSuchProcess {
                pid,
                root: root.path().to_path_buf(),
            },
            other => classify_io(&path, std::io::Error::from(other), TaskFile::Stat.needs()),
        })?;
        let process_stat = File::open(root.pid_dir(pid).join("stat")).ok();
        Ok(Scanner {
            root: root.clone(),
            pid,
            task_dir,
            process_stat,
            slots: Vec::new(),
            index: HashMap::new(),
            generation: 0,
            buf: vec![0; 1024],
            listed: Vec::new(),
            skip_unchanged_sleepers: true,
            last_counters: None,
            threads_iter: None,
            iter_buf: Vec::new(),
            busy_skips_left: 0,
            relist_due: RELIST_EVERY,
        })
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Gives the scanner this process's task iterator ([`crate::task_iter::TaskIter::watch`]): from then
    /// on a scan that is not quiet reads it once and skips the threads it shows asleep whose switch
    /// count has not moved since the previous scan. None turns it off (every scan reads as before).
    pub fn set_thread_iter(&mut self, threads: Option<ProcessThreads>) {
        self.threads_iter = threads;
    }

    /// Whether the next scan should be given the process's counters ([`Scanner::scan_with`]). Always,
    /// without a task iterator. With one, a busy process (counters moved between two queries) is not
    /// worth the query for [`BUSY_SKIPS`] scans: the kernel sums every thread to answer it, about what
    /// the iterator costs, and the answer would only say "not quiet" again. After that, two queries in
    /// a row tell whether it went quiet.
    pub fn wants_counters(&self) -> bool {
        self.threads_iter.is_none() || self.busy_skips_left == 0
    }

    /// Whether a task iterator is set.
    pub fn has_thread_iter(&self) -> bool {
        self.threads_iter.is_some()
    }

    /// Reads the task iterator and marks each held thread with what it showed at scan `gen`. Trustworthy
    /// when the answer can be relied on: it read, parsed, lists this process only, and as many threads as
    /// the task directory counts (a listing that raced an exit, or a task the iterator does not visit,
    /// makes this scan read every thread). `listed_held` when, besides, every thread it listed is one
    /// held: the kernel's own list of the group is the threads held, so a re-listing could only agree.
    fn apply_thread_iter(&mut self, gen: u64, expected: Option<usize>) -> IterAnswer {
        let Scanner {
            pid,
            threads_iter,
            iter_buf,
            index,
            slots,
            ..
        } = self;
        let Some(threads) = threads_iter else {
            return IterAnswer::default();
        };
        let (mut count, mut held) = (0usize, 0usize);
        let mut foreign = false;
        let read = threads.visit(iter_buf, |record| {
            count += 1;
            foreign |= record.tgid != *pid;
            if let Some(&i) = index.get(&record.tid) {
                let slot = &mut slots[i];
                slot.hint = (record.asleep(), record.switches);
                slot.hint_gen = gen;
                held += 1;
            }
        });
        let trustworthy = read.is_ok() && !foreign && expected == Some(count);
        IterAnswer {
            trustworthy,
            listed_held: trustworthy && held == count && count == slots.len(),
        }
    }

    /// Turns the schedstat shortcut for sleeping threads off (stat for every thread every scan) or
    /// back on (the default); off also stops the task iterator's skipping. For benchmarks and for
    /// doubting users.
    pub fn set_skip_unchanged_sleepers(&mut self, on: bool) {
        self.skip_unchanged_sleepers = on;
    }

    fn list_tasks(&mut self) -> Result<()> {
        self.listed.clear();
        let mut n = 0usize;
        for entry in self.task_dir.iter() {
            let entry = entry.map_err(|e| match e {
                nix::errno::Errno::ENOENT | nix::errno::Errno::ESRCH => Error::NoSuchProcess {
                    pid: self.pid,
                    root: self.root.path().to_path_buf(),
                },
                other => Error::Io {
                    path: self.root.task_dir(self.pid),
                    source: other.into(),
                },
            })?;
            n += 1;
            let name = entry.file_name().to_bytes();
            if let Ok(tid) = crate::parse::parse_u64("tid", name) {
                if let Ok(tid) = i32::try_from(tid) {
                    self.listed.push(tid);
                }
            }
        }
        // An exited process's task dir lists nothing (not even "." on some kernels).
        if self.listed.is_empty() && (n <= 2) && !self.root.exists(self.pid) {
            return Err(Error::NoSuchProcess {
                pid: self.pid,
                root: self.root.path().to_path_buf(),
            });
        }
        Ok(())
    }

    /// Reads `schedstat` into `slot.sched` when the thread was last seen sleeping; Some(true) when
    /// it is unchanged (the thread has not run), None when the thread is gone.
    fn sched_unchanged(slot: &mut Slot, force: bool, enabled: bool) -> Option<bool> {
        let sleeping = matches!(slot.sample.state, 'S' | 'I');
        // Disabled: keep the baseline. It was taken before an earlier stat read, so if schedstat is
        // still equal to it later, the thread has not run since before the latest stat either.
        if !enabled {
            return Some(false);
        }
        let Some(f) = slot.schedstat.as_ref().filter(|_| sleeping) else {
            slot.sched_len = 0;
            return Some(false);
        };
        let mut now = [0u8; 64];
        let n = match f.read_at(&mut now, 0) {
            Ok(0) => return None,
            Ok(n) if n < now.len() => n,
            Err(e) if is_gone_errno(&e) => return None,
            // Longer than any real schedstat line, or unreadable: do not rely on it.
            _ => {
                if slot.schedstat.take().is_some() {
                    KEPT_FDS.fetch_sub(1, Ordering::Relaxed);
                }
                slot.sched_len = 0;
                return Some(false);
            }
        };
        let same = !force && usize::from(slot.sched_len) == n && slot.sched[..n] == now[..n];
        slot.sched[..n].copy_from_slice(&now[..n]);
        slot.sched_len = n as u8;
        Some(same)
    }

    fn refresh(
        root: &ProcRoot,
        pid: i32,
        slot: &mut Slot,
        buf: &mut Vec<u8>,
        force: bool,
        shortcut: bool,
    ) -> Result<Refresh> {
        match Self::sched_unchanged(slot, force, shortcut) {
            None => return Ok(Refresh::Gone),
            Some(true) => return Ok(Refresh::Unchanged),
            Some(false) => {}
        }
        let tid = slot.sample.tid;
        loop {
            let n = match &slot.file {
                Some(f) => match f.read_at(buf, 0) {
                    Ok(n) => n,
                    Err(e) if is_gone_errno(&e) => return Ok(Refresh::Gone),
                    Err(e) => {
                        return Err(classify_io(
                            &root.task_path(pid, tid, TaskFile::Stat),
                            e,
                            TaskFile::Stat.needs(),
                        ))
                    }
                },
                None => match root.read_task_file(pid, tid, TaskFile::Stat) {
                    Ok(b) => {
                        if b.len() > buf.len() {
                            buf.resize(b.len(), 0);
                        }
                        buf[..b.len()].copy_from_slice(&b);
                        b.len()
                    }
                    Err(e) if e.is_gone() => return Ok(Refresh::Gone),
                    // Out of descriptors: keep the previous sample rather than fail the scan.
                    Err(Error::Io { ref source, .. })
                        if matches!(
                            source.raw_os_error(),
                            Some(libc::EMFILE) | Some(libc::ENFILE)
                        ) =>
                    {
                        return Ok(Refresh::Kept)
                    }
                    Err(e) => return Err(e),
                },
            };
            if n == 0 {
                return Ok(Refresh::Gone);
            }
            if n == buf.len() && buf.len() < 64 * 1024 {
                // A stat line longer than the buffer (very long comm in a fake tree): grow, retry.
                let len = buf.len() * 2;
                buf.resize(len, 0);
                continue;
            }
            let lite = parse_lite(&buf[..n])?;
            let s = &mut slot.sample;
            s.state = char::from(lite.state);
            s.cpu_ticks = lite.cpu_ticks;
            if s.comm.as_bytes() != lite.comm {
                s.comm.clear();
                s.comm.push_str(&String::from_utf8_lossy(lite.comm));
            }
            if !matches!(s.state, 'S' | 'I') {
                slot.sched_len = 0;
            }
            return Ok(Refresh::Read);
        }
    }

    fn no_such_process(&self) -> Error {
        Error::NoSuchProcess {
            pid: self.pid,
            root: self.root.path().to_path_buf(),
        }
    }

    /// The process's thread count: the link count of its (kept open) task directory, which procfs gives
    /// as 2 + the thread count (`proc_task_getattr`), O(1); else `num_threads` from the process's stat,
    /// which the kernel makes by walking every thread (the costliest read of a quiet scan). None when
    /// neither can be read (then the task directory is always re-listed).
    fn num_threads(&mut self) -> Result<Option<usize>> {
        if let Ok(st) = nix::sys::stat::fstat(&self.task_dir) {
            // 2 = no thread: the process is gone (or this is no procfs): the stat read below says which.
            if st.st_nlink > 2 {
                return Ok(usize::try_from(st.st_nlink - 2).ok());
            }
        }
        self.num_threads_from_stat()
    }

    fn num_threads_from_stat(&mut self) -> Result<Option<usize>> {
        let Some(f) = &self.process_stat else {
            return Ok(None);
        };
        let n = match f.read_at(&mut self.buf, 0) {
            Ok(n) => n,
            Err(e) if is_gone_errno(&e) => return Err(self.no_such_process()),
            Err(_) => return Ok(None),
        };
        if n == 0 {
            return Err(self.no_such_process());
        }
        Ok(Stat::parse(&self.buf[..n])
            .ok()
            .and_then(|s| usize::try_from(s.num_threads).ok()))
    }

    /// Re-reads every thread. The process gone → [`Error::NoSuchProcess`].
    pub fn scan(&mut self) -> Result<ScanSummary> {
        self.scan_with(None)
    }

    /// [`Scanner::scan`], given the process's counters queried just now (before this call): when they
    /// equal the previous scan's, the threads last seen sleeping are not read (see the module doc).
    /// None (no taskstats) = read as [`Scanner::scan`] does.
    pub fn scan_with(&mut self, counters: Option<TgidCounters>) -> Result<ScanSummary> {
        self.generation += 1;
        let gen = self.generation;
        let expected = self.num_threads()?;
        let quiet = counters.is_some()
            && counters == self.last_counters
            && expected == Some(self.slots.len())
            && gen > 1;
        if self.threads_iter.is_some() {
            if counters.is_some() && self.last_counters.is_some() && !quiet {
                self.busy_skips_left = BUSY_SKIPS;
            } else if counters.is_none() {
                self.busy_skips_left = self.busy_skips_left.saturating_sub(1);
            }
        }
        self.last_counters = counters;
        let mut summary = ScanSummary::default();
        // 0. Busy processes: one task-iterator read says which threads slept through since last scan.
        //    Quiet ones: only when a safety net is due, which that one read answers for every thread.
        let walk_net = quiet && self.threads_iter.is_some() && self.net_due(gen);
        let answer = if (!quiet || walk_net) && self.skip_unchanged_sleepers {
            self.apply_thread_iter(gen, expected)
        } else {
            IterAnswer::default()
        };
        let iterated = answer.trustworthy;
        summary.iterated = iterated;

        // 1. Re-read the threads we hold; drop the ones that vanished.
        self.refresh_held(gen, quiet, iterated, &mut summary)?;
        // 2. Look for new threads only when something changed (or periodically, unless the iterator
        //    has just listed exactly the threads held).
        self.add_new_threads(gen, expected, answer.listed_held, &mut summary)?;
        summary.unkept = self.slots.iter().filter(|s| s.file.is_none()).count();
        summary.threads = self.slots.len();
        Ok(summary)
    }

    /// Whether a safety net is due at scan `gen`: the periodic re-listing, or a sleeper's check.
    fn net_due(&self, gen: u64) -> bool {
        gen >= self.relist_due
            || self
                .slots
                .iter()
                .any(|s| gen >= s.net_due && matches!(s.sample.state, 'S' | 'I'))
    }

    /// Step 1 of a scan: re-reads the threads held (all but those a shortcut shows unchanged) and drops
    /// the ones that vanished.
    ///
    /// The safety net: a sleeper a shortcut would skip gets a second, independent check at the latest
    /// [`RELIST_EVERY`] scans after its previous one (`net_due`). In a busy scan (the task iterator shows
    /// it asleep and unswitched) that check is its `schedstat`, staggered by tid as it always was. In a
    /// quiet scan (the taskstats sums unchanged) with a task iterator, the check is the iterator itself,
    /// read only when some check is due: one kernel walk of the group witnesses every sleeper at once
    /// (asleep, the switch count taken before its latest `stat`), so a quiet process costs one walk per
    /// [`RELIST_EVERY`] scans instead of a `schedstat` read per thread (issue 40); a sleeper the walk
    /// cannot vouch for gets the `schedstat` check, as without an iterator.
    fn refresh_held(
        &mut self,
        gen: u64,
        quiet: bool,
        iterated: bool,
        summary: &mut ScanSummary,
    ) -> Result<()> {
        let mut i = 0;
        while i < self.slots.len() {
            let tid = self.slots[i].sample.tid as u64;
            let sleeping = matches!(self.slots[i].sample.state, 'S' | 'I');
            // A quiet scan that read the iterator (a check was due): it checks every sleeper now.
            let walk_net = quiet && iterated && sleeping;
            let force = gen >= self.slots[i].net_due || walk_net;
            if quiet && !force && sleeping {
                summary.quiet += 1;
                i += 1;
                continue;
            }
            // The iterator's switch count of this scan, when it listed the thread.
            let switches_now = (iterated && self.slots[i].hint_gen == gen).then(|| {
                let slot = &self.slots[i];
                (slot.hint.0, slot.hint.1)
            });
            // Asleep now, asleep at its last read, and never switched out in between: it has not run, so
            // it cannot have entered D or exited since.
            let unswitched_sleeper = switches_now.is_some_and(|(asleep, switches)| {
                asleep && sleeping && self.slots[i].switches == Some(switches)
            });
            if !force && unswitched_sleeper {
                summary.unswitched += 1;
                i += 1;
                continue;
            }
            // The quiet scan's net, answered by the walk: the taskstats sums and the walk, two witnesses.
            if walk_net && unswitched_sleeper {
                self.slots[i].net_due = gen + RELIST_EVERY;
                summary.quiet += 1;
                summary.walked += 1;
                i += 1;
                continue;
            }
            // The safety net for a sleeper the shortcut would skip (a quiet scan: nothing of the group ran;
            // a busy one: the iterator shows it asleep and unswitched): its schedstat, compared with the
            // baseline taken before an earlier `stat`, is a second, independent witness that it has not run,
            // at a quarter of the cost of `stat`: gone reads ESRCH, unchanged means it has not run since,
            // changed reads `stat` (issue 40). A sleeper's comm is not refreshed by it; nothing reads a
            // sleeper's comm (the tracker keeps the comm of threads in D, which are always read).
            let net_by_schedstat =
                force && sleeping && self.skip_unchanged_sleepers && (quiet || unswitched_sleeper);
            let r = Self::refresh(
                &self.root,
                self.pid,
                &mut self.slots[i],
                &mut self.buf,
                force && !net_by_schedstat,
                net_by_schedstat
                    || (self.skip_unchanged_sleepers && !quiet && switches_now.is_none()),
            )?;
            let slot = &mut self.slots[i];
            if r == Refresh::Read || (r == Refresh::Unchanged && switches_now.is_some()) {
                // Taken before this read: if the thread runs after it, the next count differs. A
                // schedstat unchanged since before the latest `stat` says it has not run since, so the
                // count now is the count then.
                slot.switches = switches_now.map(|(_, switches)| switches);
            }
            if force && matches!(r, Refresh::Read | Refresh::Unchanged) {
                slot.net_due = if walk_net {
                    // Every sleeper checked at this scan: the next walk is one for all of them.
                    gen + RELIST_EVERY
                } else {
                    staggered_net_due(gen, tid)
                };
            }
            if r != Refresh::Gone {
                if matches!(r, Refresh::Unchanged | Refresh::Kept) {
                    summary.unchanged += 1;
                }
                i += 1;
            } else {
                let gone = self.slots.swap_remove(i);
                self.index.remove(&gone.sample.tid);
                if let Some(moved) = self.slots.get(i) {
                    self.index.insert(moved.sample.tid, i);
                }
                summary.gone += 1;
            }
        }
        Ok(())
    }

    /// Step 2 of a scan: looks for new threads, only when something changed (or periodically).
    fn add_new_threads(
        &mut self,
        gen: u64,
        expected: Option<usize>,
        listed_by_iterator: bool,
        summary: &mut ScanSummary,
    ) -> Result<()> {
        // The periodic re-listing is a safety net for a listing that missed a thread; a kernel list of
        // the group that named exactly the threads held, this scan, is that check already.
        let relist = gen == 1
            || summary.gone > 0
            || expected != Some(self.slots.len())
            || (gen >= self.relist_due && !listed_by_iterator);
        if relist || listed_by_iterator {
            self.relist_due = gen + RELIST_EVERY;
        }
        if relist {
            summary.relisted = true;
            self.list_tasks()?;
            for j in 0..self.listed.len() {
                let tid = self.listed[j];
                if self.index.contains_key(&tid) {
                    continue;
                }
                let file = match open_kept(&self.root, self.pid, tid, TaskFile::Stat, 90) {
                    Ok(f) => f,
                    Err(Error::Gone { .. }) => continue,
                    Err(e) => return Err(e),
                };
                let mut slot = Slot {
                    file,
                    schedstat: None,
                    sched: [0; 64],
                    sched_len: 0,
                    switches: None,
                    hint: (false, 0),
                    hint_gen: 0,
                    net_due: staggered_net_due(gen, tid as u64),
                    sample: TaskSample {
                        tid,
                        state: '?',
                        comm: String::new(),
                        cpu_ticks: 0,
                    },
                };
                if Self::refresh(&self.root, self.pid, &mut slot, &mut self.buf, true, false)?
                    == Refresh::Gone
                {
                    continue;
                }
                self.index.insert(tid, self.slots.len());
                self.slots.push(slot);
                summary.new += 1;
            }
            // Second pass, after every thread has its stat fd: schedstat fds (the shortcut for
            // sleepers) from what is left of the budget. Without one, stat is read every scan.
            for slot in self.slots.iter_mut().filter(|s| s.schedstat.is_none()) {
                match open_kept(
                    &self.root,
                    self.pid,
                    slot.sample.tid,
                    TaskFile::Schedstat,
                    90,
                ) {
                    Ok(Some(f)) => slot.schedstat = Some(f),
                    Ok(None) => break,
                    Err(_) => {}
                }
            }
        }
        Ok(())
    }

    /// The threads as of the latest scan (unordered).
    pub fn samples(&self) -> impl Iterator<Item = &TaskSample> {
        self.slots.iter().map(|s| &s.sample)
    }

    pub fn sample(&self, tid: i32) -> Option<&TaskSample> {
        self.index.get(&tid).map(|&i| &self.slots[i].sample)
    }

    /// voluntary + nonvoluntary context switches of one thread, from `status`. Meant for threads in
    /// D only (status is far costlier than stat); unchanged between samples = the thread never ran.
    /// None when the thread is gone.
    pub fn ctxt_switches(&self, tid: i32) -> Result<Option<u64>> {
        match self.root.read_task_status(self.pid, tid) {
            Ok(s) => Ok(s.ctxt_switches()),
            Err(e) if e.is_gone() => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests;
