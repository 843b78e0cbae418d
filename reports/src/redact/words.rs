//! The judge of a command line: each argument with the words around it (flags and their values, headers,
//! `user:pass`, short password flags by command).

use super::commands::*;
use super::inline::inline;
use super::marker::REDACTED;
use super::names::*;

/// What the previous word asked of this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pending {
    Nothing,
    /// A secret flag's separate value.
    Value,
    /// `-p V` of a command whose `-p` is unknown: hidden unless a number or a path.
    UnknownP,
    /// `curl -u user:pass`.
    UserPass,
    /// The word after `Authorization:`: a scheme (then the secret) or the secret.
    HeaderValue,
}

/// The judge of a sequence of words: the command they belong to and what the previous word asked for.
pub(super) struct Words {
    command: Command,
    pending: Pending,
}

impl Words {
    pub(super) fn new() -> Words {
        Words {
            command: UNKNOWN_COMMAND,
            pending: Pending::Nothing,
        }
    }

    pub(super) fn arg(&mut self, arg: &str) -> String {
        if arg.chars().any(char::is_whitespace) {
            if self.pending != Pending::Nothing && !arg.trim().is_empty() {
                // `--token "two words"`, `-p "a b"`: the whole argument is the value.
                self.pending = Pending::Nothing;
                let (lead, _, trail) = unquote(arg);
                return format!("{lead}{REDACTED}{trail}");
            }
            self.pending = Pending::Nothing;
            if let Some(redacted) = redact_header(arg) {
                return redacted;
            }
            let mut inner = Words::new();
            return split_keeping_space(arg)
                .into_iter()
                .map(|(word, space)| format!("{}{space}", inner.word(word)))
                .collect();
        }
        self.word(arg)
    }

    /// One word without whitespace, quotes around it kept.
    pub(super) fn word(&mut self, word: &str) -> String {
        let (lead, core, trail) = unquote(word);
        format!("{lead}{}{trail}", self.core(core))
    }

    fn core(&mut self, core: &str) -> String {
        let pending = std::mem::replace(&mut self.pending, Pending::Nothing);
        match pending {
            Pending::Nothing => {}
            Pending::Value if !is_flag_like(core) => return REDACTED.to_string(),
            Pending::UnknownP if !is_flag_like(core) => {
                if is_number(core) || is_path(core) {
                    return inline(core);
                }
                return REDACTED.to_string();
            }
            Pending::UserPass if !is_flag_like(core) => return user_pass(core),
            Pending::HeaderValue => {
                if AUTH_SCHEMES.contains(&core.to_ascii_lowercase().as_str()) {
                    self.pending = Pending::Value;
                    return core.to_string();
                }
                return REDACTED.to_string();
            }
            Pending::Value | Pending::UnknownP | Pending::UserPass => {}
        }
        if let Some(command) = known_command(core) {
            self.command = command;
            return core.to_string();
        }
        if self.command.login && core == "login" {
            self.command.p = ShortP::Password;
            return core.to_string();
        }
        // `git config user.password V`, `aws configure set aws_secret_access_key V`: a dotted or underscored
        // secret-looking key as a word of its own is followed by its value.
        if (core.contains('.') || core.contains('_'))
            && is_variable_name(core)
            && ends_with_secret_word(core)
        {
            self.pending = Pending::Value;
            return core.to_string();
        }
        if let Some(long) = core.strip_prefix("--") {
            return self.long_flag(long);
        }
        if let Some(short) = core.strip_prefix('-') {
            if !short.is_empty() {
                return self.short_flag(short);
            }
        }
        if core.eq_ignore_ascii_case("bearer") {
            self.pending = Pending::Value;
            return core.to_string();
        }
        if let Some(name) = core.strip_suffix(':') {
            if is_header_name(name) && is_secret_name(name) {
                self.pending = Pending::HeaderValue;
                return core.to_string();
            }
        }
        if let Some(redacted) = redact_header(core) {
            return redacted;
        }
        if let Some((name, value)) = core.split_once('=') {
            if is_variable_name(name) {
                if is_secret_name(name) {
                    return format!("{name}={REDACTED}");
                }
                return format!("{name}={}", inline(value));
            }
        }
        inline(core)
    }

    /// `--name`, `--name=value`, `--name:value` (the part after `--`).
    fn long_flag(&mut self, long: &str) -> String {
        if let Some(at) = long.find(['=', ':']) {
            let (name, sep, value) = (&long[..at], &long[at..=at], &long[at + 1..]);
            if self.command.user_pass_long.contains(&name) {
                return format!("--{name}{sep}{}", user_pass(value));
            }
            if is_secret_name(name) {
                return format!("--{name}{sep}{REDACTED}");
            }
            if sep == "=" {
                return format!("--{name}={}", inline_value(value));
            }
            return format!("--{}", inline(long));
        }
        if self.command.user_pass_long.contains(&long) {
            self.pending = Pending::UserPass;
        } else if is_secret_name(long) && !is_switch(long) {
            self.pending = Pending::Value;
        }
        format!("--{}", inline(long))
    }

