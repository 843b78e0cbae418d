//! docs/breadcrumb-ring.md is enough to interoperate: a writer written here from the document's
//! numbers alone (no crate constants) produces a ring the crate reads, and a crate-written ring
//! decodes with the document's offsets alone.

use breadcrumb::{parse_ring, Args, Call, ReadOptions, RecordKind, Writer};

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}

/// A foreign writer, straight from the spec's tables.
struct SpecWriter {
    file: Vec<u8>,
    slot_count: u64,
}

impl SpecWriter {
    fn new(slot_count: u32, pid: u32) -> SpecWriter {
        let mut file = vec![0u8; 512 + 128 * slot_count as usize];
        put(&mut file, 0, b"WEDGERNG");
        put(&mut file, 8, &1u32.to_le_bytes());
        put(&mut file, 12, &512u32.to_le_bytes());
        put(&mut file, 16, &128u32.to_le_bytes());
        put(&mut file, 20, &slot_count.to_le_bytes());
        put(&mut file, 24, &pid.to_le_bytes());
        put(&mut file, 28, &1u32.to_le_bytes()); // CLOCK_MONOTONIC
        put(&mut file, 80, &100u32.to_le_bytes());
        let status = b"written by the spec test";
        put(&mut file, 256, &(status.len() as u32).to_le_bytes());
        put(&mut file, 264, status);
        SpecWriter {
            file,
            slot_count: u64::from(slot_count),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        tid: u32,
        kind: u8,
        call: u16,
        args: [u64; 4],
        small: [u32; 4],
        reference: Option<u64>,
        result: i64,
        label: &str,
        time: u64,
    ) -> u64 {
        let g = u64::from_le_bytes(self.file[128..136].try_into().unwrap());
        put(&mut self.file, 128, &(g + 1).to_le_bytes());
        let o = 512 + 128 * (g % self.slot_count) as usize;
        put(&mut self.file, o, &(2 * g + 2).to_le_bytes());
        put(&mut self.file, o + 8, &time.to_le_bytes());
        put(&mut self.file, o + 16, &tid.to_le_bytes());
        self.file[o + 20] = kind;
        self.file[o + 21] = label.len() as u8;
        put(&mut self.file, o + 22, &call.to_le_bytes());
        for (i, v) in args.iter().enumerate() {
            put(&mut self.file, o + 24 + 8 * i, &v.to_le_bytes());
        }
        for (i, v) in small.iter().enumerate() {
            put(&mut self.file, o + 56 + 4 * i, &v.to_le_bytes());
        }
        put(
            &mut self.file,
            o + 72,
            &reference.unwrap_or(g).to_le_bytes(),
        );
        put(&mut self.file, o + 80, &result.to_le_bytes());
        put(&mut self.file, o + 88, &[0u8; 40]);
        put(&mut self.file, o + 88, label.as_bytes());
        g
    }
}

#[test]
fn a_writer_built_from_the_spec_is_read_by_the_crate() {
    let mut w = SpecWriter::new(8, 777);
    // 12 calls wrap the 8-slot ring; the last one (cuMemcpyHtoD_v2 = 17) never exits.
    for i in 0..11u64 {
        let g = w.record(
            4242,
            1,
            20,
            [4 << 20, 0x7f00 + i, 0x5500, 9],
            [i as u32, 53, 0, 0],
            None,
            0,
            "bulkUpload",
            1000 + i,
        );
        w.record(4242, 2, 20, [0; 4], [0; 4], Some(g), 0, "", 1000 + i);
    }
    w.record(
        4243,
        1,
        17,
        [1 << 20, 0xdead, 0xbeef, 0],
        [12, 53, 40, 3],
        None,
        0,
        "bulkUpload chunk 12/53",
        5000,
    );

    let snapshot = parse_ring(
        &w.file,
        &ReadOptions {
            compute_age: false,
            ..ReadOptions::default()
        },
    )
    .unwrap();
    assert_eq!(snapshot.header.writer_pid, 777);
    assert_eq!(
        snapshot.header.status.as_deref(),
        Some("written by the spec test")
    );
    assert_eq!(snapshot.records.len(), 8);
    assert_eq!(snapshot.records.first().unwrap().seq, 23 - 8);
    assert_eq!(snapshot.torn_slots + snapshot.invalid_slots, 0);
    assert_eq!(snapshot.in_flight.len(), 1);
    let stuck = &snapshot.in_flight[0];
    assert_eq!((stuck.tid, stuck.call.as_str()), (4243, "cuMemcpyHtoD_v2"));
    assert_eq!(
        stuck.args,
        Args {
            bytes: 1 << 20,
            ptr: 0xdead,
            ptr2: 0xbeef,
            stream: 0,
            chunk: 12,
            chunk_count: 53,
            tensor_first: 40,
            tensor_count: 3
        }
    );
    assert_eq!(stuck.label, "bulkUpload chunk 12/53");
    assert_eq!(stuck.age_ns, None);
}

#[test]
fn a_crate_written_ring_decodes_with_the_spec_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.ring");
    let writer = Writer::create(&path, 64).unwrap();
    let args = Args {
        bytes: 4 << 20,
        chunk: 12,
        chunk_count: 53,
        ..Args::default()
    };
    let before_ns = breadcrumb::identity::monotonic_ns();
    let token = writer.enter(Call::CuMemcpyHtoD_v2, &args, "bulkUpload chunk 12/53");
    writer.exit(token, 0);
    let after_ns = breadcrumb::identity::monotonic_ns();
    let b = std::fs::read(&path).unwrap();
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    assert_eq!(&b[0..8], b"WEDGERNG");
    assert_eq!(
        (u32_at(8), u32_at(12), u32_at(16), u32_at(20)),
        (2, 512, 128, 64)
    );
    assert_eq!(u32_at(24), std::process::id());
    assert_eq!(u32_at(28), 1);
    // 64 slots: 4 lanes of 16; the lane table (64 bytes a lane) at 512, the slots after it.
    let lanes = u32_at(88) as usize;
    assert_eq!(lanes, 4);
    let slots_at = 512 + 64 * lanes;
    assert_eq!(b.len(), slots_at + 64 * 128);
    assert_eq!(u64_at(512), 0, "lane 0 is never owned");
    let tid = unsafe_free_gettid();
    let lane = (1..lanes)
        .find(|&l| u64_at(512 + 64 * l) == u64::from(tid))
        .expect("this thread owns a lane");
    assert_eq!(u64_at(512 + 64 * lane + 8), 2, "the lane's head");
    assert_eq!(u64_at(128), 0, "version 2 has no global head");
    // Slot 0 of the lane: the enter.
    let o = slots_at + lane * 16 * 128;
    assert_eq!(u64_at(o), 2, "seq = 2i+2 with i = 0");
    assert_eq!(u32_at(o + 16), tid);
    assert_eq!(
        (
            b[o + 20],
            b[o + 21],
            u16::from_le_bytes([b[o + 22], b[o + 23]])
        ),
        (1, 22, 17)
    );
    assert_eq!(u64_at(o + 24), 4 << 20);
    assert_eq!((u32_at(o + 56), u32_at(o + 60)), (12, 53));
    assert_eq!(
        u64_at(o + 72),
        (lane as u64) << 32,
        "enter: (lane << 32) | i"
    );
    assert_eq!(&b[o + 88..o + 88 + 22], b"bulkUpload chunk 12/53");
    // The time, converted as the document says.
    let time = u64_at(o + 8);
    let entered_ns = match u32_at(92) {
        0 => time,
        _ => {
            let (hz, c0, m0) = (u64_at(96), u64_at(104), u64_at(72));
            let delta = i128::from(time) - i128::from(c0);
            (i128::from(m0) + delta * 1_000_000_000 / i128::from(hz)) as u64
        }
    };
    assert!(
        (before_ns.saturating_sub(1_000_000)..=after_ns + 1_000_000).contains(&entered_ns),
        "{before_ns} <= {entered_ns} <= {after_ns} (within 1 ms)"
    );
    // Slot 1: the exit.
    let o = o + 128;
    assert_eq!(u64_at(o), 4);
    assert_eq!(
        (
            b[o + 20],
            b[o + 21],
            u16::from_le_bytes([b[o + 22], b[o + 23]])
        ),
        (2, 0, 17)
    );
    assert_eq!(
        u64_at(o + 72),
        (lane as u64) << 32,
        "exit references its enter"
    );
    assert_eq!(
        u64_at(o + 72),
        token.index().unwrap(),
        "the token's low 48 bits"
    );
    let parsed = parse_ring(&b, &ReadOptions::default()).unwrap();
    assert_eq!(parsed.records[1].kind, RecordKind::Exit);
    assert_eq!(parsed.records[0].monotonic_ns, entered_ns);
}

