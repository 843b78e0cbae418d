//! wedge-fuzz — a deterministic mutation fuzzer for every input wedge-capture takes from someone else.
//!
//! Map:
//! - [`engine`]: seeded xorshift RNG, the byte/text mutator, the run loop: each execution under `catch_unwind`
//!   (a panicking input is written to a file), its peak heap growth measured by [`alloc::Counting`], the
//!   process's peak RSS from `getrusage` before and after.
//! - [`targets`]: one [`targets::Target`] per hostile input (ring bytes, ring file, ring header, each /proc parser,
//!   kmsg records, PSI and meminfo, the agent config, incident.json, a command line to redact) and the inputs
//!   that once failed (fuzz/regressions).
//! - [`seeds`]: each target's seed corpus (real rings written by `breadcrumb::Writer`, this machine's /proc
//!   files, the repository's fixtures).
//! - [`alloc`]: the counting global allocator (live and peak bytes).
//!
//! Why not `cargo fuzz` or proptest: docs/fuzzing.md.

pub mod alloc;
pub mod engine;
pub mod seeds;
pub mod targets;

#[global_allocator]
static ALLOCATOR: alloc::Counting = alloc::Counting;
