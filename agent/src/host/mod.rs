//! Host context read at capture time: kernel log, pressure, memory, every D-state task, host identity.
//!
//! Map:
//! - [`kmsg`]: `/dev/kmsg` read without blocking, records around the event, wedge signatures flagged.
//! - [`pressure`]: PSI and meminfo parsers (pure).
//! - [`identity`]: hostname, boot id, kernel release, architecture.
//!
//! Every path under the proc root comes from the caller's `capture::ProcRoot`.

pub mod identity;
pub mod kmsg;
pub mod pressure;
