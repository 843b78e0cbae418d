//! Prefixes and frame notations of the tools around a kernel log rather than the kernel's own (round 12b): a
//! board farm's harness labels and level/facility columns, a sampling profiler's numbered stack. Each function
//! takes one line and answers, like [`super::formats`].

/// `boot: logs: [   16.166474] …`: a test harness's labels (a board farm's boot log, round 12b) before the
/// kernel timestamp — up to three `word:` labels, kept unless a `[` timestamp follows them. Round 16: or a
/// `/proc/<pid>/stack` frame (`    stack: [<0>] __bch2_closure_sync+0x2b/0x70`, a sampling script that labels
/// each line of the file it copied).
pub(super) fn strip_harness_labels(s: &str) -> &str {
    let mut rest = s.trim_start();
    for _ in 0..3 {
        let Some((word, after)) = rest.split_once(char::is_whitespace) else {
            return s;
        };
        let label = word.strip_suffix(':').is_some_and(|w| {
            !w.is_empty()
                && w.bytes()
                    .all(|b| b.is_ascii_alphabetic() || b == b'-' || b == b'_')
        });
        if !label {
            return s;
        }
        rest = after.trim_start();
        let stamp = rest
            .strip_prefix('[')
            .is_some_and(|r| r.trim_start().starts_with(|c: char| c.is_ascii_digit()));
        if stamp || rest.starts_with("[<") {
            return rest;
        }
    }
    s
}

/// `[   16.166474] WARNING KERN  reset_control_assert+0x174/0x1a8`: the level and facility a log collector
/// wrote after the timestamp (the same board farm's log, round 12b) — a level word and `KERN`.
pub(super) fn strip_level_facility(s: &str) -> &str {
    const LEVELS: &[&str] = &[
        "emerg", "alert", "crit", "err", "error", "warn", "warning", "notice", "info", "debug",
    ];
    let t = s.trim_start();
    let Some((word, rest)) = t.split_once(' ') else {
        return s;
    };
    if !LEVELS.iter().any(|l| word.eq_ignore_ascii_case(l)) {
        return s;
    }
    match rest.strip_prefix("KERN") {
        Some(after) if after.is_empty() || after.starts_with(' ') => {
            after.strip_prefix(' ').unwrap_or(after)
        }
        _ => s,
    }
}

/// Round 18: `192.168.11.119: kern: warning: [2026-04-22T21:27:51.289597368Z]:  frame+0x1/0x2`:
/// `talosctl dmesg` (a Talos node's kernel log): the node's address, the syslog facility and level, each with
/// a colon, then the RFC 3339 time in brackets and a colon. Taken whole or not at all.
pub(super) fn strip_node_facility_level(s: &str) -> &str {
    const FACILITIES: &[&str] = &[
        "kern", "user", "daemon", "syslog", "auth", "authpriv", "local7",
    ];
    const LEVELS: &[&str] = &[
        "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug",
    ];
    let t = s.trim_start();
    let Some((node, rest)) = t.split_once(": ") else {
        return s;
    };
    let Some((facility, rest)) = rest.split_once(": ") else {
        return s;
    };
    let Some((level, rest)) = rest.split_once(": ") else {
        return s;
    };
    if node.is_empty()
        || node.contains(char::is_whitespace)
        || !FACILITIES.contains(&facility)
        || !LEVELS.contains(&level)
    {
        return s;
    }
    match rest.strip_prefix('[').and_then(|r| r.split_once("]:")) {
        Some((time, after)) if time.len() <= 40 && time.contains('T') => after,
        _ => s,
    }
}

/// A sampling profiler's numbered call stack (Tracy's, round 12b): `  2. kgmmuCheckPendingInvalidates_TU102
/// (<kernel>) nvidia` → the function and its image (`nvidia`; the core kernel's is `<kernel>`), innermost first
/// like crash's `bt`. Only frames marked `(<kernel>)`: a user-space frame names its library, and a numbered
/// list in prose has no such mark.
pub(super) fn numbered_kernel_frame(msg: &str) -> Option<(&str, &str)> {
    let t = msg.trim_start();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let rest = t.get(digits..)?.strip_prefix(". ")?;
    if digits == 0 {
        return None;
    }
    let (name, image) = rest.trim_start().split_once(char::is_whitespace)?;
    let image = image.trim_start().strip_prefix("(<kernel>)")?.trim();
    Some((name, image))
}

/// An editor's or viewer's line number copied with the line (`162 [  843.072392] INFO: task …`, round 20): a
/// number, one space, then a kernel log record's `[ secs]` or `[<addr>]`. Only before such a record is a
/// leading number with a single space a line number (`cat -n`'s tab and a pastebin's `|` are undone with the
/// other wrappings in `shapes`); outer prefixes (a quote, a journal's) come off first in `formats::message`.
pub(super) fn strip_gutter_number(s: &str) -> &str {
    let t = s.trim_start();
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 7 {
        return s;
    }
    let Some(record) = t[digits..].strip_prefix(' ') else {
        return s;
    };
    let opens_record = record.strip_prefix('[').is_some_and(|after| {
        after.starts_with([' ', '<']) || after.starts_with(|c: char| c.is_ascii_digit())
    });
    if opens_record {
        record
    } else {
        s
    }
}