fn unsafe_free_gettid() -> u32 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|link| link.file_name()?.to_str()?.parse().ok())
        .expect("/proc/thread-self names this thread")
}

/// A ring written by the version-1 writer (`tests/data/ring-v1.bin`, 16 slots, wrapped, a span
/// with a nested call left open, a status) still reads, with the same answers as when it was made.
#[test]
fn a_version_1_ring_still_reads() {
    let bytes = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/ring-v1.bin"
    ))
    .unwrap();
    let snapshot = parse_ring(
        &bytes,
        &ReadOptions {
            compute_age: false,
            ..ReadOptions::default()
        },
    )
    .unwrap();
    assert_eq!(snapshot.header.version, 1);
    assert_eq!(snapshot.header.lane_count, 1);
    assert_eq!(snapshot.header.head, 22);
    assert_eq!((snapshot.torn_slots, snapshot.invalid_slots), (0, 0));
    assert_eq!(snapshot.records.len(), 16);
    let seqs: Vec<u64> = snapshot.records.iter().map(|r| r.seq).collect();
    assert_eq!(seqs, (6..22).collect::<Vec<_>>());
    assert!(snapshot.records.iter().all(|r| r.lane == 0));
    assert_eq!(snapshot.records[0].label, "chunk 3/10");
    assert_eq!(snapshot.records[1].enter_seq, Some(6));
    assert_eq!(snapshot.records[0].monotonic_ns, 465_155_929_693);
    let in_flight: Vec<(u64, &str, &str)> = snapshot
        .in_flight
        .iter()
        .map(|f| (f.seq, f.call.as_str(), f.label.as_str()))
        .collect();
    assert_eq!(
        in_flight,
        [
            (20, "custom", "bulkUpload"),
            (21, "cuStreamSynchronize", "sync é")
        ]
    );
    assert_eq!(snapshot.header.status.as_deref(), Some("v1 fixture status"));
    assert_eq!(snapshot.header.status_code, -3);
}

