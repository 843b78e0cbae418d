//! The one escaping path for text that others choose: comms, cgroup paths, hostnames, file and ring names,
//! kernel log lines, probe output. Whoever runs a process picks its comm; a container picks its paths. Every
//! view that shows such text goes through one of these functions, each built on [`controls`]:
//!
//! | where the text goes | function | what it cannot do there |
//! |---|---|---|
//! | a terminal, a log line (journal, JSON) | [`controls`] | move the cursor, retitle the window, forge a line, reorder text (bidi) |
//! | the same, from bytes that may not be UTF-8 | [`lossy`] | the above; invalid bytes show as `\xNN` |
//! | **a name in Markdown** (comm, task, thread name, path, wchan, cgroup, pod, label): prose, headings, lists | [`code`] | anything: it is a code span fenced longer than any backtick run inside, so nothing in it is markup |
//! | the same in a table cell | [`code_cell`] | the above, split the cell (`\|`) |
//! | Markdown prose of our own that may quote such text (a note, a reason, a site) | [`inline`] | the above controls, end the line, open raw HTML, a link (`[x](y)`, `<…>`, `www.`/`://` autolinks), emphasis, a code span |
//! | a Markdown table cell of such prose | [`cell`] | the above, split the cell (`\|`) |
//! | a line of a fenced block | [`fence_line`] | the above, close the fence (```` ``` ```` becomes `'''`) |
//! | prose that holds code spans of its own (a verdict) | [`markdown_text`] | anything outside its spans: escaped as [`inline`] |
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

/// Characters that start Markdown markup anywhere in a line, escaped with a backslash in prose (CommonMark shows
/// `\[` as `[`): the backslash itself (else one before our escape would undo it), backticks (a stray one pairs
/// with the next code span's), `[`/`]` (links, images), `*`/`_` (emphasis; not `_` inside a word, which
/// CommonMark never reads as emphasis), `~` (GFM strikethrough).
const MARKUP: &[char] = &['\\', '`', '*', '_', '[', ']', '~'];

