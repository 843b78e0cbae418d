//! `explain`: the tasks and stacks in text people paste — a dmesg/journal hung-task block (`INFO: task
//! NAME:PID blocked for more than N seconds.` and its `Call Trace:` with `?` frames, `<TASK>` markers,
//! timestamps and module lists), a sysrq-w/-t dump of many tasks, a soft-lockup trace, a bare
//! `/proc/<tid>/stack` copy, or the stacks of a wedge-capture report — each classified by the same
//! [`crate::site`] classifier as a live capture.
//!
//! Pure: [`explain`] takes bytes and returns tasks or a clear error; it never panics, reads at most
//! [`MAX_INPUT`] bytes and keeps at most [`MAX_TASKS`] tasks of at most [`MAX_TASK_FRAMES`] frames,
//! [`MAX_TOTAL_FRAMES`] in all (a 16 MiB input packed with frames: under 0.6 s and 55 MiB peak RSS, release build).
//!
//! Map: [`formats`] reads one line of any notation (log prefixes, task headers, frame formats of every
//! unwinder and tool); `reader` reads the lines by structure and keeps the task being read; `task` holds the
//! bounds and the draft a task is read into (an [`ExplainedTask`], from `crate::explained_task`); [`clean`]
//! turns the frames read into the task's stack as `/proc/<tid>/stack` would show it (no `?` guesses,
//! scheduler or wait-queue frames, function pointers, or an interrupt's frames); this module is the public
//! API; `reversed` finds newest-first (`journalctl -r`) blocks so they are read in the kernel's order; `shapes`
//! undoes what a transport, page or tool did to the paste first (encodings, entities, line wrappers);
//! `markup` the page tags (`<pre>`) [`formats`] takes off where a line's message starts;
//! `task_line` reads an old kernel's task line and holds the substring search asked of every line;
//! `kthread_split` splits a header-less user stack off a kernel thread's cut stack it was read into. A frame
//! that does not parse (a demangled C++ name with spaces) is skipped and noted.

mod clean;
mod crash_bt;
mod flattened;
mod formats;
mod kthread_split;
mod markup;
mod reader;
mod reversed;
mod shapes;
mod stamp;
mod task;
mod task_line;
mod tool_formats;

use serde::Serialize;

pub use task::{MAX_INPUT, MAX_TASKS, MAX_TASK_FRAMES, MAX_TOTAL_FRAMES};

use crate::error::{Error, Result};
use crate::explained_task::ExplainedTask;
use reader::Reader;
use task::MAX_LINE;

/// Every task of the input, in input order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explained {
    pub tasks: Vec<ExplainedTask>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The tasks linked by the kernel's "blocked on … likely owned by task …" lines (issue 36).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait_graph: Option<crate::wait_graph::WaitGraph>,
    /// NVIDIA Xid / NVSwitch SXid lines of the paste, each tied to its tasks by pid or name ([`crate::xid`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub xids: Vec<crate::xid::paste::PastedXid>,
}

fn bad(why: impl Into<String>) -> Error {
    Error::Parse {
        what: "pasted kernel log",
        why: why.into(),
    }
}

/// Text that is not a log: NUL bytes or mostly control characters.
fn looks_binary(input: &[u8]) -> bool {
    let sample = &input[..input.len().min(64 << 10)];
    let control = sample
        .iter()
        .filter(|&&b| b == 0 || (b < 0x20 && !b"\t\n\r\x0c\x1b".contains(&b)))
        .count();
    sample.contains(&0) || control * 100 > sample.len()
}

