//! Risky reads in a sacrificial child process with a deadline.
//!
//! Some evidence can only be read through a path that may sleep forever: `<proc root>/<pid>/cmdline` and
//! `<proc root>/<pid>/mem` (a wedged ioctl's argument, [`ProbeKind::ReadMem`]) take the target's mmap lock,
//! files under the NVIDIA driver's proc directory and `nvidia-smi` take the RM API lock.
//! None of those reads ever happens in a thread of wedge-capture. Each one runs in a child process (a `fork`
//! whose child only makes raw system calls, or a spawned program); its output comes back through a pipe that
//! the parent polls with a deadline. On timeout the child gets SIGKILL and is *not* waited for: a child stuck
//! in an uninterruptible sleep stays a zombie-to-be until the kernel lets it go, and is reaped later without
//! blocking. The number of such stuck children is bounded; beyond the bound, probes are skipped with a reason.
//!
//! A timed-out probe is evidence in itself ("timed out after 2 s: the RM lock is probably held").
//!
//! The paths come from `capture::ProcRoot::risky_path`, which only names the files: the open and the read
//! happen here, in the child.
//!
//! A stop request ([`ProbeRunner::set_cancel`], the daemon's SIGTERM) ends the wait early: the children are
//! killed like at the deadline and the outcome says the probe was interrupted, not that it hung.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capture::{ProcRoot, RiskyFile};
use serde::{Deserialize, Serialize};

/// Largest output kept from one probe; the rest is counted but dropped.
pub const MAX_PROBE_OUTPUT: usize = 64 * 1024;
/// Longest wait between two looks at the stop request while probes run.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// What a probe does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeKind {
    /// Read one file whole.
    ReadFile(PathBuf),
    /// Read `file_name` inside every subdirectory of `dir` (e.g. `gpus/*/information`).
    ReadEachSubdir { dir: PathBuf, file_name: String },
    /// Run a program and keep its stdout and stderr; `confinement` (none by default) is what the child takes
    /// on between fork and exec: the target's credentials, memory limits.
    Command {
        program: String,
        args: Vec<String>,
        confinement: Confinement,
    },
    /// Read `len` bytes of a process's `mem` file at `offset` (an ioctl's pointer); with `follow_xfer`, then
    /// read the struct an `nv_ioctl_xfer_t` there points at. Output: one line of hex per region read
    /// (hex survives the lossy text of [`ProbeOutcome::output`]).
    ReadMem {
        path: PathBuf,
        offset: u64,
        len: usize,
        follow_xfer: bool,
    },
}

/// One risky read, with what a timeout would mean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// Short stable name, e.g. `cmdline`, `nvidia-version`.
    pub name: String,
    pub kind: ProbeKind,
    /// Completes "timed out after N s: …", e.g. "the RM lock is probably held".
    pub timeout_meaning: String,
}

impl Probe {
    pub fn read_file(name: &str, path: PathBuf, timeout_meaning: &str) -> Probe {
        Probe {
            name: name.to_string(),
            kind: ProbeKind::ReadFile(path),
            timeout_meaning: timeout_meaning.to_string(),
        }
    }

    /// What the probe reads or runs, for the report.
    pub fn target(&self) -> String {
        match &self.kind {
            ProbeKind::ReadFile(path) => path.display().to_string(),
            ProbeKind::ReadMem {
                path, offset, len, ..
            } => format!("{} @ {offset:#x} ({len} bytes)", path.display()),
            ProbeKind::ReadEachSubdir { dir, file_name } => {
                format!("{}/*/{}", dir.display(), file_name)
            }
            ProbeKind::Command { program, args, .. } => {
                let mut text = program.clone();
                for arg in args {
                    text.push(' ');
                    text.push_str(arg);
                }
                text
            }
        }
    }
}

/// How a probe ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeStatus {
    /// Read everything (the program exited 0).
    Ok,
    /// The read or program failed quickly; `detail` says how.
    Failed,
    /// The deadline passed; the child was sent SIGKILL.
    TimedOut,
    /// Not started: too many earlier probes are still stuck.
    Skipped,
}

/// The recorded outcome of one probe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeOutcome {
    pub name: String,
    /// The path read or the command run.
    pub target: String,
    pub status: ProbeStatus,
    /// One line for the report, e.g. "timed out after 2 s: the RM lock is probably held".
    pub detail: String,
    /// What the child wrote (lossy UTF-8), up to [`MAX_PROBE_OUTPUT`] bytes.
    pub output: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_truncated: bool,
    pub elapsed_ms: u64,
    /// After a timeout: whether the child was reaped after SIGKILL (false: stuck in the kernel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub killed: Option<bool>,
}

/// A probe child that did not go away after SIGKILL.
#[derive(Debug, Clone)]
struct StuckChild {
    pid: i32,
    name: String,
    /// The watched process the probe was about (0: none).
    target: i32,
    /// The tenant of that process (see `watch::queue::tenant_of`).
    tenant: String,
}

/// Probe children stuck in the kernel after SIGKILL, shared by every runner of the process (the capture
/// workers each have one): counted per target process and per tenant, so that a target whose probes get
/// stuck (a real mmap-lock wedge does that to every reader of its memory) loses its own probes, never
/// another target's. A host-wide valve ([`MAX_STUCK_PROBES_HOST`]) only bounds the pids they hold. The
/// children running now are listed too: probes run in capture workers while the watch loop scans, and a
/// target source that follows our own children (`run`'s, as the subreaper) must never watch them.
#[derive(Debug, Clone, Default)]
pub struct StuckChildren(Arc<Mutex<ProbeChildren>>);

#[derive(Debug, Default)]
struct ProbeChildren {
    stuck: Vec<StuckChild>,
    running: std::collections::HashSet<i32>,
}

/// Stuck probe children of the whole host beyond which no probe starts (each holds a pid until its wedge
/// clears); far above what the per-target and per-tenant bounds let any one tenant reach.
pub const MAX_STUCK_PROBES_HOST: usize = 256;

impl StuckChildren {
    fn lock(&self) -> std::sync::MutexGuard<'_, ProbeChildren> {
        // A panic while holding the lock cannot leave the lists inconsistent (plain inserts and retains).
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Reap those that finally died; never blocks.
    pub fn reap(&self) {
        self.lock().stuck.retain(|child| !try_reap(child.pid));
    }

    /// Pids of every probe child, running or stuck (never watch or reap them elsewhere).
    pub fn pids(&self) -> Vec<i32> {
        let children = self.lock();
        children
            .stuck
            .iter()
            .map(|child| child.pid)
            .chain(children.running.iter().copied())
            .collect()
    }

    fn started(&self, pid: i32) {
        self.lock().running.insert(pid);
    }

    fn ended(&self, pid: i32) {
        self.lock().running.remove(&pid);
    }

    fn push(&self, child: StuckChild) {
        let mut children = self.lock();
        children.running.remove(&child.pid);
        children.stuck.push(child);
    }

    /// (this target's stuck children, this tenant's, the host's), and this target's names.
    fn counts(&self, target: i32, tenant: &str) -> (usize, usize, usize, Vec<String>) {
        let children = self.lock();
        let list = &children.stuck;
        let mine: Vec<String> = list
            .iter()
            .filter(|c| c.target == target)
            .map(|c| c.name.clone())
            .collect();
        let tenant_count = list.iter().filter(|c| c.tenant == tenant).count();
        (mine.len(), tenant_count, list.len(), mine)
    }

