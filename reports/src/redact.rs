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
//! - URL credentials (`https://user:pass@host` → `https://[REDACTED]@host`, `user:V@host` → `user:[REDACTED]@host`),
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

/// What replaces a secret.
pub const REDACTED: &str = "[REDACTED]";

/// Words that make a flag, variable, parameter or header name secret-looking when they appear as a whole word.
const SECRET_WORDS: &[&str] = &[
    "token",
    "tok",
    "password",
    "passwd",
    "passphrase",
    "pass",
    "passin",
    "passout",
    "pwd",
    "pw",
    "secret",
    "secrets",
    "key",
    "apikey",
    "privkey",
    "auth",
    "authorization",
    "bearer",
    "oauth",
    "oauth2",
    "jwt",
    "credential",
    "credentials",
    "cred",
    "creds",
    "cookie",
    "session",
    "sessionid",
    "signature",
    "sig",
    "license",
    "licence",
    "otp",
    "pat",
    "sas",
    "webhook",
];

/// Substrings that make a word secret-looking wherever they appear (`githubtoken`, `dbpassword`).
const SECRET_SUBSTRINGS: &[&str] = &[
    "token",
    "password",
    "passwd",
    "passphrase",
    "secret",
    "apikey",
    "privkey",
    "credential",
    "bearer",
    "oauth",
    "webhook",
];

/// Words around `token` that make it the tokenizer's vocabulary (`--pad-token-id 0`, `--max-token 64`).
const TOKEN_VOCABULARY_BEFORE: &[&str] = &[
    "pad", "bos", "eos", "unk", "sep", "cls", "mask", "max", "min", "num", "special", "start",
    "end", "stop", "decoder",
];
const TOKEN_VOCABULARY_AFTER: &[&str] = &[
    "id", "ids", "type", "types", "len", "length", "count", "limit", "budget", "size", "num",
];

/// First words of a switch: `--use-auth-token`, `--no-auth` take no separate value.
const SWITCH_WORDS: &[&str] = &[
    "no", "use", "with", "without", "disable", "enable", "skip", "allow", "ignore", "show",
    "print", "insecure",
];

/// Authentication schemes that come between a header name and the secret (`Authorization: Bearer V`).
const AUTH_SCHEMES: &[&str] = &[
    "bearer",
    "basic",
    "digest",
    "token",
    "negotiate",
    "ntlm",
    "apikey",
    "aws4-hmac-sha256",
];

/// What `-p` means for a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ShortP {
    /// `mysql -pV`, `sshpass -p V`: always a password.
    Password,
    /// `ssh -p 22`, `mkdir -p dir`, `strace -p 42`: a port, pid or switch; never hidden.
    NotSecret,
    /// Anything else: hidden unless it is a number (port, pid, `patch -p1`) or, as a separate value, a path.
    Unknown,
}

/// How a command's short flags are judged.
#[derive(Debug, Clone, Copy)]
struct Command {
    p: ShortP,
    /// Other short flags whose value is a password (`redis-cli -a`, `mosquitto_pub -P`, `zip -P`, `openssl -k`).
    secret_short: &'static [char],
    /// Short and long flags taking `user:password` (`curl -u`, `http -a`).
    user_pass_short: &'static [char],
    user_pass_long: &'static [&'static str],
    /// A subcommand after which `-p` is a password (`docker login -p V`, while `docker run -p 8080:80`).
    login: bool,
}

const UNKNOWN_COMMAND: Command = Command {
    p: ShortP::Unknown,
    secret_short: &[],
    user_pass_short: &[],
    user_pass_long: &[],
    login: false,
};

const fn command(p: ShortP) -> Command {
    Command {
        p,
        ..UNKNOWN_COMMAND
    }
}

