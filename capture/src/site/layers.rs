//! Layers of built-in code: the subsystem or driver a function belongs to when no `[module]` tag says (a
//! driver built into the kernel, a test kernel without modules, the PCI core), from a generated map of
//! function-name prefixes (`capture/data/layer-prefixes.tsv`, made by `capture/data/gen/gen_layers.py` from a
//! distribution kernel's module symbols and paths and its System.map, plus curated core rows; each row says
//! its evidence).
//!
//! Rows backed by a module (`ko:`/`dir:` evidence, `src:` for one the images do not build, or `curated:ko`:
//! a curated row whose layer the map's kernel ships as a module of that name and directory) name what the
//! `[module]` tag would have said had the code been built as one: [`tag_built_in`] fills those in, so a
//! built-in driver's stack reads like a modular one. Curated rows name core layers (block, PCI core, driver core, cgroup…), shown as the layer of a stack
//! that names no driver.

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::snapshot::StackFrame;

const TSV: &str = include_str!("../../data/layer-prefixes.tsv");

/// One row of the map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layer {
    /// The module (`i915`, `nvme_core`) or core layer (`block`, `pci`).
    pub name: &'static str,
    /// Its directory in the kernel tree (`drivers/gpu/drm/i915`).
    pub dir: &'static str,
    /// Backed by a module's symbols: what a `[module]` tag would name.
    pub module: bool,
}

fn table() -> &'static HashMap<&'static str, Layer> {
    static TABLE: OnceLock<HashMap<&'static str, Layer>> = OnceLock::new();
    TABLE.get_or_init(|| {
        TSV.lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with("prefix\t"))
            .filter_map(|l| {
                let mut cols = l.split('\t');
                let (prefix, name, dir, evidence) =
                    (cols.next()?, cols.next()?, cols.next()?, cols.next()?);
                // `src:`: a module the images do not build, named by its Makefile (round 13).
                // `curated:ko`: a curated row (the word on a prefix shared with core code) whose layer the
                // map's kernel ships as a module of the same name and directory (ext4.ko, jbd2.ko, xfs.ko…):
                // built in elsewhere, it is still what a `[module]` tag would have named (round 14).
                let module = evidence.starts_with("ko:")
                    || evidence.starts_with("dir:")
                    || evidence.starts_with("src:")
                    || evidence == "curated:ko";
                Some((prefix, Layer { name, dir, module }))
            })
            .collect()
    })
}

/// The layer of a function: its whole name, then its prefixes up to each `_`, longest first.
pub fn layer_of(function: &str) -> Option<Layer> {
    let table = table();
    if let Some(l) = table.get(function) {
        return Some(*l);
    }
    function
        .char_indices()
        .filter(|&(_, c)| c == '_')
        .map(|(i, _)| &function[..=i])
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .find_map(|p| table.get(p).copied())
}

/// A stack with no `[module]` tag at all, its frames tagged with the module their prefix belongs to; None
/// when some frame has a tag (the stack names its modules itself).
pub fn tag_built_in(frames: &[StackFrame]) -> Option<Vec<StackFrame>> {
    if frames.is_empty() || frames.iter().any(|f| f.module.is_some()) {
        return None;
    }
    // The GPU drivers the stack's own function names say (`xe_`, `intel_`, `amdgpu_`…): a GPU driver the map
    // names against them is a driver newer than the map sharing another's static names (xe's `guc_ct_*`, which
    // the 6.1 map knows as i915's), and such a frame is left untagged.
    let named: Vec<&str> = frames
        .iter()
        .filter_map(|f| gpu_driver_by_prefix(super::frame_name::base_name(&f.function)))
        .collect();
    let mut tagged = frames.to_vec();
    let mut any = false;
    for (i, f) in tagged.iter_mut().enumerate() {
        // The way in (syscall entry, thread machinery) is never a driver's code (round 20: x86-64's
        // `stub_clone` read as usbip_host's `stub_` prefix).
        if super::rules::is_entry_frame(super::frame_name::base_name(&f.function)) {
            continue;
        }
        let Some(l) = inlined_into(frames, i)
            .or_else(|| layer_of(super::frame_name::base_name(&f.function)))
            .filter(|l| l.module)
        else {
            continue;
        };
        let other_gpu_driver = !named.is_empty()
            && !named.contains(&l.name)
            && super::rules::GPU_DRIVER_PREFIXES
                .iter()
                .any(|(_, d)| *d == l.name);
        if !other_gpu_driver {
            f.module = Some(l.name.to_string());
            any = true;
        }
    }
    any.then_some(tagged)
}

