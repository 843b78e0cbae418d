//! Retention: keep the incident directory within a count, a size and a free-space floor, without losing a wedge
//! to anything but the byte quota, and then only another one of the same process tree first.
//!
//! Rules, in the order [`plan`] applies them (ids start with the UTC time, so name order is age order):
//! 1. Protected from rules 2–4: an incident whose writer is alive (its `.in-progress` marker is flock-ed: the
//!    episode is still followed), and a wedge incident younger than [`Retention::protect_wedges_for_s`].
//! 2. On-demand incidents (`trigger` = `on_demand`, the agent's SIGUSR1) beyond [`Retention::max_on_demand`] go
//!    first, oldest first: a signal storm only ever displaces other on-demand captures.
//! 3. While the store is over its byte limit or the filesystem under its free-space floor, on-demand incidents go
//!    before any wedge incident, oldest first; then wedge incidents past the floor, oldest first, but only for the
//!    pressure wedges cause themselves (an on-demand capture still in progress is counted as gone).
//! 4. [`Retention::max_incidents`] counts wedge incidents only (on-demand ones have their own cap).
//! 5. **The byte quota** ([`Retention::max_total_bytes`]) holds even for wedges younger than the floor: while the
//!    store is still over it, incidents go whatever their age, oldest first, in this order: (a) one of a process
//!    tree ([`Candidate::tree`]: its cgroup) that has a newer incident in the store, writer gone; (b) the same with
//!    its writer alive — the quota must hold, so the writer loses it: its next write fails with
//!    [`crate::Error::Dropped`], which says so; (c) the newest incident of its tree, writer gone. The newest
//!    incident of a tree whose writer is alive is never removed: one tenant's wedges displace its own older ones
//!    first and never the episode another tenant's writer is following. The quota can thus be exceeded only by
//!    one live incident per tree, each within the store's per-incident budget
//!    ([`crate::layout::MAX_INCIDENT_BYTES`]).
//!
//! Every removal comes back as a [`Removal`] with the limit that caused it, for the caller's log (the store also
//! appends it to `dropped.json`). A removal first renames the directory to a temp name, so a reader never sees a
//! half-removed incident.

use std::collections::HashMap;
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
    /// Keep the incidents' total size at most this many bytes: the quota (rule 5 of the module docs), which
    /// holds for young wedges too.
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
    /// The store's total size over `max_total_bytes` once rules 2–4 were done: the quota, which holds for young
    /// wedges too (rule 5). `newest_of_tree`: it was the newest incident of its process tree.
    Quota {
        total: u64,
        max: u64,
        newest_of_tree: bool,
    },
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
                crate::text::bytes(*total),
                crate::text::bytes(*max)
            ),
            RemovalReason::FreeSpace { free, min } => write!(
                f,
                "{} free on the output filesystem (min_free_bytes {})",
                crate::text::bytes(*free),
                crate::text::bytes(*min)
            ),
            RemovalReason::Quota {
                total,
                max,
                newest_of_tree,
            } => write!(
                f,
                "incidents take {}, over the store's quota (max_total_bytes {}, held for young wedges too){}",
                crate::text::bytes(*total),
                crate::text::bytes(*max),
                if *newest_of_tree {
                    "; it was the newest of its process tree, and only older incidents were left to remove"
                } else {
                    "; its process tree has a newer incident, which is kept"
                }
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
    /// Its process tree ([`Candidate::tree`]).
    #[serde(default)]
    pub tree: String,
    /// Its writer was still writing it (only the quota removes such an incident, rule 5b).
    #[serde(default)]
    pub writer_live: bool,
}

impl fmt::Display for Removal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "retention removed {} incident {} ({}, process tree {}{}): {}",
            if self.on_demand { "on-demand" } else { "wedge" },
            self.id,
            crate::text::bytes(self.bytes),
            self.tree,
            if self.writer_live {
                ", its writer still following it"
            } else {
                ""
            },
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
    /// Its process tree: the cgroup of its process (a tenant cannot put its processes into another's cgroup),
    /// else the process itself (`process:<pid>:<start time>`), else the incident alone.
    pub tree: String,
}

/// The removals, given `candidates` sorted oldest first. `free_bytes` is the space available now; removing an
/// incident is assumed to free its size.
pub(crate) fn plan(
    candidates: &[Candidate],
    limits: &Retention,
    free_bytes: Option<u64>,
) -> Vec<Removal> {
    let mut planner = Planner {
        candidates,
        limits,
        gone: vec![false; candidates.len()],
        removals: Vec::new(),
        freed: 0,
    };
    planner.on_demand_cap();
    planner.wedge_count();
    planner.bytes_and_free_space(free_bytes);
    planner.quota();
    planner.removals
}

