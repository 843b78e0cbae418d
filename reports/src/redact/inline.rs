//! The forms that can hide inside any one word: URL userinfo and webhook paths, `user:pass@host`, `k=v` pairs,
//! prefixed tokens.

use super::marker::REDACTED;
use super::names::is_secret_name;
use super::tokens::redact_prefixed_tokens;

/// The forms that can hide inside any one word: URLs, `user:pass@host`, `k=v` pairs, prefixed tokens.
pub(super) fn inline(word: &str) -> String {
    let text = redact_scheme_urls(word);
    let text = redact_bare_userinfo(&text);
    let text = redact_pairs(&text);
    redact_prefixed_tokens(&text)
}

/// Path segments after which everything is the webhook's secret (`/services/T/B/X` on Slack, `/webhooks/ID/TOKEN`).
pub(super) fn webhook_secret_follows(host: &str, segment: &str) -> bool {
    let segment = segment.to_ascii_lowercase();
    matches!(
        segment.as_str(),
        "webhooks" | "webhook" | "webhookb2" | "hooks"
    ) || (segment == "services" && host.to_ascii_lowercase().ends_with("slack.com"))
}

/// Whether `authority` (what follows `://` up to the first `/`, `?` or `#`) is a `user:secret` cut short by a
/// character the secret should have percent-encoded (an AWS secret key holds `/`): it has a `:` that is not a
/// port's (a host, or a bracketed IPv6 address, then digits only).
fn userinfo_cut_short(authority: &str) -> bool {
    if authority.contains('@') {
        return false;
    }
    let host_end = if authority.starts_with('[') {
        match authority.find(']') {
            Some(end) => end + 1,
            None => return false,
        }
    } else {
        match authority.find(':') {
            Some(colon) => colon,
            None => return false,
        }
    };
    match authority[host_end..].strip_prefix(':') {
        Some(port) => host_end == 0 || port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()),
        None => false,
    }
}

/// Where the authority of a URL whose `user:secret` holds a `/`, `?` or `#` ends: after the last `@` of the
/// URL (`url`, up to whitespace or a quote) that a host follows.
fn authority_past_the_secret(url: &str) -> Option<usize> {
    let looks_like_host = |h: &str| {
        let host = &h[..h.find(['/', '?', '#']).unwrap_or(h.len())];
        !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-_~%[]:".contains(&b))
    };
    let at = url
        .rmatch_indices('@')
        .map(|(i, _)| i)
        .find(|&i| looks_like_host(&url[i + 1..]))?;
    Some(
        at + 1
            + url[at + 1..]
                .find(['/', '?', '#'])
                .unwrap_or(url.len() - at - 1),
    )
}

/// Every `scheme://userinfo@host/path` in `text`: userinfo hidden whole (`user:secret`, `:secret`, a token
/// alone; also a `user:secret` holding `/`, `?` or `#` unencoded, as an AWS secret key in an `s3://` URL),
/// webhook paths hidden.
pub(super) fn redact_scheme_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find("://") {
        let authority_start = pos + 3;
        out.push_str(&rest[..authority_start]);
        let after = &rest[authority_start..];
        let url_end = after
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`'))
            .unwrap_or(after.len());
        let mut authority_end = after[..url_end].find(['/', '?', '#']).unwrap_or(url_end);
        if userinfo_cut_short(&after[..authority_end]) {
            if let Some(end) = authority_past_the_secret(&after[..url_end]) {
                authority_end = end;
            }
        }
        let authority = &after[..authority_end];
        let host = match authority.rfind('@') {
            Some(at) if at > 0 && &authority[..at] != REDACTED => {
                out.push_str(REDACTED);
                out.push_str(&authority[at..]);
                &authority[at + 1..]
            }
            Some(at) => {
                out.push_str(authority);
                &authority[at + 1..]
            }
            None => {
                out.push_str(authority);
                authority
            }
        };
        let tail = &after[authority_end..url_end];
        let path_end = tail.find(['?', '#']).unwrap_or(tail.len());
        out.push_str(&redact_webhook_path(host, &tail[..path_end]));
        out.push_str(&tail[path_end..]);
        rest = &after[url_end..];
    }
    out.push_str(rest);
    out
}

pub(super) fn redact_webhook_path(host: &str, path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut segments = path.split('/').peekable();
    let mut first = true;
    while let Some(segment) = segments.next() {
        if !first {
            out.push('/');
        }
        first = false;
        if segment.len() > 3 && segment.starts_with("bot") && segment.contains(':') {
            // Telegram: /bot<id>:<secret>/sendMessage.
            out.push_str("bot");
            out.push_str(REDACTED);
            continue;
        }
        out.push_str(segment);
        if webhook_secret_follows(host, segment) && segments.peek().is_some_and(|s| !s.is_empty()) {
            out.push('/');
            out.push_str(REDACTED);
            return out;
        }
    }
    out
}

/// `user:secret@host` without a scheme (proxies, DSNs, `mysql -h`): the secret after the colon is hidden.
/// One pass: a segment runs from the last separator (whitespace, quote, `(`, `<`, `,`, `;`) or `@` to the `@`;
/// `name=` before the user is not part of it; a secret may hold `/`, `=`, `[`; scheme URLs are left to
/// [`redact_scheme_urls`].
pub(super) fn redact_bare_userinfo(text: &str) -> String {
    if !text.contains('@') {
        return text.to_string();
    }
    let is_separator =
        |c: char| matches!(c, '(' | '<' | ',' | ';' | '"' | '\'') || c.is_whitespace();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut segment_start = 0;
    for (at, c) in text.char_indices() {
        if is_separator(c) {
            segment_start = at + c.len_utf8();
            continue;
        }
        if c != '@' {
            continue;
        }
        let mut userinfo = &text[segment_start..at];
        let host = &text[at + 1..];
        segment_start = at + 1;
        if userinfo.contains("://") {
            continue;
        }
        if let (Some(eq), Some(colon)) = (userinfo.find('='), userinfo.find(':')) {
            if eq < colon {
                userinfo = &userinfo[eq + 1..];
            }
        }
        let Some((user, secret)) = userinfo.split_once(':') else {
            continue;
        };
        // `image:tag@sha256:…` is a digest, not a password.
        if user.is_empty()
            || secret.is_empty()
            || secret == REDACTED
            || host.is_empty()
            || host.starts_with("sha")
        {
            continue;
        }
        out.push_str(&text[copied..at - userinfo.len()]);
        out.push_str(user);
        out.push(':');
        out.push_str(REDACTED);
        copied = at;
    }
    out.push_str(&text[copied..]);
    out
}

/// `name=value` pairs separated by `?`, `&`, `;`, `#` or `,` (queries, option lists, connection strings).
pub(super) fn redact_pairs(text: &str) -> String {
    if !text.contains('=') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let end = rest.find(['?', '&', ';', '#', ',']).unwrap_or(rest.len());
        let piece = &rest[..end];
        match piece.split_once('=') {
            Some((name, _)) if is_param_name(name) && is_secret_name(name) => {
                out.push_str(name);
                out.push('=');
                out.push_str(REDACTED);
            }
            _ => out.push_str(piece),
        }
        if end == rest.len() {
            break;
        }
        out.push_str(&rest[end..end + 1]);
        rest = &rest[end + 1..];
    }
    out
}

pub(super) fn is_param_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '[' | ']'))
}
