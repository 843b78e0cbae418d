//! Who entered the kernel when the stack shows no syscall frame because the wait runs on the way back to user
//! space: task work run at return to user mode (round 17).
//!
//! fs/file_table.c: the last `fput` of a file from a task defers the release to task work (`task_work_add`,
//! TWA_RESUME), and `task_work_run` runs it (`____fput` → `__fput` → the file's `release`) on the syscall's
//! return to user mode (`exit_to_user_mode_loop`, `resume_user_mode_work`; `tracehook_notify_resume` and
//! `exit_to_usermode_loop` before 5.11, arm64's `do_notify_resume`). The stack then holds the syscall's
//! dispatcher and its return path, but not the syscall: the release is that of a close(2) (or another call
//! that dropped the file's last reference).

use super::frame_name::base_name;
use crate::snapshot::StackFrame;

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
