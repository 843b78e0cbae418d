//! Launching the watched command: its own process group, us as child subreaper, signals forwarded.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

/// Why the command could not be started.
#[derive(Debug)]
pub enum LaunchError {
    /// No such program (exit 127, like a shell).
    NotFound(String),
    /// The program exists but cannot be executed (exit 126).
    NotExecutable(String, std::io::Error),
    Other(String, std::io::Error),
}

impl std::fmt::Display for LaunchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LaunchError::NotFound(program) => write!(f, "{program}: command not found"),
            LaunchError::NotExecutable(program, err) => {
                write!(f, "{program}: cannot execute: {err}")
            }
            LaunchError::Other(program, err) => write!(f, "{program}: cannot start: {err}"),
        }
    }
}

impl std::error::Error for LaunchError {}

/// The running command.
#[derive(Debug)]
pub struct Launched {
    pub pid: i32,
    /// Its process group (= its pid): signals go to the whole group.
    pub pgid: i32,
}

/// Start `program args…` in a new process group with `env` added to our environment.
pub fn launch(
    program: &OsString,
    args: &[OsString],
    env: &[(String, OsString)],
) -> Result<Launched, LaunchError> {
    let name = program.to_string_lossy().into_owned();
    let mut command = std::process::Command::new(program);
    command.args(args).process_group(0);
    for (key, value) in env {
        command.env(key, value);
    }
    let child = command.spawn().map_err(|err| match err.kind() {
        std::io::ErrorKind::NotFound => LaunchError::NotFound(name.clone()),
        std::io::ErrorKind::PermissionDenied => LaunchError::NotExecutable(name.clone(), err),
        _ if err.raw_os_error() == Some(libc::ENOEXEC)
            || err.raw_os_error() == Some(libc::EISDIR) =>
        {
            LaunchError::NotExecutable(name.clone(), err)
        }
        _ => LaunchError::Other(name.clone(), err),
    })?;
    let pid = child.id() as i32;
    // The `Child` handle is dropped without waiting: the watch loop reaps by pid, without blocking.
    drop(child);
    Ok(Launched { pid, pgid: pid })
}

/// Become a child subreaper: orphaned descendants are reparented to us, so none escapes the watch.
pub fn become_subreaper() -> std::io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(std::io::Error::from)
}

/// How a child ended, as a shell would report it: its exit code, or 128 + the signal number.
pub fn shell_status(wait_status: i32) -> u8 {
    if libc::WIFEXITED(wait_status) {
        libc::WEXITSTATUS(wait_status) as u8
    } else if libc::WIFSIGNALED(wait_status) {
        128u8.saturating_add(libc::WTERMSIG(wait_status) as u8)
    } else {
        1
    }
}

/// Reap `pid` if it ended; never blocks. Some(wait status) when reaped.
pub fn try_wait(pid: i32) -> Option<i32> {
    let mut status = 0;
    // SAFETY: waitpid for one specific child with WNOHANG; `status` is a valid out pointer.
    let ret = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    (ret == pid).then_some(status)
}

/// Send `signal` to every process of the group `pgid`. False when the group is gone.
pub fn signal_group(pgid: i32, signal: i32) -> bool {
    // SAFETY: kill(2) with a negative pid addresses a process group; no memory is involved.
    unsafe { libc::kill(-pgid, signal) == 0 }
}

/// Send `signal` to one process. False when it is gone.
pub fn signal_process(pid: i32, signal: i32) -> bool {
    // SAFETY: as above, for one pid.
    unsafe { libc::kill(pid, signal) == 0 }
}

/// Signals delivered to us, as a channel the watch loop polls with `recv_timeout`.
pub struct SignalChannel {
    pub receiver: mpsc::Receiver<i32>,
    handle: signal_hook::iterator::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SignalChannel {
    /// Catch `signals` (e.g. SIGINT, SIGTERM, SIGHUP) from now on.
    pub fn new(signals: &[i32]) -> std::io::Result<SignalChannel> {
        let mut iterator = signal_hook::iterator::Signals::new(signals)?;
        let handle = iterator.handle();
        let (sender, receiver) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                for signal in iterator.forever() {
                    if sender.send(signal).is_err() {
                        break;
                    }
                }
            })?;
        Ok(SignalChannel {
            receiver,
            handle,
            thread: Some(thread),
        })
    }

    /// Wait up to `timeout` for a signal.
    pub fn wait(&self, timeout: Duration) -> Option<i32> {
        self.receiver.recv_timeout(timeout).ok()
    }
}

impl Drop for SignalChannel {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Name of a signal for messages ("SIGTERM").
pub fn signal_name(signal: i32) -> String {
    nix::sys::signal::Signal::try_from(signal)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {signal}"))
}

/// The path of our own executable, for re-running ourselves as a helper.
pub fn own_executable() -> std::io::Result<PathBuf> {
    std::env::current_exe()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_exec_errors_to_shell_codes() {
        let err = launch(&"wedge-capture-no-such-command".into(), &[], &[]).unwrap_err();
        assert!(matches!(err, LaunchError::NotFound(_)), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-executable");
        std::fs::write(&file, "echo hi\n").unwrap();
        let err = launch(&file.clone().into_os_string(), &[], &[]).unwrap_err();
        assert!(matches!(err, LaunchError::NotExecutable(..)), "{err}");
    }

    #[test]
    fn runs_in_its_own_group_and_reports_the_status() {
        let child = launch(&"sh".into(), &["-c".into(), "exit 7".into()], &[]).unwrap();
        assert_eq!(child.pgid, child.pid);
        let status = (0..500)
            .find_map(|_| {
                std::thread::sleep(Duration::from_millis(10));
                try_wait(child.pid)
            })
            .unwrap();
        assert_eq!(shell_status(status), 7);

        let child = launch(&"sleep".into(), &["30".into()], &[]).unwrap();
        assert!(signal_group(child.pgid, libc::SIGTERM));
        let status = (0..500)
            .find_map(|_| {
                std::thread::sleep(Duration::from_millis(10));
                try_wait(child.pid)
            })
            .unwrap();
        assert_eq!(shell_status(status), 128 + 15);
    }

    #[test]
    fn passes_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("env");
        let child = launch(
            &"sh".into(),
            &[
                "-c".into(),
                format!("echo \"$WEDGE_TEST_VAR\" > {}", out.display()).into(),
            ],
            &[("WEDGE_TEST_VAR".into(), "ring-dir".into())],
        )
        .unwrap();
        for _ in 0..500 {
            if try_wait(child.pid).is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(std::fs::read_to_string(out).unwrap().trim(), "ring-dir");
    }

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
        assert_eq!(signal_name(9999), "signal 9999");
    }
}