    /// `-x`, `-xVALUE`, `-name`, `-name=value` (the part after `-`, not empty).
    fn short_flag(&mut self, short: &str) -> String {
        if let Some(judged) = self.jvm_option(short) {
            return judged;
        }
        let Some(flag) = short.chars().next() else {
            return "-".to_string();
        };
        let attached = &short[flag.len_utf8()..];
        // A flag the command takes a password with: whatever is attached is the password (`-pA=B`, `-aPass`),
        // even when it reads as a secret-named pair (`mysql -pXpw=`: not a flag `pXpw` valued ``).
        let password = self.command.secret_short.contains(&flag)
            || (flag == 'p' && self.command.p == ShortP::Password);
        if password {
            if attached.is_empty() {
                self.pending = Pending::Value;
                return format!("-{flag}");
            }
            return format!("-{flag}{REDACTED}");
        }
        if let Some((name, _)) = short.split_once('=') {
            if is_secret_name(name) {
                return format!("-{name}={REDACTED}");
            }
        }
        if self.command.user_pass_short.contains(&flag) {
            if attached.is_empty() {
                self.pending = Pending::UserPass;
                return format!("-{flag}");
            }
            return format!("-{flag}{}", user_pass(attached));
        }
        if short.contains('=') {
            return format!("-{}", inline_value(short));
        }
        // `-password V`, `-passin V`, `-token V`; `-pSecret` is `-p` with a value, not a flag named `pSecret`.
        if short.len() >= 3
            && is_header_name(short)
            && ends_with_secret_word(short)
            && !is_switch(short)
            && (flag != 'p' || SECRET_WORDS.contains(&short.to_ascii_lowercase().as_str()))
        {
            self.pending = Pending::Value;
            return format!("-{short}");
        }
        if flag == 'p' && self.command.p == ShortP::Unknown {
            if attached.is_empty() {
                self.pending = Pending::UnknownP;
                return "-p".to_string();
            }
            if is_number(attached) {
                return format!("-p{attached}");
            }
            return format!("-p{REDACTED}");
        }
        format!("-{}", inline(short))
    }
}

impl Words {
    /// `-Xpassword V`, `-Xpassword:V`, `-XX:KeyStorePassword=V`, `-Dkey=V`: Java and JVM options put a namespace
    /// (`-X`, `-XX:`, `-D`) before the option's name, which is judged like a flag's name: a value attached
    /// after `=` or `:` is hidden when the name is secret-looking, the next argument when the name ends with a
    /// secret word. None when `short` is not such an option or the name is harmless (`-Xmx4g`, `-XX:+UseG1GC`).
    fn jvm_option(&mut self, short: &str) -> Option<String> {
        let (prefix, rest) = match short.strip_prefix("XX:") {
            Some(rest) => ("XX:", rest),
            None => {
                let rest = short.strip_prefix(['X', 'D'])?;
                (&short[..1], rest)
            }
        };
        // `-XX:+Flag`, `-XX:-Flag` are switches; `-X`, `-D 1080` (ssh) no namespaced name.
        if !rest.starts_with(|c: char| c.is_ascii_alphabetic()) {
            return None;
        }
        if let Some(at) = rest.find(['=', ':']) {
            let (name, separator) = (&rest[..at], &rest[at..=at]);
            return is_secret_name(name).then(|| format!("-{prefix}{name}{separator}{REDACTED}"));
        }
        let last_word = split_words(rest).pop()?;
        if is_variable_name(rest) && is_secret_name(&last_word) && !is_switch(rest) {
            self.pending = Pending::Value;
            return Some(format!("-{short}"));
        }
        None
    }
}

/// `user:password` → `user:[REDACTED]`; a bare user stays.
pub(super) fn user_pass(value: &str) -> String {
    match value.split_once(':') {
        Some((user, _)) => format!("{user}:{REDACTED}"),
        None => inline(value),
    }
}

/// A header `Name: value` (with or without space) whose name is secret-looking; `None` if it is not one.
pub(super) fn redact_header(text: &str) -> Option<String> {
    let trimmed = text.trim_start();
    let colon = trimmed.find(':')?;
    let name = &trimmed[..colon];
    if !is_header_name(name) || !is_secret_name(name) {
        return None;
    }
    let before_value = text.len() - trimmed.len() + colon + 1;
    let value = &text[before_value..];
    let value_start = before_value + (value.len() - value.trim_start().len());
    let value = &text[value_start..];
    // Keep a closing quote of a quoted header (`'Authorization: Bearer V'`).
    let trail_len = value.len() - value.trim_end_matches(['"', '\'']).len();
    let body = &value[..value.len() - trail_len];
    let kept = match body.split_once(char::is_whitespace) {
        Some((scheme, rest))
            if AUTH_SCHEMES.contains(&scheme.to_ascii_lowercase().as_str())
                && !rest.trim().is_empty() =>
        {
            &body[..body.len() - rest.trim_start().len()]
        }
        _ => "",
    };
    Some(format!(
        "{}{kept}{REDACTED}{}",
        &text[..value_start],
        &value[value.len() - trail_len..]
    ))
}

/// A value that may itself be a header (`--header=X-Api-Key:V`), a list of pairs or a URL.
pub(super) fn inline_value(value: &str) -> String {
    redact_header(value).unwrap_or_else(|| inline(value))
}

/// Quotes around a word: `'X` → (`'`, `X`, ``).
pub(super) fn unquote(word: &str) -> (&str, &str, &str) {
    let is_quote = |c: char| c == '"' || c == '\'';
    let core_start = word.len() - word.trim_start_matches(is_quote).len();
    let rest = &word[core_start..];
    let core = rest.trim_end_matches(is_quote);
    (&word[..core_start], core, &rest[core.len()..])
}

/// Words with the whitespace that follows each (the leading whitespace is a word of its own, empty).
pub(super) fn split_keeping_space(text: &str) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let word_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let after = &rest[word_end..];
        let space_end = word_end + (after.len() - after.trim_start().len());
        out.push((&rest[..word_end], &rest[word_end..space_end]));
        rest = &rest[space_end..];
    }
    out
}
