//! Episode continuity (design invariant 8): an episode outlives its watcher. A watcher that starts on a store
//! takes up every wedge episode an earlier one left `open` (it died) or `still_wedged_at_exit` (it was
//! stopped): same incident, same id, same `d_since` and detection time.
//!
//! An episode is identified by (boot id, pid, process start time, tid + thread start time):
//! - same boot, the process alive with its recorded start time, a wedged thread (same tid and start time)
//!   still in D → **adopted**: status `open` again, the gap recorded in `episode.unwatched`, a timeline
//!   entry "watcher restarted at …, still in D", and the tracker seeded with the original `d_since` so the
//!   episode closes as resolved/exited with its true time in D. It is not a new incident (not counted again).
//! - same process, but no wedged thread in D any more → **resolved** at an unknown time within the gap
//!   (`resolved_after_s` absent, the gap recorded).
//! - the process gone, its pid now another process, another boot, or an incident with no recorded start
//!   time → **outcome unknown** (status `unknown`, `episode.outcome_unknown` = "not watched between … and
//!   …: why"). Never silently left open, never "resolved".
//!
//! An incident whose `.in-progress` marker a live writer holds (another watcher on the same store) is left
//! alone.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reports::model::{EpisodeStatus, Incident, ThreadFate, Timestamp, Trigger, Unwatched};

use super::writes::write;
use super::{now_mono_ns, Capturer, Episode};
use crate::watch::event::CaptureEvent;
use crate::watch::stages;
use crate::watch::stages::context::SkippedStage;

/// A thread of an adopted episode, still in D: the tracker takes it up as already judged wedged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdoptedThread {
    pub pid: i32,
    pub tid: i32,
    pub start_time: u64,
    pub comm: String,
    /// When it was first seen in D (monotonic ns, by the earlier watcher: same boot, same clock).
    pub d_since_ns: u64,
}

/// What became of a wedged thread while nobody watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ThreadNow {
    InD,
    OutOfD,
    Gone,
}

/// Whether the episode's process is still the one it recorded; the reason in words when not.
fn process_identity(capturer: &Capturer, incident: &Incident) -> Result<(), &'static str> {
    let boot = capturer.host.boot_id.as_deref().unwrap_or_default();
    if boot.is_empty() || incident.host.boot_id != boot {
        return Err("the host rebooted since (another boot id)");
    }
    let Some(start_time) = incident.process.start_time else {
        return Err(
            "the incident records no process start time, so its process cannot be recognised",
        );
    };
    match capturer.settings.proc_root.read_stat(incident.process.pid) {
        Ok(stat) if stat.starttime == start_time && !matches!(stat.state, 'Z' | 'X') => Ok(()),
        Ok(stat) if stat.starttime == start_time => Err("the process exited"),
        Ok(_) => Err("the process is gone (its pid belongs to another process now)"),
        Err(_) => Err("the process is gone"),
    }
}

/// The stage an earlier agent was running when it died, from the marker its capture worker left.
fn skipped_stage(handle: Option<&reports::store::write::IncidentHandle>) -> Vec<SkippedStage> {
    handle
        .map(|h| h.files())
        .and_then(|files| files.read_small(stages::STAGE_MARKER_FILE, 4096))
        .and_then(|bytes| stages::StageMarker::skipped(&bytes))
        .into_iter()
        .collect()
}

/// The last time a watcher said anything about the episode: its exit, else its last write.
fn last_watched(incident: &Incident) -> Timestamp {
    incident
        .episode
        .watcher_exited_at
        .clone()
        .unwrap_or_else(|| incident.updated_at.clone())
}

fn wall_text(at: &Timestamp) -> String {
    at.wall
        .map(|w| w.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| "an unknown time".to_string())
}

