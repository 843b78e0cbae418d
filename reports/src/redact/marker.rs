//! What a redaction writes in place of a secret: the one marker every judge (words, inline forms, prefixed tokens,
//! structured text) writes, and the fixed point looks for.

/// What replaces a secret.
pub const REDACTED: &str = "[REDACTED]";