/// Every task in a pasted kernel log or stack, cleaned and classified.
pub fn explain(input: &[u8]) -> Result<Explained> {
    if input.len() > MAX_INPUT {
        return Err(bad(format!(
            "{} bytes is more than the {} MiB a kernel log can hold",
            input.len(),
            MAX_INPUT >> 20
        )));
    }
    if looks_binary(input) {
        return Err(bad(
            "binary data, not text: expected a kernel log (dmesg, journalctl -k) or a /proc/<tid>/stack copy",
        ));
    }
    // What a transport, page or tool did to the paste, undone first (issue 38, family 4).
    let decoded = shapes::decode(input);
    let text = shapes::undo(&decoded);
    let mut reader = Reader::default();
    let mut long_lines = 0usize;
    // The head of a line another printk broke into, and the intruding message.
    let mut broken: Option<(&str, &str)> = None;
    // Newest-first blocks (`journalctl -r`) are read turned back, as the kernel printed them.
    let reversed = reversed::reversed_blocks(&text);
    for line in reversed::reading_order(&text, &reversed) {
        if line.len() > MAX_LINE {
            long_lines += 1;
            continue;
        }
        if let Some((head, intruder)) = broken.take() {
            // The rest of the broken line comes next, with no prefix of its own.
            let bare = !shapes::unquoted(line).starts_with('[') && !line.trim().is_empty();
            if bare && head.len() + line.len() <= MAX_LINE {
                reader.line(&format!("{head}{}", line.trim_start()));
                reader.line(intruder);
                continue;
            }
            if formats::head_reads_alone(head) {
                reader.line(head);
            }
            reader.line(intruder);
        }
        if let Some(records) = flattened::records(line) {
            records.into_iter().for_each(|r| reader.line(r));
            continue;
        }
        match formats::intruding_stamp(line) {
            Some(i) => broken = Some((&line[..i], &line[i..])),
            None => reader.line(line),
        }
    }
    if let Some((head, intruder)) = broken {
        if formats::head_reads_alone(head) {
            reader.line(head);
        }
        reader.line(intruder);
    }
    reader.finish_draft();
    reader.tasks.retain(|t| !is_hung_task_detector(t));
    let (mut xids, more_xids) = crate::xid::paste::scan(&text);
    if reader.tasks.is_empty() && xids.is_empty() {
        return Err(bad(
            "no task, stack or Xid found: expected a hung-task report (\"INFO: task NAME:PID blocked for more than N seconds.\" and its Call Trace), a sysrq-w/-t dump, a soft-lockup trace, a /proc/<tid>/stack copy or NVRM Xid lines",
        ));
    }
    crate::xid::paste::tie(
        &mut xids,
        reader.tasks.iter().map(|t| (t.task.as_str(), t.pid)),
    );
    let mut notes = Vec::new();
    if more_xids > 0 {
        notes.push(format!(
            "more than {} Xid lines: {more_xids} more ignored",
            crate::xid::paste::MAX_PASTE_XIDS
        ));
    }
    if reader.dropped_tasks > 0 {
        notes.push(format!(
            "more than {MAX_TASKS} tasks or {MAX_TOTAL_FRAMES} frames: {} more tasks ignored",
            reader.dropped_tasks
        ));
    }
    if long_lines > 0 {
        notes.push(format!(
            "{long_lines} lines longer than {MAX_LINE} bytes ignored"
        ));
    }
    let wait_graph = crate::wait_graph::explain::from_explained(&reader.tasks);
    Ok(Explained {
        tasks: reader.tasks,
        notes,
        wait_graph,
        xids,
    })
}

/// Round 14 (issue 38 held-out: a whole syzkaller report): the hung-task detector's own backtrace. After the
/// blocked tasks, `check_hung_uninterruptible_tasks` (kernel/hung_task.c) may call
/// `trigger_all_cpu_backtrace()` (`hung_task_all_cpu_backtrace`, or before a hung-task panic), and khungtaskd
/// (`kthread_run(watchdog, NULL, "khungtaskd")`) prints its own stack first, through `nmi_cpu_backtrace`: the
/// reporter, running, not a task the report is about.
fn is_hung_task_detector(t: &ExplainedTask) -> bool {
    let has = |name: &str| {
        t.stack
            .iter()
            .any(|f| crate::site::frame_name::base_name(&f.function) == name)
    };
    (has("nmi_cpu_backtrace") || has("nmi_trigger_cpumask_backtrace"))
        && (has("check_hung_uninterruptible_tasks") || (t.task == "khungtaskd" && has("watchdog")))
}

/// Markdown: per task its name, pid, site and cleaned stack. Everything the pasted text chose (task names, sites
/// naming them, frames, notes quoting lines) is inert: names and sites are code spans ([`crate::escape::code`]),
/// the stack is an indented code block of lines with their controls written out, notes are escaped prose.
pub fn markdown(e: &Explained) -> String {
    use crate::escape;
    use std::fmt::Write;
    let mut out = String::new();
    for t in &e.tasks {
        let pid = t.pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
        let kind = if t.kernel_thread {
            " — kernel thread"
        } else {
            ""
        };
        let _ = writeln!(out, "## {}{pid}{kind}\n", escape::code(&t.task));
        match &t.site {
            Some(s) => {
                let _ = writeln!(out, "site: {}\n", escape::code(s));
            }
            None => out.push_str("site: unknown\n\n"),
        }
        if !t.stack.is_empty() {
            for line in crate::render::stack_text(&t.stack).lines() {
                let _ = writeln!(out, "    {}", escape::controls(line));
            }
            out.push('\n');
        }
        for n in &t.notes {
            let _ = writeln!(out, "note: {}\n", escape::inline(n));
        }
    }
    out.push_str(&crate::xid::paste::markdown(&e.xids, 0));
    for n in &e.notes {
        let _ = writeln!(out, "note: {}\n", escape::inline(n));
    }
    if let Some(g) = &e.wait_graph {
        out.push_str("## Wait graph\n\n");
        out.push_str(&crate::wait_graph::render::markdown(g, &|_| None));
    }
    out
}

#[cfg(test)]
mod tests;
