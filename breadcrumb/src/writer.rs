//! The writer: a shared file mapping and a lock-free claim protocol.
//!
//! Record path (`enter`/`exit`): one `clock_gettime` (vDSO), a cached thread id, one `fetch_add`
//! on the header's head counter to claim a global index `g`, one compare-and-swap on the slot's
//! sequence word to own slot `g % slot_count` (only from an older, complete value: a writer never
//! takes a slot another writer is still filling), the body, then a release store of the final
//! sequence. No lock, no allocation, no system call. If the slot is busy or already newer, the
//! writer claims the next index (a bounded number of times, then counts the record as dropped).

use std::cell::Cell;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, Once};

use crate::error::{Error, Result};
use crate::format::{self, header, slot, Args, Call, RingClock};
use crate::identity::{self, ProcessIdentity};

/// Environment variable: create the ring at exactly this path.
pub const ENV_RING: &str = "WEDGE_CAPTURE_RING";
/// Environment variable: create the ring in this directory as `<pid>-<starttime>.ring`.
pub const ENV_RING_DIR: &str = "WEDGE_CAPTURE_RING_DIR";
/// Environment variable: slot count (a power of two) for rings made from the environment.
pub const ENV_RING_SLOTS: &str = "WEDGE_CAPTURE_RING_SLOTS";
/// Environment variable: `coarse` for `CLOCK_MONOTONIC_COARSE` timestamps (cheaper records).
pub const ENV_RING_CLOCK: &str = "WEDGE_CAPTURE_RING_CLOCK";

/// How to create a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterOptions {
    /// A power of two, 1..=2^20.
    pub slot_count: u32,
    /// Clock of the slot timestamps.
    pub clock: RingClock,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            slot_count: format::DEFAULT_SLOT_COUNT,
            clock: RingClock::Monotonic,
        }
    }
}

/// How many global indices a record tries before it is counted as dropped.
const MAX_CLAIM_ATTEMPTS: u32 = 64;

/// What `enter` returns and `exit` takes: the enter record's global index (low 48 bits) and call
/// id (high 16 bits). In the C ABI it is a plain `uint64_t`.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token(u64);

impl Token {
    /// No enter record was written (no ring, or every slot tried was busy); `exit` ignores it.
    pub const NONE: Token = Token(u64::MAX);

    fn new(index: u64, call_id: u16) -> Token {
        Token((u64::from(call_id) << format::TOKEN_INDEX_BITS) | (index & format::TOKEN_INDEX_MASK))
    }

    /// The enter record's global index (low 48 bits), or `None` for [`Token::NONE`].
    pub fn index(self) -> Option<u64> {
        (self != Token::NONE).then_some(self.0 & format::TOKEN_INDEX_MASK)
    }

    /// The call id of the enter record.
    pub fn call_id(self) -> u16 {
        (self.0 >> format::TOKEN_INDEX_BITS) as u16
    }

    /// The raw 64-bit value (the C ABI's token).
    pub fn to_raw(self) -> u64 {
        self.0
    }

    /// A token from its raw value.
    pub fn from_raw(raw: u64) -> Token {
        Token(raw)
    }
}

/// A ring file mapped shared into this process. `Send + Sync`: every access to the shared
/// mapping goes through atomics.
pub struct Writer {
    base: NonNull<u8>,
    map_len: usize,
    slot_mask: u64,
    clock: libc::clockid_t,
    path: PathBuf,
    status_lock: Mutex<()>,
    /// Kept open for the writer's life so the agent finds the ring through the fd table.
    _file: File,
}

// SAFETY: the mapping is shared memory accessed only through atomic types (`word`, `byte_word`);
// the raw pointer is never handed out, and the mapping lives until `Drop`.
unsafe impl Send for Writer {}
// SAFETY: as above; all methods taking `&self` use atomic operations on the mapping.
unsafe impl Sync for Writer {}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("path", &self.path)
            .field("slot_count", &(self.slot_mask + 1))
            .finish()
    }
}

