//! The watch loop and capture path, independent of how targets are found.
//!
//! Map:
//! - [`tracker`]: pure per-thread D-state episodes and the no-progress (hung-task) test.
//! - [`launch`]: start the command of `run` (own process group, subreaper, signal forwarding).

pub mod launch;
pub mod tracker;
