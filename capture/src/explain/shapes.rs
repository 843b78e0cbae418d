//! The shapes a paste takes on its way to us, undone before the lines are read: what a transport, a web page,
//! a log tool or an editor wraps around each line or does to its characters (issue 38, family 4).
//!
//! - [`decode`]: bytes to text; a byte that is not UTF-8 is a Windows-1252 (Latin-1) character, as the editor
//!   that wrote it meant (`0xA0` a no-break space), not a replacement mark.
//! - [`undo`]: one pass over the lines. A quoted-printable mail ([`quoted_printable_lines`]) has its soft line
//!   breaks joined and its `=XX` decoded; then each line loses, outermost first, what was wrapped around it
//!   ([`unwrap_line`]): a `journalctl -o json` object (its `MESSAGE`), HTML entities, invisible characters
//!   (byte order mark, zero-width spaces) and no-break spaces, line numbers (`cat -n`, a pastebin's `12 | `),
//!   a Markdown inline code span or `* ` list mark, `dmesg -x`'s facility and level columns, an RFC 5424
//!   syslog header, a container runtime's `TIME stdout F`. The log prefixes themselves (`[ 1.2]`, `host
//!   kernel:`, `> `) stay for [`super::formats::message`], which keeps them for the notation.
//!
//! Text that has none of these comes back borrowed; otherwise the copy is at most the input's size. Each line
//! is read a bounded number of times; a joined quoted-printable line stops growing at [`MAX_JOINED`].

use std::borrow::Cow;

use super::task::MAX_LINE;

/// The longest line soft breaks join: past it the rest starts a line of its own (it is no log line anyway).
const MAX_JOINED: usize = 2 * MAX_LINE;

/// Round 23: the shortest run of `=` read as a rule (a separator line), not as quoted-printable.
const RULE: &str = "===";

/// The input as text: UTF-8, and any byte that is not as its Latin-1 character.
pub(super) fn decode(input: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(input) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(input.len() + input.len() / 8);
    for chunk in input.utf8_chunks() {
        out.push_str(chunk.valid());
        out.extend(chunk.invalid().iter().map(|&b| windows_1252(b)));
    }
    Cow::Owned(out)
}

/// A byte as Windows-1252 reads it: Latin-1, but for the quotes, dashes and ellipsis an editor puts in
/// 0x80-0x9F.
fn windows_1252(b: u8) -> char {
    match b {
        0x85 => '\u{2026}',
        0x91 => '\u{2018}',
        0x92 => '\u{2019}',
        0x93 => '\u{201c}',
        0x94 => '\u{201d}',
        0x96 => '\u{2013}',
        0x97 => '\u{2014}',
        b => char::from(b),
    }
}

