//! [`FakeProc`]: a fake proc tree on disk, laid out like `/proc`, for tests and recorded snapshots.
//! Not for production code: nothing here is bounded or hardened, and every write panics on failure.
//!
//! One builder shared by capture's and the agent's tests, so that a tree is described by what it
//! holds, not by the file layout:
//!
//! ```
//! use capture::testing::FakeProc;
//! let fake = FakeProc::new();
//! fake.process(4100).comm("python3").start(99).cgroup("/user.slice").fd(5, "/dev/nvidiactl");
//! fake.task(4100, 4107).comm("pt_main").state('D').wchan("os_acquire_rwlock_write");
//! fake.meminfo("MemTotal: 1024 kB\n");
//! let root = fake.root();
//! assert_eq!(root.tasks(4100).unwrap(), [4100, 4107]);
//! ```
//!
//! Builders write as they go (each setter rewrites the files it affects), so a chain needs no final
//! call. A task's `stat` has all 52 fields; its `status` has Name, State, Tgid, Pid, PPid, NSpid and
//! the context switch counts.

use std::path::{Path, PathBuf};

use crate::proc_root::ProcRoot;

/// A fake proc tree, in its own temporary directory or in a directory the test names.
#[derive(Debug)]
pub struct FakeProc {
    dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
}

impl Default for FakeProc {
    fn default() -> Self {
        FakeProc::new()
    }
}

impl FakeProc {
    /// An empty tree in a new temporary directory (removed on drop).
    pub fn new() -> FakeProc {
        let temp = tempfile::tempdir().expect("temporary directory for a fake proc tree");
        FakeProc {
            dir: temp.path().to_path_buf(),
            _temp: Some(temp),
        }
    }

    /// An empty tree at `dir` (created; left in place on drop).
    pub fn at(dir: impl Into<PathBuf>) -> FakeProc {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).expect("fake proc directory");
        FakeProc { dir, _temp: None }
    }

    /// The tree's directory (to corrupt a file by hand, or to pass as `--proc-root`).
    pub fn path(&self) -> &Path {
        &self.dir
    }

    pub fn root(&self) -> ProcRoot {
        ProcRoot::new(&self.dir)
    }

    /// Process `pid`: `<pid>/stat`, `<pid>/cgroup`, and its main thread `task/<pid>`.
    pub fn process(&self, pid: i32) -> FakeProcess {
        let process = FakeProcess {
            dir: self.dir.join(pid.to_string()),
            main: FakeTask::new(&self.dir, pid, pid),
        };
        process.write();
        process
    }

    /// Thread `tid` of `pid` (created with the defaults of [`FakeTask`]).
    pub fn task(&self, pid: i32, tid: i32) -> FakeTask {
        let task = FakeTask::new(&self.dir, pid, tid);
        task.write();
        task
    }

    /// A thread listed in `task/` whose files are gone (it exited while the directory was read).
    pub fn vanished_task(&self, pid: i32, tid: i32) {
        mkdir(&task_dir(&self.dir, pid, tid));
    }

    /// The process exited: its directory is gone.
    pub fn remove_process(&self, pid: i32) {
        std::fs::remove_dir_all(self.dir.join(pid.to_string())).expect("remove fake process");
    }

    /// Any file under the tree, with any bytes (hostile content, files no builder knows).
    pub fn file(&self, relative: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> &Self {
        write(&self.dir.join(relative), bytes.as_ref());
        self
    }

    pub fn meminfo(&self, text: &str) -> &Self {
        self.file("meminfo", text)
    }

    pub fn loadavg(&self, text: &str) -> &Self {
        self.file("loadavg", text)
    }

    /// `pressure/<resource>`.
    pub fn pressure(&self, resource: &str, text: &str) -> &Self {
        self.file(Path::new("pressure").join(resource), text)
    }

    pub fn boot_id(&self, text: &str) -> &Self {
        self.file("sys/kernel/random/boot_id", text)
    }

    /// A sysctl by its dotted name.
    pub fn sysctl(&self, name: &str, value: &str) -> &Self {
        self.file(Path::new("sys").join(name.replace('.', "/")), value)
    }

    /// `driver/nvidia/version`.
    pub fn nvidia_version(&self, text: &str) -> &Self {
        self.file("driver/nvidia/version", text)
    }

    /// `driver/nvidia/gpus/<bus>/information`.
    pub fn nvidia_gpu(&self, bus: &str, information: &str) -> &Self {
        self.file(
            Path::new("driver/nvidia/gpus")
                .join(bus)
                .join("information"),
            information,
        )
    }
}

