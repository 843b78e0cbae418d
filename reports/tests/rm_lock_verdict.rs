//! The verdict names the likely holder of the NVIDIA RM lock the wedged thread waits for (issue 31): a thread
//! inside another RM call seen at detection, or, when none is visible in the kernel, the driver calls other
//! threads have in flight in the breadcrumb ring.

mod common;

use capture::{IoctlInfo, ThreadSnapshot};
use reports::verdict::verdict;

const API_LOCK_WAIT: &str = "os_acquire_rwlock_write+0x2b/0x40 [nvidia]\nportSyncRwLockAcquireWrite+0x10/0x40 [nvidia]\n\
     rmapiLockAcquire+0xbb/0x350 [nvidia]\nRmIoctl+0xa2a/0xdf0 [nvidia]\nrm_ioctl+0x7c/0x620 [nvidia]\n\
     nvidia_unlocked_ioctl+0x441/0x930 [nvidia]";
const PINNING: &str = "__get_user_pages+0x2b0/0x6b0\npin_user_pages+0x6d/0xa0\nos_lock_user_pages+0xa1/0x1b0 [nvidia]\n\
     RmCreateOsDescriptor+0x9c/0x1a0 [nvidia]\nRmIoctl+0x61e/0xdf0 [nvidia]\nrm_ioctl+0x7c/0x620 [nvidia]";

fn rm_ioctl(name: &str) -> IoctlInfo {
    serde_json::from_value(serde_json::json!({
        "fd": 5, "fd_target": "/dev/nvidiactl", "request": "0xc030462b", "dir": "read|write",
        "type": 0x46, "nr": 0x2b, "size": 48, "name": name, "driver": "nvidia-rm"
    }))
    .unwrap()
}

/// The schema-2 fixture, its wedged thread 4242 now waiting for the RM API lock; `holder` (if any) is in the
/// first sample as a sleeping thread pinning pages inside its own RM call.
fn incident(holder: bool) -> reports::Incident {
    let mut inc = common::incident_v2();
    let waiter = |t: &mut ThreadSnapshot| {
        t.stack = common::frames(API_LOCK_WAIT);
        t.wchan = Some("os_acquire_rwlock_write".into());
        t.ioctl = Some(rm_ioctl("NV_ESC_RM_ALLOC"));
        t.waits_for = Some("RM API lock".into());
        t.blocked_behind = if holder { vec![4250] } else { vec![] };
    };
    for w in &mut inc.wedged_threads {
        if let Some(t) = w.at_detection.as_mut().filter(|t| t.tid == 4242) {
            waiter(t);
        }
    }
    for sample in &mut inc.samples {
        for t in &mut sample.snapshot.threads {
            if t.tid == 4242 {
                waiter(t);
            }
            if t.tid == 4250 && holder {
                t.state = "S".into();
                t.stack = common::frames(PINNING);
                t.ioctl = Some(rm_ioctl("NV_ESC_RM_ALLOC_MEMORY"));
            }
        }
    }
    inc
}

#[test]
fn the_verdict_names_the_thread_inside_another_rm_call() {
    let v = verdict(&incident(true));
    assert!(
        v.contains(
            "1 thread waits for the RM API lock; likely held by tid 4250 (`pt_autograd_0`) in \
             NV_ESC_RM_ALLOC_MEMORY, is pinning user pages"
        ),
        "{v}"
    );
    assert!(!v.contains("in flight on other threads"), "{v}");
}

#[test]
fn with_no_holder_in_sight_the_verdict_says_so_and_gives_other_threads_calls_in_flight() {
    let mut inc = incident(false);
    let ring = inc.ring.as_mut().unwrap();
    let mut pinning = ring.in_flight[0].clone();
    pinning.tid = 4250;
    pinning.call = "cuMemHostRegister_v2".into();
    pinning.label = String::new();
    ring.in_flight.push(pinning);
    let v = verdict(&inc);
    assert!(
        v.contains("1 thread waits for the RM API lock; holder not visible (no other thread inside an NVIDIA RM call)"),
        "{v}"
    );
    assert!(
        v.contains("in flight on other threads (breadcrumbs): tid 4250 `cuMemHostRegister_v2"),
        "{v}"
    );
}

#[test]
fn a_thread_waiting_for_something_else_gets_no_rm_lock_clause() {
    let v = verdict(&common::incident_v2());
    assert!(!v.contains("RM API lock") && !v.contains("holder"), "{v}");
}
