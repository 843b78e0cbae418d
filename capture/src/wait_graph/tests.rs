use std::collections::BTreeMap;

use super::build::build;
use super::holders::{apply, judge, Candidate, Obs, SeenCall, Takers};
use super::identity::Symbols;
use super::live::{mount_device, parse_exec_start, parse_fdinfo};
use super::*;
use crate::blockers::parse_records;
use crate::snapshot::{StackFrame, SyscallInfo};

fn frame(name: &str, module: Option<&str>) -> StackFrame {
    StackFrame {
        function: name.to_string(),
        offset: 0x10,
        size: 0x100,
        module: module.map(str::to_string),
    }
}

fn thread(
    tid: i32,
    comm: &str,
    state: &str,
    stack: &[&str],
    syscall: Option<(i64, &str)>,
) -> ThreadSnapshot {
    ThreadSnapshot {
        tid,
        comm: comm.to_string(),
        state: state.to_string(),
        stack: stack.iter().map(|f| frame(f, None)).collect(),
        syscall: syscall.map(|(nr, name)| SyscallInfo::Blocked {
            nr,
            name: (nr >= 0).then(|| name.to_string()),
            args: vec!["0x0".into(); 6],
            sp: "0x0".into(),
            pc: "0x0".into(),
        }),
        ..ThreadSnapshot::default()
    }
}

/// A record as the BPF program writes it (task addresses are tid * 0x1000).
#[derive(Default, Clone, Copy)]
struct Rec {
    tid: u32,
    tgid: u32,
    state: u32,
    flags: u32,
    mmap_lock: u64,
    blocker: u64,
    owner: u64,
    count: u64,
    ino: u64,
    dev: u32,
    home: u32,
    mm_owner: u64,
    mm_count: u64,
}

fn task(tid: u32) -> u64 {
    0xffff_8880_0000_0000 + u64::from(tid) * 0x1000
}

