//! capture — everything wedge-capture reads from the kernel, and how it is decoded.
//!
//! Map:
//! - [`snapshot`]: the thread-snapshot JSON contract (`pid`, `threads[]`, …) that reports embed unchanged.
//! - (to come) `parse`: pure parsers `fn(&[u8]) -> Result<T>` for stat, status, wchan, syscall, stack, cgroup.
//! - (to come) `proc_root`: the one place that opens files under a proc root (default `/proc`).
//! - (to come) `syscalls`, `ioctl`: decode tables as data; `site`: stack → one-line classification.
//!
//! Never read `cmdline`, `environ`, `maps`, `smaps` or `mem` here: they take the target's mmap lock.

pub mod error;
pub mod snapshot;

pub use error::{Error, Result};
pub use snapshot::{IoctlInfo, ProcessSnapshot, StackFrame, SyscallInfo, ThreadSnapshot};
