//! Stage `ioctl_argument`: the struct a wedged NVIDIA ioctl's pointer holds (RM control command, object
//! class, handles, UVM params), read from `<proc root>/<pid>/mem` at the pointer in a sacrificial child
//! with the probe deadline, then decoded by `capture::nvidia`.
//!
//! Only threads in D inside an NVIDIA RM escape or UVM command with a decoder are read, once per capture:
//! the watch loop's hot scan never reads memory. `mem` takes the target's mmap lock (killable) and can queue
//! behind a writer, so a read that does not finish is a reason ("timed out …"), like an unreadable or
//! short one; the decoder never guesses from partial bytes.

use capture::nvidia::{self, ArgumentKind, IoctlArgument};
use capture::parse::syscall::Syscall;
use capture::{ProcRoot, ProcessSnapshot, RiskyFile, SyscallInfo};

use super::{Capture, Deadline};
use crate::probe::{Probe, ProbeKind, ProbeOutcome, ProbeRunner, ProbeStatus};

pub fn run(capture: &mut Capture<'_>, _deadline: &Deadline) -> Result<(), String> {
    let root = capture.settings.proc_root.clone();
    let pid = capture.pid;
    let Some(sample) = capture.incident.samples.last_mut() else {
        return Ok(());
    };
    read_ioctl_arguments(capture.probes, &root, pid, &mut sample.snapshot, true);
    Ok(())
}

fn pointer_of(syscall: Option<&SyscallInfo>) -> Option<u64> {
    match syscall? {
        SyscallInfo::Blocked { args, .. } => {
            let text = args.get(2)?;
            u64::from_str_radix(text.trim_start_matches("0x"), 16).ok()
        }
        SyscallInfo::Running { .. } => None,
    }
}

/// Reads and decodes `ioctl.argument` for the threads of `snapshot` in an NVIDIA ioctl (only those in D
/// when `only_wedged`), all in parallel under the runner's one deadline. Returns how many were read.
pub fn read_ioctl_arguments(
    runner: &mut ProbeRunner,
    root: &ProcRoot,
    pid: i32,
    snapshot: &mut ProcessSnapshot,
    only_wedged: bool,
) -> usize {
    let mut wanted: Vec<(usize, ArgumentKind, u64)> = Vec::new();
    for (i, thread) in snapshot.threads.iter_mut().enumerate() {
        if only_wedged && thread.state != "D" {
            continue;
        }
        let Some(kind) = thread.ioctl.as_ref().and_then(ArgumentKind::of) else {
            continue;
        };
        match pointer_of(thread.syscall.as_ref()) {
            Some(ptr) => wanted.push((i, kind, ptr)),
            None => {
                if let Some(info) = thread.ioctl.as_mut() {
                    info.argument = Some(IoctlArgument::unavailable(
                        0,
                        "the ioctl's pointer is unknown (no syscall args)",
                    ));
                }
            }
        }
    }
    // A NULL pointer is the program's bug, not something to read.
    let path = root.risky_path(RiskyFile::Mem(pid));
    let probes: Vec<Probe> = wanted
        .iter()
        .filter(|(_, _, ptr)| *ptr != 0)
        .map(|(i, kind, ptr)| Probe {
            name: format!("ioctl-argument-{}", snapshot.threads[*i].tid),
            kind: ProbeKind::ReadMem {
                path: path.clone(),
                offset: *ptr,
                len: kind.read_len(),
                follow_xfer: kind.follows_xfer(),
            },
            timeout_meaning:
                "the process's mmap lock is probably held for writing (or a writer is queued)"
                    .into(),
        })
        .collect();
    let mut outcomes = runner.run_all(&probes).into_iter();
    for (i, kind, ptr) in &wanted {
        let argument = if *ptr == 0 {
            IoctlArgument::unavailable(0, "the ioctl's pointer is NULL")
        } else {
            match outcomes.next() {
                Some(outcome) => {
                    let tid = snapshot.threads[*i].tid;
                    if still_in(root, pid, tid, snapshot.threads[*i].syscall.as_ref()) {
                        argument_of(*kind, *ptr, &outcome)
                    } else {
                        // The bytes may already belong to later code (a reused stack frame): not decoded.
                        IoctlArgument::unavailable(
                            *ptr,
                            "the thread left this ioctl while its argument was read (not wedged here); nothing decoded",
                        )
                    }
                }
                None => IoctlArgument::unavailable(*ptr, "not read (no probe outcome)"),
            }
        };
        if let Some(info) = snapshot.threads[*i].ioctl.as_mut() {
            info.argument = Some(argument);
        }
    }
    wanted.len()
}

/// Whether the thread is still blocked in the same syscall (number, arguments, stack and program counter)
/// as when it was sampled, after its memory was read.
fn still_in(root: &ProcRoot, pid: i32, tid: i32, sampled: Option<&SyscallInfo>) -> bool {
    let Some(SyscallInfo::Blocked {
        nr, args, sp, pc, ..
    }) = sampled
    else {
        return false;
    };
    let hex = |v: u64| format!("{v:#x}");
    match root.read_syscall(pid, tid) {
        Ok(Syscall::InSyscall {
            nr: now_nr,
            args: now_args,
            sp: now_sp,
            pc: now_pc,
        }) => {
            now_nr == *nr
                && now_args.iter().map(|a| hex(*a)).eq(args.iter().cloned())
                && hex(now_sp) == *sp
                && hex(now_pc) == *pc
        }
        _ => false,
    }
}

fn unhex(line: &str) -> Option<Vec<u8>> {
    let line = line.trim();
    if line.len() % 2 != 0 {
        return None;
    }
    (0..line.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(line.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The decoded argument from one mem probe, or the reason (the probe's own detail) it is missing.
fn argument_of(kind: ArgumentKind, ptr: u64, outcome: &ProbeOutcome) -> IoctlArgument {
    let mut lines = outcome.output.lines();
    let first = lines.next().and_then(unhex);
    let inner = lines.next().and_then(unhex);
    match (&outcome.status, first) {
        (ProbeStatus::Ok, Some(first)) => {
            let mut a = nvidia::decode_argument(kind, ptr, &first, inner.as_deref());
            if first.len() < kind.read_len() && a.unavailable.is_none() {
                a.unavailable = Some(format!(
                    "only {} of {} bytes readable at the pointer",
                    first.len(),
                    kind.read_len()
                ));
            }
            a
        }
        (ProbeStatus::Ok, None) => IoctlArgument::unavailable(ptr, "the mem read returned nothing"),
        // The XFER header was read but its inner struct was not: decode what there is, say the rest.
        (_, Some(first)) if kind.follows_xfer() => {
            let mut a = nvidia::decode_argument(kind, ptr, &first, None);
            a.unavailable = Some(format!(
                "the XFER's inner struct could not be read: {}",
                outcome.detail
            ));
            a
        }
        _ => IoctlArgument::unavailable(
            ptr,
            format!("reading {}: {}", outcome.target, outcome.detail),
        ),
    }
}
