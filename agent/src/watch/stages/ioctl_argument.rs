//! Stage `ioctl_argument`: the struct a wedged NVIDIA ioctl's pointer holds (RM control command, object
//! class, handles, UVM params), read from `<proc root>/<pid>/mem` at the pointer in a sacrificial child
//! with the probe deadline, then decoded by `capture::decode::nvidia`.
//!
//! Only threads in D inside an NVIDIA RM escape or UVM command with a decoder are read, once per capture:
//! the watch loop's hot scan never reads memory. `mem` takes the target's mmap lock (killable) and can queue
//! behind a writer, so a read that does not finish is a reason ("timed out …"), like an unreadable or
//! short one; the decoder never guesses from partial bytes.

use capture::decode::hex;
use capture::decode::nvidia::{self, ArgumentKind, IoctlArgument};
use capture::parse::syscall::Syscall;
use capture::{IoctlInfo, ProcRoot, ProcessSnapshot, RiskyFile, SyscallInfo};

use super::context::{Capture, Deadline};
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
        SyscallInfo::Blocked { args, .. } => hex::u64_hex(args.get(2)?),
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
        let Some(kind) = thread.ioctl.as_ref().and_then(IoctlInfo::argument_kind) else {
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
        let mut argument = argument;
        let thread = &mut snapshot.threads[*i];
        argument.operation = capture::site::nvidia::nvidia_operation(&thread.stack, &argument);
        if let Some(info) = thread.ioctl.as_mut() {
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

/// The decoded argument from one mem probe, or the reason (the probe's own detail) it is missing.
fn argument_of(kind: ArgumentKind, ptr: u64, outcome: &ProbeOutcome) -> IoctlArgument {
    let mut lines = outcome.output.lines();
    let first = lines.next().and_then(hex::bytes);
    let inner = lines.next().and_then(hex::bytes);
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;
    use std::time::{Duration, Instant};

    use capture::testing::FakeProc;
    use capture::{snapshot_process, Arch, SnapshotOptions};

    use super::*;

    const PID: i32 = 4200;
    const RM_LOCK_STACK: &str = "[<0>] os_acquire_rwlock_write+0x38/0x60 [nvidia]\n[<0>] portSyncRwLockAcquireWrite+0x10/0x20 [nvidia]\n[<0>] rmapiLockAcquire+0x1a0/0x2c0 [nvidia]\n[<0>] serverControl+0x90/0x4c0 [nvidia]\n[<0>] RmIoctl+0x2a8/0xd80 [nvidia]\n[<0>] rm_ioctl+0x64/0xb0 [nvidia]\n[<0>] nvidia_unlocked_ioctl+0x24/0x40 [nvidia]\n";
    const GSP_STACK: &str = "[<0>] _kgspRpcRecvPoll+0x1f4/0x4a0 [nvidia]\n[<0>] _issueRpcAndWait+0x9c/0x180 [nvidia]\n[<0>] rpcRmApiAlloc_GSP+0x120/0x2a0 [nvidia]\n[<0>] serverAllocResource+0x2a0/0x600 [nvidia]\n[<0>] RmIoctl+0x4a0/0xd80 [nvidia]\n[<0>] rm_ioctl+0x64/0xb0 [nvidia]\n[<0>] nvidia_unlocked_ioctl+0x24/0x40 [nvidia]\n";
    const PIN_STACK: &str = "[<0>] folio_wait_bit_common+0x13c/0x350\n[<0>] filemap_fault+0x5c0/0x9a0\n[<0>] handle_mm_fault+0x1b0/0x2e0\n[<0>] __get_user_pages+0x1e0/0x5a0\n[<0>] pin_user_pages+0x40/0x60\n[<0>] os_lock_user_pages+0xa8/0x1a0 [nvidia]\n[<0>] RmCreateOsDescriptor+0x9c/0x1b0 [nvidia]\n[<0>] RmIoctl+0x6c0/0xd80 [nvidia]\n[<0>] rm_ioctl+0x64/0xb0 [nvidia]\n";
    const UVM_STACK: &str = "[<0>] uvm_down_read+0x30/0x60 [nvidia_uvm]\n[<0>] uvm_api_migrate+0x1c0/0x900 [nvidia_uvm]\n[<0>] uvm_ioctl+0x1a4/0x1c0 [nvidia_uvm]\n[<0>] uvm_unlocked_ioctl_entry+0x60/0xa0 [nvidia_uvm]\n";

    fn u32s(values: &[u32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    fn nvos54() -> Vec<u8> {
        let mut b = u32s(&[0xc1d0_0001, 0x5c00_0003, 0x2080_0102, 0]);
        b.extend_from_slice(&0x7ffd_0000_9000u64.to_le_bytes());
        b.extend(u32s(&[0x408, 0]));
        b
    }

    fn nvos64() -> Vec<u8> {
        let mut b = u32s(&[0xc1d0_0001, 0xc1d0_0001, 0xcaf0_0002, 0x71]);
        b.extend_from_slice(&0x7ffd_0000_a000u64.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend(u32s(&[24, 0, 0, 0]));
        b
    }

    fn xfer(ptr: u64) -> Vec<u8> {
        let mut b = u32s(&[0x2b, 48]);
        b.extend_from_slice(&ptr.to_le_bytes());
        b
    }

    fn nvos02() -> Vec<u8> {
        let mut b = u32s(&[0xc1d0_0001, 0x5c00_0002, 0x5c00_0096, 0x71, 0x4000_1010, 0]);
        b.extend_from_slice(&0x7f57_31e0_0000u64.to_le_bytes());
        b.extend_from_slice(&(0x20_0000u64 - 1).to_le_bytes());
        b.extend(u32s(&[0, 0, 9, 0]));
        b
    }

    /// Four D threads (RM control, RM alloc via XFER, RM alloc memory, UVM migrate) with their structs in a
    /// sparse `mem`; syscall lines in `arch`'s numbering.
    fn tree(arch: Arch) -> FakeProc {
        let ioctl_nr = if arch == Arch::Aarch64 { 29 } else { 16 };
        // Low addresses: a sparse file cannot reach 0x7ffd… on every filesystem (ext4 stops at 16 TiB).
        let base: u64 = if arch == Arch::Aarch64 {
            0xaa_d1e0_0000
        } else {
            0x7f_1230_0000
        };
        let fake = FakeProc::new();
        fake.process(PID)
            .comm("trainer")
            .state('S')
            .fd(5, "/dev/nvidiactl")
            .fd(6, "/dev/nvidia0")
            .fd(7, "/dev/nvidia-uvm")
            .sparse_mem(base + 0x10000, base, &nvos54());
        let mem = std::fs::OpenOptions::new()
            .write(true)
            .open(fake.path().join(format!("{PID}/mem")))
            .unwrap();
        mem.write_at(&xfer(base + 0x2000), base + 0x1000).unwrap();
        mem.write_at(&nvos64(), base + 0x2000).unwrap();
        mem.write_at(&nvos02(), base + 0x3000).unwrap();
        mem.write_at(&[0u8; 80], base + 0x4000).unwrap();
        let threads = [
            (PID + 1, 5, 0xc020_462au32, 0u64, RM_LOCK_STACK),
            (PID + 2, 5, 0xc010_46d3, 0x1000, GSP_STACK),
            (PID + 3, 6, 0xc038_4627, 0x3000, PIN_STACK),
            (PID + 4, 7, 0x33, 0x4000, UVM_STACK),
        ];
        for (tid, fd, request, offset, stack) in threads {
            fake.task(PID, tid)
                .comm("worker")
                .state('D')
                .wchan("x")
                .syscall(&format!(
                    "{ioctl_nr} {fd:#x} {request:#x} {:#x} 0x0 0x0 0x0 0x7ffd0000f000 0x7f0000001234\n",
                    base + offset
                ))
                .stack(stack);
        }
        fake
    }

    fn read(fake: &FakeProc, arch: Arch, timeout: Duration) -> ProcessSnapshot {
        let options = SnapshotOptions {
            arch,
            ..SnapshotOptions::default()
        };
        let mut snap = snapshot_process(&fake.root(), PID, &options).unwrap();
        let mut runner = ProbeRunner::new(timeout, 8);
        read_ioctl_arguments(&mut runner, &fake.root(), PID, &mut snap, true);
        snap
    }

    fn argument(snap: &ProcessSnapshot, tid: i32) -> IoctlArgument {
        let thread = snap.threads.iter().find(|t| t.tid == tid).unwrap();
        thread.ioctl.as_ref().unwrap().argument.clone().unwrap()
    }

    #[test]
    fn rm_control_alloc_via_xfer_alloc_memory_and_uvm_on_both_arches() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let fake = tree(arch);
            let snap = read(&fake, arch, Duration::from_secs(2));
            let control = argument(&snap, PID + 1);
            assert_eq!(
                control.cmd_name.as_deref(),
                Some("NV2080_CTRL_CMD_GPU_GET_INFO_V2"),
                "{arch:?} {control:?}"
            );
            assert_eq!(
                control.locks.as_deref(),
                Some("takes the API lock read-only + GPU lock (device only)")
            );
            assert_eq!(control.params_size, Some(0x408));
            let alloc = argument(&snap, PID + 2);
            assert_eq!(alloc.xfer.map(|x| x.cmd), Some(0x2b), "{arch:?} {alloc:?}");
            assert_eq!(alloc.structure.as_deref(), Some("NVOS64_PARAMETERS"));
            assert_eq!(
                alloc.class_name.as_deref(),
                Some("NV01_MEMORY_SYSTEM_OS_DESCRIPTOR")
            );
            let memory = argument(&snap, PID + 3);
            assert_eq!(
                memory.summary.as_deref(),
                Some("RM alloc memory NV01_MEMORY_SYSTEM_OS_DESCRIPTOR (2097152 bytes at 0x7f5731e00000)")
            );
            let uvm = argument(&snap, PID + 4);
            assert_eq!(uvm.uvm_command.as_deref(), Some("UVM_MIGRATE"));
            assert_eq!(uvm.structure.as_deref(), Some("UVM_MIGRATE_PARAMS"));
            assert_eq!(uvm.bytes_read, 80);
            for a in [&control, &alloc, &memory, &uvm] {
                assert_eq!(a.unavailable, None, "{a:?}");
            }
        }
    }

    #[test]
    fn threads_not_in_d_are_not_read() {
        let fake = tree(Arch::X86_64);
        fake.task(PID, PID + 1).state('S');
        let snap = read(&fake, Arch::X86_64, Duration::from_secs(2));
        let thread = snap.threads.iter().find(|t| t.tid == PID + 1).unwrap();
        assert_eq!(thread.ioctl.as_ref().and_then(|i| i.argument.clone()), None);
    }

    #[test]
    fn truncated_struct_is_a_reason() {
        let fake = tree(Arch::X86_64);
        // The control struct sits 20 bytes before the end of mem.
        fake.process(PID)
            .sparse_mem(0x7f_1230_0000 + 20, 0x7f_1230_0000, &nvos54()[..20]);
        let snap = read(&fake, Arch::X86_64, Duration::from_secs(2));
        let a = argument(&snap, PID + 1);
        assert_eq!(a.structure, None);
        assert!(
            a.unavailable
                .as_deref()
                .unwrap()
                .contains("only 20 could be read"),
            "{a:?}"
        );
    }

    #[test]
    fn unreadable_mem_is_a_reason() {
        let fake = tree(Arch::X86_64);
        std::fs::remove_file(fake.path().join(format!("{PID}/mem"))).unwrap();
        std::fs::create_dir(fake.path().join(format!("{PID}/mem"))).unwrap();
        let snap = read(&fake, Arch::X86_64, Duration::from_secs(2));
        let a = argument(&snap, PID + 1);
        assert_eq!(a.structure, None);
        let why = a.unavailable.unwrap();
        assert!(
            why.contains("read failed") && why.contains("directory"),
            "{why}"
        );
    }

    #[test]
    fn a_mem_read_that_blocks_is_a_reason_within_the_probe_deadline() {
        let fake = tree(Arch::X86_64);
        let mem = fake.path().join(format!("{PID}/mem"));
        std::fs::remove_file(&mem).unwrap();
        let c = std::ffi::CString::new(mem.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let timeout = Duration::from_millis(300);
        let started = Instant::now();
        let snap = read(&fake, Arch::X86_64, timeout);
        let elapsed = started.elapsed();
        assert!(elapsed < timeout + Duration::from_secs(1), "{elapsed:?}");
        for tid in PID + 1..=PID + 4 {
            let a = argument(&snap, tid);
            assert_eq!(a.structure, None, "{a:?}");
            let why = a.unavailable.unwrap();
            assert!(
                why.contains("timed out after 300 ms") && why.contains("mmap lock"),
                "{why}"
            );
        }
    }

    #[test]
    fn a_thread_that_left_the_ioctl_is_not_decoded() {
        let fake = tree(Arch::X86_64);
        let options = SnapshotOptions::default();
        let mut snap = snapshot_process(&fake.root(), PID, &options).unwrap();
        fake.task(PID, PID + 1)
            .syscall("202 0x0 0x0 0x0 0x0 0x0 0x0 0x1 0x2\n");
        let mut runner = ProbeRunner::new(Duration::from_secs(2), 8);
        read_ioctl_arguments(&mut runner, &fake.root(), PID, &mut snap, true);
        let a = argument(&snap, PID + 1);
        assert_eq!(a.cmd_name, None);
        assert!(a.unavailable.unwrap().contains("left this ioctl"));
    }

    #[test]
    fn a_containers_device_paths_are_read_like_the_hosts() {
        // Seen from the host, a container's private /dev loses its prefix: `/nvidiactl`, `/nvidia0`,
        // `/nvidia-uvm`. The same structs are read and decoded as for `/dev/…`.
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let fake = tree(arch);
            fake.process(PID)
                .fd(5, "/nvidiactl")
                .fd(6, "/nvidia0")
                .fd(7, "/nvidia-uvm");
            let snap = read(&fake, arch, Duration::from_secs(2));
            let control = argument(&snap, PID + 1);
            assert_eq!(
                control.cmd_name.as_deref(),
                Some("NV2080_CTRL_CMD_GPU_GET_INFO_V2"),
                "{arch:?} {control:?}"
            );
            assert_eq!(
                argument(&snap, PID + 2).structure.as_deref(),
                Some("NVOS64_PARAMETERS")
            );
            let memory = argument(&snap, PID + 3);
            assert!(
                memory
                    .summary
                    .as_deref()
                    .unwrap_or("")
                    .starts_with("RM alloc memory"),
                "{arch:?} {memory:?}"
            );
            assert_eq!(
                argument(&snap, PID + 4).uvm_command.as_deref(),
                Some("UVM_MIGRATE")
            );
        }
    }
}
