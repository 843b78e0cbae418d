//! Round 19: HTML element tags a web page or a bug tracker's export leaves at a line's start (`<pre>kswapd0 D`,
//! `<code>[ 1.2] …`): the page's markup around the paste, not the kernel's text. Only the elements that wrap
//! preformatted or inline text are taken off, so the kernel's own angle-bracket words (`<TASK>`, `<IRQ>`,
//! `<EOI>`) and a syslog priority (`<4>`) stay.

/// The elements a page wraps a log in (case-insensitive, open or close, with or without attributes).
const WRAPPERS: &[&str] = &[
    "pre",
    "code",
    "tt",
    "samp",
    "kbd",
    "p",
    "br",
    "div",
    "span",
    "blockquote",
    "li",
    "td",
];

/// The line without the wrapping tags it starts with; None when it starts with none.
pub(super) fn html_tags(line: &str) -> Option<&str> {
    let start = line.trim_start();
    let mut rest = start;
    // Bounded: each pass takes one tag off the front of the line.
    while let Some(after) = one_tag(rest) {
        rest = after;
    }
    (rest.len() != start.len()).then_some(rest)
}

/// The text after one wrapping tag at the start of `s`.
fn one_tag(s: &str) -> Option<&str> {
    let inner = s.strip_prefix('<')?;
    let end = inner.find('>')?;
    let tag = &inner[..end];
    let name = tag.strip_prefix('/').unwrap_or(tag);
    let name = name.split([' ', '\t', '/']).next().unwrap_or(name);
    WRAPPERS
        .iter()
        .any(|w| w.eq_ignore_ascii_case(name))
        .then(|| &inner[end + 1..])
}

#[cfg(test)]
mod tests {
    use super::html_tags;

    #[test]
    fn page_wrappers_come_off_and_kernel_markers_stay() {
        assert_eq!(
            html_tags("<pre>kswapd0         D 0000000000000001"),
            Some("kswapd0         D 0000000000000001")
        );
        assert_eq!(html_tags("</code><PRE class=\"log\">x"), Some("x"));
        assert_eq!(html_tags("<br/>[ 1.2] x"), Some("[ 1.2] x"));
        assert_eq!(html_tags(" <pre>kswapd0"), Some("kswapd0"));
        for kept in [
            "<TASK>",
            " </TASK>",
            "<IRQ>",
            "<4>[ 1.2] x",
            "<pre",
            "x <pre>",
        ] {
            assert_eq!(html_tags(kept), None, "{kept}");
        }
    }
}
