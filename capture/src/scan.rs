//! The watch loop's hot path: the state of every thread of a process, every interval, cheaply.
//!
//! Each task's `stat` file is opened once and kept; every scan re-reads it with `pread` at offset 0
//! (no open/close, no path walk, no dentry lookup). New tasks are found by re-reading the task
//! directory (kept open, rewound). A kept fd also pins the task: a reused tid can never be mistaken
//! for the old thread (the old fd reads ESRCH and is dropped, the new task is opened afresh).
//!
//! `stat` has no context-switch counters; those are in `status`, which costs ~10× more to generate.
//! The watchdog therefore reads `status` ([`Scanner::ctxt_switches`]) only for threads already seen
//! in `D`, to prove they make no progress.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

use nix::dir::Dir;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use crate::error::{Error, Result};
use crate::parse::stat::parse_lite;
use crate::proc_root::{classify_io, ProcRoot, TaskFile};

/// One thread as of the latest scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSample {
    pub tid: i32,
    /// One letter from stat (R S D T t Z X I P).
    pub state: char,
    pub comm: String,
    /// utime + stime in clock ticks.
    pub cpu_ticks: u64,
    pub processor: Option<i32>,
}

/// What changed in one scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ScanSummary {
    pub threads: usize,
    pub new: usize,
    pub gone: usize,
    /// Threads read through open/read/close because no fd could be kept (RLIMIT_NOFILE).
    pub unkept: usize,
}

struct Slot {
    /// None when the fd limit was reached: read by path instead.
    file: Option<File>,
    seen: u64,
    sample: TaskSample,
}

pub struct Scanner {
    root: ProcRoot,
    pid: i32,
    task_dir: Dir,
    slots: Vec<Slot>,
    index: HashMap<i32, usize>,
    generation: u64,
    buf: Vec<u8>,
    listed: Vec<i32>,
}

/// Raises the soft RLIMIT_NOFILE to the hard limit (best effort): a scanner keeps one fd per thread.
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
        raise_nofile_limit();
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
        Ok(Scanner {
            root: root.clone(),
            pid,
            task_dir,
            slots: Vec::new(),
            index: HashMap::new(),
            generation: 0,
            buf: vec![0; 1024],
            listed: Vec::new(),
        })
    }

    pub fn pid(&self) -> i32 {
        self.pid
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

    fn read_slot(root: &ProcRoot, pid: i32, slot: &mut Slot, buf: &mut Vec<u8>) -> Result<bool> {
        let tid = slot.sample.tid;
        loop {
            let n = match &slot.file {
                Some(f) => match f.read_at(buf, 0) {
                    Ok(n) => n,
                    Err(e) if is_gone_errno(&e) => return Ok(false),
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
                    Err(e) if e.is_gone() => return Ok(false),
                    Err(e) => return Err(e),
                },
            };
            if n == 0 {
                return Ok(false);
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
            s.processor = lite.processor;
            if s.comm.as_bytes() != lite.comm {
                s.comm.clear();
                s.comm.push_str(&String::from_utf8_lossy(lite.comm));
            }
            return Ok(true);
        }
    }

    /// Re-reads every thread. The process gone → [`Error::NoSuchProcess`].
    pub fn scan(&mut self) -> Result<ScanSummary> {
        self.generation += 1;
        let gen = self.generation;
        self.list_tasks()?;
        let mut summary = ScanSummary::default();
        for i in 0..self.listed.len() {
            let tid = self.listed[i];
            if let Some(&idx) = self.index.get(&tid) {
                self.slots[idx].seen = gen;
                continue;
            }
            let file = match self.root.open_task_stat(self.pid, tid) {
                Ok(f) => Some(f),
                Err(Error::Gone { .. }) => continue,
                Err(Error::Io { source, .. }) if source.raw_os_error() == Some(libc::EMFILE) => {
                    None
                }
                Err(e) => return Err(e),
            };
            self.index.insert(tid, self.slots.len());
            self.slots.push(Slot {
                file,
                seen: gen,
                sample: TaskSample {
                    tid,
                    state: '?',
                    comm: String::new(),
                    cpu_ticks: 0,
                    processor: None,
                },
            });
            summary.new += 1;
        }
        let mut i = 0;
        while i < self.slots.len() {
            let alive = self.slots[i].seen == gen
                && Self::read_slot(&self.root, self.pid, &mut self.slots[i], &mut self.buf)?;
            if alive {
                if self.slots[i].file.is_none() {
                    summary.unkept += 1;
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
        summary.threads = self.slots.len();
        Ok(summary)
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
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    #[test]
    fn sees_new_and_gone_threads_of_this_process() {
        let me = std::process::id() as i32;
        let mut scanner = Scanner::new(&ProcRoot::default(), me).unwrap();
        let first = scanner.scan().unwrap();
        assert!(first.threads >= 1);
        let tid = nix::unistd::gettid().as_raw();
        assert_eq!(scanner.sample(tid).unwrap().state, 'R');

        let start = Arc::new(Barrier::new(4));
        let stop = Arc::new(Barrier::new(4));
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let (start, stop) = (start.clone(), stop.clone());
                std::thread::Builder::new()
                    .name("scan-probe".into())
                    .spawn(move || {
                        start.wait();
                        stop.wait();
                    })
                    .unwrap()
            })
            .collect();
        start.wait();
        let s = scanner.scan().unwrap();
        assert!(s.new >= 3, "{s:?}");
        let probes: Vec<_> = scanner
            .samples()
            .filter(|t| t.comm == "scan-probe")
            .collect();
        assert_eq!(probes.len(), 3);
        assert!(probes.iter().all(|t| t.state == 'S'), "{probes:?}");
        let probe = probes[0].tid;
        assert!(scanner.ctxt_switches(probe).unwrap().unwrap() >= 1);
        stop.wait();
        for h in handles {
            h.join().unwrap();
        }
        let s = scanner.scan().unwrap();
        assert!(s.gone >= 3, "{s:?}");
        assert!(scanner.samples().all(|t| t.comm != "scan-probe"));
        assert_eq!(scanner.ctxt_switches(probe).unwrap(), None);
    }

    #[test]
    fn exited_process_is_an_error() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let mut scanner = Scanner::new(&ProcRoot::default(), pid).unwrap();
        assert_eq!(scanner.scan().unwrap().threads, 1);
        assert_eq!(scanner.sample(pid).unwrap().comm, "sleep");
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(matches!(scanner.scan(), Err(Error::NoSuchProcess { .. })));
        assert!(matches!(
            Scanner::new(&ProcRoot::default(), pid),
            Err(Error::NoSuchProcess { .. })
        ));
    }
}
