//! The reader: copy the file out, validate everything, answer "what was each thread doing".
//!
//! [`parse_ring`] is pure (bytes in, snapshot out) and never panics; [`read_ring_from_file`] does
//! the I/O on a file the caller opened (the agent opens ring files from directories others can
//! write without following links, see capture's `untrusted` module) and [`read_header`] reads only
//! the header of one; [`read_ring`] opens a path itself (never following a symlink in strict mode,
//! never opening a FIFO or device: `O_PATH` and `fstat` first); [`read_ring_into`] hands each chunk
//! of slots to a [`RingSink`] as it is copied (the agent's incident copy is written that way). Reads
//! check the file is a bounded regular file and copy it with `pread`, one chunk of slots at a time,
//! twice (copy A, then copy B of the same chunk), then the header with the lanes' heads (copy C).
//! Errors say what is wrong with a file, never what bytes it holds. A slot is accepted only if both
//! copies agree, its sequence word is final and matches its position, and its body is
//! self-consistent. The writer's memory is never touched.
//!
//! Memory is bounded whatever the file claims: two chunks of [`REREAD_CHUNK_BYTES`], the header and
//! lane table (≤ 260 KiB), a 40-byte key per slot that may hold a record (≤ 40 MiB at 2^20 slots)
//! and ~17 bytes per record while the calls in flight are found; whole records only for those kept
//! ([`ReadOptions::keep_records`]) and the calls in flight ([`ReadOptions::max_in_flight`]), whose
//! slots are read a third time (and believed only if unchanged). Time: O(n log n) in the slots.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::counter;
use crate::error::{Error, Result};
use crate::format::{self, byte_at, header, lane, le_u16, le_u32, le_u64, slot, Args};
use crate::identity;

/// Default cap on the size of a ring file a reader accepts: the largest ring a writer can create
/// ([`format::MAX_RING_BYTES`]). The reader never holds the file (see the module docs).
pub const DEFAULT_MAX_FILE_BYTES: u64 = format::MAX_RING_BYTES;
/// The slots are copied, twice, and compared in chunks of this size: the reader never holds a whole
/// copy of a ring (128 MiB at the largest).
pub const REREAD_CHUNK_BYTES: usize = 1 << 20;
/// Default [`ReadOptions::max_in_flight`]: calls in flight a snapshot lists (the oldest; the others
/// are counted in [`RingSnapshot::in_flight_omitted`]). A real program has one or a few per thread.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 4096;

/// How to read a ring.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// Refuse symlinks (`O_NOFOLLOW`) and files not owned by `expected_owner`.
    pub strict: bool,
    /// Owner uid required in strict mode; `None` means the reader's effective uid.
    pub expected_owner: Option<u32>,
    /// Larger files are rejected with [`Error::TooLarge`].
    pub max_file_bytes: u64,
    /// Compute in-flight ages from the reader's `CLOCK_MONOTONIC` (only when the boot ids match).
    pub compute_age: bool,
    /// Keep only the newest this many records in the snapshot (`None`: all of them). The calls in
    /// flight are found among every record either way; the reader holds a 40-byte key per record
    /// while it decides them, and the whole record (about 230 bytes with its strings) only for those
    /// it keeps: a full 2^20-slot ring costs ~70 MB with a limit, ~300 MB without.
    pub keep_records: Option<usize>,
    /// List at most this many calls in flight (the oldest; `None`: all of them). A hostile ring can
    /// hold 2^20 enters that never exit.
    pub max_in_flight: Option<usize>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            strict: false,
            expected_owner: None,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            compute_age: true,
            keep_records: None,
            max_in_flight: Some(DEFAULT_MAX_IN_FLIGHT),
        }
    }
}

impl ReadOptions {
    /// Strict options: no symlinks, owner must be `owner` (or the reader's euid).
    pub fn strict(owner: Option<u32>) -> Self {
        ReadOptions {
            strict: true,
            expected_owner: owner,
            ..ReadOptions::default()
        }
    }
}

/// The decoded header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingHeader {
    pub version: u32,
    pub header_size: u32,
    pub slot_size: u32,
    /// All lanes' slots together.
    pub slot_count: u32,
    pub writer_pid: u32,
    pub pidns_inode: u64,
    /// Writer's start time in clock ticks since boot (`stat` field 22).
    pub start_time_ticks: u64,
    /// Kernel boot id of the writer's boot, text form (all zeros if the writer could not read it).
    pub boot_id: String,
    pub clock_id: u32,
    /// "CLOCK_MONOTONIC" or "CLOCK_MONOTONIC_COARSE" (same timebase): what record times are in
    /// once read (a version-2 counter is converted).
    pub clock: String,
    pub created_realtime_ns: u64,
    pub created_monotonic_ns: u64,
    pub ticks_per_second: u32,
    pub flags: u32,
    /// Version 1: next global record index. Version 2: the lanes' heads added up. Either way the
    /// number of record indices ever claimed.
    pub head: u64,
    /// Records the writer gave up because every slot it tried was busy.
    pub dropped: u64,
    /// Fail-soft status the writer left (e.g. why the injection library could not subscribe).
    pub status: Option<String>,
    pub status_code: i32,
    /// Version 2: number of lanes (1 for version 1: one shared ring).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub lane_count: u32,
    /// Version 2: what slot times count (`counter::COUNTER_*`; 0 = nanoseconds of `clock_id`).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub counter_kind: u32,
    /// Version 2: counter ticks per second (0 without a counter).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub counter_hz: u64,
    /// Version 2: the counter read together with `created_monotonic_ns`.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub created_counter: u64,
    /// Version 2: the writer's latest calibration pair (counter, `CLOCK_MONOTONIC` ns); zero when
    /// absent, being rewritten, or not credible.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub calib_counter: u64,
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub calib_monotonic_ns: u64,
    /// Version 2: each lane's head (next lane-local index), when the lane table was read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lane_heads: Vec<u64>,
}

fn one() -> u32 {
    1
}

fn is_one(value: &u32) -> bool {
    *value == 1
}

fn is_zero_u32(value: &u32) -> bool {
    *value == 0
}

fn is_zero_u64(value: &u64) -> bool {
    *value == 0
}

fn is_false(value: &bool) -> bool {
    !*value
}

impl RingHeader {
    /// Bytes the file must have: header, lane table (version 2) and all slots.
    pub fn needed_len(&self) -> u64 {
        self.slots_offset() + u64::from(self.slot_size) * u64::from(self.slot_count)
    }

    /// Where slot 0 of lane 0 starts.
    pub fn slots_offset(&self) -> u64 {
        let lane_table = if self.version >= 2 {
            u64::from(format::LANE_ENTRY_SIZE) * u64::from(self.lane_count)
        } else {
            0
        };
        u64::from(self.header_size) + lane_table
    }

    /// Slots per lane.
    pub fn lane_slots(&self) -> u32 {
        self.slot_count / self.lane_count.max(1)
    }

    /// A slot's time field as `CLOCK_MONOTONIC` (or coarse) ns: version 1 and counter-less
    /// version 2 rings store ns; a counter is converted through the line of the creation pair and
    /// the latest calibration pair (their measured frequency), or, without a credible latest pair,
    /// the header's frequency.
    pub fn to_monotonic_ns(&self, time: u64) -> u64 {
        if self.counter_kind == counter::COUNTER_NONE {
            return time;
        }
        match self.refined_calibration() {
            Some(hz) => {
                counter::to_monotonic_ns(time, self.calib_counter, self.calib_monotonic_ns, hz)
            }
            None => counter::to_monotonic_ns(
                time,
                self.created_counter,
                self.created_monotonic_ns,
                self.counter_hz,
            ),
        }
    }