impl Capturer {
    /// Take up the episodes of this store that an earlier watcher left open or still wedged at its exit
    /// (see the module doc). Returns the threads still in D, for the tracker; what happened to each episode
    /// is reported in `out` ([`CaptureEvent::Adopted`], [`CaptureEvent::Unwatched`], `Resolved`).
    pub fn adopt_episodes(&mut self, out: &mut Vec<CaptureEvent>) -> Vec<AdoptedThread> {
        let mut threads = Vec::new();
        let Ok(list) = self.store.list() else {
            return threads;
        };
        for summary in list.iter().filter(|s| s.error.is_none() && !s.in_progress) {
            let Ok(incident) = self.store.load(&summary.id) else {
                continue;
            };
            let adoptable = matches!(
                incident.episode.status,
                EpisodeStatus::Open | EpisodeStatus::StillWedgedAtExit
            );
            if incident.trigger != Trigger::Wedge
                || !adoptable
                || self.episodes.contains_key(&incident.process.pid)
            {
                continue;
            }
            let Ok(handle) = self.store.reopen(&summary.id, incident.complete) else {
                // A live writer took it meanwhile: not ours.
                continue;
            };
            self.adopt_one(incident, handle, out, &mut threads);
        }
        threads
    }

    fn adopt_one(
        &mut self,
        mut incident: Incident,
        handle: reports::store::write::IncidentHandle,
        out: &mut Vec<CaptureEvent>,
        threads: &mut Vec<AdoptedThread>,
    ) {
        let pid = incident.process.pid;
        let now = Timestamp::now();
        let gap = Unwatched {
            from: last_watched(&incident),
            until: now.clone(),
        };
        let between = format!(
            "not watched between {} and {}",
            wall_text(&gap.from),
            wall_text(&gap.until)
        );
        incident.episode.unwatched.push(gap);
        incident.episode.watcher_exited_at = None;
        if let Err(why) = process_identity(self, &incident) {
            let reason = format!("{between}: {why}");
            self.close_unknown(incident, handle, reason, out);
            return;
        }
        // Each wedged thread that was still wedged when the earlier watcher last looked.
        let root = &self.settings.proc_root;
        let mut wedged = BTreeMap::new();
        let mut fates = Vec::new();
        for w in incident
            .wedged_threads
            .iter()
            .filter(|w| matches!(w.fate, ThreadFate::Wedged | ThreadFate::StillWedgedAtExit))
        {
            let now_state = match root.read_task_stat(pid, w.tid) {
                Ok(stat) if Some(stat.starttime) == w.start_time && stat.state == 'D' => {
                    ThreadNow::InD
                }
                Ok(stat) if Some(stat.starttime) == w.start_time => ThreadNow::OutOfD,
                _ => ThreadNow::Gone,
            };
            fates.push((w.tid, now_state));
            let since = w.d_since.monotonic_ns;
            if let (ThreadNow::InD, Some(since), Some(start_time)) =
                (now_state, since, w.start_time)
            {
                wedged.insert(w.tid, since);
                threads.push(AdoptedThread {
                    pid,
                    tid: w.tid,
                    start_time,
                    comm: w.comm.clone(),
                    d_since_ns: since,
                });
            }
        }
        for (tid, state) in fates.iter().filter(|(_, s)| *s != ThreadNow::InD) {
            let fate = match state {
                ThreadNow::OutOfD => ThreadFate::Resolved,
                _ => ThreadFate::Exited,
            };
            if let Some(w) = incident.wedged_threads.iter_mut().find(|w| w.tid == *tid) {
                w.fate = fate;
                w.fate_at = Some(now.clone());
                w.in_d_s = None;
            }
            let how = if fate == ThreadFate::Exited {
                "exited"
            } else {
                "left D"
            };
            incident.push_timeline(format!(
                "thread {tid} {how} while nobody watched ({between})"
            ));
        }
        if wedged.is_empty() {
            self.close_resolved_unwatched(incident, handle, between, out);
            return;
        }
        self.take_up(incident, handle, wedged, out);
    }

