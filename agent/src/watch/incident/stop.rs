//! The end of watching: the captures in flight come back (or are marked interrupted), and every open
//! episode gets its final write saying which threads were still wedged.

use std::time::{Duration, Instant};

use reports::model::{ThreadFate, Timestamp};

use super::changes::Change;
use super::Capturer;
use crate::watch::event::CaptureEvent;
use crate::watch::workers::WorkerReport;

impl Capturer {
    /// Wait up to `limit` for the captures in flight to come back, merging and writing them (`run` at
    /// its end; tests).
    pub fn finish_captures(&mut self, limit: Duration, out: &mut Vec<CaptureEvent>) {
        let until = Instant::now() + limit;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let (waiting, running) = self.pool.pending();
            if waiting + running == 0 || left.is_zero() {
                break;
            }
            for report in self.pool.wait_running(left.min(Duration::from_millis(100))) {
                self.on_report(report, out);
            }
            self.tick(out);
        }
    }

    /// wedge-capture is stopping (`run` exits, the agent is stopped): the captures in flight get up to
    /// `wait` to come back (a stop request has cut their probes short), queued ones are not started;
    /// then every open episode gets its final write, saying which threads were still wedged and when
    /// watching stopped, so that the incident never reads "still open" after nobody watches it any more.
    /// Writes that fail stay listed by [`Capturer::unwritten`].
    pub fn shutdown(&mut self, wait: Duration, out: &mut Vec<CaptureEvent>) {
        for job in self.pool.drain_queue() {
            let why = "not run: wedge-capture stopped before its turn came".to_string();
            self.on_report(WorkerReport::Failed { id: job.id, why }, out);
        }
        self.finish_captures(wait, out);
        for id in self.pool.abandon_running() {
            let why = "interrupted: wedge-capture stopped before the capture came back".to_string();
            self.on_report(WorkerReport::Failed { id, why }, out);
        }
        let pids: Vec<i32> = self.episodes.keys().copied().collect();
        for pid in pids {
            let Some(mut episode) = self.episodes.remove(&pid) else {
                continue;
            };
            if self.settings.proc_root.exists(pid) {
                Self::resample(&self.settings, &mut episode);
            }
            let now = Timestamp::now();
            let now_ns = now.monotonic_ns.unwrap_or(0);
            let still: Vec<(i32, u64)> = episode.wedged.iter().map(|(&t, &s)| (t, s)).collect();
            for (tid, since_ns) in still {
                let in_d = Duration::from_nanos(now_ns.saturating_sub(since_ns));
                episode.change(Change::Fate {
                    tid,
                    fate: ThreadFate::StillWedgedAtExit,
                    at: now.clone(),
                    in_d,
                });
            }
            episode.change(Change::StillWedgedAtExit { at: now });
            let count = episode.wedged.len();
            episode.change(Change::timeline(format!(
                "still wedged when wedge-capture exited ({count} thread{} in D)",
                if count == 1 { "" } else { "s" }
            )));
            episode.unwritten = true;
            self.advance(pid, &mut episode, out);
            if episode.pending_work() {
                self.closing.push(episode);
            }
        }
    }
}