    /// The frequency measured between the creation and the latest calibration pair, if they are at
    /// least a second apart and within 1 % of the header's frequency.
    fn refined_calibration(&self) -> Option<u64> {
        let ticks = self.calib_counter.checked_sub(self.created_counter)?;
        let ns = self
            .calib_monotonic_ns
            .checked_sub(self.created_monotonic_ns)?;
        if ns < 1_000_000_000 {
            return None;
        }
        let hz = counter::ticks_per_second(ticks, ns)?;
        (hz.abs_diff(self.counter_hz) <= self.counter_hz / 100).then_some(hz)
    }
}

/// Enter (a call is about to be made) or exit (it returned).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordKind {
    Enter,
    Exit,
}

/// One accepted slot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// Record index within its lane (version 1: the global index, in claim order across all
    /// threads).
    pub seq: u64,
    /// Version 2: the lane the record is in (0 = the shared lane; version 1: always 0).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub lane: u32,
    pub tid: u32,
    pub kind: RecordKind,
    pub call_id: u16,
    /// Driver symbol name, or `call#<id>` for ids unknown to this reader.
    pub call: String,
    pub args: Args,
    pub label: String,
    /// Exit records: the call's return value.
    pub result: Option<i64>,
    /// Exit records: the index of the matching enter in its lane (version 1: the global index,
    /// low 48 bits).
    pub enter_seq: Option<u64>,
    /// Exit records of version 2: the lane of the matching enter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enter_lane: Option<u32>,
    /// Enter records of version 2: an exit recorded in another lane marked it closed in place.
    #[serde(default, skip_serializing_if = "is_false")]
    pub closed: bool,
    /// `CLOCK_MONOTONIC` when the record was made (a version-2 counter, converted).
    pub monotonic_ns: u64,
}

/// A call entered and never exited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    pub tid: u32,
    /// Index of the enter record in its lane.
    pub seq: u64,
    /// The enter record's lane (version 2; 0 = shared lane or version 1).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub lane: u32,
    pub call_id: u16,
    pub call: String,
    pub args: Args,
    pub label: String,
    pub entered_monotonic_ns: u64,
    /// Reader's `CLOCK_MONOTONIC` minus `entered_monotonic_ns`; `None` unless reader and writer
    /// are on the same boot (same boot id), where the two clocks are the same clock.
    pub age_ns: Option<u64>,
}

/// What a ring says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingSnapshot {
    pub header: RingHeader,
    /// Accepted records, oldest first.
    pub records: Vec<Record>,
    /// Calls entered and never exited, by thread id then age.
    pub in_flight: Vec<InFlight>,
    /// Slots in the live window being written (busy) or that changed while being copied.
    pub torn_slots: u64,
    /// Slots with a final sequence word whose content failed validation.
    pub invalid_slots: u64,
    /// Whether the reader runs on the writer's boot (`None`: the writer recorded no boot id, or
    /// the reader could not read its own).
    pub same_boot: Option<bool>,
    /// The reader's `CLOCK_MONOTONIC` when ages were computed.
    pub reader_monotonic_ns: Option<u64>,
    /// Valid records left out of `records` ([`ReadOptions::keep_records`]): the oldest ones.
    #[serde(default)]
    pub records_omitted: u64,
    /// Calls in flight left out of `in_flight` ([`ReadOptions::max_in_flight`]): the newest ones.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub in_flight_omitted: u64,
}

impl RingSnapshot {
    /// The last `n` records, oldest first.
    pub fn last(&self, n: usize) -> &[Record] {
        let start = self.records.len().saturating_sub(n);
        &self.records[start..]
    }
}

/// Reads a ring file from outside the writer (see the module docs).
///
/// A ring whose path was unlinked can still be read through the writer's fd link
/// (`<proc>/<pid>/fd/<n>`) with non-strict options; strict mode refuses every symlink, including
/// those magic links. Whatever the mode, the path is first opened `O_PATH` (nothing is opened
/// yet: no FIFO open, no device side effect), and only a regular file is then opened for reading.
/// A daemon reading files from a directory others can write opens them itself (without following
/// any link) and hands the [`File`] to [`read_ring_from_file`].
pub fn read_ring(path: impl AsRef<Path>, options: &ReadOptions) -> Result<RingSnapshot> {
    read_ring_with_bytes(path, options).map(|(snapshot, _)| snapshot)
}

/// [`read_ring`], also returning the copied file bytes (header as of the end of the read, slots as
/// first copied) for saving as evidence; [`parse_ring`] of those bytes gives the same records.
pub fn read_ring_with_bytes(
    path: impl AsRef<Path>,
    options: &ReadOptions,
) -> Result<(RingSnapshot, Vec<u8>)> {
    let path = path.as_ref();
    let file = open_regular(path, options.strict)?;
    if options.strict {
        let meta = file.metadata().map_err(|e| Error::io(path, "stat", e))?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let expected = options
            .expected_owner
            .unwrap_or_else(|| unsafe { libc::geteuid() });
        if meta.uid() != expected {
            return Err(Error::WrongOwner {
                path: path.into(),
                owner: meta.uid(),
                expected,
            });
        }
    }
    read_ring_from_file_with_bytes(&file, options).map_err(|err| err.at(path))
}

/// Opens `path` for reading only if it is a regular file: `O_PATH` first (following a final
/// symlink only when `follow`), `fstat`, then the same inode through its `/proc/self/fd` link with
/// `O_NONBLOCK`. A FIFO, socket, device or directory is never opened.
fn open_regular(path: &Path, strict: bool) -> Result<File> {
    let mut flags = libc::O_PATH | libc::O_CLOEXEC;
    if strict {
        flags |= libc::O_NOFOLLOW;
    }
    let handle = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| {
            if strict && e.raw_os_error() == Some(libc::ELOOP) {
                Error::Symlink { path: path.into() }
            } else {
                Error::io(path, "open", e)
            }
        })?;
    let meta = handle.metadata().map_err(|e| Error::io(path, "stat", e))?;
    if meta.file_type().is_symlink() {
        // O_PATH | O_NOFOLLOW on a symlink opens the link itself.
        return Err(Error::Symlink { path: path.into() });
    }
    if !meta.file_type().is_file() {
        return Err(Error::NotRegular { path: path.into() });
    }
    let link = format!("{}/self/fd/{}", identity::SELF_PROC, handle.as_raw_fd());
    let read_flags = libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(read_flags)
        .open(&link)
        .or_else(|_| {
            // No /proc (a minimal container): the path again, never blocking; the inode is
            // compared below, so a file swapped in meanwhile is refused.
            OpenOptions::new()
                .read(true)
                .custom_flags(read_flags | if strict { libc::O_NOFOLLOW } else { 0 })
                .open(path)
        })
        .map_err(|e| Error::io(path, "open", e))?;
    let again = file.metadata().map_err(|e| Error::io(path, "stat", e))?;
    if (again.dev(), again.ino()) != (meta.dev(), meta.ino()) || !again.file_type().is_file() {
        return Err(Error::NotRegular { path: path.into() });
    }
    Ok(file)
}

/// Reads and validates the header of an opened ring file without reading its slots (at most 4 KiB
/// are read, whatever the file's size). The caller opened the file (e.g. without following links,
/// checked to be regular); the reader never opens anything itself here.
pub fn read_header(file: &File) -> Result<RingHeader> {
    let len = file.metadata().map_err(|e| Error::read("stat", e))?.len();
    let prefix = len.min(u64::from(format::MAX_HEADER_SIZE)) as usize;
    let mut bytes = vec![0u8; prefix];
    read_exact_from(file, &mut bytes, 0)?;
    parse_header_with_len(&bytes, len)
}

/// Reads a ring from a file the caller opened (see [`read_header`]); same checks and copies as
/// [`read_ring`].
pub fn read_ring_from_file(file: &File, options: &ReadOptions) -> Result<RingSnapshot> {
    let len = checked_len(file, options)?;
    read_streamed(&FileSource(file), len, options, None)
}

