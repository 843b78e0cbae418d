//! The benchmarks the binary runs on itself (results and commands in BENCHMARKS.md), kept out of the
//! production modules they measure:
//! - [`sources`]: `agent --bench-scans N`: the daemon's target sources against the naive scan.
//! - [`watch_loop`]: `internal bench-watch`: the watch loop's CPU at 1,000/10,000 threads and its
//!   detection-to-incident latency.
//! - [`agent_cpu`]: `internal bench-agent`: the whole agent's CPU per watched thread against an
//!   xcapture-style open/read/close scan of the same threads, in the same run.

pub(crate) mod agent_cpu;
pub(crate) mod sources;
pub(crate) mod watch_loop;
