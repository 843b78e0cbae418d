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
    // Prefix checks only (this runs on every line, up to 16 MiB of them): the node is one word, so its
    // `: ` comes before any whitespace; the facility and level are words from the lists.
    let t = s.trim_start();
    let Some(space) = t.find(char::is_whitespace) else {
        return s;
    };
    // `fe80::1: kern: …`: the node may hold colons; its `: ` is the first whitespace.
    let (Some(node), Some(rest)) = (t[..space].strip_suffix(':'), t[space..].strip_prefix(' '))
    else {
        return s;
    };
    let word = |rest: &'_ str, words: &[&str]| -> Option<usize> {
        words
            .iter()
            .find(|w| rest.starts_with(**w) && rest[w.len()..].starts_with(": "))
            .map(|w| w.len() + 2)
    };
    if node.is_empty() {
        return s;
    }
    let Some(n) = word(rest, FACILITIES) else {
        return s;
    };
    let rest = &rest[n..];
    let Some(n) = word(rest, LEVELS) else {
        return s;
    };
    let rest = &rest[n..];
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

#[cfg(test)]
mod tests {
    use super::strip_node_facility_level as strip;

    /// `talosctl dmesg`'s prefix comes off whole (an IPv6 node's colons included) or not at all.
    #[test]
    fn a_node_facility_level_prefix_is_taken_whole_or_not_at_all() {
        let time = "[2026-04-22T21:27:51.289597368Z]:";
        assert_eq!(
            strip(&format!(
                "192.168.11.119: kern: warning: {time}  frame+0x1/0x2"
            )),
            "  frame+0x1/0x2"
        );
        assert_eq!(strip(&format!("fe80::1: kern: err: {time} x")), " x");
        for kept in [
            format!("node: kernel: warning: {time} x"),
            format!("node: kern: loud: {time} x"),
            "node: kern: warning: [no time]: x".to_string(),
            "Nov 19 01:03:26 host kernel:  clk_prepare_lock+0x4c/0xb0".to_string(),
            format!(": kern: warning: {time} x"),
        ] {
            assert_eq!(strip(&kept), kept);
        }
    }
}