/// The length of an opened ring file, once it is known to be a regular file within the cap.
fn checked_len(file: &File, options: &ReadOptions) -> Result<u64> {
    let meta = file.metadata().map_err(|e| Error::read("stat", e))?;
    if !meta.file_type().is_file() {
        return Err(Error::NotRegular {
            path: PathBuf::from("(opened file)"),
        });
    }
    let len = meta.len();
    if len > options.max_file_bytes {
        return Err(Error::TooLarge {
            len,
            cap: options.max_file_bytes,
        });
    }
    Ok(len)
}

fn read_exact_from(file: &File, buf: &mut [u8], offset: u64) -> Result<()> {
    file.read_exact_at(buf, offset).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Error::Truncated { len: offset }
        } else {
            Error::read("read", e)
        }
    })
}

/// [`read_ring_from_file`], also returning the copied bytes (see [`read_ring_with_bytes`]). The copy
/// is held whole in memory (the file's size): a reader that must stay small streams it to a
/// [`RingSink`] with [`read_ring_into`] instead.
pub fn read_ring_from_file_with_bytes(
    file: &File,
    options: &ReadOptions,
) -> Result<(RingSnapshot, Vec<u8>)> {
    let mut copy = BytesCopy::default();
    let snapshot = read_ring_into(file, options, &mut copy)?;
    Ok((snapshot, copy.bytes))
}

/// Reads a ring from a file the caller opened (same checks and copies as [`read_ring_from_file`]),
/// handing each chunk of slots to `sink` as it is copied, and the header last: a copy of the ring is
/// written as it is read, and nobody holds the whole file. `sink` sees nothing of a read that fails.
pub fn read_ring_into(
    file: &File,
    options: &ReadOptions,
    sink: &mut dyn RingSink,
) -> Result<RingSnapshot> {
    let len = checked_len(file, options)?;
    read_streamed(&FileSource(file), len, options, Some(sink))
}

/// Where a ring's bytes go as the reader copies them (e.g. a copy written beside an incident). The
/// calls come in order: [`RingSink::begin`], [`RingSink::slots`] for each chunk in file order,
/// [`RingSink::finish`] (only when the read succeeds).
pub trait RingSink {
    /// The layout (header copy A, validated), before any slot.
    fn begin(&mut self, layout: &RingHeader);
    /// Slots `first..` as first copied (copy A: whole slots of `slot_size` bytes), and for each the
    /// lane-local index of the record it holds if it passed every check that needs no lane head
    /// (`None`: empty, torn, or invalid).
    fn slots(&mut self, first: usize, bytes: &[u8], records: &[Option<u64>]);
    /// The header and lane table as the reader last read them (copy C: `slots_offset` bytes, with a
    /// refreshed calibration pair that changed during the read zeroed) and their decoding.
    fn finish(&mut self, header_bytes: &[u8], header: &RingHeader);
}

/// A [`RingSink`] that keeps the whole copy (header copy C, slots copy A) in memory.
#[derive(Debug, Default)]
struct BytesCopy {
    bytes: Vec<u8>,
    slots_offset: usize,
    slot_size: usize,
}

impl RingSink for BytesCopy {
    fn begin(&mut self, layout: &RingHeader) {
        self.slots_offset = layout.slots_offset() as usize;
        self.slot_size = layout.slot_size as usize;
        // At most the file's length, itself at most `max_file_bytes`: bounded.
        self.bytes = vec![0u8; layout.needed_len() as usize];
    }

    fn slots(&mut self, first: usize, bytes: &[u8], _records: &[Option<u64>]) {
        let at = self.slots_offset + first * self.slot_size;
        if let Some(place) = self.bytes.get_mut(at..at + bytes.len()) {
            place.copy_from_slice(bytes);
        }
    }

    fn finish(&mut self, header_bytes: &[u8], _header: &RingHeader) {
        if let Some(place) = self.bytes.get_mut(..header_bytes.len()) {
            place.copy_from_slice(header_bytes);
        }
    }
}

/// Where the reader copies a ring from.
trait Source {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;
    /// A live file: a second copy of a slot may differ from the first (a slot being written).
    fn live(&self) -> bool;
}

/// A ring file, read with `pread`.
struct FileSource<'a>(&'a File);

impl Source for FileSource<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        read_exact_from(self.0, buf, offset)
    }

    fn live(&self) -> bool {
        true
    }
}

/// Ring bytes already copied (a saved `ring.bin`): one copy, nothing changes.
struct BytesSource<'a>(&'a [u8]);

impl Source for BytesSource<'_> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let found = usize::try_from(offset)
            .ok()
            .and_then(|start| self.0.get(start..start.checked_add(buf.len())?));
        match found {
            Some(bytes) => {
                buf.copy_from_slice(bytes);
                Ok(())
            }
            None => Err(Error::Truncated { len: offset }),
        }
    }

    fn live(&self) -> bool {
        false
    }
}

/// The reader protocol (docs/breadcrumb-ring.md, "Reader protocol") on `source` of `len` bytes: copy A
/// of the header (the layout), each chunk of slots copied twice (A, then B) and checked as far as it
/// can be without the lanes' heads, copy C of the header and lane table, then the checks that need
/// the heads ([`Scan::finish`]).
fn read_streamed(
    source: &dyn Source,
    len: u64,
    options: &ReadOptions,
    mut sink: Option<&mut dyn RingSink>,
) -> Result<RingSnapshot> {
    let mut first_header = vec![0u8; len.min(u64::from(format::MAX_HEADER_SIZE)) as usize];
    source.read_at(&mut first_header, 0)?;
    let layout = parse_header_with_len(&first_header, len)?;
    if let Some(sink) = sink.as_deref_mut() {
        sink.begin(&layout);
    }
    let slot_size = layout.slot_size as usize;
    let slot_count = layout.slot_count as usize;
    let slots_offset = layout.slots_offset();
    let chunk_slots = (REREAD_CHUNK_BYTES / slot_size).clamp(1, slot_count.max(1));
    let mut copy_a = vec![0u8; chunk_slots * slot_size];
    let mut copy_b = if source.live() {
        vec![0u8; copy_a.len()]
    } else {
        Vec::new()
    };
    let mut scan = Scan::new(&layout);
    let mut records = Vec::with_capacity(chunk_slots);
    let mut start = 0;
    while start < slot_count {
        let n = chunk_slots.min(slot_count - start);
        let offset = slots_offset + (start * slot_size) as u64;
        let a = &mut copy_a[..n * slot_size];
        source.read_at(a, offset)?;
        // Copy B of the same chunk: a slot that differs was being written while it was copied.
        let b = if source.live() {
            let b = &mut copy_b[..n * slot_size];
            source.read_at(b, offset)?;
            Some(&*b)
        } else {
            None
        };
        records.clear();
        for k in 0..n {
            let bytes = &a[k * slot_size..k * slot_size + slot::USED];
            let changed = b.is_some_and(|b| b[k * slot_size..k * slot_size + slot::USED] != *bytes);
            records.push(scan.add(start + k, bytes, changed));
        }
        if let Some(sink) = sink.as_deref_mut() {
            sink.slots(start, a, &records);
        }
        start += n;
    }
    // Header and lane table again, last: the heads are at least as new as every slot copied.
    let mut last_header = vec![0u8; slots_offset as usize];
    source.read_at(&mut last_header, 0)?;
    let mut header = parse_header_with_len(&last_header, len)?;
    if (
        header.version,
        header.header_size,
        header.slot_size,
        header.slot_count,
        header.lane_count,
    ) != (
        layout.version,
        layout.header_size,
        layout.slot_size,
        layout.slot_count,
        layout.lane_count,
    ) {
        return Err(Error::Create(
            "ring header changed while it was being read".to_string(),
        ));
    }
    let calibration = header::CALIB_SEQ..header::CALIB_MONOTONIC_NS + 8;
    if first_header.get(calibration.clone()) != last_header.get(calibration) {
        // Rewritten between the copies: fall back to the creation pair, in the saved copy too
        // (its calibration sequence word zeroed), so the copy converts times the same way.
        header.calib_counter = 0;
        header.calib_monotonic_ns = 0;
        last_header[header::CALIB_SEQ..header::CALIB_SEQ + 8].fill(0);
    }
    if let Some(sink) = sink {
        sink.finish(&last_header, &header);
    }
    scan.finish(header, source, options)
}