/// The paste with every line's wrapping undone ([`unwrap_line`]), and a quoted-printable mail decoded.
pub(super) fn undo(text: &str) -> Cow<'_, str> {
    // A paste without an `=` has no encoded line: nothing to mark.
    let encoded = if text.contains('=') {
        quoted_printable_lines(text)
    } else {
        Vec::new()
    };
    // Built only once a line changes: the lines before it are copied then.
    let mut out: Option<String> = None;
    let mut joined = String::new();
    // Where the lines soft breaks are joining began (the copy takes the text before it as it was).
    let mut held = 0;
    let mut start = 0;
    let encoded = encoded.into_iter().chain(std::iter::repeat(false));
    for (line, qp) in text.split_inclusive('\n').zip(encoded) {
        let body = line.trim_end_matches(['\n', '\r']);
        let at = start;
        start += line.len();
        if !qp && !joined.is_empty() {
            // Round 23: a soft break at the end of a mail's lines: what follows is not the mail's.
            let o = copied(&mut out, text, held);
            o.push_str(&unwrap_line(&quoted_printable(&joined)));
            o.push('\n');
            joined.clear();
        }
        if qp {
            // Round 15 (RFC 2045 6.7 rule 3): whitespace after a soft break is transport padding, deleted; a
            // soft break's rest carries the prefix a tool gave every line after the encoding (a quote mark, a
            // journal's, a line number): the rest is its message.
            let kept = body.trim_end_matches([' ', '\t']);
            // Round 23: a rule of `=` (lockdep's `=====`, a pasted separator) is no soft break: no encoder writes `==`.
            let soft = (!kept.ends_with(RULE))
                .then(|| kept.strip_suffix('='))
                .flatten();
            let part = soft.unwrap_or(body);
            if joined.is_empty() {
                held = at;
                joined.push_str(part);
            } else {
                let line = unwrap_line(part);
                let rest = super::formats::message(&line);
                joined.push_str(if rest.len() == line.len() {
                    rest
                } else {
                    rest.trim_start()
                });
            }
            if soft.is_some() && joined.len() < MAX_JOINED {
                continue;
            }
            let decoded = quoted_printable(&joined);
            let o = copied(&mut out, text, held);
            o.push_str(&unwrap_line(&decoded));
            o.push('\n');
            joined.clear();
            continue;
        }
        let unwrapped = unwrap_line(body);
        // A line unwrapped in place is borrowed too, but shorter.
        let same = matches!(&unwrapped, Cow::Borrowed(b) if b.len() == body.len());
        if out.is_some() || !same {
            let o = copied(&mut out, text, at);
            o.push_str(&unwrapped);
            o.push('\n');
        }
    }
    if !joined.is_empty() {
        let o = copied(&mut out, text, held);
        o.push_str(&unwrap_line(&quoted_printable(&joined)));
    }
    out.map_or(Cow::Borrowed(text), Cow::Owned)
}

/// The copy being built, started (with the text before `at`, left as it was) if no line changed before.
fn copied<'a>(out: &'a mut Option<String>, text: &str, at: usize) -> &'a mut String {
    out.get_or_insert_with(|| {
        let mut o = String::with_capacity(text.len());
        o.push_str(&text[..at]);
        o
    })
}

/// Round 23: which lines are a quoted-printable mail's. A line with an `=` no encoder writes (a log's
/// `key=value`, `==`) is not; the runs of lines between such lines are read each on its own, decoded when
/// one of their lines shows the encoding. Pastes put one after another keep their own reading: a log's
/// `ppid=2` next to a mail no longer stops the mail's decoding, nor does the mail make the log an encoded one.
fn quoted_printable_lines(text: &str) -> Vec<bool> {
    let mut lines = Vec::new();
    let (mut run, mut marked) = (0, false);
    for line in text.split_inclusive('\n') {
        if let Some(shows) = line_encoding(line.as_bytes()) {
            marked |= shows;
            lines.push(true);
        } else {
            lines[run..].fill(marked);
            lines.push(false);
            (run, marked) = (lines.len(), false);
        }
    }
    lines[run..].fill(marked);
    lines
}

/// A quoted-printable body (RFC 2045): every `=` starts `=XX` (two upper-case hex digits) or a soft line break,
/// and there is at least one `=3D`, soft break, `=20`/`=09` at a line's end, or a UTF-8 character escaped byte by
/// byte (`=C2=A0`). A log with `key=value` (`ppid=2`, `flags=0x4000`) has an `=`
/// followed by something else.
#[cfg(test)]
fn is_quoted_printable(text: &str) -> bool {
    let mut marked = false;
    for line in text.split_inclusive('\n') {
        match line_encoding(line.as_bytes()) {
            Some(shows) => marked |= shows,
            None => return false,
        }
    }
    marked
}