fn bytes(recs: &[Rec]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in recs {
        for w in [r.tid, r.tgid, r.state, r.flags] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        for w in [task(r.tid), r.mmap_lock, r.blocker, r.owner, r.count, r.ino] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        for w in [r.dev, r.home, 0o100644, 0] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        for w in [r.mm_owner, r.mm_count] {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
    out
}

/// A lookup over fixed data: other processes' threads, comms, waits, paths.
#[derive(Default)]
struct Fixed {
    threads: BTreeMap<i32, (i32, ThreadSnapshot)>,
    comms: BTreeMap<i32, String>,
    waited: BTreeMap<i32, f64>,
    paths: BTreeMap<u64, String>,
    symbols: Option<Symbols>,
}

impl Lookup for Fixed {
    fn thread(&mut self, pid: i32, tid: i32) -> Option<ThreadSnapshot> {
        self.threads
            .get(&tid)
            .filter(|(p, _)| *p == pid)
            .map(|(_, t)| t.clone())
    }
    fn comm(&mut self, pid: i32) -> Option<String> {
        self.comms.get(&pid).cloned()
    }
    fn last_ran_s_ago(&mut self, _: i32, tid: i32) -> Option<f64> {
        self.waited.get(&tid).copied()
    }
    fn path_of(&mut self, _: &[i32], _: (u32, u32), ino: u64) -> Option<String> {
        self.paths.get(&ino).cloned()
    }
    fn symbol(&mut self, address: u64) -> Option<SymbolHit> {
        self.symbols.as_ref()?.place(address)
    }
}

const D: u32 = 2;
const MM: u64 = 0xffff_8881_0000_0040;

/// A mutex waiter, its owner waiting for an inode's i_rwsem held by a writer in another process, which
/// itself sleeps in a freeze: one chain of two locks, the file named, the holder across processes.
#[test]
fn a_chain_of_two_locks_across_processes_with_the_file_named() {
    let fpos = 0xffff_8882_0000_0100u64;
    let irwsem = 0xffff_8882_0000_0200u64;
    let recs = [
        // 11 waits for the f_pos_lock owned by 12 (WAITERS flag set in the owner word).
        Rec {
            tid: 11,
            tgid: 10,
            state: D,
            mmap_lock: MM,
            blocker: fpos,
            owner: task(12) | 1,
            home: 4,
            ino: 77,
            dev: 7 << 20,
            ..Rec::default()
        },
        // 12 waits (as writer) for the i_rwsem writer-owned by 21, of process 20.
        Rec {
            tid: 12,
            tgid: 10,
            state: D,
            mmap_lock: MM,
            blocker: irwsem | 3,
            owner: task(21),
            count: 1 | 2,
            home: 1,
            ino: 77,
            dev: 7 << 20,
            ..Rec::default()
        },
        Rec {
            tid: 21,
            tgid: 20,
            state: D,
            mmap_lock: MM + 0x1000,
            ..Rec::default()
        },
        Rec {
            tid: 10,
            tgid: 10,
            state: 1,
            mmap_lock: MM,
            ..Rec::default()
        },
    ];
    let b = bytes(&recs);
    let records = parse_records(&b).unwrap();
    let threads = vec![
        thread(10, "main", "S", &["futex_do_wait"], Some((202, "futex"))),
        thread(
            11,
            "writer-b",
            "D",
            &["fdget_pos", "ksys_write"],
            Some((1, "write")),
        ),
        thread(
            12,
            "writer-a",
            "D",
            &["ext4_buffered_write_iter", "vfs_write"],
            Some((1, "write")),
        ),
    ];
    let mut lookup = Fixed::default();
    lookup.threads.insert(
        21,
        (
            20,
            thread(
                21,
                "dio",
                "D",
                &["percpu_rwsem_wait", "ext4_page_mkwrite"],
                None,
            ),
        ),
    );
    lookup.paths.insert(77, "/mnt/a/data".into());
    lookup.waited.insert(11, 3.0);
    let g = build(10, &threads, Records::Read(&records), &mut lookup);
    assert_eq!(g.locks.len(), 2, "{g:#?}");
    let (l1, l2) = (&g.locks[0], &g.locks[1]);
    assert_eq!(l1.kind, LockKind::Mutex);
    assert_eq!(l1.identity.class, "f_pos_lock");
    assert_eq!(l1.identity.path.as_deref(), Some("/mnt/a/data"));
    assert_eq!(l1.identity.dev.as_deref(), Some("7:0"));
    assert_eq!(l1.waiters[0].tid, 11);
    assert_eq!(l1.holders[0].tid, 12);
    assert_eq!(l1.holders[0].evidence, Evidence::Owner);
    assert_eq!(l1.holders[0].waits_for.as_deref(), Some("L2"));
    assert_eq!(l2.kind, LockKind::Rwsem);
    assert_eq!(l2.identity.class, "i_rwsem");
    assert_eq!(l2.waiters[0].mode, Some(Mode::Write));
    let h = &l2.holders[0];
    assert_eq!(
        (h.tid, h.pid, h.evidence, h.mode),
        (21, 20, Evidence::Writer, Some(Mode::Write))
    );
    assert!(h.doing.starts_with("in D"), "{}", h.doing);
    assert_eq!(g.chains, vec![vec!["L1".to_string(), "L2".to_string()]]);
    assert!(g.deadlocks.is_empty());
    let s = render::sentence(&g, Some(11), &|_| None).unwrap();
    assert!(
        s.starts_with("1 thread waits for the file-position lock (f_pos_lock) of an open `/mnt/a/data` (in write); held by tid 12 `writer-a`"),
        "{s}"
    );
    assert!(s.contains("; tid 12 itself waits: 1 thread waits for the inode lock (i_rwsem) of `/mnt/a/data` (for writing, in write); held for writing by tid 21 `dio`"), "{s}");
    assert!(s.contains("held for at least 3.0 s"), "{s}");
}

/// Two mutexes, each owner waiting for the other's: a deadlock, listed once.
#[test]
fn crossed_mutexes_are_a_deadlock() {
    let (a, b) = (0xffff_8883_0000_0000u64, 0xffff_8883_0000_1000u64);
    let recs = [
        Rec {
            tid: 31,
            tgid: 30,
            state: D,
            blocker: a,
            owner: task(32),
            ..Rec::default()
        },
        Rec {
            tid: 32,
            tgid: 30,
            state: D,
            blocker: b,
            owner: task(31) | 1,
            ..Rec::default()
        },
    ];
    let b2 = bytes(&recs);
    let records = parse_records(&b2).unwrap();
    let threads = vec![
        thread(31, "left", "D", &["do_left"], Some((16, "ioctl"))),
        thread(32, "right", "D", &["do_right"], Some((16, "ioctl"))),
    ];
    let g = build(30, &threads, Records::Read(&records), &mut NoLookup);
    assert_eq!(g.locks.len(), 2);
    assert_eq!(g.deadlocks, vec![vec!["L1".to_string(), "L2".to_string()]]);
    assert!(g.chains.is_empty(), "{:?}", g.chains);
    let s = render::sentence(&g, Some(31), &|_| None).unwrap();
    assert!(s.contains("deadlock: tid 31 waits for"), "{s}");
    // The lock's name says who takes it when nothing else names it.
    assert_eq!(g.locks[0].identity.taken_in.as_deref(), Some("do_left"));
    assert_eq!(g.locks[0].name, "a mutex taken in do_left");
    assert!(render::markdown(&g, &|_| None).contains("**Deadlock:** L1 → L2 → L1"));
}

/// mmap and a page fault wait killably (no blocker record): the lock is known from their stacks, and the
/// mmap_lock's own words (readers, last reader) name the populating thread; a semaphore waiter with no
/// holder field says so.
#[test]
fn a_killable_mmap_lock_wait_is_named_by_the_lock_words() {
    let readers = (1 << 8) | 2; // one reader, waiters
    let recs = [
        Rec {
            tid: 41,
            tgid: 40,
            state: 0,
            mmap_lock: MM,
            mm_owner: task(41) | 3,
            mm_count: readers,
            ..Rec::default()
        },
        Rec {
            tid: 42,
            tgid: 40,
            state: D,
            mmap_lock: MM,
            mm_owner: task(41) | 3,
            mm_count: readers,
            ..Rec::default()
        },
        Rec {
            tid: 43,
            tgid: 40,
            state: D,
            mmap_lock: MM,
            mm_owner: task(41) | 3,
            mm_count: readers,
            ..Rec::default()
        },
    ];
    let b = bytes(&recs);
    let records = parse_records(&b).unwrap();
    let mut populate = thread(41, "populate", "R", &[], None);
    populate.syscall = Some(SyscallInfo::Running { running: true });
    let threads = vec![
        populate,
        thread(42, "mapper", "D", &["vm_mmap_pgoff"], Some((9, "mmap"))),
        thread(
            43,
            "fault",
            "D",
            &["lock_mm_and_find_vma", "exc_page_fault"],
            Some((-1, "")),
        ),
    ];
    let mut lookup = Fixed::default();
    lookup.comms.insert(40, "trainer".into());
    let g = build(40, &threads, Records::Read(&records), &mut lookup);
    assert_eq!(g.locks.len(), 1, "{g:#?}");
    let l = &g.locks[0];
    assert_eq!(l.identity.class, "mmap_lock");
    assert_eq!(l.identity.pid, Some(40));
    assert_eq!(l.readers, Some(1));
    let h = &l.holders[0];
    assert_eq!(
        (h.tid, h.evidence, h.mode),
        (41, Evidence::LastReader, Some(Mode::Read))
    );
    let modes: Vec<Option<Mode>> = l.waiters.iter().map(|w| w.mode).collect();
    assert_eq!(modes, [Some(Mode::Write), Some(Mode::Read)]);
    let s = render::sentence(&g, Some(42), &|tid| {
        (tid == 41).then(|| "breadcrumb `x` entered 9 s ago".to_string())
    })
    .unwrap();
    assert!(
        s.starts_with("2 threads wait for the mmap_lock of pid 40 (`trainer`) (1 for writing in mmap, 1 for reading in page fault); held for reading by tid 41 `populate` (the kernel's last reader), running — breadcrumb `x` entered 9 s ago"),
        "{s}"
    );
    // No records at all: the same waiters, the lock by their stacks, no holder until samples name one.
    let g = build(40, &threads, Records::Missing("no BTF"), &mut lookup);
    assert_eq!(g.locks.len(), 1);
    assert!(g.locks[0].holders.is_empty());
    assert!(
        g.records.starts_with("no kernel records (no BTF)"),
        "{}",
        g.records
    );
    // A semaphore without last_holder.
    let recs = [Rec {
        tid: 51,
        tgid: 50,
        state: D,
        flags: 0x4,
        blocker: 0xffff_8884_0000_0000 | 1,
        ..Rec::default()
    }];
    let b = bytes(&recs);
    let records = parse_records(&b).unwrap();
    let g = build(
        50,
        &[thread(51, "s", "D", &["down"], Some((16, "ioctl")))],
        Records::Read(&records),
        &mut NoLookup,
    );
    assert_eq!(g.locks[0].kind, LockKind::Semaphore);
    assert!(g.locks[0]
        .holder_unknown
        .as_deref()
        .unwrap()
        .contains("a semaphore has no owner"));
}

/// Without records: an mprotect waiting for a VMA lock held by a fault in D, and an mmap waiting for the
/// mmap_lock: the fault is named by its stack.
#[test]
fn without_records_the_stack_names_a_fault_holding_its_vma() {
    let threads = vec![
        thread(
            61,
            "fault",
            "D",
            &["percpu_rwsem_wait", "ext4_page_mkwrite", "do_page_fault"],
            Some((-1, "")),
        ),
        thread(
            62,
            "protect",
            "D",
            &["__vma_start_write", "mprotect_fixup"],
            Some((10, "mprotect")),
        ),
    ];
    let g = build(60, &threads, Records::Missing("test"), &mut NoLookup);
    let l = g.lock_waited_by(62).unwrap();
    assert_eq!(l.identity.class, "vma_lock");
    assert_eq!(l.holders[0].tid, 61);
    assert_eq!(l.holders[0].evidence, Evidence::Stack);
}

fn obs(at_s: f64, state: char, utime: u64, stime: u64, call: Option<SeenCall>) -> Obs {
    Obs {
        at_ns: (at_s * 1e9) as u64,
        state,
        utime,
        stime,
        call,
        stack: Vec::new(),
    }
}

fn mmap(flags: u64) -> SeenCall {
    SeenCall::In {
        name: "mmap".into(),
        arg0: 0,
        detail: None,
        flags,
    }
}

/// The running holder is the thread in the kernel in every sample; a sleeper in futex, a thread in user
/// space, and one that made two different calls are not.
#[test]
fn judge_names_only_the_thread_inside_one_call_throughout() {
    let c = |tid, obs| Candidate {
        pid: 1,
        tid,
        comm: "t".into(),
        obs,
    };
    let holder = c(
        2,
        vec![
            obs(0.0, 'R', 2, 100, Some(SeenCall::Running)),
            obs(0.5, 'R', 2, 150, Some(mmap(0x8022))),
            obs(1.0, 'R', 2, 200, Some(SeenCall::Running)),
        ],
    );
    let j = judge(&holder, Takers::MmapLock);
    assert!(j.qualifies && j.in_kernel && j.populating, "{j:?}");
    assert_eq!(j.call.as_deref(), Some("mmap"));
    assert_eq!((j.inside, j.of), (3, 3));
    assert!((j.system_s - 1.0).abs() < 1e-9);
    assert!(
        j.doing().starts_with(
            "running in the kernel in mmap (3 of 3 samples over 1.0 s, 1.00 s of system time"
        ),
        "{}",
        j.doing()
    );
    let futex = SeenCall::In {
        name: "futex".into(),
        arg0: 7,
        detail: None,
        flags: 0,
    };
    let sleeper = c(
        3,
        vec![
            obs(0.0, 'S', 5, 5, Some(futex.clone())),
            obs(1.0, 'S', 5, 5, Some(futex)),
        ],
    );
    assert!(!judge(&sleeper, Takers::Any).qualifies);
    let user = c(
        4,
        vec![
            obs(0.0, 'R', 10, 1, Some(SeenCall::Running)),
            obs(1.0, 'R', 110, 1, Some(SeenCall::Running)),
        ],
    );
    assert!(!judge(&user, Takers::MmapLock).qualifies);
    let munmap = SeenCall::In {
        name: "munmap".into(),
        arg0: 9,
        detail: None,
        flags: 0,
    };
    let two_calls = c(
        5,
        vec![
            obs(0.0, 'D', 0, 0, Some(mmap(0))),
            obs(1.0, 'D', 0, 0, Some(munmap)),
        ],
    );
    assert!(!judge(&two_calls, Takers::MmapLock).qualifies);
    // A write(2) holds no mmap_lock, but may hold another lock.
    let write = SeenCall::In {
        name: "write".into(),
        arg0: 3,
        detail: None,
        flags: 0,
    };
    let writer = c(
        6,
        vec![
            obs(0.0, 'D', 0, 0, Some(write.clone())),
            obs(1.0, 'D', 0, 0, Some(write)),
        ],
    );
    assert!(!judge(&writer, Takers::MmapLock).qualifies);
    assert!(judge(&writer, Takers::Any).qualifies);
}

/// A "likely" last reader that left every call is replaced by the sampled holder; an unnamed lock gets the
/// sampled one; none qualifying leaves a reason.
#[test]
fn apply_confirms_replaces_or_says_why_not() {
    let holder = |tid, evidence| Holder {
        tid,
        pid: 1,
        comm: "c".into(),
        mode: Some(Mode::Read),
        evidence,
        state: "S".into(),
        doing: String::new(),
        waits_for: None,
        inside_samples: None,
        call: None,
        last_ran_s_ago: None,
        system_s: None,
    };
    let mut lock = LockNode {
        id: "L1".into(),
        kind: LockKind::Rwsem,
        address: None,
        name: "the mmap_lock of pid 1".into(),
        identity: LockIdentity {
            class: "mmap_lock".into(),
            pid: Some(1),
            ..LockIdentity::default()
        },
        holders: vec![holder(7, Evidence::LastReader)],
        holder_unknown: None,
        readers: Some(1),
        waiters: Vec::new(),
        more_waiters: 0,
    };
    let futex = SeenCall::In {
        name: "futex".into(),
        arg0: 7,
        detail: None,
        flags: 0,
    };
    let gone_reader = judge(
        &Candidate {
            pid: 1,
            tid: 7,
            comm: "c".into(),
            obs: vec![
                obs(0.0, 'S', 0, 0, Some(futex.clone())),
                obs(1.0, 'S', 0, 0, Some(futex)),
            ],
        },
        Takers::MmapLock,
    );
    let runner = judge(
        &Candidate {
            pid: 1,
            tid: 8,
            comm: "r".into(),
            obs: vec![
                obs(0.0, 'R', 0, 0, Some(SeenCall::Running)),
                obs(1.0, 'R', 0, 90, Some(SeenCall::Running)),
            ],
        },
        Takers::MmapLock,
    );
    apply(&mut lock, &[gone_reader.clone(), runner.clone()]);
    assert_eq!(lock.holders.len(), 1);
    assert_eq!(
        (lock.holders[0].tid, lock.holders[0].evidence),
        (8, Evidence::Sampled)
    );
    assert!(
        lock.holders[0]
            .doing
            .contains("the kernel's last reader, tid 7"),
        "{}",
        lock.holders[0].doing
    );
    let mut unnamed = LockNode {
        holders: Vec::new(),
        ..lock.clone()
    };
    apply(&mut unnamed, &[gone_reader]);
    assert!(unnamed.holders.is_empty());
    assert!(unnamed
        .holder_unknown
        .unwrap()
        .starts_with("none of the 1 threads sampled"));
}

#[test]
fn kallsyms_places_statics_of_the_kernel_and_modules() {
    let text = b"ffffffff81000000 T _stext\nffffffff82400000 D __start_rodata\nffffffff83a00000 D rtnl_mutex\n\
ffffffff83a00100 b cgroup_mutex\nffffffffc0a00000 t uvm_ioctl\t[nvidia_uvm]\nffffffffc0b00000 b g_uvm_global\t[nvidia_uvm]\n\
0000000000000000 T hidden\nnot a line\n";
    let s = Symbols::parse(text);
    assert!(!s.is_empty());
    let place = |a: u64| s.place(a).map(|h| (h.symbol, h.module));
    assert_eq!(
        place(0xffffffff83a00000),
        Some((Some("rtnl_mutex".into()), None))
    );
    assert_eq!(
        place(0xffffffff83a00108),
        Some((Some("cgroup_mutex+0x8".into()), None))
    );
    assert_eq!(
        place(0xffffffffc0b00010),
        Some((Some("g_uvm_global+0x10".into()), Some("nvidia_uvm".into())))
    );
    // Past text only: the module's region, no symbol.
    assert_eq!(
        place(0xffffffffc0a00800),
        Some((None, Some("nvidia_uvm".into())))
    );
    // The direct map (heap) is nobody's static.
    assert_eq!(place(0xffff888100000000), None);
    let id = LockIdentity {
        class: "kernel static".into(),
        symbol: Some("rtnl_mutex".into()),
        ..LockIdentity::default()
    };
    assert_eq!(
        identity::name(&id, LockKind::Mutex),
        "rtnl_mutex (a static mutex of the kernel)"
    );
}

#[test]
fn sched_fdinfo_and_mountinfo_parse() {
    assert_eq!(parse_exec_start(b"uvmlock (1066, #threads: 9)\n----\nse.exec_start                                :        517562.429094\nse.vruntime : 1.0\n"), Some(517562.429094));
    assert_eq!(parse_exec_start(b"garbage"), None);
    assert_eq!(
        parse_fdinfo(b"pos:\t0\nflags:\t0100002\nmnt_id:\t27\nino:\t12\n"),
        (Some(12), Some(27))
    );
    let mi = b"26 1 0:23 / / rw - ext4 /dev/root rw\n27 26 7:0 / /mnt/a rw,relatime - ext4 /dev/loop0 rw\n";
    assert_eq!(mount_device(mi, 27), Some((7, 0)));
    assert_eq!(mount_device(mi, 99), None);
}

/// Names others chose (comm, path) cannot break the Markdown: code spans without backticks, no raw HTML.
#[test]
fn hostile_names_stay_inert() {
    let recs = [
        Rec {
            tid: 71,
            tgid: 70,
            state: D,
            blocker: 0xffff_8885_0000_0000,
            owner: task(72),
            home: 4,
            ino: 5,
            ..Rec::default()
        },
        Rec {
            tid: 72,
            tgid: 70,
            state: D,
            ..Rec::default()
        },
    ];
    let b = bytes(&recs);
    let records = parse_records(&b).unwrap();
    let evil = "<img src=x>`|";
    let threads = vec![
        thread(71, evil, "D", &["fdget_pos"], Some((1, "write"))),
        thread(72, evil, "D", &["percpu_rwsem_wait"], Some((1, "write"))),
    ];
    let mut lookup = Fixed::default();
    lookup.paths.insert(5, "/tmp/a`b|<c>\nd".into());
    let g = build(70, &threads, Records::Read(&records), &mut lookup);
    let s = render::sentence(&g, Some(71), &|_| None).unwrap();
    assert!(!s.contains('\n'), "{s}");
    // Code spans fenced longer than any backtick run in the name, control characters written out.
    assert!(s.contains(&crate::escape::code("/tmp/a`b|<c>\nd")), "{s}");
    assert!(s.contains(&crate::escape::code(evil)), "{s}");
    let problems = crate::escape::inert_markdown_problems(&s, &[evil]);
    assert!(problems.is_empty(), "{problems:?}: {s}");
    let md = render::markdown(&g, &|_| None);
    for line in md.lines().filter(|l| l.starts_with("| L")) {
        // Every pipe inside a cell is escaped: the row keeps its 6 columns.
        assert_eq!(line.matches(" | ").count() + 2, 7, "{line}");
    }
}

fn nv_thread(tid: i32, state: &str, frames: &[(&str, Option<&str>)]) -> ThreadSnapshot {
    ThreadSnapshot {
        tid,
        comm: "rmworker".into(),
        state: state.into(),
        stack: frames.iter().map(|(f, m)| frame(f, *m)).collect(),
        syscall: Some(SyscallInfo::Blocked {
            nr: 16,
            name: Some("ioctl".into()),
            args: vec!["0x3".into(); 6],
            sp: "0x0".into(),
            pc: "0x0".into(),
        }),
        ..ThreadSnapshot::default()
    }
}

/// Host-wide driver locks: a thread waits (uninterruptibly: a blocker record) for the RM API lock, written
/// by a thread of another process; another waits on the GPU lock's semaphore, last held by a third. The
/// locks are named by their stacks, the holders found across processes by their task_struct.
#[test]
fn nvidia_driver_locks_are_named_and_their_holders_found_in_other_processes() {
    let api = 0xffff_ffff_c0a8_0100u64;
    let gpu = 0xffff_ffff_c0a8_0200u64;
    let recs = [
        Rec {
            tid: 81,
            tgid: 80,
            state: D,
            blocker: api | 3,
            owner: task(91),
            count: 1 | 2,
            ..Rec::default()
        },
        Rec {
            tid: 82,
            tgid: 80,
            state: D,
            blocker: gpu | 1,
            owner: task(92),
            ..Rec::default()
        },
        Rec {
            tid: 91,
            tgid: 90,
            state: 0,
            ..Rec::default()
        },
        Rec {
            tid: 92,
            tgid: 90,
            state: D,
            ..Rec::default()
        },
    ];
    let b = bytes(&recs);
    let records = parse_records(&b).unwrap();
    let api_wait = [
        ("rwsem_down_write_slowpath", None),
        ("down_write", None),
        ("os_acquire_rwlock_write", Some("nvidia")),
        ("rmapiLockAcquire", Some("nvidia")),
        ("nvidia_ioctl", Some("nvidia")),
    ];
    let gpu_wait = [
        ("down", None),
        ("os_acquire_semaphore", Some("nvidia")),
        ("rmGpuLocksAcquire", Some("nvidia")),
        ("nvidia_ioctl", Some("nvidia")),
    ];
    let threads = vec![nv_thread(81, "D", &api_wait), nv_thread(82, "D", &gpu_wait)];
    let mut lookup = Fixed::default();
    let mut holder = nv_thread(91, "R", &[]);
    holder.syscall = Some(SyscallInfo::Running { running: true });
    lookup.threads.insert(91, (90, holder));
    lookup.threads.insert(
        92,
        (
            90,
            nv_thread(
                92,
                "D",
                &[
                    ("_kgspRpcRecvPoll", Some("nvidia")),
                    ("_issueRpcAndWait", Some("nvidia")),
                ],
            ),
        ),
    );
    lookup.symbols = Some(Symbols::parse(
        b"ffffffffc0a00000 t nvidia_ioctl\t[nvidia]\n",
    ));
    let g = build(80, &threads, Records::Read(&records), &mut lookup);
    let api_lock = g.lock_waited_by(81).unwrap();
    assert_eq!(api_lock.identity.class, "RM API lock", "{api_lock:#?}");
    assert_eq!(api_lock.identity.module.as_deref(), Some("nvidia"));
    assert!(
        api_lock
            .name
            .starts_with("the NVIDIA RM API lock (in module nvidia)"),
        "{}",
        api_lock.name
    );
    let h = &api_lock.holders[0];
    assert_eq!(
        (h.tid, h.pid, h.evidence, h.mode),
        (91, 90, Evidence::Writer, Some(Mode::Write))
    );
    let gpu_lock = g.lock_waited_by(82).unwrap();
    assert_eq!(gpu_lock.identity.class, "GPU lock");
    assert_eq!(gpu_lock.kind, LockKind::Semaphore);
    let h = &gpu_lock.holders[0];
    assert_eq!((h.tid, h.pid, h.evidence), (92, 90, Evidence::LastHolder));
    assert!(h.doing.contains("GSP RPC"), "{}", h.doing);
}
