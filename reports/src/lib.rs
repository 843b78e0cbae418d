//! reports — incident model, durable store, retention and rendering.
//!
//! Map, read top-down: each module imports only those listed below it (save `bundle`, which reads incident.json
//! through `store::read`, a leaf of the store), so no module imports its caller and there is no import circle.
//! - [`store`]: one directory per incident, in-progress markers held by flock, listing, loading, bundling; split
//!   by job (`store::write`: create, reopen, the handle and raw files; `store::read`: incident.json read back;
//!   `store::removal`: retention carried out and `dropped.json`; `store::pending`; recovery of dead writers). Every
//!   read goes through `capture::untrusted` (no FIFO, no symlink, bounded).
//! - [`bundle`]: the `.tar.gz` of one incident, dated at the incident, optionally scrubbed ([`scrub`]: host name,
//!   boot id, other tenants' processes and kernel-log lines, GPU serials and UUIDs) for a public issue.
//! - [`retention`]: wedge count, on-demand cap, max bytes, min free space; on-demand first, never an incident in
//!   progress or a wedge under the 24 h floor; every removal returned with its reason.
//! - [`render`]: Markdown for a bug thread (≤ [`limits::MAX_MARKDOWN_CHARS`]), the head and the `<details>`
//!   sections as tables of small functions; a thread's frame, syscall and ioctl worded by `capture::render`, the
//!   capture views' formatter.
//! - [`verdict`]: the one-line verdict (which thread, which call, how long, the breadcrumb, how it ended), a
//!   function per clause in a table; stored in incident.json, logged, and the first line of report.md. It reads
//!   without the Markdown module.
//! - [`text`]: the text primitives under both the verdict and render: text from the incident made safe for its
//!   place by `capture::escape` (the workspace's one escaper) after a clip, units ([`text::bytes`],
//!   [`text::duration`]) and the one name of a breadcrumb call ([`text::call_text`]).
//! - [`limits`]: every size limit of report.md and the verdict, in one place.
//! - [`durable`]: crash-safe writes (temp → fsync → rename → fsync dir) with exact file modes; files staged and
//!   renamed together, rolled back as one.
//! - [`layout`]: where an incident lives on disk: the directory layout, file names, bounds, id and name rules.
//! - [`model`]: the schema-versioned [`Incident`] (serde; thread snapshots and ring records embedded unchanged),
//!   one file per part.
//! - [`redact`]: secrets in a captured command line or free text: a table of forms (flags, headers, URLs, short
//!   password flags by command, token prefixes), run to its fixed point.
//! - [`error`]: the crate's one error type.
//!
//! This crate reads nothing from the kernel: host facts and snapshots are passed in by the caller.

pub mod bundle;
pub mod durable;
pub mod error;
pub mod layout;
pub mod limits;
pub mod model;
pub mod redact;
pub mod render;
pub mod retention;
pub mod scrub;
pub mod store;
pub mod text;
pub mod verdict;

pub use error::{Error, Result};
pub use model::Incident;
pub use retention::{Removal, RemovalReason, Retention};
pub use store::write::IncidentHandle;
pub use store::{IncidentSummary, Store};