/// Parses ring bytes (e.g. a saved `ring.bin`). Pure apart from reading the reader's own clock
/// and boot id when `options.compute_age` is set. Never panics.
pub fn parse_ring(bytes: &[u8], options: &ReadOptions) -> Result<RingSnapshot> {
    if bytes.len() as u64 > options.max_file_bytes {
        return Err(Error::TooLarge {
            len: bytes.len() as u64,
            cap: options.max_file_bytes,
        });
    }
    read_streamed(&BytesSource(bytes), bytes.len() as u64, options, None)
}

/// Validates and decodes the header; `bytes` must hold the whole file (for the length check).
pub fn parse_header(bytes: &[u8]) -> Result<RingHeader> {
    parse_header_with_len(bytes, bytes.len() as u64)
}

pub(crate) fn parse_header_with_len(bytes: &[u8], file_len: u64) -> Result<RingHeader> {
    // The errors below say what is wrong, never the value found: the bytes may be anything a
    // hostile writer (or a symlink to a secret) put there.
    if bytes.len() < format::MAGIC.len() {
        return Err(Error::Truncated {
            len: bytes.len() as u64,
        });
    }
    if bytes[..8] != format::MAGIC {
        return Err(Error::BadMagic);
    }
    if bytes.len() < format::HEADER_SIZE as usize {
        return Err(Error::Truncated {
            len: bytes.len() as u64,
        });
    }
    let version = le_u32(bytes, header::VERSION);
    if version != format::VERSION && version != format::VERSION_1 {
        return Err(Error::UnsupportedVersion);
    }
    let header_size = le_u32(bytes, header::HEADER_SIZE);
    if !(format::HEADER_SIZE..=format::MAX_HEADER_SIZE).contains(&header_size)
        || header_size & 63 != 0
    {
        return Err(Error::BadHeaderSize);
    }
    let slot_size = le_u32(bytes, header::SLOT_SIZE);
    if !(format::SLOT_SIZE..=format::MAX_SLOT_SIZE).contains(&slot_size) || slot_size & 63 != 0 {
        return Err(Error::BadSlotSize);
    }
    let slot_count = le_u32(bytes, header::SLOT_COUNT);
    if !slot_count.is_power_of_two() || slot_count > format::MAX_SLOT_COUNT {
        return Err(Error::BadSlotCount);
    }
    let clock_id = le_u32(bytes, header::CLOCK_ID);
    let Some(clock) = format::RingClock::from_id(clock_id) else {
        return Err(Error::BadClock);
    };
    let (lane_count, counter_kind, counter_hz, created_counter) = if version == format::VERSION_1 {
        (1, counter::COUNTER_NONE, 0, 0)
    } else {
        let lanes = le_u32(bytes, header::LANE_COUNT);
        if !lanes.is_power_of_two() || lanes > format::MAX_LANE_COUNT || lanes > slot_count {
            return Err(Error::BadLaneCount);
        }
        let kind = le_u32(bytes, header::COUNTER_KIND);
        let hz = le_u64(bytes, header::COUNTER_HZ);
        if counter::counter_name(kind).is_none() || (kind != counter::COUNTER_NONE && hz == 0) {
            return Err(Error::BadCounter);
        }
        (lanes, kind, hz, le_u64(bytes, header::CREATED_COUNTER))
    };
    let (calib_counter, calib_monotonic_ns) = {
        let seq = le_u64(bytes, header::CALIB_SEQ);
        if counter_kind != counter::COUNTER_NONE && seq != 0 && seq & 1 == 0 {
            (
                le_u64(bytes, header::CALIB_COUNTER),
                le_u64(bytes, header::CALIB_MONOTONIC_NS),
            )
        } else {
            (0, 0)
        }
    };
    let mut boot_id = [0u8; 16];
    boot_id.copy_from_slice(&bytes[header::BOOT_ID..header::BOOT_ID + 16]);
    let status_len = le_u32(bytes, header::STATUS_LEN) as usize;
    let status = (status_len > 0 && status_len <= format::STATUS_CAPACITY).then(|| {
        String::from_utf8_lossy(&bytes[header::STATUS_TEXT..header::STATUS_TEXT + status_len])
            .into_owned()
    });
    let mut header = RingHeader {
        version,
        header_size,
        slot_size,
        slot_count,
        writer_pid: le_u32(bytes, header::WRITER_PID),
        pidns_inode: le_u64(bytes, header::PIDNS_INODE),
        start_time_ticks: le_u64(bytes, header::START_TIME_TICKS),
        boot_id: identity::format_boot_id(&boot_id),
        clock_id,
        clock: clock.name().to_string(),
        created_realtime_ns: le_u64(bytes, header::CREATED_REALTIME_NS),
        created_monotonic_ns: le_u64(bytes, header::CREATED_MONOTONIC_NS),
        ticks_per_second: le_u32(bytes, header::TICKS_PER_SECOND),
        flags: le_u32(bytes, header::FLAGS),
        head: le_u64(bytes, header::HEAD),
        dropped: le_u64(bytes, header::DROPPED),
        status,
        status_code: le_u32(bytes, header::STATUS_CODE) as i32,
        lane_count,
        counter_kind,
        counter_hz,
        created_counter,
        calib_counter,
        calib_monotonic_ns,
        lane_heads: Vec::new(),
    };
    if file_len < header.needed_len() {
        return Err(Error::Truncated { len: file_len });
    }
    if version >= 2 {
        // The lane table, when these bytes hold it (a header-only read does not).
        let table = header_size as usize;
        let entry = format::LANE_ENTRY_SIZE as usize;
        if let Some(lanes) = bytes.get(table..table + entry * lane_count as usize) {
            header.lane_heads = lanes
                .chunks_exact(entry)
                .map(|lane_entry| le_u64(lane_entry, lane::HEAD))
                .collect();
            header.head = header
                .lane_heads
                .iter()
                .fold(0u64, |sum, &head| sum.saturating_add(head));
        }
    }
    Ok(header)
}

/// The outcome of decoding one slot.
enum SlotState {
    Empty,
    /// Holds an index older than the live window (its successor is claimed but not yet written).
    Stale,
    Torn,
    Invalid,
    Valid(Record),
}

/// What a slot is checked against: its lane, position and the lane's head.
struct SlotPlace<'a> {
    header: &'a RingHeader,
    lane: u32,
    position: u64,
    head: u64,
}

impl SlotPlace<'_> {
    fn head_of(&self, lane_index: u32) -> u64 {
        if self.header.version == format::VERSION_1 {
            self.header.head
        } else {
            self.header
                .lane_heads
                .get(lane_index as usize)
                .copied()
                .unwrap_or(0)
        }
    }
}

/// The largest index below `limit` whose low 32 bits are `low` (a version-2 `ref`), if any.
fn index_below(limit: u64, low: u64) -> Option<u64> {
    let mut back = limit.wrapping_sub(low) & format::LANE_INDEX_MASK;
    if back == 0 {
        back = format::LANE_INDEX_MASK + 1;
    }
    limit.checked_sub(back)
}

