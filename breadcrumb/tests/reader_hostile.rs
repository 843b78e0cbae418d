//! The reader against hostile and broken input: each rejection is a clear error variant, and no
//! byte sequence makes it panic or allocate without bound. The property tests are the fuzz target
//! (bounded: `PROPTEST_CASES` scales them; the default runs in seconds in CI).

use std::os::unix::fs::symlink;

use breadcrumb::format::{self, header};
use breadcrumb::{parse_ring, read_ring, Args, Call, Error, ReadOptions, Writer};
use proptest::prelude::*;

fn valid_ring(slots: u32, records: u32) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.ring");
    let writer = Writer::create(&path, slots).unwrap();
    for chunk in 0..records {
        let args = Args {
            bytes: 1 << 20,
            chunk,
            chunk_count: records,
            ..Args::default()
        };
        let token = writer.enter(
            Call::CuMemcpyHtoD_v2,
            &args,
            &format!("bulkUpload chunk {chunk}/{records}"),
        );
        if chunk + 1 < records {
            writer.exit(token, 0);
        }
    }
    std::fs::read(&path).unwrap()
}

fn put_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

fn opts() -> ReadOptions {
    ReadOptions::default()
}

#[test]
fn each_header_defect_has_its_own_error() {
    let good = valid_ring(16, 5);
    assert!(parse_ring(&good, &opts()).is_ok());

    let mut bad = good.clone();
    bad[0] = b'X';
    assert!(matches!(parse_ring(&bad, &opts()), Err(Error::BadMagic)));
    let mut bad = good.clone();
    put_u32(&mut bad, header::VERSION, 3);
    assert!(matches!(
        parse_ring(&bad, &opts()),
        Err(Error::UnsupportedVersion)
    ));
    for lanes in [0, 3, 32, 8192] {
        let mut bad = good.clone();
        put_u32(&mut bad, header::LANE_COUNT, lanes);
        assert!(
            matches!(parse_ring(&bad, &opts()), Err(Error::BadLaneCount)),
            "{lanes} lanes in a 16-slot ring"
        );
    }
    let mut bad = good.clone();
    put_u32(&mut bad, header::COUNTER_KIND, 7);
    assert!(matches!(parse_ring(&bad, &opts()), Err(Error::BadCounter)));
    let mut bad = good.clone();
    put_u32(&mut bad, header::COUNTER_KIND, 1);
    bad[header::COUNTER_HZ..header::COUNTER_HZ + 8].fill(0);
    assert!(matches!(parse_ring(&bad, &opts()), Err(Error::BadCounter)));
    let mut bad = good.clone();
    put_u32(&mut bad, header::HEADER_SIZE, 100);
    assert!(matches!(
        parse_ring(&bad, &opts()),
        Err(Error::BadHeaderSize)
    ));
    let mut bad = good.clone();
    put_u32(&mut bad, header::SLOT_SIZE, 1 << 30);
    assert!(matches!(parse_ring(&bad, &opts()), Err(Error::BadSlotSize)));
    let mut bad = good.clone();
    put_u32(&mut bad, header::SLOT_COUNT, u32::MAX);
    assert!(matches!(
        parse_ring(&bad, &opts()),
        Err(Error::BadSlotCount)
    ));
    let mut bad = good.clone();
    put_u32(&mut bad, header::SLOT_COUNT, 1 << 16); // valid count, but the file is too short
    assert!(matches!(
        parse_ring(&bad, &opts()),
        Err(Error::Truncated { .. })
    ));
    let mut bad = good.clone();
    put_u32(&mut bad, header::CLOCK_ID, 0);
    assert!(matches!(parse_ring(&bad, &opts()), Err(Error::BadClock)));
    assert!(matches!(
        parse_ring(&good[..good.len() - 1], &opts()),
        Err(Error::Truncated { .. })
    ));
    assert!(matches!(
        parse_ring(&good[..100], &opts()),
        Err(Error::Truncated { .. })
    ));
    assert!(matches!(
        parse_ring(b"", &opts()),
        Err(Error::Truncated { .. })
    ));
    let small = ReadOptions {
        max_file_bytes: 1024,
        ..opts()
    };
    assert!(matches!(
        parse_ring(&good, &small),
        Err(Error::TooLarge { .. })
    ));

    // Messages say what is wrong, not the value found.
    let mut bad = good.clone();
    put_u32(&mut bad, header::VERSION, 9);
    let shown = parse_ring(&bad, &opts()).unwrap_err().to_string();
    assert!(
        shown.contains("unsupported ring format version") && !shown.contains('9'),
        "{shown}"
    );
}

