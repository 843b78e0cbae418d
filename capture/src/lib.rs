//! capture — everything wedge-capture reads from the kernel, and how it is decoded.
//!
//! Map (pure modules first: bytes in, values out, no I/O):
//! - [`parse`]: pure parsers `fn(&[u8]) -> Result<T>` for stat, status, wchan, syscall, stack, cgroup,
//!   fd links and ns inodes, children, meminfo, pressure, boot id and `/dev/kmsg` records; a module that
//!   decodes its file into one type implements [`parse::Parse`] (`Stat::parse`, `Status::parse`, …).
//! - [`decode`]: every decode table and decoder in one home (one loader, one hex parser, one device
//!   classifier): `decode::syscalls` per arch, `decode::ioctl` names (NVIDIA, DRM/KFD, Linux),
//!   `decode::nvidia` deep decode of the RM escape structs read at a wedged ioctl's pointer (each struct a
//!   row of fields, read by one field reader).
//! - [`snapshot`]: the JSON contract (`pid`, `threads[]`, …) that reports embed unchanged; an ioctl's
//!   [`IoctlInfo::argument_kind`] says which struct its pointer holds.
//! - [`site`]: stack → one-line classification (rules as data in `site::rules`, `site::nvidia`).
//! - [`wait_graph`]: who holds what: locks, holders, waiters, chains and cycles from the kernel's records
//!   (`wait_graph::build`, pure), a running holder named from samples when no record names one
//!   (`wait_graph::live` does the reading); [`wait_graph::refine_with_graph`] puts a recorded lock in a
//!   thread's site.
//! - [`rm_lock`]: who likely holds the NVIDIA RM API / GPU lock that threads in D wait for.
//! - [`explain`]: the tasks and stacks of a pasted kernel log, classified the same way; each task an
//!   [`explained_task::ExplainedTask`] (the leaf both `explain` and `wait_graph::explain` use).
//! - [`xid`]: NVIDIA Xid / NVSwitch SXid lines parsed (every printed shape), the Xid catalogue (meaning, what to
//!   do), and the tie of a paste's Xids to its tasks.
//! - [`render`]: Markdown/text views; [`escape`]: the one escaping path for text others choose (comms, paths,
//!   log lines): control characters, HTML, table pipes, backticks; used by [`render`], report.md
//!   (`reports::render`) and the agent's log.
//! - [`user_frame`]: a user pc located in `maps` text a sacrificial child read ([`RiskyFile::Maps`]); the
//!   bounded stack scan for candidate return addresses.
//! - [`python_stack`]: `py-spy dump --json` parsed (Python frames per native tid); whether a process is CPython.
//! - [`error`]: the one error type, and [`error::Rejection`] (why [`untrusted`] refused a file).
//!
//! Kernel I/O (each names the pure parser it feeds):
//! - [`proc_root`]: [`ProcRoot`], the workspace's one doorway to the kernel's files: it alone opens files
//!   under a proc root (default `/proc`, or a fake/recorded tree), every read bounded — per-task files,
//!   fd links and the inodes they hold, children, ns, host files (meminfo, loadavg, pressure, boot id,
//!   sysctls). Risky files (cmdline, maps, NVIDIA driver files) are only named ([`RiskyFile`]) for the agent's
//!   sacrificial children. Classifies vanished tasks and refused reads.
//! - [`process`]: [`snapshot_process`] — stat of every thread, then wchan/syscall/stack/fd for D threads.
//! - [`scan`]: [`scan::Scanner`], the watch loop's hot path (kept-open stat fds re-read with pread).
//! - [`kmsg`]: `/dev/kmsg` read without ever blocking, records kept around an event.
//! - [`proc_events`]: fork/exec/comm/exit events from the netlink proc connector (incremental target
//!   discovery), never waiting; a pure datagram parser.
//! - [`taskstats`]: a thread group's summed activity counters in one netlink round trip (the scanner's
//!   quiet-process shortcut); a pure parser for the reply. Both share `netlink` (socket, field readers,
//!   the message walk).
//! - [`task_iter`]: a BPF task iterator (checked-in object, `capture/bpf/`): every thread of one process with
//!   its state and switch count in one read, the scanner's busy-worker shortcut; falls back with a reason.
//! - [`blockers`]: a second BPF task iterator, read at capture time only: what every task is blocked on as
//!   the kernel recorded it (`task_struct::blocker`), the lock's owner word, the lock's home (inode, file).
//! - [`pod`]: the pod a cgroup path claims, confirmed by the container runtime's or the kubelet's own state, or
//!   marked "claimed by the cgroup name".
//! - [`symbolize`]: ELF symbols and build ids of mapped files, read by path in a sacrificial helper process
//!   (`symbolize::named_file` opens what the target names; `symbolize::elf_cost` prices a file from its
//!   headers).
//! - [`untrusted`]: the one way to open a file from a directory others can write (rings, incidents,
//!   configs): no symlink followed, no FIFO or device opened, regular files only, bounded reads.
//! - [`frozen_fs`]: a real D-state fixture (frozen loop-mounted ext4) for tests and `selftest`.
//! - `testing` (feature `testing`, tests only): `testing::FakeProc`, the fake proc tree builder every crate's
//!   tests share (tests and recorded snapshots only; not in the shipped binary).
//!
//! One crate, not two (decided for issue 39): the pure half (parse, decode, snapshot, site, wait_graph's
//! model and build, rm_lock, explain, xid, render, escape) is not split into its own crate the way
//! procfs-core is from procfs. The module circles that would have blocked it are open, and the modules above
//! the line never read a file, so the split stays mechanical if a second user of the pure half appears (a
//! tool that classifies recordings with no libc, nix or blazesym). Today it would not make the map clearer:
//! five modules pair a pure parser with the I/O that feeds it on purpose (`blockers`, `taskstats`,
//! `proc_events`, `kmsg`, `wait_graph`'s `live`), and each pair would be cut across two crates; the snapshot
//! contract and the error type would need a home both depend on (two error types where the house wants one
//! per crate); and every caller (agent, reports, fuzz) would import from two crates for one capture.
//!
//! No `procfs-core`: it was evaluated for meminfo, pressure, status, cgroup and mountinfo and fits none.
//! Its pressure parser panics on a short line (`&line[5..]`) and needs a `full` line memory/io may lack
//! (no `irq` at all); its meminfo parser multiplies by 1024 unchecked (a hostile value panics in debug
//! builds) into a fixed struct; status, cgroup and stat are already parsed here, bounded, with tests.
//!
//! Never read `cmdline`, `environ`, `maps`, `smaps` or `mem` here: they take the target's mmap lock.

pub mod blockers;
pub mod decode;
pub mod error;
pub mod escape;
pub mod explain;
pub mod explained_task;
pub mod frozen_fs;
pub mod kmsg;
mod le;
mod netlink;
pub mod parse;
pub mod pod;
pub mod proc_events;
pub mod proc_root;
pub mod process;
pub mod python_stack;
pub mod render;
pub mod rm_lock;
pub mod scan;
pub mod site;
pub mod snapshot;
pub mod symbolize;
pub mod task_iter;
pub mod taskstats;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod untrusted;
pub mod user_frame;
pub mod wait_graph;
pub mod xid;

pub use decode::arch::Arch;
pub use error::{Error, Result};
pub use proc_root::{FdLink, HeldFile, ProcRoot, RiskyFile};
pub use process::{snapshot_process, SnapshotOptions};
pub use snapshot::{
    IoctlInfo, ProcessSnapshot, StackFrame, SyscallFile, SyscallInfo, ThreadGroup, ThreadSnapshot,
    ThreadsSummary,
};
