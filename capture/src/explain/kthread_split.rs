//! A kernel thread's stack never holds a system call's entry (round 20, issue 38 family 5): a kernel thread
//! is created by kthreadd (`kthread` → its thread function) and never enters the kernel from user space. A
//! header-less block pasted after a kernel thread's stack cut short (`btrfs_commit_transaction` as its last
//! frame, then another paste's `? wait_for_completion_timeout … commit_tail … __x64_sys_ioctl`), under times
//! that do not tell the two apart (`dmesg -T`'s, or none), is read into the kernel thread; when the stack so
//! read reaches a system call, the block is split off at the last wait or lock frame above the system call
//! (with the `?` guesses right above it): the top of the other stack. One pass over the frames.

use super::task::Draft;
use crate::site;
use crate::site::frame_name::base_name;

/// Whether a frame is a system call's entry or handler (`entry_SYSCALL_64`, `do_syscall_64`, `el0_svc`,
/// `__x64_sys_ioctl`).
fn syscall_entry(name: &str) -> bool {
    name.starts_with("entry_SYSCALL")
        || name.starts_with("do_syscall_")
        || name.starts_with("el0_svc")
        || name == "system_call_fastpath"
        || site::rules::SYSCALL_PREFIXES
            .iter()
            .any(|p| name.starts_with(p))
}

/// Where a stack starts: the scheduler, a wait primitive, a function that takes a lock.
fn top_like(name: &str) -> bool {
    site::rules::SCHEDULER_FRAMES.contains(&name)
        || site::rules::wait_words(name).is_some()
        || site::rules::lock_taken_by(name).is_some()
}

/// The frames of another task read into a kernel thread's draft (its ppid is kthreadd's, 2), split off as a
/// header-less draft of their own; None when the draft is not a kernel thread's or holds no system call.
pub(super) fn split_off_user_stack(d: &mut Draft) -> Option<Draft> {
    if d.ppid != Some(2) && !d.kernel_thread {
        return None;
    }
    let names: Vec<&str> = d
        .frames
        .iter()
        .map(|(f, _)| base_name(&f.function))
        .collect();
    let entry = names.iter().position(|n| syscall_entry(n))?;
    // The other stack's wait: the last wait or lock frame above the system call (a real one), with the `?`
    // guesses printed right above it (its stale top). A best reading: the kernel thread's own frames are those
    // above; one of the other stack's own wait frames above that one stays with the kernel thread.
    let wait = (1..entry)
        .rev()
        .find(|&i| !d.frames[i].1 && top_like(names[i]))?;
    let mut at = wait;
    while at > 1 && d.frames[at - 1].1 {
        at -= 1;
    }
    // A user-mode helper (call_usermodehelper's child: ppid 2, then execve) makes system calls: its stack is
    // one stack, read whole. A pasted block starts with the stale `?` slots above its wait; without them
    // nothing says where one stack ends.
    if at == wait {
        return None;
    }
    let frames = d.frames.split_off(at);
    Some(Draft {
        frames,
        in_trace: true,
        ..Draft::default()
    })
}

#[cfg(test)]
mod tests {
    /// A kernel thread's stack cut short, then a header-less user stack under the same `dmesg -T` time (no
    /// time tells them apart): two tasks, the second with the ioctl's frames.
    #[test]
    fn a_syscall_stack_after_a_kernel_threads_is_its_own_task() {
        let t = "[Mon Dec  7 18:00:01 2026] INFO: task btrfs-transacti:1625 blocked for more than 241 seconds.\n\
[Mon Dec  7 18:00:01 2026] btrfs-transacti D    0  1625      2 0x80004000\n\
[Mon Dec  7 18:00:01 2026] Call Trace:\n\
[Mon Dec  7 18:00:01 2026]  __schedule+0x2e3/0x740\n\
[Mon Dec  7 18:00:01 2026]  schedule+0x42/0xb0\n\
[Mon Dec  7 18:00:01 2026]  wait_for_commit+0x5e/0x90 [btrfs]\n\
[Mon Dec  7 18:00:01 2026]  ? wait_woken+0x80/0x80\n\
[Mon Dec  7 18:00:01 2026]  btrfs_commit_transaction+0x7f3/0x970 [btrfs]\n\
[Mon Dec  7 18:00:01 2026]  ? wait_for_completion_timeout+0x38/0x140\n\
[Mon Dec  7 18:00:01 2026]  commit_tail+0x42/0x70 [drm_kms_helper]\n\
[Mon Dec  7 18:00:01 2026]  drm_atomic_helper_commit+0x113/0x120 [drm_kms_helper]\n\
[Mon Dec  7 18:00:01 2026]  drm_ioctl+0x233/0x410 [drm]\n\
[Mon Dec  7 18:00:01 2026]  __x64_sys_ioctl+0x1a/0x20\n\
[Mon Dec  7 18:00:01 2026]  do_syscall_64+0x5a/0x130\n\
[Mon Dec  7 18:00:01 2026]  entry_SYSCALL_64_after_hwframe+0x44/0xa9\n";
        let e = crate::explain::explain(t.as_bytes()).unwrap();
        let got: Vec<_> = e
            .tasks
            .iter()
            .map(|t| (t.task.clone(), t.stack.first().map(|f| f.function.clone())))
            .collect();
        assert_eq!(e.tasks.len(), 2, "{got:?}");
        assert_eq!(e.tasks[0].task, "btrfs-transacti");
        assert!(e.tasks[1].stack.iter().any(|f| f.function == "commit_tail"));
        assert!(!e.tasks[0].stack.iter().any(|f| f.function == "commit_tail"));
    }
}
