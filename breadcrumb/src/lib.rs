//! breadcrumb — the file-backed ring a worker writes before and after every driver call.
//!
//! Map (being built; see docs/breadcrumb-ring.md for the byte-exact format):
//! - `format`: header and slot layout, call-id table.
//! - `writer`: lock-free enter/exit, no syscall or allocation on the record path.
//! - `reader`: validating copy-out reader, in-flight calls per thread.
//! - `ffi`: the C ABI (`include/wedge_breadcrumb.h`).
