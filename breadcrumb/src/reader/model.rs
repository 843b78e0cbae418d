//! The reader's model: what a read is asked for ([`ReadOptions`]) and what it finds (the header,
//! the records, the calls in flight, the snapshot), and where it copies a ring from ([`Source`]).

use serde::{Deserialize, Serialize};

use crate::counter;
use crate::error::Result;
use crate::format::{self, Args};

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
    /// Larger files are rejected with [`Error::TooLarge`](crate::error::Error::TooLarge).
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

/// Where the reader copies a ring from.
pub(super) trait Source {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()>;
    /// A live file: a second copy of a slot may differ from the first (a slot being written).
    fn live(&self) -> bool;
}

impl InFlight {
    pub(super) fn of(record: &Record, now_monotonic_ns: Option<u64>) -> InFlight {
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
