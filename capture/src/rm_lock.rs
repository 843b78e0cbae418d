//! Who holds the NVIDIA RM lock that threads wait for.
//!
//! The resource manager serialises most driver calls behind two locks: the RM API lock (a rwlock taken by
//! every RM escape, `os_acquire_rwlock_read/_write` under `rmapiLockAcquire`) and the GPU lock(s) (taken after
//! it, `os_acquire_mutex`/`down` under `rmGpuLocksAcquire`). The kernel does not say who holds either, but a
//! holder must be *inside an RM call* (an ioctl on `/dev/nvidiactl` or `/dev/nvidiaN`) and not itself waiting
//! for that lock: running, pinning pages, waiting for a GSP RPC reply, or asleep on something else. Such
//! threads are the *likely* holders; with none in sight the answer is "holder not visible".
//!
//! [`link_rm_lock_holders`] sets `waits_for` ("RM API lock", "GPU lock") and `blocked_behind` (the likely
//! holders' tids) on the waiters of one process's threads; [`holder_sentence`] words the finding.

use crate::site::nvidia::{nvidia_site, NvidiaWait};
use crate::snapshot::{SyscallInfo, ThreadSnapshot};

/// The RM lock `t` waits for, from its stack; None for every other wait.
pub fn rm_lock_waited(t: &ThreadSnapshot) -> Option<NvidiaWait> {
    match nvidia_site(&t.stack)? {
        wait @ (NvidiaWait::RmApiLock | NvidiaWait::GpuLock) => Some(wait),
        _ => None,
    }
}

/// `t` is blocked inside an RM escape: an ioctl on an NVIDIA RM device node.
pub fn in_rm_call(t: &ThreadSnapshot) -> bool {
    t.ioctl
        .as_ref()
        .is_some_and(|i| i.driver.as_deref() == Some("nvidia-rm"))
}

/// Could `t` hold `lock`? It is inside an RM call and waits for neither that lock nor, for the GPU lock, the
/// API lock (taken before the GPU lock, so a thread still waiting for it holds no GPU lock).
pub fn may_hold(t: &ThreadSnapshot, lock: NvidiaWait) -> bool {
    if t.gone || !in_rm_call(t) {
        return false;
    }
    match rm_lock_waited(t) {
        None => true,
        Some(waited) if waited == lock => false,
        Some(NvidiaWait::RmApiLock) => false,
        // Waiting for a GPU lock while holding the API lock (write) is the RM's lock order.
        Some(_) => lock == NvidiaWait::RmApiLock,
    }
}

/// For every thread in D waiting for an RM lock: `waits_for` names the lock and `blocked_behind` lists the
/// threads of `threads` that may hold it (lowest tid first; empty when no holder is visible). Threads that
/// already wait for another lock class (the mmap lock) keep it.
pub fn link_rm_lock_holders(threads: &mut [ThreadSnapshot]) {
    let waits: Vec<Option<NvidiaWait>> = threads
        .iter()
        .map(|t| {
            (t.state == "D" && t.waits_for.is_none())
                .then(|| rm_lock_waited(t))
                .flatten()
        })
        .collect();
    for (i, wait) in waits.iter().enumerate() {
        let Some(lock) = *wait else { continue };
        let tid = threads[i].tid;
        let mut holders: Vec<i32> = threads
            .iter()
            .filter(|h| h.tid != tid && may_hold(h, lock))
            .map(|h| h.tid)
            .collect();
        holders.sort_unstable();
        let t = &mut threads[i];
        t.waits_for = Some(lock.label().to_string());
        t.blocked_behind = holders;
    }
}

/// True when some thread in D waits for an RM lock: the capture then also reads the process's other threads
/// (a holder is often running or asleep in S, and those are not read by default).
pub fn any_rm_lock_waiter(threads: &[ThreadSnapshot]) -> bool {
    threads
        .iter()
        .any(|t| t.state == "D" && rm_lock_waited(t).is_some())
}

/// What a likely holder is doing, in words: its decoded RM operation, else its escape, plus its state.
pub fn holder_activity(t: &ThreadSnapshot) -> String {
    let ioctl = t.ioctl.as_ref();
    let argument = ioctl.and_then(|i| i.argument.as_ref());
    let what = argument
        .and_then(|a| a.summary.clone().or_else(|| a.operation.clone()))
        .or_else(|| ioctl.and_then(|i| i.name.clone()))
        .unwrap_or_else(|| "an RM call".to_string());
    let doing = match nvidia_site(&t.stack) {
        Some(wait) => format!(", {}", wait.phrase()),
        None if t.state == "R" || matches!(t.syscall, Some(SyscallInfo::Running { .. })) => {
            ", running".to_string()
        }
        None => t
            .wchan
            .as_deref()
            .filter(|w| !w.is_empty() && *w != "0")
            .map(|w| format!(", asleep in {w}"))
            .unwrap_or_default(),
    };
    format!("{what}{doing}")
}

/// "7 threads wait for the RM API lock; likely held by tid 4242 (`rmA`) in RM alloc memory … (pinning user
/// pages)" — or "…; holder not visible (no other thread inside an NVIDIA RM call)". `None` when no thread
/// waits for an RM lock.
pub fn holder_sentence(threads: &[ThreadSnapshot]) -> Option<String> {
    let mut by_lock: Vec<(NvidiaWait, Vec<&ThreadSnapshot>)> = Vec::new();
    for t in threads.iter().filter(|t| t.state == "D") {
        let Some(lock) = rm_lock_waited(t) else {
            continue;
        };
        match by_lock.iter_mut().find(|(l, _)| *l == lock) {
            Some((_, waiters)) => waiters.push(t),
            None => by_lock.push((lock, vec![t])),
        }
    }
    // The API lock first: GPU-lock waiters usually queue behind an API-lock holder.
    by_lock.sort_by_key(|(lock, _)| *lock != NvidiaWait::RmApiLock);
    let (lock, waiters) = by_lock.into_iter().next()?;
    let n = waiters.len();
    let mut out = format!(
        "{n} thread{} wait{} for the {}",
        if n == 1 { "" } else { "s" },
        if n == 1 { "s" } else { "" },
        lock.label()
    );
    let mut holders: Vec<&ThreadSnapshot> = threads.iter().filter(|h| may_hold(h, lock)).collect();
    holders.sort_by_key(|h| h.tid);
    match holders.as_slice() {
        [] => out.push_str("; holder not visible (no other thread inside an NVIDIA RM call)"),
        [h, rest @ ..] => {
            out.push_str(&format!(
                "; likely held by tid {} ({}) in {}",
                h.tid,
                crate::escape::code(&h.comm),
                holder_activity(h)
            ));
            if !rest.is_empty() {
                out.push_str(&format!(
                    " (or {} other thread{} inside RM calls: tid {})",
                    rest.len(),
                    if rest.len() == 1 { "" } else { "s" },
                    rest.iter()
                        .take(8)
                        .map(|t| t.tid.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests;