#[test]
fn a_corrupted_slot_is_skipped_not_believed() {
    let mut ring = valid_ring(16, 5);
    // 16 slots: one lane (the shared one), its entry in the lane table, then the slots.
    let slots = format::HEADER_SIZE as usize + format::LANE_ENTRY_SIZE as usize;
    let base = slots + 2 * format::SLOT_SIZE as usize;
    ring[base + format::slot::KIND] = 9;
    let snapshot = parse_ring(&ring, &opts()).unwrap();
    assert_eq!(snapshot.invalid_slots, 1);
    assert_eq!(snapshot.records.len(), 8);
    // A busy (odd) sequence word is a torn slot.
    let mut ring = valid_ring(16, 5);
    ring[base] |= 1;
    assert_eq!(parse_ring(&ring, &opts()).unwrap().torn_slots, 1);
    // A record whose index does not belong in its slot.
    let mut ring = valid_ring(16, 5);
    ring[base..base + 8].copy_from_slice(&format::final_seq(3).to_le_bytes());
    assert_eq!(parse_ring(&ring, &opts()).unwrap().invalid_slots, 1);
}

#[test]
fn files_are_checked_before_they_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let ring = dir.path().join("r.ring");
    std::fs::write(&ring, valid_ring(16, 3)).unwrap();
    let link = dir.path().join("link.ring");
    symlink(&ring, &link).unwrap();
    assert!(
        read_ring(&link, &opts()).is_ok(),
        "non-strict follows links"
    );
    assert!(matches!(
        read_ring(&link, &ReadOptions::strict(None)),
        Err(Error::Symlink { .. })
    ));

    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    assert!(read_ring(&ring, &ReadOptions::strict(Some(me))).is_ok());
    match read_ring(&ring, &ReadOptions::strict(Some(me + 1))) {
        Err(Error::WrongOwner {
            owner, expected, ..
        }) => assert_eq!((owner, expected), (me, me + 1)),
        other => panic!("expected WrongOwner, got {other:?}"),
    }

    let missing = dir.path().join("missing.ring");
    let err = read_ring(&missing, &opts()).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }));
    assert!(err.to_string().contains("missing.ring"));

    assert!(matches!(
        read_ring(dir.path(), &opts()),
        Err(Error::NotRegular { .. })
    ));
    // A FIFO must not block the reader.
    let fifo = dir.path().join("fifo");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    assert!(matches!(
        read_ring(&fifo, &opts()),
        Err(Error::NotRegular { .. })
    ));

    // A huge (sparse) file is refused before any allocation.
    let huge = dir.path().join("huge.ring");
    let file = std::fs::File::create(&huge).unwrap();
    file.set_len(1 << 40).unwrap();
    assert!(matches!(
        read_ring(&huge, &opts()),
        Err(Error::TooLarge { .. })
    ));
    // Truncated on disk.
    let short = dir.path().join("short.ring");
    std::fs::write(&short, &valid_ring(16, 3)[..600]).unwrap();
    assert!(matches!(
        read_ring(&short, &opts()),
        Err(Error::Truncated { .. })
    ));
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, bit: u8 },
    SetWord { at: usize, value: u64 },
    Truncate { len: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (
            any::<usize>(),
            prop_oneof![
                any::<u64>(),
                Just(u64::MAX),
                Just(0),
                Just(1 << 20),
                Just(1 << 31)
            ]
        )
            .prop_map(|(at, value)| Mutation::SetWord { at, value }),
        any::<usize>().prop_map(|len| Mutation::Truncate { len }),
    ]
}

/// A read that keeps only the newest records (`keep_records`, what the agent asks for) finds the same
/// calls in flight and the same newest records as a full read.
fn check_limited_read_agrees(bytes: &[u8]) {
    let no_age = ReadOptions {
        compute_age: false,
        ..opts()
    };
    let Ok(full) = parse_ring(bytes, &no_age) else {
        return;
    };
    for keep in [0, 1, 5, usize::MAX] {
        let options = ReadOptions {
            keep_records: Some(keep),
            ..no_age.clone()
        };
        let limited = parse_ring(bytes, &options).unwrap();
        assert_eq!(limited.in_flight, full.in_flight, "keep {keep}");
        let start = full.records.len().saturating_sub(keep);
        assert_eq!(limited.records, full.records[start..], "keep {keep}");
        assert_eq!(limited.records_omitted, start as u64);
        assert_eq!(
            (limited.torn_slots, limited.invalid_slots),
            (full.torn_slots, full.invalid_slots)
        );
    }
}

