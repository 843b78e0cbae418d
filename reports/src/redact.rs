//! Redaction of secrets in a captured command line.
//!
//! Environment variables are never captured (the model has no field for them). A command line, where one was
//! captured, goes through [`redact_cmdline`] before it is stored or rendered:
//! - the value of a secret-looking flag, as `--token=VALUE` or `--token VALUE` (`--token`, `--password`,
//!   `--secret`, `--api-key`, `--hf-token`, `--auth`, `--credentials` …);
//! - the value of a secret-looking assignment `NAME=VALUE` (`*_KEY=`, `*_TOKEN=`, `*PASSWORD*=`, `*SECRET*=` …);
//! - URL credentials: `https://user:pass@host/` becomes `https://[REDACTED]@host/`;
//! - an argument containing spaces (`sh -c "… --token abc"`) is redacted word by word.
//!
//! Redaction is idempotent and errs on the side of hiding too much.

/// What replaces a secret.
pub const REDACTED: &str = "[REDACTED]";

/// Words that make a flag or variable name secret-looking when they appear as a whole word.
const SECRET_WORDS: &[&str] = &[
    "token",
    "tokens",
    "password",
    "passwd",
    "passphrase",
    "pass",
    "pwd",
    "secret",
    "secrets",
    "key",
    "apikey",
    "auth",
    "authorization",
    "credential",
    "credentials",
    "cookie",
    "signature",
    "sig",
];

/// Substrings that make a name secret-looking wherever they appear (`githubtoken`, `dbpassword`).
const SECRET_SUBSTRINGS: &[&str] = &[
    "token",
    "password",
    "passwd",
    "secret",
    "apikey",
    "credential",
];

/// Redact a whole argv.
pub fn redact_cmdline(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut redact_next = false;
    for arg in args {
        if redact_next {
            redact_next = false;
            // `--token --other-flag`: the flag took no value; keep the next flag visible.
            if !looks_like_long_flag(arg) {
                out.push(REDACTED.to_string());
                continue;
            }
        }
        let (redacted, takes_value) = redact_arg(arg);
        redact_next = takes_value;
        out.push(redacted);
    }
    out
}

/// Redact one argument; the flag tells whether the next argument is this one's (secret) value.
fn redact_arg(arg: &str) -> (String, bool) {
    if arg.chars().any(char::is_whitespace) {
        let words: Vec<String> = arg.split_whitespace().map(str::to_string).collect();
        let redacted = redact_cmdline(&words);
        if redacted != words {
            return (redacted.join(" "), false);
        }
        return (redact_urls(arg), false);
    }
    if let Some(flag) = arg.strip_prefix('-') {
        let flag = flag.strip_prefix('-').unwrap_or(flag);
        if let Some((name, _value)) = flag.split_once('=') {
            if is_secret_name(name) {
                let prefix_len = arg.len() - flag.len() + name.len() + 1;
                return (format!("{}{REDACTED}", &arg[..prefix_len]), false);
            }
            return (redact_urls(arg), false);
        }
        // Long flags only for the `--flag VALUE` form: `-p 8080` is too ambiguous to judge.
        if arg.starts_with("--") && is_secret_name(flag) {
            return (arg.to_string(), true);
        }
        return (redact_urls(arg), false);
    }
    if let Some((name, _value)) = arg.split_once('=') {
        if is_variable_name(name) && is_secret_name(name) {
            return (format!("{name}={REDACTED}"), false);
        }
    }
    (redact_urls(arg), false)
}

fn looks_like_long_flag(arg: &str) -> bool {
    arg.len() > 2
        && arg.starts_with("--")
        && arg[2..]
            .chars()
            .take_while(|c| *c != '=')
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
}

fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-')
}

/// `api-key`, `HF_TOKEN`, `db.password`, `githubToken`: split into words and look for a secret word.
fn is_secret_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    if SECRET_SUBSTRINGS.iter().any(|s| lower.contains(s)) {
        return true;
    }
    split_words(name)
        .iter()
        .any(|w| SECRET_WORDS.contains(&w.as_str()))
}

