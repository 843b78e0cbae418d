//! The site with the lock the kernel recorded (`task_struct::blocker`, issue 36) written into it: a pure
//! string step, apart from the classifier that made the site.

/// A site made precise by the kernel's own record of the lock the thread waits for (`task_struct::blocker`,
/// read by the wait graph, issue 36): the lock's kind and mode and which lock it is, even where the stack
/// cannot say (`/proc/<tid>/stack` omits the lock's slow path). A site that hid the wait ("waits in X (lock
/// or wait not visible in the stack)") says it; one that named the primitive gets which lock.
pub fn with_recorded_lock(site: &str, kind: &str, mode: Option<&str>, lock: &str) -> String {
    let primitive = match mode {
        Some(m) => format!("{kind} wait ({m})"),
        None => format!("{kind} wait"),
    };
    let recorded = format!("{primitive} on {lock} (kernel record)");
    if site.contains("(kernel record)") {
        return site.to_string();
    }
    if let Some(at) = site.find("waits in ") {
        if let Some(end) = site[at..].find(" (lock or wait not visible in the stack)") {
            let function = &site[at + "waits in ".len()..at + end];
            let rest = &site[at + end + " (lock or wait not visible in the stack)".len()..];
            return format!("{}{recorded} in {function}{rest}", &site[..at]);
        }
    }
    // The stack named a wait: the record adds which lock, before any category in brackets.
    match site.find(" [") {
        Some(at) => format!("{} — {recorded}{}", &site[..at], &site[at..]),
        None => format!("{site} — {recorded}"),
    }
}