/// One thread's files under `<pid>/task/<tid>/`. Defaults: comm `t<tid>`, state `S`, ppid 1, start
/// time 1, flags `0x400100` (a user task), no CPU time, wchan `0`, syscall `running`, empty stack.
#[derive(Debug, Clone)]
pub struct FakeTask {
    dir: PathBuf,
    pid: i32,
    tid: i32,
    comm: String,
    state: char,
    ppid: i32,
    flags: u32,
    start: u64,
    utime: u64,
    stime: u64,
    processor: i32,
    threads: i64,
    nspid: Vec<i32>,
    ctxt_switches: (u64, u64),
}

impl FakeTask {
    fn new(root: &Path, pid: i32, tid: i32) -> FakeTask {
        FakeTask {
            dir: task_dir(root, pid, tid),
            pid,
            tid,
            comm: format!("t{tid}"),
            state: 'S',
            ppid: 1,
            flags: 0x0040_0100,
            start: 1,
            utime: 0,
            stime: 0,
            processor: 0,
            threads: 1,
            nspid: vec![tid],
            ctxt_switches: (0, 0),
        }
    }

    pub fn comm(mut self, comm: &str) -> Self {
        self.comm = comm.to_string();
        self.rewrite()
    }

    pub fn state(mut self, state: char) -> Self {
        self.state = state;
        self.rewrite()
    }

    pub fn ppid(mut self, ppid: i32) -> Self {
        self.ppid = ppid;
        self.rewrite()
    }

    /// stat's `flags` (`PF_KTHREAD` = 0x200000 makes a kernel thread).
    pub fn flags(mut self, flags: u32) -> Self {
        self.flags = flags;
        self.rewrite()
    }

    /// stat's start time, clock ticks after boot.
    pub fn start(mut self, ticks: u64) -> Self {
        self.start = ticks;
        self.rewrite()
    }

    /// stat's utime and stime, clock ticks.
    pub fn cpu_ticks(mut self, utime: u64, stime: u64) -> Self {
        (self.utime, self.stime) = (utime, stime);
        self.rewrite()
    }

    /// stat's `processor` (last CPU).
    pub fn processor(mut self, cpu: i32) -> Self {
        self.processor = cpu;
        self.rewrite()
    }

    /// stat's `num_threads`.
    pub fn num_threads(mut self, threads: i64) -> Self {
        self.threads = threads;
        self.rewrite()
    }

    /// status's `NSpid`: the id in each pid namespace, outermost first.
    pub fn nspid(mut self, ids: &[i32]) -> Self {
        self.nspid = ids.to_vec();
        self.rewrite()
    }

    /// status's voluntary and nonvoluntary context switches.
    pub fn ctxt_switches(mut self, voluntary: u64, nonvoluntary: u64) -> Self {
        self.ctxt_switches = (voluntary, nonvoluntary);
        self.rewrite()
    }

    pub fn wchan(self, text: &str) -> Self {
        write(&self.dir.join("wchan"), text.as_bytes());
        self
    }

    pub fn syscall(self, text: &str) -> Self {
        write(&self.dir.join("syscall"), text.as_bytes());
        self
    }

    pub fn stack(self, text: &str) -> Self {
        write(&self.dir.join("stack"), text.as_bytes());
        self
    }

    /// `task/<tid>/children`.
    pub fn children(self, pids: &[i32]) -> Self {
        let text: Vec<String> = pids.iter().map(|p| format!("{p} ")).collect();
        write(&self.dir.join("children"), text.concat().as_bytes());
        self
    }