/// `text` with [`MARKUP`] escaped, and GFM's autolinks broken: the `:` of `://`, the `.` after `www`, and `@`
/// (an e-mail address) escaped, which splits the text the autolinker would match.
fn escape_markup(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let www_dot = |i: usize| i >= 3 && bytes[i - 3..i].eq_ignore_ascii_case(b"www");
    // `_` between two letters or digits (`x86_64`) opens and closes nothing (CommonMark's flanking rules).
    let intraword = |i: usize| {
        i > 0
            && bytes[i - 1].is_ascii_alphanumeric()
            && bytes.get(i + 1).is_some_and(u8::is_ascii_alphanumeric)
    };
    let escaped = |i: usize, c: char| {
        (MARKUP.contains(&c) && !(c == '_' && intraword(i)))
            || c == '@'
            || (c == ':' && bytes[i + 1..].starts_with(b"//"))
            || (c == '.' && www_dot(i))
    };
    if !text.char_indices().any(|(i, c)| escaped(i, c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for (i, c) in text.char_indices() {
        if escaped(i, c) {
            out.push('\\');
        }
        out.push(c);
    }
    Cow::Owned(out)
}

/// Markdown prose of our own on one line, which may quote text others chose (a note, a reason, a site): markup
/// escaped ([`MARKUP`], autolinks), then [`one_line`] and [`html`]. Nothing in it can link, format, open HTML or
/// a code span. For a name on its own use [`code`]: it shows the text exactly.
pub fn inline(text: &str) -> String {
    html(&one_line(&escape_markup(text))).into_owned()
}

/// A Markdown table cell (or an HTML `<summary>`): [`inline`] with pipes escaped, so the row keeps its columns.
/// Every backslash of the text is doubled by [`inline`], so an escaped pipe is never undone by one before it.
pub fn cell(text: &str) -> String {
    inline(text).replace('|', "\\|")
}

/// The one way a name others chose (a comm, task or thread name, a path, a wchan, a cgroup, a pod, a label) goes
/// into Markdown outside a fenced block — a heading, a list item, prose: a code span, inside which CommonMark and
/// GFM read no markup at all (no link, image, HTML, emphasis, autolink or entity). Its fence is one backtick longer
/// than the longest backtick run in the text, so a name holding backticks shows them and cannot close the span;
/// a space pads a text that starts or ends with a backtick or a space (CommonMark strips one from each side).
/// Control characters are written out by [`controls`] (a newline shows as `\n`): the span stays on its line.
/// In a table cell use [`code_cell`].
pub fn code(text: &str) -> String {
    let text = controls(text);
    if text.is_empty() {
        return "` `".to_string();
    }
    let longest = text
        .as_bytes()
        .split(|&b| b != b'`')
        .map(<[u8]>::len)
        .max()
        .unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let all_spaces = text.bytes().all(|b| b == b' ');
    let pad = text.starts_with('`')
        || text.ends_with('`')
        || (text.starts_with(' ') && text.ends_with(' ') && !all_spaces);
    let pad = if pad { " " } else { "" };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// [`code`] for a GFM table cell: pipes escaped (GFM splits a row at a pipe even inside a code span, and shows
/// `\|` there as `|`). GFM reads `\\` as an escaped backslash, so where the text has an odd run of backslashes
/// right before a pipe one more is added: the pipe stays escaped, and the cell shows one extra backslash.
/// An empty text is an empty cell.
pub fn code_cell(text: &str) -> String {
    if text.is_empty() {
        return String::new();
    }
    let span = code(text);
    if !span.contains('|') {
        return span;
    }
    let mut out = String::with_capacity(span.len() + 8);
    let mut run = 0usize;
    for c in span.chars() {
        if c == '|' {
            if run % 2 == 1 {
                out.push('\\');
            }
            out.push_str("\\|");
            run = 0;
            continue;
        }
        run = if c == '\\' { run + 1 } else { 0 };
        out.push(c);
    }
    out
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

/// The code spans of one line of Markdown, as byte ranges (backtick fences included), found as CommonMark finds
/// them: a backtick run closed by the next run of exactly its length; a run never closed is literal text.
pub fn code_spans(text: &str) -> Vec<std::ops::Range<usize>> {
    let bytes = text.as_bytes();
    let run_at = |i: usize| bytes[i..].iter().take_while(|&&b| b == b'`').count();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        // A backslash-escaped backtick outside a span is literal and opens nothing.
        if bytes[i] == b'\\' {
            i += 2;
            continue;
        }
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
                spans.push(i..close + open);
                i = close + open;
            }
            // No closing run: these backticks are literal text.
            None => i += open,
        }
    }
    spans
}

/// What a reader sees as prose on a Markdown line: the text outside its code spans (for checks of rendered output).
pub fn outside_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut from = 0;
    for span in code_spans(line) {
        out.push_str(&line[from..span.start]);
        from = span.end;
    }
    out.push_str(&line[from..]);
    out
}

/// Prose that holds Markdown code spans of its own (a verdict: ``thread 7 `python3` in ioctl `X` on /dev/…``), on
/// one line: the spans left as they are (inside one, an escape would show literally), the prose between them
/// escaped as [`inline`]. Spans are found as CommonMark finds them ([`code_spans`]), so text the reader sees as
/// prose is always escaped, whatever backticks a stored verdict holds.
pub fn markdown_text(text: &str) -> String {
    let text = one_line(text);
    let mut out = String::with_capacity(text.len() + 16);
    let mut prose_from = 0;
    for span in code_spans(&text) {
        out.push_str(&html(&escape_markup(&text[prose_from..span.start])));
        out.push_str(&text[span.clone()]);
        prose_from = span.end;
    }
    out.push_str(&html(&escape_markup(&text[prose_from..])));
    out
}

/// Names a tenant can choose to turn a Markdown view against its reader (issue 35): a link, a backtick, raw
/// HTML, a line break, table pipes. Every Markdown writer's tests render them with [`inert_markdown_problems`].
pub const HOSTILE_NAMES: &[&str] = &[
    "[click](http://evil.example/)",
    "a`b",
    "<img src=x onerror=alert(1)>",
    "line\nbreak",
    "|pipe|",
];

