//! Retention: keep the incident directory within a count, a size and a free-space floor, without losing a wedge.
//!
//! Rules, in the order [`plan`] applies them (ids start with the UTC time, so name order is age order):
//! 1. Never removed: an incident whose writer is alive (its `.in-progress` marker is flock-ed: the episode is still
//!    followed), and a wedge incident younger than [`Retention::protect_wedges_for_s`].
//! 2. On-demand incidents (`trigger` = `on_demand`, the agent's SIGUSR1) beyond [`Retention::max_on_demand`] go
//!    first, oldest first: a signal storm only ever displaces other on-demand captures.
//! 3. While the store is over its byte limit or the filesystem under its free-space floor, on-demand incidents go
//!    before any wedge incident, oldest first; then wedge incidents past the floor, oldest first, but only for the
//!    pressure wedges cause themselves (an on-demand capture still in progress is counted as gone).
//! 4. [`Retention::max_incidents`] counts wedge incidents only (on-demand ones have their own cap).
//!
//! Every removal comes back as a [`Removal`] with the limit that caused it, for the caller's log. A removal first
//! renames the directory to a temp name, so a reader never sees a half-removed incident.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A day: how long a wedge incident is kept whatever the limits say.
pub const DEFAULT_PROTECT_WEDGES_FOR_S: u64 = 24 * 3600;

/// Limits; None disables one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retention {
    /// Keep at most this many wedge incidents (not counting on-demand ones).
    pub max_incidents: Option<usize>,
    /// Keep the incidents' total size at most this many bytes.
    pub max_total_bytes: Option<u64>,
    /// Remove old incidents while the filesystem has less than this many bytes available.
    pub min_free_bytes: Option<u64>,
    /// Keep at most this many on-demand incidents; they are removed before any wedge incident.
    pub max_on_demand: Option<usize>,
    /// A wedge incident younger than this many seconds is never removed (None: no such floor).
    pub protect_wedges_for_s: Option<u64>,
}

impl Retention {
    /// Default limits: 100 wedge incidents, 20 on-demand ones, 2 GiB, 1 GiB free, wedges kept at least 24 h.
    pub const DEFAULT: Retention = Retention {
        max_incidents: Some(100),
        max_total_bytes: Some(2 << 30),
        min_free_bytes: Some(1 << 30),
        max_on_demand: Some(20),
        protect_wedges_for_s: Some(DEFAULT_PROTECT_WEDGES_FOR_S),
    };

    /// Never remove anything.
    pub const UNLIMITED: Retention = Retention {
        max_incidents: None,
        max_total_bytes: None,
        min_free_bytes: None,
        max_on_demand: None,
        protect_wedges_for_s: None,
    };

    fn wedge_floor(&self) -> Option<Duration> {
        self.protect_wedges_for_s.map(Duration::from_secs)
    }
}

impl Default for Retention {
    fn default() -> Self {
        Retention::DEFAULT
    }
}

/// Which limit made retention remove an incident.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "limit")]
pub enum RemovalReason {
    /// More on-demand incidents than `max_on_demand`.
    OnDemandCap { max: usize },
    /// More wedge incidents than `max_incidents`.
    Count { max: usize },
    /// The store's total size over `max_total_bytes`.
    Bytes { total: u64, max: u64 },
    /// The filesystem had `free` bytes available, under `min`.
    FreeSpace { free: u64, min: u64 },
}

impl fmt::Display for RemovalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemovalReason::OnDemandCap { max } => {
                write!(f, "more than {max} on-demand incidents (max_on_demand)")
            }
            RemovalReason::Count { max } => {
                write!(f, "more than {max} wedge incidents (max_incidents)")
            }
            RemovalReason::Bytes { total, max } => write!(
                f,
                "incidents take {} (max_total_bytes {})",
                crate::render::bytes(*total),
                crate::render::bytes(*max)
            ),
            RemovalReason::FreeSpace { free, min } => write!(
                f,
                "{} free on the output filesystem (min_free_bytes {})",
                crate::render::bytes(*free),
                crate::render::bytes(*min)
            ),
        }
    }
}

/// One incident retention removed, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removal {
    pub id: String,
    /// Whether it was an on-demand capture (not a detected wedge).
    pub on_demand: bool,
    pub bytes: u64,
    pub reason: RemovalReason,
}

impl fmt::Display for Removal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "retention removed {} incident {} ({}): {}",
            if self.on_demand { "on-demand" } else { "wedge" },
            self.id,
            crate::render::bytes(self.bytes),
            self.reason
        )
    }
}

/// An incident as retention sees it.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub id: String,
    pub bytes: u64,
    /// Its writer holds the marker: the episode is still followed (or the capture is under way).
    pub in_progress: bool,
    /// `trigger` = on_demand in its incident.json.
    pub on_demand: bool,
    /// Time since detection; None when unknown (treated as new: a wedge of unknown age is kept).
    pub age: Option<Duration>,
}