/// Round 17: the module of an inlined frame (a decoded report's `p9_conn_destroy net/9p/trans_fd.c:909
/// [inline]`: no address of its own) is its caller's. The compiler inlines a static function into its caller's
/// body, so it is code of the caller's object file and module, whatever a sibling module of the same directory
/// its prefix reads as (`p9_` is 9pnet's, but trans_fd.c is 9pnet_fd's). Only module rows on both sides: a
/// header's inline helper (`dma_fence_wait`, a core layer) keeps its own name.
fn inlined_into(frames: &[StackFrame], i: usize) -> Option<Layer> {
    let no_address = |f: &StackFrame| f.offset == 0 && f.size == 0;
    if !no_address(&frames[i]) {
        return None;
    }
    let own = layer_of(super::frame_name::base_name(&frames[i].function)).filter(|l| l.module)?;
    let caller = frames[i + 1..].iter().find(|f| !no_address(f))?;
    layer_of(super::frame_name::base_name(&caller.function))
        .filter(|l| l.module && l.dir == own.dir)
}

fn gpu_driver_by_prefix(function: &str) -> Option<&'static str> {
    super::rules::GPU_DRIVER_PREFIXES
        .iter()
        .find(|(p, _)| function.starts_with(p))
        .map(|(_, d)| *d)
}

/// The layer a stack that names no driver waits in: the innermost frame's with a layer that says more than
/// "the core kernel" (`fs`, `mm`, `kernel`: every stack passes through them). Filesystems are left out: their
/// sites name them by mechanism (a freeze, a journal, a server) whether built in or a module, and a built-in
/// one must read as a modular one does.
pub fn innermost(frames: &[StackFrame]) -> Option<Layer> {
    (0..frames.len())
        .filter(|&i| {
            !super::rules::is_entry_frame(super::frame_name::base_name(&frames[i].function))
        })
        .filter_map(|i| {
            inlined_into(frames, i)
                .or_else(|| layer_of(super::frame_name::base_name(&frames[i].function)))
        })
        .find(|l| {
            !matches!(l.dir, "fs" | "mm" | "kernel" | "net/core") && !l.dir.starts_with("fs/")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(function: &str, offset: u64, size: u64) -> StackFrame {
        StackFrame {
            function: function.to_string(),
            offset,
            size,
            module: None,
        }
    }

    /// Round 17: an inlined static (no address) is its caller's module when the map names a sibling module of
    /// the same directory; a frame with an address, or a caller in another directory, keeps its own.
    #[test]
    fn an_inlined_frame_is_its_callers_module() {
        let f = [
            frame("p9_conn_destroy", 0, 0),
            frame("p9_fd_close", 0x251, 0x430),
            frame("p9_client_create", 0xd1c, 0x10b0),
        ];
        let tagged = tag_built_in(&f).unwrap();
        assert_eq!(tagged[0].module.as_deref(), Some("9pnet_fd"));
        assert_eq!(tagged[2].module.as_deref(), Some("9pnet"));
        let with_address = [
            frame("p9_conn_destroy", 0x10, 0x40),
            frame("p9_fd_close", 0x251, 0x430),
        ];
        assert_eq!(
            tag_built_in(&with_address).unwrap()[0].module.as_deref(),
            Some("9pnet")
        );
    }
}
