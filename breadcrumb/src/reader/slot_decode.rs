//! Decoding one slot against its place (lane, position, the lane's head): a whole [`Record`], or
//! why the slot holds none.

use super::model::{Record, RecordKind, RingHeader};
use crate::format::{self, byte_at, le_u16, le_u32, le_u64, slot, Args};

/// The outcome of decoding one slot.
pub(super) enum SlotState {
    Empty,
    /// Holds an index older than the live window (its successor is claimed but not yet written).
    Stale,
    Torn,
    Invalid,
    Valid(Record),
}

/// What a slot is checked against: its lane, position and the lane's head.
pub(super) struct SlotPlace<'a> {
    pub(super) header: &'a RingHeader,
    pub(super) lane: u32,
    pub(super) position: u64,
    pub(super) head: u64,
}

impl SlotPlace<'_> {
    pub(super) fn head_of(&self, lane_index: u32) -> u64 {
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
pub(super) fn index_below(limit: u64, low: u64) -> Option<u64> {
    let mut back = limit.wrapping_sub(low) & format::LANE_INDEX_MASK;
    if back == 0 {
        back = format::LANE_INDEX_MASK + 1;
    }
    limit.checked_sub(back)
}

/// `changed`: the slot differed between the reader's two copies (a slot being written).
pub(super) fn decode_slot(place: &SlotPlace<'_>, bytes: &[u8], changed: bool) -> SlotState {
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
pub(super) type Links = (Option<i64>, Option<u64>, Option<u32>);

/// The links of an enter or exit record; `None` when they are inconsistent (an invalid slot).
pub(super) fn links(
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
