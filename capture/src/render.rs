//! Human views of a [`ProcessSnapshot`]: Markdown and plain text, and the one wording of a thread's parts that
//! every view shares: [`frame_line`] (and [`stack_text`]), [`syscall_line`], [`ioctl_line`]. report.md's thread
//! tables and stacks (`reports::render`) word a frame, a syscall and an ioctl with these same functions, so
//! `wedge-capture capture --format markdown` and report.md say the same thing the same way.
//!
//! Markdown layout: a title with the D-thread count, one summary line per D thread (the site and
//! the decoded ioctl), a table of all threads, then per deep-read thread its wchan, syscall, ioctl
//! and stack in a code block.
//!
//! Comms, wchans, sites, notes and fd targets come from the target (a comm is whatever the process
//! names itself): every one goes through [`crate::escape`] for its context, in Markdown and in text.

use std::fmt::Write;

use crate::escape::{self, cell, code, code_cell, controls, inline};
use crate::snapshot::{IoctlInfo, ProcessSnapshot, StackFrame, SyscallInfo, ThreadSnapshot};

/// Every argument of a syscall (the kernel lists six): the capture views show them all, report.md's table the
/// first few.
pub const ALL_SYSCALL_ARGS: usize = 6;

/// A thread's syscall in words, plain text (the caller escapes it for its view): `ioctl (16) args 0x5,
/// 0xc020462a, 0x7ffd6c1e2a40`, `running (not in a syscall)`, `-1 (not in a syscall: fault, interrupt or
/// exiting)`. At most `args_shown` arguments are listed.
pub fn syscall_line(s: &SyscallInfo, args_shown: usize) -> String {
    match s {
        SyscallInfo::Running { .. } => "running (not in a syscall)".into(),
        SyscallInfo::Blocked { nr, .. } if *nr < 0 => {
            format!("{nr} (not in a syscall: fault, interrupt or exiting)")
        }
        SyscallInfo::Blocked { nr, name, args, .. } => {
            let name = name.as_deref().unwrap_or("?");
            let shown: Vec<&str> = args.iter().take(args_shown).map(String::as_str).collect();
            if shown.is_empty() {
                format!("{name} ({nr})")
            } else {
                format!("{name} ({nr}) args {}", shown.join(", "))
            }
        }
    }
}

/// A decoded ioctl in words, plain text (the caller escapes it for its view): `NV_ESC_RM_CONTROL 0xc020462a
/// (dir read|write, type 'F' (0x46), nr 0x2a, size 32) on fd 5 → /dev/nvidiactl [nvidia-rm]`.
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

/// One kernel frame in words, plain text: `nv_kthread_q_flush+0x83/0x140 [nvidia_uvm]`.
pub fn frame_line(f: &StackFrame) -> String {
    let mut line = format!("{}+{:#x}/{:#x}", f.function, f.offset, f.size);
    if let Some(m) = &f.module {
        let _ = write!(line, " [{m}]");
    }
    line
}

/// A stack, one [`frame_line`] a line, innermost first.
pub fn stack_text(frames: &[StackFrame]) -> String {
    let mut out = String::new();
    for f in frames {
        out.push_str(&frame_line(f));
        out.push('\n');
    }
    out
}