/// Commands whose flags are known, by the basename of the program.
fn known_command(word: &str) -> Option<Command> {
    let name = word.rsplit('/').next().unwrap_or(word);
    let c = match name {
        "mysql" | "mysqldump" | "mysqladmin" | "mysqlimport" | "mysqlshow" | "mysqlcheck"
        | "mysqlpump" | "mysqlsh" | "mariadb" | "mariadb-dump" | "mariadb-admin" | "sshpass"
        | "mongo" | "mongosh" | "mongodump" | "mongorestore" | "mongoexport" | "mongoimport"
        | "mongostat" | "mongotop" | "7z" | "7za" | "7zr" | "rar" | "unrar" => {
            command(ShortP::Password)
        }
        "redis-cli" => Command {
            secret_short: &['a'],
            ..command(ShortP::NotSecret)
        },
        "mosquitto_pub" | "mosquitto_sub" | "mosquitto_rr" | "zip" | "unzip" => Command {
            secret_short: &['P'],
            ..command(ShortP::NotSecret)
        },
        "openssl" => Command {
            secret_short: &['k'],
            ..command(ShortP::NotSecret)
        },
        "curl" => Command {
            user_pass_short: &['u', 'U'],
            user_pass_long: &["user", "proxy-user"],
            ..command(ShortP::NotSecret)
        },
        "http" | "https" | "httpie" => Command {
            user_pass_short: &['a'],
            ..command(ShortP::NotSecret)
        },
        "docker" | "podman" | "nerdctl" | "buildah" | "skopeo" | "helm" | "oras" => Command {
            login: true,
            ..command(ShortP::NotSecret)
        },
        "ssh-keygen" => Command {
            secret_short: &['N', 'P'],
            ..command(ShortP::NotSecret)
        },
        "ssh" | "autossh" | "mosh" | "scp" | "sftp" | "rsync" | "psql" | "pg_dump"
        | "pg_dumpall" | "pg_restore" | "pg_basebackup" | "pg_isready" | "pgbench" | "createdb"
        | "dropdb" | "redis-server" | "redis-benchmark" | "nc" | "ncat" | "netcat" | "socat"
        | "nmap" | "telnet" | "ping" | "iperf" | "iperf3" | "kubectl" | "mkdir" | "cp" | "ls"
        | "tar" | "patch" | "git" | "strace" | "ltrace" | "gdb" | "perf" | "lsof" | "ps"
        | "pgrep" | "pkill" | "top" | "htop" | "taskset" | "renice" | "prlimit" | "pidstat"
        | "kill" | "py-spy" | "nvidia-smi" => command(ShortP::NotSecret),
        _ => return None,
    };
    Some(c)
}

/// Most passes a redaction makes. One pass can expose a form the next one hides (a hidden password that held the
/// `/` or `=` separating two URL parts joins them), so redaction runs to its fixed point: what it returns, redacted
/// again, stays the same. Passes only ever replace text with [`REDACTED`], so they converge in two or three.
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
        args.iter().map(|arg| words.arg(arg)).collect()
    };
    fixed_point(pass(&args.to_vec()), pass)
}

