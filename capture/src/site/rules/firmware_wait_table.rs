//! Round 21 (issue 38 held-out: GPU firmware mailboxes and the threads they block): lock takers whose own
//! wait is hidden in `/proc/<tid>/stack`, each row read from the function's source; the lookups read these
//! rows after [`super::HIDDEN_WAIT_TAKERS`]. A row's `wait` may name two primitives ("mutex or completion
//! wait") when the function enters either and the stack cannot say which.

use super::pattern::{t, LockTaker};

/// Round 21's lock takers (the VideoCore firmware mailbox, the cpufreq governors' sample work).
pub const FIRMWARE_WAIT_TAKERS: &[LockTaker] = &[
    // drivers/firmware/raspberrypi.c: rpi_firmware_transaction takes transaction_lock (mutex_lock), sends
    // the message (mbox_send_message) and waits for the VideoCore's reply on fw->c (wait_for_completion;
    // wait_for_completion_timeout of 1 s since 5.2), both in the function itself: a firmware that never
    // answers holds its caller in the completion and every later caller (cpufreq, hwmon, vcio) in the mutex.
    t(
        &["rpi_firmware_transaction"],
        "mutex or completion wait",
        "the Raspberry Pi firmware mailbox (transaction_lock, then the VideoCore firmware's reply fw->c)",
    ),
    // Round 25: arch/arm/mach-bcm2708/vcio.c (the Raspberry Pi kernels before the 4.x firmware driver):
    // bcm_mailbox_write → dev_mbox_write (static, inlined) takes device_lock(mbox_dev), mutex_lock of the
    // mailbox device's dev->mutex, around mbox_write; its other taker, dev_mbox_read, holds it while it sleeps
    // in down(&mbox->sema[chan]) for the VideoCore's reply, so a firmware that never answers blocks every
    // later writer here (the property channel's callers: temperature, cpufreq, the framebuffer).
    t(
        &["bcm_mailbox_write", "dev_mbox_write"],
        "mutex wait",
        "the VideoCore mailbox device's lock (device_lock of the vcio device; a reader holds it waiting for the firmware's reply)",
    ),
    // The same vcio.c: dev_mbox_read takes device_lock(dev) (mutex_lock of the vcio device's dev->mutex) and then
    // sleeps in down(&mailbox->sema[chan]) until the mailbox interrupt's handler ups the channel's semaphore with
    // the VideoCore's reply; `/proc/<tid>/stack` leaves both primitives out, so the row names the two.
    t(
        &["dev_mbox_read"],
        "mutex or semaphore wait",
        "the VideoCore mailbox channel's reply (mbox->sema[chan], under device_lock of the vcio device)",
    ),
    // drivers/staging/vc04_services/interface/vchiq_arm/vchiq_arm.c (3.x-4.x): vchiq_release of a VCHIQ
    // instance wakes its completion thread and waits in down() on the instance's event semaphore until the
    // VideoCore side has closed each of the instance's services (a pasted dump shows the `down` under it); a
    // firmware that stopped answering holds the closing task there.
    t(
        &["vchiq_release"],
        "semaphore wait",
        "the VCHIQ instance's close (its services must be closed by the VideoCore firmware)",
    ),
    // drivers/cpufreq/cpufreq_ondemand.c od_dbs_timer and cpufreq_conservative.c cs_dbs_timer (3.x-4.5, the
    // governors' sample work: mutex_lock(&...cdbs.timer_mutex), the shared timer_mutex from 4.2) and
    // cpufreq_governor.c dbs_work_handler (4.6+: mutex_lock(&policy_dbs->update_mutex)) serialize each
    // policy's sampling with its limits updates: a sample stuck in the driver's frequency change (a firmware
    // call that does not return) blocks the policy's other CPUs' sample work here.
    t(
        &["od_dbs_timer", "cs_dbs_timer", "dbs_work_handler"],
        "mutex wait",
        "the cpufreq governor's per-policy sample lock (timer_mutex; update_mutex since 4.6)",
    ),
];
