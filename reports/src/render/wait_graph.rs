//! report.md's "Wait graph": in the head, every lock with its holder, how the holder is known, its waiters
//! and the longest wait (a bounded table, `capture::wait_graph::render::table`), and the chains and deadlocks;
//! in a `<details>` section, every waiter of every lock. The one-line summary is the verdict's first clause
//! ([`crate::verdict`]).

use super::section::{Keep, Section};
use crate::model::Incident;

/// `### Wait graph` and its table, when the capture built one with at least one lock.
pub(super) fn head(incident: &Incident, out: &mut String) {
    let Some(graph) = &incident.wait_graph else {
        return;
    };
    if graph.locks.is_empty() {
        return;
    }
    out.push_str("### Wait graph\n\n");
    out.push_str(&capture::wait_graph::render::table(graph));
}

/// Every lock's waiters and holder, as text lines.
pub(super) fn section(incident: &Incident) -> Section {
    let mut section = Section::new("Wait graph: every lock, holder and waiter", Keep::Head);
    if let Some(graph) = incident.wait_graph.as_ref().filter(|g| !g.locks.is_empty()) {
        for line in capture::wait_graph::render::text(graph).lines() {
            section.push(line);
        }
    }
    section
}

/// The thread table's "waits for" cell when the wait graph has the thread as a waiter: the lock, its id,
/// and its holder ("the mmap_lock of pid 7 (`a`) (L1), held for reading by tid 8 (the kernel's last reader)").
pub(super) fn waits_for_cell(incident: &Incident, tid: i32) -> Option<String> {
    let graph = incident.wait_graph.as_ref()?;
    let lock = graph.lock_waited_by(tid)?;
    let name = capture::wait_graph::render::lock_markdown(lock).replace('|', "\\|");
    Some(match lock.holders.first() {
        Some(h) => format!(
            "{name} ({}), held {}by tid {} ({})",
            lock.id,
            h.mode
                .map(|m| format!("{} ", m.words()))
                .unwrap_or_default(),
            h.tid,
            crate::text::cell(h.evidence.words())
        ),
        None => format!(
            "{name} ({}), holder not found: {}",
            lock.id,
            crate::text::cell(lock.holder_unknown.as_deref().unwrap_or("?"))
        ),
    })
}
