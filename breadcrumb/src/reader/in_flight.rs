//! The calls in flight: enters no exit closed, found in O(n log n) over records or the reader's
//! slot keys alike ([`Linked`]).

use super::model::{InFlight, Record, RecordKind};

/// What finding the calls in flight looks at in a record.
pub(super) trait Linked {
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
pub(super) fn open_calls<R: Linked>(records: &[R]) -> Vec<u32> {
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
