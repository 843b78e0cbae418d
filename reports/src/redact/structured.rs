//! Secrets inside structured text that an argument carries, judged by the text's shape rather than by a flag:
//! - PEM blocks: the body of every `-----BEGIN <label>-----` … `-----END <label>-----` block, whatever the label
//!   (a private key, a certificate, an encrypted key), also when the block has no END (a command line cut short)
//!   and when an unquoted `$(cat key.pem)` spread it over several arguments;
//! - JSON and YAML mappings whose key is secret-looking (`'{"token": "V"}'`, `{password: V}`, a YAML block line
//!   `  api_key: V`): the key stays, the value (a string, a number, a nested object or list) is hidden.
//!
//! Both are linear in the text and idempotent on their own: what they write (`[REDACTED]`, `"[REDACTED]"`) is
//! left as it is when judged again.

use std::borrow::Cow;

use super::marker::REDACTED;
use super::names::is_secret_name;

const BEGIN: &str = "-----BEGIN";
const END: &str = "-----END";
const DASHES: &str = "-----";
/// Longest PEM label (`ENCRYPTED PRIVATE KEY`, `OPENSSH PRIVATE KEY`, … are far shorter).
const MAX_LABEL: usize = 80;
/// Longest key of a mapping looked at (a key is found by looking back from its colon: this bounds the look).
const MAX_KEY: usize = 64;