/// One line (with its line end) read as quoted-printable: `None` when an `=` in it is no escape, else whether it
/// shows the encoding (a soft break, `=3D`, `=20`/`=09` at its end, a UTF-8 character escaped byte by byte).
fn line_encoding(b: &[u8]) -> Option<bool> {
    let mut marked = false;
    let hex = |c: Option<&u8>| c.is_some_and(|c| c.is_ascii_digit() || (b'A'..=b'F').contains(c));
    for (i, _) in b.iter().enumerate().filter(|(_, &c)| c == b'=') {
        // Round 23: a rule of three or more `=` (lockdep's `=====` under its lock list, a separator another
        // paste brought along) says nothing either way: an encoder writes `=3D`, never `==`, so it is text
        // around the mail, not an escape of it. Two `=` together still rule the text out (`a == b`).
        if (i > 0 && b[i - 1] == b'=') || b[i..].starts_with(RULE.as_bytes()) {
            continue;
        }
        match (b.get(i + 1), b.get(i + 2)) {
            (Some(b'\n'), _) | (Some(b'\r'), Some(b'\n')) | (None, _) => marked = true,
            // Round 15: a soft break with transport padding after it (RFC 2045 6.7 rule 3).
            (Some(b' ' | b'\t'), _) if soft_break_padded(&b[i + 1..]) => marked = true,
            (n, m) if hex(n) && hex(m) => {
                // `=3D`, or a space or tab kept at a line's end (`=20`, `=09`).
                let line_end = matches!(b.get(i + 3), None | Some(b'\n' | b'\r'));
                // A UTF-8 character escaped byte by byte (`=C2=A0`, a no-break space; `=E2=80=99`): a lead byte
                // then `=` and a continuation byte, which no `key=value` of a log spells.
                let utf8 = matches!(n, Some(b'C'..=b'F'))
                    && b.get(i + 3) == Some(&b'=')
                    && matches!(b.get(i + 4), Some(b'8' | b'9' | b'A' | b'B'))
                    && hex(b.get(i + 5));
                marked |= (n, m) == (Some(&b'3'), Some(&b'D'))
                    || utf8
                    || (line_end
                        && matches!((n, m), (Some(b'2'), Some(b'0')) | (Some(b'0'), Some(b'9'))));
            }
            _ => return None,
        }
    }
    Some(marked)
}

/// Round 15: spaces or tabs, then the line's end: what follows a soft break's `=` that transport padded.
fn soft_break_padded(after: &[u8]) -> bool {
    let line = after.split(|&c| c == b'\n').next().unwrap_or_default();
    line.iter().all(|c| matches!(c, b' ' | b'\t' | b'\r'))
}

/// `=XX` of a quoted-printable line as the byte it stands for (the bytes then read as UTF-8).
fn quoted_printable(line: &str) -> String {
    let b = line.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex) {
            (b'=', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    decode(&out).into_owned()
}

/// One line without what was wrapped around it, outermost first, each layer at most once.
fn unwrap_line(line: &str) -> Cow<'_, str> {
    let mut s = Cow::Borrowed(line);
    if let Some(message) = journal_json(&s) {
        s = Cow::Owned(message);
    }
    if let Some(decoded) = html_entities(&s) {
        s = Cow::Owned(decoded);
    }
    if let Some(visible) = invisible_characters(&s) {
        s = Cow::Owned(visible);
    }
    let mut rest: &str = &s;
    let mut closing = false;
    let layers: [fn(&str) -> Option<&str>; 6] = [
        line_number,
        inline_code,
        list_mark,
        dmesg_columns,
        rfc5424,
        container_stream,
    ];
    for (i, layer) in layers.into_iter().enumerate() {
        if let Some(inner) = layer(rest) {
            // An inline code span's closing backtick goes with its opening one.
            closing |= i == 1;
            rest = inner;
        }
    }
    let cut = s.len() - rest.len();
    match (cut, closing, s) {
        (0, false, s) => s,
        (cut, closing, Cow::Borrowed(b)) => Cow::Borrowed(without_closing(&b[cut..], closing)),
        (cut, closing, Cow::Owned(o)) => {
            Cow::Owned(without_closing(&o[cut..], closing).to_string())
        }
    }
}

fn without_closing(s: &str, closing: bool) -> &str {
    if closing {
        s.trim_end().strip_suffix('`').unwrap_or(s)
    } else {
        s
    }
}

