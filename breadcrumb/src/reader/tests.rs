//! The reader's unit tests: the calls in flight against their quadratic definition, hostile
//! slot layouts, copies of live rings.

use super::in_flight::{open_calls, Linked};
use super::*;
use crate::format::{lane, Args};
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
    let mut bytes = vec![0u8; header_size + table + slots as usize * format::SLOT_SIZE as usize];
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
