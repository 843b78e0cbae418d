//! Text primitives of report.md and the verdict: text from the incident made safe for its place (through
//! [`capture::escape`], the workspace's one escaper, after [`clip`] to a limit of [`crate::limits`]), the units
//! every section uses ([`bytes`], [`duration`]) and the one name of a breadcrumb call ([`call_text`]). A leaf
//! under both [`crate::verdict`] and [`crate::render`]: the verdict reads without the Markdown module.

use capture::escape;

use crate::limits::{MAX_CELL_CHARS, MAX_CODE_CHARS, MAX_LINE};
use crate::model::{Args, Timestamp};

/// `s` cut to `max_chars` characters, with `…` when cut.
pub(crate) fn clip(s: &str, max_chars: usize) -> String {
    if s.len() <= max_chars {
        // Fast path: no more bytes than allowed characters.
        return s.to_string();
    }
    match s.char_indices().nth(max_chars) {
        None => s.to_string(),
        Some((idx, _)) => format!("{}…", &s[..idx]),
    }
}

/// A name others chose (comm, path, wchan, call, label) in Markdown prose, a list or a heading: one code span
/// ([`escape::code`], the workspace's one helper for it), bounded.
pub(crate) fn code(s: &str) -> String {
    escape::code(&clip(s, MAX_CODE_CHARS))
}

/// The same in a table cell ([`escape::code_cell`]).
pub(crate) fn code_cell(s: &str) -> String {
    escape::code_cell(&clip(s, MAX_CODE_CHARS))
}

/// Text of ours that may quote others' (a site, an operation) for the verdict, which is stored and shown as plain
/// text too: one line, controls written out, bounded; its Markdown is escaped where it is rendered
/// ([`escape::markdown_text`]).
pub(crate) fn plain(s: &str) -> String {
    escape::one_line(&clip(s, MAX_CODE_CHARS)).into_owned()
}

/// Prose of ours for a Markdown table cell or HTML summary, which may quote others' text: markup, HTML and pipes
/// escaped, one line, bounded ([`escape::cell`]).
pub(crate) fn cell(s: &str) -> String {
    escape::cell(&clip(s, MAX_CELL_CHARS))
}

/// One line inside a fenced block: bounded, and unable to close the fence.
pub(crate) fn fenced_line(s: &str) -> String {
    // Clip first: lines can be megabytes long.
    escape::fence_line(&clip(s, MAX_LINE)).into_owned()
}

pub(crate) fn time_text(t: &Timestamp) -> String {
    match (t.wall, t.monotonic_ns) {
        (Some(w), _) => w.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        (None, Some(m)) => format!("monotonic {:.3} s", m as f64 / 1e9),
        (None, None) => match t.boottime_ns {
            Some(b) => format!("boottime {:.3} s", b as f64 / 1e9),
            None => "time unknown".to_string(),
        },
    }
}

/// `cuMemAlloc_v2(48 B)`, `cuMemcpyHtoD_v2(64 MiB, chunk 3/10)`.
/// A custom call (id 0) has no name of its own: its label names it (`selftest ioctl FS_IOC_SETFLAGS(…)`).
pub fn call_text(call: &str, args: &Args, label: &str) -> String {
    let mut parts = Vec::new();
    if args.bytes > 0 {
        parts.push(bytes(args.bytes));
    }
    if args.chunk_count > 0 {
        parts.push(format!(
            "chunk {}/{}",
            args.chunk.saturating_add(1),
            args.chunk_count
        ));
    }
    if args.tensor_count > 0 {
        parts.push(format!(
            "tensors {}..{}",
            args.tensor_first,
            args.tensor_first.saturating_add(args.tensor_count)
        ));
    }
    format!("{}({})", call_name(call, label), parts.join(", "))
}

/// The one name of a breadcrumb call, in `ring dump`, report.md and the verdict alike: the driver function,
/// or for a program's own `custom` call its label.
pub fn call_name<'a>(call: &'a str, label: &'a str) -> &'a str {
    match (call, label.trim()) {
        ("" | "custom", label) if !label.is_empty() => label,
        ("", _) => "?",
        (call, _) => call,
    }
}

/// A call's label shown beside its name (`"chunk 3" `), unless the label already is the name.
pub fn label_beside(call: &str, label: &str) -> String {
    if label.is_empty() || call_name(call, label) == label.trim() {
        String::new()
    } else {
        format!("\"{label}\" ")
    }
}

/// `48 B`, `1.5 KiB`, `64 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else if value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `0.3 s`, `312 s`, `1 h 05 min`.
pub fn duration(ns: u64) -> String {
    secs(ns as f64 / 1e9)
}

pub(crate) fn secs(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return "? s".to_string();
    }
    if s < 10.0 {
        format!("{s:.1} s")
    } else if s < 3600.0 {
        format!("{s:.0} s")
    } else {
        let total = s as u64;
        format!("{} h {:02} min", total / 3600, (total % 3600) / 60)
    }
}

pub(crate) fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

pub(crate) fn opt(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "?".into())
}