/// The rules of [`plan`] applied one after the other to the same candidates: each rule is one method, and every
/// removal goes through [`Planner::remove`].
struct Planner<'a> {
    candidates: &'a [Candidate],
    limits: &'a Retention,
    /// `gone[i]`: candidate `i` is removed already.
    gone: Vec<bool>,
    removals: Vec<Removal>,
    /// Bytes the removals so far free.
    freed: u64,
}

impl Planner<'_> {
    /// Rule 1: never an incident in progress, never a wedge under the floor (on-demand incidents have none).
    fn removable(&self, c: &Candidate) -> bool {
        !c.in_progress
            && (c.on_demand
                || self
                    .limits
                    .wedge_floor()
                    .is_none_or(|floor| c.age.is_some_and(|age| age >= floor)))
    }

    fn remove(&mut self, i: usize, reason: RemovalReason) {
        let c = &self.candidates[i];
        self.gone[i] = true;
        self.removals.push(Removal {
            id: c.id.clone(),
            on_demand: c.on_demand,
            bytes: c.bytes,
            reason,
            tree: c.tree.clone(),
            writer_live: c.in_progress,
        });
        self.freed += c.bytes;
    }

    /// Rule 2: the on-demand cap.
    fn on_demand_cap(&mut self) {
        if let Some(max) = self.limits.max_on_demand {
            self.cap(true, max, RemovalReason::OnDemandCap { max });
        }
    }

    /// Rule 4: the wedge count.
    fn wedge_count(&mut self) {
        if let Some(max) = self.limits.max_incidents {
            self.cap(false, max, RemovalReason::Count { max });
        }
    }

    /// At most `max` incidents of the kind (`on_demand` or wedges), the oldest removable ones going first.
    fn cap(&mut self, on_demand: bool, max: usize, reason: RemovalReason) {
        let candidates = self.candidates;
        let mut count = candidates
            .iter()
            .filter(|c| c.on_demand == on_demand)
            .count();
        for (i, c) in candidates.iter().enumerate() {
            if count <= max {
                break;
            }
            if c.on_demand == on_demand && self.removable(c) {
                self.remove(i, reason);
                count -= 1;
            }
        }
    }

    /// Bytes of the candidates not yet removed (the on-demand ones alone when `on_demand_only`).
    fn bytes_left(&self, on_demand_only: bool) -> u64 {
        self.candidates
            .iter()
            .zip(&self.gone)
            .filter(|(c, g)| !**g && (!on_demand_only || c.on_demand))
            .map(|(c, _)| c.bytes)
            .sum()
    }

    /// The byte limit or the free-space floor broken at `total` bytes kept and `free` bytes free, if one is.
    fn pressure(&self, total: u64, free: Option<u64>) -> Option<RemovalReason> {
        if let Some(max) = self.limits.max_total_bytes.filter(|&max| total > max) {
            return Some(RemovalReason::Bytes { total, max });
        }
        match (self.limits.min_free_bytes, free) {
            (Some(min), Some(free)) if free < min => Some(RemovalReason::FreeSpace { free, min }),
            _ => None,
        }
    }

    /// Rule 3: bytes and free space, on-demand incidents first, then wedges.
    fn bytes_and_free_space(&mut self, free_bytes: Option<u64>) {
        let candidates = self.candidates;
        let mut total = self.bytes_left(false);
        let mut free = free_bytes.map(|f| f.saturating_add(self.freed));
        for on_demand_pass in [true, false] {
            if !on_demand_pass {
                // Wedges go only for pressure that wedges alone cause: the on-demand incidents still there (in
                // progress) are counted as if they were gone, so no wedge ever makes room for one.
                let on_demand_left = self.bytes_left(true);
                total = total.saturating_sub(on_demand_left);
                free = free.map(|f| f.saturating_add(on_demand_left));
            }
            for (i, c) in candidates.iter().enumerate() {
                let Some(reason) = self.pressure(total, free) else {
                    break;
                };
                if self.gone[i] || c.on_demand != on_demand_pass || !self.removable(c) {
                    continue;
                }
                self.remove(i, reason);
                total = total.saturating_sub(c.bytes);
                free = free.map(|f| f.saturating_add(c.bytes));
            }
        }
    }

    /// Rule 5: the quota, whatever the incidents' age: older incidents of a tree before its newest; a live writer's
    /// incident only when it is not its tree's newest. On-demand incidents first; as in rule 3, those still there
    /// (in progress) are not charged to the wedges.
    fn quota(&mut self) {
        let Some(max) = self.limits.max_total_bytes else {
            return;
        };
        let candidates = self.candidates;
        let mut newest: HashMap<&str, usize> = HashMap::new();
        for (i, c) in candidates.iter().enumerate() {
            if !self.gone[i] {
                newest.insert(c.tree.as_str(), i);
            }
        }
        for on_demand_pass in [true, false] {
            let mut total = self.bytes_left(false);
            if !on_demand_pass {
                total = total.saturating_sub(self.bytes_left(true));
            }
            let steps = [(false, false), (false, true), (true, false)];
            for (newest_of_tree, live) in steps {
                for (i, c) in candidates.iter().enumerate() {
                    if total <= max {
                        break;
                    }
                    let is_newest = newest.get(c.tree.as_str()) == Some(&i);
                    if self.gone[i]
                        || c.on_demand != on_demand_pass
                        || is_newest != newest_of_tree
                        || c.in_progress != live
                    {
                        continue;
                    }
                    let reason = RemovalReason::Quota {
                        total,
                        max,
                        newest_of_tree,
                    };
                    self.remove(i, reason);
                    total = total.saturating_sub(c.bytes);
                }
            }
        }
    }
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
            tree: format!("process:{id}"),
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
        // Under the free-space floor nothing else can go: the young wedge is under the age floor and the live one
        // is followed.
        let floor = Retention {
            min_free_bytes: Some(u64::MAX),
            ..Retention::DEFAULT
        };
        assert_eq!(ids(&plan(&list, &floor, Some(0))), ["3-od", "1-old-wedge"]);
        // A wedge of unknown age counts as young.
        let mut unknown = wedge("5-unknown-age", 100, false);
        unknown.age = None;
        assert!(plan(&[unknown.clone()], &floor, Some(0)).is_empty());
        // The byte quota holds for young wedges too; the newest incident of a tree whose writer is alive stays.
        let quota = Retention {
            max_total_bytes: Some(0),
            ..Retention::DEFAULT
        };
        let removals = plan(&list, &quota, Some(u64::MAX));
        assert_eq!(ids(&removals), ["3-od", "1-old-wedge", "2-young-wedge"]);
        assert!(matches!(
            removals[2].reason,
            RemovalReason::Quota {
                newest_of_tree: true,
                ..
            }
        ));
        assert_eq!(
            ids(&plan(&[unknown], &quota, Some(u64::MAX))),
            ["5-unknown-age"]
        );
    }

    fn in_tree(mut c: Candidate, tree: &str) -> Candidate {
        c.tree = tree.to_string();
        young(c)
    }

    /// Issue 35: five wedged processes of one tenant fill the store within minutes (all younger than the age
    /// floor). The quota holds: the tenant's older incidents go first, its live ones before another tenant's
    /// finished newest one, and the newest of every tree whose writer is alive stays.
    #[test]
    fn the_quota_holds_for_young_wedges_and_keeps_the_newest_per_process_tree() {
        let list = [
            in_tree(wedge("1-victim", 100, false), "cgroup:/victim"),
            in_tree(wedge("2-hostile", 100, false), "cgroup:/hostile"),
            in_tree(wedge("3-hostile", 100, true), "cgroup:/hostile"),
            in_tree(wedge("4-victim-live", 100, true), "cgroup:/victim-2"),
            in_tree(wedge("5-hostile", 100, true), "cgroup:/hostile"),
            in_tree(wedge("6-hostile", 100, true), "cgroup:/hostile"),
        ];
        let quota = |max| Retention {
            max_total_bytes: Some(max),
            ..Retention::DEFAULT
        };
        // Nothing over the quota: nothing removed (all are young).
        assert!(plan(&list, &quota(600), Some(u64::MAX)).is_empty());
        // The hostile tree's older finished incident first, then its older live ones, oldest first.
        assert_eq!(
            ids(&plan(&list, &quota(500), Some(u64::MAX))),
            ["2-hostile"]
        );
        let removals = plan(&list, &quota(300), Some(u64::MAX));
        assert_eq!(ids(&removals), ["2-hostile", "3-hostile", "5-hostile"]);
        assert!(removals[1].writer_live && removals[1].tree == "cgroup:/hostile");
        // Then the finished newest incident of another tree; the newest live one of each tree never.
        assert_eq!(
            ids(&plan(&list, &quota(0), Some(u64::MAX))),
            ["2-hostile", "3-hostile", "5-hostile", "1-victim"]
        );
        let line = removals[0].to_string();
        assert!(
            line.contains("quota")
                && line.contains("cgroup:/hostile")
                && line.contains("newer incident"),
            "{line}"
        );
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