    fn of_target(&self, target: i32) -> Vec<StuckChild> {
        self.lock()
            .stuck
            .iter()
            .filter(|c| c.target == target)
            .cloned()
            .collect()
    }
}

/// Runs probes in sacrificial children, bounded in time and in stuck children. One runner per capture
/// ([`ProbeRunner::for_target`]): the stuck children, the stop request and the timeout counter are shared.
#[derive(Debug)]
pub struct ProbeRunner {
    timeout: Duration,
    /// Stuck children of one target before its probes are skipped.
    max_stuck: usize,
    /// Stuck children of one tenant before its probes are skipped.
    max_stuck_tenant: usize,
    stuck: StuckChildren,
    /// The target and tenant this runner's probes are about (0 and "": a runner for no target).
    target: i32,
    tenant: String,
    /// Set by someone else (a signal handler) to end the probes in progress early.
    cancel: Option<Arc<AtomicBool>>,
    /// Probes that ran into their deadline since the start (the metrics), all runners together.
    timeouts: Arc<AtomicU64>,
}

impl Default for ProbeRunner {
    fn default() -> Self {
        ProbeRunner::new(
            crate::defaults::PROBE_TIMEOUT,
            crate::defaults::MAX_STUCK_PROBES,
        )
    }
}

/// A probe child that is running.
struct Running {
    index: usize,
    pid: i32,
    pipe: OwnedFd,
    output: Vec<u8>,
    truncated: bool,
    eof: bool,
}

impl ProbeRunner {
    pub fn new(timeout: Duration, max_stuck: usize) -> ProbeRunner {
        let max_stuck = max_stuck.max(1);
        ProbeRunner {
            timeout,
            max_stuck,
            max_stuck_tenant: max_stuck.saturating_mul(crate::defaults::STUCK_PROBES_TENANT_FACTOR),
            stuck: StuckChildren::default(),
            target: 0,
            tenant: String::new(),
            cancel: None,
            timeouts: Arc::default(),
        }
    }

    /// A runner for the probes of one capture of `target` (of `tenant`), sharing this runner's stuck
    /// children, stop request and timeout counter.
    pub fn for_target(&self, target: i32, tenant: &str) -> ProbeRunner {
        ProbeRunner {
            timeout: self.timeout,
            max_stuck: self.max_stuck,
            max_stuck_tenant: self.max_stuck_tenant,
            stuck: self.stuck.clone(),
            target,
            tenant: tenant.to_string(),
            cancel: self.cancel.clone(),
            timeouts: self.timeouts.clone(),
        }
    }

    /// From now on, probes stop waiting as soon as `flag` is true (checked every [`CANCEL_POLL`]): a
    /// stop request must not wait out a probe deadline. Runners made later by [`ProbeRunner::for_target`]
    /// share it.
    pub fn set_cancel(&mut self, flag: Arc<AtomicBool>) {
        self.cancel = Some(flag);
    }

    fn cancelled(&self) -> bool {
        self.cancel
            .as_ref()
            .is_some_and(|flag| flag.load(Ordering::SeqCst))
    }

    /// Probes that ran into their deadline since the start (interrupted ones are not counted).
    pub fn timeouts(&self) -> u64 {
        self.timeouts.load(Ordering::Relaxed)
    }

    /// This runner's target's probe children that are still stuck (after reaping those that went away).
    #[cfg(test)]
    pub fn stuck_count(&mut self) -> usize {
        self.reap_stuck();
        self.stuck.of_target(self.target).len()
    }

    /// The shared list of stuck children (every target's).
    pub fn stuck_children(&self) -> &StuckChildren {
        &self.stuck
    }

    /// Pids of this runner's target's probe children that are still stuck.
    pub fn stuck_pids(&self) -> Vec<i32> {
        self.stuck
            .of_target(self.target)
            .iter()
            .map(|c| c.pid)
            .collect()
    }

    /// Names of this runner's target's probes whose children are still stuck.
    pub fn stuck_names(&self) -> Vec<String> {
        self.stuck
            .of_target(self.target)
            .into_iter()
            .map(|c| c.name)
            .collect()
    }

    /// Reap stuck children that finally died; never blocks.
    pub fn reap_stuck(&mut self) {
        self.stuck.reap();
    }

    /// Why a probe may not start now (this target's, this tenant's or the host's stuck children are at
    /// their bound); None when it may.
    fn over_stuck_bound(&self) -> Option<String> {
        let (mine, tenant, host, names) = self.stuck.counts(self.target, &self.tenant);
        if mine >= self.max_stuck {
            Some(format!(
                "skipped: {mine} earlier probe children of this process are still stuck in the kernel after \
                 SIGKILL ({}); the bound is {} per process (other processes' probes are not affected)",
                names.join(", "),
                self.max_stuck
            ))
        } else if tenant >= self.max_stuck_tenant {
            Some(format!(
                "skipped: {tenant} earlier probe children of this tenant's processes ({}) are still stuck in \
                 the kernel after SIGKILL; the bound is {} per tenant",
                self.tenant, self.max_stuck_tenant
            ))
        } else if host >= MAX_STUCK_PROBES_HOST {
            Some(format!(
                "skipped: {host} probe children of the host are still stuck in the kernel after SIGKILL; \
                 the host-wide bound is {MAX_STUCK_PROBES_HOST}"
            ))
        } else {
            None
        }
    }

    /// Run all probes in parallel with one deadline; outcomes in the same order.
    pub fn run_all(&mut self, probes: &[Probe]) -> Vec<ProbeOutcome> {
        self.reap_stuck();
        let started = Instant::now();
        let deadline = started + self.timeout;
        let mut outcomes: Vec<Option<ProbeOutcome>> = vec![None; probes.len()];
        let mut running: Vec<Running> = Vec::new();
        for (index, probe) in probes.iter().enumerate() {
            if self.cancelled() {
                outcomes[index] = Some(ProbeOutcome {
                    name: probe.name.clone(),
                    target: probe.target(),
                    status: ProbeStatus::Skipped,
                    detail: "skipped: a stop was requested before it started".to_string(),
                    output: String::new(),
                    output_truncated: false,
                    elapsed_ms: 0,
                    killed: None,
                });
                continue;
            }
            if let Some(detail) = self.over_stuck_bound() {
                outcomes[index] = Some(ProbeOutcome {
                    name: probe.name.clone(),
                    target: probe.target(),
                    status: ProbeStatus::Skipped,
                    detail,
                    output: String::new(),
                    output_truncated: false,
                    elapsed_ms: 0,
                    killed: None,
                });
                continue;
            }
            match spawn(probe) {
                Ok((pid, pipe)) => {
                    self.stuck.started(pid);
                    running.push(Running {
                        index,
                        pid,
                        pipe,
                        output: Vec::new(),
                        truncated: false,
                        eof: false,
                    })
                }
                Err(detail) => {
                    outcomes[index] = Some(ProbeOutcome {
                        name: probe.name.clone(),
                        target: probe.target(),
                        status: ProbeStatus::Failed,
                        detail,
                        output: String::new(),
                        output_truncated: false,
                        elapsed_ms: 0,
                        killed: None,
                    })
                }
            }
        }

        let cancel = self.cancel.clone();
        let interrupted = pump_until(&mut running, deadline, cancel.as_deref());

        for run in running {
            let probe = &probes[run.index];
            let elapsed_ms = started.elapsed().as_millis() as u64;
            let output = String::from_utf8_lossy(&run.output).into_owned();
            // The child closed its end: it is exiting. Its status says whether the read worked.
            let status = if run.eof {
                wait_briefly(run.pid, Duration::from_millis(200))
            } else {
                None
            };
            let outcome = match status {
                Some(status) => {
                    self.stuck.ended(run.pid);
                    finished_outcome(probe, status, output, run.truncated, elapsed_ms)
                }
                None => {
                    // Past the deadline, or closed the pipe but did not exit: kill it.
                    let killed = kill_and_try_reap(run.pid);
                    if killed {
                        self.stuck.ended(run.pid);
                    } else {
                        self.stuck.push(StuckChild {
                            pid: run.pid,
                            name: probe.name.clone(),
                            target: self.target,
                            tenant: self.tenant.clone(),
                        });
                    }
                    let detail = if interrupted {
                        format!(
                            "interrupted after {} ms: a stop was requested (not evidence of a hang){}",
                            elapsed_ms,
                            if killed {
                                ""
                            } else {
                                "; the probe child did not die on SIGKILL: it sleeps uninterruptibly"
                            }
                        )
                    } else if run.eof {
                        format!(
                            "closed its output but did not exit within the deadline: {}",
                            probe.timeout_meaning
                        )
                    } else {
                        format!(
                            "timed out after {}: {}{}",
                            human_duration(self.timeout),
                            probe.timeout_meaning,
                            if killed {
                                ""
                            } else {
                                " (the probe child did not die on SIGKILL: it sleeps uninterruptibly)"
                            }
                        )
                    };
                    if !interrupted {
                        self.timeouts.fetch_add(1, Ordering::Relaxed);
                    }
                    ProbeOutcome {
                        name: probe.name.clone(),
                        target: probe.target(),
                        status: if interrupted {
                            ProbeStatus::Failed
                        } else {
                            ProbeStatus::TimedOut
                        },
                        detail,
                        output,
                        output_truncated: run.truncated,
                        elapsed_ms,
                        killed: Some(killed),
                    }
                }
            };
            outcomes[run.index] = Some(outcome);
        }
        outcomes.into_iter().flatten().collect()
    }
}