/// `journalctl -o json`: one object a line; the line is its `MESSAGE` (a string, or an array of bytes for
/// one that is not UTF-8), after the kernel's time (`_SOURCE_MONOTONIC_TIMESTAMP`, µs) as dmesg prints it.
fn journal_json(line: &str) -> Option<String> {
    let t = line.trim();
    if !(t.starts_with('{') && t.ends_with('}') && t.contains("\"MESSAGE\"")) {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        #[serde(rename = "MESSAGE")]
        message: serde_json::Value,
        #[serde(rename = "_SOURCE_MONOTONIC_TIMESTAMP")]
        monotonic: Option<String>,
    }
    let entry: Entry = serde_json::from_str(t).ok()?;
    let message = match entry.message {
        serde_json::Value::String(s) => s,
        serde_json::Value::Array(bytes) => {
            let bytes: Vec<u8> = bytes
                .iter()
                .filter_map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
                .collect();
            decode(&bytes).into_owned()
        }
        _ => return None,
    };
    let micros = entry.monotonic.and_then(|m| m.parse::<u64>().ok());
    Some(match micros {
        Some(us) => format!("[{:5}.{:06}] {message}", us / 1_000_000, us % 1_000_000),
        None => message,
    })
}

/// The entities a web page's source or a scrape leaves (`[&lt;ffffffff81c3a1b2&gt;]`, `&nbsp;`), decoded once
/// (`&amp;lt;` is the text `&lt;`). None when the line has none.
fn html_entities(line: &str) -> Option<String> {
    if !line.contains('&') {
        return None;
    }
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    let mut any = false;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let entity = rest[1..]
            .find(';')
            .filter(|&end| end <= 8)
            .and_then(|end| Some((entity(&rest[1..=end])?, end + 2)));
        match entity {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
                any = true;
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    any.then_some(out)
}

/// The character an entity's name (`lt`, `#39`, `#x27`) stands for.
fn entity(name: &str) -> Option<char> {
    Some(match name {
        "lt" => '<',
        "gt" => '>',
        "amp" => '&',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => ' ',
        _ => {
            let n = name.strip_prefix('#')?;
            let code = match n.strip_prefix(['x', 'X']) {
                Some(h) => u32::from_str_radix(h, 16).ok()?,
                None => n.parse().ok()?,
            };
            char::from_u32(code)?
        }
    })
}

/// Characters that do not show, and the no-break space, as a page or editor puts them: a byte order mark,
/// zero-width spaces and joiners out; U+00A0 and U+202F as spaces; smart quotes as the quotes a log prints.
/// None when the line has none.
fn invisible_characters(line: &str) -> Option<String> {
    if line.is_ascii() {
        return None;
    }
    let odd = |c: char| {
        matches!(
            c,
            '\u{feff}'
                | '\u{200b}'
                | '\u{200c}'
                | '\u{200d}'
                | '\u{2060}'
                | '\u{a0}'
                | '\u{202f}'
                | '\u{2018}'
                | '\u{2019}'
                | '\u{201c}'
                | '\u{201d}'
        )
    };
    if !line.chars().any(odd) {
        return None;
    }
    Some(
        line.chars()
            .filter_map(|c| match c {
                '\u{feff}' | '\u{200b}' | '\u{200c}' | '\u{200d}' | '\u{2060}' => None,
                '\u{a0}' | '\u{202f}' => Some(' '),
                '\u{2018}' | '\u{2019}' => Some('\''),
                '\u{201c}' | '\u{201d}' => Some('"'),
                c => Some(c),
            })
            .collect(),
    )
}

/// A line number before the line: `cat -n`'s (`    12\t`), a pastebin's or viewer's (`12 | `, `12| `, `12:\t`).
fn line_number(line: &str) -> Option<&str> {
    let t = line.trim_start_matches(' ');
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 7 {
        return None;
    }
    let rest = &t[digits..];
    rest.strip_prefix('\t')
        .or_else(|| rest.strip_prefix(":\t"))
        .or_else(|| {
            let bar = rest.strip_prefix(" |").or_else(|| rest.strip_prefix('|'))?;
            Some(bar.strip_prefix(' ').unwrap_or(bar))
        })
}

/// A Markdown inline code span around the line (`` `[ 1.2] schedule+0x29/0xd0` ``); not a fence.
fn inline_code(line: &str) -> Option<&str> {
    let t = line.trim();
    let inner = t.strip_prefix('`')?;
    (!inner.starts_with('`') && inner.len() > 1 && inner.ends_with('`') && !inner.ends_with("``"))
        .then(|| line.trim_start().strip_prefix('`').unwrap_or(line))
}

/// The line without a mail's quote marks and a list's or diff's mark: where a log prefix would start.
pub(super) fn unquoted(line: &str) -> &str {
    let t = line.trim_start().trim_start_matches(['>', ' ', '\t']);
    t.strip_prefix("- ")
        .or_else(|| t.strip_prefix("* "))
        .or_else(|| t.strip_prefix("+ "))
        .unwrap_or(t)
        .trim_start()
}

/// A Markdown list item's `* ` (a `- ` reads as a diff's mark in [`super::formats::message`]).
fn list_mark(line: &str) -> Option<&str> {
    let rest = line.trim_start().strip_prefix("* ")?;
    (!rest.starts_with('*')).then_some(rest)
}

/// `dmesg -x`: `kern  :err   : ` — a facility, a level, each padded and closed by `:`.
fn dmesg_columns(line: &str) -> Option<&str> {
    const FACILITIES: &[&str] = &[
        "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron",
        "authpriv", "ftp", "local0", "local1", "local2", "local3", "local4", "local5", "local6",
        "local7",
    ];
    const LEVELS: &[&str] = &[
        "emerg", "alert", "crit", "err", "warn", "notice", "info", "debug",
    ];
    let (facility, rest) = line.trim_start().split_once(':')?;
    let (level, rest) = rest.split_once(':')?;
    (FACILITIES.contains(&facility.trim_end()) && LEVELS.contains(&level.trim()))
        .then(|| rest.strip_prefix(' ').unwrap_or(rest))
}

/// RFC 5424 syslog: `<PRI>1 TIMESTAMP HOST APP PROCID MSGID SD MSG`, the structured data `-` or `[…]`s.
fn rfc5424(line: &str) -> Option<&str> {
    let t = line.trim_start().strip_prefix('<')?;
    let (pri, rest) = t.split_once(">1 ")?;
    if pri.is_empty() || pri.len() > 3 || !pri.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut rest = rest;
    // TIMESTAMP HOST APP-NAME PROCID MSGID: five fields of no spaces.
    for _ in 0..5 {
        rest = rest.split_once(' ')?.1;
    }
    if let Some(after) = rest.strip_prefix('-') {
        return Some(after.strip_prefix(' ').unwrap_or(after));
    }
    // Structured data: `[id k="v" …]` elements, a `]` inside a value escaped as `\]`.
    let mut depth = 0;
    let mut escaped = false;
    for (i, c) in rest.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '[' => depth += 1,
            ']' => depth -= 1,
            ' ' if depth == 0 => return Some(&rest[i + 1..]),
            _ if depth == 0 => return None,
            _ => {}
        }
    }
    Some("")
}

