//! `max_incidents_per_hour`: the incidents opened within the last hour, and the refusal of one more.

use std::time::{Duration, Instant};

use crate::watch::event::CaptureEvent;
use crate::watch::wedge::Wedge;

/// The incidents opened within the last hour, counted for `max_incidents_per_hour` (0: no cap, none kept).
#[derive(Default)]
pub(super) struct HourlyCap(pub(super) std::collections::VecDeque<Instant>);

impl HourlyCap {
    const HOUR: Duration = Duration::from_secs(3600);

    /// Whether `cap` incidents were opened within the hour before `now`.
    pub(super) fn is_full(&mut self, cap: u32, now: Instant) -> bool {
        while self
            .0
            .front()
            .is_some_and(|&at| now.saturating_duration_since(at) >= Self::HOUR)
        {
            self.0.pop_front();
        }
        cap != 0 && self.0.len() >= cap as usize
    }

    /// The event that refuses `wedge` when the cap is reached (None: it may open).
    pub(super) fn refuse(&mut self, cap: u32, wedge: &Wedge) -> Option<CaptureEvent> {
        self.is_full(cap, wedge.detected).then(|| CaptureEvent::Failed {
            pid: wedge.pid,
            message: format!(
                "thread {} judged wedged, not captured: {cap} incidents were opened within the last hour \
                 (max_incidents_per_hour)",
                wedge.tid
            ),
        })
    }

    pub(super) fn record(&mut self, cap: u32, at: Instant) {
        if cap != 0 {
            self.0.push_back(at);
        }
    }
}
