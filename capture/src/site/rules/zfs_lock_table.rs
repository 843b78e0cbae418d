//! Round 10 (issue 38 held-out: ZFS kernel threads): ZFS's own lock takers (the ARC hash table's bucket mutex,
//! a dnode's prefetch stream lock), each read from OpenZFS's source; kept apart from [`super::LOCK_TAKERS`]
//! so that table stays within the house's file length. The lookups read these rows after it.

use super::pattern::{t, LockTaker};

/// Round 10's ZFS lock takers.
pub const ZFS_LOCK_TAKERS: &[LockTaker] = &[
    // module/zfs/arc.c: buf_hash_insert hashes a header into the ARC's hash table and takes that bucket's
    // mutex (mutex_enter(BUF_HASH_LOCK(idx))), held by whoever evicts or looks up a header of that bucket;
    // a zio write-completion thread (arc_write_done) blocks on it. arc_buf_destroy takes the same mutex of
    // its header (mutex_enter(HDR_LOCK(hdr)), HDR_LOCK being BUF_HASH_LOCK of the header's bucket).
    t(
        &["buf_hash_insert", "arc_buf_destroy"],
        "mutex wait",
        "the ARC hash table's bucket mutex (BUF_HASH_LOCK, ZFS)",
    ),
    // module/zfs/dmu_zfetch.c: the prefetcher takes the dnode's stream lock (rw_enter(&zf->zf_rwlock,
    // RW_READER), RW_WRITER to reset or create a stream) on every read through dmu_buf_hold_array_by_dnode.
    t(
        &["dmu_zfetch"],
        "rwsem wait",
        "the dnode's prefetch stream lock (zf_rwlock, ZFS)",
    ),
];
