//! Incident rate limit: at most one new incident per process (pid and start time) per window. A process
//! whose incident is closed stays out of the watch until its window ends; SIGUSR1 captures ignore the limit.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Processes that had an incident recently.
#[derive(Debug, Default)]
pub struct RateLimit {
    window: Duration,
    /// pid → (start time, when its last incident opened).
    last: HashMap<i32, (u64, Instant)>,
}

impl RateLimit {
    pub fn new(window: Duration) -> RateLimit {
        RateLimit {
            window,
            last: HashMap::new(),
        }
    }

    pub fn set_window(&mut self, window: Duration) {
        self.window = window;
    }

    /// An incident opened for `pid` (started at `start` ticks) at `now`.
    pub fn record(&mut self, pid: i32, start: u64, now: Instant) {
        self.last.insert(pid, (start, now));
    }

    /// Pids to leave out of the watch at `now`: an incident within the window, no episode open
    /// (`is_open`), and still the same process (`start_of`: its start time now, None when gone).
    /// Expired and exited entries are forgotten, so the table holds only recent incidents.
    pub fn suppressed(
        &mut self,
        now: Instant,
        is_open: impl Fn(i32) -> bool,
        start_of: impl Fn(i32) -> Option<u64>,
    ) -> HashSet<i32> {
        let window = self.window;
        self.last.retain(|&pid, &mut (start, at)| {
            now.saturating_duration_since(at) < window && start_of(pid) == Some(start)
        });
        self.last
            .keys()
            .copied()
            .filter(|&pid| !is_open(pid))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.last.len()
    }

    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_incident_per_process_per_window() {
        let t0 = Instant::now();
        let mut limit = RateLimit::new(Duration::from_secs(600));
        limit.record(10, 100, t0);
        limit.record(11, 101, t0);
        let alive = |pid: i32| Some(90 + pid as u64);
        // 10's episode is still open: it stays watched (to be updated and resolved).
        let s = limit.suppressed(t0 + Duration::from_secs(1), |pid| pid == 10, alive);
        assert_eq!(s, [11].into_iter().collect());
        // Closed: both suppressed inside the window.
        let s = limit.suppressed(t0 + Duration::from_secs(2), |_| false, alive);
        assert_eq!(s.len(), 2);
        // A reused pid (other start time) is a new process; an exited one is forgotten.
        let s = limit.suppressed(
            t0 + Duration::from_secs(3),
            |_| false,
            |pid| (pid == 11).then_some(5),
        );
        assert!(s.is_empty());
        assert!(limit.is_empty());
        // After the window, watched again.
        limit.record(12, 102, t0);
        let s = limit.suppressed(t0 + Duration::from_secs(600), |_| false, alive);
        assert!(s.is_empty());
        assert_eq!(limit.len(), 0);
    }
}
