//! Retention: keep the incident directory within a count, a size and a free-space floor.
//!
//! Oldest incidents are removed first (ids start with the UTC time, so name order is age order). An incident whose
//! writer is alive (its `.in-progress` marker is flock-ed) is never removed. A removal first renames the directory
//! to a temp name, so a reader never sees a half-removed incident.

use serde::{Deserialize, Serialize};

/// Limits; None disables one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    /// Keep at most this many incidents.
    pub max_incidents: Option<usize>,
    /// Keep the incidents' total size at most this many bytes.
    pub max_total_bytes: Option<u64>,
    /// Remove old incidents while the filesystem has less than this many bytes available.
    pub min_free_bytes: Option<u64>,
}

impl Retention {
    /// Default limits: 100 incidents, 2 GiB, 1 GiB free.
    pub const DEFAULT: Retention = Retention {
        max_incidents: Some(100),
        max_total_bytes: Some(2 << 30),
        min_free_bytes: Some(1 << 30),
    };

    /// Never remove anything.
    pub const UNLIMITED: Retention = Retention {
        max_incidents: None,
        max_total_bytes: None,
        min_free_bytes: None,
    };
}

impl Default for Retention {
    fn default() -> Self {
        Retention::DEFAULT
    }
}

/// An incident as retention sees it.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub id: String,
    pub bytes: u64,
    pub in_progress: bool,
}

/// The ids to remove, oldest first, given `candidates` sorted oldest first. `free_bytes` is the space available
/// now; removing an incident is assumed to free its size.
pub(crate) fn plan(
    candidates: &[Candidate],
    limits: &Retention,
    free_bytes: Option<u64>,
) -> Vec<String> {
    let mut count = candidates.len();
    let mut total: u64 = candidates.iter().map(|c| c.bytes).sum();
    let mut free = free_bytes;
    let mut remove = Vec::new();
    for candidate in candidates {
        let over_count = limits.max_incidents.is_some_and(|max| count > max);
        let over_bytes = limits.max_total_bytes.is_some_and(|max| total > max);
        let under_free = matches!((limits.min_free_bytes, free), (Some(min), Some(f)) if f < min);
        if !(over_count || over_bytes || under_free) {
            break;
        }
        if candidate.in_progress {
            continue;
        }
        remove.push(candidate.id.clone());
        count -= 1;
        total = total.saturating_sub(candidate.bytes);
        free = free.map(|f| f.saturating_add(candidate.bytes));
    }
    remove
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: &str, bytes: u64, in_progress: bool) -> Candidate {
        Candidate {
            id: id.into(),
            bytes,
            in_progress,
        }
    }

    #[test]
    fn count_limit_removes_oldest_and_skips_in_progress() {
        let list = [
            c("a", 1, true),
            c("b", 1, false),
            c("c", 1, false),
            c("d", 1, false),
        ];
        let limits = Retention {
            max_incidents: Some(2),
            ..Retention::UNLIMITED
        };
        assert_eq!(plan(&list, &limits, None), ["b", "c"]);
    }

    #[test]
    fn byte_and_free_limits() {
        let list = [c("a", 100, false), c("b", 100, false), c("c", 100, false)];
        let bytes = Retention {
            max_total_bytes: Some(150),
            ..Retention::UNLIMITED
        };
        assert_eq!(plan(&list, &bytes, None), ["a", "b"]);
        let free = Retention {
            min_free_bytes: Some(1000),
            ..Retention::UNLIMITED
        };
        assert_eq!(plan(&list, &free, Some(850)), ["a", "b"]);
        assert!(plan(&list, &free, Some(5000)).is_empty());
        assert!(plan(&list, &Retention::UNLIMITED, Some(0)).is_empty());
    }
}
