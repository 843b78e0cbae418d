//! Incident rate limits, per process (pid and start time, so a reused pid is a new process):
//! - [`RateLimit`]: at most one new wedge incident per window (`rate_limit`). A process whose incident is
//!   closed stays out of the watch until its window ends.
//! - [`OnDemandLimit`]: at most one on-demand (SIGUSR1) incident per window (`on_demand_rate_limit`), so a
//!   signal storm cannot fill the disk or push real wedges out of retention. It never affects wedges.

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

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.last.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}

/// When each process last had an on-demand incident.
#[derive(Debug, Default)]
pub struct OnDemandLimit {
    window: Duration,
    /// (pid, start time) → when its last on-demand incident was written.
    last: HashMap<(i32, u64), Instant>,
}

impl OnDemandLimit {
    pub fn new(window: Duration) -> OnDemandLimit {
        OnDemandLimit {
            window,
            last: HashMap::new(),
        }
    }

    pub fn window(&self) -> Duration {
        self.window
    }

    pub fn set_window(&mut self, window: Duration) {
        self.window = window;
    }

    /// Whether the process may get an on-demand incident at `now`; a zero window never limits.
    pub fn allows(&self, pid: i32, start: u64, now: Instant) -> bool {
        match self.last.get(&(pid, start)) {
            Some(&at) => now.saturating_duration_since(at) >= self.window,
            None => true,
        }
    }

    /// An on-demand incident was written for the process at `now`. Expired entries are dropped here, so
    /// the table holds at most the processes captured within one window.
    pub fn record(&mut self, pid: i32, start: u64, now: Instant) {
        let window = self.window;
        self.last
            .retain(|_, &mut at| now.saturating_duration_since(at) < window);
        self.last.insert((pid, start), now);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.last.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_on_demand_incident_per_process_per_window() {
        let t0 = Instant::now();
        let mut limit = OnDemandLimit::new(Duration::from_secs(60));
        assert!(limit.allows(10, 100, t0));
        limit.record(10, 100, t0);
        assert!(!limit.allows(10, 100, t0 + Duration::from_secs(59)));
        // Another process, or the same pid reused by a new process: not limited.
        assert!(limit.allows(11, 100, t0 + Duration::from_secs(1)));
        assert!(limit.allows(10, 555, t0 + Duration::from_secs(1)));
        assert!(limit.allows(10, 100, t0 + Duration::from_secs(60)));
        // Old entries go when new ones are recorded: the table stays one window deep.
        limit.record(11, 101, t0 + Duration::from_secs(30));
        assert_eq!(limit.len(), 2);
        limit.record(12, 102, t0 + Duration::from_secs(61));
        assert_eq!(limit.len(), 2);
        assert!(!limit.is_empty());
        // A zero window turns the limit off.
        limit.set_window(Duration::ZERO);
        assert!(limit.allows(12, 102, t0 + Duration::from_secs(61)));
    }

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
