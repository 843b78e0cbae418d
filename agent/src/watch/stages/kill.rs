//! Stage `kill`: with `--kill-on-wedge`, SIGKILL the wedged process after the capture and record whether it
//! died (a process in uninterruptible sleep usually does not). Never for an on-demand capture.

use std::time::{Duration, Instant};

use capture::ProcRoot;

use super::context::{Capture, Deadline};

pub fn run(capture: &mut Capture<'_>, _deadline: &Deadline) -> Result<(), String> {
    if !capture.wedge || !capture.settings.kill_on_wedge {
        return Ok(());
    }
    let died = kill_and_check(&capture.settings.proc_root, capture.pid);
    capture.killed = Some(died);
    capture.incident.push_timeline(if died {
        "SIGKILL sent (--kill-on-wedge): the process died".to_string()
    } else {
        "SIGKILL sent (--kill-on-wedge): the process is still there after 1 s (unkillable: \
             uninterruptible sleep)"
            .to_string()
    });
    Ok(())
}

/// SIGKILL `pid` and watch for 1 s whether it dies: gone, or every thread a zombie. (A killed group leader
/// shows `Z` while a sibling thread is still stuck in D: that process has not died.)
fn kill_and_check(root: &ProcRoot, pid: i32) -> bool {
    crate::watch::launch::signal_process(pid, libc::SIGKILL);
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        let alive = match root.tasks(pid) {
            Err(_) => false,
            Ok(tids) => tids.iter().any(|&tid| {
                root.read_task_stat(pid, tid)
                    .is_ok_and(|stat| stat.state != 'Z' && stat.state != 'X')
            }),
        };
        if !alive {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
