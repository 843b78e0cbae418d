//! Bare tokens by their well-known prefix (`ghp_`, `AKIA`, `hf_` …) and the JWT shape.

use super::marker::REDACTED;

/// A token recognised by its prefix: the characters its body may hold and how long the body is.
pub(super) struct TokenForm {
    prefix: &'static str,
    body: fn(u8) -> bool,
    min: usize,
    /// Exact length when set (AWS key ids are always 16 after the prefix).
    exact: bool,
    /// Require a digit in the body (`sk-` also starts harmless words such as `sk-learn-…`).
    digit: bool,
}

pub(super) fn alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

pub(super) fn alnum_underscore(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

pub(super) fn alnum_dash(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-'
}

pub(super) fn alnum_dash_underscore(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

pub(super) fn upper_digit(b: u8) -> bool {
    b.is_ascii_uppercase() || b.is_ascii_digit()
}

pub(super) fn alnum_dash_underscore_dot(b: u8) -> bool {
    alnum_dash_underscore(b) || b == b'.'
}

pub(super) const fn form(prefix: &'static str, body: fn(u8) -> bool, min: usize) -> TokenForm {
    TokenForm {
        prefix,
        body,
        min,
        exact: false,
        digit: false,
    }
}

pub(super) const fn aws(prefix: &'static str) -> TokenForm {
    TokenForm {
        prefix,
        body: upper_digit,
        min: 16,
        exact: true,
        digit: false,
    }
}

pub(super) const TOKEN_FORMS: &[TokenForm] = &[
    form("github_pat_", alnum_underscore, 20),
    form("ghp_", alnum, 20),
    form("gho_", alnum, 20),
    form("ghu_", alnum, 20),
    form("ghs_", alnum, 20),
    form("ghr_", alnum, 20),
    form("glpat-", alnum_dash_underscore, 20),
    form("glptt-", alnum_dash_underscore, 20),
    form("gldt-", alnum_dash_underscore, 20),
    form("glrt-", alnum_dash_underscore, 20),
    form("xoxb-", alnum_dash, 10),
    form("xoxp-", alnum_dash, 10),
    form("xoxa-", alnum_dash, 10),
    form("xoxr-", alnum_dash, 10),
    form("xoxs-", alnum_dash, 10),
    form("xoxe-", alnum_dash, 10),
    form("xapp-", alnum_dash, 10),
    aws("AKIA"),
    aws("ASIA"),
    aws("ABIA"),
    aws("ACCA"),
    aws("AGPA"),
    aws("AIDA"),
    aws("AIPA"),
    aws("ANPA"),
    aws("ANVA"),
    aws("APKA"),
    aws("AROA"),
    aws("ASCA"),
    TokenForm {
        prefix: "sk-",
        body: alnum_dash_underscore,
        min: 20,
        exact: false,
        digit: true,
    },
    form("sk_live_", alnum, 10),
    form("sk_test_", alnum, 10),
    form("rk_live_", alnum, 10),
    form("rk_test_", alnum, 10),
    form("whsec_", alnum, 10),
    form("hf_", alnum, 20),
    form("npm_", alnum, 30),
    form("pypi-", alnum_dash_underscore, 40),
    TokenForm {
        prefix: "AIza",
        body: alnum_dash_underscore,
        min: 35,
        exact: true,
        digit: false,
    },
    form("ya29.", alnum_dash_underscore_dot, 20),
    form("dop_v1_", alnum, 20),
    form("shpat_", alnum, 20),
];

/// How far a token body is scanned from one start (real ones are far shorter; keeps hostile text linear).
pub(super) const MAX_TOKEN_SCAN: usize = 256;

/// Longest JWT part looked at.
pub(super) const MAX_JWT_PART: usize = 16 << 10;

/// Bare tokens by prefix (the prefix is kept) and JWTs (hidden whole), wherever they start on a word boundary.
pub(super) fn redact_prefixed_tokens(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut i = 0;
    // End of the base64url run at or after the last position asked: every start inside one run shares its end,
    // so hostile text (`eyJ-eyJ-eyJ-…`) is scanned once, not once per start.
    let mut run = (0usize, 0usize);
    let mut run_end = |from: usize| -> usize {
        if !(run.0 <= from && from < run.1) {
            let len = bytes[from..]
                .iter()
                .take(MAX_JWT_PART)
                .take_while(|c| c.is_ascii_alphanumeric() || **c == b'-' || **c == b'_')
                .count();
            run = (from, from + len);
        }
        run.1
    };
    while i < bytes.len() {
        let boundary = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
        if !boundary || !text.is_char_boundary(i) {
            i += 1;
            continue;
        }
        if let Some(len) = jwt_len(bytes, i, &mut run_end) {
            out.push_str(&text[copied..i]);
            out.push_str(REDACTED);
            i += len;
            copied = i;
            continue;
        }
        if let Some((prefix_len, len)) = prefixed_token_len(&bytes[i..]) {
            out.push_str(&text[copied..i + prefix_len]);
            out.push_str(REDACTED);
            i += len;
            copied = i;
            continue;
        }
        i += 1;
    }
    out.push_str(&text[copied..]);
    out
}

/// (prefix length, whole token length) of a prefixed token starting at `b[0]`.
pub(super) fn prefixed_token_len(b: &[u8]) -> Option<(usize, usize)> {
    TOKEN_FORMS.iter().find_map(|f| {
        let body = b.strip_prefix(f.prefix.as_bytes())?;
        // Bounded: a long run of token characters is scanned at most this far from each word boundary.
        let len = body
            .iter()
            .take(MAX_TOKEN_SCAN)
            .take_while(|c| (f.body)(**c))
            .count();
        let ends_cleanly = !matches!(body.get(len), Some(c) if c.is_ascii_alphanumeric());
        let long_enough = if f.exact {
            len == f.min && ends_cleanly
        } else {
            len >= f.min
        };
        let digit_ok = !f.digit || body[..len].iter().any(u8::is_ascii_digit);
        (long_enough && digit_ok).then_some((f.prefix.len(), f.prefix.len() + len))
    })
}

/// Length of `eyJ….eyJ….sig` starting at `b[start]`; `run_end(i)`: end of the base64url run starting at `i`.
pub(super) fn jwt_len(
    b: &[u8],
    start: usize,
    run_end: &mut impl FnMut(usize) -> usize,
) -> Option<usize> {
    if !b[start..].starts_with(b"eyJ") {
        return None;
    }
    let header_end = run_end(start);
    if header_end - start < 10 || b.get(header_end) != Some(&b'.') {
        return None;
    }
    let payload_start = header_end + 1;
    if !b[payload_start..].starts_with(b"eyJ") {
        return None;
    }
    let payload_end = run_end(payload_start);
    if payload_end - payload_start < 10 {
        return None;
    }
    let mut end = payload_end;
    if b.get(end) == Some(&b'.') {
        end = if end + 1 < b.len() {
            run_end(end + 1)
        } else {
            end + 1
        };
    }
    Some(end - start)
}