/// What is wrong in rendered Markdown `md` that shows `names` (each at least once, as a code span or in a fenced
/// block): a name's markup live in prose (outside code spans and fenced or indented code, escaped characters
/// dropped: a link `](`, an autolink `://`, raw `<img`), a line starting with the part of a name after its line
/// break, a table row with more cells than its header, and a name never shown exactly in one code span or code
/// line. Empty when every name is inert. A check of rendered output for the writers' tests.
pub fn inert_markdown_problems(md: &str, names: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut shown = vec![false; names.len()];
    let mut fenced = false;
    let mut header_cells: Option<usize> = None;
    let mut previous_blank = true;
    let mut indented = false;
    for line in md.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        indented = line.starts_with("    ") && (indented || previous_blank);
        previous_blank = line.trim().is_empty();
        if fenced || indented {
            for (i, name) in names.iter().enumerate() {
                shown[i] |= line.contains(&*fence_line(name));
            }
            continue;
        }
        for span in code_spans(line) {
            let span = &line[span];
            let fence = span.bytes().take_while(|&b| b == b'`').count();
            let inner = &span[fence..span.len() - fence];
            let content = match inner.strip_prefix(' ').and_then(|i| i.strip_suffix(' ')) {
                Some(stripped) if !inner.bytes().all(|b| b == b' ') => stripped,
                _ => inner,
            };
            // In a table GFM shows `\|` as `|`.
            let in_table = line.starts_with('|');
            let content = if in_table {
                content.replace("\\|", "|")
            } else {
                content.to_string()
            };
            for (i, name) in names.iter().enumerate() {
                shown[i] |= content.contains(&*controls(name));
            }
        }
        // The prose: outside code spans, escaped characters (`\X`) dropped.
        let outside = outside_code_spans(line);
        let mut prose = String::with_capacity(outside.len());
        let mut chars = outside.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                chars.next();
                continue;
            }
            prose.push(c);
        }
        for live in ["](", "://", "<img", "www."] {
            if prose.contains(live) {
                problems.push(format!("live markup {live:?} in {line:?}"));
            }
        }
        for name in names {
            if let Some((_, after)) = name.split_once('\n') {
                if !after.is_empty() && line.starts_with(after) {
                    problems.push(format!("a name's line break split the line: {line:?}"));
                }
            }
        }
        // Table rows: as many unescaped pipes as the header's.
        if line.starts_with('|') {
            let cells = {
                let mut n = 0;
                let bytes = line.as_bytes();
                for (i, &b) in bytes.iter().enumerate() {
                    let escaped =
                        bytes[..i].iter().rev().take_while(|&&c| c == b'\\').count() % 2 == 1;
                    n += usize::from(b == b'|' && !escaped);
                }
                n
            };
            match header_cells {
                None => header_cells = Some(cells),
                Some(header) if header != cells => problems.push(format!(
                    "a table row with {cells} pipes under a header with {header}: {line:?}"
                )),
                Some(_) => {}
            }
        } else {
            header_cells = None;
        }
    }
    for (name, shown) in names.iter().zip(shown) {
        if !shown {
            problems.push(format!(
                "{name:?} is never shown exactly in a code span or code line"
            ));
        }
    }
    problems
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

    /// Names a tenant chooses to turn a Markdown view against its reader (issue 35).
    const MARKDOWN_HOSTILE: &[&str] = &[
        "[click](http://evil.example/)",
        "a`b",
        "<img src=x onerror=alert(1)>",
        "line\nbreak",
        "|pipe|",
        "``` fence",
        "`",
        " ` ",
        "![img](x) *em* _em_ ~~s~~ www.evil.example a@b.example http://evil.example/",
        "back\\|slash\\\\|two",
    ];

    /// What CommonMark shows for a code span `span` made by [`code`] (outside a table).
    fn span_content(span: &str) -> String {
        let fence = span.bytes().take_while(|&b| b == b'`').count();
        assert!(span.len() >= 2 * fence, "{span:?}");
        assert_eq!(&span[span.len() - fence..], &span[..fence], "{span:?}");
        let inner = &span[fence..span.len() - fence];
        match inner.strip_prefix(' ').and_then(|i| i.strip_suffix(' ')) {
            Some(stripped) if !inner.bytes().all(|b| b == b' ') => stripped.to_string(),
            _ => inner.to_string(),
        }
    }

    fn odd_backslashes_before(text: &str, at: usize) -> bool {
        text[..at].bytes().rev().take_while(|&b| b == b'\\').count() % 2 == 1
    }

    #[test]
    fn a_code_span_shows_any_name_exactly_and_nothing_in_it_is_markup() {
        for s in HOSTILE.iter().chain(MARKDOWN_HOSTILE) {
            let span = code(s);
            assert!(no_raw_controls(&span) && !span.contains('\n'), "{span:?}");
            // The whole output is one code span, as CommonMark finds spans.
            assert_eq!(code_spans(&span), vec![0..span.len()], "{span:?}");
            assert_eq!(span_content(&span), controls(s), "{span:?}");
            // In a table: every pipe escaped (an odd run of backslashes before it), still one span.
            let cell = code_cell(s);
            for (i, _) in cell.match_indices('|') {
                assert!(odd_backslashes_before(&cell, i), "{cell:?}");
            }
            assert_eq!(code_spans(&cell), vec![0..cell.len()], "{cell:?}");
        }
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`"), "`` ` ``");
        assert_eq!(code("line\nbreak"), "`line\\nbreak`");
        assert_eq!(
            code("[click](http://evil.example/)"),
            "`[click](http://evil.example/)`"
        );
        assert_eq!(code(""), "` `");
        assert_eq!(code_cell("|pipe|"), "`\\|pipe\\|`");
        assert_eq!(code_cell("a\\|b"), "`a\\\\\\|b`");
    }

    #[test]
    fn markdown_contexts_cannot_be_broken_out_of() {
        for s in HOSTILE.iter().chain(MARKDOWN_HOSTILE) {
            let cell = cell(s);
            assert!(no_raw_controls(&cell) && !cell.contains('<'), "{cell:?}");
            for (i, _) in cell.match_indices('|') {
                assert!(odd_backslashes_before(&cell, i), "{cell:?}");
            }
            let line = fence_line(s);
            assert!(no_raw_controls(&line) && !line.contains("```"), "{line:?}");
            let prose = inline(s);
            assert!(no_raw_controls(&prose) && !prose.contains('<'), "{prose:?}");
            // Every markup character is escaped: an odd run of backslashes before it.
            for (i, c) in prose.char_indices() {
                let intraword = |j: usize| {
                    prose
                        .as_bytes()
                        .get(j)
                        .is_some_and(u8::is_ascii_alphanumeric)
                };
                if c == '_' && i > 0 && intraword(i - 1) && intraword(i + 1) {
                    continue;
                }
                if matches!(c, '`' | '[' | ']' | '*' | '_' | '~' | '@') {
                    assert!(odd_backslashes_before(&prose, i), "{c} in {prose:?}");
                }
            }
            assert!(code_spans(&prose).is_empty(), "{prose:?}");
            assert!(inert_markdown_problems(&prose, &[]).is_empty(), "{prose:?}");
        }
        assert_eq!(cell("<b>|x"), "&lt;b&gt;\\|x");
        assert_eq!(
            inline("[click](http://evil.example/)"),
            "\\[click\\](http\\://evil.example/)"
        );
        assert_eq!(fence_line("a```b"), "a'''b");
    }

    #[test]
    fn markdown_text_escapes_prose_outside_its_code_spans_only() {
        assert_eq!(
            markdown_text("thread 7 `<x>` on /dev/<img src=x> & more"),
            "thread 7 `<x>` on /dev/&lt;img src=x&gt; &amp; more"
        );
        // An unclosed or mismatched backtick run is literal text: what follows is prose, so it is escaped.
        assert_eq!(markdown_text("a ` <b>"), "a \\` &lt;b&gt;");
        assert_eq!(markdown_text("``<b>` x"), "\\`\\`&lt;b&gt;\\` x");
        assert_eq!(markdown_text("`` a`<b>`b ``"), "`` a`<b>`b ``");
        assert_eq!(markdown_text("x\n<y>"), "x &lt;y&gt;");
        assert_eq!(
            markdown_text("task `a`[click](http://e.example/)`b` x"),
            "task `a`\\[click\\](http\\://e.example/)`b` x"
        );
        assert_eq!(outside_code_spans("a `b` c ``d`e`` f"), "a  c  f");
    }
}
