//! What every task is blocked on, as the kernel itself recorded it: a BPF task iterator over the host's
//! tasks (`capture/bpf/task_blockers.bpf.c`, built by `gen_task_states.sh` into `task_blockers.bpf.o`,
//! checked in) read once per capture, never by the watch loop's scan.
//!
//! Linux 6.16+ built with `CONFIG_DETECT_HUNG_TASK_BLOCKER` records in `task_struct::blocker` the lock a
//! sleeping task waits for (its address, with its type in the two low bits: mutex, semaphore, rwsem as
//! reader or as writer; include/linux/hung_task.h). The program copies that word and the lock's owner word
//! (mutex owner, rwsem owner, semaphore last holder), the address of each task's own `task_struct` and
//! `mm->mmap_lock`, and, when a back pointer proves it, the inode, open file or superblock the lock belongs
//! to. [`crate::wait_graph`] turns the records into locks, holders and waiters.
//!
//! Map:
//! - [`BlockerIter::load`]: the program, CO-RE relocated by aya against the running kernel's BTF, proven
//!   by one read. A refusal (no BTF, no privilege, the verifier, a kernel older than 5.8) is an
//!   [`Error::TaskIterUnavailable`] with the reason; a kernel without the `blocker` field loads fine and
//!   says so in every record ([`BlockerRecord::blocker_field`]).
//! - [`BlockerIter::read`]: one pass over every task of this pid namespace.
//! - [`parse_records`] (pure) → [`BlockerRecord`], with the owner word decoded ([`BlockerRecord::owner_task`]).
//!
//! Test hook: `BlockerIter::load(true)` (the agent's hidden `refuse_blocker_field` setting, whose default is
//! `WEDGE_CAPTURE_TEST_REFUSE_BLOCKER_FIELD=1` in the environment, [`REFUSE_ENV`]) sets the program's
//! `wedge_refuse_blocker_field`, and the program takes the branch it takes on a kernel
//! without `task_struct::blocker` (every record flagged, no lock read): the fallback (sampled holders) is
//! then what names a holder. Only tests set it.

use std::fmt;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use crate::error::{Error, Result};
use crate::le::{u32_at, u64_at};
use crate::task_iter::{
    chain, has_verifier_log, iter_link, permission_refused, read_iter, refused,
    release_freed_memory, verifier_summary, KERNEL_BTF, PRIVILEGE,
};

/// Bytes per record: `struct blocker_record` in task_blockers.bpf.c.
pub const RECORD_LEN: usize = 96;

/// The compiled program, checked in; 8-byte aligned for the ELF parser.
static OBJECT: &[u8] = aya::include_bytes_aligned!("../bpf/task_blockers.bpf.o");
const PROGRAM: &str = "task_blockers";
/// The program's `.rodata` switch for the test hook.
const REFUSE_GLOBAL: &str = "wedge_refuse_blocker_field";
/// The environment variable of the test hook (see the module doc).
pub const REFUSE_ENV: &str = "WEDGE_CAPTURE_TEST_REFUSE_BLOCKER_FIELD";

// record.flags (task_blockers.bpf.c)
const NO_BLOCKER_FIELD: u32 = 0x1;
const LOCK_UNREADABLE: u32 = 0x2;
const NO_SEM_HOLDER_FIELD: u32 = 0x4;

/// include/linux/hung_task.h: the type in the blocker word's two low bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BlockerType {
    Mutex,
    Semaphore,
    RwsemReader,
    RwsemWriter,
}

impl BlockerType {
    fn of(word: u64) -> BlockerType {
        match word & 3 {
            0 => BlockerType::Mutex,
            1 => BlockerType::Semaphore,
            2 => BlockerType::RwsemReader,
            _ => BlockerType::RwsemWriter,
        }
    }
}

/// The structure a lock is a member of, proven in the kernel by a back pointer (task_blockers.bpf.c).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockHome {
    Unknown,
    /// `inode->i_rwsem` (the inode lock).
    InodeRwsem,
    /// `inode->i_data.invalidate_lock`.
    InodeInvalidate,
    /// `super_block->s_umount`.
    SuperblockUmount,
    /// `file->f_pos_lock` of an open file.
    FilePos,
}

/// One task as the blocker iterator saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockerRecord {
    pub tid: i32,
    pub tgid: i32,
    /// `task_struct.__state`, raw bits.
    pub state: u32,
    pub exit_state: u32,
    flags: u32,
    /// This task's `task_struct` address (what an owner word points at).
    pub task: u64,
    /// `&task->mm->mmap_lock`; 0 for a task without an mm.
    pub mmap_lock: u64,
    /// `task_struct.blocker`, raw (lock address | type); 0 when not blocked on a tracked lock.
    pub blocker: u64,
    /// The lock's owner word, raw.
    pub owner: u64,
    /// `rw_semaphore.count` / `semaphore.count`, raw.
    pub count: u64,
    pub ino: u64,
    /// Kernel encoding (major << 20 | minor).
    pub dev: u32,
    pub home: LockHome,
    pub i_mode: u32,
    /// This task's `mm->mmap_lock` owner and count words, raw (0 without an mm, or with the test hook).
    pub mm_owner: u64,
    pub mm_count: u64,
}

