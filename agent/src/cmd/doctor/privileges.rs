//! Privileges the agent uses beyond reading /proc, tried for real where that is cheap: real-time priority of
//! the watch loop (asked for on a throwaway thread, exactly as the loop asks) and the credential switch of the
//! helper that reads files a target names (CAP_SETUID + CAP_SETGID).
//!
//! Both depend on the service manager's settings as much as on being root: systemd's
//! `CapabilityBoundingSet=` without `CAP_SYS_NICE`, or `RestrictRealtime=yes` (a seccomp filter), refuse the
//! real-time policy to root; a bounding set without `CAP_SETUID`/`CAP_SETGID` makes every symbolizer start fail.

use super::check::{check, Check, Status};

/// Linux capability numbers (capability.h).
pub const CAP_SETGID: u32 = 6;
pub const CAP_SETUID: u32 = 7;
pub const CAP_SYS_NICE: u32 = 23;

/// The watch loop's scheduling: `raise_watch_priority` run on a thread of its own (the policy is per thread
/// and the thread ends at once), so doctor sees what the loop of an agent started the same way gets.
pub fn realtime_check(cap: impl Fn(u32) -> Option<bool>) -> Check {
    let got = std::thread::spawn(crate::watch::raise_watch_priority)
        .join()
        .unwrap_or("normal (the probe thread panicked)");
    let seccomp = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Seccomp:").map(|v| v.trim() == "2"))
        })
        .unwrap_or(false);
    if got.starts_with("real-time") {
        return check(
            "realtime-priority",
            Status::Ok,
            format!("the watch loop gets {got}: a fork storm cannot keep it off the CPU"),
            "",
        );
    }
    let why = match (cap(CAP_SYS_NICE), seccomp) {
        (Some(false), _) => "CAP_SYS_NICE is not in the effective set",
        (_, true) => {
            "CAP_SYS_NICE is held but a seccomp filter refuses real-time policies (systemd: RestrictRealtime=yes)"
        }
        _ => "sched_setscheduler(SCHED_RR) was refused",
    };
    check(
        "realtime-priority",
        Status::Warn,
        format!(
            "the watch loop runs at {got}: {why}; under a fork/exit storm a wedge is seen late (measured: the loop \
             waited 4.7 s of 8 s on the run queue)"
        ),
        "systemd: CapabilityBoundingSet= with CAP_SYS_NICE and RestrictRealtime=no (the shipped unit); \
         Kubernetes: add SYS_NICE (privileged has it)",
    )
}

/// CAP_SETUID and CAP_SETGID: the helper that opens the files a target names (its ELF files, its Python
/// sources) switches to the target's ids before exec; without them it cannot start and incidents have no
/// user-frame symbols.
pub fn credential_switch_check(cap: impl Fn(u32) -> Option<bool>) -> Option<Check> {
    let (uid, gid) = (cap(CAP_SETUID)?, cap(CAP_SETGID)?);
    Some(if uid && gid {
        check(
            "credential-switch",
            Status::Ok,
            "CAP_SETUID and CAP_SETGID held: files a target names are read with its own ids (user-frame symbols)",
            "",
        )
    } else {
        check(
            "credential-switch",
            Status::Warn,
            format!(
                "missing {}: the symbolizer cannot switch to a target's ids, so incidents have no user-frame symbols \
                 (files a target names are never read with the agent's rights)",
                match (uid, gid) {
                    (false, false) => "CAP_SETUID and CAP_SETGID",
                    (false, true) => "CAP_SETUID",
                    _ => "CAP_SETGID",
                }
            ),
            "systemd: CapabilityBoundingSet= with CAP_SETUID CAP_SETGID (the shipped unit); Kubernetes: add SETUID and \
             SETGID",
        )
    })
}