/// `changed`: the slot differed between the reader's two copies (a slot being written).
fn decode_slot(place: &SlotPlace<'_>, bytes: &[u8], changed: bool) -> SlotState {
    let v2 = place.header.version >= 2;
    let lane_slots = u64::from(place.header.lane_slots());
    let raw_seq = le_u64(bytes, slot::SEQ);
    let closed = v2 && raw_seq & format::SEQ_CLOSED != 0;
    let seq = if v2 {
        raw_seq & !format::SEQ_CLOSED
    } else {
        raw_seq
    };
    if raw_seq == 0 {
        return SlotState::Empty;
    }
    if seq == 0 {
        return SlotState::Invalid;
    }
    if seq & 1 == 1 {
        return SlotState::Torn;
    }
    if changed {
        return SlotState::Torn;
    }
    let index = seq / 2 - 1;
    if index % lane_slots != place.position {
        return SlotState::Invalid;
    }
    let head = place.head;
    if index >= head {
        // Written after the header copy was taken (a raw copy of a live file), or hostile.
        return SlotState::Torn;
    }
    if head - index > lane_slots {
        return SlotState::Stale;
    }
    let meta = le_u64(bytes, slot::TID);
    let tid = meta as u32;
    let kind = match byte_at(bytes, slot::KIND) {
        format::KIND_ENTER => RecordKind::Enter,
        format::KIND_EXIT => RecordKind::Exit,
        _ => return SlotState::Invalid,
    };
    let label_len = usize::from(byte_at(bytes, slot::LABEL_LEN));
    if tid == 0 || label_len > format::LABEL_CAPACITY {
        return SlotState::Invalid;
    }
    let label = match bytes
        .get(slot::LABEL..slot::LABEL + label_len)
        .map(std::str::from_utf8)
    {
        Some(Ok(text)) => text.to_string(),
        _ => return SlotState::Invalid,
    };
    let call_id = le_u16(bytes, slot::CALL_ID);
    let args = Args {
        bytes: le_u64(bytes, slot::BYTES),
        ptr: le_u64(bytes, slot::PTR),
        ptr2: le_u64(bytes, slot::PTR2),
        stream: le_u64(bytes, slot::STREAM),
        chunk: le_u32(bytes, slot::CHUNK),
        chunk_count: le_u32(bytes, slot::CHUNK_COUNT),
        tensor_first: le_u32(bytes, slot::TENSOR_FIRST),
        tensor_count: le_u32(bytes, slot::TENSOR_COUNT),
    };
    let Some((result, enter_seq, enter_lane)) =
        links(place, kind, index, closed, &args, label_len, bytes)
    else {
        return SlotState::Invalid;
    };
    SlotState::Valid(Record {
        seq: index,
        lane: place.lane,
        tid,
        kind,
        call_id,
        call: format::call_name(call_id),
        args,
        label,
        result,
        enter_seq,
        enter_lane,
        closed,
        monotonic_ns: place
            .header
            .to_monotonic_ns(le_u64(bytes, slot::MONOTONIC_NS)),
    })
}

/// What a record links to: its result and, for an exit, the enter it closes (index, lane).
type Links = (Option<i64>, Option<u64>, Option<u32>);

/// The links of an enter or exit record; `None` when they are inconsistent (an invalid slot).
fn links(
    place: &SlotPlace<'_>,
    kind: RecordKind,
    index: u64,
    closed: bool,
    args: &Args,
    label_len: usize,
    bytes: &[u8],
) -> Option<Links> {
    let v2 = place.header.version >= 2;
    let ref_index = le_u64(bytes, slot::REF_INDEX);
    let result = le_u64(bytes, slot::RESULT) as i64;
    let own_ref = if v2 {
        (u64::from(place.lane) << format::LANE_INDEX_BITS) | (index & format::LANE_INDEX_MASK)
    } else {
        index
    };
    match kind {
        RecordKind::Enter => (ref_index == own_ref && result == 0).then_some((None, None, None)),
        RecordKind::Exit => {
            if closed || *args != Args::default() || label_len != 0 {
                return None;
            }
            if v2 {
                let enter_lane = (ref_index >> format::LANE_INDEX_BITS) as u32;
                let low = ref_index & format::LANE_INDEX_MASK;
                if ref_index > format::TOKEN_INDEX_MASK || enter_lane >= place.header.lane_count {
                    return None;
                }
                // Same lane: the enter came before this exit. Another lane: before its head.
                let limit = if enter_lane == place.lane {
                    index
                } else {
                    place.head_of(enter_lane)
                };
                let enter = index_below(limit, low)?;
                Some((Some(result), Some(enter), Some(enter_lane)))
            } else {
                if ref_index >= index || ref_index > format::TOKEN_INDEX_MASK {
                    return None;
                }
                Some((Some(result), Some(ref_index), None))
            }
        }
    }
}

/// Whether the reader runs on the writer's boot, and the reader's `CLOCK_MONOTONIC` (when
/// `compute_age` is set).
fn reader_clock(header: &RingHeader, options: &ReadOptions) -> (Option<bool>, Option<u64>) {
    if !options.compute_age {
        return (None, None);
    }
    let writer_boot = header.boot_id.as_str();
    let zero = identity::format_boot_id(&[0; 16]);
    let same = match identity::current_boot_id() {
        Some(mine) if writer_boot != zero => Some(identity::format_boot_id(&mine) == writer_boot),
        _ => None,
    };
    (same, Some(identity::monotonic_ns()))
}

/// What finding the calls in flight looks at in a record.
trait Linked {
    fn kind(&self) -> RecordKind;
    fn closed(&self) -> bool;
    fn lane(&self) -> u32;
    fn seq(&self) -> u64;
    fn tid(&self) -> u32;
    /// An exit record's enter: (lane, index).
    fn closes(&self) -> Option<(u32, u64)>;
}

impl Linked for Record {
    fn kind(&self) -> RecordKind {
        self.kind
    }
    fn closed(&self) -> bool {
        self.closed
    }
    fn lane(&self) -> u32 {
        self.lane
    }
    fn seq(&self) -> u64 {
        self.seq
    }
    fn tid(&self) -> u32 {
        self.tid
    }
    fn closes(&self) -> Option<(u32, u64)> {
        match (self.kind, self.enter_seq) {
            (RecordKind::Exit, Some(enter)) => Some((self.enter_lane.unwrap_or(self.lane), enter)),
            _ => None,
        }
    }
}

/// What the reader keeps of a slot that may hold a record while it copies the ring: enough to order
/// the records, find the calls in flight, and recognise the record when its slot is read again for the
/// whole of it (a writer never writes a slot twice with one index). 40 bytes.
#[derive(Debug, Clone, Copy)]
struct SlotKey {
    /// Lane-local record index (version 1: the global index).
    index: u64,
    /// The slot's raw time until the header's calibration is known, then `CLOCK_MONOTONIC` ns.
    time: u64,
    /// An exit's enter: its index; until resolved, the low 32 bits of its `ref` (another lane).
    enter: u64,
    /// Slot number in the file.
    slot: u32,
    tid: u32,
    lane: u16,
    enter_lane: u16,
    flags: u8,
}

/// [`SlotKey::flags`]: an enter record (else an exit).
const KEY_ENTER: u8 = 1;
/// An enter closed in place (bit 63 of its `seq`).
const KEY_CLOSED: u8 = 2;
/// An exit whose enter is in another lane: its index needs that lane's head (copy C).
const KEY_OTHER_LANE: u8 = 4;
/// The body failed validation: invalid, unless the lane's head says stale or torn first.
const KEY_BODY_INVALID: u8 = 8;

/// What the reader made of the slots so far (see [`read_streamed`]).
struct Scan {
    version: u32,
    lane_count: u32,
    lane_slots: u64,
    keys: Vec<SlotKey>,
    torn: u64,
    invalid: u64,
}