/// Redact free text (a URL, a shell command, a log line): judged word by word like a command line.
pub fn redact_text(text: &str) -> String {
    let pass = |text: &String| Words::new().arg(text);
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

/// What the previous word asked of this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
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
struct Words {
    command: Command,
    pending: Pending,
}

impl Words {
    fn new() -> Words {
        Words {
            command: UNKNOWN_COMMAND,
            pending: Pending::Nothing,
        }
    }

    fn arg(&mut self, arg: &str) -> String {
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
    fn word(&mut self, word: &str) -> String {
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
        if let Some((name, _)) = short.split_once('=') {
            if is_secret_name(name) {
                return format!("-{name}={REDACTED}");
            }
        }
        let Some(flag) = short.chars().next() else {
            return "-".to_string();
        };
        let attached = &short[flag.len_utf8()..];
        // A flag the command takes a password with: whatever is attached is the password (`-pA=B`, `-aPass`).
        let password = self.command.secret_short.contains(&flag)
            || (flag == 'p' && self.command.p == ShortP::Password);
        if password {
            if attached.is_empty() {
                self.pending = Pending::Value;
                return format!("-{flag}");
            }
            return format!("-{flag}{REDACTED}");
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

/// `user:password` → `user:[REDACTED]`; a bare user stays.
fn user_pass(value: &str) -> String {
    match value.split_once(':') {
        Some((user, _)) => format!("{user}:{REDACTED}"),
        None => inline(value),
    }
}

/// A header `Name: value` (with or without space) whose name is secret-looking; `None` if it is not one.
fn redact_header(text: &str) -> Option<String> {
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
fn inline_value(value: &str) -> String {
    redact_header(value).unwrap_or_else(|| inline(value))
}

/// The forms that can hide inside any one word: URLs, `user:pass@host`, `k=v` pairs, prefixed tokens.
fn inline(word: &str) -> String {
    let text = redact_scheme_urls(word);
    let text = redact_bare_userinfo(&text);
    let text = redact_pairs(&text);
    redact_prefixed_tokens(&text)
}

/// Quotes around a word: `'X` → (`'`, `X`, ``).
fn unquote(word: &str) -> (&str, &str, &str) {
    let is_quote = |c: char| c == '"' || c == '\'';
    let core_start = word.len() - word.trim_start_matches(is_quote).len();
    let rest = &word[core_start..];
    let core = rest.trim_end_matches(is_quote);
    (&word[..core_start], core, &rest[core.len()..])
}

/// Words with the whitespace that follows each (the leading whitespace is a word of its own, empty).
fn split_keeping_space(text: &str) -> Vec<(&str, &str)> {
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

/// A next argument that is a flag rather than a value: `--model`, `--lr=1`, `-v`, `--`.
/// Random text seldom looks like one: a flag name starts lowercase, has short words, few digits, and no digit
/// when it has capitals.
fn is_flag_like(word: &str) -> bool {
    if word == "--" {
        return true;
    }
    if let Some(long) = word.strip_prefix("--") {
        let name = long.split('=').next().unwrap_or(long);
        let digits = name.chars().filter(char::is_ascii_digit).count();
        let upper = name.chars().any(|c| c.is_ascii_uppercase());
        return name.len() <= 48
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
            && name.split(['-', '_', '.']).all(|w| w.len() <= 20)
            && digits <= 3
            && !(upper && digits > 0);
    }
    let mut chars = word.chars();
    chars.next() == Some('-')
        && matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && chars.next().is_none()
}

fn is_number(word: &str) -> bool {
    !word.is_empty() && word.len() <= 20 && word.bytes().all(|b| b.is_ascii_digit())
}

fn is_path(word: &str) -> bool {
    word.starts_with('/')
        || word.starts_with("./")
        || word.starts_with("../")
        || word.starts_with("~/")
}

fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-')
}

fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// `--use-auth-token`, `--no-auth`: a switch, no value follows.
fn is_switch(name: &str) -> bool {
    split_words(name)
        .first()
        .is_some_and(|w| SWITCH_WORDS.contains(&w.as_str()))
}

/// `api-key`, `HF_TOKEN`, `db.password`, `githubToken`, `X-Api-Key`: split into words and look for a secret one.
fn is_secret_name(name: &str) -> bool {
    let words = split_words(name);
    words.iter().enumerate().any(|(i, word)| {
        let secret = SECRET_WORDS.contains(&word.as_str())
            || SECRET_SUBSTRINGS.iter().any(|s| word.contains(s));
        secret && !is_token_vocabulary(&words, i)
    })
}

/// `-keyStorePassword`, `-api-key`: a single-dash flag named for what its value is.
fn ends_with_secret_word(name: &str) -> bool {
    split_words(name)
        .last()
        .is_some_and(|w| SECRET_WORDS.contains(&w.as_str()))
}

/// `tokenizer`, `max_tokens`, `pad_token_id`: words about tokens of text, not credentials.
fn is_token_vocabulary(words: &[String], i: usize) -> bool {
    let word = words[i].as_str();
    if word.contains("tokeniz") || word.ends_with("tokens") {
        return !SECRET_SUBSTRINGS
            .iter()
            .filter(|s| **s != "token")
            .any(|s| word.contains(s));
    }
    word == "token"
        && (i > 0 && TOKEN_VOCABULARY_BEFORE.contains(&words[i - 1].as_str())
            || words
                .get(i + 1)
                .is_some_and(|next| TOKEN_VOCABULARY_AFTER.contains(&next.as_str())))
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

/// Path segments after which everything is the webhook's secret (`/services/T/B/X` on Slack, `/webhooks/ID/TOKEN`).
fn webhook_secret_follows(host: &str, segment: &str) -> bool {
    let segment = segment.to_ascii_lowercase();
    matches!(
        segment.as_str(),
        "webhooks" | "webhook" | "webhookb2" | "hooks"
    ) || (segment == "services" && host.to_ascii_lowercase().ends_with("slack.com"))
}

/// Every `scheme://userinfo@host/path` in `text`: userinfo hidden whole, webhook paths hidden.
fn redact_scheme_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find("://") {
        let authority_start = pos + 3;
        out.push_str(&rest[..authority_start]);
        let after = &rest[authority_start..];
        let url_end = after
            .find(|c: char| c.is_whitespace() || c == '"' || c == '\'')
            .unwrap_or(after.len());
        let authority_end = after[..url_end].find(['/', '?', '#']).unwrap_or(url_end);
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

fn redact_webhook_path(host: &str, path: &str) -> String {
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
fn redact_bare_userinfo(text: &str) -> String {
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
fn redact_pairs(text: &str) -> String {
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

fn is_param_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '[' | ']'))
}

/// A token recognised by its prefix: the characters its body may hold and how long the body is.
struct TokenForm {
    prefix: &'static str,
    body: fn(u8) -> bool,
    min: usize,
    /// Exact length when set (AWS key ids are always 16 after the prefix).
    exact: bool,
    /// Require a digit in the body (`sk-` also starts harmless words such as `sk-learn-…`).
    digit: bool,
}

fn alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}
fn alnum_underscore(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}
fn alnum_dash(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-'
}
fn alnum_dash_underscore(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}
fn upper_digit(b: u8) -> bool {
    b.is_ascii_uppercase() || b.is_ascii_digit()
}
fn alnum_dash_underscore_dot(b: u8) -> bool {
    alnum_dash_underscore(b) || b == b'.'
}

const fn form(prefix: &'static str, body: fn(u8) -> bool, min: usize) -> TokenForm {
    TokenForm {
        prefix,
        body,
        min,
        exact: false,
        digit: false,
    }
}

const fn aws(prefix: &'static str) -> TokenForm {
    TokenForm {
        prefix,
        body: upper_digit,
        min: 16,
        exact: true,
        digit: false,
    }
}

const TOKEN_FORMS: &[TokenForm] = &[
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
const MAX_TOKEN_SCAN: usize = 256;
/// Longest JWT part looked at.
const MAX_JWT_PART: usize = 16 << 10;

/// Bare tokens by prefix (the prefix is kept) and JWTs (hidden whole), wherever they start on a word boundary.
fn redact_prefixed_tokens(text: &str) -> String {
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
fn prefixed_token_len(b: &[u8]) -> Option<(usize, usize)> {
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
fn jwt_len(b: &[u8], start: usize, run_end: &mut impl FnMut(usize) -> usize) -> Option<usize> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn r(args: &[&str]) -> Vec<String> {
        let v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        redact_cmdline(&v)
    }

    const GHP: &str = "ghp_16C7e42F292c6912E7710c838347Ae178B4a";
    const JWT: &str = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";

    /// One secret form: an argv, what it must become, and the secret that must not survive.
    struct Form {
        args: &'static [&'static str],
        want: &'static [&'static str],
        secret: &'static str,
    }

    const fn f(
        args: &'static [&'static str],
        want: &'static [&'static str],
        secret: &'static str,
    ) -> Form {
        Form { args, want, secret }
    }

    /// The 20 forms issue 13 found leaking, in its order.
    const LEAKED_BEFORE: &[Form] = &[
        f(
            &[
                "curl",
                "-H",
                "Authorization: Bearer S3cr3tV4lue",
                "https://api.example/x",
            ],
            &[
                "curl",
                "-H",
                "Authorization: Bearer [REDACTED]",
                "https://api.example/x",
            ],
            "S3cr3tV4lue",
        ),
        f(
            &[
                "curl",
                "--header",
                "X-Api-Key: S3cr3tV4lue",
                "https://api.example/x",
            ],
            &[
                "curl",
                "--header",
                "X-Api-Key: [REDACTED]",
                "https://api.example/x",
            ],
            "S3cr3tV4lue",
        ),
        f(
            &["mysql", "-u", "root", "-p", "S3cr3tV4lue", "db"],
            &["mysql", "-u", "root", "-p", "[REDACTED]", "db"],
            "S3cr3tV4lue",
        ),
        f(
            &["mysql", "-u", "root", "-pS3cr3tV4lue", "db"],
            &["mysql", "-u", "root", "-p[REDACTED]", "db"],
            "S3cr3tV4lue",
        ),
        f(
            &["app", "--pw=S3cr3tV4lue"],
            &["app", "--pw=[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["app", "--privkey=S3cr3tV4lue"],
            &["app", "--privkey=[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["app", "--jwt=S3cr3tV4lue"],
            &["app", "--jwt=[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["app", "--session=S3cr3tV4lue"],
            &["app", "--session=[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["app", "--creds=S3cr3tV4lue"],
            &["app", "--creds=[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["app", "--bearer", "S3cr3tV4lue"],
            &["app", "--bearer", "[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["app", "--oauth2=S3cr3tV4lue"],
            &["app", "--oauth2=[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["app", "--tok=S3cr3tV4lue"],
            &["app", "--tok=[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["app", "--license", "S3cr3tV4lue"],
            &["app", "--license", "[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["app", "--db-password:S3cr3tV4lue"],
            &["app", "--db-password:[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &[
                "wget",
                "https://api.example/v1/x?access_token=S3cr3tV4lue&page=2",
            ],
            &[
                "wget",
                "https://api.example/v1/x?access_token=[REDACTED]&page=2",
            ],
            "S3cr3tV4lue",
        ),
        f(
            &[
                "notify",
                "https://hooks.slack.com/services/T000/B000/S3cr3tV4lue",
            ],
            &["notify", "https://hooks.slack.com/services/[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["curl", "-u", "alice:S3cr3tV4lue", "https://api.example/"],
            &["curl", "-u", "alice:[REDACTED]", "https://api.example/"],
            "S3cr3tV4lue",
        ),
        f(
            &["sshpass", "-p", "S3cr3tV4lue", "ssh", "-p", "2222", "host"],
            &["sshpass", "-p", "[REDACTED]", "ssh", "-p", "2222", "host"],
            "S3cr3tV4lue",
        ),
        f(
            &["mysql", "-h", "alice:S3cr3tV4lue@db.example"],
            &["mysql", "-h", "alice:[REDACTED]@db.example"],
            "S3cr3tV4lue",
        ),
        f(
            &["gh", "api", "--", GHP],
            &["gh", "api", "--", "ghp_[REDACTED]"],
            GHP,
        ),
        f(
            &["app", "--token", "--Xk9+tJw2Lq"],
            &["app", "--token", "[REDACTED]"],
            "Xk9+tJw2Lq",
        ),
    ];

    /// The forms that were already hidden before issue 13 (the earlier tests), kept.
    const HIDDEN_BEFORE: &[Form] = &[
        f(
            &["x", "--token=S3cr3tV4lue"],
            &["x", "--token=[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["x", "--password=S3cr3tV4lue"],
            &["x", "--password=[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["x", "--api-key=S3cr3tV4lue"],
            &["x", "--api-key=[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["x", "--secret=S3cr3tV4lue"],
            &["x", "--secret=[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["x", "--token", "S3cr3tV4lue"],
            &["x", "--token", "[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["x", "--hf-token", "S3cr3tV4lue"],
            &["x", "--hf-token", "[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["x", "--password", "S3cr3tV4lue"],
            &["x", "--password", "[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["x", "--apiKey", "S3cr3tV4lue"],
            &["x", "--apiKey", "[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["x", "--access_key=S3cr3tV4lue"],
            &["x", "--access_key=[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["x", "--db.passwd=S3cr3tV4lue"],
            &["x", "--db.passwd=[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["x", "-secret=S3cr3tV4lue"],
            &["x", "-secret=[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["env", "HF_TOKEN=S3cr3tV4lue"],
            &["env", "HF_TOKEN=[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["env", "AWS_SECRET_ACCESS_KEY=S3cr3tV4lue"],
            &["env", "AWS_SECRET_ACCESS_KEY=[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["env", "DB_PASSWORD_FILE=S3cr3tV4lue"],
            &["env", "DB_PASSWORD_FILE=[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["env", "MY_KEY=S3cr3tV4lue"],
            &["env", "MY_KEY=[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &[
                "git",
                "clone",
                "https://user:S3cr3tV4lue@github.com/o/r.git",
            ],
            &["git", "clone", "https://[REDACTED]@github.com/o/r.git"],
            "S3cr3tV4lue",
        ),
        f(
            &["x", "--url=http://S3cr3tV4lue@host:8080/x?q=1"],
            &["x", "--url=http://[REDACTED]@host:8080/x?q=1"],
            "S3cr3tV4lue",
        ),
        f(
            &["sh", "-c", "python t.py --token S3cr3tV4lue --lr 1"],
            &["sh", "-c", "python t.py --token [REDACTED] --lr 1"],
            "S3cr3tV4lue",
        ),
        f(
            &["x", "--secrets", "S3cr3tV4lue"],
            &["x", "--secrets", "[REDACTED]"],
            "S3cr3tV4lue",
        ),
        f(
            &["x", "--githubToken=S3cr3tV4lue"],
            &["x", "--githubToken=[REDACTED]"],
            "S3cr3tV4lue",
        ),
    ];

    /// Further forms: headers as words, token prefixes, URL shapes, per-command short flags.
    const MORE: &[Form] = &[
        f(&["sh", "-c", "curl -H 'Authorization: Bearer S3cr3tV4lue' https://h/"],
          &["sh", "-c", "curl -H 'Authorization: Bearer [REDACTED]' https://h/"], "S3cr3tV4lue"),
        f(&["curl", "-H", "Cookie: session=S3cr3tV4lue"], &["curl", "-H", "Cookie: [REDACTED]"], "S3cr3tV4lue"),
        f(&["curl", "-H", "Private-Token:S3cr3tV4lue"], &["curl", "-H", "Private-Token:[REDACTED]"], "S3cr3tV4lue"),
        f(&["curl", "--header=X-Auth-Token:S3cr3tV4lue"], &["curl", "--header=X-Auth-Token:[REDACTED]"], "S3cr3tV4lue"),
        f(&["curl", "--user=alice:S3cr3tV4lue"], &["curl", "--user=alice:[REDACTED]"], "S3cr3tV4lue"),
        f(&["curl", "-ualice:S3cr3tV4lue"], &["curl", "-ualice:[REDACTED]"], "S3cr3tV4lue"),
        f(&["redis-cli", "-p", "6380", "-a", "S3cr3tV4lue"], &["redis-cli", "-p", "6380", "-a", "[REDACTED]"], "S3cr3tV4lue"),
        f(&["mosquitto_pub", "-p", "1883", "-P", "S3cr3tV4lue"], &["mosquitto_pub", "-p", "1883", "-P", "[REDACTED]"], "S3cr3tV4lue"),
        f(&["7z", "x", "-pS3cr3tV4lue", "a.7z"], &["7z", "x", "-p[REDACTED]", "a.7z"], "S3cr3tV4lue"),
        f(&["openssl", "enc", "-pass", "pass:S3cr3tV4lue"], &["openssl", "enc", "-pass", "[REDACTED]"], "S3cr3tV4lue"),
        f(&["java", "-Djavax.net.ssl.keyStorePassword=S3cr3tV4lue", "-jar", "a.jar"],
          &["java", "-Djavax.net.ssl.keyStorePassword=[REDACTED]", "-jar", "a.jar"], "S3cr3tV4lue"),
        f(&["tool", "-p", "S3cr3tV4lue"], &["tool", "-p", "[REDACTED]"], "S3cr3tV4lue"),
        f(&["tool", "-pS3cr3tV4lue"], &["tool", "-p[REDACTED]"], "S3cr3tV4lue"),
        f(&["notify", "https://discord.com/api/webhooks/123456/S3cr3tV4lue"],
          &["notify", "https://discord.com/api/webhooks/[REDACTED]"], "S3cr3tV4lue"),
        f(&["notify", "https://api.telegram.org/bot123456:S3cr3tV4lue/sendMessage"],
          &["notify", "https://api.telegram.org/bot[REDACTED]/sendMessage"], "S3cr3tV4lue"),
        f(&["aws", "s3", "cp", "https://b.s3.amazonaws.com/o?X-Amz-Credential=AK%2F1&X-Amz-Signature=S3cr3tV4lue"],
          &["aws", "s3", "cp", "https://b.s3.amazonaws.com/o?X-Amz-Credential=[REDACTED]&X-Amz-Signature=[REDACTED]"], "S3cr3tV4lue"),
        f(&["az", "--connection-string", "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=S3cr3tV4lue"],
          &["az", "--connection-string", "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=[REDACTED]"], "S3cr3tV4lue"),
        f(&["app", "--opts=lr=1,api_token=S3cr3tV4lue"], &["app", "--opts=lr=1,api_token=[REDACTED]"], "S3cr3tV4lue"),
        f(&["env", "https_proxy=http://u:S3cr3tV4lue@proxy:3128"], &["env", "https_proxy=http://[REDACTED]@proxy:3128"], "S3cr3tV4lue"),
        f(&["psql", "postgres://app:S3cr3tV4lue@db/x"], &["psql", "postgres://[REDACTED]@db/x"], "S3cr3tV4lue"),
        f(&["app", "-password", "S3cr3tV4lue"], &["app", "-password", "[REDACTED]"], "S3cr3tV4lue"),
        f(&["app", "--token", "two words"], &["app", "--token", "[REDACTED]"], "two words"),
        f(&["app", JWT], &["app", "[REDACTED]"], "dozjgNryP4J3"),
        f(&["app", "--x=gho_16C7e42F292c6912E7710c838347Ae178B4a"], &["app", "--x=gho_[REDACTED]"], "16C7e42F292c"),
        f(&["app", "github_pat_11ABCDEFG0123456789_abcdefghijklmnop"], &["app", "github_pat_[REDACTED]"], "11ABCDEFG0123456789"),
        f(&["app", "glpat-xY9zA8bC7dE6fG5hI4jK"], &["app", "glpat-[REDACTED]"], "xY9zA8bC7dE6fG5hI4jK"),
        f(&["app", "xoxb-1234567890-abcdefghij"], &["app", "xoxb-[REDACTED]"], "1234567890-abcdefghij"),
        f(&["app", "xoxp-1234567890-abcdefghij"], &["app", "xoxp-[REDACTED]"], "1234567890-abcdefghij"),
        f(&["app", "AKIAIOSFODNN7EXAMPLE"], &["app", "AKIA[REDACTED]"], "IOSFODNN7EXAMPLE"),
        f(&["app", "ASIAIOSFODNN7EXAMPLE"], &["app", "ASIA[REDACTED]"], "IOSFODNN7EXAMPLE"),
        f(&["app", "sk-proj-abc123DEF456ghi789JKL"], &["app", "sk-[REDACTED]"], "abc123DEF456"),
        f(&["app", "sk_live_51Habcdefghij"], &["app", "sk_live_[REDACTED]"], "51Habcdefghij"),
        f(&["app", "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ012345"], &["app", "hf_[REDACTED]"], "aBcDeFgHiJkLmNoPqRsT"),
        f(&["docker", "login", "-u", "bot", "-p", "S3cr3tV4lue", "registry.example"],
          &["docker", "login", "-u", "bot", "-p", "[REDACTED]", "registry.example"], "S3cr3tV4lue"),
        f(&["ssh-keygen", "-t", "ed25519", "-N", "S3cr3tV4lue", "-f", "k"],
          &["ssh-keygen", "-t", "ed25519", "-N", "[REDACTED]", "-f", "k"], "S3cr3tV4lue"),
        f(&["git", "config", "--global", "user.password", "S3cr3tV4lue"],
          &["git", "config", "--global", "user.password", "[REDACTED]"], "S3cr3tV4lue"),
        f(&["aws", "configure", "set", "aws_secret_access_key", "S3cr3tV4lue"],
          &["aws", "configure", "set", "aws_secret_access_key", "[REDACTED]"], "S3cr3tV4lue"),
        f(&["sh", "-c", "echo ghp_16C7e42F292c6912E7710c838347Ae178B4a | gh auth login --with-token"],
          &["sh", "-c", "echo ghp_[REDACTED] | gh auth login --with-token"], "16C7e42F292c"),
    ];

    fn check(forms: &[Form]) {
        for form in forms {
            let got = r(form.args);
            assert_eq!(got, form.want, "input {:?}", form.args);
            assert!(
                got.iter().all(|a| !a.contains(form.secret)),
                "{:?} leaks {:?}",
                got,
                form.secret
            );
            assert_eq!(
                redact_cmdline(&got),
                got,
                "not idempotent on {:?}",
                form.args
            );
        }
    }

    #[test]
    fn the_twenty_forms_that_leaked_are_hidden() {
        assert!(LEAKED_BEFORE.len() >= 20);
        check(LEAKED_BEFORE);
    }

    #[test]
    fn the_forms_hidden_before_stay_hidden() {
        assert_eq!(HIDDEN_BEFORE.len(), 20);
        check(HIDDEN_BEFORE);
    }

    #[test]
    fn headers_urls_short_flags_and_token_prefixes() {
        check(MORE);
    }

    #[test]
    fn short_p_is_a_port_or_switch_for_commands_that_say_so() {
        let harmless: &[&[&str]] = &[
            &["ssh", "-p", "2222", "host"],
            &["ssh", "-p2222", "host"],
            &["scp", "-p", "-P", "2222", "a", "h:b"],
            &["psql", "-h", "db", "-p", "5432", "-U", "app"],
            &["redis-cli", "-p", "6380"],
            &["docker", "run", "-p", "8080:80", "nginx"],
            &[
                "docker",
                "run",
                "-p",
                "8080:80",
                "-v",
                "/data/tokenizer_config.json:/c.json",
                "img",
            ],
            &[
                "python",
                "train.py",
                "--config",
                "conf/model_tokenizer.yaml",
                "--out",
                "/o",
            ],
            &["mkdir", "-p", "run/out"],
            &["strace", "-p", "4242"],
            &["patch", "-p1"],
            // Unknown commands: a number is a port or pid, a path a directory.
            &["tool", "-p", "8080"],
            &["tool", "-p", "/var/run/x"],
            &["tool", "-p", "-v"],
            &["tool", "-p0"],
        ];
        for args in harmless {
            assert_eq!(r(args), *args);
        }
        // The same words hidden where `-p` is a password.
        assert_eq!(
            r(&["sshpass", "-p", "2222"]),
            ["sshpass", "-p", "[REDACTED]"]
        );
        assert_eq!(r(&["mysql", "-p8080"]), ["mysql", "-p[REDACTED]"]);
        assert_eq!(r(&["tool", "-p", "run/out"]), ["tool", "-p", "[REDACTED]"]);
        // The command can change inside one argv (`sudo`, `timeout`, wrappers).
        assert_eq!(
            r(&[
                "sudo",
                "/usr/bin/sshpass",
                "-p",
                "hunter2",
                "ssh",
                "-p",
                "22",
                "h"
            ]),
            [
                "sudo",
                "/usr/bin/sshpass",
                "-p",
                "[REDACTED]",
                "ssh",
                "-p",
                "22",
                "h"
            ]
        );
    }

    #[test]
    fn harmless_arguments_survive() {
        let harmless: &[&[&str]] = &[
            &[
                "python",
                "-m",
                "torch.distributed.run",
                "--nproc-per-node=8",
                "--keyboard",
                "x",
                "train.py",
            ],
            &[
                "vllm",
                "serve",
                "meta-llama/Llama-3-8B",
                "--tokenizer",
                "meta-llama/Llama-3-8B",
                "--max-tokens",
                "128",
            ],
            &[
                "gen",
                "--max_new_tokens",
                "256",
                "--pad-token-id",
                "0",
                "--tokenizer-mode=auto",
                "--num-tokens=4",
            ],
            &["x", "--use-auth-token", "--model", "m"],
            &["x", "--no-auth", "serve.py"],
            &[
                "x",
                "--lr=0.1",
                "--epochs",
                "3",
                "--data",
                "/data/a=b/key.bin",
            ],
            &["git", "clone", "git@github.com:o/r.git"],
            &[
                "curl",
                "-H",
                "Content-Type: application/json",
                "https://h/x?page=2&q=cat",
            ],
            &["curl", "-u", "alice", "https://h/"],
            &["docker", "run", "-u", "1000:1000", "img@sha256:0123abcd"],
            &["pull", "registry/img:1.2@sha256:0123abcd"],
            &["mail", "alice@example.com"],
            &[
                "x",
                "https://host/a@b",
                "https://api.github.com/repos/o/r/hooks",
            ],
            &[
                "pip",
                "install",
                "scikit-learn",
                "sk-learn-helpers",
                "task-abcdefghijklmnopqrstuvw",
            ],
            &["x", "AKIAIOSFODNN7EXAMPLEX"],
            &["x", "--model", "ghp_short"],
            &["sh", "-c", "python  train.py\t--lr 1"],
            &["x", "üñí©ødé", "--name=ĉu", "--"],
        ];
        for args in harmless {
            assert_eq!(r(args), *args);
        }
    }

    #[test]
    fn url_and_text_helpers() {
        assert_eq!(
            redact_urls("no creds https://host/a@b"),
            "no creds https://host/a@b"
        );
        assert_eq!(
            redact_urls("a://x:y@h b://p:q@i"),
            "a://[REDACTED]@h b://[REDACTED]@i"
        );
        assert_eq!(
            redact_text("POST https://hooks.slack.com/services/T0/B0/XYZ with Bearer abc"),
            "POST https://hooks.slack.com/services/[REDACTED] with Bearer [REDACTED]"
        );
    }

    #[test]
    fn mysql_attached_password_with_equals_is_hidden_and_stable() {
        let args: Vec<String> = vec!["mysql".into(), "-pA=AaA++A_=0A".into()];
        let out = redact_cmdline(&args);
        assert!(out.iter().all(|a| !a.contains("A=AaA++A_=0A")), "{out:?}");
        assert_eq!(redact_cmdline(&out), out, "{out:?}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// Random secrets in each context that must hide them: none survives, the arity is kept, twice is once.
        #[test]
        fn random_secrets_never_survive(
            secret in "[A-Za-z0-9_+/=.-]{12,40}",
            form in 0usize..9,
            before in proptest::collection::vec("[a-z./]{1,8}", 0..3),
        ) {
            proptest::prop_assume!(!secret.starts_with('-'));
            let tail: Vec<String> = match form {
                0 => vec!["mysql".into(), format!("-p{secret}")],
                1 => vec!["sshpass".into(), "-p".into(), secret.clone()],
                2 => vec!["curl".into(), "-H".into(), format!("Authorization: Bearer {secret}")],
                3 => vec!["curl".into(), "--header".into(), format!("X-Api-Key: {secret}")],
                4 => vec!["curl".into(), "-u".into(), format!("alice:{secret}")],
                5 => vec![format!("https://h.example/x?access_token={secret}&a=1")],
                6 => vec![format!("alice:{secret}@db.example")],
                7 => vec!["sh".into(), "-c".into(), format!("tool --session {secret} --lr 1")],
                _ => vec![format!("https://hooks.slack.com/services/T0/B0/{secret}")],
            };
            let mut args = before.clone();
            args.extend(tail);
            let out = redact_cmdline(&args);
            proptest::prop_assert_eq!(out.len(), args.len());
            proptest::prop_assert!(out[before.len()..].iter().all(|a| !a.contains(&secret)), "{:?}", out);
            proptest::prop_assert_eq!(redact_cmdline(&out), out.clone());
        }

        /// Bare tokens by prefix, with random bodies of their real length.
        #[test]
        fn random_prefixed_tokens_never_survive(
            prefix in proptest::sample::select(vec!["ghp_", "gho_", "ghs_", "ghr_", "glpat-", "xoxb-", "xoxp-", "hf_", "sk-proj-"]),
            body in "[A-Za-z0-9]{36}",
            digit in 0u8..10,
        ) {
            let token = format!("{prefix}{body}{digit}");
            let out = redact_cmdline(&["run".to_string(), format!("--model={token}"), token.clone()]);
            proptest::prop_assert!(out.iter().all(|a| !a.contains(&body)), "{:?}", out);
        }
    }

    #[test]
    fn redaction_is_idempotent_and_total_on_odd_text() {
        let odd: &[&str] = &[
            "",
            "-",
            "--",
            "=",
            ":",
            "@",
            "://",
            "a:@",
            ":b@c",
            "--=",
            "-=",
            "'",
            "\"\"",
            "-p",
            "--token",
            "Authorization:",
            "Authorization: ",
            "Bearer",
            "x=",
            "?a=&b",
            "eyJ",
            "ghp_",
            "é:é@é",
            "--é=é",
            "-é",
            "https://é@",
            "bot:",
            "a://b/webhooks/",
            " \t ",
            // Shapes of the inputs the fuzzer found not idempotent (fuzz/regressions/redact.*).
            "://c:?:?@:x",
            "c:?:?@:x",
            "a=b:c@d",
            "x=u:p=q@h",
            "-pA=B",
            "http]s://t:x?acen@=t&x=psp@h/x",
            "Authorization: Bearer",
            "key: key:",
            "x::?sig=x:x?:x",
        ];
        for a in odd {
            for b in odd {
                let args = vec![a.to_string(), b.to_string()];
                let once = redact_cmdline(&args);
                assert_eq!(redact_cmdline(&once), once, "{args:?}");
                let text = format!("{a} {b}");
                let once = redact_text(&text);
                assert_eq!(redact_text(&once), once, "{text:?}");
            }
        }
    }
}