/// Who owns a lock, by the owner word (kernel/hung_task.c's reading of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnerWord {
    /// No owner recorded (a mutex or rwsem just released; a semaphore nobody recorded).
    None,
    /// A mutex's owner, an rwsem's writer, a semaphore's last holder: this task_struct.
    Task(u64),
    /// An rwsem held by readers: the last reader to take it (the kernel's "likely"), or 0.
    Readers { last: u64, count: u64 },
}

/// An owner word decoded for the lock's type, as kernel/hung_task.c reads it: a mutex's owner is the word
/// minus its three flag bits (MUTEX_FLAGS); an rwsem's owner word carries RWSEM_READER_OWNED (bit 0) and
/// RWSEM_NONSPINNABLE (bit 1), and its count has the writer bit (bit 0) and the readers from bit 8
/// (kernel/locking/rwsem.c); a semaphore's last holder is a plain task pointer.
pub fn decode_owner(kind: BlockerType, owner: u64, count: u64) -> OwnerWord {
    let task = match kind {
        BlockerType::Mutex => owner & !7,
        BlockerType::Semaphore => owner,
        BlockerType::RwsemReader | BlockerType::RwsemWriter => {
            let task = owner & !3;
            let writer_locked = count & 1 != 0;
            if owner & 1 != 0 && !writer_locked {
                return OwnerWord::Readers {
                    last: task,
                    count: (count >> 8) & ((1 << 55) - 1),
                };
            }
            task
        }
    };
    if task == 0 {
        OwnerWord::None
    } else {
        OwnerWord::Task(task)
    }
}

/// The `state` letter of `task_struct` bits, as `stat` shows it (see [`crate::task_iter::ThreadRecord`]).
fn letter(state: u32, exit_state: u32) -> char {
    crate::task_iter::ThreadRecord {
        tid: 0,
        tgid: 0,
        state,
        exit_state,
        switches: 0,
    }
    .letter()
}

impl BlockerRecord {
    /// Whether this kernel has `task_struct::blocker` (and the test hook did not refuse it).
    pub fn blocker_field(&self) -> bool {
        self.flags & NO_BLOCKER_FIELD == 0
    }

    /// The lock's words could not be read (it was freed as we looked).
    pub fn lock_unreadable(&self) -> bool {
        self.flags & LOCK_UNREADABLE != 0
    }

    /// `struct semaphore` has no `last_holder` on this kernel.
    pub fn no_semaphore_holder_field(&self) -> bool {
        self.flags & NO_SEM_HOLDER_FIELD != 0
    }

    pub fn letter(&self) -> char {
        letter(self.state, self.exit_state)
    }

    /// The lock this task waits for and its type, or None.
    pub fn blocked_on(&self) -> Option<(u64, BlockerType)> {
        (self.blocker != 0).then(|| (self.blocker & !3, BlockerType::of(self.blocker)))
    }

    /// The owner word decoded for the lock's type (see [`decode_owner`]).
    pub fn owner_task(&self) -> OwnerWord {
        match self.blocked_on() {
            Some((_, kind)) => decode_owner(kind, self.owner, self.count),
            None => OwnerWord::None,
        }
    }

    /// Who holds this task's own mmap_lock, from its words (kernels without a blocker record for killable
    /// waits, which is how mmap and page faults wait).
    pub fn mmap_lock_owner(&self) -> OwnerWord {
        decode_owner(BlockerType::RwsemWriter, self.mm_owner, self.mm_count)
    }

    /// The device as user space numbers it (`st_dev`): major:minor from the kernel's 12:20 encoding.
    pub fn dev_major_minor(&self) -> (u32, u32) {
        (self.dev >> 20, self.dev & 0xfffff)
    }
}