impl Scan {
    fn new(layout: &RingHeader) -> Scan {
        Scan {
            version: layout.version,
            lane_count: layout.lane_count,
            lane_slots: u64::from(layout.lane_slots()).max(1),
            keys: Vec::new(),
            torn: 0,
            invalid: 0,
        }
    }

    /// Checks slot `slot_number` (its first `slot::USED` bytes, copy A; `changed`: copy B differs) as
    /// far as it can be without the lanes' heads ([`decode_slot`]'s checks, in its order); returns the
    /// record's index when the slot holds a record that passed them.
    fn add(&mut self, slot_number: usize, bytes: &[u8], changed: bool) -> Option<u64> {
        let v2 = self.version >= 2;
        let lane_index = slot_number as u64 / self.lane_slots;
        let position = slot_number as u64 % self.lane_slots;
        let raw_seq = le_u64(bytes, slot::SEQ);
        if raw_seq == 0 {
            return None;
        }
        let closed = v2 && raw_seq & format::SEQ_CLOSED != 0;
        let seq = if v2 {
            raw_seq & !format::SEQ_CLOSED
        } else {
            raw_seq
        };
        if seq == 0 {
            self.invalid += 1;
            return None;
        }
        if seq & 1 == 1 || changed {
            self.torn += 1;
            return None;
        }
        let index = seq / 2 - 1;
        if index % self.lane_slots != position {
            self.invalid += 1;
            return None;
        }
        // At most 2^20 slots and 4096 lanes: the numbers fit.
        let mut key = SlotKey {
            index,
            time: le_u64(bytes, slot::MONOTONIC_NS),
            enter: 0,
            slot: slot_number as u32,
            tid: le_u32(bytes, slot::TID),
            lane: lane_index as u16,
            enter_lane: lane_index as u16,
            flags: 0,
        };
        if !self.body_checks(&mut key, index, closed, bytes) {
            key.flags = KEY_BODY_INVALID;
        }
        self.keys.push(key);
        (key.flags & KEY_BODY_INVALID == 0).then_some(index)
    }

    /// [`decode_slot`]'s body and link checks, but for the enter of an exit in another lane (that
    /// lane's head is needed: [`KEY_OTHER_LANE`]). Fills the key's kind, flags and enter.
    fn body_checks(&self, key: &mut SlotKey, index: u64, closed: bool, bytes: &[u8]) -> bool {
        let v2 = self.version >= 2;
        let label_len = usize::from(byte_at(bytes, slot::LABEL_LEN));
        if key.tid == 0 || label_len > format::LABEL_CAPACITY {
            return false;
        }
        let kind = byte_at(bytes, slot::KIND);
        if kind != format::KIND_ENTER && kind != format::KIND_EXIT {
            return false;
        }
        let label_ok = bytes
            .get(slot::LABEL..slot::LABEL + label_len)
            .is_some_and(|label| std::str::from_utf8(label).is_ok());
        if !label_ok {
            return false;
        }
        let ref_index = le_u64(bytes, slot::REF_INDEX);
        let result = le_u64(bytes, slot::RESULT);
        if kind == format::KIND_ENTER {
            let own_ref = if v2 {
                (u64::from(key.lane) << format::LANE_INDEX_BITS) | (index & format::LANE_INDEX_MASK)
            } else {
                index
            };
            key.flags = KEY_ENTER | if closed { KEY_CLOSED } else { 0 };
            return ref_index == own_ref && result == 0;
        }
        let args_zero = bytes[slot::BYTES..slot::REF_INDEX].iter().all(|&b| b == 0);
        if closed || !args_zero || label_len != 0 {
            return false;
        }
        if !v2 {
            key.enter = ref_index;
            return ref_index < index && ref_index <= format::TOKEN_INDEX_MASK;
        }
        let enter_lane = ref_index >> format::LANE_INDEX_BITS;
        if ref_index > format::TOKEN_INDEX_MASK || enter_lane >= u64::from(self.lane_count) {
            return false;
        }
        key.enter_lane = enter_lane as u16;
        let low = ref_index & format::LANE_INDEX_MASK;
        if enter_lane == u64::from(key.lane) {
            match index_below(index, low) {
                Some(enter) => key.enter = enter,
                None => return false,
            }
        } else {
            key.enter = low;
            key.flags |= KEY_OTHER_LANE;
        }
        true
    }

    /// The checks that need the lanes' heads (copy C), the order of the records, the calls in flight,
    /// and the whole records of those kept and in flight: their slots read again, each believed only
    /// if it is unchanged since copy A.
    fn finish(
        self,
        header: RingHeader,
        source: &dyn Source,
        options: &ReadOptions,
    ) -> Result<RingSnapshot> {
        let Scan {
            version,
            lane_slots,
            mut keys,
            mut torn,
            mut invalid,
            ..
        } = self;
        let v1 = version == format::VERSION_1;
        let head_of = |lane_index: u16| -> u64 {
            if v1 {
                header.head
            } else {
                header
                    .lane_heads
                    .get(usize::from(lane_index))
                    .copied()
                    .unwrap_or(0)
            }
        };
        keys.retain_mut(|key| {
            let head = head_of(key.lane);
            if key.index >= head {
                // Written after the header copy was taken (a raw copy of a live file), or hostile.
                torn += 1;
                return false;
            }
            if head - key.index > lane_slots {
                return false;
            }
            if key.flags & KEY_BODY_INVALID != 0 {
                invalid += 1;
                return false;
            }
            if key.flags & KEY_OTHER_LANE != 0 {
                match index_below(head_of(key.enter_lane), key.enter) {
                    Some(enter) => key.enter = enter,
                    None => {
                        invalid += 1;
                        return false;
                    }
                }
            }
            key.time = header.to_monotonic_ns(key.time);
            true
        });

        // The order of the records: claim order (version 1), else time, lane, index.
        let order_key = |position: &u32| {
            let key = &keys[*position as usize];
            if v1 {
                (0, 0, key.index)
            } else {
                (key.time, key.lane, key.index)
            }
        };
        let mut order: Vec<u32> = (0..keys.len() as u32).collect();
        let keep = options.keep_records.unwrap_or(usize::MAX).min(keys.len());
        let omitted = keys.len() - keep;
        if omitted > 0 && omitted < order.len() {
            order.select_nth_unstable_by_key(omitted, order_key);
        }
        let kept = &mut order[omitted..];
        kept.sort_unstable_by_key(order_key);

        let mut open = open_calls(&keys);
        let mut in_flight_omitted = 0;
        if let Some(max) = options.max_in_flight.filter(|&max| open.len() > max) {
            // The oldest calls are the suspects; the rest are counted.
            let key = |p: u32| &keys[p as usize];
            open.sort_unstable_by_key(|&p| (key(p).time, key(p).lane, key(p).index));
            in_flight_omitted = (open.len() - max) as u64;
            open.truncate(max);
            open.sort_unstable_by_key(|&p| (key(p).tid, key(p).lane, key(p).index));
        }

        let mut wanted: Vec<u32> = kept.to_vec();
        wanted.extend_from_slice(&open);
        let mut full = read_records(source, &header, &keys, wanted, &mut torn)?;
        let (same_boot, now) = reader_clock(&header, options);
        let age_now = if same_boot == Some(true) { now } else { None };
        let find = |full: &[(u32, Option<Record>)], position: u32| {
            full.binary_search_by_key(&position, |(p, _)| *p).ok()
        };
        let in_flight = open
            .iter()
            .filter_map(|&p| {
                let at = find(&full, p)?;
                full[at].1.as_ref().map(|r| InFlight::of(r, age_now))
            })
            .collect();
        let records = kept
            .iter()
            .filter_map(|&p| {
                let at = find(&full, p)?;
                full[at].1.take()
            })
            .collect();
        Ok(RingSnapshot {
            header,
            records,
            in_flight,
            torn_slots: torn,
            invalid_slots: invalid,
            same_boot,
            reader_monotonic_ns: now,
            records_omitted: omitted as u64,
            in_flight_omitted,
        })
    }
}