/// Split on `-`, `_`, `.` and lower→upper camel-case boundaries; lowercase the words.
fn split_words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if c == '-' || c == '_' || c == '.' {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower && !current.is_empty() {
            words.push(std::mem::take(&mut current));
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        current.push(c.to_ascii_lowercase());
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

/// Replace the userinfo part of every `scheme://userinfo@host` in `text`.
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find("://") {
        let authority_start = pos + 3;
        out.push_str(&rest[..authority_start]);
        let after = &rest[authority_start..];
        let authority_end = after
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace())
            .unwrap_or(after.len());
        let authority = &after[..authority_end];
        match authority.rfind('@') {
            Some(at) if at > 0 && &authority[..at] != REDACTED => {
                out.push_str(REDACTED);
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        rest = &after[authority_end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(args: &[&str]) -> Vec<String> {
        let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        redact_cmdline(&v)
    }

    #[test]
    fn flag_with_equals() {
        assert_eq!(
            r(&[
                "train.py",
                "--token=abc",
                "--password=hunter2",
                "--api-key=k",
                "--secret=s",
                "--lr=0.1"
            ]),
            [
                "train.py",
                "--token=[REDACTED]",
                "--password=[REDACTED]",
                "--api-key=[REDACTED]",
                "--secret=[REDACTED]",
                "--lr=0.1"
            ]
        );
    }

    #[test]
    fn flag_with_separate_value() {
        assert_eq!(
            r(&[
                "x",
                "--token",
                "abc",
                "--hf-token",
                "hf_123",
                "--password",
                "p",
                "--epochs",
                "3"
            ]),
            [
                "x",
                "--token",
                "[REDACTED]",
                "--hf-token",
                "[REDACTED]",
                "--password",
                "[REDACTED]",
                "--epochs",
                "3"
            ]
        );
        // A valueless secret flag does not swallow the next flag.
        assert_eq!(
            r(&["x", "--use-auth-token", "--model", "m"]),
            ["x", "--use-auth-token", "--model", "m"]
        );
    }

    #[test]
    fn camel_and_snake_case_flags() {
        assert_eq!(r(&["--apiKey", "v"]), ["--apiKey", "[REDACTED]"]);
        assert_eq!(r(&["--access_key=v"]), ["--access_key=[REDACTED]"]);
        assert_eq!(r(&["--db.passwd=v"]), ["--db.passwd=[REDACTED]"]);
        assert_eq!(r(&["-secret=v"]), ["-secret=[REDACTED]"]);
    }

    #[test]
    fn assignments() {
        assert_eq!(
            r(&[
                "env",
                "HF_TOKEN=hf_abc",
                "AWS_SECRET_ACCESS_KEY=x",
                "DB_PASSWORD_FILE=y",
                "MY_KEY=z",
                "OMP_NUM_THREADS=4",
                "python"
            ]),
            [
                "env",
                "HF_TOKEN=[REDACTED]",
                "AWS_SECRET_ACCESS_KEY=[REDACTED]",
                "DB_PASSWORD_FILE=[REDACTED]",
                "MY_KEY=[REDACTED]",
                "OMP_NUM_THREADS=4",
                "python"
            ]
        );
        // Not an assignment: a path with `=` stays.
        assert_eq!(r(&["/data/a=b/key.bin"]), ["/data/a=b/key.bin"]);
    }

    #[test]
    fn url_credentials() {
        assert_eq!(
            r(&[
                "git",
                "clone",
                "https://user:pa55@github.com/o/r.git",
                "--url=http://tok@host:8080/x?q=1"
            ]),
            [
                "git",
                "clone",
                "https://[REDACTED]@github.com/o/r.git",
                "--url=http://[REDACTED]@host:8080/x?q=1"
            ]
        );
        assert_eq!(
            redact_urls("no creds https://host/a@b"),
            "no creds https://host/a@b"
        );
        assert_eq!(
            redact_urls("a://x:y@h b://p:q@i"),
            "a://[REDACTED]@h b://[REDACTED]@i"
        );
    }

    #[test]
    fn shell_strings_are_redacted_word_by_word() {
        assert_eq!(
            r(&["sh", "-c", "python t.py --token abc --lr 1"]),
            ["sh", "-c", "python t.py --token [REDACTED] --lr 1"]
        );
    }

    #[test]
    fn harmless_flags_survive_and_redaction_is_idempotent() {
        let args = [
            "python",
            "-m",
            "torch.distributed.run",
            "--nproc-per-node=8",
            "--keyboard",
            "x",
            "train.py",
        ];
        assert_eq!(r(&args), args);
        let once = r(&["--token", "a", "X_TOKEN=b", "https://u:p@h"]);
        assert_eq!(redact_cmdline(&once), once);
    }
}
