//! The wedged threads' tables in report.md's head: one table per thread (its state, since when, fate, wchan,
//! syscall, ioctl, site, lock, top frame and breadcrumb), at most [`MAX_THREAD_TABLES`] of them. A frame, a syscall
//! and an ioctl are worded by `capture::render` (the capture views' wording), escaped here for a table cell.

use std::fmt::Write as _;

use capture::render::{frame_line, ioctl_line, syscall_line};
use capture::{SyscallInfo, ThreadSnapshot};

use crate::limits::{MAX_MORE_TIDS, MAX_SYSCALL_ARGS_SHOWN, MAX_THREAD_TABLES, MAX_TIDS_LISTED};
use crate::model::{Incident, WedgedThread};
use crate::text::{call_text, cell, code_cell, duration, time_text};
use crate::verdict::{
    breadcrumb_clause, d_for_ns, fate_text, in_flight_of, judged_threads, primary_thread,
    sample_monotonic, waiting_behind,
};

pub(super) fn thread_tables(incident: &Incident, out: &mut String) {
    let judged = judged_threads(incident);
    if !judged.is_empty() {
        judged_tables(incident, &judged, out);
        return;
    }
    let Some(sample) = incident.latest_sample() else {
        out.push_str("No thread snapshot was captured.\n\n");
        return;
    };
    let now_ns = sample_monotonic(sample);
    let mut d: Vec<&ThreadSnapshot> = sample
        .snapshot
        .threads
        .iter()
        .filter(|t| t.state == "D")
        .collect();
    let primary = primary_thread(incident, &d, now_ns).map(|t| t.tid);
    d.sort_by_key(|t| {
        (
            Some(t.tid) != primary,
            std::cmp::Reverse(d_for_ns(incident, t.tid, now_ns)),
            t.tid,
        )
    });
    writeln!(
        out,
        "### Wedged threads ({} in D of {} threads, sample at {})\n",
        sample.snapshot.threads_in_d(),
        sample.snapshot.thread_count(),
        time_text(&sample.taken_at)
    )
    .unwrap();
    for t in d.iter().take(MAX_THREAD_TABLES) {
        let since = d_for_ns(incident, t.tid, now_ns).map(|ns| {
            let since = incident
                .wedged_threads
                .iter()
                .find(|w| w.tid == t.tid)
                .map(|w| time_text(&w.d_since))
                .unwrap_or_default();
            format!("{} ({} before the sample)", cell(&since), duration(ns))
        });
        thread_table(incident, t, since, None, now_ns, out);
    }
    more_threads(d.len(), d.iter().map(|t| t.tid), "in D", out);
    summarized_line(&sample.snapshot, out);
}

/// `Not listed (a very wide process): 19,744 more threads: 19,740 S in futex_wait_queue, 4 R.`: the threads a
/// snapshot counted without reading them.
fn summarized_line(snapshot: &capture::ProcessSnapshot, out: &mut String) {
    if let Some(summary) = &snapshot.summarized {
        writeln!(
            out,
            "Not listed (a very wide process; their stacks were not read): {}.\n",
            cell(&summary.describe())
        )
        .unwrap();
    }
}

/// The threads judged wedged, each with its evidence as of detection and its fate; then one line on the latest
/// sample, which is shown as what it is (a later look), never in place of the evidence.
fn judged_tables(
    incident: &Incident,
    judged: &[(&WedgedThread, &ThreadSnapshot)],
    out: &mut String,
) {
    writeln!(
        out,
        "### Wedged threads ({} judged wedged; evidence as of detection)\n",
        judged.len()
    )
    .unwrap();
    for (w, t) in judged.iter().take(MAX_THREAD_TABLES) {
        let mut since = cell(&time_text(&w.d_since));
        if let Some(at) = &w.detected_at {
            write!(since, "; judged wedged {}", cell(&time_text(at))).unwrap();
        }
        let fate = fate_text(incident, w);
        let at_ns = w.detected_at.as_ref().and_then(|d| d.monotonic_ns);
        thread_table(incident, t, Some(since), Some(cell(&fate)), at_ns, out);
        let user = match (&w.user_frame, &w.user_frame_not_captured) {
            (Some(frame), _) => {
                let mut v = format!("pc {} in {}", cell(&frame.pc), code_cell(&frame.short()));
                v.push_str(&super::python_view::symbol_suffix(frame));
                if let Some(path) = &frame.path {
                    write!(v, " ({})", code_cell(path)).unwrap();
                }
                if let Some(f) = in_flight_of(incident, w.tid) {
                    write!(
                        v,
                        " while {} in flight",
                        code_cell(&call_text(&f.call, &f.args, &f.label))
                    )
                    .unwrap();
                }
                v
            }
            (None, Some(why)) => format!("not captured: {}", cell(why)),
            (None, None) => {
                super::python_view::append_rows(out, &super::python_view::thread_rows(w));
                continue;
            }
        };
        // The table's last row: no blank line between it and the table above.
        out.pop();
        writeln!(out, "| user frame | {user} |\n").unwrap();
        super::python_view::append_rows(out, &super::python_view::thread_rows(w));
    }
    more_threads(
        judged.len(),
        judged.iter().map(|(w, _)| w.tid),
        "judged wedged",
        out,
    );
    if let Some(sample) = incident.latest_sample() {
        let d: Vec<String> = sample
            .snapshot
            .threads
            .iter()
            .filter(|t| t.state == "D")
            .take(MAX_TIDS_LISTED)
            .map(|t| t.tid.to_string())
            .collect();
        writeln!(
            out,
            "Latest sample ({}): {} threads, {} in D{}.\n",
            time_text(&sample.taken_at),
            sample.snapshot.thread_count(),
            sample.snapshot.threads_in_d(),
            if d.is_empty() {
                String::new()
            } else {
                format!(" (tids {})", d.join(", "))
            }
        )
        .unwrap();
        summarized_line(&sample.snapshot, out);
    }
}