/// The whole records of the keys at positions `wanted`: their slots read again in file order (a chunk
/// at a time) and decoded with the final heads; a slot that changed since copy A is counted torn.
/// Returns (key position, record), sorted by key position.
fn read_records(
    source: &dyn Source,
    header: &RingHeader,
    keys: &[SlotKey],
    mut wanted: Vec<u32>,
    torn: &mut u64,
) -> Result<Vec<(u32, Option<Record>)>> {
    wanted.sort_unstable_by_key(|&p| keys[p as usize].slot);
    wanted.dedup();
    let slot_size = header.slot_size as usize;
    let chunk_slots = (REREAD_CHUNK_BYTES / slot_size).max(1) as u32;
    let lane_slots = u64::from(header.lane_slots()).max(1);
    let mut buffer = Vec::new();
    let mut full = Vec::with_capacity(wanted.len());
    let mut at = 0;
    while at < wanted.len() {
        let first = keys[wanted[at] as usize].slot;
        let run = wanted[at..]
            .iter()
            .take_while(|&&p| keys[p as usize].slot - first < chunk_slots)
            .count();
        let last = keys[wanted[at + run - 1] as usize].slot;
        buffer.resize((last - first + 1) as usize * slot_size, 0);
        source.read_at(
            &mut buffer,
            header.slots_offset() + u64::from(first) * slot_size as u64,
        )?;
        for &position in &wanted[at..at + run] {
            let key = &keys[position as usize];
            let start = (key.slot - first) as usize * slot_size;
            let bytes = &buffer[start..start + slot::USED];
            let place = SlotPlace {
                header,
                lane: u32::from(key.lane),
                position: u64::from(key.slot) % lane_slots,
                head: 0,
            };
            let place = SlotPlace {
                head: place.head_of(u32::from(key.lane)),
                ..place
            };
            match decode_slot(&place, bytes, false) {
                // The same record (a rewritten slot has another index, time or thread).
                SlotState::Valid(record)
                    if record.seq == key.index
                        && record.monotonic_ns == key.time
                        && record.tid == key.tid
                        && record.kind == key.kind() =>
                {
                    full.push((position, Some(record)))
                }
                _ => *torn += 1,
            }
        }
        at += run;
    }
    full.sort_unstable_by_key(|(position, _)| *position);
    Ok(full)
}

impl Linked for SlotKey {
    fn kind(&self) -> RecordKind {
        if self.flags & KEY_ENTER != 0 {
            RecordKind::Enter
        } else {
            RecordKind::Exit
        }
    }
    fn closed(&self) -> bool {
        self.flags & KEY_CLOSED != 0
    }
    fn lane(&self) -> u32 {
        u32::from(self.lane)
    }
    fn seq(&self) -> u64 {
        self.index
    }
    fn tid(&self) -> u32 {
        self.tid
    }
    fn closes(&self) -> Option<(u32, u64)> {
        (self.flags & KEY_ENTER == 0).then_some((u32::from(self.enter_lane), self.enter))
    }
}

impl InFlight {
    fn of(record: &Record, now_monotonic_ns: Option<u64>) -> InFlight {
        InFlight {
            tid: record.tid,
            seq: record.seq,
            lane: record.lane,
            call_id: record.call_id,
            call: record.call.clone(),
            args: record.args,
            label: record.label.clone(),
            entered_monotonic_ns: record.monotonic_ns,
            age_ns: now_monotonic_ns.map(|now| now.saturating_sub(record.monotonic_ns)),
        }
    }
}

/// Calls entered and not exited. An exit closes the enter it names (lane and index), whatever
/// thread it came from; a version-2 enter may also be marked closed in place. An open enter is in
/// flight if it is its thread's latest record in its lane, or if every index of the lane between
/// it and its thread's next record there was read (a nested call). If a later record of the same
/// thread exists and some index in between could not be read (torn, busy, skipped), the exit may
/// be hiding there, so the enter is not reported: a reader copying a live ring must not call a
/// completed call in flight.
pub fn in_flight_calls(records: &[Record], now_monotonic_ns: Option<u64>) -> Vec<InFlight> {
    open_calls(records)
        .into_iter()
        .map(|position| InFlight::of(&records[position as usize], now_monotonic_ns))
        .collect()
}

