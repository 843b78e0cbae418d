//! Who entered the kernel, from the stack alone: the syscall frame (`__x64_sys_ioctl`, `__sys_sendmsg`…), the
//! handlers only a syscall runs (`*_ioctl`, `vfs_write`), a kernel thread's way in, and (round 17) the task work
//! run on the way back to user space.
//!
//! Round 17: the last `fput` of a file from a task defers the release to task work (fs/file_table.c:
//! `task_work_add`, TWA_RESUME), and `task_work_run` runs it (`____fput` → `__fput` → the file's `release`) on
//! the syscall's return to user mode (`exit_to_user_mode_loop`, `resume_user_mode_work`;
//! `tracehook_notify_resume` and `exit_to_usermode_loop` before 5.11, arm64's `do_notify_resume`). The stack
//! then holds the syscall's dispatcher and its return path, but not the syscall: the release is that of a
//! close(2) (or another call that dropped the file's last reference).

use super::frame_name::base_name;
use super::rules;
use crate::snapshot::StackFrame;

/// The syscall a stack without its entry frames was in, when its handlers say: `*_ioctl` functions
/// (`drm_ioctl`, `amdgpu_gem_va_ioctl`, `uvm_ioctl`) run only under ioctl(2), the VFS's read and write
/// dispatch (`vfs_write`, a file's `kernfs_fop_write`, `seq_read`) only under read(2)/write(2) and their
/// vector forms (the outermost one says which).
pub(super) fn syscall_from_handlers(frames: &[StackFrame]) -> Option<&'static str> {
    if frames
        .iter()
        .any(|f| base_name(&f.function).ends_with("_ioctl"))
    {
        return Some("ioctl");
    }
    frames.iter().rev().find_map(|f| {
        let n = base_name(&f.function);
        let fop = |op: &str| {
            n.ends_with(&format!("_fop_{op}")) || n.ends_with(&format!("_fop_{op}_iter"))
        };
        // Round 10: open(2), openat(2), creat(2) and openat2(2) all open through do_sys_open(at2) →
        // do_filp_open (fs/open.c); a crash `bt` whose syscall frame is inlined shows these.
        if matches!(n, "do_sys_open" | "do_sys_openat2" | "do_filp_open") {
            Some("open")
        } else if matches!(n, "do_init_module" | "load_module") {
            // Round 12b: module load. do_init_module's only caller is load_module, which only init_module(2)
            // and finit_module(2) call (kernel/module/main.c; kernel/module.c before 6.4); a WARN cut at
            // do_init_module (insmod probing a PCI driver) has no syscall frame left.
            Some("init_module")
        } else if matches!(n, "vfs_write" | "__vfs_write" | "new_sync_write") || fop("write") {
            Some("write")
        } else if matches!(
            n,
            "vfs_read" | "__vfs_read" | "new_sync_read" | "seq_read" | "seq_read_iter"
        ) || fop("read")
        {
            Some("read")
        } else {
            None
        }
    })
}

/// The syscall the stack entered through (`__x64_sys_ioctl`, `__arm64_sys_ioctl`, `__do_sys_…`, and the
/// `SyS_`/`sys_` names of older kernels).
pub fn syscall_from_stack(frames: &[StackFrame]) -> Option<&str> {
    frames.iter().rev().find_map(|f| {
        let name = base_name(&f.function);
        rules::SYSCALL_PREFIXES
            .iter()
            .find_map(|p| name.strip_prefix(p))
            .filter(|s| !s.is_empty())
    })
}

/// Whether the stack is a kernel thread's: it starts in `kthread`/`ret_from_fork`, or (a paste cut above them)
/// in a thread function only `kthread()` runs (`irq_thread`, `worker_thread`, `kthread_worker_fn`,
/// `smpboot_thread_fn`; round 10: spl's trampolines), and never came through a system call.
pub fn is_kernel_thread_stack(frames: &[StackFrame]) -> bool {
    let bottom = frames.iter().rev().take(4).any(|f| {
        matches!(
            base_name(&f.function),
            "kthread"
                | "ret_from_fork"
                | "ret_from_fork_asm"
                | "kernel_thread_helper"
                | "irq_thread"
                | "worker_thread"
                | "kthread_worker_fn"
                | "smpboot_thread_fn"
        ) || rules::is_module_thread_trampoline(base_name(&f.function))
    });
    let from_user = frames.iter().any(|f| {
        let n = base_name(&f.function);
        n.starts_with("entry_SYSCALL")
            || n.starts_with("el0_")
            || n.starts_with("do_syscall")
            || n == "system_call_fastpath"
            || n == "ret_fast_syscall"
    });
    bottom && !from_user && syscall_from_stack(frames).is_none()
}

/// The return-to-user-mode frames under which `task_work_run` runs a deferred release.
const RETURN_TO_USER: &[&str] = &[
    "exit_to_user_mode_loop",
    "exit_to_user_mode_prepare",
    "syscall_exit_to_user_mode",
    "resume_user_mode_work",
    "tracehook_notify_resume",
    "exit_to_usermode_loop",
    "prepare_exit_to_usermode",
    "do_notify_resume",
];

/// "close (fput at return to user space)" when the stack's wait is in a file release that task work runs on
/// the way back from a system call.
pub(super) fn deferred_close(frames: &[StackFrame]) -> Option<&'static str> {
    let names = || frames.iter().map(|f| base_name(&f.function));
    let at = names().position(|n| n == "task_work_run")?;
    let fput = names().take(at).any(|n| matches!(n, "__fput" | "____fput"));
    let returning = names().skip(at).any(|n| RETURN_TO_USER.contains(&n));
    (fput && returning).then_some("close (fput at return to user space)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(names: &[&str]) -> Vec<StackFrame> {
        names
            .iter()
            .map(|n| StackFrame {
                function: n.to_string(),
                offset: 0x10,
                size: 0x100,
                module: None,
            })
            .collect()
    }

    #[test]
    fn a_release_run_at_return_to_user_mode_is_a_close() {
        let f = frames(&[
            "mutex_lock_nested",
            "del_gendisk",
            "nbd_put",
            "blkdev_close",
            "__fput",
            "task_work_run",
            "exit_to_user_mode_loop",
            "syscall_exit_to_user_mode",
            "do_syscall_64",
        ]);
        assert_eq!(
            deferred_close(&f),
            Some("close (fput at return to user space)")
        );
    }

    #[test]
    fn task_work_without_a_release_or_outside_the_return_path_is_not() {
        // Task work that is no file release (a signal's, io_uring's) names no close.
        let other = frames(&[
            "schedule",
            "io_uring_cancel_generic",
            "task_work_run",
            "exit_to_user_mode_loop",
            "do_syscall_64",
        ]);
        assert_eq!(deferred_close(&other), None);
        // A kernel thread's delayed fput (no return to user mode) is said elsewhere, by its thread.
        let kthread = frames(&["schedule", "__fput", "task_work_run", "kthread"]);
        assert_eq!(deferred_close(&kthread), None);
    }
}