/// A container runtime's log line (CRI, `kubectl logs`, containerd): `TIME stdout F ` (or `stderr`, `P`
/// for a partial line).
fn container_stream(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let (time, rest) = t.split_once(' ')?;
    let iso = time.len() >= 20 && time.as_bytes()[4] == b'-' && time.contains('T');
    let rest = rest
        .strip_prefix("stdout ")
        .or_else(|| rest.strip_prefix("stderr "))?;
    let rest = rest
        .strip_prefix("F ")
        .or_else(|| rest.strip_prefix("P "))?;
    iso.then_some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_wrapping_comes_off() {
        let cases = [
            (
                "    12\t[ 1.2] schedule+0x29/0xd0",
                "[ 1.2] schedule+0x29/0xd0",
            ),
            ("12 | [ 1.2] x", "[ 1.2] x"),
            ("`[ 1.2] schedule+0x29/0xd0`", "[ 1.2] schedule+0x29/0xd0"),
            ("* [ 1.2] x", "[ 1.2] x"),
            ("kern  :err   : [ 1.2] x", "[ 1.2] x"),
            ("<4>1 2024-01-01T00:00:00Z host kernel - - - x y", "x y"),
            (
                "<4>1 2024-01-01T00:00:00Z host kernel - - [a b=\"\\]\"] x",
                "x",
            ),
            ("2024-01-01T00:00:00.1Z stdout F [ 1.2] x", "[ 1.2] x"),
            (
                "[&lt;ffffffff81c3a1b2&gt;] a&amp;b &#39;c&quot; &bogus; &",
                "[<ffffffff81c3a1b2>] a&b 'c\" &bogus; &",
            ),
            ("\u{feff}\u{a0}a\u{200b}_b", " a_b"),
            (
                "{\"MESSAGE\":\"x \\\"y\\\"\",\"_SOURCE_MONOTONIC_TIMESTAMP\":\"5000001\"}",
                "[    5.000001] x \"y\"",
            ),
        ];
        for (line, want) in cases {
            assert_eq!(unwrap_line(line), want, "{line}");
        }
        assert_eq!(unwrap_line("[ 1.2] x"), "[ 1.2] x");
        assert!(matches!(unwrap_line("[ 1.2] x"), Cow::Borrowed(_)));
    }

    /// Round 15: a soft break padded by transport (RFC 2045 6.7 rule 3), and a soft break's rest carrying the
    /// prefix a tool gave every line after the encoding, join as the archive's decoder joins them.
    #[test]
    fn soft_breaks_join_through_padding_and_line_prefixes() {
        let padded = "> #2 [ffff] rpc_wait_bit_killable at ffffffffc05265ce [sun= \nrpc]\n";
        assert_eq!(
            undo(padded),
            "> #2 [ffff] rpc_wait_bit_killable at ffffffffc05265ce [sunrpc]\n"
        );
        let quoted = "> > #11 [ffff] nfs_create_rpc_client at ffffffffc0972319 [nfs=\n> ]\n";
        assert_eq!(
            undo(quoted),
            "> > #11 [ffff] nfs_create_rpc_client at ffffffffc0972319 [nfs]\n"
        );
        // Not a soft break: an `=` with text after it on the line (a log's key=value).
        assert!(!is_quoted_printable("ppid= 2 flags\n"));
    }

    /// Round 23: a mail's quoted-printable lines pasted between a log's `key=value` lines, with a lockdep rule of
    /// `=` among them, are still decoded; the log's lines stay as they were.
    #[test]
    fn quoted_printable_is_read_per_run_of_lines() {
        let text = "ppid=2 flags=0x4000\n=====\ncommit_tail+0x90/0=\nx850\nppid=3\n";
        assert_eq!(
            undo(text),
            "ppid=2 flags=0x4000\n=====\ncommit_tail+0x90/0x850\nppid=3\n"
        );
        assert_eq!(
            quoted_printable_lines(text),
            [false, true, true, true, false]
        );
        assert!(is_quoted_printable("a=3Db\n=====\n"));
        assert!(!is_quoted_printable("a == b\nc=\n"));
        // A rule is no soft break, and says nothing alone.
        assert!(!is_quoted_printable("=====\n"));
        assert_eq!(undo("x=3D\n=====\ny\n"), "x=\n=====\ny\n");
    }

    #[test]
    fn quoted_printable_only_when_every_equals_sign_is_an_escape() {
        assert!(is_quoted_printable("a=3Db\nc=\nd\n"));
        assert!(is_quoted_printable("a=C2=A0b\n"));
        assert!(!is_quoted_printable("flags=C0 ppid=2\n"));
        assert!(!is_quoted_printable("ppid=2 flags=0x4000\nc=\n"));
        assert!(!is_quoted_printable("plain\n"));
        assert_eq!(undo("ab=\ncd=3D=20\n"), "abcd= \n");
        assert_eq!(decode(b"a\xa0b"), "a\u{a0}b");
    }
}