/// The records of one read. A length that is not a whole number of records is an error.
pub fn parse_records(bytes: &[u8]) -> Result<Vec<BlockerRecord>> {
    if !bytes.len().is_multiple_of(RECORD_LEN) {
        return Err(Error::Parse {
            what: "blocker records",
            why: format!(
                "{} bytes is not a whole number of {RECORD_LEN}-byte records",
                bytes.len()
            ),
        });
    }
    Ok(bytes
        .chunks_exact(RECORD_LEN)
        .map(|r| BlockerRecord {
            tid: u32_at(r, 0) as i32,
            tgid: u32_at(r, 4) as i32,
            state: u32_at(r, 8),
            flags: u32_at(r, 12),
            task: u64_at(r, 16),
            mmap_lock: u64_at(r, 24),
            blocker: u64_at(r, 32),
            owner: u64_at(r, 40),
            count: u64_at(r, 48),
            ino: u64_at(r, 56),
            dev: u32_at(r, 64),
            home: match u32_at(r, 68) {
                1 => LockHome::InodeRwsem,
                2 => LockHome::InodeInvalidate,
                3 => LockHome::SuperblockUmount,
                4 => LockHome::FilePos,
                _ => LockHome::Unknown,
            },
            i_mode: u32_at(r, 72),
            exit_state: u32_at(r, 76),
            mm_owner: u64_at(r, 80),
            mm_count: u64_at(r, 88),
        })
        .collect())
}

/// The loaded program and an iterator link over every task.
pub struct BlockerIter {
    link: OwnedFd,
    /// The test hook was on when it was loaded.
    refused_for_test: bool,
}

impl fmt::Debug for BlockerIter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockerIter")
            .field("link_fd", &self.link.as_raw_fd())
            .field("refused_for_test", &self.refused_for_test)
            .finish()
    }
}

impl BlockerIter {
    /// Loads the program (`refuse`: the test hook, see the module doc) and proves it with one read that must
    /// list the calling thread. ~0.1 s (BTF parsing, the verifier): once per agent.
    pub fn load(refuse: bool) -> Result<BlockerIter> {
        BlockerIter::load_object(KERNEL_BTF, OBJECT, refuse)
    }

    fn load_object(btf_path: &str, object: &[u8], refuse: bool) -> Result<BlockerIter> {
        let btf = aya::Btf::parse_file(btf_path, aya::Endianness::default()).map_err(|e| {
            Error::TaskIterUnavailable(format!(
                "no kernel BTF at {btf_path} (CONFIG_DEBUG_INFO_BTF): {}",
                chain(&e)
            ))
        })?;
        let refuse_value: u32 = u32::from(refuse);
        let mut object = aya::EbpfLoader::new()
            .btf(Some(&btf))
            .override_global(REFUSE_GLOBAL, &refuse_value, true)
            .load(object)
            .map_err(|e| refused("loading the blocker iterator", &e))?;
        let program: &mut aya::programs::Iter = object
            .program_mut(PROGRAM)
            .ok_or_else(|| {
                Error::TaskIterUnavailable(format!("no program {PROGRAM} in the object"))
            })?
            .try_into()
            .map_err(|e| refused("the blocker iterator's program type", &e))?;
        program.load("task", &btf).map_err(|e| {
            if permission_refused(&e) && !has_verifier_log(&e) {
                Error::TaskIterUnavailable(format!(
                    "loading the blocker iterator refused ({PRIVILEGE})"
                ))
            } else {
                Error::TaskIterUnavailable(format!(
                    "the kernel refused the blocker iterator: {}",
                    verifier_summary(&e)
                ))
            }
        })?;
        let program_fd = program
            .fd()
            .map_err(|e| refused("the blocker iterator's fd", &e))?
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| Error::TaskIterUnavailable(format!("dup of the program fd: {e}")))?;
        drop(object);
        drop(btf);
        release_freed_memory();
        let link = link_all_tasks(&program_fd)?;
        let iter = BlockerIter {
            link,
            refused_for_test: refuse,
        };
        let me = nix::unistd::gettid().as_raw();
        let records = iter.read()?;
        if !records.iter().any(|r| r.tid == me) {
            return Err(Error::TaskIterUnavailable(format!(
                "the blocker iterator did not list this thread (tid {me}; {} records): it numbers tasks \
                 as the host does, so a pid namespace other than the host's cannot use it",
                records.len()
            )));
        }
        Ok(iter)
    }

    /// Whether the test hook refused the blocker field.
    pub fn refused_for_test(&self) -> bool {
        self.refused_for_test
    }

    /// One pass over every task.
    pub fn read(&self) -> Result<Vec<BlockerRecord>> {
        let mut buf = Vec::new();
        read_iter(&self.link, &mut buf, "blocker iterator read")?;
        parse_records(&buf)
    }
}

/// An iterator link over every task of this pid namespace (no `bpf_iter_link_info`).
fn link_all_tasks(program: &OwnedFd) -> Result<OwnedFd> {
    iter_link(program, None).map_err(|err| {
        Error::TaskIterUnavailable(match err.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => {
                format!("creating the blocker iterator link refused ({PRIVILEGE})")
            }
            _ => format!("creating the blocker iterator link: {err}"),
        })
    })
}

#[cfg(test)]
mod tests;
