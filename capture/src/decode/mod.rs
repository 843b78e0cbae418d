//! Decode tables and their decoders: one home for everything that turns numbers the kernel shows into
//! names, all generated data (`capture/data/*.tsv`, each with its generator in `capture/data/` and its
//! source and version in its first line).
//!
//! - [`table`]: the one loader of those tables; [`hex`]: the one hex parser (table cells, request words,
//!   argument bytes).
//! - [`device`]: the one device classifier (`/dev/…` or a container's `/nvidia0` → [`device::DeviceKind`]),
//!   and the DRM node's bound driver from sysfs.
//! - [`ioctl`]: request word → name on that device (NVIDIA RM/UVM/NVKMS, DRM core and drivers, KFD, Linux).
//! - [`nvidia`]: deep NVIDIA decode (RM control commands and their lock flags, classes, UVM params, the
//!   escape structs read at a wedged ioctl's pointer). [`drm`]: DRM core/driver and KFD tables.
//! - [`syscalls`]: syscall number → name per [`arch::Arch`] (x86_64, aarch64), and fd arguments.

pub mod arch;
pub mod device;
pub mod drm;
pub mod hex;
pub mod ioctl;
pub mod nvidia;
pub mod syscalls;
pub mod table;