    /// An adopted episode still in D: back to `open`, watched like one this watcher opened.
    fn take_up(
        &mut self,
        mut incident: Incident,
        handle: reports::store::write::IncidentHandle,
        wedged: BTreeMap<i32, u64>,
        out: &mut Vec<CaptureEvent>,
    ) {
        let pid = incident.process.pid;
        let started_ns = incident
            .episode
            .started_at
            .monotonic_ns
            .or_else(|| wedged.values().min().copied())
            .unwrap_or_else(now_mono_ns);
        let in_d = Duration::from_nanos(now_mono_ns().saturating_sub(started_ns));
        let unwatched_since = incident
            .episode
            .unwatched
            .last()
            .map(|g| wall_text(&g.from))
            .unwrap_or_default();
        incident.episode.status = EpisodeStatus::Open;
        for w in incident.wedged_threads.iter_mut() {
            if wedged.contains_key(&w.tid) {
                w.fate = ThreadFate::Wedged;
                w.fate_at = None;
                w.in_d_s = None;
            }
        }
        incident.push_timeline(format!(
                "watcher restarted at {}, still in D ({} thread{}, {:.1} s in D; not watched since {unwatched_since})",
                wall_text(&Timestamp::now()),
                wedged.len(),
                if wedged.len() == 1 { "" } else { "s" },
                in_d.as_secs_f64()
            ),
        );
        let path = handle.path().to_path_buf();
        let first_tid = wedged.keys().next().copied().unwrap_or(pid);
        let captured = incident.complete;
        let mut episode = Episode::new(incident, first_tid, started_ns, Instant::now());
        episode.wedged = wedged;
        episode.handle = Some(handle);
        // An incident whose capture the earlier watcher never finished gets the rest of it now, but never
        // the stage it was in when it died (that stage may be what killed it).
        episode.captured = captured;
        episode.complete_wanted = captured;
        episode.finished = captured;
        if !captured {
            episode.skip = skipped_stage(episode.handle.as_ref());
        }
        Self::resample(&self.settings, &mut episode);
        out.push(CaptureEvent::Adopted { pid, path, in_d });
        self.advance(pid, &mut episode, out);
        self.episodes.insert(pid, episode);
    }

    /// The process lives on and no wedged thread is in D: resolved, at an unknown time within the gap.
    fn close_resolved_unwatched(
        &mut self,
        mut incident: Incident,
        mut handle: reports::store::write::IncidentHandle,
        between: String,
        out: &mut Vec<CaptureEvent>,
    ) {
        let pid = incident.process.pid;
        incident.episode.status = EpisodeStatus::Resolved;
        incident.episode.resolved_at = Some(Timestamp::now());
        incident.episode.resolved_after_s = None;
        incident.push_timeline(format!(
            "resolved while nobody watched ({between}): when is not known"
        ));
        let path = handle.path().to_path_buf();
        let finish = incident.complete;
        match write(&mut handle, &mut incident, finish, None) {
            Ok(()) => out.push(CaptureEvent::Unwatched {
                pid,
                path,
                why: format!("resolved while nobody watched ({between})"),
            }),
            Err(err) => out.push(CaptureEvent::Failed {
                pid,
                message: format!("cannot close the episode {}: {err}", path.display()),
            }),
        }
    }

    /// The episode's process cannot be followed any more: its outcome is not known.
    fn close_unknown(
        &mut self,
        mut incident: Incident,
        mut handle: reports::store::write::IncidentHandle,
        reason: String,
        out: &mut Vec<CaptureEvent>,
    ) {
        let pid = incident.process.pid;
        let now = Timestamp::now();
        for w in incident
            .wedged_threads
            .iter_mut()
            .filter(|w| matches!(w.fate, ThreadFate::Wedged | ThreadFate::StillWedgedAtExit))
        {
            w.fate = ThreadFate::Unknown;
            w.fate_at = Some(now.clone());
            w.in_d_s = None;
        }
        incident.episode.status = EpisodeStatus::Unknown;
        incident.episode.outcome_unknown = Some(reason.clone());
        incident.push_timeline(format!("outcome unknown: {reason}"));
        let path = handle.path().to_path_buf();
        let finish = incident.complete;
        match write(&mut handle, &mut incident, finish, None) {
            Ok(()) => out.push(CaptureEvent::Unwatched {
                pid,
                path,
                why: format!("outcome unknown: {reason}"),
            }),
            Err(err) => out.push(CaptureEvent::Failed {
                pid,
                message: format!("cannot close the episode {}: {err}", path.display()),
            }),
        }
    }
}