impl Writer {
    /// Creates a fresh ring of `slot_count` slots (a power of two, 1..=2^20) at `path`, replacing
    /// any file there atomically (built under a temporary name, then renamed), and maps it.
    pub fn create(path: impl AsRef<Path>, slot_count: u32) -> Result<Writer> {
        let options = WriterOptions {
            slot_count,
            ..WriterOptions::default()
        };
        Self::create_with(path.as_ref(), &options, &ProcessIdentity::current())
    }

    /// [`Writer::create`] with explicit options and identity for the header.
    pub fn create_with(
        path: &Path,
        options: &WriterOptions,
        identity: &ProcessIdentity,
    ) -> Result<Writer> {
        let slot_count = options.slot_count;
        if !slot_count.is_power_of_two() || slot_count > format::MAX_SLOT_COUNT {
            return Err(Error::BadSlotCount);
        }
        register_fork_handler();
        let total =
            u64::from(format::HEADER_SIZE) + u64::from(format::SLOT_SIZE) * u64::from(slot_count);
        let map_len = usize::try_from(total).map_err(|_| Error::Create("ring too large".into()))?;

        let file_name = path
            .file_name()
            .ok_or_else(|| Error::Create(format!("{}: not a file path", path.display())))?;
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(file_name);
        temp_name.push(format!(".tmp-{}", std::process::id()));
        let temp = path.with_file_name(temp_name);
        let _ = std::fs::remove_file(&temp);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp)
            .map_err(|e| Error::io(&temp, "create", e))?;
        let result = Self::init_and_publish(file, &temp, path, map_len, options, identity);
        if result.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        result
    }

    fn init_and_publish(
        file: File,
        temp: &Path,
        path: &Path,
        map_len: usize,
        options: &WriterOptions,
        identity: &ProcessIdentity,
    ) -> Result<Writer> {
        let slot_count = options.slot_count;
        file.set_len(map_len as u64)
            .map_err(|e| Error::io(temp, "size", e))?;
        let base = map_shared(&file, map_len, temp)?;
        let writer = Writer {
            base,
            map_len,
            slot_mask: u64::from(slot_count) - 1,
            clock: match options.clock {
                RingClock::Monotonic => libc::CLOCK_MONOTONIC,
                RingClock::MonotonicCoarse => libc::CLOCK_MONOTONIC_COARSE,
            },
            path: path.to_path_buf(),
            status_lock: Mutex::new(()),
            _file: file,
        };
        writer.write_header(options, identity);
        std::fs::rename(temp, path).map_err(|e| Error::io(path, "rename into place", e))?;
        Ok(writer)
    }

    /// Opens an existing ring (made by another process, e.g. a launcher) to append to it. The
    /// claim protocol works across processes sharing the file; the header keeps its creator's
    /// identity. The file must be a valid version-1 ring with the default header and slot sizes.
    pub fn open(path: impl AsRef<Path>) -> Result<Writer> {
        let path = path.as_ref();
        register_fork_handler();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| Error::io(path, "open", e))?;
        let meta = file.metadata().map_err(|e| Error::io(path, "stat", e))?;
        if !meta.file_type().is_file() {
            return Err(Error::NotRegular { path: path.into() });
        }
        let header_len = meta.len().min(u64::from(format::HEADER_SIZE)) as usize;
        let mut head_bytes = vec![0u8; header_len];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut head_bytes, 0)
            .map_err(|e| Error::io(path, "read", e))?;
        let header = crate::reader::parse_header_with_len(&head_bytes, meta.len())?;
        if header.header_size != format::HEADER_SIZE || header.slot_size != format::SLOT_SIZE {
            return Err(Error::Create(format!(
                "{}: header size {} / slot size {} differ from this writer's {} / {}",
                path.display(),
                header.header_size,
                header.slot_size,
                format::HEADER_SIZE,
                format::SLOT_SIZE
            )));
        }
        let map_len = header.needed_len() as usize;
        if meta.len() < map_len as u64 {
            return Err(Error::Truncated { len: meta.len() });
        }
        let base = map_shared(&file, map_len, path)?;
        let clock = match format::RingClock::from_id(header.clock_id) {
            Some(RingClock::MonotonicCoarse) => libc::CLOCK_MONOTONIC_COARSE,
            _ => libc::CLOCK_MONOTONIC,
        };
        Ok(Writer {
            base,
            map_len,
            slot_mask: u64::from(header.slot_count) - 1,
            clock,
            path: path.to_path_buf(),
            status_lock: Mutex::new(()),
            _file: file,
        })
    }

    /// A ring configured by the environment: `WEDGE_CAPTURE_RING` (a path) wins over
    /// `WEDGE_CAPTURE_RING_DIR` (a directory; file `<pid>-<starttime>.ring`); `Ok(None)` when
    /// neither is set. `WEDGE_CAPTURE_RING_SLOTS` overrides the slot count and
    /// `WEDGE_CAPTURE_RING_CLOCK=coarse` selects `CLOCK_MONOTONIC_COARSE` timestamps.
    pub fn from_env() -> Result<Option<Writer>> {
        let slots = match std::env::var(ENV_RING_SLOTS) {
            Ok(text) => text
                .trim()
                .parse::<u32>()
                .map_err(|_| Error::Create(format!("{ENV_RING_SLOTS}={text:?} is not a number")))?,
            Err(_) => format::DEFAULT_SLOT_COUNT,
        };
        let clock = match std::env::var(ENV_RING_CLOCK).as_deref() {
            Ok("coarse") => RingClock::MonotonicCoarse,
            Ok("monotonic") | Ok("") | Err(_) => RingClock::Monotonic,
            Ok(other) => {
                return Err(Error::Create(format!(
                    "{ENV_RING_CLOCK}={other:?}: expected \"monotonic\" or \"coarse\""
                )))
            }
        };
        let options = WriterOptions {
            slot_count: slots,
            clock,
        };
        let identity = ProcessIdentity::current();
        if let Some(path) = std::env::var_os(ENV_RING).filter(|p| !p.is_empty()) {
            return Writer::create_with(Path::new(&path), &options, &identity).map(Some);
        }
        if let Some(dir) = std::env::var_os(ENV_RING_DIR).filter(|p| !p.is_empty()) {
            let path =
                PathBuf::from(dir).join(ring_file_name(identity.pid, identity.start_time_ticks));
            return Writer::create_with(&path, &options, &identity).map(Some);
        }
        Ok(None)
    }

    /// Where the ring was created.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of slots.
    pub fn slot_count(&self) -> u64 {
        self.slot_mask + 1
    }

    /// Records that a driver call is about to be made. Lock-free; no allocation, no system call.
    /// The label is cut to 40 bytes at a char boundary.
    #[inline]
    pub fn enter(&self, call: Call, args: &Args, label: &str) -> Token {
        self.enter_raw(call.id(), args, format::truncate_label(label).as_bytes())
    }

    /// `enter` with a raw call id and label bytes (at most 40 are kept; the C ABI validates UTF-8).
    #[inline]
    pub fn enter_raw(&self, call_id: u16, args: &Args, label: &[u8]) -> Token {
        match self.record(format::KIND_ENTER, call_id, args, label, None, 0) {
            Some(index) => Token::new(index, call_id),
            None => Token::NONE,
        }
    }

    /// Records that the call of `token` returned `result`. Ignores [`Token::NONE`].
    #[inline]
    pub fn exit(&self, token: Token, result: i64) {
        if let Some(enter_index) = token.index() {
            let _ = self.record(
                format::KIND_EXIT,
                token.call_id(),
                &Args::default(),
                &[],
                Some(enter_index),
                result,
            );
        }
    }

    /// Records in the header why instrumentation is degraded (e.g. "CUPTI subscribe failed: …").
    /// Not on the record path: takes a lock. An empty message clears the status.
    pub fn set_status(&self, code: i32, message: &str) {
        let _guard = self.status_lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut text = message;
        if text.len() > format::STATUS_CAPACITY {
            let mut end = format::STATUS_CAPACITY;
            while end > 0 && !text.is_char_boundary(end) {
                end -= 1;
            }
            text = text.get(..end).unwrap_or("");
        }
        let len_word = self.u32_word(header::STATUS_LEN);
        len_word.store(u32::MAX, Ordering::Relaxed);
        fence(Ordering::Release);
        self.u32_word(header::STATUS_CODE)
            .store(code as u32, Ordering::Relaxed);
        let mut padded = [0u8; format::STATUS_CAPACITY];
        padded[..text.len()].copy_from_slice(text.as_bytes());
        for (index, chunk) in padded.chunks_exact(8).enumerate() {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.word(header::STATUS_TEXT + index * 8)
                .store(u64::from_le_bytes(word), Ordering::Relaxed);
        }
        len_word.store(text.len() as u32, Ordering::Release);
    }

    fn write_header(&self, options: &WriterOptions, identity: &ProcessIdentity) {
        let slot_count = options.slot_count;
        let put64 = |at: usize, v: u64| self.word(at).store(v.to_le(), Ordering::Relaxed);
        let put32 = |at: usize, v: u32| self.u32_word(at).store(v.to_le(), Ordering::Relaxed);
        put64(header::MAGIC, u64::from_le_bytes(format::MAGIC));
        put32(header::VERSION, format::VERSION);
        put32(header::HEADER_SIZE, format::HEADER_SIZE);
        put32(header::SLOT_SIZE, format::SLOT_SIZE);
        put32(header::SLOT_COUNT, slot_count);
        put32(header::WRITER_PID, identity.pid);
        put32(header::CLOCK_ID, options.clock.id());
        put64(header::PIDNS_INODE, identity.pidns_inode);
        put64(header::START_TIME_TICKS, identity.start_time_ticks);
        let mut boot = [0u8; 8];
        boot.copy_from_slice(&identity.boot_id[..8]);
        put64(header::BOOT_ID, u64::from_le_bytes(boot));
        boot.copy_from_slice(&identity.boot_id[8..]);
        put64(header::BOOT_ID + 8, u64::from_le_bytes(boot));
        put64(header::CREATED_REALTIME_NS, identity::realtime_ns());
        put64(header::CREATED_MONOTONIC_NS, identity::clock_ns(self.clock));
        put32(header::TICKS_PER_SECOND, identity.ticks_per_second);
        put32(header::FLAGS, 0);
        fence(Ordering::Release);
    }

    /// The 8-byte atomic word at byte `offset` of the mapping.
    #[inline(always)]
    fn word(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset & 7 == 0 && offset + 8 <= self.map_len);
        // SAFETY: every caller passes an 8-aligned offset inside the mapping (header constants or
        // a slot offset masked by `slot_mask`); the mapping is page-aligned, lives as long as
        // `self`, and is only ever accessed through atomics.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    #[inline(always)]
    fn u32_word(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset & 3 == 0 && offset + 4 <= self.map_len);
        // SAFETY: as in `word`, for a 4-aligned offset of a header field.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    #[inline(always)]
    fn record(
        &self,
        kind: u8,
        call_id: u16,
        args: &Args,
        label: &[u8],
        ref_index: Option<u64>,
        result: i64,
    ) -> Option<u64> {
        let now = identity::clock_ns(self.clock);
        let tid = current_tid();
        let head = self.word(header::HEAD);
        for _ in 0..MAX_CLAIM_ATTEMPTS {
            let index = head.fetch_add(1, Ordering::Relaxed);
            let base = format::HEADER_SIZE as usize
                + ((index & self.slot_mask) as usize) * format::SLOT_SIZE as usize;
            let seq = self.word(base + slot::SEQ);
            let busy = format::busy_seq(index);
            let mut current = seq.load(Ordering::Relaxed);
            let owned = loop {
                // Busy (odd): another writer is filling it (or died doing so). Newer: a later
                // index already lives here. Either way this index is skipped.
                if current & 1 == 1 || current >= busy {
                    break false;
                }
                match seq.compare_exchange_weak(current, busy, Ordering::Acquire, Ordering::Relaxed)
                {
                    Ok(_) => break true,
                    Err(seen) => current = seen,
                }
            };
            if !owned {
                continue;
            }
            // Order the busy mark before every body store (the seqlock writer's release fence).
            fence(Ordering::Release);
            let label_len = label.len().min(format::LABEL_CAPACITY);
            let mut label_bytes = [0u8; format::LABEL_CAPACITY];
            label_bytes[..label_len].copy_from_slice(&label[..label_len]);
            let meta = u64::from(tid)
                | (u64::from(kind) << 32)
                | ((label_len as u64) << 40)
                | (u64::from(call_id) << 48);
            let put = |at: usize, v: u64| self.word(base + at).store(v.to_le(), Ordering::Relaxed);
            put(slot::MONOTONIC_NS, now);
            put(slot::TID, meta);
            put(slot::BYTES, args.bytes);
            put(slot::PTR, args.ptr);
            put(slot::PTR2, args.ptr2);
            put(slot::STREAM, args.stream);
            put(
                slot::CHUNK,
                u64::from(args.chunk) | (u64::from(args.chunk_count) << 32),
            );
            put(
                slot::TENSOR_FIRST,
                u64::from(args.tensor_first) | (u64::from(args.tensor_count) << 32),
            );
            put(slot::REF_INDEX, ref_index.unwrap_or(index));
            put(slot::RESULT, result as u64);
            for (word_index, chunk) in label_bytes.chunks_exact(8).enumerate() {
                let mut word = [0u8; 8];
                word.copy_from_slice(chunk);
                put(slot::LABEL + word_index * 8, u64::from_le_bytes(word));
            }
            seq.store(format::final_seq(index), Ordering::Release);
            return Some(index);
        }
        self.word(header::DROPPED).fetch_add(1, Ordering::Relaxed);
        None
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // SAFETY: `base`/`map_len` are exactly what mmap returned; no reference into the mapping
        // outlives `&self` borrows, which end before drop.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.map_len) };
    }
}

