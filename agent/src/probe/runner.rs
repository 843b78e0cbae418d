//! The runner: starts every probe of a capture at once, pumps their output with one deadline, and turns
//! each child's end (exit, deadline, stop request, stuck after SIGKILL) into a [`ProbeOutcome`].

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::children::spawn;
use super::model::{human_duration, Probe, ProbeKind, ProbeOutcome, ProbeStatus, MAX_PROBE_OUTPUT};
use super::stuck::{StuckChild, StuckChildren, MAX_STUCK_PROBES_HOST};

/// Longest wait between two looks at the stop request while probes run.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// Runs probes in sacrificial children, bounded in time and in stuck children. One runner per capture
/// ([`ProbeRunner::for_target`]): the stuck children, the stop request and the timeout counter are shared.
#[derive(Debug)]
pub struct ProbeRunner {
    timeout: Duration,
    /// Stuck children of one target before its probes are skipped.
    max_stuck: usize,
    /// Stuck children of one tenant before its probes are skipped.
    max_stuck_tenant: usize,
    pub(super) stuck: StuckChildren,
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
            match self.start(index, probe) {
                Ok(run) => running.push(run),
                Err(outcome) => outcomes[index] = Some(outcome),
            }
        }

        let cancel = self.cancel.clone();
        let interrupted = pump_until(&mut running, deadline, cancel.as_deref());

        for run in running {
            let index = run.index;
            outcomes[index] = Some(self.finish(&probes[index], run, started, interrupted));
        }
        outcomes.into_iter().flatten().collect()
    }

    /// Start the child of probe number `index`; the outcome of a probe that does not start (a stop was
    /// requested, stuck children are at their bound, the spawn failed) instead.
    fn start(&mut self, index: usize, probe: &Probe) -> Result<Running, ProbeOutcome> {
        if self.cancelled() {
            return Err(ProbeOutcome::not_started(
                probe,
                ProbeStatus::Skipped,
                "skipped: a stop was requested before it started".to_string(),
            ));
        }
        if let Some(detail) = self.over_stuck_bound() {
            return Err(ProbeOutcome::not_started(
                probe,
                ProbeStatus::Skipped,
                detail,
            ));
        }
        let (pid, pipe) = spawn(probe)
            .map_err(|detail| ProbeOutcome::not_started(probe, ProbeStatus::Failed, detail))?;
        self.stuck.started(pid);
        Ok(Running {
            index,
            pid,
            pipe,
            output: Vec::new(),
            truncated: false,
            eof: false,
        })
    }

    /// The outcome of a probe whose child was started, once the pump is over: the child exited (its status
    /// says whether the read worked), or it is killed (past the deadline, a stop request, or it closed its
    /// output without exiting).
    fn finish(
        &mut self,
        probe: &Probe,
        run: Running,
        started: Instant,
        interrupted: bool,
    ) -> ProbeOutcome {
        let elapsed_ms = started.elapsed().as_millis() as u64;
        let output = String::from_utf8_lossy(&run.output).into_owned();
        // The child closed its end: it is exiting. Its status says whether the read worked.
        let status = if run.eof {
            wait_briefly(run.pid, Duration::from_millis(200))
        } else {
            None
        };
        if let Some(status) = status {
            self.stuck.ended(run.pid);
            return finished_outcome(probe, status, output, run.truncated, elapsed_ms);
        }
        // Past the deadline, or closed the pipe but did not exit: kill it.
        let killed = self.kill(probe, run.pid);
        let why = if interrupted {
            KillCause::Interrupted { elapsed_ms }
        } else if run.eof {
            KillCause::ClosedOutput
        } else {
            KillCause::TimedOut(self.timeout)
        };
        let detail = killed_detail(probe, why, killed);
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

    /// SIGKILL the child of `probe`; one that does not go away is recorded as stuck (against this runner's
    /// target and tenant). True when it was reaped.
    fn kill(&mut self, probe: &Probe, pid: i32) -> bool {
        let killed = kill_and_try_reap(pid);
        if killed {
            self.stuck.ended(pid);
        } else {
            self.stuck.push(StuckChild {
                pid,
                name: probe.name.clone(),
                target: self.target,
                tenant: self.tenant.clone(),
            });
        }
        killed
    }
}

/// Why a probe child was killed.
enum KillCause {
    /// A stop request (not evidence of a hang), this long after the start.
    Interrupted { elapsed_ms: u64 },
    /// It closed its output but did not exit within the deadline.
    ClosedOutput,
    /// It ran into this deadline.
    TimedOut(Duration),
}

/// The report's line for a probe child killed for `why`; `killed`: it went away after SIGKILL.
fn killed_detail(probe: &Probe, why: KillCause, killed: bool) -> String {
    match why {
        KillCause::Interrupted { elapsed_ms } => format!(
            "interrupted after {} ms: a stop was requested (not evidence of a hang){}",
            elapsed_ms,
            if killed {
                ""
            } else {
                "; the probe child did not die on SIGKILL: it sleeps uninterruptibly"
            }
        ),
        KillCause::ClosedOutput => format!(
            "closed its output but did not exit within the deadline: {}",
            probe.timeout_meaning
        ),
        KillCause::TimedOut(timeout) => format!(
            "timed out after {}: {}{}",
            human_duration(timeout),
            probe.timeout_meaning,
            if killed {
                ""
            } else {
                " (the probe child did not die on SIGKILL: it sleeps uninterruptibly)"
            }
        ),
    }
}

impl Drop for ProbeRunner {
    fn drop(&mut self) {
        self.reap_stuck();
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