/// A version-2 writer from the document's tables alone: two lanes of 8 slots, TSC-like counter
/// times at 1 GHz, a wrapped lane, a call closed in place by an exit in the other lane.
#[test]
fn a_version_2_writer_built_from_the_spec_is_read_by_the_crate() {
    const LANES: usize = 2;
    const PER_LANE: usize = 8;
    let slots_at = 512 + 64 * LANES;
    let mut file = vec![0u8; slots_at + 128 * LANES * PER_LANE];
    put(&mut file, 0, b"WEDGERNG");
    put(&mut file, 8, &2u32.to_le_bytes());
    put(&mut file, 12, &512u32.to_le_bytes());
    put(&mut file, 16, &128u32.to_le_bytes());
    put(&mut file, 20, &((LANES * PER_LANE) as u32).to_le_bytes());
    put(&mut file, 24, &778u32.to_le_bytes());
    put(&mut file, 28, &1u32.to_le_bytes());
    put(&mut file, 72, &5_000_000u64.to_le_bytes()); // created_monotonic_ns
    put(&mut file, 88, &(LANES as u32).to_le_bytes());
    put(&mut file, 92, &1u32.to_le_bytes()); // x86_64 TSC
    put(&mut file, 96, &1_000_000_000u64.to_le_bytes()); // 1 GHz: a tick is a ns
    put(&mut file, 104, &1_000u64.to_le_bytes()); // created_counter
    put(&mut file, 512 + 64, &4242u64.to_le_bytes()); // lane 1 owner
    let record = |file: &mut Vec<u8>,
                  lane: usize,
                  tid: u32,
                  kind: u8,
                  call: u16,
                  reference: Option<u64>,
                  label: &str,
                  time: u64|
     -> u64 {
        let head_at = 512 + 64 * lane + 8;
        let i = u64::from_le_bytes(file[head_at..head_at + 8].try_into().unwrap());
        put(file, head_at, &(i + 1).to_le_bytes());
        let o = slots_at + (lane * PER_LANE + (i as usize % PER_LANE)) * 128;
        put(file, o + 8, &time.to_le_bytes());
        put(file, o + 16, &tid.to_le_bytes());
        file[o + 20] = kind;
        file[o + 21] = label.len() as u8;
        put(file, o + 22, &call.to_le_bytes());
        put(file, o + 24, &[0u8; 104]);
        if kind == 1 {
            put(file, o + 24, &(1u64 << 20).to_le_bytes());
        }
        let own = ((lane as u64) << 32) | (i & 0xFFFF_FFFF);
        put(file, o + 72, &reference.unwrap_or(own).to_le_bytes());
        put(file, o + 88, label.as_bytes());
        put(file, o, &(2 * i + 2).to_le_bytes());
        own
    };
    // Lane 1, thread 4242: 6 calls (12 records) wrap its 8 slots; a 7th never exits.
    for n in 0..6u64 {
        let r = record(&mut file, 1, 4242, 1, 20, None, "chunk", 2_000 + 10 * n);
        record(&mut file, 1, 4242, 2, 20, Some(r), "", 2_005 + 10 * n);
    }
    let handed_over = record(&mut file, 1, 4242, 1, 28, None, "handed over", 3_000);
    record(&mut file, 1, 4242, 1, 4, None, "stuck", 3_100);
    // Lane 0 (shared), thread 4243: the exit of "handed over", then the lane-1 enter closed in
    // place (bit 63 of its seq).
    record(&mut file, 0, 4243, 2, 28, Some(handed_over), "", 3_050);
    let enter_slot = slots_at + (PER_LANE + 12 % PER_LANE) * 128;
    let seq = u64::from_le_bytes(file[enter_slot..enter_slot + 8].try_into().unwrap());
    put(&mut file, enter_slot, &(seq | 1 << 63).to_le_bytes());

    let snapshot = parse_ring(
        &file,
        &ReadOptions {
            compute_age: false,
            ..ReadOptions::default()
        },
    )
    .unwrap();
    assert_eq!((snapshot.torn_slots, snapshot.invalid_slots), (0, 0));
    assert_eq!(snapshot.header.lane_count, 2);
    assert_eq!(snapshot.header.head, 14 + 1);
    assert_eq!(snapshot.records.len(), 8 + 1, "lane 1 keeps its last 8");
    let lane1: Vec<u64> = snapshot
        .records
        .iter()
        .filter(|r| r.lane == 1)
        .map(|r| r.seq)
        .collect();
    assert_eq!(lane1, (6..14).collect::<Vec<_>>());
    // Times: 5 ms + (ticks - 1000) ns; sorted by time across lanes.
    let first = &snapshot.records[0];
    assert_eq!(first.monotonic_ns, 5_000_000 + 2_030 - 1_000);
    let exit = snapshot.records.iter().find(|r| r.lane == 0).unwrap();
    assert_eq!((exit.enter_lane, exit.enter_seq), (Some(1), Some(12)));
    assert_eq!(exit.monotonic_ns, 5_000_000 + 2_050);
    let in_flight: Vec<(&str, u32, u64)> = snapshot
        .in_flight
        .iter()
        .map(|f| (f.label.as_str(), f.lane, f.seq))
        .collect();
    assert_eq!(in_flight, [("stuck", 1, 13)]);
    // Without the exit record (its lane wrapped), the closed flag alone still closes the call.
    let mut without_exit = file.clone();
    without_exit[slots_at..slots_at + 128].fill(0);
    let snapshot = parse_ring(&without_exit, &ReadOptions::default()).unwrap();
    let labels: Vec<&str> = snapshot
        .in_flight
        .iter()
        .map(|f| f.label.as_str())
        .collect();
    assert_eq!(labels, ["stuck"]);
}
