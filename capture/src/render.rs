//! Human views of a [`ProcessSnapshot`]: Markdown (reports reuse the pieces) and plain text.
//!
//! Markdown layout: a title with the D-thread count, one summary line per D thread (the site and
//! the decoded ioctl), a table of all threads, then per deep-read thread its wchan, syscall, ioctl
//! and stack in a code block.

use std::fmt::Write;

use crate::snapshot::{IoctlInfo, ProcessSnapshot, StackFrame, SyscallInfo, ThreadSnapshot};

/// A table cell: no pipes or newlines.
pub fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// An inline code span that survives backticks in the text.
pub fn code(s: &str) -> String {
    if s.contains('`') {
        format!("`` {} ``", s.replace('\n', " "))
    } else {
        format!("`{}`", s.replace('\n', " "))
    }
}

pub fn syscall_line(s: &SyscallInfo) -> String {
    match s {
        SyscallInfo::Running { .. } => "running".into(),
        SyscallInfo::Blocked { nr, .. } if *nr < 0 => {
            format!("{nr} (not in a syscall: fault, interrupt or exiting)")
        }
        SyscallInfo::Blocked { nr, name, args, .. } => {
            let name = name.as_deref().unwrap_or("?");
            format!("{name} ({nr}) ({})", args.join(", "))
        }
    }
}

pub fn ioctl_line(i: &IoctlInfo) -> String {
    let name = i.name.as_deref().unwrap_or("unknown request");
    let fields = if i.dir == "raw" {
        "raw command, not _IOC-encoded".to_string()
    } else {
        let t = char::from_u32(i.ioctl_type)
            .filter(|c| c.is_ascii_graphic())
            .map(|c| format!("'{c}' "))
            .unwrap_or_default();
        format!(
            "dir {}, type {t}({:#04x}), nr {:#04x}, size {}",
            i.dir, i.ioctl_type, i.nr, i.size
        )
    };
    let target = i.fd_target.as_deref().unwrap_or("?");
    let driver = i
        .driver
        .as_deref()
        .map(|d| format!(" [{d}]"))
        .unwrap_or_default();
    format!(
        "{name} {} ({fields}) on fd {} → {target}{driver}",
        i.request, i.fd
    )
}

pub fn stack_text(frames: &[StackFrame]) -> String {
    let mut out = String::new();
    for f in frames {
        let _ = write!(out, "{}+{:#x}/{:#x}", f.function, f.offset, f.size);
        if let Some(m) = &f.module {
            let _ = write!(out, " [{m}]");
        }
        out.push('\n');
    }
    out
}

fn summary(t: &ThreadSnapshot) -> String {
    let mut s = format!("tid {} {} — {}", t.tid, code(&t.comm), t.state);
    if let Some(site) = &t.site {
        let _ = write!(s, " · {site}");
    } else if let Some(w) = &t.wchan {
        let _ = write!(s, " · in {}", code(w));
    }
    if let Some(i) = &t.ioctl {
        let _ = write!(
            s,
            " · {} on {}",
            code(i.name.as_deref().unwrap_or(&i.request)),
            code(i.fd_target.as_deref().unwrap_or("?"))
        );
    }
    s
}

