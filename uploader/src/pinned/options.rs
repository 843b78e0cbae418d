//! The `pinned` strategy's settings: where staging memory and the arena come from, ring and
//! piece sizes, packing threads; and their one-line form (`BUFFERSxBYTESxTHREADS[:…]`, parsed by
//! [`parse_pinned_config`], written by [`PinnedOptions::describe`]).

use serde::Serialize;

use crate::error::{Error, Result};
use crate::pack::PackStore;

/// Where pinned staging memory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StagingMemory {
    /// `cuMemHostAlloc`: the driver allocates and page-locks.
    HostAlloc,
    /// An anonymous mapping (2 MiB aligned, `MADV_HUGEPAGE`) page-locked with
    /// `cuMemHostRegister`: fewer, larger pages to pin where transparent huge pages are on.
    Register,
    /// The same mapping, faulted in by the packing threads (a huge page each at a time) and
    /// page-locked by the upload that first needs it, while packing goes on: the first buffer
    /// is locked after one small registration, the rest in doubling groups
    /// ([`registration_groups`]) while the submitter waits for packers. An upload of a stager
    /// made for it alone unlocks each group it no longer needs while it waits for packers.
    ///
    /// [`registration_groups`]: super::registration_groups
    Overlap,
}

impl StagingMemory {
    pub fn name(self) -> &'static str {
        match self {
            StagingMemory::HostAlloc => "hostalloc",
            StagingMemory::Register => "register",
            StagingMemory::Overlap => "overlap",
        }
    }
}

/// Where the `pinned` strategy's device arena comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ArenaMemory {
    /// The session's stream-ordered pool ([`Traced::arena_pool`]), which keeps freed arenas
    /// mapped: from the second upload of a process on, copies land in memory the GPU has
    /// already written. Falls back to `cuMemAlloc` where the device has no memory pools.
    ///
    /// [`Traced::arena_pool`]: crate::trace::Traced::arena_pool
    Pool,
    /// A fresh `cuMemAlloc` per upload.
    Alloc,
}

impl ArenaMemory {
    pub fn name(self) -> &'static str {
        match self {
            ArenaMemory::Pool => "pool",
            ArenaMemory::Alloc => "alloc",
        }
    }
}

/// Settings of the `pinned` strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PinnedOptions {
    /// Pinned staging buffers (≥ 2 to overlap packing with copying).
    pub buffers: usize,
    /// Bytes per staging buffer (one asynchronous copy each).
    pub buffer_bytes: u64,
    /// Packing threads (the submitting thread does not pack).
    pub threads: usize,
    /// Idle threads spin (true) or sleep (false). Spinning avoids a wake-up per hand-off (tens
    /// of microseconds in a VM) at the cost of CPU while an upload runs.
    pub spin: bool,
    /// Bytes a packing thread claims at a time (rounded up to 64).
    pub piece_bytes: u64,
    /// Plain or non-temporal stores into staging memory, or `Auto`: time both per upload.
    pub store: PackStore,
    /// How staging memory is allocated and page-locked.
    pub staging: StagingMemory,
    /// Where the device arena comes from.
    pub arena: ArenaMemory,
    /// The submitting thread packs pieces while it waits for packers, instead of spinning: one
    /// more packer where packing is the bottleneck, idle where copying is.
    pub submitter_packs: bool,
    /// A stager made for a single upload (`strategy::upload`, the cold path) sizes its ring to
    /// the upload: one buffer per 8 slices, at least 6, at most `buffers`. On the real workload
    /// (53 slices of 4 MiB) 6 buffers lock 24 MiB instead of 32 and beat 8 cold by 2-7 points of
    /// the copy ceiling with writable locks (runs 25-28), level with read-only ones; 4 buffers
    /// lost 4-10 points to waits, and 4 GiB keeps the whole ring (BENCHMARKS.md).
    pub fit_ring: bool,
    /// Page-lock `Register`/`Overlap` staging read-only for the device
    /// (`CU_MEMHOSTREGISTER_READ_ONLY`) where the device supports it: the device only reads
    /// staging, and unlocking read-only pages takes half as long (no page is marked dirty).
    pub read_only_staging: bool,
    /// Streaming stores of small tensors gathered through an L1 bounce buffer, so every staging
    /// line is written whole ([`super::pack_range`]); off: each tensor streamed on its own
    /// ([`super::pack_range_per_tensor`]). Config `:gather` / `:direct`. Off by default until the
    /// GPU host measures it (BENCHMARKS.md, issue 40: the CPU machine could not tell them apart).
    pub gather: bool,
}

