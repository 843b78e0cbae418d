//! The vocabulary of secrets: which names (of flags, variables, keys, headers) are secret-looking, and the
//! shapes of words (a flag, a number, a path) the judges ask about.

/// Words that make a flag, variable, parameter or header name secret-looking when they appear as a whole word.
pub(super) const SECRET_WORDS: &[&str] = &[
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
pub(super) const SECRET_SUBSTRINGS: &[&str] = &[
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
pub(super) const TOKEN_VOCABULARY_BEFORE: &[&str] = &[
    "pad", "bos", "eos", "unk", "sep", "cls", "mask", "max", "min", "num", "special", "start",
    "end", "stop", "decoder",
];

pub(super) const TOKEN_VOCABULARY_AFTER: &[&str] = &[
    "id", "ids", "type", "types", "len", "length", "count", "limit", "budget", "size", "num",
];

/// First words of a switch: `--use-auth-token`, `--no-auth` take no separate value.
pub(super) const SWITCH_WORDS: &[&str] = &[
    "no", "use", "with", "without", "disable", "enable", "skip", "allow", "ignore", "show",
    "print", "insecure",
];

/// Authentication schemes that come between a header name and the secret (`Authorization: Bearer V`).
pub(super) const AUTH_SCHEMES: &[&str] = &[
    "bearer",
    "basic",
    "digest",
    "token",
    "negotiate",
    "ntlm",
    "apikey",
    "aws4-hmac-sha256",
];

/// A next argument that is a flag rather than a value: `--model`, `--lr=1`, `-v`, `--`.
/// Random text seldom looks like one: a flag name starts lowercase, has short words, few digits, and no digit
/// when it has capitals.
pub(super) fn is_flag_like(word: &str) -> bool {
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

pub(super) fn is_number(word: &str) -> bool {
    !word.is_empty() && word.len() <= 20 && word.bytes().all(|b| b.is_ascii_digit())
}

pub(super) fn is_path(word: &str) -> bool {
    word.starts_with('/')
        || word.starts_with("./")
        || word.starts_with("../")
        || word.starts_with("~/")
}

pub(super) fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-')
}

pub(super) fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// `--use-auth-token`, `--no-auth`: a switch, no value follows.
pub(super) fn is_switch(name: &str) -> bool {
    split_words(name)
        .first()
        .is_some_and(|w| SWITCH_WORDS.contains(&w.as_str()))
}

/// `api-key`, `HF_TOKEN`, `db.password`, `githubToken`, `X-Api-Key`: split into words and look for a secret one.
pub(super) fn is_secret_name(name: &str) -> bool {
    let words = split_words(name);
    words.iter().enumerate().any(|(i, word)| {
        let secret = SECRET_WORDS.contains(&word.as_str())
            || SECRET_SUBSTRINGS.iter().any(|s| word.contains(s));
        secret && !is_token_vocabulary(&words, i)
    })
}

/// `-keyStorePassword`, `-api-key`: a single-dash flag named for what its value is.
pub(super) fn ends_with_secret_word(name: &str) -> bool {
    split_words(name)
        .last()
        .is_some_and(|w| SECRET_WORDS.contains(&w.as_str()))
}

/// `tokenizer`, `max_tokens`, `pad_token_id`: words about tokens of text, not credentials.
pub(super) fn is_token_vocabulary(words: &[String], i: usize) -> bool {
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
pub(super) fn split_words(name: &str) -> Vec<String> {
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
