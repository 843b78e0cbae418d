//! Redaction of secrets in a captured command line (and in any URL or free text stored with an incident).
//!
//! Environment variables are never captured (the model has no field for them). A command line, where one was
//! captured, goes through [`redact_cmdline`] before it is stored or rendered; free text through [`redact_text`].
//! Each argument is judged with the words around it; an argument containing whitespace (`sh -c "…"`, a header)
//! is judged word by word, keeping its spacing and quotes. What is hidden (the secret forms, one test each):
//! - the value of a secret-looking flag: `--token=V`, `--token V`, `--db-password:V`, `-password V`, `-Dx.password=V`.
//!   A name is secret-looking when one of its words (split at `-`, `_`, `.` and camel case) is a secret word
//!   (`token`, `password`, `pw`, `key`, `auth`, `jwt`, `session`, `creds`, `bearer`, `oauth2`, `tok`, `license` …)
//!   or contains one (`githubtoken`, `dbpassword`), except the tokenizer vocabulary (`--tokenizer`,
//!   `--max-tokens`, `--pad-token-id`). A flag named like a switch (`--use-auth-token`, `--no-auth`) takes no
//!   separate value; a separate value that looks like a flag (`--model`, `-v`) is not swallowed, one that does not
//!   (`--token --Xk9+…`) is hidden;
//! - the value of a secret-looking assignment `NAME=V` or `k=v` pair in a list or query (`a=1,token=V`, `?sig=V&…`);
//! - a secret header, whole (`Authorization: Bearer V`, `X-Api-Key: V`) or as words (`-H 'Authorization: Bearer V'`
//!   inside `sh -c`), and the word after `Bearer`;
//! - URL credentials, by rule for any scheme (`postgres://user:pass@host`, `redis://:pass@host`,
//!   `https://ghp_…@github.com` → `scheme://[REDACTED]@host`; also a secret holding an unencoded `/`, `?` or `#`,
//!   as an AWS secret key in `s3://AKIA…:SECRET@bucket/…`), `user:V@host` → `user:[REDACTED]@host`,
//!   webhook URL paths (`…/services/[REDACTED]`, `…/webhooks/[REDACTED]`, Telegram `bot[REDACTED]`);
//! - `user:V` given to `curl -u`/`--user`/`-U`/`--proxy-user` and `http -a`;
//! - short password flags, by command (`ShortP`; the rule in full: docs/report-schema.md, "Redaction"): `-p V` and
//!   `-pV` are a password for `mysql`, `mariadb`, `sshpass`, `mongo*`, `7z`…, but a port, pid or switch for `ssh`,
//!   `psql`, `redis-cli`, `docker`, `mkdir` …;
//!   for any other command `-p V` is hidden unless V is a number or a path, `-pV` unless V is a number;
//!   `docker login -p V`, `redis-cli -a V`, `mosquitto_pub -P V`, `zip -P V`, `openssl -k V`, `ssh-keygen -N V` too;
//! - the value after a dotted or underscored secret-looking key (`git config user.password V`);
//! - bare tokens by their well-known prefix, wherever they appear: `ghp_`/`gho_`/`ghu_`/`ghs_`/`ghr_`/`github_pat_`,
//!   `glpat-`, `xoxb-`/`xoxp-`/`xoxa-`…, `AKIA`/`ASIA`…, `sk-`, `sk_live_`, `hf_`, `npm_`, `pypi-`, `AIza`, `ya29.`,
//!   and the JWT shape `eyJ….eyJ….sig` (the prefix stays: it says what kind of secret was there).
//!
//! Redaction runs to its fixed point (so it is idempotent), is linear in the text, never panics on any text, and
//! errs on the side of hiding too much.

mod commands;
mod inline;
pub mod marker;
mod names;
mod structured;
mod tokens;
mod words;

#[cfg(test)]
mod tests;

use inline::inline;
use structured::{redact_mappings, redact_pem};
use words::{split_keeping_space, unquote, Words};

/// Most passes a redaction makes. One pass can expose a form the next one hides (a hidden password that held the
/// `/` or `=` separating two URL parts joins them), so redaction runs to its fixed point: what it returns, redacted
/// again, stays the same. Passes only ever replace text with [`marker::REDACTED`], so they converge in two or three.
const MAX_PASSES: usize = 8;

fn fixed_point<T: PartialEq>(first: T, pass: impl Fn(&T) -> T) -> T {
    let mut current = first;
    for _ in 1..MAX_PASSES {
        let next = pass(&current);
        if next == current {
            break;
        }
        current = next;
    }
    current
}

/// Redact a whole argv.
pub fn redact_cmdline(args: &[String]) -> Vec<String> {
    let pass = |args: &Vec<String>| -> Vec<String> {
        let mut words = Words::new();
        pem_in_args(args)
            .iter()
            .map(|arg| words.arg(&redact_mappings(arg)))
            .collect()
    };
    fixed_point(pass(&args.to_vec()), pass)
}

/// PEM bodies hidden across arguments (an unquoted `$(cat key.pem)` gives one argument per word); the number of
/// arguments stays.
fn pem_in_args(args: &[String]) -> Vec<String> {
    if !args.iter().any(|a| a.contains("-----BEGIN")) {
        return args.to_vec();
    }
    if args.iter().any(|a| a.contains('\0')) {
        // Not from /proc (an argument there never holds NUL): judged one by one.
        return args.iter().map(|a| redact_pem(a).into_owned()).collect();
    }
    redact_pem(&args.join("\0"))
        .split('\0')
        .map(str::to_string)
        .collect()
}

/// Redact free text (a URL, a shell command, a log line): judged word by word like a command line.
pub fn redact_text(text: &str) -> String {
    let pass = |text: &String| Words::new().arg(&redact_mappings(&redact_pem(text)));
    fixed_point(pass(&text.to_string()), pass)
}

/// Redact the URL forms in `text` only: userinfo, webhook paths, secret query parameters, token prefixes.
pub fn redact_urls(text: &str) -> String {
    let pass = |text: &String| -> String {
        split_keeping_space(text)
            .into_iter()
            .map(|(word, space)| {
                let (lead, core, trail) = unquote(word);
                format!("{lead}{}{trail}{space}", inline(core))
            })
            .collect()
    };
    fixed_point(pass(&text.to_string()), pass)
}