impl Drop for ProbeRunner {
    fn drop(&mut self) {
        self.reap_stuck();
    }
}

/// "2 s", "500 ms".
pub fn human_duration(duration: Duration) -> String {
    if duration.subsec_millis() == 0 && duration.as_secs() > 0 {
        format!("{} s", duration.as_secs())
    } else if duration.as_secs() == 0 {
        format!("{} ms", duration.as_millis())
    } else {
        format!("{:.1} s", duration.as_secs_f64())
    }
}

fn finished_outcome(
    probe: &Probe,
    status: i32,
    output: String,
    truncated: bool,
    elapsed_ms: u64,
) -> ProbeOutcome {
    let (probe_status, detail) = if libc::WIFEXITED(status) {
        let code = libc::WEXITSTATUS(status);
        match (&probe.kind, code) {
            (_, 0) => (ProbeStatus::Ok, "ok".to_string()),
            (ProbeKind::Command { .. }, code) => {
                (ProbeStatus::Failed, format!("exited with status {code}"))
            }
            (_, errno) => (
                ProbeStatus::Failed,
                format!(
                    "read failed: {}",
                    std::io::Error::from_raw_os_error(i32::from(errno as u8))
                ),
            ),
        }
    } else if libc::WIFSIGNALED(status) {
        (
            ProbeStatus::Failed,
            format!("killed by signal {}", libc::WTERMSIG(status)),
        )
    } else {
        (
            ProbeStatus::Failed,
            format!("ended with status {status:#x}"),
        )
    };
    ProbeOutcome {
        name: probe.name.clone(),
        target: probe.target(),
        status: probe_status,
        detail,
        output,
        output_truncated: truncated,
        elapsed_ms,
        killed: None,
    }
}

/// Read every pipe until EOF, the deadline or `cancel`; true when `cancel` ended it with pipes still open.
fn pump_until(running: &mut [Running], deadline: Instant, cancel: Option<&AtomicBool>) -> bool {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let open: Vec<usize> = (0..running.len()).filter(|&i| !running[i].eof).collect();
        if open.is_empty() {
            return false;
        }
        if cancel.is_some_and(|flag| flag.load(Ordering::SeqCst)) {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        let mut wait = deadline - now;
        if cancel.is_some() {
            wait = wait.min(CANCEL_POLL);
        }
        let wait_ms = wait.as_millis().clamp(1, i32::MAX as u128) as i32;
        let mut fds: Vec<libc::pollfd> = open
            .iter()
            .map(|&i| libc::pollfd {
                fd: running[i].pipe.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: `fds` is a valid, initialised array of pollfd whose length we pass.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait_ms) };
        if ready < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        for (slot, &i) in fds.iter().zip(open.iter()) {
            if slot.revents == 0 {
                continue;
            }
            let run = &mut running[i];
            // SAFETY: reading into a stack buffer of the given length from an fd we own.
            let n = unsafe {
                libc::read(
                    run.pipe.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len() as libc::size_t,
                )
            };
            if n > 0 {
                let n = n as usize;
                let room = MAX_PROBE_OUTPUT.saturating_sub(run.output.len());
                if n > room {
                    run.truncated = true;
                }
                run.output.extend_from_slice(&buf[..n.min(room)]);
            } else if n == 0 {
                run.eof = true;
            } else {
                let err = std::io::Error::last_os_error();
                if err.kind() != std::io::ErrorKind::Interrupted
                    && err.kind() != std::io::ErrorKind::WouldBlock
                {
                    run.eof = true;
                }
            }
        }
    }
}

/// Reap `pid` if it has ended; never blocks. True when reaped (or already gone).
fn try_reap(pid: i32) -> bool {
    let mut status = 0;
    // SAFETY: waitpid on a specific child pid with WNOHANG; `status` is a valid out pointer.
    let ret = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    ret == pid || (ret < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD))
}

