//! A thread judged wedged ([`Wedge`]): the one value the tracker's verdict travels in, from the watch loop
//! to the capturer, which opens an episode with it (or adds the thread to the process's open one).

use std::time::Instant;

/// A thread of a watched process judged wedged at one scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wedge {
    pub pid: i32,
    pub tid: i32,
    /// The thread's start time: with `tid`, its identity (a reused tid is another thread).
    pub start_time: u64,
    pub comm: String,
    /// When the thread entered D (CLOCK_MONOTONIC ns).
    pub d_since_ns: u64,
    /// The scan that judged it wedged.
    pub detected: Instant,
}
