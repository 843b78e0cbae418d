use super::*;
use crate::decode::arch::Arch;
use crate::process::{snapshot_process, SnapshotOptions};
use crate::testing::FakeProc;

const API_LOCK_WAIT: &str = "[<0>] os_acquire_rwlock_write+0x2b/0x40 [nvidia]
[<0>] portSyncRwLockAcquireWrite+0x10/0x40 [nvidia]
[<0>] rmapiLockAcquire+0xbb/0x350 [nvidia]
[<0>] serverTopLock_Prologue+0x49/0x100 [nvidia]
[<0>] serverAllocResource+0x1dc/0x650 [nvidia]
[<0>] rmapiAllocWithSecInfo+0x20c/0x440 [nvidia]
[<0>] RmIoctl+0xa2a/0xdf0 [nvidia]
[<0>] rm_ioctl+0x7c/0x620 [nvidia]
[<0>] nvidia_unlocked_ioctl+0x441/0x930 [nvidia]
";
const GPU_LOCK_WAIT: &str = "[<0>] down+0x3b/0x50
[<0>] os_acquire_mutex+0x22/0x40 [nvidia]
[<0>] _rmGpuLocksAcquire+0x1a4/0x520 [nvidia]
[<0>] rmGpuLocksAcquire+0x1a/0x30 [nvidia]
[<0>] rm_ioctl+0x7c/0x620 [nvidia]
[<0>] nvidia_unlocked_ioctl+0x441/0x930 [nvidia]
";
const PINNING: &str = "[<0>] folio_wait_bit_common+0x12f/0x300
[<0>] __get_user_pages+0x2b0/0x6b0
[<0>] pin_user_pages+0x6d/0xa0
[<0>] os_lock_user_pages+0xa1/0x1b0 [nvidia]
[<0>] RmCreateOsDescriptor+0x9c/0x1a0 [nvidia]
[<0>] RmIoctl+0x61e/0xdf0 [nvidia]
[<0>] rm_ioctl+0x7c/0x620 [nvidia]
[<0>] nvidia_unlocked_ioctl+0x441/0x930 [nvidia]
";

/// The syscall line of a thread blocked in `ioctl(fd 9, NV_ESC_RM_ALLOC)` on `arch`.
fn rm_ioctl(arch: Arch) -> String {
    let nr = match arch {
        Arch::X86_64 => 16,
        Arch::Aarch64 => 29,
    };
    format!("{nr} 0x9 0xc030462b 0x7fe2a77fd220 0x0 0x0 0x0 0x7fe2a77fd110 0x7fe4e09250bd\n")
}

fn futex(arch: Arch) -> &'static str {
    match arch {
        Arch::X86_64 => "202 0x7f0 0x80 0x0 0x0 0x0 0x0 0x7ffd0 0x7f1\n",
        Arch::Aarch64 => "98 0x7f0 0x80 0x0 0x0 0x0 0x0 0x7ffd0 0x7f1\n",
    }
}

/// A process whose threads 4101 and 4102 wait for the RM API lock, 4103 for a GPU lock, while 4104 is asleep
/// (S) pinning pages inside an RM call and 4105 sleeps in a futex (no RM call).
fn tree(arch: Arch, with_holder: bool) -> FakeProc {
    let fake = FakeProc::new();
    fake.process(4100).comm("rmB").fd(9, "/dev/nvidiactl");
    fake.task(4100, 4100)
        .comm("rmB")
        .state('S')
        .wchan("futex_wait_queue")
        .syscall(futex(arch));
    for tid in [4101, 4102] {
        fake.task(4100, tid)
            .comm("rmB")
            .state('D')
            .wchan("os_acquire_rwlock_write")
            .syscall(&rm_ioctl(arch))
            .stack(API_LOCK_WAIT);
    }
    fake.task(4100, 4103)
        .comm("rmB")
        .state('D')
        .wchan("down")
        .syscall(&rm_ioctl(arch))
        .stack(GPU_LOCK_WAIT);
    if with_holder {
        fake.task(4100, 4104)
            .comm("rmA")
            .state('S')
            .wchan("folio_wait_bit_common")
            .syscall(&rm_ioctl(arch))
            .stack(PINNING);
    }
    fake.task(4100, 4105)
        .comm("rmB")
        .state('S')
        .wchan("futex_wait_queue")
        .syscall(futex(arch));
    fake
}