/// The body of every PEM block in `text` hidden. Arguments may be joined with NUL: a body spread over several
/// arguments is hidden argument by argument, so the number of arguments stays.
pub(super) fn redact_pem(text: &str) -> Cow<'_, str> {
    if !text.contains(BEGIN) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(BEGIN) {
        let after = &rest[at + BEGIN.len()..];
        let label = after.find(DASHES).filter(|&len| {
            len <= MAX_LABEL
                && after[..len]
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b' ' || b == 0)
        });
        let Some(label_len) = label else {
            // Not a PEM header, or one cut inside its label: no body follows.
            out.push_str(&rest[..at + BEGIN.len()]);
            rest = after;
            continue;
        };
        let body_start = at + BEGIN.len() + label_len + DASHES.len();
        out.push_str(&rest[..body_start]);
        let body_and_rest = &rest[body_start..];
        let body_end = body_and_rest.find(END).unwrap_or(body_and_rest.len());
        mask_body(&body_and_rest[..body_end], &mut out);
        rest = &body_and_rest[body_end..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// A PEM body: in each argument's part of it, everything between the leading and trailing whitespace becomes
/// one [`REDACTED`].
fn mask_body(body: &str, out: &mut String) {
    for (i, part) in body.split('\0').enumerate() {
        if i > 0 {
            out.push('\0');
        }
        let trimmed = part.trim();
        if trimmed.is_empty() {
            out.push_str(part);
            continue;
        }
        let lead = part.len() - part.trim_start().len();
        out.push_str(&part[..lead]);
        out.push_str(REDACTED);
        out.push_str(&part[lead + trimmed.len()..]);
    }
}

/// The value of every secret-looking key of a JSON or YAML mapping in `text` hidden, the key kept.
///
/// A key is a quoted string before a colon (JSON, or YAML with quoted keys), or a bare name before `: ` that
/// starts a flow-mapping entry (after `{` or `,`) or a line of a block mapping (after a newline and indentation,
/// or `- `). A bare `Name: value` opening the text is a header, left to the header rule (which keeps the
/// `Bearer` scheme). The value runs to its closing quote or bracket (to the end of the text if there is none),
/// or, bare, to the next `,`, `}`, `]` or line end.
pub(super) fn redact_mappings(text: &str) -> Cow<'_, str> {
    if !text.contains(':') {
        return Cow::Borrowed(text);
    }
    let mut out = String::new();
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = text[from..].find(':') {
        let colon = from + found;
        from = colon + 1;
        let Some(key) = key_before(text, colon) else {
            continue;
        };
        if !is_secret_name(key) {
            continue;
        }
        let value_start = colon + 1 + leading_blanks(&text[colon + 1..]);
        let Some((len, masked)) = masked_value(&text[value_start..]) else {
            continue;
        };
        if out.is_empty() {
            out.reserve(text.len());
        }
        out.push_str(&text[copied..value_start]);
        out.push_str(masked);
        copied = value_start + len;
        from = copied;
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

fn leading_blanks(s: &str) -> usize {
    s.len() - s.trim_start_matches([' ', '\t']).len()
}

/// The key whose colon is at `text[colon]`, if the text there looks like a mapping entry.
fn key_before(text: &str, colon: usize) -> Option<&str> {
    let before = text[..colon].trim_end_matches([' ', '\t']);
    let last = *before.as_bytes().last()?;
    if last == b'"' || last == b'\'' {
        // A quoted key: the opening quote within MAX_KEY bytes back.
        let inner = &before[..before.len() - 1];
        let window = inner.len().saturating_sub(MAX_KEY + 1);
        let open = window
            + inner.as_bytes()[window..]
                .iter()
                .rposition(|&b| b == last)?;
        let key = &inner[open + 1..];
        let prefix = inner[..open].trim_end_matches([' ', '\t']);
        let opens_entry = match prefix.as_bytes().last() {
            None => true,
            Some(b) => matches!(b, b'{' | b',' | b'[' | b'\n' | b'\r' | b'\\' | b'(' | b'\0'),
        };
        return (opens_entry && !key.is_empty() && !key.contains(['\n', '"', '\''])).then_some(key);
    }
    // A bare key: the run of name characters before the colon, then what opens the entry.
    let is_name = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.');
    let run = before.bytes().rev().take_while(|&b| is_name(b)).count();
    if run == 0 || run > MAX_KEY {
        return None;
    }
    let key = &before[before.len() - run..];
    let prefix = before[..before.len() - run].trim_end_matches([' ', '\t']);
    let prefix = match prefix.strip_suffix('-') {
        // `- key: v`, a YAML list item, when the dash stands alone.
        Some(item) if before[..before.len() - run].ends_with(' ') => {
            item.trim_end_matches([' ', '\t'])
        }
        _ => prefix,
    };
    let opens_entry = matches!(prefix.as_bytes().last(), Some(b'{' | b',' | b'\n' | b'\r'));
    opens_entry.then_some(key)
}

/// (length, replacement) of the value at the start of `value`; None when there is no value on this line (a
/// nested YAML block follows) or it is already hidden.
fn masked_value(value: &str) -> Option<(usize, &'static str)> {
    let bytes = value.as_bytes();
    let first = *bytes.first()?;
    let (len, masked) = match first {
        b'"' | b'\'' => {
            let len = quoted_len(bytes, first);
            let closed = len >= 2 && bytes[len - 1] == first;
            (
                len,
                if !closed {
                    "\"[REDACTED]"
                } else if first == b'"' {
                    "\"[REDACTED]\""
                } else {
                    "'[REDACTED]'"
                },
            )
        }
        b'{' | b'[' => (bracketed_len(bytes), REDACTED),
        b'\n' | b'\r' | b'\0' | b',' | b'}' | b']' => return None,
        _ => {
            let end = value
                .find([',', '}', ']', '\n', '\r', '\0'])
                .unwrap_or(value.len());
            (value[..end].trim_end().len(), REDACTED)
        }
    };
    let current = &value[..len];
    (len > 0 && current != masked).then_some((len, masked))
}

/// Length of the quoted string at the start of `b` (quotes included); to the end when it is not closed.
fn quoted_len(b: &[u8], quote: u8) -> usize {
    let mut i = 1;
    while i < b.len() {
        match b[i] {
            b'\\' if quote == b'"' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// Length of the object or list at the start of `b` (strings inside skipped); to the end when it is not closed.
fn bracketed_len(b: &[u8]) -> usize {
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            q @ (b'"' | b'\'') => {
                i += quoted_len(&b[i..], q);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    b.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_bodies_are_hidden_whatever_the_label_and_even_without_end() {
        let key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\nbase64line2==\n-----END RSA PRIVATE KEY-----";
        assert_eq!(
            redact_pem(key),
            "-----BEGIN RSA PRIVATE KEY-----\n[REDACTED]\n-----END RSA PRIVATE KEY-----"
        );
        assert_eq!(
            redact_pem("x -----BEGIN OPENSSH PRIVATE KEY-----b3BlbnNzaC1rZXk"),
            "x -----BEGIN OPENSSH PRIVATE KEY-----[REDACTED]"
        );
        // Spread over arguments (joined with NUL): each argument of the body hidden, none added or removed.
        let split =
            "-----BEGIN\0EC\0PRIVATE\0KEY-----\0MHcCAQEE\0IBAKCAQ\0-----END\0EC\0PRIVATE\0KEY-----";
        let hidden = redact_pem(split);
        assert_eq!(
            hidden,
            "-----BEGIN\0EC\0PRIVATE\0KEY-----\0[REDACTED]\0[REDACTED]\0-----END\0EC\0PRIVATE\0KEY-----"
        );
        assert_eq!(redact_pem(&hidden), hidden);
        // Not PEM: a lowercase "label", a header cut inside its label.
        assert_eq!(
            redact_pem("-----BEGIN here-----abc"),
            "-----BEGIN here-----abc"
        );
        assert_eq!(redact_pem("-----BEGIN RSA PRIV"), "-----BEGIN RSA PRIV");
    }

    #[test]
    fn secret_keys_of_json_and_yaml_mappings_lose_their_values() {
        let cases = [
            (
                r#"{"token": "abc123", "model": "llama"}"#,
                r#"{"token": "[REDACTED]", "model": "llama"}"#,
            ),
            (
                r#"{"auth":{"password":"p","user":"u"},"n":1}"#,
                r#"{"auth":[REDACTED],"n":1}"#,
            ),
            (
                r#"{"api_key":12345,"max_tokens":64}"#,
                r#"{"api_key":[REDACTED],"max_tokens":64}"#,
            ),
            (r#"{"secrets": ["a", "b"]}"#, r#"{"secrets": [REDACTED]}"#),
            (r#"{"token": "unterminated"#, r#"{"token": "[REDACTED]"#),
            ("{token: abc, user: bob}", "{token: [REDACTED], user: bob}"),
            (
                "auth:\n  password: hunter2 # yaml\n  user: bob",
                "auth:\n  password: [REDACTED]\n  user: bob",
            ),
            (
                "creds:\n  - apiKey: abc\n",
                "creds:\n  - apiKey: [REDACTED]\n",
            ),
            (
                r#"curl -d '{\"token\": \"abc\"}'"#,
                r#"curl -d '{\"token\": [REDACTED]}'"#,
            ),
        ];
        for (text, want) in cases {
            assert_eq!(redact_mappings(text), want, "{text}");
            assert_eq!(redact_mappings(want), want, "not idempotent: {want}");
        }
        // Left alone: headers opening the text (the header rule keeps the scheme), URLs, harmless keys.
        for text in [
            "Authorization: Bearer abc",
            "https://host:443/x",
            r#"{"model": "x", "max_tokens": 64}"#,
            "user:pass@host",
            "{\"token\":\n  {\"a\": 1}}",
        ] {
            let once = redact_mappings(text);
            assert_eq!(redact_mappings(&once), once, "{text}");
        }
        assert_eq!(
            redact_mappings("Authorization: Bearer abc"),
            "Authorization: Bearer abc"
        );
        assert_eq!(redact_mappings("https://host:443/x"), "https://host:443/x");
    }
}
