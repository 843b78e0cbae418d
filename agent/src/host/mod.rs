//! Host identity recorded with every incident.
//!
//! Map:
//! - [`identity`]: hostname, boot id, kernel release, architecture.
//!
//! The kernel log, pressure and meminfo are read and parsed in `capture` (`capture::kmsg`,
//! `ProcRoot::{pressure, meminfo, loadavg}`); every file under the proc root comes through the caller's
//! `capture::ProcRoot`.

pub mod identity;
