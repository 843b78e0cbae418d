use super::*;

/// One record as the program writes it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn record(
    tid: u32,
    tgid: u32,
    state: u32,
    flags: u32,
    task: u64,
    mmap_lock: u64,
    blocker: u64,
    owner: u64,
    count: u64,
) -> Vec<u8> {
    let mut r = Vec::new();
    for w in [tid, tgid, state, flags] {
        r.extend_from_slice(&w.to_le_bytes());
    }
    for w in [task, mmap_lock, blocker, owner, count, 0] {
        r.extend_from_slice(&w.to_le_bytes());
    }
    for w in [0u32, 0, 0, 0] {
        r.extend_from_slice(&w.to_le_bytes());
    }
    r.extend_from_slice(&[0u8; 16]);
    r
}

#[test]
fn records_parse_and_owner_words_decode_as_the_kernel_reads_them() {
    // A mutex with the WAITERS flag set in its owner word.
    let mut bytes = record(10, 10, 2, 0, 0xa000, 0xb000, 0xc000, 0xd000 | 1, 0);
    // An rwsem writer waiting on a reader-owned rwsem: READER_OWNED | NONSPINNABLE, two readers, waiters.
    bytes.extend(record(
        11,
        10,
        2,
        0,
        0xa100,
        0xb000,
        0xb000 | 3,
        0xe000 | 3,
        (2 << 8) | 2,
    ));
    // An rwsem reader waiting on a writer: WRITER_LOCKED in the count, the writer in the owner word.
    bytes.extend(record(
        12,
        10,
        2,
        0,
        0xa200,
        0xb000,
        0xb000 | 2,
        0xa100,
        1 | 2,
    ));
    // A semaphore and its last holder.
    bytes.extend(record(13, 10, 2, 0, 0xa300, 0xb000, 0xf000 | 1, 0xa000, 0));
    // Not blocked; a kernel without the field.
    bytes.extend(record(14, 10, 1, 0, 0xa400, 0xb000, 0, 0, 0));
    bytes.extend(record(15, 10, 2, NO_BLOCKER_FIELD, 0xa500, 0, 0, 0, 0));
    let r = parse_records(&bytes).unwrap();
    assert_eq!(r.len(), 6);
    assert_eq!(r[0].blocked_on(), Some((0xc000, BlockerType::Mutex)));
    assert_eq!(r[0].owner_task(), OwnerWord::Task(0xd000));
    assert_eq!(r[0].letter(), 'D');
    assert_eq!(r[1].blocked_on(), Some((0xb000, BlockerType::RwsemWriter)));
    assert_eq!(
        r[1].owner_task(),
        OwnerWord::Readers {
            last: 0xe000,
            count: 2
        }
    );
    assert_eq!(r[2].blocked_on(), Some((0xb000, BlockerType::RwsemReader)));
    assert_eq!(r[2].owner_task(), OwnerWord::Task(0xa100));
    assert_eq!(r[3].blocked_on(), Some((0xf000, BlockerType::Semaphore)));
    assert_eq!(r[3].owner_task(), OwnerWord::Task(0xa000));
    assert_eq!(r[4].blocked_on(), None);
    assert_eq!(r[4].owner_task(), OwnerWord::None);
    assert!(r[4].blocker_field());
    assert!(!r[5].blocker_field());
    assert!(parse_records(&bytes[..RECORD_LEN + 1]).is_err());
    assert!(parse_records(&[]).unwrap().is_empty());
}

/// The checked-in object was built from the checked-in source (gen_task_states.sh records the hash).
#[test]
fn the_object_matches_its_source() {
    crate::task_iter::assert_object_matches_source("task_blockers.bpf.c");
}

fn load_for_test(test: &str, refuse: bool) -> Option<BlockerIter> {
    match BlockerIter::load_object(KERNEL_BTF, OBJECT, refuse) {
        Ok(iter) => Some(iter),
        Err(e) if !nix::unistd::Uid::effective().is_root() && !breadcrumb::in_ci() => {
            eprintln!("skipping {test}: {e}");
            None
        }
        Err(e) => panic!("{test}: the blocker iterator is unavailable as root: {e}"),
    }
}

