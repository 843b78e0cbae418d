//! Validating and decoding a ring's header and lane table (pure: bytes in, [`RingHeader`] out).

use super::model::RingHeader;
use crate::counter;
use crate::error::{Error, Result};
use crate::format::{self, header, lane, le_u32, le_u64};
use crate::identity;

/// Validates and decodes the header in `bytes` of a file `file_len` bytes long (the lane table
/// too, when `bytes` hold it).
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
        version_2_fields(bytes, slot_count)?
    };
    let (calib_counter, calib_monotonic_ns) = calibration_pair(bytes, counter_kind);
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
        read_lane_table(bytes, &mut header);
    }
    Ok(header)
}

/// A version-2 header's lane count and counter (kind, frequency, value at creation), validated.
fn version_2_fields(bytes: &[u8], slot_count: u32) -> Result<(u32, u32, u64, u64)> {
    let lanes = le_u32(bytes, header::LANE_COUNT);
    if !lanes.is_power_of_two() || lanes > format::MAX_LANE_COUNT || lanes > slot_count {
        return Err(Error::BadLaneCount);
    }
    let kind = le_u32(bytes, header::COUNTER_KIND);
    let hz = le_u64(bytes, header::COUNTER_HZ);
    if counter::counter_name(kind).is_none() || (kind != counter::COUNTER_NONE && hz == 0) {
        return Err(Error::BadCounter);
    }
    Ok((lanes, kind, hz, le_u64(bytes, header::CREATED_COUNTER)))
}

/// The header's refreshed (counter, `CLOCK_MONOTONIC` ns) pair, or zeros when there is none or a
/// writer was rewriting it (odd sequence word).
fn calibration_pair(bytes: &[u8], counter_kind: u32) -> (u64, u64) {
    let seq = le_u64(bytes, header::CALIB_SEQ);
    if counter_kind != counter::COUNTER_NONE && seq != 0 && seq & 1 == 0 {
        (
            le_u64(bytes, header::CALIB_COUNTER),
            le_u64(bytes, header::CALIB_MONOTONIC_NS),
        )
    } else {
        (0, 0)
    }
}

/// The lanes' heads (and their sum as `head`), when `bytes` hold the lane table (a header-only
/// read does not).
fn read_lane_table(bytes: &[u8], header: &mut RingHeader) {
    let table = header.header_size as usize;
    let entry = format::LANE_ENTRY_SIZE as usize;
    if let Some(lanes) = bytes.get(table..table + entry * header.lane_count as usize) {
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
