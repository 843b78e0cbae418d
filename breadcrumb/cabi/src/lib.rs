//! libwedge_breadcrumb.so / .a: the breadcrumb ring's C ABI (`breadcrumb/include/wedge_breadcrumb.h`).
//!
//! Nothing here but the link: the exported functions are `breadcrumb::ffi`'s `#[no_mangle]` ones, which a
//! cdylib or staticlib exports from its dependencies. The package exists so that the library's file name
//! (its ABI, `-lwedge_breadcrumb`) and the Rust crate's name (`breadcrumb`, as its folder) can both be right.

pub use breadcrumb::ffi;