/// The default number of packing threads on a machine with `cpus` CPUs.
pub fn default_packing_threads(cpus: usize) -> usize {
    (cpus * 3 / 4).max(cpus.saturating_sub(2)).clamp(1, 14)
}

impl Default for PinnedOptions {
    fn default() -> Self {
        PinnedOptions {
            buffers: 8,
            buffer_bytes: 4 << 20,
            // All CPUs but two (at least three quarters of them), at most 14: the driver's own
            // threads and the submitting thread need CPUs too. On an H200 host (16 CPUs), 14
            // packers beat 12 in each of 6 same-process comparisons on 217 MB of 772-byte tensors
            // (cold +0.2-4 points of the copy ceiling, reused +1-19), 16 lost to both, and 4 GiB did
            // not change (BENCHMARKS.md, runs 23-24).
            threads: default_packing_threads(
                std::thread::available_parallelism().map_or(1, |p| p.get()),
            ),
            spin: true,
            piece_bytes: 256 << 10,
            // Plain won end to end in every 4 GiB run of the current pipeline, streaming in every
            // reused real-workload run (BENCHMARKS.md): chosen by the mean tensor size per upload.
            // `Auto`'s per-piece timing could not tell the two apart on a busy host.
            store: PackStore::BySize,
            // Cold uploads of the real workload: 57-58 % of the copy ceiling against 48-52 % for
            // `Register` in the same processes; reused and 4 GiB unchanged (BENCHMARKS.md, run 25).
            staging: StagingMemory::Overlap,
            // Fresh cuMemAlloc memory filled ~10 ms slower per 4 GiB (BENCHMARKS.md).
            arena: ArenaMemory::Pool,
            submitter_packs: false,
            fit_ring: true,
            read_only_staging: true,
            gather: false,
        }
    }
}

impl PinnedOptions {
    pub fn validate(&self) -> Result<()> {
        if self.buffers == 0 || self.buffer_bytes == 0 || self.threads == 0 || self.piece_bytes == 0
        {
            return Err(Error::InvalidOptions(
                "pinned: buffers, buffer size, threads and piece size must be > 0".into(),
            ));
        }
        if self.buffer_bytes > 1 << 40 || self.buffers > 4096 {
            return Err(Error::InvalidOptions(
                "pinned: at most 4096 staging buffers of at most 1 TiB".into(),
            ));
        }
        Ok(())
    }

    /// A compact description, e.g. `8x2MiBx8:spin:streaming:hostalloc:pool:piece=256KiB`.
    pub fn describe(&self) -> String {
        format!(
            "{}x{}x{}:{}:{}:{}:{}:piece={}{}{}{}{}",
            self.buffers,
            human_bytes(self.buffer_bytes),
            self.threads,
            if self.spin { "spin" } else { "park" },
            self.store.name(),
            self.staging.name(),
            self.arena.name(),
            human_bytes(self.piece_bytes),
            if self.submitter_packs { ":help" } else { "" },
            if self.fit_ring { ":fit" } else { "" },
            if self.read_only_staging {
                ""
            } else {
                ":writable"
            },
            if self.gather { ":gather" } else { "" }
        )
    }
}

fn human_bytes(b: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if b >= 1 << shift && b.is_multiple_of(1 << shift) {
            return format!("{}{unit}", b >> shift);
        }
    }
    b.to_string()
}

/// Parses a byte count: `67108864`, `64MiB`, `64M`, `4GiB`, `512 KiB` (binary units).
pub fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("not a byte count: {s:?}"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" | "kb" => 10,
        "m" | "mib" | "mb" => 20,
        "g" | "gib" | "gb" => 30,
        other => return Err(format!("unknown unit {other:?} (use KiB, MiB or GiB)")),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("byte count too large: {s:?}"))
}

/// The pinned configuration syntax, for messages and `--help`.
pub const PINNED_CONFIG_SYNTAX: &str =
    "BUFFERSxBYTESxTHREADS[:spin|:park][:auto|:bysize|:plain|:streaming]\
     [:hostalloc|:register|:overlap][:pool|:alloc][:piece=BYTES][:help][:fit][:writable|:read-only]\
     [:gather|:direct], e.g. 8x2MiBx8:streaming:piece=256KiB";