/// Poll for the child's exit for at most `limit`; its wait status when it ended.
fn wait_briefly(pid: i32, limit: Duration) -> Option<i32> {
    let until = Instant::now() + limit;
    loop {
        let mut status = 0;
        // SAFETY: as in `try_reap`.
        let ret = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if ret == pid {
            return Some(status);
        }
        if ret < 0 {
            return None;
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// SIGKILL the child and give it a moment to die. True when it was reaped.
fn kill_and_try_reap(pid: i32) -> bool {
    // SAFETY: sending a signal to our own child pid.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    wait_briefly(pid, Duration::from_millis(50)).is_some()
}

/// Start the probe's child. Returns its pid and the read end of its output pipe.
fn spawn(probe: &Probe) -> Result<(i32, OwnedFd), String> {
    match &probe.kind {
        ProbeKind::ReadFile(path) => {
            let path = CString::new(path.as_os_str().as_bytes())
                .map_err(|_| "path contains a NUL byte".to_string())?;
            fork_reader(|out| child_read_file(&path, out))
        }
        ProbeKind::ReadEachSubdir { dir, file_name } => {
            let dir_c = CString::new(dir.as_os_str().as_bytes())
                .map_err(|_| "path contains a NUL byte".to_string())?;
            let dir_bytes = dir.as_os_str().as_bytes().to_vec();
            let file_name = file_name.as_bytes().to_vec();
            fork_reader(|out| child_read_each_subdir(&dir_c, &dir_bytes, &file_name, out))
        }
        ProbeKind::Command {
            program,
            args,
            confinement,
        } => spawn_command(program, args, confinement),
        ProbeKind::ReadMem {
            path,
            offset,
            len,
            follow_xfer,
        } => {
            let path = CString::new(path.as_os_str().as_bytes())
                .map_err(|_| "path contains a NUL byte".to_string())?;
            let (offset, len, follow_xfer) = (*offset, (*len).min(MEM_READ_MAX), *follow_xfer);
            fork_reader(move |out| child_read_mem(&path, offset, len, follow_xfer, out))
        }
    }
}

/// Largest region one mem probe reads (the driver's own ioctl size limit, NV_ABSOLUTE_MAX_IOCTL_SIZE).
pub const MEM_READ_MAX: usize = capture::decode::nvidia::MAX_XFER_PARAMS;

/// Child side: pread `len` bytes at `offset` of `fd` into `buf`, retrying short reads; the count read
/// (0 past the end) or the errno of the first failure.
fn child_pread(fd: RawFd, buf: &mut [u8], offset: u64) -> Result<usize, i32> {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: reading into the unfilled tail of a stack buffer.
        let n = unsafe {
            libc::pread(
                fd,
                buf[got..].as_mut_ptr().cast(),
                buf.len() - got,
                (offset + got as u64) as libc::off_t,
            )
        };
        if n == 0 {
            break;
        }
        if n < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            return if got > 0 { Ok(got) } else { Err(e) };
        }
        got += n as usize;
    }
    Ok(got)
}

/// Child side: write `bytes` as one line of lowercase hex. No allocation.
fn child_write_hex(out: RawFd, bytes: &[u8]) -> bool {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut line = [0u8; 512];
    for chunk in bytes.chunks(line.len() / 2) {
        for (i, b) in chunk.iter().enumerate() {
            line[2 * i] = DIGITS[usize::from(b >> 4)];
            line[2 * i + 1] = DIGITS[usize::from(b & 0xf)];
        }
        if !child_write_all(out, &line[..2 * chunk.len()]) {
            return false;
        }
    }
    child_write_all(out, b"\n")
}

/// Child side of [`ProbeKind::ReadMem`]. Returns 0 or the errno of the first failed read (what was read
/// before it is already written).
fn child_read_mem(path: &CString, offset: u64, len: usize, follow_xfer: bool, out: RawFd) -> i32 {
    // SAFETY: open with a NUL-terminated path; the fd is closed at _exit.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return errno();
    }
    let mut buf = [0u8; MEM_READ_MAX];
    let got = match child_pread(fd, &mut buf[..len], offset) {
        Ok(got) => got,
        Err(e) => return e,
    };
    if !child_write_hex(out, &buf[..got]) {
        return libc::EPIPE;
    }
    if !follow_xfer || got < capture::decode::nvidia::XFER_SIZE {
        return 0;
    }
    let Some((ptr, inner_len)) = capture::decode::nvidia::xfer_inner_read(&buf[..got]) else {
        return 0;
    };
    match child_pread(fd, &mut buf[..inner_len], ptr) {
        Ok(got) => {
            if child_write_hex(out, &buf[..got]) {
                0
            } else {
                libc::EPIPE
            }
        }
        Err(e) => e,
    }
}

fn make_pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two fds into the array we pass.
    let ret = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if ret != 0 {
        return Err(format!(
            "cannot create a pipe: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: both fds were just created by pipe2 and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Fork a child that runs `body(write_fd)` and exits with its return value.
///
/// `body` must only make async-signal-safe calls (raw system calls, no allocation): the parent may have
/// other threads, and the child inherits none of them (nor any lock they held).
fn fork_reader(body: impl FnOnce(RawFd) -> i32) -> Result<(i32, OwnedFd), String> {
    let (read_end, write_end) = make_pipe()?;
    // SAFETY: the child branch only calls `body` (raw system calls on stack buffers) and `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("cannot fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // Keep only the output pipe (as stdout): any other pipe write end inherited from a concurrent probe
        // would delay that probe's EOF until this child exits.
        // SAFETY: dup2/close_range/close are raw system calls on fds of this child.
        unsafe {
            if libc::dup2(write_end.as_raw_fd(), libc::STDOUT_FILENO) < 0 {
                libc::_exit(libc::EBADF);
            }
            if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) != 0 {
                for fd in 3..4096 {
                    libc::close(fd);
                }
            }
        }
        let code = body(libc::STDOUT_FILENO);
        // SAFETY: terminate the child at once, without running Rust or libc exit handlers.
        unsafe { libc::_exit(code) }
    }
    drop(write_end);
    Ok((pid, read_end))
}

fn spawn_command(
    program: &str,
    args: &[String],
    confinement: &Confinement,
) -> Result<(i32, OwnedFd), String> {
    use std::os::unix::process::CommandExt;

    let (read_end, write_end) = make_pipe()?;
    let write_err = write_end
        .try_clone()
        .map_err(|err| format!("cannot duplicate a pipe: {err}"))?;
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::from(write_end))
        .stderr(std::process::Stdio::from(write_err));
    if *confinement != Confinement::default() {
        let plan = ConfinedExec::prepare(program, args, confinement)?;
        // SAFETY: the closure runs in the forked child before exec; `ConfinedExec::apply` makes raw system calls
        // only, on memory prepared here in the parent (no allocation, no lock), as `pre_exec` requires.
        unsafe {
            command.pre_exec(move || plan.apply());
        }
    }
    let child = command
        .spawn()
        .map_err(|err| format!("cannot start {program}: {err}"))?;
    // The `Child` handle is dropped without waiting: we reap the pid ourselves, without blocking.
    Ok((child.id() as i32, read_end))
}

/// What a [`ProbeKind::Command`] child takes on between fork and exec. The default confines nothing.
///
/// - `credentials`: the child runs with these ids (a target's, from its `/proc/<pid>/status`) and **no
///   capability**: supplementary groups, gid and uid set with raw `setgroups`/`setresgid`/`setresuid`; every
///   capability set emptied (`capset`), the bounding and ambient sets cleared, `PR_SET_NO_NEW_PRIVS` (no
///   setuid bit or file capability can lend any back at exec), and for uid 0 the `SECBIT_NOROOT` securebits
///   (exec as root grants nothing). A uid-0 target's helper is therefore root **as a file owner only**: it
///   reads what root's permission bits allow inside the target's root, never past a mode (no
///   `CAP_DAC_OVERRIDE`, `CAP_DAC_READ_SEARCH`) — no more than any uid-0 process with no capability, which the
///   target at least is. The ids are checked after the switch (`getresuid`, `getresgid`, `capget`); anything
///   off ends the child before exec. It is then executed from a file descriptor opened before the switch
///   (`execveat(AT_EMPTY_PATH)`): the program's directory need not be searchable by the target's user. Its
///   environment is empty: nothing of the agent's (upload credentials) reaches a process the target's user
///   may trace.
/// - `root_dir` (with `credentials` only): a directory opened (`O_PATH`) by the child before the switch and
///   passed to the program as its standard input ([`ROOT_FD`]): the target's root (`/proc/<pid>/root`), which
///   its own credentials cannot always open (a uid-0 target with capabilities is not traceable by a uid-0
///   helper with none).
///   Opened in the child, never in the agent: the root may sit on a hung filesystem.
/// - `address_space_limit` (`RLIMIT_AS`) and `data_limit` (`RLIMIT_DATA`: heap and private writable
///   mappings; a read-only file mapping is not counted): an allocation past them fails in the child, never
///   in the agent. A confined child also gets `RLIMIT_CORE` 0 (no core dump of it, ever).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Confinement {
    pub credentials: Option<capture::parse::credentials::Credentials>,
    pub root_dir: Option<PathBuf>,
    pub address_space_limit: Option<u64>,
    pub data_limit: Option<u64>,
}

