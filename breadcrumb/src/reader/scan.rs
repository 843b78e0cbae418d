//! The reader's pass over the slots: a 40-byte key per slot that may hold a record while the ring
//! is copied ([`Scan::add`]), then the checks that need the lanes' heads, the records' order, the
//! calls in flight and the whole records of those kept ([`Scan::finish`]).

use super::in_flight::{open_calls, Linked};
use super::model::{
    InFlight, ReadOptions, Record, RecordKind, RingHeader, RingSnapshot, Source, REREAD_CHUNK_BYTES,
};
use super::slot_decode::{decode_slot, index_below, SlotPlace, SlotState};
use crate::error::Result;
use crate::format::{self, byte_at, le_u32, le_u64, slot};
use crate::identity;

/// What the reader keeps of a slot that may hold a record while it copies the ring: enough to order
/// the records, find the calls in flight, and recognise the record when its slot is read again for the
/// whole of it (a writer never writes a slot twice with one index). 40 bytes.
#[derive(Debug, Clone, Copy)]
pub(super) struct SlotKey {
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
pub(super) const KEY_ENTER: u8 = 1;
/// An enter closed in place (bit 63 of its `seq`).
pub(super) const KEY_CLOSED: u8 = 2;
/// An exit whose enter is in another lane: its index needs that lane's head (copy C).
pub(super) const KEY_OTHER_LANE: u8 = 4;
/// The body failed validation: invalid, unless the lane's head says stale or torn first.
pub(super) const KEY_BODY_INVALID: u8 = 8;

/// What the reader made of the slots so far (see [`read_streamed`]).
pub(super) struct Scan {
    version: u32,
    lane_count: u32,
    lane_slots: u64,
    keys: Vec<SlotKey>,
    torn: u64,
    invalid: u64,
}

impl Scan {
    pub(super) fn new(layout: &RingHeader) -> Scan {
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
    pub(super) fn add(&mut self, slot_number: usize, bytes: &[u8], changed: bool) -> Option<u64> {
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
    pub(super) fn finish(
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
        resolve_with_heads(&mut keys, &header, lane_slots, &mut torn, &mut invalid);

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
pub(super) fn read_records(
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

/// Whether the reader runs on the writer's boot, and the reader's `CLOCK_MONOTONIC` (when
/// `compute_age` is set).
pub(super) fn reader_clock(
    header: &RingHeader,
    options: &ReadOptions,
) -> (Option<bool>, Option<u64>) {
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

/// The checks that need the lanes' heads (copy C): keys written after the header copy are torn,
/// those older than their lane's window dropped (stale), those whose body failed counted invalid;
/// an exit's enter in another lane is found with that lane's head; times become
/// `CLOCK_MONOTONIC` ns.
fn resolve_with_heads(
    keys: &mut Vec<SlotKey>,
    header: &RingHeader,
    lane_slots: u64,
    torn: &mut u64,
    invalid: &mut u64,
) {
    let v1 = header.version == format::VERSION_1;
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
            *torn += 1;
            return false;
        }
        if head - key.index > lane_slots {
            return false;
        }
        if key.flags & KEY_BODY_INVALID != 0 {
            *invalid += 1;
            return false;
        }
        if key.flags & KEY_OTHER_LANE != 0 {
            match index_below(head_of(key.enter_lane), key.enter) {
                Some(enter) => key.enter = enter,
                None => {
                    *invalid += 1;
                    return false;
                }
            }
        }
        key.time = header.to_monotonic_ns(key.time);
        true
    });
}