    /// Any file of this thread, with any bytes.
    pub fn file(self, name: &str, bytes: impl AsRef<[u8]>) -> Self {
        write(&self.dir.join(name), bytes.as_ref());
        self
    }

    fn stat_line(&self) -> String {
        let FakeTask {
            pid,
            tid,
            comm,
            state,
            ppid,
            flags,
            start,
            utime,
            stime,
            processor,
            threads,
            ..
        } = self;
        format!(
            "{tid} ({comm}) {state} {ppid} {pid} {pid} 0 -1 {flags} 100 0 0 0 {utime} {stime} 0 0 20 0 {threads} 0 {start} 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 {processor} 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
        )
    }

    fn rewrite(self) -> Self {
        self.write();
        self
    }

    fn write(&self) {
        let stat = self.stat_line();
        write(&self.dir.join("stat"), stat.as_bytes());
        if self.tid == self.pid {
            // The process-level stat is the main thread's.
            write(&self.dir.join("../../stat"), stat.as_bytes());
        }
        let nspid: Vec<String> = self.nspid.iter().map(i32::to_string).collect();
        let status = format!(
            "Name:\t{}\nState:\t{} (fake)\nTgid:\t{}\nPid:\t{}\nPPid:\t{}\nNSpid:\t{}\nvoluntary_ctxt_switches:\t{}\nnonvoluntary_ctxt_switches:\t{}\n",
            self.comm,
            self.state,
            self.pid,
            self.tid,
            self.ppid,
            nspid.join("\t"),
            self.ctxt_switches.0,
            self.ctxt_switches.1,
        );
        write(&self.dir.join("status"), status.as_bytes());
    }
}

/// A process: its main thread ([`FakeTask`]'s setters, applied to `<pid>/stat` too) and the
/// process-level files (cgroup, fd links, ns/pid, cmdline, mem). Default cgroup `0::/`.
#[derive(Debug, Clone)]
pub struct FakeProcess {
    dir: PathBuf,
    main: FakeTask,
}

impl FakeProcess {
    fn write(&self) {
        self.main.write();
        write(&self.dir.join("cgroup"), b"0::/\n");
        mkdir(&self.dir.join("fd"));
    }

    fn main(mut self, change: impl FnOnce(FakeTask) -> FakeTask) -> Self {
        self.main = change(self.main);
        self
    }

    pub fn comm(self, comm: &str) -> Self {
        self.main(|t| t.comm(comm))
    }

    pub fn state(self, state: char) -> Self {
        self.main(|t| t.state(state))
    }

    pub fn ppid(self, ppid: i32) -> Self {
        self.main(|t| t.ppid(ppid))
    }

    pub fn flags(self, flags: u32) -> Self {
        self.main(|t| t.flags(flags))
    }

    pub fn start(self, ticks: u64) -> Self {
        self.main(|t| t.start(ticks))
    }

    pub fn nspid(self, ids: &[i32]) -> Self {
        self.main(|t| t.nspid(ids))
    }

    /// The main thread's `children`.
    pub fn children(self, pids: &[i32]) -> Self {
        self.main(|t| t.children(pids))
    }

    /// `<pid>/cgroup`: one cgroup v2 line `0::<path>`.
    pub fn cgroup(self, path: &str) -> Self {
        write(&self.dir.join("cgroup"), format!("0::{path}\n").as_bytes());
        self
    }

    /// `fd/<n>` → `target` (a path, or `socket:[5]`-style text).
    pub fn fd(self, n: i32, target: impl AsRef<Path>) -> Self {
        let link = self.dir.join("fd").join(n.to_string());
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(target, link).expect("fake fd link");
        self
    }

    /// `fd/0`, `fd/1`, … → `targets`.
    pub fn fds<P: AsRef<Path>>(self, targets: &[P]) -> Self {
        targets
            .iter()
            .enumerate()
            .fold(self, |p, (n, t)| p.fd(n as i32, t))
    }

