//! One check's result (`doctor`'s rows): a leaf that the checks of every room (the host, privileges, the
//! fleet) build their rows with.

use serde::Serialize;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
    Info,
}

/// One check: what was found and, when something is wrong, the fix.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub detail: String,
    /// Empty when there is nothing to fix.
    pub fix: String,
}

/// A check row.
pub(super) fn check(
    name: &str,
    status: Status,
    detail: impl Into<String>,
    fix: impl Into<String>,
) -> Check {
    Check {
        name: name.to_string(),
        status,
        detail: detail.into(),
        fix: fix.into(),
    }
}
