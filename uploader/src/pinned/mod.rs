//! The `pinned` strategy's pipeline: packing threads fill a ring of pinned staging buffers
//! while the submitting thread copies full buffers to the device asynchronously.
//!
//! - The arena: every chunk laid out (256-byte aligned) in one device allocation, by default
//!   from the session's memory pool so later uploads write memory the GPU has already mapped
//!   ([`ArenaMemory`]); the arena image is cut into *slices* of one staging buffer each, and
//!   each slice into *pieces*.
//! - Packing threads claim pieces from one atomic counter, in arena order, with no barrier per
//!   slice: a thread that is descheduled delays only its own piece, and threads run ahead into
//!   the next free buffers. A piece of slice `s` may be written once slice `s - buffers` was
//!   copied out (`released`).
//! - The submitting thread (the one whose context is current; it never packs) waits for a
//!   slice's pieces, issues `cuMemcpyHtoDAsync` and `cuEventRecord`, then hands back every
//!   buffer whose copy has finished (`cuEventQuery`), so packers run up to `buffers - 1` slices
//!   ahead when packing is the bottleneck. Only when every buffer holds a submitted copy does it
//!   block (`cuEventSynchronize` on the oldest): then copying is the bottleneck, and the copy
//!   queue holds `buffers - 1` slices while the packers refill the released buffer.
//! - Staging memory comes from `cuMemHostAlloc`, or from an anonymous mapping advised for
//!   transparent huge pages, faulted in by several threads and registered with
//!   `cuMemHostRegister` ([`StagingMemory`]).
//!
//! [`PinnedStats`](crate::outcome::PinnedStats) says where an upload's time went (staging, arena, waiting for packers,
//! waiting for copies), so a slow run explains itself.

mod layout;
mod options;
mod pipeline;
mod stager;
mod staging;
mod upload;

pub use layout::{pack_range, pack_range_per_tensor, ArenaLayout, GATHER_BELOW_MEAN_TENSOR};
pub use options::{
    default_packing_threads, parse_bytes, parse_pinned_config, ArenaMemory, PinnedOptions,
    StagingMemory, PINNED_CONFIG_SYNTAX,
};
pub use stager::PinnedStager;
pub use staging::registration_groups;