/// [`in_flight_calls`]: the positions in `records` of the calls in flight, by thread, lane, index.
/// O(n log n) in time and ~17 bytes per record of memory, whatever the records (a lane of 2^20
/// enters of as many threads included).
fn open_calls<R: Linked>(records: &[R]) -> Vec<u32> {
    let n = records.len();
    let place_of = |p: u32| {
        let record = &records[p as usize];
        (record.lane(), record.seq())
    };
    // Every record by (lane, index): each lane's records in claim order.
    let mut by_place: Vec<u32> = (0..n as u32).collect();
    by_place.sort_unstable_by_key(|&p| place_of(p));
    // Enters closed in place, or by an exit naming them (whatever thread or lane it came from).
    let mut closed: Vec<bool> = records.iter().map(|r| r.closed()).collect();
    for record in records {
        let Some(enter) = record.closes() else {
            continue;
        };
        let from = by_place.partition_point(|&p| place_of(p) < enter);
        for &p in by_place[from..]
            .iter()
            .take_while(|&&p| place_of(p) == enter)
        {
            closed[p as usize] = true;
        }
    }
    // Each record's rank within its lane.
    let mut rank = vec![0u32; n];
    let mut lane_start = 0;
    for (at, &p) in by_place.iter().enumerate() {
        if at > 0 && records[by_place[at - 1] as usize].lane() != records[p as usize].lane() {
            lane_start = at;
        }
        rank[p as usize] = (at - lane_start) as u32;
    }
    // Each record's next record of the same thread in the same lane.
    let mut next = vec![u32::MAX; n];
    {
        let mut by_thread = by_place;
        by_thread.sort_by_key(|&p| {
            let record = &records[p as usize];
            (record.lane(), record.tid(), record.seq())
        });
        for pair in by_thread.windows(2) {
            let (a, b) = (&records[pair[0] as usize], &records[pair[1] as usize]);
            if a.lane() == b.lane() && a.tid() == b.tid() {
                next[pair[0] as usize] = pair[1];
            }
        }
    }
    let mut open: Vec<u32> = (0..n as u32)
        .filter(|&p| records[p as usize].kind() == RecordKind::Enter && !closed[p as usize])
        .filter(|&p| match next[p as usize] {
            u32::MAX => true,
            // Nested: in flight only if every index of the lane in between was read.
            later => {
                let (p, later) = (p as usize, later as usize);
                let indices_between = records[later].seq().saturating_sub(records[p].seq());
                rank[later]
                    .checked_sub(rank[p])
                    .is_some_and(|records_between| u64::from(records_between) == indices_between)
            }
        })
        .collect();
    let thread_order = |p: &u32| {
        let record = &records[*p as usize];
        (record.tid(), record.lane(), record.seq())
    };
    open.sort_unstable_by_key(thread_order);
    open.dedup_by_key(|p| thread_order(p));
    open
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// The quadratic definition of the calls in flight (the reader's earlier code), to check the
    /// O(n log n) one against.
    fn naive_open_calls(records: &[Record]) -> Vec<u32> {
        let mut open: HashMap<(u32, u64), usize> = HashMap::new();
        for (position, record) in records.iter().enumerate() {
            if record.kind == RecordKind::Enter && !record.closed {
                open.insert((record.lane, record.seq), position);
            }
        }
        for record in records {
            if let Some(enter) = record.closes() {
                open.remove(&enter);
            }
        }
        let mut out = Vec::new();
        for &position in open.values() {
            let record = &records[position];
            let mut lane: Vec<&Record> = records.iter().filter(|r| r.lane == record.lane).collect();
            lane.sort_by_key(|r| r.seq);
            let rank = lane.iter().position(|r| r.seq == record.seq).unwrap();
            let next = lane[rank + 1..]
                .iter()
                .enumerate()
                .find(|(_, r)| r.tid == record.tid);
            if let Some((skipped, later)) = next {
                if later.seq - record.seq != skipped as u64 + 1 {
                    continue;
                }
            }
            out.push(position as u32);
        }
        out.sort_by_key(|&p| {
            let r = &records[p as usize];
            (r.tid, r.lane, r.seq)
        });
        out
    }

    /// A few lanes of records with gaps (indices not read), nested calls, exits in other lanes.
    fn random_records(seed: u64) -> Vec<Record> {
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let mut records: Vec<Record> = Vec::new();
        for lane in 0..3u32 {
            let mut index = next(5);
            for _ in 0..next(40) {
                index += 1 + u64::from(next(6) == 0);
                let enter = next(2) == 0 || records.is_empty();
                let mut record = Record {
                    seq: index,
                    lane,
                    tid: 1 + next(3) as u32,
                    kind: if enter {
                        RecordKind::Enter
                    } else {
                        RecordKind::Exit
                    },
                    call_id: 0,
                    call: String::new(),
                    args: Args::default(),
                    label: String::new(),
                    result: None,
                    enter_seq: None,
                    enter_lane: None,
                    closed: enter && next(8) == 0,
                    monotonic_ns: index,
                };
                if !enter {
                    let earlier = &records[next(records.len() as u64) as usize];
                    record.enter_seq = Some(earlier.seq);
                    record.enter_lane = Some(earlier.lane);
                }
                records.push(record);
            }
        }
        records
    }

    #[test]
    fn the_calls_in_flight_are_those_of_the_quadratic_definition() {
        for seed in 1..2000 {
            let records = random_records(seed);
            assert_eq!(
                open_calls(&records),
                naive_open_calls(&records),
                "seed {seed}: {records:#?}"
            );
        }
    }

    /// A ring's bytes: `lanes` lanes of `lane_slots` slots, every slot a valid enter of its own thread
    /// that never exits (the most a reader can be made to keep).
    fn ring_of_open_calls(lanes: u32, lane_slots: u32) -> Vec<u8> {
        let slots = lanes * lane_slots;
        let header_size = format::HEADER_SIZE as usize;
        let table = format::LANE_ENTRY_SIZE as usize * lanes as usize;
        let mut bytes =
            vec![0u8; header_size + table + slots as usize * format::SLOT_SIZE as usize];
        let put = |bytes: &mut [u8], at: usize, value: &[u8]| {
            bytes[at..at + value.len()].copy_from_slice(value)
        };
        put(&mut bytes, header::MAGIC, &format::MAGIC);
        put(&mut bytes, header::VERSION, &format::VERSION.to_le_bytes());
        put(
            &mut bytes,
            header::HEADER_SIZE,
            &format::HEADER_SIZE.to_le_bytes(),
        );
        put(
            &mut bytes,
            header::SLOT_SIZE,
            &format::SLOT_SIZE.to_le_bytes(),
        );
        put(&mut bytes, header::SLOT_COUNT, &slots.to_le_bytes());
        put(
            &mut bytes,
            header::CLOCK_ID,
            &format::CLOCK_MONOTONIC_ID.to_le_bytes(),
        );
        put(&mut bytes, header::LANE_COUNT, &lanes.to_le_bytes());
        for lane_index in 0..lanes as usize {
            let entry = header_size + lane_index * format::LANE_ENTRY_SIZE as usize;
            put(
                &mut bytes,
                entry + lane::HEAD,
                &u64::from(lane_slots).to_le_bytes(),
            );
            for p in 0..lane_slots as usize {
                let n = lane_index * lane_slots as usize + p;
                let at = header_size + table + n * format::SLOT_SIZE as usize;
                put(
                    &mut bytes,
                    at + slot::SEQ,
                    &(2 * p as u64 + 2).to_le_bytes(),
                );
                put(
                    &mut bytes,
                    at + slot::MONOTONIC_NS,
                    &(1000 + n as u64).to_le_bytes(),
                );
                put(&mut bytes, at + slot::TID, &(1 + n as u32).to_le_bytes());
                bytes[at + slot::KIND] = format::KIND_ENTER;
                let own_ref = ((lane_index as u64) << format::LANE_INDEX_BITS) | p as u64;
                put(&mut bytes, at + slot::REF_INDEX, &own_ref.to_le_bytes());
            }
        }
        bytes
    }

    /// A hostile ring of 2^18 enters that never exit, in one lane of as many threads (quadratic for the
    /// earlier search of the calls in flight): read in O(n log n), and the snapshot stays small.
    #[test]
    fn a_ring_full_of_open_calls_gives_a_bounded_snapshot() {
        let bytes = ring_of_open_calls(1, 1 << 18);
        let options = ReadOptions {
            compute_age: false,
            keep_records: Some(256),
            max_in_flight: Some(100),
            ..ReadOptions::default()
        };
        let snapshot = parse_ring(&bytes, &options).unwrap();
        assert_eq!(snapshot.records.len(), 256);
        assert_eq!(snapshot.records_omitted, (1 << 18) - 256);
        assert_eq!(snapshot.in_flight.len(), 100);
        assert_eq!(snapshot.in_flight_omitted, (1 << 18) - 100);
        // The oldest calls are the ones listed.
        assert!(snapshot
            .in_flight
            .iter()
            .all(|c| c.entered_monotonic_ns < 1100));
        assert_eq!(snapshot.torn_slots + snapshot.invalid_slots, 0);
    }

    /// What a sink gets, put together, is the copy `read_ring_from_file_with_bytes` returns; the chunks
    /// come in file order, none larger than one chunk, and the records marked are the valid ones.
    #[test]
    fn a_sink_gets_the_copy_a_chunk_at_a_time() {
        #[derive(Default)]
        struct Chunks {
            layout: Option<RingHeader>,
            bytes: Vec<u8>,
            largest: usize,
            marked: usize,
            next_slot: usize,
        }
        impl RingSink for Chunks {
            fn begin(&mut self, layout: &RingHeader) {
                self.bytes = vec![0; layout.needed_len() as usize];
                self.layout = Some(layout.clone());
            }
            fn slots(&mut self, first: usize, bytes: &[u8], records: &[Option<u64>]) {
                let layout = self.layout.as_ref().unwrap();
                assert_eq!(first, self.next_slot);
                self.next_slot += records.len();
                self.largest = self.largest.max(bytes.len());
                self.marked += records.iter().flatten().count();
                let at = layout.slots_offset() as usize + first * layout.slot_size as usize;
                self.bytes[at..at + bytes.len()].copy_from_slice(bytes);
            }
            fn finish(&mut self, header_bytes: &[u8], _header: &RingHeader) {
                self.bytes[..header_bytes.len()].copy_from_slice(header_bytes);
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("full.ring");
        std::fs::write(&path, ring_of_open_calls(4, 1 << 14)).unwrap();
        let file = File::open(&path).unwrap();
        let options = ReadOptions {
            compute_age: false,
            ..ReadOptions::default()
        };
        let mut chunks = Chunks::default();
        let streamed = read_ring_into(&file, &options, &mut chunks).unwrap();
        let (whole, bytes) = read_ring_from_file_with_bytes(&file, &options).unwrap();
        assert_eq!(chunks.bytes, bytes);
        assert_eq!(streamed, whole);
        assert_eq!(chunks.marked, 1 << 16);
        assert!(chunks.largest <= REREAD_CHUNK_BYTES);
        assert_eq!(parse_ring(&bytes, &options).unwrap().records, whole.records);
    }
}
