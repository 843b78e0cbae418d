//! The wait graph in words: [`sentence`] (one line, Markdown-safe: the verdict's first clause and the
//! report's first line), [`markdown`] (the "Wait graph" section: every lock, its holder, its waiters and
//! since when) and [`text`] (a terminal). Comms and paths are the target's to choose: escaped here
//! ([`crate::escape`]), never trusted.

use std::fmt::Write as _;

use super::{Evidence, Holder, LockNode, Mode, WaitGraph, Waiter};
use crate::escape;

/// The lock's name for Markdown: comms and paths in code spans.
pub fn lock_markdown(lock: &LockNode) -> String {
    let id = &lock.identity;
    let code = |s: &str| escape::code(s);
    let process = || {
        let pid = id.pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into());
        match &id.comm {
            Some(c) => format!("pid {pid} ({})", code(c)),
            None => format!("pid {pid}"),
        }
    };
    let file = || match (&id.path, &id.dev, id.ino) {
        (Some(p), _, _) => code(p),
        (None, Some(dev), Some(ino)) => format!("inode {ino} on device {dev}"),
        _ => "a file".to_string(),
    };
    match id.class.as_str() {
        "mmap_lock" => format!("the mmap_lock of {}", process()),
        "vma_lock" => format!("a VMA lock of {}", process()),
        "i_rwsem" => format!("the inode lock (i_rwsem) of {}", file()),
        "invalidate_lock" => format!("the invalidate_lock of {}", file()),
        "f_pos_lock" => format!("the file-position lock (f_pos_lock) of an open {}", file()),
        _ => {
            // Names built from the kernel's own symbols and our words: escaped as prose all the same.
            let mut name = escape::inline(&lock.name);
            if id.class == "unknown" || id.class.ends_with("static") {
                if let Some(a) = &lock.address {
                    write!(name, " at {a}").unwrap();
                }
            }
            name
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// The first word of a waiter's call: `mmap`, `page fault`, `write`, `ioctl NAME`.
fn call_head(w: &Waiter) -> String {
    let call = w.call.split(" on ").next().unwrap_or(&w.call);
    call.to_string()
}

/// "(for writing, in mmap)" or "(2 for writing in mmap, 1 for reading in a page fault)".
fn waiter_modes(lock: &LockNode) -> String {
    let mut groups: Vec<(Option<Mode>, String, usize)> = Vec::new();
    for w in &lock.waiters {
        let head = call_head(w);
        match groups
            .iter_mut()
            .find(|(m, c, _)| *m == w.mode && *c == head)
        {
            Some(g) => g.2 += 1,
            None => groups.push((w.mode, head, 1)),
        }
    }
    let one = |mode: Option<Mode>, call: &str, sep: &str| {
        let call = escape::inline(call);
        match mode {
            Some(m) => format!("{}{sep}in {call}", m.words()),
            None => format!("in {call}"),
        }
    };
    match groups.as_slice() {
        [] => String::new(),
        [(mode, call, _)] => format!(" ({})", one(*mode, call, ", ")),
        many => format!(
            " ({})",
            many.iter()
                .map(|(m, c, n)| format!("{n} {}", one(*m, c, " ")))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// "tid 1059 `uvmlock`".
fn thread_md(tid: i32, comm: &str) -> String {
    format!("tid {tid} {}", escape::code(comm))
}

/// "held for reading by tid 1059 `uvmlock` (the kernel's last reader), running in the kernel in mmap (…)".
fn holder_md(h: &Holder, breadcrumb: &dyn Fn(i32) -> Option<String>) -> String {
    let mode = h
        .mode
        .map(|m| format!("{} ", m.words()))
        .unwrap_or_default();
    let evidence = match h.evidence {
        Evidence::Owner | Evidence::Writer | Evidence::Sampled => "",
        Evidence::LastReader => " (the kernel's last reader)",
        Evidence::LastHolder => " (its last holder, by the kernel)",
        Evidence::Stack => " (by its stack)",
    };
    let mut out = format!(
        "held {mode}by {}{evidence}, {}",
        thread_md(h.tid, &h.comm),
        escape::inline(&h.doing)
    );
    if let Some(s) = h.last_ran_s_ago.filter(|_| h.state == "D") {
        write!(out, ", asleep {s:.1} s").unwrap();
    }
    if let Some(crumb) = breadcrumb(h.tid) {
        write!(out, " — {crumb}").unwrap();
    }
    out
}

/// One lock in one clause: "4 threads wait for the mmap_lock of pid 1059 (`uvmlock`) (for writing, in mmap);
/// held for reading by tid 1059 `uvmlock`, running in the kernel (…) — breadcrumb …". `breadcrumb(tid)`
/// gives a holder's call in flight (the caller has the rings), already Markdown-safe.
pub fn lock_clause(lock: &LockNode, breadcrumb: &dyn Fn(i32) -> Option<String>) -> String {
    let n = lock.waiters.len() + lock.more_waiters;
    let mut out = format!(
        "{n} thread{} wait{} for {}{}",
        plural(n),
        if n == 1 { "s" } else { "" },
        lock_markdown(lock),
        waiter_modes(lock)
    );
    match lock.holders.as_slice() {
        [] => write!(
            out,
            "; holder not found: {}",
            escape::inline(
                lock.holder_unknown
                    .as_deref()
                    .unwrap_or("no record names it")
            )
        )
        .unwrap(),
        [h, rest @ ..] => {
            write!(out, "; {}", holder_md(h, breadcrumb)).unwrap();
            if let Some(longest) = longest_wait(lock) {
                write!(out, "; held for at least {longest:.1} s (the longest wait)").unwrap();
            }
            if !rest.is_empty() {
                write!(
                    out,
                    " (or {}: tid {})",
                    if rest.len() == 1 {
                        "1 other".to_string()
                    } else {
                        format!("{} others", rest.len())
                    },
                    rest.iter()
                        .take(8)
                        .map(|h| h.tid.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
                .unwrap();
            }
        }
    }
    out
}

/// The sentence for the lock `tid` waits for (or the graph's first lock), followed along its chain:
/// "…; tid 7 itself waits for …, held by …", and "deadlock: …" when the chain closes.
pub fn sentence(
    graph: &WaitGraph,
    tid: Option<i32>,
    breadcrumb: &dyn Fn(i32) -> Option<String>,
) -> Option<String> {
    let start = tid
        .and_then(|t| graph.lock_waited_by(t))
        .or_else(|| graph.locks.first())?;
    let mut out = lock_clause(start, breadcrumb);
    let mut seen = vec![start.id.as_str()];
    let mut at = start;
    while let Some(next) = at
        .holders
        .first()
        .and_then(|h| h.waits_for.as_deref())
        .and_then(|id| graph.lock(id))
    {
        let holder = &at.holders[0];
        if seen.contains(&next.id.as_str()) {
            write!(
                out,
                "; deadlock: tid {} waits for {}, which closes the cycle",
                holder.tid,
                lock_markdown(next)
            )
            .unwrap();
            break;
        }
        if seen.len() >= 4 {
            out.push_str("; the chain goes on (see the wait graph)");
            break;
        }
        write!(
            out,
            "; tid {} itself waits: {}",
            holder.tid,
            lock_clause(next, breadcrumb)
        )
        .unwrap();
        seen.push(next.id.as_str());
        at = next;
    }
    Some(out)
}

/// The longest a waiter of `lock` has waited, in seconds.
fn longest_wait(lock: &LockNode) -> Option<f64> {
    lock.waiters
        .iter()
        .filter_map(|w| w.waited_s)
        .fold(None, |m: Option<f64>, s| Some(m.map_or(s, |m| m.max(s))))
}

fn since(w: &Waiter) -> String {
    w.waited_s
        .map(|s| format!("{s:.1} s"))
        .unwrap_or_else(|| "?".into())
}

/// Rows of the table at most (the rest are counted, and all are in incident.json).
pub const MAX_TABLE_ROWS: usize = 16;

/// The wait graph's table: where the edges come from, one row per lock (at most [`MAX_TABLE_ROWS`]), the
/// chains and deadlocks. Bounded: report.md's head holds it.
pub fn table(graph: &WaitGraph) -> String {
    let mut out = String::new();
    writeln!(out, "Edges from: {}.", escape::inline(&graph.records)).unwrap();
    if let Some(s) = &graph.sampling {
        writeln!(
            out,
            "Candidate holders sampled: {} threads, {} samples over {:.1} s.",
            s.candidates, s.samples, s.window_s
        )
        .unwrap();
    }
    out.push('\n');
    if graph.locks.is_empty() {
        out.push_str("No thread waits for a lock.\n");
        return out;
    }
    out.push_str("| lock | kind | holder | how known | waiters | longest wait |\n|---|---|---|---|---|---|\n");
    for l in graph.locks.iter().take(MAX_TABLE_ROWS) {
        let holder = match l.holders.first() {
            Some(h) => {
                let mode = h
                    .mode
                    .map(|m| format!(" ({})", m.words()))
                    .unwrap_or_default();
                let waits = h
                    .waits_for
                    .as_ref()
                    .map(|id| format!("; waits for {id}"))
                    .unwrap_or_default();
                format!(
                    "tid {} {}{mode}, {}{waits}",
                    h.tid,
                    escape::code_cell(&h.comm),
                    escape::cell(
                        &crate::escape::one_line(&h.doing)
                            .chars()
                            .take(300)
                            .collect::<String>()
                    )
                )
            }
            None => format!(
                "not found: {}",
                escape::cell(l.holder_unknown.as_deref().unwrap_or("?"))
            ),
        };
        let how = l.holders.first().map(|h| h.evidence.words()).unwrap_or("—");
        let n = l.waiters.len() + l.more_waiters;
        let longest = longest_wait(l)
            .map(|s| format!("{s:.1} s"))
            .unwrap_or_else(|| "?".into());
        writeln!(
            out,
            "| {} {} | {} | {holder} | {} | {n} | {longest} |",
            l.id,
            lock_markdown(l).replace('|', "\\|"),
            l.kind.word(),
            escape::cell(how)
        )
        .unwrap();
    }
    if graph.locks.len() > MAX_TABLE_ROWS {
        writeln!(
            out,
            "\n… and {} more locks (all in incident.json).",
            graph.locks.len() - MAX_TABLE_ROWS
        )
        .unwrap();
    }
    out.push('\n');
    for c in &graph.chains {
        writeln!(
            out,
            "Chain: {} (each lock's holder waits for the next).",
            c.join(" → ")
        )
        .unwrap();
    }
    for c in &graph.deadlocks {
        writeln!(
            out,
            "**Deadlock:** {} → {} (each lock's holder waits for the next, the last for the first).",
            c.join(" → "),
            c[0]
        )
        .unwrap();
    }
    if !graph.chains.is_empty() || !graph.deadlocks.is_empty() {
        out.push('\n');
    }
    out
}

/// The "Wait graph" section's body (`capture --pid`): the [`table`], then per lock its sentence, waiters and
/// address.
pub fn markdown(graph: &WaitGraph, breadcrumb: &dyn Fn(i32) -> Option<String>) -> String {
    let mut out = table(graph);
    for l in &graph.locks {
        writeln!(out, "{}: {}\n", l.id, lock_clause(l, breadcrumb)).unwrap();
        for w in &l.waiters {
            let mode = w
                .mode
                .map(|m| format!(" {}", m.words()))
                .unwrap_or_default();
            writeln!(
                out,
                "- {} (pid {}), {}{mode}, in {}, waiting {} (by {})",
                thread_md(w.tid, &w.comm),
                w.pid,
                escape::inline(&w.state),
                escape::inline(&w.call),
                since(w),
                escape::inline(&w.by)
            )
            .unwrap();
        }
        if l.more_waiters > 0 {
            writeln!(out, "- … and {} more", l.more_waiters).unwrap();
        }
        if let Some(a) = &l.address {
            writeln!(out, "- lock address {a}").unwrap();
        }
        if let Some(f) = &l.identity.taken_in {
            writeln!(out, "- taken in {}", escape::code(f)).unwrap();
        }
        out.push('\n');
    }
    for n in &graph.notes {
        writeln!(out, "Note: {}", escape::inline(n)).unwrap();
    }
    out
}

/// Plain text for a terminal: one line per lock, then its waiters.
pub fn text(graph: &WaitGraph) -> String {
    let mut out = String::new();
    writeln!(out, "wait graph ({})", escape::one_line(&graph.records)).unwrap();
    for l in &graph.locks {
        let holder = match l.holders.first() {
            Some(h) => format!(
                "held{} by tid {} {} ({}): {}",
                h.mode
                    .map(|m| format!(" {}", m.words()))
                    .unwrap_or_default(),
                h.tid,
                escape::one_line(&h.comm),
                h.evidence.words(),
                escape::one_line(&h.doing)
            ),
            None => format!(
                "holder not found: {}",
                escape::one_line(l.holder_unknown.as_deref().unwrap_or("?"))
            ),
        };
        writeln!(
            out,
            "  {} {} ({}): {holder}",
            l.id,
            escape::one_line(&l.name),
            l.kind.word()
        )
        .unwrap();
        for w in &l.waiters {
            writeln!(
                out,
                "    waiter tid {} {} {} in {}, {}",
                w.tid,
                escape::one_line(&w.comm),
                w.state,
                escape::one_line(&w.call),
                since(w)
            )
            .unwrap();
        }
    }
    for c in &graph.deadlocks {
        writeln!(out, "  deadlock: {}", c.join(" -> ")).unwrap();
    }
    out
}
