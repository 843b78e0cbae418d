//! The one escaping path for text that others choose: comms, cgroup paths, hostnames, file and ring names,
//! kernel log lines, probe output. Whoever runs a process picks its comm; a container picks its paths. Every
//! view that shows such text goes through one of these functions, each built on [`controls`]:
//!
//! | where the text goes | function | what it cannot do there |
//! |---|---|---|
//! | a terminal, a log line (journal, JSON) | [`controls`] | move the cursor, retitle the window, forge a line, reorder text (bidi) |
//! | the same, from bytes that may not be UTF-8 | [`lossy`] | the above; invalid bytes show as `\xNN` |
//! | Markdown prose (`- note: …`, a summary) | [`inline`] | the above, end the line or paragraph, open raw HTML (`<img onerror=…>`), open a code span |
//! | a Markdown table cell | [`cell`] | the above, split the cell (`\|`) |
//! | inside a `` `code span` `` | [`code_span`] | the above, close the span (a backtick becomes `'`) |
//! | a code span in a table cell | [`code_cell`] | the above, split the cell |
//! | a line of a fenced block | [`fence_line`] | the above, close the fence (```` ``` ```` becomes `'''`) |
//! | prose that holds code spans of its own (a verdict) | [`markdown_text`] | open raw HTML outside its spans |
//!
//! Used by `capture --format markdown|text` ([`crate::render`]), report.md (`reports::render`) and the agent's
//! log (`agent/src/daemon/log.rs`). The written-out form is one and the same everywhere, so a comm reads alike in
//! a report, on a terminal and in the journal: `\n`, `\r`, `\t`, `\e` (ESC), `\xNN` for other C0 controls and DEL,
//! `\u{NNNN}` for C1 controls and invisible format characters (bidi overrides, zero-width characters, the line and
//! paragraph separators). Backslashes stay as they are, so regexes and paths read naturally; the cost is that a
//! name holding the four characters `\x1b` and one holding ESC look alike, which hides nothing.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Whether `c` is written out by [`controls`]: a control character (C0, DEL, C1) or an invisible formatting
/// character that can reorder or hide text (bidi controls, zero-width characters, separators, the BOM).
pub fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00ad}' | '\u{061c}' | '\u{180e}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}')
}

/// `text` with every character [`needs_escape`] names written out visibly (see the module map for the form).
/// Borrowed when there is nothing to escape (the common case, checked byte-wise first).
pub fn controls(text: &str) -> Cow<'_, str> {
    if text.bytes().all(|b| (0x20..0x7f).contains(&b)) || !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x1b' => out.push_str("\\e"),
            c if (c as u32) < 0x20 || c == '\x7f' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Bytes that may not be UTF-8 (a directory entry name, raw file content): each byte of an invalid sequence
/// as `\xNN`, the rest through [`controls`]. Unlike a lossy UTF-8 decode, two different names never print alike
/// because a byte became U+FFFD.
pub fn lossy(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return controls(text);
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        out.push_str(&controls(chunk.valid()));
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    Cow::Owned(out)
}

/// One line: newlines become spaces (a line break would end a table row or a list item), then [`controls`].
pub fn one_line(text: &str) -> Cow<'_, str> {
    if text.contains(['\n', '\r']) {
        Cow::Owned(controls(&text.replace(['\n', '\r'], " ")).into_owned())
    } else {
        controls(text)
    }
}

/// `&`, `<` and `>` as HTML entities: Markdown renders raw HTML outside code, so `<img src=x onerror=…>` in a
/// comm would be markup, not text.
pub fn html(text: &str) -> Cow<'_, str> {
    if !text.contains(['&', '<', '>']) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Markdown prose on one line: [`one_line`], [`html`], and backticks escaped (`` \` ``): a stray backtick would
/// pair with the next code span's and turn that span's text, `<script>` say, into live prose.
pub fn inline(text: &str) -> String {
    html(&one_line(text)).replace('`', "\\`")
}

/// A Markdown table cell (or an HTML `<summary>`): [`inline`] with pipes escaped, so the row keeps its columns.
pub fn cell(text: &str) -> String {
    inline(text).replace('|', "\\|")
}

/// Text for inside single backticks: no backtick (it becomes `'`, so the span cannot close early), one line,
/// [`controls`]. HTML needs nothing here: a code span shows `<` as `<`.
pub fn code_span(text: &str) -> String {
    one_line(&text.replace('`', "'")).into_owned()
}

/// `` `text` `` for a table cell: [`code_span`] with pipes escaped (GFM splits cells at a pipe even inside code).
pub fn code_cell(text: &str) -> String {
    format!("`{}`", code_span(text).replace('|', "\\|"))
}

/// One line inside a fenced code block: [`one_line`], and unable to close the fence (a run of three backticks
/// becomes `'''`). Cheap for the common clean line: only byte searches when there is nothing to do.
pub fn fence_line(text: &str) -> Cow<'_, str> {
    let line = one_line(text);
    if line.as_bytes().contains(&b'`') && line.contains("```") {
        Cow::Owned(line.replace('`', "'"))
    } else {
        line
    }
}

