//! The Xid and SXid lines of a pasted log (`explain`), each tied to the paste's tasks by the pid the driver
//! printed, else by the process name. Pure; bounded to [`MAX_PASTE_XIDS`] lines.

use serde::Serialize;

use super::{parse_xid_line, XidEvent};
use crate::escape;

/// The most Xid lines kept from one paste (a flood of Xid 45 repeats the same story).
pub const MAX_PASTE_XIDS: usize = 1000;

/// A task of the paste an Xid names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskRef {
    pub task: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// How the tie was made: `pid` (the driver's `pid=` is the task's) or `name` (its `name=` is the task's).
    pub by: &'static str,
}

/// One Xid line of the paste.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PastedXid {
    #[serde(flatten)]
    pub event: XidEvent,
    /// Its line in the input, from 1.
    pub line: usize,
    /// The paste's tasks it names (empty when it names none, or none of them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskRef>,
}

/// Every Xid/SXid line of `text`, in input order, and how many more were left out.
pub fn scan(text: &str) -> (Vec<PastedXid>, usize) {
    let mut out = Vec::new();
    let mut dropped = 0;
    for (i, line) in text.split('\n').enumerate() {
        if !line.contains("Xid") {
            continue;
        }
        let Some(event) = parse_xid_line(line.as_bytes()) else {
            continue;
        };
        if out.len() == MAX_PASTE_XIDS {
            dropped += 1;
            continue;
        }
        out.push(PastedXid {
            event,
            line: i + 1,
            tasks: Vec::new(),
        });
    }
    (out, dropped)
}

/// Tie each Xid to the tasks `(name, pid)` of the same paste: by pid when the driver printed one and a task has
/// it, else by the printed name.
pub fn tie<'a>(
    xids: &mut [PastedXid],
    tasks: impl Iterator<Item = (&'a str, Option<i32>)> + Clone,
) {
    for x in xids.iter_mut() {
        let mut found: Vec<TaskRef> = Vec::new();
        if let Some(pid) = x.event.pid {
            found.extend(
                tasks
                    .clone()
                    .filter(|(_, p)| *p == Some(pid))
                    .map(|(task, pid)| TaskRef {
                        task: task.to_string(),
                        pid,
                        by: "pid",
                    }),
            );
        }
        if found.is_empty() {
            if let Some(name) = &x.event.name {
                found.extend(
                    tasks
                        .clone()
                        .filter(|(task, _)| task == name)
                        .map(|(task, pid)| TaskRef {
                            task: task.to_string(),
                            pid,
                            by: "name",
                        }),
                );
            }
        }
        found.dedup();
        found.truncate(16);
        x.tasks = found;
    }
}

/// The `## Xid and SXid lines` section: one bullet per line, what the Xid means and what to do, the process the
/// driver named and the paste's task it is. Every text the paste chose is a code span or escaped prose.
pub fn markdown(xids: &[PastedXid], dropped: usize) -> String {
    use std::fmt::Write;
    if xids.is_empty() {
        return String::new();
    }
    let mut out = String::from("## Xid and SXid lines\n\n");
    for x in xids {
        let e = &x.event;
        let _ = write!(
            out,
            "- line {}: {} on {}",
            x.line,
            escape::code(&e.label()),
            escape::code(&e.device)
        );
        if let Some(switch) = &e.switch {
            let _ = write!(out, " ({})", escape::code(switch));
        }
        if let Some(meaning) = &e.meaning {
            let _ = write!(out, ": {}", escape::inline(meaning));
        }
        if let Some(severity) = &e.severity {
            let _ = write!(out, "; {}", escape::code(severity));
        }
        match (e.pid, &e.name) {
            (Some(pid), Some(name)) => {
                let _ = write!(out, "; pid {pid} {}", escape::code(name));
            }
            (Some(pid), None) => {
                let _ = write!(out, "; pid {pid}");
            }
            (None, Some(name)) => {
                let _ = write!(out, "; process {}", escape::code(name));
            }
            (None, None) => {}
        }
        for t in &x.tasks {
            let pid = t.pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
            let _ = write!(
                out,
                "; the paste's task {}{pid}, by {}",
                escape::code(&t.task),
                t.by
            );
        }
        if let Some(action) = &e.action {
            let _ = write!(out, ". What to do: {}", escape::inline(action));
        }
        if !e.detail.is_empty() {
            let _ = write!(out, "\n  {}", escape::code(&e.detail));
        }
        out.push('\n');
    }
    if dropped > 0 {
        let _ = writeln!(
            out,
            "\nnote: more than {MAX_PASTE_XIDS} Xid lines: {dropped} more ignored"
        );
    }
    out.push('\n');
    out
}