fn summary(t: &ThreadSnapshot) -> String {
    let mut s = format!("tid {} {} — {}", t.tid, code(&t.comm), inline(&t.state));
    if let Some(site) = &t.site {
        let _ = write!(s, " · {}", code(site));
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
        p.threads_in_d(),
        p.thread_count()
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
        let _ = writeln!(out, "> note: {}", inline(n));
    }
    if let Some(summary) = &p.summarized {
        let _ = writeln!(
            out,
            "> not listed: {} ({})",
            inline(&summary.describe()),
            inline(&summary.why)
        );
    }
    if !p.notes.is_empty() || p.summarized.is_some() {
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
        let state = if t.gone { "gone" } else { t.state.as_str() };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            t.tid,
            code_cell(&t.comm),
            cell(state),
            t.wchan.as_deref().map(code_cell).unwrap_or_default(),
            cell(&syscall),
            t.site.as_deref().map(code_cell).unwrap_or_default()
        );
    }
    for t in p.threads.iter().filter(|t| {
        t.syscall.is_some() || !t.stack.is_empty() || t.wchan.is_some() || !t.notes.is_empty()
    }) {
        let _ = writeln!(
            out,
            "\n## tid {} {} ({})\n",
            t.tid,
            code(&t.comm),
            inline(&t.state)
        );
        if let Some(site) = &t.site {
            let _ = writeln!(out, "- site: {}", code(site));
        }
        if let Some(w) = &t.wchan {
            let _ = writeln!(out, "- wchan: {}", code(w));
        }
        if let Some(s) = &t.syscall {
            let _ = writeln!(
                out,
                "- syscall: {}",
                code(&syscall_line(s, ALL_SYSCALL_ARGS))
            );
        }
        if let Some(i) = &t.ioctl {
            let _ = writeln!(out, "- ioctl: {}", code(&ioctl_line(i)));
            if let Some(n) = &i.note {
                let _ = writeln!(out, "  - {}", inline(n));
            }
        }
        if let (Some(v), Some(n)) = (t.voluntary_ctxt_switches, t.nonvoluntary_ctxt_switches) {
            let _ = writeln!(out, "- context switches: {v} voluntary, {n} involuntary");
        }
        for n in &t.notes {
            let _ = writeln!(out, "- note: {}", inline(n));
        }
        if !t.stack.is_empty() {
            out.push_str("\n```\n");
            for line in stack_text(&t.stack).lines() {
                let _ = writeln!(out, "{}", escape::fence_line(line));
            }
            out.push_str("```\n");
        }
    }
    out
}