/// The kernel has `task_struct::blocker` (this machine's 6.18 is built with it): skip the record checks
/// only where it has not, saying so.
fn kernel_has_blocker_field(records: &[BlockerRecord]) -> bool {
    let has = records.iter().all(|r| r.blocker_field());
    if !has {
        eprintln!("this kernel has no task_struct::blocker: only the fallback is tested here");
    }
    has
}

/// The real kernel: two threads of this process write one byte through one shared fd of a file on a frozen
/// ext4. The first holds the file's `f_pos_lock` (a mutex) and sleeps in D in the freeze; the second waits
/// for that mutex. Its record names the mutex, its owner is the first thread's task_struct, and the lock is
/// proven to be that open file's f_pos_lock, on that inode and device. Every thread's mmap_lock is the same
/// address; with the test hook no record carries a blocker.
#[test]
fn a_mutex_waiter_names_its_owner_and_the_file_it_locks() {
    use crate::frozen_fs::{wait_for_state, FrozenFs};
    use crate::ProcRoot;
    use std::os::unix::fs::MetadataExt;
    use std::sync::Arc;
    use std::time::Duration;
    let test = "a_mutex_waiter_names_its_owner_and_the_file_it_locks";
    let Some(iter) = load_for_test(test, false) else {
        return;
    };
    let Some(mut fs) = FrozenFs::for_test(test) else {
        return;
    };
    let path = fs.create_file("shared", b"x").unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    let file = Arc::new(
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap(),
    );
    fs.freeze().unwrap();
    let root = ProcRoot::default();
    let me = std::process::id() as i32;
    let spawn = |file: Arc<std::fs::File>| {
        let (tx, rx) = std::sync::mpsc::channel();
        let handle = std::thread::spawn(move || {
            tx.send(nix::unistd::gettid().as_raw()).unwrap();
            use std::io::Write;
            (&*file).write_all(b"y")
        });
        (rx.recv().unwrap(), handle)
    };
    let (holder, holder_join) = spawn(file.clone());
    wait_for_state(&root, me, holder, 'D', Duration::from_secs(10)).unwrap();
    let (waiter, waiter_join) = spawn(file.clone());
    wait_for_state(&root, me, waiter, 'D', Duration::from_secs(10)).unwrap();

    let records = iter.read().unwrap();
    let find = |tid: i32| *records.iter().find(|r| r.tid == tid).unwrap();
    let (h, w) = (find(holder), find(waiter));
    let mine: Vec<&BlockerRecord> = records.iter().filter(|r| r.tgid == me).collect();
    assert!(mine
        .iter()
        .all(|r| r.mmap_lock == h.mmap_lock && r.mmap_lock != 0));
    if kernel_has_blocker_field(&records) {
        assert_eq!(h.blocked_on(), None, "the freeze is no tracked lock: {h:?}");
        let (_, kind) = w.blocked_on().expect("the waiter's blocker");
        assert_eq!(kind, BlockerType::Mutex);
        assert_eq!(w.owner_task(), OwnerWord::Task(h.task), "{w:?} {h:?}");
        assert_eq!(w.home, LockHome::FilePos, "{w:?}");
        assert_eq!(w.ino, meta.ino());
        let (major, minor) = w.dev_major_minor();
        assert_eq!(
            nix::sys::stat::makedev(u64::from(major), u64::from(minor)),
            meta.dev()
        );
    }
    let refused = load_for_test(test, true).unwrap();
    assert!(refused.refused_for_test());
    let records = refused.read().unwrap();
    assert!(records.iter().all(|r| !r.blocker_field() && r.blocker == 0));
    assert!(records.iter().any(|r| r.tid == waiter && r.letter() == 'D'));

    fs.thaw().unwrap();
    holder_join.join().unwrap().unwrap();
    waiter_join.join().unwrap().unwrap();
}
