//! What started an incident and how its episode goes on: [`Trigger`], [`Episode`], [`EpisodeStatus`].

use super::time::Timestamp;
use serde::{Deserialize, Serialize};

/// What made the watchdog write the incident.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// A thread sat in D without progress for the threshold.
    #[default]
    Wedge,
    /// Asked for (SIGUSR1 to the agent), whether or not anything is wedged: no episode to follow.
    OnDemand,
    /// Written by a newer version with a trigger this one does not know.
    #[serde(other)]
    Unknown,
}

/// Whether the wedge is still going on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EpisodeStatus {
    /// At least one thread is still stuck.
    #[default]
    Open,
    /// Every wedged thread left D (or the process was reaped).
    Resolved,
    /// wedge-capture stopped (`run` exited, the agent was stopped) while a thread was still wedged: nothing
    /// after `Episode::watcher_exited_at` was watched.
    #[serde(rename = "still_wedged_at_exit")]
    StillWedgedAtExit,
    /// The outcome is not known: nobody watched the episode until its end (its process was gone, or was
    /// another process, when a watcher started again: `Episode::outcome_unknown` says between when and
    /// when). Also what a file written by a newer version with a status this one does not know reads as.
    #[serde(other)]
    Unknown,
}

/// A stretch of an episode that no wedge-capture watched (between a watcher's exit or death and the start
/// of the next one on the same store).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Unwatched {
    /// The last time a watcher said anything about the episode (its exit, or its last write if it died).
    pub from: Timestamp,
    /// When the next watcher looked again.
    pub until: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Episode {
    pub status: EpisodeStatus,
    /// When the first thread of the episode was first seen in D.
    pub started_at: Timestamp,
    pub resolved_at: Option<Timestamp>,
    /// Seconds from `started_at` to `resolved_at` (monotonic clock).
    pub resolved_after_s: Option<f64>,
    /// When wedge-capture stopped watching an episode that was still open (status `still_wedged_at_exit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watcher_exited_at: Option<Timestamp>,
    /// Stretches nobody watched: each time a watcher adopted the episode (it was still in D), or closed it
    /// (status `unknown`), the gap since the previous watcher's last word.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unwatched: Vec<Unwatched>,
    /// With status `unknown`: why the outcome is not known ("not watched between … and …: the process is
    /// gone").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome_unknown: Option<String>,
}