/// Plain text, one block per thread that was read in depth, one line for the others; every string from the
/// target through [`controls`], so a comm cannot drive the terminal.
pub fn text(p: &ProcessSnapshot) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "pid {} ({}): {} threads, {} in D",
        p.pid,
        controls(&p.arch),
        p.thread_count(),
        p.threads_in_d()
    );
    for n in &p.notes {
        let _ = writeln!(out, "note: {}", controls(n));
    }
    if let Some(summary) = &p.summarized {
        let _ = writeln!(out, "note: not listed: {}", controls(&summary.describe()));
    }
    for t in &p.threads {
        let state = if t.gone { "gone" } else { t.state.as_str() };
        let _ = writeln!(
            out,
            "{:>8} {:<16} {} {}",
            t.tid,
            controls(&t.comm),
            controls(state),
            controls(t.site.as_deref().unwrap_or(""))
        );
        if let Some(w) = &t.wchan {
            let _ = writeln!(out, "         wchan   {}", controls(w));
        }
        if let Some(s) = &t.syscall {
            let _ = writeln!(
                out,
                "         syscall {}",
                controls(&syscall_line(s, ALL_SYSCALL_ARGS))
            );
        }
        if let Some(i) = &t.ioctl {
            let _ = writeln!(out, "         ioctl   {}", controls(&ioctl_line(i)));
        }
        for n in &t.notes {
            let _ = writeln!(out, "         note    {}", controls(n));
        }
        for line in stack_text(&t.stack).lines() {
            let _ = writeln!(out, "           {}", controls(line));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Comms a process can give itself (prctl(PR_SET_NAME) takes any bytes but NUL; a recorded tree, any bytes).
    const HOSTILE_COMMS: &[&[u8]] = &[
        b"<img src=x onerror=alert(1)>",
        b"\x1b]0;pwned\x07\x1b[2J",
        b"two\nlines\r\n| forged | row |",
        b"tick`s```fence",
        b"nul\0byte",
        b"bad\xff\xfeutf8",
        "bidi\u{202e}txt.exe".as_bytes(),
    ];

    /// A snapshot read through the real parsers from a fake tree whose thread comms (and the D threads' wchan
    /// and stack) are hostile.
    fn hostile_snapshot() -> ProcessSnapshot {
        let tree = crate::testing::FakeProc::new();
        tree.process(300);
        for (i, comm) in HOSTILE_COMMS.iter().enumerate() {
            let tid = 301 + i as i32;
            tree.task(300, tid)
                .comm("COMM")
                .state('D')
                .wchan("<script>x</script>")
                .syscall("running")
                .stack("[<0>] evil<b>+0x1/0x2 [m`|```]\n");
            // The stat line as the builder wrote it, with the comm's raw bytes in place.
            let stat = tree.path().join(format!("300/task/{tid}/stat"));
            let line = std::fs::read(&stat).unwrap();
            let at = line.windows(4).position(|w| w == b"COMM").unwrap();
            let mut raw = line[..at].to_vec();
            raw.extend_from_slice(comm);
            raw.extend_from_slice(&line[at + 4..]);
            std::fs::write(&stat, raw).unwrap();
        }
        let opts = crate::SnapshotOptions::default();
        crate::snapshot_process(&tree.root(), 300, &opts).unwrap()
    }

    /// A Markdown line without its code spans: what a reader sees as prose.
    fn prose(line: &str) -> String {
        escape::outside_code_spans(line)
    }

    #[test]
    fn hostile_comms_cannot_inject_markup_or_control_characters() {
        let snap = hostile_snapshot();
        assert_eq!(snap.threads.len(), 1 + HOSTILE_COMMS.len());
        for t in &snap.threads[1..] {
            assert!(t.state == "D" && !t.stack.is_empty(), "{t:?}");
        }
        let md = markdown(&snap);
        let mut fenced = false;
        for line in md.lines() {
            if line.starts_with("```") {
                fenced = !fenced;
            } else if !fenced {
                assert!(
                    !prose(line).contains('<'),
                    "raw HTML reached the Markdown: {line}"
                );
            }
        }
        assert!(
            !md.chars().any(|c| c != '\n' && escape::needs_escape(c)),
            "a control character reached the Markdown:\n{md:?}"
        );
        // Every table row keeps its 6 columns: no pipe or newline from a comm split or forged one.
        let rows: Vec<&str> = md.lines().filter(|l| l.starts_with("| ")).collect();
        assert_eq!(rows.len(), 1 + snap.threads.len(), "{md}");
        for row in rows {
            let columns = row.replace("\\|", "").matches('|').count();
            assert_eq!(columns, 7, "{row}");
        }
        // Code spans stay closed: no backtick outside a code span is unescaped.
        for line in md.lines().filter(|l| !l.starts_with("```")) {
            let outside = prose(line);
            assert_eq!(
                outside.matches('`').count(),
                outside.matches("\\`").count(),
                "{line}"
            );
        }
        let problems = escape::inert_markdown_problems(&md, &["<img src=x onerror=alert(1)>"]);
        assert!(problems.is_empty(), "{problems:#?}");
        assert_eq!(
            md.matches("\n```\n").count(),
            2 * HOSTILE_COMMS.len(),
            "{md}"
        );
        assert!(md.contains("bad\u{fffd}\u{fffd}utf8"), "{md}");
        assert!(md.contains("`<img src=x onerror=alert(1)>`"), "{md}");

        let txt = text(&snap);
        assert!(
            !txt.chars().any(|c| c != '\n' && escape::needs_escape(c)),
            "a control character reached the text view:\n{txt:?}"
        );
        // No forged line: after the header, every line is a thread line or indented under one.
        assert!(txt.lines().skip(1).all(|l| l.starts_with(' ')), "{txt}");
        assert!(txt.contains("\\e]0;pwned\\x07\\e[2J"), "{txt}");
        assert!(txt.contains("nul\\x00byte"), "{txt}");
        assert!(txt.contains("bidi\\u{202e}txt.exe"), "{txt}");
    }

    #[test]
    fn escapes_and_summaries() {
        assert_eq!(cell("a|b\nc"), "a\\|b c");
        assert_eq!(code("x`y"), "``x`y``");
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
            summarized: None,
        };
        let md = markdown(&p);
        assert!(md.starts_with("# Process 5 — 1 of 2 threads in D"), "{md}");
        assert!(
            md.contains(
                "- **tid 6 `worker` — D · `ioctl → filesystem freeze (percpu_rwsem_wait)`**"
            ),
            "{md}"
        );
        assert!(md.contains("| 5 | `main \\| odd` | S |"), "{md}");
        assert!(
            md.contains("```\npercpu_rwsem_wait+0x107/0x130\n```"),
            "{md}"
        );
        let txt = text(&p);
        assert!(txt.contains("pid 5 (x86_64): 2 threads, 1 in D"), "{txt}");
    }
}
