//! reports — incident model, durable store, retention and rendering.
//!
//! Map:
//! - [`model`]: the schema-versioned [`Incident`] (serde; thread snapshots and ring records embedded unchanged).
//! - [`durable`]: crash-safe writes (temp → fsync → rename → fsync dir) with exact file modes; files staged and
//!   renamed together, rolled back as one.
//! - [`store`]: one directory per incident, in-progress markers held by flock, listing, loading, bundling; every
//!   read through `capture::untrusted` (no FIFO, no symlink, bounded).
//! - [`retention`]: wedge count, on-demand cap, max bytes, min free space; on-demand first, never an incident in
//!   progress or a wedge under the 24 h floor; every removal returned with its reason.
//! - [`bundle`]: the `.tar.gz` of one incident, dated at the incident, optionally scrubbed ([`scrub`]: host name,
//!   boot id, other tenants' processes and kernel-log lines, GPU serials and UUIDs) for a public issue.
//! - [`redact`]: secrets in a captured command line or free text: a table of forms (flags, headers, URLs, short
//!   password flags by command, token prefixes), run to its fixed point.
//! - [`verdict`]: the one-line verdict (which thread, which call, how long, the breadcrumb, how it ended), a
//!   function per clause in a table; stored in incident.json, logged, and the first line of report.md.
//! - [`render`]: Markdown for a bug thread (≤ 65,536 characters; every limit in `render/budget.rs`), the head
//!   and the `<details>` sections as tables of small functions. Text from the incident is escaped by `capture::escape`, the workspace's one
//!   escaper (re-exported for terminals as [`render::escape_controls`]).
//!
//! This crate reads nothing from the kernel: host facts and snapshots are passed in by the caller.

pub mod bundle;
pub mod durable;
pub mod error;
mod incident_timeline;
pub mod model;
pub mod redact;
pub mod render;
pub mod retention;
pub mod scrub;
pub mod store;
pub mod verdict;

pub use error::{Error, Result};
pub use model::Incident;
pub use retention::{Removal, RemovalReason, Retention};
pub use store::{IncidentHandle, IncidentSummary, Store};