fn check_invariants(bytes: &[u8]) {
    check_limited_read_agrees(bytes);
    if let Ok(snapshot) = parse_ring(bytes, &opts()) {
        let slots = u64::from(snapshot.header.slot_count);
        assert!(
            snapshot.records.len() as u64 + snapshot.torn_slots + snapshot.invalid_slots <= slots
        );
        let mut by_lane = std::collections::BTreeMap::<u32, Vec<u64>>::new();
        for record in &snapshot.records {
            by_lane.entry(record.lane).or_default().push(record.seq);
            assert!(record.lane < snapshot.header.lane_count);
        }
        if snapshot.header.version == 1 {
            assert!(snapshot.records.windows(2).all(|w| w[0].seq < w[1].seq));
        } else {
            assert!(snapshot
                .records
                .windows(2)
                .all(|w| w[0].monotonic_ns <= w[1].monotonic_ns));
            for (lane, mut seqs) in by_lane {
                let count = seqs.len();
                seqs.sort_unstable();
                seqs.dedup();
                assert_eq!(seqs.len(), count, "lane {lane}: one record per index");
            }
        }
        assert!(snapshot.in_flight.len() <= snapshot.records.len());
        assert!(snapshot
            .records
            .iter()
            .all(|r| r.label.len() <= format::LABEL_CAPACITY));
        let _ = serde_json::to_string(&snapshot).unwrap();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        check_invariants(&bytes);
    }

    #[test]
    fn arbitrary_bytes_behind_a_valid_magic_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let mut bytes = format::MAGIC.to_vec();
        bytes.extend_from_slice(&tail);
        check_invariants(&bytes);
    }

    #[test]
    fn mutated_valid_rings_never_panic(
        slots in prop_oneof![Just(1u32), Just(4), Just(16), Just(64)],
        records in 0u32..100,
        mutations in proptest::collection::vec(mutation(), 1..8),
    ) {
        let mut bytes = valid_ring(slots, records);
        for mutation in mutations {
            match mutation {
                Mutation::Flip { at, bit } => {
                    let len = bytes.len();
                    if len > 0 {
                        bytes[at % len] ^= 1 << bit;
                    }
                }
                Mutation::SetWord { at, value } => {
                    if bytes.len() >= 8 {
                        // Favour header fields half the time.
                        let limit = if at % 2 == 0 { 512.min(bytes.len()) } else { bytes.len() };
                        let at = (at % (limit - 7)) & !3;
                        bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
                    }
                }
                Mutation::Truncate { len } => {
                    let keep = len % (bytes.len() + 1);
                    bytes.truncate(keep);
                }
            }
        }
        check_invariants(&bytes);
    }
}

/// Errors name what is wrong, never what the file holds: a `.ring` name may point at any file.
#[test]
fn errors_never_carry_the_bytes_of_the_file() {
    let secret = b"root:*:19000:0:99999:7:::\nhunter2-SECRET\n";
    let mut long_secret = secret.to_vec();
    long_secret.resize(8192, b'S');
    let mut forged = valid_ring(16, 1);
    // Valid magic, then version, header size, slot size, slot count and clock made of secret bytes.
    for (field, value) in [
        (header::VERSION, 0x746f_6f72_u32),
        (header::HEADER_SIZE, 0x3a2a_3a74),
        (header::SLOT_SIZE, 0x3930_3031),
        (header::SLOT_COUNT, 0x3030_3a30),
        (header::CLOCK_ID, 0x3939_3939),
    ] {
        let mut bad = forged.clone();
        put_u32(&mut bad, field, value);
        let err = parse_ring(&bad, &opts()).unwrap_err();
        let shown = format!("{err} {err:?}");
        for number in [
            value.to_string(),
            format!("{value:x}"),
            format!("{value:#x}"),
        ] {
            assert!(!shown.contains(&number), "{shown} contains {number}");
        }
    }
    forged.truncate(600);
    let shown = parse_ring(&forged, &opts()).unwrap_err().to_string();
    assert!(shown.contains("600 bytes"), "{shown}");
    for bytes in [&secret[..], &long_secret[..]] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.ring");
        std::fs::write(&path, bytes).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let errors = [
            parse_ring(bytes, &opts()).unwrap_err(),
            breadcrumb::read_header(&file).unwrap_err(),
            breadcrumb::read_ring_from_file(&file, &opts()).unwrap_err(),
            read_ring(&path, &opts()).unwrap_err(),
        ];
        for err in errors {
            assert!(matches!(err, Error::BadMagic), "{err:?}");
            let shown = format!("{err} {err:?}");
            assert!(
                !shown.contains("root") && !shown.contains("hunter2") && !shown.contains("SSS"),
                "{shown}"
            );
        }
    }
}

#[test]
fn an_opened_file_reads_like_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.ring");
    std::fs::write(&path, valid_ring(16, 3)).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let header = breadcrumb::read_header(&file).unwrap();
    assert_eq!((header.slot_count, header.head), (16, 5));
    let no_age = ReadOptions {
        compute_age: false,
        ..opts()
    };
    let from_file = breadcrumb::read_ring_from_file(&file, &no_age).unwrap();
    assert_eq!(from_file, read_ring(&path, &no_age).unwrap());
    assert_eq!(from_file.records.len(), 5);
    // A directory handed in as a file is refused, not read.
    let not_a_file = std::fs::File::open(dir.path()).unwrap();
    assert!(matches!(
        breadcrumb::read_ring_from_file(&not_a_file, &opts()),
        Err(Error::NotRegular { .. })
    ));
    // A header-only read of a huge sparse file reads 4 KiB, not the file.
    let huge = dir.path().join("huge.ring");
    std::fs::write(&huge, valid_ring(16, 1)).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&huge).unwrap();
    file.set_len(1 << 40).unwrap();
    let file = std::fs::File::open(&huge).unwrap();
    assert_eq!(breadcrumb::read_header(&file).unwrap().slot_count, 16);
}
