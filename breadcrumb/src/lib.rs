//! breadcrumb — the file-backed ring a worker writes before and after every driver call, so that
//! the agent can name the call that never returned, from outside, even when the worker can never
//! run again. The byte-exact format is docs/breadcrumb-ring.md.
//!
//! Map:
//! - [`format`](mod@format): header and slot layout constants, [`Call`] ids, [`Args`] (pure).
//! - [`writer`]: [`Writer`] — `enter`/`exit` into the calling thread's own lane: no lock, no locked
//!   instruction, no syscall or allocation per record.
//! - [`counter`]: the CPU counter (x86_64 invariant TSC, aarch64 `CNTVCT_EL0`) version-2 records are
//!   stamped with, and its calibration to `CLOCK_MONOTONIC` (one `/sys` read: the clocksource).
//! - [`reader`]: [`read_ring_from_file`] / [`read_header`] (a file the caller opened), [`read_ring`]
//!   (a path) / [`parse_ring`] (bytes) — validating copy-out reader, in-flight calls.
//! - [`identity`]: the writer's pid, start time, pid namespace, boot id; clocks. The one `"/proc"`
//!   outside `capture` ([`identity::SELF_PROC`]): a worker reads its *own* `/proc/self` identity once, at
//!   ring creation, and this crate is linked into workers, so it must not depend on `capture`.
//! - [`ffi`]: the C ABI (`include/wedge_breadcrumb.h`), one process-global writer.
//! - [`error`]: the crate's [`Error`].
//! - [`ci`]: [`in_ci`], the workspace's one "is this run CI?" (this crate is the lowest every crate reaches).

pub mod ci;
pub mod counter;
pub mod error;
pub mod ffi;
pub mod format;
pub mod identity;
pub mod reader;
pub mod writer;

pub use ci::in_ci;
pub use error::{Error, Result};
pub use format::{Args, Call, RingClock};
pub use reader::{
    in_flight_calls, parse_header, parse_ring, read_header, read_ring, read_ring_from_file,
    read_ring_from_file_with_bytes, read_ring_into, read_ring_with_bytes, InFlight, ReadOptions,
    Record, RecordKind, RingHeader, RingSink, RingSnapshot,
};
pub use writer::{Token, Writer, WriterOptions};
