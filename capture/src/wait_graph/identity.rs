//! What a lock is: the mmap_lock of which process (its address is some task's `&mm->mmap_lock`), an
//! inode's lock or an open file's position lock and which file (the records prove the home by a back
//! pointer; the path comes from an fd of a thread in the graph with the same device and inode), a
//! superblock's `s_umount`, a static lock of the kernel or of a module by `/proc/kallsyms`, else its kind,
//! its address and the function that takes it.
//!
//! [`Symbols`] is `/proc/kallsyms` parsed (pure): data symbols are listed only on kernels built with
//! `CONFIG_KALLSYMS_ALL`; without it an address is still placed in the kernel image or a module by the
//! text symbols around it.

use std::collections::BTreeMap;

use super::{LockIdentity, LockKind, Lookup, SymbolHit};
use crate::blockers::{BlockerRecord, LockHome};

/// What a lock is known by before it is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyParts {
    Address(u64),
    MmapOf(i32),
    VmaOf(i32),
    Named(&'static str),
}

/// The identity of the lock behind `key`. `record` is a waiter's record (its proven home), `records` every
/// task's (to find whose mmap_lock an address is), `pids` the processes of its waiters (for the path).
pub fn identify(
    key: KeyParts,
    record: Option<BlockerRecord>,
    records: &BTreeMap<i32, &BlockerRecord>,
    lookup: &mut dyn Lookup,
    pids: &[i32],
) -> LockIdentity {
    let mut id = LockIdentity::default();
    match key {
        KeyParts::MmapOf(pid) => {
            id.class = "mmap_lock".into();
            id.pid = Some(pid);
            id.comm = lookup.comm(pid);
        }
        KeyParts::VmaOf(pid) => {
            id.class = "vma_lock".into();
            id.pid = Some(pid);
            id.comm = lookup.comm(pid);
        }
        KeyParts::Named(label) => id.class = label.to_string(),
        KeyParts::Address(address) => {
            if let Some(r) = records.values().find(|r| r.mmap_lock == address) {
                id.class = "mmap_lock".into();
                id.pid = Some(r.tgid);
                id.comm = lookup.comm(r.tgid);
                return id;
            }
            let home = record
                .filter(|r| r.blocked_on().map(|(l, _)| l) == Some(address))
                .map(|r| (r.home, r.dev_major_minor(), r.ino));
            match home {
                Some((home, dev, ino)) if home != LockHome::Unknown => {
                    id.class = match home {
                        LockHome::InodeRwsem => "i_rwsem",
                        LockHome::InodeInvalidate => "invalidate_lock",
                        LockHome::SuperblockUmount => "s_umount",
                        LockHome::FilePos => "f_pos_lock",
                        LockHome::Unknown => "unknown",
                    }
                    .into();
                    id.dev = Some(format!("{}:{}", dev.0, dev.1));
                    if home != LockHome::SuperblockUmount {
                        id.ino = Some(ino);
                        id.path = lookup.path_of(pids, dev, ino);
                    }
                }
                _ => match lookup.symbol(address) {
                    Some(hit) => {
                        id.class = if hit.module.is_some() {
                            "module static"
                        } else {
                            "kernel static"
                        }
                        .into();
                        id.symbol = hit.symbol;
                        id.module = hit.module;
                    }
                    None => id.class = "unknown".into(),
                },
            }
        }
    }
    id
}

/// The lock in words, plain text (renderers escape what others chose: comms, paths).
pub fn name(id: &LockIdentity, kind: LockKind) -> String {
    let process = |pid: Option<i32>, comm: &Option<String>| {
        let pid = pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into());
        match comm {
            Some(c) => format!("pid {pid} ({c})"),
            None => format!("pid {pid}"),
        }
    };
    let file = || match (&id.path, &id.dev, id.ino) {
        (Some(path), _, _) => path.clone(),
        (None, Some(dev), Some(ino)) => format!("inode {ino} on device {dev}"),
        _ => "a file".to_string(),
    };
    match id.class.as_str() {
        "mmap_lock" => format!("the mmap_lock of {}", process(id.pid, &id.comm)),
        "vma_lock" => format!("a VMA lock of {}", process(id.pid, &id.comm)),
        "i_rwsem" => format!("the inode lock (i_rwsem) of {}", file()),
        "invalidate_lock" => format!("the invalidate_lock of {}", file()),
        "f_pos_lock" => format!("the file-position lock (f_pos_lock) of an open {}", file()),
        "s_umount" => format!(
            "the s_umount of the filesystem on device {}",
            id.dev.as_deref().unwrap_or("?")
        ),
        "kernel static" | "module static" => {
            let place = match &id.module {
                Some(m) => format!("module {m}"),
                None => "the kernel".to_string(),
            };
            match &id.symbol {
                Some(s) => format!("{s} (a static {} of {place})", kind.word()),
                None => format!("a static {} of {place}", kind.word()),
            }
        }
        "unknown" => match &id.taken_in {
            Some(f) => format!("{} taken in {f}", kind.with_article()),
            None => kind.with_article(),
        },
        label => {
            let place = match (&id.symbol, &id.module) {
                (Some(s), Some(m)) => format!(" ({s} in module {m})"),
                (None, Some(m)) => format!(" (in module {m})"),
                (Some(s), None) => format!(" ({s})"),
                (None, None) => String::new(),
            };
            format!("the NVIDIA {label}{place}")
        }
    }
}