/// `N more threads <what> (tids …)` after the tables that were shown.
fn more_threads(total: usize, tids: impl Iterator<Item = i32>, what: &str, out: &mut String) {
    if total <= MAX_THREAD_TABLES {
        return;
    }
    let rest: Vec<String> = tids
        .skip(MAX_THREAD_TABLES)
        .take(MAX_MORE_TIDS)
        .map(|t| t.to_string())
        .collect();
    let more = if total - MAX_THREAD_TABLES > rest.len() {
        ", …"
    } else {
        ""
    };
    writeln!(
        out,
        "{} more threads {what} (tids {}{more}); their stacks are below.\n",
        total - MAX_THREAD_TABLES,
        rest.join(", ")
    )
    .unwrap();
}

/// One thread's table: state, since when, fate, wchan, syscall, ioctl, site, top frame, breadcrumb.
fn thread_table(
    incident: &Incident,
    t: &ThreadSnapshot,
    since: Option<String>,
    fate: Option<String>,
    now_ns: Option<u64>,
    out: &mut String,
) {
    writeln!(
        out,
        "| thread {} | {} |\n|---|---|",
        t.tid,
        code_cell(&t.comm)
    )
    .unwrap();
    let mut row = |k: &str, v: String| writeln!(out, "| {k} | {v} |").unwrap();
    row("state", cell(&t.state));
    if let Some(since) = since {
        row("in D since", since);
    }
    if let Some(fate) = fate {
        row("fate", fate);
    }
    row(
        "wchan",
        t.wchan
            .as_deref()
            .map(code_cell)
            .unwrap_or_else(|| "not read".into()),
    );
    row("syscall", syscall_text(t));
    if let Some(i) = &t.ioctl {
        row("ioctl", code_cell(&ioctl_line(i)));
    }
    if let Some(site) = &t.site {
        row("site", code_cell(site));
    }
    if let Some(v) = super::wait_graph::waits_for_cell(incident, t.tid) {
        row("waits for", v);
    } else if let Some(class) = &t.waits_for {
        let behind: Vec<String> = t
            .blocked_behind
            .iter()
            .take(MAX_TIDS_LISTED)
            .map(i32::to_string)
            .collect();
        let v = if behind.is_empty() {
            format!(
                "{} (no thread of the process in D holds it)",
                code_cell(class)
            )
        } else {
            format!("{} held by tid {}", code_cell(class), behind.join(", "))
        };
        row("waits for", v);
    }
    let waiters = waiting_behind(incident, t.tid);
    if !waiters.is_empty() {
        let tids: Vec<String> = waiters
            .iter()
            .take(MAX_TIDS_LISTED)
            .map(i32::to_string)
            .collect();
        row(
            "blocks",
            format!("tid {} (they wait behind it)", tids.join(", ")),
        );
    }
    if let Some(top) = t.stack.first() {
        row("top kernel frame", code_cell(&frame_line(top)));
    }
    if let Some(clause) = breadcrumb_clause(incident, t.tid, now_ns) {
        row("breadcrumb", cell(&clause.replace('`', "")));
    }
    out.push('\n');
}

/// The thread's syscall ([`syscall_line`], the capture views' wording) and the files behind its descriptor
/// arguments.
fn syscall_text(t: &ThreadSnapshot) -> String {
    let Some(syscall) = &t.syscall else {
        return "not read".into();
    };
    let mut text = code_cell(&syscall_line(syscall, MAX_SYSCALL_ARGS_SHOWN));
    if matches!(syscall, SyscallInfo::Blocked { nr, .. } if *nr >= 0) {
        for f in &t.syscall_files {
            let target = match (&f.target, &f.not_captured) {
                (Some(target), _) => code_cell(target),
                (None, Some(why)) => format!("? ({})", cell(why)),
                (None, None) => "?".into(),
            };
            write!(text, "; fd {} → {target}", f.fd).unwrap();
        }
    }
    text
}
