//! The function a wait is for: [`waiter`] (the caller of the primitives at a stack's top) and
//! [`built_in_waiter`] (that caller, named after a driver path when it is built-in code the path cannot name).

use super::frame_name::base_name;
use super::layers;
use super::rules::{self, SCHEDULER_FRAMES};
use crate::snapshot::StackFrame;

/// The function that called the wait primitives at the top of the stack (`proc_cgroup_show` under
/// `mutex_lock`, `__lru_add_drain_all`, `truncate_inode_pages_range` under `__lock_page`): what a kernel
/// engineer reads first after the wait itself. None when the top frame is no primitive (it is the wait and
/// already named) or when only entry and thread frames are left.
pub(super) fn waiter(frames: &[StackFrame]) -> Option<&str> {
    let mut primitives = 0;
    for f in frames {
        let name = base_name(&f.function);
        if SCHEDULER_FRAMES.contains(&name) || rules::never_sleeps(name) {
            continue;
        }
        if rules::wait_words(name).is_some() {
            primitives += 1;
            continue;
        }
        if rules::is_entry_frame(name) {
            return None;
        }
        // A lock taker on top: its lock's primitives were left out of the stack, it is the waiter.
        if primitives == 0 && rules::lock_taken_by(name).is_none() {
            return None;
        }
        // The lock's own API (`rtnl_lock`, `lock_system_sleep`) is the lock, not the waiter: its caller is.
        if is_lock_api(name) {
            primitives += 1;
            continue;
        }
        return Some(name);
    }
    None
}

/// A function that is a lock's API (`rtnl_lock`, `console_lock`, `lock_device_hotplug`) rather than code that
/// takes a lock for its own work: the lock taker rows name both, the wait is said by the lock's words.
fn is_lock_api(name: &str) -> bool {
    rules::lock_taken_by(name).is_some()
        && (name.ends_with("_lock")
            // Round 30: the shared and lockdep-subclass forms of a lock's API (`inode_lock_shared`,
            // `inode_lock_nested`: down_read / down_write_nested on i_rwsem) are the lock too, and inline: the
            // function that takes it (`blkdev_read_iter`) is what `/proc/<tid>/stack` shows.
            || name.ends_with("_lock_shared")
            || name.ends_with("_lock_nested")
            || name.ends_with("_lock_killable")
            || name.ends_with("_lock_interruptible")
            || name.starts_with("lock_"))
}

/// Waits whose words do not say what is awaited: the function that entered them does (which work a flush
/// waits for, whose completion, which operation takes every modeset lock, which async work).
const CALLER_NAMES_THE_WAIT: &[&str] = &[
    "workqueue flush wait",
    "completion wait",
    "DRM modeset lock wait",
    "async work wait",
    // Round 15: a queue freeze is entered for an operation (del_gendisk, an elevator or nr_hw_queues
    // change, a sysfs store): the function that froze the queue says which.
    "block queue freeze wait",
    // Round 15: a synchronous bio's submitter says which I/O (a swap write-back, a superblock read).
    "synchronous bio wait (the device has not completed the bio)",
];

/// The built-in function that called the wait when it is inner to every module frame: a lock taker (a
/// firmware mailbox's `rpi_firmware_property_list` under a hwmon driver's poll: the lock is that function's),
/// or — round 7 — the core function that entered a wait primitive on the driver's behalf (`drm_mode_rmfb`
/// flushing its rmfb work, `drm_mode_obj_get_properties_ioctl` taking every modeset lock): what is waited
/// for. The driver path names modules only. In a stack of built-in code (`built_in`: its path from the layer
/// map), any core function that called the wait is named, as a core stack's site names it.
pub(super) fn built_in_waiter(frames: &[StackFrame], built_in: bool) -> Option<&str> {
    let name = waiter(frames)?;
    let frame = frames.iter().find(|f| base_name(&f.function) == name)?;
    // The run of wait primitives at the top (`schedule_timeout` under `wait_for_common` under `__flush_work`):
    // one of them a wait whose caller says what it waits for.
    let entered_a_wait = frames
        .iter()
        .map(|f| base_name(&f.function))
        .filter(|n| !SCHEDULER_FRAMES.contains(n))
        .map_while(rules::wait_words)
        .any(|w| CALLER_NAMES_THE_WAIT.contains(&w));
    // Round 15: built-in code the layer map knows as a module's (ext4 or jbd2 built in under a tagged
    // overlayfs path: `jbd2_log_do_checkpoint`) is the waiter the path would have named had it been tagged.
    let module_code = layers::layer_of(name).is_some_and(|l| l.module);
    (frame.module.is_none()
        && (built_in || module_code || rules::lock_taken_by(name).is_some() || entered_a_wait))
        .then_some(name)
}