/// Prose that holds Markdown code spans of its own (a verdict: ``thread 7 `python3` in ioctl `X` on /dev/…``), on
/// one line: [`html`] outside the code spans, spans left as they are (inside one, `&lt;` would show literally).
/// Spans are found as CommonMark finds them (a backtick run closed by the next run of the same length), so text
/// the reader sees as prose is always escaped, whatever backticks a stored verdict holds.
pub fn markdown_text(text: &str) -> String {
    let text = one_line(text);
    let bytes = text.as_bytes();
    let run_at = |i: usize| bytes[i..].iter().take_while(|&&b| b == b'`').count();
    let mut out = String::with_capacity(text.len() + 16);
    let (mut prose_from, mut i) = (0, 0);
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let open = run_at(i);
        // The closing run: the next backtick run of exactly `open` backticks.
        let mut j = i + open;
        let close = loop {
            match bytes[j..].iter().position(|&b| b == b'`') {
                None => break None,
                Some(k) => {
                    let run = run_at(j + k);
                    if run == open {
                        break Some(j + k);
                    }
                    j += k + run;
                }
            }
        };
        match close {
            Some(close) => {
                out.push_str(&html(&text[prose_from..i]));
                out.push_str(&text[i..close + open]);
                i = close + open;
                prose_from = i;
            }
            // No closing run: these backticks are literal text.
            None => i += open,
        }
    }
    out.push_str(&html(&text[prose_from..]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Comms a hostile process can choose (the kernel keeps 15 bytes, a fake or recorded tree any number).
    const HOSTILE: &[&str] = &[
        "<img src=x onerror=alert(1)>",
        "py\x1b[31mthon\x1b]0;pwned\x07",
        "a\nb\r\nc",
        "a|b|c",
        "a`b```c",
        "nul\0byte",
        "evil\u{202e}gnp.exe\u{200b}\u{9b}2J",
        "<!-- & -->",
    ];

    fn no_raw_controls(s: &str) -> bool {
        !s.chars().any(needs_escape)
    }

    #[test]
    fn controls_are_written_out_visibly() {
        assert_eq!(
            controls("py\x1b[31m\n\r\t\0\x7f\u{85}\u{202e}"),
            "py\\e[31m\\n\\r\\t\\x00\\x7f\\u{0085}\\u{202e}"
        );
        assert!(matches!(controls("/a/b c\\d naïve 日本"), Cow::Borrowed(_)));
        for s in HOSTILE {
            assert!(no_raw_controls(&controls(s)), "{s:?}");
        }
    }

    #[test]
    fn invalid_utf8_bytes_are_shown_as_hex() {
        assert_eq!(lossy(b"ok\xff\xfe\x1bz\xc3\xa9"), "ok\\xff\\xfe\\ez\u{e9}");
        assert_eq!(lossy(b"plain"), "plain");
        // Two names that differ only in their invalid bytes never print alike.
        assert_ne!(lossy(b"a\xff"), lossy(b"a\xfe"));
    }

    #[test]
    fn markdown_contexts_cannot_be_broken_out_of() {
        for s in HOSTILE {
            let cell = cell(s);
            assert!(no_raw_controls(&cell) && !cell.contains('<'), "{cell:?}");
            assert_eq!(
                cell.matches('|').count(),
                cell.matches("\\|").count(),
                "{cell:?}"
            );
            let span = code_span(s);
            assert!(no_raw_controls(&span) && !span.contains('`'), "{span:?}");
            let code = code_cell(s);
            assert_eq!(code.matches('`').count(), 2, "{code:?}");
            assert_eq!(code.matches('|').count(), code.matches("\\|").count());
            let line = fence_line(s);
            assert!(no_raw_controls(&line) && !line.contains("```"), "{line:?}");
            let prose = inline(s);
            assert!(no_raw_controls(&prose) && !prose.contains('<'), "{prose:?}");
            assert_eq!(prose.matches('`').count(), prose.matches("\\`").count());
        }
        assert_eq!(cell("<b>|x"), "&lt;b&gt;\\|x");
        assert_eq!(code_span("a`b\nc"), "a'b c");
        assert_eq!(fence_line("a```b"), "a'''b");
    }

    #[test]
    fn markdown_text_escapes_html_outside_its_code_spans_only() {
        assert_eq!(
            markdown_text("thread 7 `<x>` on /dev/<img src=x> & more"),
            "thread 7 `<x>` on /dev/&lt;img src=x&gt; &amp; more"
        );
        // An unclosed or mismatched backtick run is literal text: what follows is prose, so it is escaped.
        assert_eq!(markdown_text("a ` <b>"), "a ` &lt;b&gt;");
        assert_eq!(markdown_text("``<b>` x"), "``&lt;b&gt;` x");
        assert_eq!(markdown_text("`` a`<b>`b ``"), "`` a`<b>`b ``");
        assert_eq!(markdown_text("x\n<y>"), "x &lt;y&gt;");
    }
}
