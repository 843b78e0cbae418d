//! reports — incident model, durable store, retention and rendering.
//!
//! Map:
//! - [`model`]: the schema-versioned [`Incident`] (serde; thread snapshots and ring records embedded unchanged).
//! - [`durable`]: crash-safe writes (temp → fsync → rename → fsync dir) with exact file modes.
//! - [`store`]: one directory per incident, in-progress markers held by flock, listing, loading, bundling.
//! - [`retention`]: max incidents, max bytes, min free space; oldest first, never an incident in progress.
//! - [`redact`]: secrets in a captured command line or free text: a table of forms (flags, headers, URLs, short
//!   password flags by command, token prefixes), run to its fixed point.
//! - [`render`]: Markdown for a bug thread (≤ 65,536 characters) and the one-line verdict.
//!
//! This crate reads nothing from the kernel: host facts and snapshots are passed in by the caller.

pub mod durable;
pub mod error;
pub mod model;
pub mod redact;
pub mod render;
pub mod retention;
pub mod store;

pub use error::{Error, Result};
pub use model::Incident;
pub use retention::Retention;
pub use store::{IncidentHandle, IncidentSummary, Store};
