//! Driver-API interposition: breadcrumbs without CUPTI (docs/inject.md, "The default path").
//!
//! libwedge_inject.so in `LD_PRELOAD` exports one wrapper per libcuda function of cuda.h ([`wrappers`],
//! generated from driver_api/driver_api.tsv) and an interposed `dlsym` ([`dlsym`]). A program reaches the
//! driver three ways, and each now lands on a wrapper:
//! - linked against libcuda (`-lcuda`): the dynamic linker binds its calls to the preloaded wrappers;
//! - `dlopen` + `dlsym(handle, "cu…")` (cudarc, PyTorch, Triton): the interposed `dlsym` returns the wrapper of
//!   the libcuda function it found;
//! - `cuGetProcAddress` (the CUDA runtime, static or shared, cuBLAS, NCCL, `cudaGetDriverEntryPoint`): its
//!   wrapper replaces the returned pointer by the wrapper of the function at that address.
//!
//! Wrappers are chosen by *address*, never by the name asked for: the driver decides which version and which
//! stream flavour (`_ptsz`/`_ptds`) a `cuGetProcAddress(name, version, flags)` gets, and may return one function
//! for several versions; the wrapper of the symbol at that address has exactly that function's parameters.
//! An address two symbols share with different parameter lists, and a libcuda function the table lacks (a
//! newer driver's), pass through unwrapped and are counted ([`PassThrough`]; the ring's status names them).
//!
//! Each wrapper calls [`record::enter`] (the same classification, argument decoding and labels as the CUPTI
//! callback, [`crate::calls`]), the real function, then [`record::exit`] with its `CUresult`. The ring is
//! `<pid>-<starttime>.driver.ring`, created at the first recorded call.
//!
//! The parts, bottom up (each uses only those above it in this list): [`table`] (the generated symbol table),
//! [`next_dlsym`] (the real `dlsym`), [`real`] (the real functions and libcuda's address map), [`kernels`]
//! (kernel names of launches), [`record`] (the ring records), [`wrappers`] (the generated exported wrappers and
//! the lookup that hands them out), [`dlsym`] (the interposed `dlsym`).

pub mod dlsym;
pub mod kernels;
pub mod next_dlsym;
pub mod real;
pub mod record;
pub mod table;
pub mod wrappers;