fn snapshot(fake: &FakeProc, arch: Arch) -> Vec<ThreadSnapshot> {
    let opts = SnapshotOptions {
        arch,
        ..SnapshotOptions::default()
    };
    snapshot_process(&fake.root(), 4100, &opts).unwrap().threads
}

#[test]
fn waiters_are_linked_to_the_thread_inside_another_rm_call_on_both_arches() {
    for arch in [Arch::X86_64, Arch::Aarch64] {
        let threads = snapshot(&tree(arch, true), arch);
        let by_tid = |tid| threads.iter().find(|t| t.tid == tid).unwrap();
        for tid in [4101, 4102] {
            let t = by_tid(tid);
            assert_eq!(
                t.waits_for.as_deref(),
                Some("RM API lock"),
                "{arch:?} {tid}"
            );
            assert_eq!(t.blocked_behind, [4103, 4104], "{arch:?} {tid}");
        }
        // A GPU-lock waiter holds no GPU lock, but it is past the API lock: only the pinning thread can
        // hold the GPU lock it waits for.
        let gpu = by_tid(4103);
        assert_eq!(gpu.waits_for.as_deref(), Some("GPU lock"));
        assert_eq!(gpu.blocked_behind, [4104]);
        // The sleeping holder was read in full (it is not in D), the futex sleeper is not a holder.
        assert!(in_rm_call(by_tid(4104)), "{arch:?}");
        assert!(!in_rm_call(by_tid(4105)));
        assert_eq!(
            holder_sentence(&threads).unwrap(),
            "2 threads wait for the RM API lock; likely held by tid 4103 (`rmB`) in NV_ESC_RM_ALLOC, waits for \
             the GPU lock (or 1 other thread inside RM calls: tid 4104)"
        );
    }
}

#[test]
fn with_no_other_thread_inside_an_rm_call_the_holder_is_not_visible() {
    let arch = Arch::X86_64;
    let fake = tree(arch, false);
    let mut threads = snapshot(&fake, arch);
    // Only the API-lock waiters: the GPU-lock waiter removed.
    threads.retain(|t| t.tid != 4103);
    for t in threads.iter_mut() {
        t.waits_for = None;
        t.blocked_behind.clear();
    }
    link_rm_lock_holders(&mut threads);
    let waiter = threads.iter().find(|t| t.tid == 4101).unwrap();
    assert_eq!(waiter.waits_for.as_deref(), Some("RM API lock"));
    assert!(waiter.blocked_behind.is_empty());
    assert_eq!(
        holder_sentence(&threads).unwrap(),
        "2 threads wait for the RM API lock; holder not visible (no other thread inside an NVIDIA RM call)"
    );
}

#[test]
fn a_pinning_holder_is_worded_with_what_it_does() {
    let arch = Arch::Aarch64;
    let threads = snapshot(&tree(arch, true), arch);
    let holder = threads.iter().find(|t| t.tid == 4104).unwrap();
    assert_eq!(
        holder_activity(holder),
        "NV_ESC_RM_ALLOC, is pinning user pages (stuck in a page fault)"
    );
    let only_pinning: Vec<ThreadSnapshot> =
        threads.iter().filter(|t| t.tid != 4103).cloned().collect();
    assert_eq!(
        holder_sentence(&only_pinning).unwrap(),
        "2 threads wait for the RM API lock; likely held by tid 4104 (`rmA`) in NV_ESC_RM_ALLOC, is pinning user \
         pages (stuck in a page fault)"
    );
}

#[test]
fn no_rm_lock_wait_means_no_sentence_and_no_extra_reads() {
    let arch = Arch::X86_64;
    let fake = FakeProc::new();
    fake.process(4200).comm("py");
    fake.task(4200, 4200)
        .comm("py")
        .state('S')
        .wchan("futex_wait_queue")
        .syscall(futex(arch));
    fake.task(4200, 4201)
        .comm("py")
        .state('D')
        .wchan("percpu_rwsem_wait")
        .syscall(futex(arch));
    let threads = snapshot_process(
        &fake.root(),
        4200,
        &SnapshotOptions {
            arch,
            ..SnapshotOptions::default()
        },
    )
    .unwrap()
    .threads;
    assert!(holder_sentence(&threads).is_none());
    // The S thread was not read in full: no RM lock waiter asked for it.
    assert!(threads
        .iter()
        .find(|t| t.tid == 4200)
        .unwrap()
        .syscall
        .is_none());
}
