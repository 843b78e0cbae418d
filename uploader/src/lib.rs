//! uploader — a chunked bulk f32 uploader with a breadcrumb around every driver call.
//!
//! Map:
//! - [`plan`]: the pure chunk planner (ztensor's `bulkUploadF32` semantics), property-tested.
//! - [`call_table`]: the one table of driver calls, from which [`CallKind`], the [`Driver`] trait
//!   (one method per call, in [`driver`]) and [`Traced`]'s wrappers are generated.
//! - [`cuda`]: the libcuda backend (cudarc `result`/`sys`), with a no-panic driver check.
//! - [`host`]: the host-memory backend for tests and GPU-less machines (fails on demand).
//! - [`trace`]: [`Traced`], the layer that writes a breadcrumb enter/exit around each call and
//!   owns the session's pool for pinned arenas.
//! - [`workload`]: tensors to upload ([`TensorSource`]) and the synthetic real-world workload.
//! - [`outcome`]: what an upload produces ([`Uploaded`], its views and allocations, progress,
//!   the pinned pipeline's stats), whatever the strategy.
//! - [`strategy`]: `ztensor`, `managed` and `pinned` uploads, all-or-nothing on failure.
//! - [`pinned`]: the pinned pipeline (staging ring, piece-claiming packers, async copies).
//! - [`pack`]: plain or non-temporal copies into staging memory.
//! - [`verify`]: read everything back and compare.
//! - [`bench`]: the single-copy ceilings and the `--compare` run.

pub mod bench;
pub mod call_table;
pub mod cuda;
pub mod driver;
pub mod error;
pub mod host;
pub mod outcome;
pub mod pack;
pub mod pinned;
pub mod plan;
pub mod strategy;
pub mod trace;
pub mod verify;
pub mod workload;

pub use call_table::CallKind;
pub use driver::{DeviceAttribute, DevicePtr, Driver, Event, MemPool, Stream};
pub use error::{Error, Result};
pub use outcome::{StrategyKind, Uploaded};
pub use plan::{plan, Plan, PlanOptions, Planned, TensorInfo};
pub use strategy::Strategy;
pub use trace::Traced;
pub use workload::{TensorSource, Workload};