/// The fd a confined child finds its [`Confinement::root_dir`] at: its standard input (`/dev/null`
/// otherwise), the one low fd that can never be the spawn's own error pipe.
pub const ROOT_FD: RawFd = libc::STDIN_FILENO;

/// Everything the child needs to confine itself, prepared in the parent: the child of a multi-threaded process
/// may not allocate or take a lock between fork and exec.
struct ConfinedExec {
    limits: Vec<(libc::c_int, u64)>,
    switch: Option<CredentialSwitch>,
}

struct CredentialSwitch {
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
    /// `root_dir`, NUL-terminated.
    root_dir: Option<CString>,
    /// The program, opened (read-only, close-on-exec) by the parent as the agent.
    program: OwnedFd,
    /// argv: the strings, and their addresses (as integers: the closure must be `Send + Sync`), null-ended.
    _argv_strings: Vec<CString>,
    argv: Vec<usize>,
}

impl ConfinedExec {
    fn prepare(
        program: &str,
        args: &[String],
        confinement: &Confinement,
    ) -> Result<ConfinedExec, String> {
        let mut limits = vec![(libc::RLIMIT_CORE as libc::c_int, 0)];
        if let Some(bytes) = confinement.address_space_limit {
            limits.push((libc::RLIMIT_AS as libc::c_int, bytes));
        }
        if let Some(bytes) = confinement.data_limit {
            limits.push((libc::RLIMIT_DATA as libc::c_int, bytes));
        }
        let switch = match &confinement.credentials {
            None if confinement.root_dir.is_some() => {
                return Err("a root directory is handed over only with credentials".to_string());
            }
            None => None,
            Some(creds) => {
                // Executed from an fd: a bare name is looked up on PATH here, as `Command` would.
                let found = match program.contains('/') {
                    true => PathBuf::from(program),
                    false => find_in_path(program)
                        .ok_or_else(|| format!("cannot start {program}: not found on PATH"))?,
                };
                let program_c = CString::new(found.as_os_str().as_bytes())
                    .map_err(|_| "the program path holds a NUL byte".to_string())?;
                // SAFETY: open with a NUL-terminated path; the fd is owned below.
                let fd = unsafe {
                    libc::open(
                        program_c.as_ptr(),
                        libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY,
                    )
                };
                if fd < 0 {
                    return Err(format!(
                        "cannot open {program}: {}",
                        std::io::Error::last_os_error()
                    ));
                }
                // SAFETY: the fd was just returned by open and is owned by nobody else.
                let opened = unsafe { OwnedFd::from_raw_fd(fd) };
                // Above the standard streams, so that handing the root directory over never closes it.
                // SAFETY: fcntl F_DUPFD_CLOEXEC on an fd we own; the new fd is owned below.
                let high = unsafe { libc::fcntl(opened.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
                if high < 0 {
                    return Err(format!(
                        "cannot duplicate an fd: {}",
                        std::io::Error::last_os_error()
                    ));
                }
                // SAFETY: the fd was just returned by fcntl and is owned by nobody else.
                let program_fd = unsafe { OwnedFd::from_raw_fd(high) };
                let mut strings = Vec::with_capacity(args.len() + 1);
                strings.push(program_c);
                for arg in args {
                    strings.push(
                        CString::new(arg.as_str())
                            .map_err(|_| "an argument holds a NUL byte".to_string())?,
                    );
                }
                let mut argv: Vec<usize> = strings.iter().map(|s| s.as_ptr() as usize).collect();
                argv.push(0);
                let root_dir = match &confinement.root_dir {
                    Some(dir) => Some(
                        CString::new(dir.as_os_str().as_bytes())
                            .map_err(|_| "the root path holds a NUL byte".to_string())?,
                    ),
                    None => None,
                };
                Some(CredentialSwitch {
                    uid: creds.uid,
                    gid: creds.gid,
                    groups: creds.groups.clone(),
                    root_dir,
                    program: program_fd,
                    _argv_strings: strings,
                    argv,
                })
            }
        };
        Ok(ConfinedExec { limits, switch })
    }

    /// Child side, between fork and exec: raw system calls only. With credentials it never returns on
    /// success (it executes the program itself); an error ends the child before exec (`spawn` reports it).
    fn apply(&self) -> std::io::Result<()> {
        for &(resource, bytes) in &self.limits {
            let limit = libc::rlimit64 {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            // SAFETY: prlimit64 on this process (pid 0) with a valid new limit and no old-limit pointer.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_prlimit64,
                    0,
                    resource,
                    &limit as *const libc::rlimit64,
                    std::ptr::null_mut::<libc::rlimit64>(),
                )
            };
            if rc != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        match &self.switch {
            Some(switch) => switch.apply(),
            None => Ok(()),
        }
    }
}

/// `SECBIT_NOROOT | SECBIT_NOROOT_LOCKED`: exec as uid 0 grants no capability, for good.
const SECBIT_NOROOT_AND_LOCKED: libc::c_ulong = 0x3;
/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `Err(last errno)` when a raw system call returned < 0.
fn check(rc: libc::c_long) -> std::io::Result<libc::c_long> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Ends the child's setup: the switch did not leave what it should have.
fn switch_failed() -> std::io::Error {
    std::io::Error::from_raw_os_error(libc::EPERM)
}

impl CredentialSwitch {
    fn apply(&self) -> std::io::Result<()> {
        // Every block below: raw system calls of this child on its own credentials, fds and memory prepared
        // by the parent (NUL-terminated strings, the group list, the null-ended argv), no allocation.
        if let Some(dir) = &self.root_dir {
            // SAFETY: openat with a NUL-terminated path; the fd is this child's.
            let fd = check(unsafe {
                libc::syscall(
                    libc::SYS_openat,
                    libc::AT_FDCWD,
                    dir.as_ptr(),
                    libc::O_PATH | libc::O_DIRECTORY,
                )
            })? as libc::c_int;
            if fd != ROOT_FD {
                // SAFETY: dup3 between fds of this child (ROOT_FD held /dev/null); dup3, not dup2: aarch64
                // has no dup2 system call.
                check(unsafe { libc::syscall(libc::SYS_dup3, fd, ROOT_FD, 0) })?;
                // SAFETY: closing the fd this child just opened.
                unsafe { libc::syscall(libc::SYS_close, fd) };
            }
        }
        // No privilege is gained at exec from here on: not through a setuid bit, not through file capabilities.
        // SAFETY: prctl on this child, integer arguments only.
        check(unsafe { libc::syscall(libc::SYS_prctl, libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
        if self.uid == 0 {
            // Exec as root grants no capability (best effort: without CAP_SETPCAP the empty sets below and
            // no_new_privs already keep exec from granting any).
            // SAFETY: as above.
            unsafe {
                libc::syscall(
                    libc::SYS_prctl,
                    libc::PR_SET_SECUREBITS,
                    SECBIT_NOROOT_AND_LOCKED,
                    0,
                    0,
                    0,
                )
            };
        }
        // The bounding set, capability by capability until the kernel's last (EINVAL); best effort for the
        // same reason.
        for cap in 0..64 {
            // SAFETY: as above.
            let rc = unsafe { libc::syscall(libc::SYS_prctl, libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
            if rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
                break;
            }
        }
        // SAFETY: as above.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_prctl,
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            )
        };
        if rc < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            return Err(std::io::Error::last_os_error());
        }
        // Groups, then gid, then uid: each needs the privilege the next one drops.
        // SAFETY: setgroups with the parent's list and its length.
        check(unsafe {
            libc::syscall(libc::SYS_setgroups, self.groups.len(), self.groups.as_ptr())
        })?;
        // SAFETY: integer arguments only.
        check(unsafe { libc::syscall(libc::SYS_setresgid, self.gid, self.gid, self.gid) })?;
        // SAFETY: integer arguments only.
        check(unsafe { libc::syscall(libc::SYS_setresuid, self.uid, self.uid, self.uid) })?;
        // Every capability set empty (setresuid to a non-zero uid emptied them already; uid 0 keeps them).
        let mut header = CapHeader {
            version: CAPABILITY_VERSION_3,
            pid: 0,
        };
        let mut data = [CapData::default(); 2];
        // SAFETY: capset with a v3 header and the two data words it reads.
        check(unsafe {
            libc::syscall(
                libc::SYS_capset,
                &mut header as *mut CapHeader,
                data.as_ptr(),
            )
        })?;
        // Check what the kernel now holds, rather than trust each call did what it says.
        let (mut r, mut e, mut s) = (0 as libc::uid_t, 0 as libc::uid_t, 0 as libc::uid_t);
        // SAFETY: getresuid writes the three ids we point at.
        check(unsafe {
            libc::syscall(
                libc::SYS_getresuid,
                &mut r as *mut libc::uid_t,
                &mut e as *mut libc::uid_t,
                &mut s as *mut libc::uid_t,
            )
        })?;
        if (r, e, s) != (self.uid, self.uid, self.uid) {
            return Err(switch_failed());
        }
        let (mut r, mut e, mut s) = (0 as libc::gid_t, 0 as libc::gid_t, 0 as libc::gid_t);
        // SAFETY: getresgid writes the three ids we point at.
        check(unsafe {
            libc::syscall(
                libc::SYS_getresgid,
                &mut r as *mut libc::gid_t,
                &mut e as *mut libc::gid_t,
                &mut s as *mut libc::gid_t,
            )
        })?;
        if (r, e, s) != (self.gid, self.gid, self.gid) {
            return Err(switch_failed());
        }
        // SAFETY: getgroups with size 0 only counts, writing nothing.
        let count = check(unsafe {
            libc::syscall(libc::SYS_getgroups, 0, std::ptr::null_mut::<libc::gid_t>())
        })?;
        if count as usize != self.groups.len() {
            return Err(switch_failed());
        }
        header.version = CAPABILITY_VERSION_3;
        // SAFETY: capget with a v3 header writes the two data words we pass.
        check(unsafe {
            libc::syscall(
                libc::SYS_capget,
                &mut header as *mut CapHeader,
                data.as_mut_ptr(),
            )
        })?;
        if data
            .iter()
            .any(|d| d.effective != 0 || d.permitted != 0 || d.inheritable != 0)
        {
            return Err(switch_failed());
        }
        let empty: [usize; 1] = [0];
        // SAFETY: execveat of the program's fd with AT_EMPTY_PATH, a null-ended argv of NUL-terminated strings
        // and an empty environment.
        check(unsafe {
            libc::syscall(
                libc::SYS_execveat,
                self.program.as_raw_fd(),
                c"".as_ptr(),
                self.argv.as_ptr(),
                empty.as_ptr(),
                libc::AT_EMPTY_PATH,
            )
        })?;
        // execveat returns only on failure.
        Err(std::io::Error::last_os_error())
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Child side: write all of `bytes` to `out`. Raw system calls only.
fn child_write_all(out: RawFd, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: writing from a valid slice to an fd the child owns.
        let n = unsafe { libc::write(out, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}

/// Child side: copy the file at `path` to `out`. Returns 0 or the errno of the failure.
fn child_read_file(path: &CString, out: RawFd) -> i32 {
    // SAFETY: open with a NUL-terminated path; the fd is closed at _exit.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return errno();
    }
    child_copy_fd(fd, out)
}

fn child_copy_fd(fd: RawFd, out: RawFd) -> i32 {
    let mut buf = [0u8; 8192];
    let mut total = 0usize;
    loop {
        // SAFETY: reading into a stack buffer of the given length.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n == 0 {
            return 0;
        }
        if n < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            return e;
        }
        if !child_write_all(out, &buf[..n as usize]) {
            return libc::EPIPE;
        }
        total += n as usize;
        if total > MAX_PROBE_OUTPUT {
            return 0;
        }
    }
}

/// Format a small number into `buf` without allocating; returns the digits.
fn child_itoa(mut value: u32, buf: &mut [u8; 12]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 || i == 0 {
            break;
        }
    }
    &buf[i..]
}

/// Child side: for every entry of `dir`, write `==> entry <==` and the contents of `dir/entry/file_name`.
fn child_read_each_subdir(dir_c: &CString, dir: &[u8], file_name: &[u8], out: RawFd) -> i32 {
    // SAFETY: open with a NUL-terminated path.
    let dfd = unsafe {
        libc::open(
            dir_c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dfd < 0 {
        return errno();
    }
    let mut dents = [0u8; 8192];
    let mut path = [0u8; 4096];
    loop {
        // SAFETY: getdents64 into a stack buffer of the given length.
        let n =
            unsafe { libc::syscall(libc::SYS_getdents64, dfd, dents.as_mut_ptr(), dents.len()) };
        if n == 0 {
            return 0;
        }
        if n < 0 {
            return errno();
        }
        let n = n as usize;
        let mut offset = 0usize;
        // linux_dirent64: u64 ino, i64 off, u16 reclen, u8 type, then the NUL-terminated name.
        while offset + 19 <= n {
            let reclen = u16::from_ne_bytes([dents[offset + 16], dents[offset + 17]]) as usize;
            if reclen == 0 || offset + reclen > n {
                return libc::EIO;
            }
            let name_area = &dents[offset + 19..offset + reclen];
            let name_len = name_area
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(name_area.len());
            let name = &name_area[..name_len];
            offset += reclen;
            if name == b"." || name == b".." {
                continue;
            }
            let needed = dir.len() + 1 + name.len() + 1 + file_name.len() + 1;
            if needed > path.len() {
                continue;
            }
            let mut at = 0;
            for part in [dir, b"/", name, b"/", file_name] {
                path[at..at + part.len()].copy_from_slice(part);
                at += part.len();
            }
            path[at] = 0;
            child_write_all(out, b"==> ");
            child_write_all(out, name);
            child_write_all(out, b" <==\n");
            // SAFETY: `path` is NUL-terminated above.
            let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
            if fd < 0 {
                let mut digits = [0u8; 12];
                child_write_all(out, b"(open failed: errno ");
                child_write_all(out, child_itoa(errno() as u32, &mut digits));
                child_write_all(out, b")\n");
                continue;
            }
            let code = child_copy_fd(fd, out);
            // SAFETY: closing the fd we opened.
            unsafe { libc::close(fd) };
            if code != 0 {
                let mut digits = [0u8; 12];
                child_write_all(out, b"(read failed: errno ");
                child_write_all(out, child_itoa(code as u32, &mut digits));
                child_write_all(out, b")\n");
            }
        }
    }
}

/// The probes a wedge capture runs for `pid`: its cmdline, the driver version, every GPU's information file,
/// and `nvidia-smi -q` when asked for and installed.
pub fn standard_probes(proc_root: &ProcRoot, pid: i32, with_nvidia_smi: bool) -> Vec<Probe> {
    let mut probes = vec![
        Probe::read_file(
            "cmdline",
            proc_root.risky_path(RiskyFile::Cmdline(pid)),
            "the target's mmap lock is probably held (a thread sits in a driver call or mmap while holding it)",
        ),
        Probe::read_file(
            "maps",
            proc_root.risky_path(RiskyFile::Maps(pid)),
            "the target's mmap lock is probably held (a thread changes its address space behind a stuck fault)",
        ),
        Probe::read_file(
            "nvidia-version",
            proc_root.risky_path(RiskyFile::NvidiaVersion),
            "the NVIDIA driver's proc files are blocked",
        ),
        Probe {
            name: "nvidia-gpus-information".to_string(),
            kind: ProbeKind::ReadEachSubdir {
                dir: proc_root.risky_path(RiskyFile::NvidiaGpus),
                file_name: "information".to_string(),
            },
            timeout_meaning: "the RM lock is probably held".to_string(),
        },
    ];
    if with_nvidia_smi {
        if let Some(program) = find_in_path("nvidia-smi") {
            probes.push(Probe {
                name: "nvidia-smi".to_string(),
                kind: ProbeKind::Command {
                    program: program.display().to_string(),
                    args: vec!["-q".to_string()],
                    confinement: Confinement::default(),
                },
                timeout_meaning: "the RM API or GPU lock is probably held (NVML waits on it)"
                    .to_string(),
            });
        }
    }
    probes
}

/// First executable `name` on PATH.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(candidate)
                .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fifo(dir: &std::path::Path) -> PathBuf {
        let path = dir.join("no-writer.fifo");
        let c = CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        path
    }

    #[test]
    fn reads_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("version");
        std::fs::write(&path, b"NVRM version: test 1.2.3\n").unwrap();
        let mut runner = ProbeRunner::new(Duration::from_secs(2), 4);
        let out = runner.run_all(&[Probe::read_file("v", path, "x")]);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].status, ProbeStatus::Ok, "{:?}", out[0]);
        assert_eq!(out[0].output, "NVRM version: test 1.2.3\n");
    }

    #[test]
    fn missing_file_fails_with_the_errno() {
        let mut runner = ProbeRunner::default();
        let out = runner.run_all(&[Probe::read_file(
            "v",
            PathBuf::from("/nonexistent/wedge-capture-test"),
            "x",
        )]);
        assert_eq!(out[0].status, ProbeStatus::Failed);
        assert!(out[0].detail.contains("No such file"), "{}", out[0].detail);
    }

    #[test]
    fn a_hanging_read_times_out_and_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let path = fifo(dir.path());
        let good = dir.path().join("good");
        std::fs::write(&good, b"fine").unwrap();
        let mut runner = ProbeRunner::new(Duration::from_millis(300), 4);
        let started = Instant::now();
        let out = runner.run_all(&[
            Probe::read_file("stuck", path, "the RM lock is probably held"),
            Probe::read_file("good", good, "x"),
        ]);
        let elapsed = started.elapsed();
        // A FIFO open never returns by itself: ending at all is the deadline at work (slack for a loaded CI).
        assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
        assert_eq!(out[0].status, ProbeStatus::TimedOut);
        assert_eq!(
            out[0].detail,
            "timed out after 300 ms: the RM lock is probably held"
        );
        // Opening a FIFO sleeps interruptibly: SIGKILL ends it and it is reaped.
        assert_eq!(out[0].killed, Some(true));
        assert_eq!(out[1].status, ProbeStatus::Ok);
        assert_eq!(runner.stuck_count(), 0);
    }