/// `/proc/kallsyms`, sorted by address.
#[derive(Debug, Clone, Default)]
pub struct Symbols {
    /// (address, type letter, name, module)
    entries: Vec<(u64, char, String, Option<String>)>,
    /// The core kernel's lowest and highest symbol addresses.
    core: Option<(u64, u64)>,
    /// Each module's lowest and highest symbol addresses.
    modules: BTreeMap<String, (u64, u64)>,
}

/// Data symbol types (`nm`): initialized, bss, read-only, small data.
const DATA_TYPES: &[char] = &['d', 'D', 'b', 'B', 'r', 'R', 'g', 'G', 's', 'S'];

/// A data symbol further than this below an address does not contain it (the table has no sizes).
const MAX_DATA_OFFSET: u64 = 1 << 20;

impl Symbols {
    /// Parses kallsyms text (`ffffffff81000000 T _stext`, `ffffffffc0a01000 t uvm_ioctl\t[nvidia_uvm]`).
    /// Lines that do not parse are skipped; all-zero addresses (no privilege to see them) are dropped.
    pub fn parse(text: &[u8]) -> Symbols {
        let mut entries = Vec::new();
        for line in text.split(|&b| b == b'\n') {
            let line = String::from_utf8_lossy(line);
            let mut parts = line.split_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            let mut kinds = kind.chars();
            let (Some(kind), None) = (kinds.next(), kinds.next()) else {
                continue;
            };
            if addr == 0 {
                continue;
            }
            let module = parts
                .next()
                .and_then(|m| m.strip_prefix('[')?.strip_suffix(']'))
                .map(str::to_string);
            entries.push((addr, kind, name.to_string(), module));
        }
        entries.sort_by_key(|e| e.0);
        let mut core: Option<(u64, u64)> = None;
        let mut modules: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for (addr, _, _, module) in &entries {
            let range = match module {
                Some(m) => modules.entry(m.clone()).or_insert((*addr, *addr)),
                None => core.get_or_insert((*addr, *addr)),
            };
            range.0 = range.0.min(*addr);
            range.1 = range.1.max(*addr);
        }
        Symbols {
            entries,
            core,
            modules,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The static object an address lies in: a data symbol at or below it, else the kernel image or the
    /// module whose symbols surround it. None for anything else (heap, stacks, vmalloc).
    pub fn place(&self, address: u64) -> Option<SymbolHit> {
        let at = self.entries.partition_point(|e| e.0 <= address);
        if let Some((base, kind, name, module)) = at.checked_sub(1).map(|i| &self.entries[i]) {
            if DATA_TYPES.contains(kind) && address - base < MAX_DATA_OFFSET {
                let off = address - base;
                return Some(SymbolHit {
                    symbol: Some(if off == 0 {
                        name.clone()
                    } else {
                        format!("{name}+{off:#x}")
                    }),
                    module: module.clone(),
                });
            }
        }
        if let Some((m, _)) = self
            .modules
            .iter()
            .find(|(_, (lo, hi))| address >= *lo && address < hi.saturating_add(MAX_DATA_OFFSET))
        {
            return Some(SymbolHit {
                symbol: None,
                module: Some(m.clone()),
            });
        }
        // The kernel image: its data follows its text (rodata, data, bss) by at most tens of MiB.
        let (lo, hi) = self.core?;
        (address >= lo && address < hi.saturating_add(64 << 20)).then_some(SymbolHit {
            symbol: None,
            module: None,
        })
    }
}
