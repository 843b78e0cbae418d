//! libwedge_inject.so: the CUPTI injection library the CUDA driver loads (docs/inject.md).
//!
//! Nothing here but the link: `InitializeInjection` and `wedge_inject_state` are the `inject` crate's
//! `#[no_mangle]` functions, which a cdylib exports from its dependencies. The package exists so that the
//! shared object's file name (what `CUDA_INJECTION64_PATH` names) and the Rust crate's name (`inject`, as its
//! folder) can both be right.

pub use inject::{wedge_inject_state, InitializeInjection};