/// Parses a pinned configuration ([`PINNED_CONFIG_SYNTAX`]); unnamed settings keep their
/// defaults. Bytes take KiB/MiB/GiB.
pub fn parse_pinned_config(text: &str) -> Result<PinnedOptions> {
    let bad = || {
        Error::InvalidOptions(format!(
            "pinned config {text:?}: want {PINNED_CONFIG_SYNTAX}"
        ))
    };
    let mut fields = text.split(':');
    let shape = fields.next().unwrap_or_default();
    let parts: Vec<&str> = shape.split('x').collect();
    let [buffers, bytes, threads] = parts.as_slice() else {
        return Err(bad());
    };
    let mut options = PinnedOptions {
        // The ring is as given unless `:fit` says otherwise.
        fit_ring: false,
        buffers: buffers.trim().parse().map_err(|_| bad())?,
        buffer_bytes: parse_bytes(bytes).map_err(|_| bad())?,
        threads: threads.trim().parse().map_err(|_| bad())?,
        ..PinnedOptions::default()
    };
    for field in fields {
        match field.trim() {
            "spin" => options.spin = true,
            "park" => options.spin = false,
            "plain" => options.store = PackStore::Plain,
            "streaming" | "nt" => options.store = PackStore::Streaming,
            "auto" => options.store = PackStore::Auto,
            "bysize" => options.store = PackStore::BySize,
            "hostalloc" => options.staging = StagingMemory::HostAlloc,
            "register" => options.staging = StagingMemory::Register,
            "overlap" => options.staging = StagingMemory::Overlap,
            "pool" => options.arena = ArenaMemory::Pool,
            "alloc" => options.arena = ArenaMemory::Alloc,
            "help" => options.submitter_packs = true,
            "fit" => options.fit_ring = true,
            "writable" => options.read_only_staging = false,
            "read-only" => options.read_only_staging = true,
            "gather" => options.gather = true,
            "direct" => options.gather = false,
            other => match other.strip_prefix("piece=") {
                Some(size) => options.piece_bytes = parse_bytes(size).map_err(|_| bad())?,
                None => return Err(bad()),
            },
        }
    }
    options.validate().map_err(|_| bad())?;
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_packing_threads_leave_two_cpus_and_cap_at_14() {
        let by_cpus: Vec<usize> = [1, 2, 4, 8, 12, 16, 32, 128]
            .iter()
            .map(|&c| default_packing_threads(c))
            .collect();
        assert_eq!(by_cpus, [1, 1, 3, 6, 10, 14, 14, 14]);
    }

    #[test]
    fn pinned_configs() {
        let o = parse_pinned_config("4x8MiBx8").unwrap();
        assert_eq!(
            (o.buffers, o.buffer_bytes, o.threads, o.spin),
            (4, 8 << 20, 8, true)
        );
        assert_eq!(o.piece_bytes, PinnedOptions::default().piece_bytes);
        let o = parse_pinned_config("2x512KiBx3:park:plain:register:piece=64KiB").unwrap();
        assert_eq!(
            (o.buffers, o.buffer_bytes, o.threads, o.spin),
            (2, 512 << 10, 3, false)
        );
        assert_eq!(
            (o.store, o.staging, o.piece_bytes),
            (PackStore::Plain, StagingMemory::Register, 64 << 10)
        );
        assert_eq!(parse_pinned_config(&o.describe()).unwrap(), o);
        let gathered = parse_pinned_config("8x4MiBx14:streaming:gather").unwrap();
        assert!(gathered.gather && !o.gather && !PinnedOptions::default().gather);
        assert_eq!(parse_pinned_config(&gathered.describe()).unwrap(), gathered);
        assert!(
            !parse_pinned_config("8x4MiBx14:gather:direct")
                .unwrap()
                .gather
        );
        for bad in [
            "",
            "4x8MiB",
            "0x8MiBx8",
            "4x8XBx8",
            "4x8MiBx8:nap",
            "axbxc",
            "4x8MiBx8:piece=0",
            "4x8MiBx8:piece=",
        ] {
            assert!(parse_pinned_config(bad).is_err(), "{bad}");
        }
    }
}
