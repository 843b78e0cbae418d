//! The writer's unit tests (lanes, tokens, label words, option checks).

use super::*;

#[test]
fn label_words_are_the_zero_padded_bytes() {
    let text: Vec<u8> = (1..=40u8).collect();
    for len in 0..=40 {
        let label = &text[..len];
        for k in 0..format::LABEL_CAPACITY / 8 {
            let mut expected = [0u8; 8];
            for (i, byte) in expected.iter_mut().enumerate() {
                *byte = label.get(k * 8 + i).copied().unwrap_or(0);
            }
            assert_eq!(
                label_word(label, k),
                u64::from_le_bytes(expected),
                "label of {len} bytes, word {k}"
            );
        }
    }
}

#[test]
fn token_packs_lane_index_and_call() {
    let token = Token::new(5, (7u64 << 32) | 12345, Call::CuMemcpyHtoD_v2.id());
    assert_eq!(
        token.index(),
        Some((5 << 32) | 12345),
        "index keeps its low 32 bits"
    );
    assert_eq!(token.lane(), 5);
    assert_eq!(token.call_id(), Call::CuMemcpyHtoD_v2.id());
    assert_eq!(Token::from_raw(token.to_raw()), token);
    assert_eq!(Token::NONE.index(), None);
}

#[test]
fn rejects_bad_slot_and_lane_counts() {
    let dir = tempfile::tempdir().unwrap();
    for bad in [0, 3, 1000, format::MAX_SLOT_COUNT + 1] {
        let err = Writer::create(dir.path().join("r.ring"), bad).unwrap_err();
        assert!(matches!(err, Error::BadSlotCount), "{bad}: {err}");
    }
    // Just over the largest ring: refused, and the message says what the limit is.
    let err = Writer::create(dir.path().join("r.ring"), format::MAX_SLOT_COUNT * 2).unwrap_err();
    assert!(matches!(err, Error::RingTooLarge { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("2097152 slots")
            && text.contains("at most 1048576 slots")
            && text.contains(&format::MAX_RING_BYTES.to_string()),
        "{text}"
    );
    assert!(!dir.path().join("r.ring").exists());
    for (slots, lanes) in [(64, 3), (64, 128), (1 << 20, 8192)] {
        let options = WriterOptions {
            slot_count: slots,
            lane_count: lanes,
            ..WriterOptions::default()
        };
        let err = options.lanes().unwrap_err();
        assert!(matches!(err, Error::BadLaneCount), "{slots}/{lanes}: {err}");
    }
}

#[test]
fn automatic_lane_counts() {
    let lanes = |slot_count| {
        WriterOptions {
            slot_count,
            ..WriterOptions::default()
        }
        .lanes()
        .unwrap()
    };
    assert_eq!(lanes(4096), 64);
    assert_eq!(lanes(64), 4);
    assert_eq!(lanes(16), 1);
    assert_eq!(lanes(4), 1);
    assert_eq!(lanes(1 << 20), 64);
}

#[test]
fn each_thread_gets_its_own_lane_and_gives_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Writer::create(dir.path().join("r.ring"), 64).unwrap();
    let owners = |w: &Writer| {
        (0..w.lane_count)
            .map(|l| w.lane_word(l, lane::OWNER).load(Ordering::Relaxed))
            .collect::<Vec<_>>()
    };
    let main_token = writer.enter(Call::CuInit, &Args::default(), "");
    assert_ne!(
        main_token.lane(),
        0,
        "the first thread gets a lane of its own"
    );
    let (other_lane, held) = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let token = writer.enter(Call::CuInit, &Args::default(), "");
                (token.lane(), owners(&writer)[token.lane() as usize])
            })
            .join()
            .unwrap()
    });
    assert_ne!(other_lane, 0);
    assert_ne!(other_lane, main_token.lane());
    assert_ne!(held, 0, "owned while the thread ran");
    assert_eq!(
        owners(&writer)[other_lane as usize],
        0,
        "released when the thread exited"
    );
    assert_eq!(owners(&writer)[0], 0, "lane 0 is never owned");
}

#[test]
fn threads_beyond_the_lanes_share_lane_zero() {
    let dir = tempfile::tempdir().unwrap();
    // 4 lanes: 3 of their own, then the shared one.
    let writer = Writer::create(dir.path().join("r.ring"), 64).unwrap();
    assert_eq!(writer.lane_count(), 4);
    let barrier = std::sync::Barrier::new(5);
    let lanes: Vec<u32> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..5)
            .map(|_| {
                scope.spawn(|| {
                    let token = writer.enter(Call::CuInit, &Args::default(), "");
                    barrier.wait();
                    token.lane()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut own: Vec<u32> = lanes.iter().copied().filter(|&l| l != 0).collect();
    own.sort_unstable();
    assert_eq!(own, vec![1, 2, 3], "{lanes:?}");
    assert_eq!(lanes.iter().filter(|&&l| l == 0).count(), 2, "{lanes:?}");
}

#[test]
fn tid_is_cached_per_thread() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Writer::create(dir.path().join("r.ring"), 64).unwrap();
    writer.enter(Call::CuInit, &Args::default(), "");
    let main = LANE_CACHE.with(Cell::get).tid;
    assert_eq!(main, gettid());
    let other = std::thread::spawn(move || {
        writer.enter(Call::CuInit, &Args::default(), "");
        LANE_CACHE.with(Cell::get).tid
    })
    .join()
    .unwrap();
    assert_ne!(main, other);
}