    #[test]
    fn a_stop_request_ends_a_hanging_probe_long_before_its_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let path = fifo(dir.path());
        let mut runner = ProbeRunner::new(Duration::from_secs(30), 4);
        let stop = Arc::new(AtomicBool::new(false));
        runner.set_cancel(stop.clone());
        let setter = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                stop.store(true, Ordering::SeqCst);
            })
        };
        let started = Instant::now();
        let out = runner.run_all(&[Probe::read_file("stuck", path.clone(), "x")]);
        let elapsed = started.elapsed();
        setter.join().unwrap();
        // The deadline is 30 s: anything near it means the request was not seen.
        assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
        assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
        assert_eq!(out[0].status, ProbeStatus::Failed, "{:?}", out[0]);
        assert!(
            out[0].detail.starts_with("interrupted after ")
                && out[0].detail.contains("a stop was requested"),
            "{}",
            out[0].detail
        );
        assert_eq!(out[0].killed, Some(true));
        assert_eq!(runner.stuck_count(), 0);
        // Once stopping, later probes are not started at all.
        let out = runner.run_all(&[Probe::read_file("later", path, "x")]);
        assert_eq!(out[0].status, ProbeStatus::Skipped);
        assert!(
            out[0].detail.contains("stop was requested"),
            "{}",
            out[0].detail
        );
    }

    #[test]
    fn stuck_children_cost_their_own_target_and_tenant_only() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good");
        std::fs::write(&good, b"fine").unwrap();
        let base = ProbeRunner::new(Duration::from_secs(2), 2);
        // Stand-ins for children stuck in D: live children of ours that never exit by themselves.
        let mut sleepers = Vec::new();
        for _ in 0..3 {
            let child = std::process::Command::new("sleep")
                .arg("60")
                .spawn()
                .unwrap();
            base.stuck.push(StuckChild {
                pid: child.id() as i32,
                name: "py-spy-41".into(),
                target: 41,
                tenant: "uid:65534".into(),
            });
            sleepers.push(child);
        }
        let probe = [Probe::read_file("good", good, "x")];
        let mut hostile = base.for_target(41, "uid:65534");
        let out = hostile.run_all(&probe);
        assert_eq!(out[0].status, ProbeStatus::Skipped);
        assert!(out[0].detail.contains("per process"), "{}", out[0].detail);
        assert_eq!(hostile.stuck_pids().len(), 3);
        // Another process of the same tenant: its own bound is untouched, the tenant is under its 2 x 4.
        let mut sibling = base.for_target(42, "uid:65534");
        assert_eq!(sibling.run_all(&probe)[0].status, ProbeStatus::Ok);
        // Another tenant's process is never affected.
        let mut victim = base.for_target(7, "uid:1000");
        assert_eq!(victim.run_all(&probe)[0].status, ProbeStatus::Ok);
        assert!(victim.stuck_pids().is_empty());
        assert_eq!(base.stuck_children().pids().len(), 3);
        for mut child in sleepers {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    #[test]
    fn reads_each_subdirectory() {
        let dir = tempfile::tempdir().unwrap();
        for gpu in ["0000:01:00.0", "0000:02:00.0"] {
            std::fs::create_dir(dir.path().join(gpu)).unwrap();
            std::fs::write(
                dir.path().join(gpu).join("information"),
                format!("Model: test {gpu}\n"),
            )
            .unwrap();
        }
        let mut runner = ProbeRunner::default();
        let out = runner.run_all(&[Probe {
            name: "gpus".into(),
            kind: ProbeKind::ReadEachSubdir {
                dir: dir.path().to_path_buf(),
                file_name: "information".into(),
            },
            timeout_meaning: "x".into(),
        }]);
        assert_eq!(out[0].status, ProbeStatus::Ok, "{:?}", out[0]);
        assert!(out[0]
            .output
            .contains("==> 0000:01:00.0 <==\nModel: test 0000:01:00.0\n"));
        assert!(out[0].output.contains("Model: test 0000:02:00.0"));
    }

    #[test]
    fn commands_run_and_time_out() {
        let mut runner = ProbeRunner::new(Duration::from_millis(300), 4);
        let out = runner.run_all(&[
            Probe {
                name: "echo".into(),
                kind: ProbeKind::Command {
                    program: "sh".into(),
                    args: vec!["-c".into(), "echo out; echo err >&2".into()],
                    confinement: Confinement::default(),
                },
                timeout_meaning: "x".into(),
            },
            Probe {
                name: "sleep".into(),
                kind: ProbeKind::Command {
                    program: "sleep".into(),
                    args: vec!["30".into()],
                    confinement: Confinement::default(),
                },
                timeout_meaning: "slow".into(),
            },
            Probe {
                name: "missing".into(),
                kind: ProbeKind::Command {
                    program: "wedge-capture-no-such-program".into(),
                    args: vec![],
                    confinement: Confinement::default(),
                },
                timeout_meaning: "x".into(),
            },
        ]);
        assert_eq!(out[0].status, ProbeStatus::Ok, "{:?}", out[0]);
        assert!(out[0].output.contains("out") && out[0].output.contains("err"));
        assert_eq!(out[1].status, ProbeStatus::TimedOut);
        assert_eq!(out[1].killed, Some(true));
        assert_eq!(out[2].status, ProbeStatus::Failed);
    }

    fn as_root() -> bool {
        // SAFETY: geteuid has no arguments and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        if !root {
            assert!(
                !breadcrumb::in_ci(),
                "switching credentials needs root; CI runs as root"
            );
            eprintln!("skipped: not root");
        }
        root
    }

    /// `sh -c script` under `confinement`; its output.
    fn confined_sh(script: &str, confinement: Confinement) -> ProbeOutcome {
        let mut runner = ProbeRunner::new(Duration::from_secs(10), 4);
        runner
            .run_all(&[Probe {
                name: "confined".into(),
                kind: ProbeKind::Command {
                    program: "sh".into(),
                    args: vec!["-c".into(), script.into()],
                    confinement,
                },
                timeout_meaning: "x".into(),
            }])
            .remove(0)
    }

    const SHOW_RIGHTS: &str =
        "id -u; id -g; id -G; grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' \
        /proc/self/status; ulimit -v; ulimit -d; ulimit -c; wc -c < /proc/$$/environ; \
        readlink /proc/self/fd/0";

    #[test]
    fn a_confined_command_runs_with_the_targets_ids_and_no_capability() {
        if !as_root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let out = confined_sh(
            SHOW_RIGHTS,
            Confinement {
                credentials: Some(capture::parse::credentials::Credentials {
                    uid: 65534,
                    gid: 65533,
                    groups: vec![65532, 65531],
                }),
                root_dir: Some(dir.path().to_path_buf()),
                address_space_limit: Some(1 << 30),
                data_limit: Some(256 << 20),
            },
        );
        assert_eq!(out.status, ProbeStatus::Ok, "{out:?}");
        let lines: Vec<&str> = out.output.lines().collect();
        assert_eq!(lines[..2], ["65534", "65533"], "{}", out.output);
        let mut groups: Vec<&str> = lines[2].split(' ').collect();
        groups.sort_unstable();
        assert_eq!(groups, ["65531", "65532", "65533"], "{}", out.output);
        for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert!(
                out.output.contains(&format!("{cap}:\t0000000000000000")),
                "{cap}: {}",
                out.output
            );
        }
        assert!(out.output.contains("NoNewPrivs:\t1"), "{}", out.output);
        // ulimit's units are KiB; no core file, ever; nothing of the agent's environment.
        let tail = &lines[lines.len() - 5..];
        assert_eq!(
            tail[..4],
            [
                (1u64 << 20).to_string().as_str(),
                (256u64 << 10).to_string().as_str(),
                "0",
                "0"
            ],
            "{}",
            out.output
        );
        // The root directory handed over as standard input, opened before the switch.
        assert_eq!(tail[4], dir.path().display().to_string(), "{}", out.output);
    }

    /// A uid-0 target's helper is root as a file owner only: no capability, and exec as root gives none back.
    #[test]
    fn a_uid_0_targets_helper_keeps_uid_0_without_any_capability() {
        if !as_root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("other-users-file");
        std::fs::write(&secret, "not for root without CAP_DAC_OVERRIDE\n").unwrap();
        std::os::unix::fs::chown(&secret, Some(1000), Some(1000)).unwrap();
        std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let script = format!("{SHOW_RIGHTS}; cat {} || echo refused", secret.display());
        let out = confined_sh(
            &script,
            Confinement {
                credentials: Some(capture::parse::credentials::Credentials::default()),
                ..Confinement::default()
            },
        );
        assert_eq!(out.status, ProbeStatus::Ok, "{out:?}");
        assert!(out.output.starts_with("0\n0\n0\n"), "{}", out.output);
        for cap in ["CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert!(
                out.output.contains(&format!("{cap}:\t0000000000000000")),
                "{cap}: {}",
                out.output
            );
        }
        // Another user's 0600 file: root without CAP_DAC_OVERRIDE cannot read it.
        assert!(out.output.trim_end().ends_with("refused"), "{}", out.output);
        assert!(!out.output.contains("not for root"), "{}", out.output);
        assert!(out.output.contains("/dev/null"), "{}", out.output);
    }

    /// Limits alone (py-spy's): the child keeps the agent's ids, with the address-space limit.
    #[test]
    fn a_memory_limit_alone_keeps_the_agents_ids() {
        let out = confined_sh(
            "id -u; ulimit -v; ulimit -c",
            Confinement {
                address_space_limit: Some(512 << 20),
                ..Confinement::default()
            },
        );
        assert_eq!(out.status, ProbeStatus::Ok, "{out:?}");
        // SAFETY: geteuid has no arguments and cannot fail.
        let uid = unsafe { libc::geteuid() };
        assert_eq!(
            out.output,
            format!("{uid}\n{}\n0\n", 512 << 10),
            "{}",
            out.output
        );
        // A program that wants more than the limit fails in the child, never in the agent.
        let out = confined_sh(
            "exec python3 -c 'b = bytearray(1 << 30)'",
            Confinement {
                address_space_limit: Some(256 << 20),
                ..Confinement::default()
            },
        );
        assert_eq!(out.status, ProbeStatus::Failed, "{out:?}");
        assert!(out.output.contains("MemoryError"), "{}", out.output);
    }

    #[test]
    fn output_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        std::fs::write(&path, vec![b'x'; MAX_PROBE_OUTPUT * 3]).unwrap();
        let mut runner = ProbeRunner::default();
        let out = runner.run_all(&[Probe::read_file("big", path, "x")]);
        assert_eq!(out[0].output.len(), MAX_PROBE_OUTPUT);
        assert!(out[0].output_truncated);
    }

    #[test]
    fn human_durations() {
        assert_eq!(human_duration(Duration::from_secs(2)), "2 s");
        assert_eq!(human_duration(Duration::from_millis(250)), "250 ms");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1.5 s");
    }
}
