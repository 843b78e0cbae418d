//! Host identity recorded with every incident.
//!
//! Map:
//! - [`identity`]: hostname (`NODE_NAME` when set), boot id, kernel release, architecture.
//! - [`sandbox`]: which unit or container setting refused a socket family or a path (error hints).
//!
//! The kernel log, pressure and meminfo are read and parsed in `capture` (`capture::kmsg`,
//! `ProcRoot::{pressure, meminfo, loadavg}`); every file under the proc root comes through the caller's
//! `capture::ProcRoot`.

pub mod identity;
pub mod sandbox;