/// Maps the first `map_len` bytes of `file` (already at least that long) read-write and shared, so
/// records land in the page cache where the agent reads them.
fn map_shared(file: &File, map_len: usize, path: &Path) -> Result<NonNull<u8>> {
    // SAFETY: a fresh shared mapping of a regular file the caller sized to at least `map_len` bytes;
    // the result is checked before use and unmapped in `Writer::drop`.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(Error::io(path, "mmap", std::io::Error::last_os_error()));
    }
    NonNull::new(raw.cast::<u8>()).ok_or_else(|| Error::Create("mmap returned null".into()))
}

/// The file name of a ring in a ring directory: `<pid>-<starttime>.ring`.
pub fn ring_file_name(pid: u32, start_time_ticks: u64) -> String {
    format!("{pid}-{start_time_ticks}.ring")
}

/// Bumped in the child after `fork`, so cached thread ids are refreshed there.
static FORK_GENERATION: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// (fork generation, tid) of this thread; tid 0 means not yet known.
    static CACHED_TID: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
}

#[inline(always)]
fn current_tid() -> u32 {
    let generation = FORK_GENERATION.load(Ordering::Relaxed);
    CACHED_TID
        .try_with(|cell| {
            let (cached_generation, tid) = cell.get();
            if tid != 0 && cached_generation == generation {
                tid
            } else {
                let tid = gettid();
                cell.set((generation, tid));
                tid
            }
        })
        .unwrap_or_else(|_| gettid())
}

#[cold]
fn gettid() -> u32 {
    // SAFETY: SYS_gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

fn register_fork_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registering a child handler that only does an atomic increment (async-signal
        // safe, as a post-fork child handler must be).
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_packs_index_and_call() {
        let token = Token::new(12345, Call::CuMemcpyHtoD_v2.id());
        assert_eq!(token.index(), Some(12345));
        assert_eq!(token.call_id(), Call::CuMemcpyHtoD_v2.id());
        assert_eq!(Token::from_raw(token.to_raw()), token);
        assert_eq!(Token::NONE.index(), None);
    }

    #[test]
    fn rejects_bad_slot_counts() {
        let dir = tempfile::tempdir().unwrap();
        for bad in [0, 3, 1000, format::MAX_SLOT_COUNT * 2] {
            let err = Writer::create(dir.path().join("r.ring"), bad).unwrap_err();
            assert!(matches!(err, Error::BadSlotCount), "{bad}: {err}");
        }
    }

    #[test]
    fn tid_is_cached_per_thread() {
        let main = current_tid();
        assert_eq!(main, gettid());
        let other = std::thread::spawn(current_tid).join().unwrap();
        assert_ne!(main, other);
    }
}
