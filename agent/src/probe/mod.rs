//! Risky reads in a sacrificial child process with a deadline.
//!
//! Some evidence can only be read through a path that may sleep forever: `<proc root>/<pid>/cmdline` and
//! `<proc root>/<pid>/mem` (a wedged ioctl's argument, [`ProbeKind::ReadMem`]) take the target's mmap lock,
//! files under the NVIDIA driver's proc directory and `nvidia-smi` take the RM API lock.
//! None of those reads ever happens in a thread of wedge-capture. Each one runs in a child process (a `fork`
//! whose child only makes raw system calls, or a spawned program); its output comes back through a pipe that
//! the parent polls with a deadline. On timeout the child gets SIGKILL and is *not* waited for: a child stuck
//! in an uninterruptible sleep stays a zombie-to-be until the kernel lets it go, and is reaped later without
//! blocking. The number of such stuck children is bounded; beyond the bound, probes are skipped with a reason.
//!
//! A timed-out probe is evidence in itself ("timed out after 2 s: the RM lock is probably held").
//!
//! The paths come from `capture::ProcRoot::risky_path`, which only names the files: the open and the read
//! happen here, in the child.
//!
//! A stop request ([`ProbeRunner::set_cancel`], the daemon's SIGTERM) ends the wait early: the children are
//! killed like at the deadline and the outcome says the probe was interrupted, not that it hung.
//!
//! Map:
//! - [`model`]: what a probe is ([`Probe`], [`ProbeKind`]) and how it ended ([`ProbeOutcome`]).
//! - [`standard`]: the probes every capture runs ([`standard_probes`]).
//! - [`runner`]: [`ProbeRunner`], which runs a capture's probes at once with one deadline.
//! - [`stuck`]: the children stuck in the kernel after SIGKILL, bounded per target, tenant and host.
//! - [`children`]: the children themselves (raw system calls between fork and `_exit`, or a program).
//! - [`confine`]: what a program's child takes on before exec ([`Confinement`]).

mod children;
mod confine;
mod model;
mod runner;
mod standard;
mod stuck;
#[cfg(test)]
mod tests;

pub use confine::{Confinement, ROOT_FD};
pub use model::{human_duration, Probe, ProbeKind, ProbeOutcome, ProbeStatus};
pub use runner::ProbeRunner;
pub use standard::standard_probes;