/// The whole snapshot as Markdown.
pub fn markdown(p: &ProcessSnapshot) -> String {
    let mut out = String::new();
    let d: Vec<&ThreadSnapshot> = p.threads.iter().filter(|t| t.state == "D").collect();
    let _ = writeln!(
        out,
        "# Process {} — {} of {} threads in D\n",
        p.pid,
        d.len(),
        p.threads.len()
    );
    if d.is_empty() {
        out.push_str("No thread is in uninterruptible sleep (D).\n\n");
    }
    for t in &d {
        let _ = writeln!(out, "- **{}**", summary(t));
    }
    if !d.is_empty() {
        out.push('\n');
    }
    for n in &p.notes {
        let _ = writeln!(out, "> note: {}", n.replace('\n', " "));
    }
    if !p.notes.is_empty() {
        out.push('\n');
    }
    out.push_str("| tid | comm | state | wchan | syscall | site |\n|---:|---|:---:|---|---|---|\n");
    for t in &p.threads {
        let syscall = match &t.syscall {
            Some(SyscallInfo::Running { .. }) => "running".to_string(),
            Some(SyscallInfo::Blocked { nr, name, .. }) => match name {
                Some(n) => format!("{n} ({nr})"),
                None => nr.to_string(),
            },
            None => String::new(),
        };
        let state = if t.gone {
            "gone".to_string()
        } else {
            t.state.clone()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            t.tid,
            cell(&t.comm),
            state,
            cell(t.wchan.as_deref().unwrap_or("")),
            cell(&syscall),
            cell(t.site.as_deref().unwrap_or(""))
        );
    }
    for t in p.threads.iter().filter(|t| {
        t.syscall.is_some() || !t.stack.is_empty() || t.wchan.is_some() || !t.notes.is_empty()
    }) {
        let _ = writeln!(out, "\n## tid {} {} ({})\n", t.tid, code(&t.comm), t.state);
        if let Some(site) = &t.site {
            let _ = writeln!(out, "- site: **{}**", site);
        }
        if let Some(w) = &t.wchan {
            let _ = writeln!(out, "- wchan: {}", code(w));
        }
        if let Some(s) = &t.syscall {
            let _ = writeln!(out, "- syscall: {}", code(&syscall_line(s)));
        }
        if let Some(i) = &t.ioctl {
            let _ = writeln!(out, "- ioctl: {}", code(&ioctl_line(i)));
            if let Some(n) = &i.note {
                let _ = writeln!(out, "  - {}", n);
            }
        }
        if let (Some(v), Some(n)) = (t.voluntary_ctxt_switches, t.nonvoluntary_ctxt_switches) {
            let _ = writeln!(out, "- context switches: {v} voluntary, {n} involuntary");
        }
        for n in &t.notes {
            let _ = writeln!(out, "- note: {n}");
        }
        if !t.stack.is_empty() {
            let _ = write!(out, "\n```\n{}```\n", stack_text(&t.stack));
        }
    }
    out
}

/// Plain text, one block per thread that was read in depth, one line for the others.
pub fn text(p: &ProcessSnapshot) -> String {
    let mut out = String::new();
    let d = p.threads.iter().filter(|t| t.state == "D").count();
    let _ = writeln!(
        out,
        "pid {} ({}): {} threads, {} in D",
        p.pid,
        p.arch,
        p.threads.len(),
        d
    );
    for n in &p.notes {
        let _ = writeln!(out, "note: {n}");
    }
    for t in &p.threads {
        let state = if t.gone { "gone" } else { t.state.as_str() };
        let _ = writeln!(
            out,
            "{:>8} {:<16} {} {}",
            t.tid,
            t.comm,
            state,
            t.site.as_deref().unwrap_or("")
        );
        if let Some(w) = &t.wchan {
            let _ = writeln!(out, "         wchan   {w}");
        }
        if let Some(s) = &t.syscall {
            let _ = writeln!(out, "         syscall {}", syscall_line(s));
        }
        if let Some(i) = &t.ioctl {
            let _ = writeln!(out, "         ioctl   {}", ioctl_line(i));
        }
        for n in &t.notes {
            let _ = writeln!(out, "         note    {n}");
        }
        for line in stack_text(&t.stack).lines() {
            let _ = writeln!(out, "           {line}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_summaries() {
        assert_eq!(cell("a|b\nc"), "a\\|b c");
        assert_eq!(code("x`y"), "`` x`y ``");
        let p = ProcessSnapshot {
            pid: 5,
            arch: "x86_64".into(),
            monotonic_ns: 0,
            boottime_ns: 0,
            threads: vec![
                ThreadSnapshot {
                    tid: 5,
                    comm: "main | odd".into(),
                    state: "S".into(),
                    ..Default::default()
                },
                ThreadSnapshot {
                    tid: 6,
                    comm: "worker".into(),
                    state: "D".into(),
                    wchan: Some("percpu_rwsem_wait".into()),
                    site: Some("ioctl → filesystem freeze (percpu_rwsem_wait)".into()),
                    stack: vec![StackFrame {
                        function: "percpu_rwsem_wait".into(),
                        offset: 0x107,
                        size: 0x130,
                        module: None,
                    }],
                    ..Default::default()
                },
            ],
            notes: vec![],
        };
        let md = markdown(&p);
        assert!(md.starts_with("# Process 5 — 1 of 2 threads in D"), "{md}");
        assert!(
            md.contains("- **tid 6 `worker` — D · ioctl → filesystem freeze (percpu_rwsem_wait)**"),
            "{md}"
        );
        assert!(md.contains("| 5 | main \\| odd | S |"), "{md}");
        assert!(
            md.contains("```\npercpu_rwsem_wait+0x107/0x130\n```"),
            "{md}"
        );
        let txt = text(&p);
        assert!(txt.contains("pid 5 (x86_64): 2 threads, 1 in D"), "{txt}");
    }
}