    /// `ns/pid` → `pid:[<inode>]`.
    pub fn pid_ns(self, inode: u64) -> Self {
        let ns = self.dir.join("ns");
        mkdir(&ns);
        let link = ns.join("pid");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(format!("pid:[{inode}]"), link).expect("fake ns link");
        self
    }

    pub fn cmdline(self, bytes: &[u8]) -> Self {
        write(&self.dir.join("cmdline"), bytes);
        self
    }

    /// A sparse `mem` file of `len` bytes (holes read as zeroes) with `bytes` at `offset`: a
    /// process address space without the disk it would take.
    pub fn sparse_mem(self, len: u64, offset: u64, bytes: &[u8]) -> Self {
        use std::io::{Seek, SeekFrom, Write};
        let mut file = std::fs::File::create(self.dir.join("mem")).expect("fake mem");
        file.set_len(len).expect("fake mem length");
        file.seek(SeekFrom::Start(offset)).expect("fake mem seek");
        file.write_all(bytes).expect("fake mem write");
        self
    }

    /// Any file of this process, with any bytes.
    pub fn file(self, name: &str, bytes: impl AsRef<[u8]>) -> Self {
        write(&self.dir.join(name), bytes.as_ref());
        self
    }
}

fn task_dir(root: &Path, pid: i32, tid: i32) -> PathBuf {
    root.join(pid.to_string())
        .join("task")
        .join(tid.to_string())
}

fn mkdir(dir: &Path) {
    std::fs::create_dir_all(dir).expect("fake proc directory");
}

fn write(path: &Path, bytes: &[u8]) {
    if let Some(parent) = path.parent() {
        mkdir(parent);
    }
    std::fs::write(path, bytes).expect("fake proc file");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_built_tree_reads_back_through_proc_root() {
        let fake = FakeProc::new();
        fake.process(10)
            .comm("python3")
            .state('D')
            .start(77)
            .ppid(4)
            .nspid(&[10, 1])
            .cgroup("/machine.slice/x.scope")
            .fd(5, "/dev/nvidiactl")
            .pid_ns(4_026_531_836);
        fake.task(10, 11).comm("worker").children(&[20, 21]);
        fake.vanished_task(10, 12);
        let root = fake.root();
        let stat = root.read_stat(10).unwrap();
        assert_eq!(
            (stat.comm.as_str(), stat.state, stat.ppid, stat.starttime),
            ("python3", 'D', 4, 77)
        );
        assert_eq!(root.read_task_status(10, 10).unwrap().nspid, [10, 1]);
        assert_eq!(root.tasks(10).unwrap(), [10, 11, 12]);
        assert!(root.read_task_stat(10, 12).unwrap_err().is_gone());
        assert_eq!(root.read_task_stat(10, 11).unwrap().comm, "worker");
        assert_eq!(root.children(10, 11).unwrap(), [20, 21]);
        assert_eq!(root.cgroup(10).unwrap()[0].path, "/machine.slice/x.scope");
        assert_eq!(root.pid_ns(10).unwrap(), 4_026_531_836);
        let fds = root.fd_links(10, 10).unwrap();
        assert_eq!(fds.len(), 1);
        assert_eq!(fds[0].fd, 5);
        assert_eq!(fds[0].target.path(), Some("/dev/nvidiactl"));
        fake.remove_process(10);
        assert!(!root.exists(10));
    }

    #[test]
    fn sparse_mem_holds_bytes_at_an_offset_without_the_disk() {
        let fake = FakeProc::new();
        fake.process(3).sparse_mem(1 << 40, 1 << 39, b"ring");
        let path = fake.path().join("3/mem");
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), 1 << 40);
        use std::os::unix::fs::{FileExt, MetadataExt};
        assert!(meta.blocks() < 1024, "{} blocks", meta.blocks());
        let mut buf = [0u8; 4];
        let file = std::fs::File::open(path).unwrap();
        file.read_exact_at(&mut buf, 1 << 39).unwrap();
        assert_eq!(&buf, b"ring");
        file.read_exact_at(&mut buf, 12345).unwrap();
        assert_eq!(buf, [0; 4]);
    }
}
