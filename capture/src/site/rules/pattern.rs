//! The rules' building blocks: how a rule matches a frame ([`Pattern`]) and the rows of each table (a wait
//! primitive's words, a category, a lock taker), with the constructors the tables are written with.

/// How a rule matches a frame's function name (its `.isra.0`-style suffixes already stripped).
#[derive(Debug, Clone, Copy)]
pub enum Pattern {
    /// One of these names exactly.
    Names(&'static [&'static str]),
    /// A name that starts with this.
    Prefix(&'static str),
    /// A name that contains this (`nouveau_fence_wait`, `radeon_fence_wait_seq_timeout`).
    Contains(&'static str),
}

impl Pattern {
    pub fn matches(self, name: &str) -> bool {
        match self {
            Pattern::Names(names) => names.contains(&name),
            Pattern::Prefix(p) => name.starts_with(p),
            Pattern::Contains(p) => name.contains(p),
        }
    }
}

/// A wait primitive and the words for it.
#[derive(Debug, Clone, Copy)]
pub struct WaitWord {
    pub pattern: Pattern,
    pub words: &'static str,
}

pub(super) const fn w(names: &'static [&'static str], words: &'static str) -> WaitWord {
    WaitWord {
        pattern: Pattern::Names(names),
        words,
    }
}

/// The layer a category belongs to (which team a report goes to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// A GPU driver waiting for the GPU (fences, the DRM scheduler).
    Gpu,
    /// A network or userspace filesystem waiting for its server.
    Filesystem,
    /// The page cache: page locks, writeback.
    PageCache,
    /// Memory management: OOM, reclaim, compaction.
    Memory,
    /// Networking: the RTNL lock, namespace teardown.
    Network,
}

/// A frame pattern and the category it shows.
#[derive(Debug, Clone, Copy)]
pub struct CategoryRule {
    pub pattern: Pattern,
    pub layer: Layer,
    /// `{driver}` is replaced by the waiting GPU driver (amdgpu, nouveau, i915, lima, v3d…).
    pub label: &'static str,
}

pub(super) const fn c(
    names: &'static [&'static str],
    layer: Layer,
    label: &'static str,
) -> CategoryRule {
    CategoryRule {
        pattern: Pattern::Names(names),
        layer,
        label,
    }
}

/// A function that takes a well-known lock itself (or through an inlined helper: `inode_lock` is `down_write`
/// on `i_rwsem`): the lock's slow path is a scheduler function `/proc/<tid>/stack` omits, so on current
/// kernels this function is the top frame of a thread waiting for that lock. Each entry names its mechanism
/// (the lock) and the primitive's words, so a live stack and a pasted log say the same.
#[derive(Debug, Clone, Copy)]
pub struct LockTaker {
    pub pattern: Pattern,
    /// The wait primitive's words ([`super::WAIT_WORDS`]): `mutex wait`, `rwsem wait (write)`…
    pub wait: &'static str,
    /// Which lock: `i_rwsem (the inode lock)`, `cgroup_mutex`…
    pub lock: &'static str,
}

pub(super) const fn t(
    names: &'static [&'static str],
    wait: &'static str,
    lock: &'static str,
) -> LockTaker {
    LockTaker {
        pattern: Pattern::Names(names),
        wait,
        lock,
    }
}