/// The removals, given `candidates` sorted oldest first. `free_bytes` is the space available now; removing an
/// incident is assumed to free its size.
pub(crate) fn plan(
    candidates: &[Candidate],
    limits: &Retention,
    free_bytes: Option<u64>,
) -> Vec<Removal> {
    let removable = |c: &Candidate| {
        !c.in_progress
            && (c.on_demand
                || limits
                    .wedge_floor()
                    .is_none_or(|floor| c.age.is_some_and(|age| age >= floor)))
    };
    let mut gone = vec![false; candidates.len()];
    let mut removals = Vec::new();
    let mut remove = |i: usize, reason: RemovalReason, gone: &mut Vec<bool>| {
        gone[i] = true;
        removals.push(Removal {
            id: candidates[i].id.clone(),
            on_demand: candidates[i].on_demand,
            bytes: candidates[i].bytes,
            reason,
        });
        candidates[i].bytes
    };
    let mut freed: u64 = 0;

    // 2. The on-demand cap.
    if let Some(max) = limits.max_on_demand {
        let mut count = candidates.iter().filter(|c| c.on_demand).count();
        for (i, c) in candidates.iter().enumerate() {
            if count <= max {
                break;
            }
            if c.on_demand && removable(c) {
                freed += remove(i, RemovalReason::OnDemandCap { max }, &mut gone);
                count -= 1;
            }
        }
    }

    // 4. The wedge count.
    if let Some(max) = limits.max_incidents {
        let mut count = candidates.iter().filter(|c| !c.on_demand).count();
        for (i, c) in candidates.iter().enumerate() {
            if count <= max {
                break;
            }
            if !c.on_demand && removable(c) {
                freed += remove(i, RemovalReason::Count { max }, &mut gone);
                count -= 1;
            }
        }
    }

    // 3. Bytes and free space: on-demand incidents first, then wedges.
    let mut total: u64 = candidates
        .iter()
        .zip(&gone)
        .filter(|(_, g)| !**g)
        .map(|(c, _)| c.bytes)
        .sum();
    let mut free = free_bytes.map(|f| f.saturating_add(freed));
    let pressure = |total: u64, free: Option<u64>| -> Option<RemovalReason> {
        if let Some(max) = limits.max_total_bytes.filter(|&max| total > max) {
            return Some(RemovalReason::Bytes { total, max });
        }
        match (limits.min_free_bytes, free) {
            (Some(min), Some(free)) if free < min => Some(RemovalReason::FreeSpace { free, min }),
            _ => None,
        }
    };
    for on_demand_pass in [true, false] {
        if !on_demand_pass {
            // Wedges go only for pressure that wedges alone cause: the on-demand incidents still there (in
            // progress) are counted as if they were gone, so no wedge ever makes room for one.
            let on_demand_left: u64 = candidates
                .iter()
                .zip(&gone)
                .filter(|(c, g)| c.on_demand && !**g)
                .map(|(c, _)| c.bytes)
                .sum();
            total = total.saturating_sub(on_demand_left);
            free = free.map(|f| f.saturating_add(on_demand_left));
        }
        for (i, c) in candidates.iter().enumerate() {
            let Some(reason) = pressure(total, free) else {
                break;
            };
            if gone[i] || c.on_demand != on_demand_pass || !removable(c) {
                continue;
            }
            remove(i, reason, &mut gone);
            total = total.saturating_sub(c.bytes);
            free = free.map(|f| f.saturating_add(c.bytes));
        }
    }
    removals
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);
    const OLD: Option<Duration> = Some(Duration::from_secs(48 * 3600));

    fn wedge(id: &str, bytes: u64, in_progress: bool) -> Candidate {
        Candidate {
            id: id.into(),
            bytes,
            in_progress,
            on_demand: false,
            age: OLD,
        }
    }

    fn on_demand(id: &str, bytes: u64) -> Candidate {
        Candidate {
            on_demand: true,
            ..wedge(id, bytes, false)
        }
    }

    fn young(mut c: Candidate) -> Candidate {
        c.age = Some(HOUR);
        c
    }

    fn ids(removals: &[Removal]) -> Vec<&str> {
        removals.iter().map(|r| r.id.as_str()).collect()
    }

    #[test]
    fn count_limit_removes_oldest_and_skips_in_progress() {
        let list = [
            wedge("a", 1, true),
            wedge("b", 1, false),
            wedge("c", 1, false),
            wedge("d", 1, false),
        ];
        let limits = Retention {
            max_incidents: Some(2),
            ..Retention::UNLIMITED
        };
        let removals = plan(&list, &limits, None);
        assert_eq!(ids(&removals), ["b", "c"]);
        assert!(removals
            .iter()
            .all(|r| r.reason == RemovalReason::Count { max: 2 }));
    }

    #[test]
    fn byte_and_free_limits() {
        let list = [
            wedge("a", 100, false),
            wedge("b", 100, false),
            wedge("c", 100, false),
        ];
        let bytes = Retention {
            max_total_bytes: Some(150),
            ..Retention::UNLIMITED
        };
        let removals = plan(&list, &bytes, None);
        assert_eq!(ids(&removals), ["a", "b"]);
        assert_eq!(
            removals[0].reason,
            RemovalReason::Bytes {
                total: 300,
                max: 150
            }
        );
        let free = Retention {
            min_free_bytes: Some(1000),
            ..Retention::UNLIMITED
        };
        let removals = plan(&list, &free, Some(850));
        assert_eq!(ids(&removals), ["a", "b"]);
        assert_eq!(
            removals[1].reason,
            RemovalReason::FreeSpace {
                free: 950,
                min: 1000
            }
        );
        assert!(plan(&list, &free, Some(5000)).is_empty());
        assert!(plan(&list, &Retention::UNLIMITED, Some(0)).is_empty());
    }

    /// The storm: 1,000 SIGUSR1 make on-demand incidents; the one real wedge (older than all of them, and
    /// younger than the floor) must survive every limit, and the on-demand ones stay within their cap.
    #[test]
    fn an_on_demand_storm_never_displaces_a_wedge() {
        let mut list = vec![young(wedge("0000-wedge", 5000, false))];
        for i in 0..1000 {
            list.push(on_demand(&format!("{:04}-od", i + 1), 100));
        }
        let removals = plan(&list, &Retention::DEFAULT, Some(10 << 30));
        assert_eq!(removals.len(), 980);
        assert!(removals
            .iter()
            .all(|r| r.on_demand && r.reason == RemovalReason::OnDemandCap { max: 20 }));
        assert_eq!(removals[0].id, "0001-od", "oldest on-demand first");
        // Below the free-space floor, every on-demand incident goes, the young wedge stays.
        let removals = plan(&list, &Retention::DEFAULT, Some(1 << 20));
        assert_eq!(removals.len(), 1000);
        assert!(!ids(&removals).contains(&"0000-wedge"));
        assert!(matches!(
            removals.last().unwrap().reason,
            RemovalReason::FreeSpace { .. }
        ));
    }

    #[test]
    fn under_pressure_on_demand_goes_before_older_wedges_and_young_wedges_stay() {
        let list = [
            wedge("1-old-wedge", 100, false),
            young(wedge("2-young-wedge", 100, false)),
            on_demand("3-od", 100),
            wedge("4-live-wedge", 100, true),
        ];
        let limits = Retention {
            max_total_bytes: Some(250),
            ..Retention::DEFAULT
        };
        let removals = plan(&list, &limits, Some(u64::MAX));
        assert_eq!(ids(&removals), ["3-od", "1-old-wedge"]);
        // Nothing else can go: the young wedge is under the floor and the live one is followed.
        let limits = Retention {
            max_total_bytes: Some(0),
            ..Retention::DEFAULT
        };
        assert_eq!(
            ids(&plan(&list, &limits, Some(u64::MAX))),
            ["3-od", "1-old-wedge"]
        );
        // A wedge of unknown age counts as young.
        let mut unknown = wedge("5-unknown-age", 100, false);
        unknown.age = None;
        assert!(plan(&[unknown], &limits, Some(u64::MAX)).is_empty());
    }

    /// An on-demand capture under way takes the space: no wedge, however old, is removed to make room for it.
    #[test]
    fn no_wedge_makes_room_for_an_on_demand_capture_in_progress() {
        let mut live_on_demand = on_demand("2-od", 1000);
        live_on_demand.in_progress = true;
        let list = [wedge("1-old-wedge", 100, false), live_on_demand];
        let bytes = Retention {
            max_total_bytes: Some(500),
            ..Retention::DEFAULT
        };
        assert!(plan(&list, &bytes, Some(u64::MAX)).is_empty());
        let free = Retention {
            min_free_bytes: Some(1000),
            ..Retention::DEFAULT
        };
        assert!(plan(&list, &free, Some(500)).is_empty());
        // Pressure the wedges cause themselves still removes the old one.
        let strict = Retention {
            min_free_bytes: Some(5000),
            ..Retention::DEFAULT
        };
        assert_eq!(ids(&plan(&list, &strict, Some(500))), ["1-old-wedge"]);
    }

    #[test]
    fn wedge_count_ignores_on_demand_incidents() {
        let list = [
            wedge("1", 1, false),
            on_demand("2", 1),
            on_demand("3", 1),
            wedge("4", 1, false),
        ];
        let limits = Retention {
            max_incidents: Some(2),
            max_on_demand: Some(1),
            ..Retention::UNLIMITED
        };
        let removals = plan(&list, &limits, None);
        assert_eq!(ids(&removals), ["2"]);
        assert_eq!(removals[0].reason, RemovalReason::OnDemandCap { max: 1 });
    }
}
