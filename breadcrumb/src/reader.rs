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
//!
//! Rooms (this file holds the I/O and the copy protocol, `read_streamed`):
//! - `model`: [`ReadOptions`] and what a read finds ([`RingHeader`], [`Record`], [`InFlight`],
//!   [`RingSnapshot`]), and the `Source` a ring is copied from;
//! - `header_parse`: the header and lane table validated (pure);
//! - `slot_decode`: one slot decoded against its place, or why it holds no record;
//! - `scan`: the pass over the slots (a key per slot, then the checks that need the heads);
//! - `in_flight`: the calls entered and not exited ([`in_flight_calls`]).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::{self, header, slot};
use crate::identity;

pub(crate) mod header_parse;
mod in_flight;
mod model;
mod scan;
mod slot_decode;

pub use in_flight::in_flight_calls;
pub use model::{
    InFlight, ReadOptions, Record, RecordKind, RingHeader, RingSnapshot, DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_IN_FLIGHT, REREAD_CHUNK_BYTES,
};

use header_parse::parse_header_with_len;
use model::Source;
use scan::Scan;

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

#[cfg(test)]
mod tests;
