//! A ring's copy beside its incident, written while the ring is read ([`breadcrumb::RingSink`]) and within a
//! byte budget, so that no copy is ever held in memory and no tenant's ring fills the store.
//!
//! - The ring fits in the budget: a byte-for-byte copy (slots as first copied, header and lane table as last
//!   read, as the reader protocol has it), sparse where the ring's chunks are all zero.
//! - It does not: a **valid smaller ring of the same format** (docs/breadcrumb-ring.md): the same header and
//!   lane table (so the same lanes, heads, writer identity and clock calibration), 128-byte slots, and in each
//!   lane the newest records that fit — a power of two per lane, as the format wants. A record keeps its index
//!   and sits at `index mod lane_slots`, so `wedge-capture ring dump` reads the copy like any ring and finds the
//!   same calls in flight, except those older than the lane's kept window (the incident has every one of them).
//!   [`RingCopy::outcome`] says what was kept ("newest N of M records").
//! - Not even the header, lane table and one slot per lane fit: no copy, and the outcome says why.
//!
//! Memory: one `u64` per slot of a cut copy (≤ budget / 16 bytes).

use std::fs::File;
use std::os::unix::fs::FileExt;

use breadcrumb::format::{self, header};
use breadcrumb::{RingHeader, RingSink, RingSnapshot};
use reports::store::pending::PendingFile;

/// A ring copy being written (see the module docs).
#[derive(Debug)]
pub struct RingCopy {
    pending: PendingFile,
    budget: u64,
    plan: Plan,
    layout: Option<Layout>,
    /// The first write error: the copy is abandoned.
    error: Option<String>,
    /// Valid records in the copy (a cut copy; counted once the heads are known).
    kept_records: u64,
}

/// What the ring's layout says, for placing its slots.
#[derive(Debug, Clone, Copy)]
struct Layout {
    slots_offset: u64,
    slot_size: u64,
    lane_slots: u64,
    lane_count: u64,
    needed_len: u64,
}

#[derive(Debug)]
enum Plan {
    /// Not begun (the read failed before its layout was known).
    Unknown,
    Whole,
    /// Each lane keeps its newest `lane_slots` indices, in 128-byte slots; `kept[slot]` is the index of the
    /// record copied there plus one (0: none).
    Cut {
        lane_slots: u64,
        kept: Vec<u64>,
    },
    /// Nothing fits: `smallest` is the size of the smallest valid copy.
    Nothing {
        smallest: u64,
    },
}

/// What a copy holds, once the read is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOutcome {
    /// Bytes of the copy (0: none is written).
    pub bytes: u64,
    /// What the copy leaves out of the ring, when it is not the whole ring (for the incident).
    pub note: Option<String>,
}

impl RingCopy {
    /// A copy into `pending` of at most `budget` bytes.
    pub fn new(pending: PendingFile, budget: u64) -> RingCopy {
        RingCopy {
            pending,
            budget,
            plan: Plan::Unknown,
            layout: None,
            error: None,
            kept_records: 0,
        }
    }

    fn file(&self) -> &File {
        self.pending.file()
    }

    fn write_at(&mut self, bytes: &[u8], offset: u64) {
        if self.error.is_none() {
            if let Err(err) = self.pending.file().write_all_at(bytes, offset) {
                self.error = Some(err.to_string());
            }
        }
    }

    /// What the copy holds, given the snapshot of the same read (its records and calls in flight).
    pub fn outcome(&self, snapshot: &RingSnapshot) -> CopyOutcome {
        let budget = reports::text::bytes(self.budget);
        if let Some(err) = &self.error {
            return CopyOutcome {
                bytes: 0,
                note: Some(format!("ring copy not written: {err}")),
            };
        }
        let total = snapshot.records.len() as u64 + snapshot.records_omitted;
        match &self.plan {
            Plan::Unknown => CopyOutcome {
                bytes: 0,
                note: Some("ring copy not written: the ring could not be read".to_string()),
            },
            Plan::Whole => CopyOutcome {
                bytes: self.layout.map_or(0, |l| l.needed_len),
                note: None,
            },
            Plan::Nothing { smallest } => CopyOutcome {
                bytes: 0,
                note: Some(format!(
                    "ring copy not written: its header and lane table with one slot per lane take {}, more \
                     than the {budget} left of the incident's ring-copy budget",
                    reports::text::bytes(*smallest)
                )),
            },
            Plan::Cut { lane_slots, kept } => {
                let Some(layout) = self.layout else {
                    return CopyOutcome {
                        bytes: 0,
                        note: None,
                    };
                };
                let outside = snapshot
                    .in_flight
                    .iter()
                    .filter(|call| {
                        let slot = u64::from(call.lane) * lane_slots + call.seq % lane_slots;
                        kept.get(slot as usize) != Some(&(call.seq + 1))
                    })
                    .count();
                let size = format!(
                    "{} of the ring's {}), byte budget {budget} of the incident's {} for ring copies",
                    reports::text::bytes(self.copy_len()),
                    reports::text::bytes(layout.needed_len),
                    reports::text::bytes(crate::defaults::RING_COPY_BUDGET),
                );
                let mut note = if total == 0 {
                    format!("the ring holds no record: copied as an empty ring of one slot per lane ({size}")
                } else {
                    format!(
                        "newest {} of {total} records kept (each lane's newest {lane_slots} of {} slots, in \
                         128-byte slots: {size}",
                        self.kept_records, layout.lane_slots,
                    )
                };
                if outside > 0 {
                    note.push_str(&format!(
                        "; {outside} of the {} calls in flight listed in incident.json are older than the copy \
                         keeps",
                        snapshot.in_flight.len()
                    ));
                }
                CopyOutcome {
                    bytes: self.copy_len(),
                    note: Some(note),
                }
            }
        }
    }

    /// The copy's length as planned.
    fn copy_len(&self) -> u64 {
        match (&self.plan, self.layout) {
            (Plan::Whole, Some(layout)) => layout.needed_len,
            (Plan::Cut { kept, .. }, Some(layout)) => {
                layout.slots_offset + kept.len() as u64 * u64::from(format::SLOT_SIZE)
            }
            _ => 0,
        }
    }

    /// A cut copy with nothing in it becomes the smallest valid ring: one (empty) slot per lane.
    fn shrink_to_one_slot_per_lane(&mut self) {
        let Some(layout) = self.layout else {
            return;
        };
        self.plan = Plan::Cut {
            lane_slots: 1,
            kept: vec![0; layout.lane_count as usize],
        };
        if let Err(err) = self.file().set_len(self.copy_len()) {
            self.error = Some(err.to_string());
        }
    }

    /// Whether there is something to commit.
    pub fn written(&self) -> bool {
        self.error.is_none() && matches!(self.plan, Plan::Whole | Plan::Cut { .. })
    }

    /// Make the copy durable under `name` in its incident.
    pub fn commit(self, name: &str) -> reports::Result<()> {
        self.pending.commit(name)
    }
}

impl RingSink for RingCopy {
    fn begin(&mut self, layout: &RingHeader) {
        let layout = Layout {
            slots_offset: layout.slots_offset(),
            slot_size: u64::from(layout.slot_size),
            lane_slots: u64::from(layout.lane_slots()).max(1),
            lane_count: u64::from(layout.lane_count).max(1),
            needed_len: layout.needed_len(),
        };
        self.layout = Some(layout);
        let slot = u64::from(format::SLOT_SIZE);
        self.plan = if layout.needed_len <= self.budget {
            Plan::Whole
        } else {
            // The largest power of two per lane (at most the ring's own) whose copy fits.
            let room = self.budget.saturating_sub(layout.slots_offset) / (slot * layout.lane_count);
            if room == 0 {
                Plan::Nothing {
                    smallest: layout.slots_offset + slot * layout.lane_count,
                }
            } else {
                let lane_slots = (1u64 << room.ilog2()).min(layout.lane_slots);
                Plan::Cut {
                    lane_slots,
                    kept: vec![0; (lane_slots * layout.lane_count) as usize],
                }
            }
        };
        let len = self.copy_len();
        if len > 0 {
            if let Err(err) = self.file().set_len(len) {
                self.error = Some(err.to_string());
            }
        }
    }

    fn slots(&mut self, first: usize, bytes: &[u8], records: &[Option<u64>]) {
        let Some(layout) = self.layout else {
            return;
        };
        match &mut self.plan {
            Plan::Whole => {
                // All-zero chunks stay holes: a sparse ring makes a sparse copy.
                if bytes.iter().any(|&b| b != 0) {
                    let offset = layout.slots_offset + first as u64 * layout.slot_size;
                    self.write_at(bytes, offset);
                }
            }
            Plan::Cut { lane_slots, kept } => {
                let lane_slots = *lane_slots;
                let mut writes = Vec::new();
                for (k, index) in records.iter().enumerate() {
                    let Some(index) = *index else { continue };
                    let lane = (first + k) as u64 / layout.lane_slots;
                    let slot = lane * lane_slots + index % lane_slots;
                    let Some(held) = kept.get_mut(slot as usize) else {
                        continue;
                    };
                    // The newer of two records for one slot of the copy.
                    if *held < index + 1 {
                        *held = index + 1;
                        writes.push((k, slot));
                    }
                }
                for (k, slot) in writes {
                    let start = k * layout.slot_size as usize;
                    let Some(record) = bytes.get(start..start + format::SLOT_SIZE as usize) else {
                        continue;
                    };
                    let offset = layout.slots_offset + slot * u64::from(format::SLOT_SIZE);
                    self.write_at(record, offset);
                }
            }
            Plan::Unknown | Plan::Nothing { .. } => {}
        }
    }

    fn finish(&mut self, header_bytes: &[u8], header: &RingHeader) {
        match &self.plan {
            Plan::Whole => self.write_at(header_bytes, 0),
            Plan::Cut { lane_slots, kept } => {
                let lane_slots = *lane_slots;
                // Records the copy's reader will accept: within their lane's newest `lane_slots` indices.
                let head_of = |lane: u64| -> u64 {
                    if header.version == format::VERSION_1 {
                        header.head
                    } else {
                        header.lane_heads.get(lane as usize).copied().unwrap_or(0)
                    }
                };
                self.kept_records = kept
                    .iter()
                    .enumerate()
                    .filter(|(_, &held)| held > 0)
                    .filter(|(slot, &held)| {
                        let head = head_of(*slot as u64 / lane_slots);
                        let index = held - 1;
                        index < head && head - index <= lane_slots
                    })
                    .count() as u64;
                if kept.iter().all(|&held| held == 0) {
                    // Nothing was copied: the smallest valid ring says the same (one empty slot per lane).
                    self.shrink_to_one_slot_per_lane();
                }
                let Plan::Cut { kept, .. } = &self.plan else {
                    return;
                };
                let slot_count = kept.len() as u32;
                let mut cut = header_bytes.to_vec();
                cut[header::SLOT_SIZE..header::SLOT_SIZE + 4]
                    .copy_from_slice(&format::SLOT_SIZE.to_le_bytes());
                cut[header::SLOT_COUNT..header::SLOT_COUNT + 4]
                    .copy_from_slice(&slot_count.to_le_bytes());
                self.write_at(&cut, 0);
            }
            Plan::Unknown | Plan::Nothing { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use breadcrumb::{Args, Call, ReadOptions, Writer, WriterOptions};

    fn pending(dir: &std::path::Path) -> PendingFile {
        PendingFile::create(dir, 0o600).unwrap()
    }

    /// A ring of `slots` slots in `lanes` lanes; thread `t` of `threads` writes `per_thread` closed calls, then
    /// one left open (in flight).
    fn ring(path: &std::path::Path, slots: u32, lanes: u32, threads: usize, per_thread: usize) {
        let writer = Writer::create_with(
            path,
            &WriterOptions {
                slot_count: slots,
                lane_count: lanes,
                ..WriterOptions::default()
            },
            &breadcrumb::identity::ProcessIdentity::current(),
        )
        .unwrap();
        let writer = std::sync::Arc::new(writer);
        // Every thread lives until all have written: no lane passes from one to another.
        let all_written = std::sync::Arc::new(std::sync::Barrier::new(threads.max(1)));
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let writer = writer.clone();
                let all_written = all_written.clone();
                std::thread::spawn(move || {
                    for n in 0..per_thread {
                        let label = format!("{t}/{n}");
                        let token = writer.enter(Call::CuMemcpyHtoD_v2, &Args::default(), &label);
                        writer.exit(token, 0);
                    }
                    let label = format!("open {t}");
                    let _open = writer.enter(Call::CuCtxSynchronize, &Args::default(), &label);
                    all_written.wait();
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
    }

    fn read_copy(path: &std::path::Path, budget: u64) -> (RingSnapshot, CopyOutcome, Vec<u8>) {
        let dir = path.parent().unwrap();
        let mut copy = RingCopy::new(pending(dir), budget);
        let file = File::open(path).unwrap();
        let snapshot = crate::rings::read(&file, &mut copy).unwrap();
        let outcome = copy.outcome(&snapshot);
        assert!(copy.written(), "{outcome:?}");
        copy.commit("copy.bin").unwrap();
        let bytes = std::fs::read(dir.join("copy.bin")).unwrap();
        (snapshot, outcome, bytes)
    }

    #[test]
    fn a_ring_within_the_budget_is_copied_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ring");
        ring(&path, 1024, 16, 4, 20);
        let (snapshot, outcome, bytes) = read_copy(&path, 16 << 20);
        assert_eq!(outcome.note, None);
        assert_eq!(bytes, std::fs::read(&path).unwrap());
        assert_eq!(outcome.bytes, bytes.len() as u64);
        assert_eq!(snapshot.in_flight.len(), 4);
    }

    /// Over the budget: a valid ring of the same format, each lane's newest records, the calls in flight
    /// found again by the reader of the copy, and the outcome says what was kept.
    #[test]
    fn a_ring_over_the_budget_is_copied_as_a_valid_smaller_ring() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ring");
        // 64 lanes of 1024 slots; 8 threads of 300 records each (closed), then one open call each.
        ring(&path, 1 << 16, 64, 8, 150);
        let original = std::fs::metadata(&path).unwrap().len();
        let budget = 64 * 1024 + 512 + 64 * 64;
        let (snapshot, outcome, bytes) = read_copy(&path, budget);
        assert!(bytes.len() as u64 <= budget && (bytes.len() as u64) < original);
        assert_eq!(outcome.bytes, bytes.len() as u64);
        let options = ReadOptions {
            compute_age: false,
            ..ReadOptions::default()
        };
        let copy = breadcrumb::parse_ring(&bytes, &options).unwrap();
        // 8 slots per lane: each writing thread's lane keeps its newest 8 records.
        assert_eq!(copy.header.slot_count, 64 * 8);
        assert_eq!(copy.header.slot_size, format::SLOT_SIZE);
        assert_eq!(copy.header.lane_heads, snapshot.header.lane_heads);
        assert_eq!(copy.records.len(), 8 * 8);
        assert_eq!(copy.invalid_slots + copy.torn_slots, 0);
        let labels = |calls: &[breadcrumb::InFlight]| {
            let mut labels: Vec<String> = calls.iter().map(|c| c.label.clone()).collect();
            labels.sort();
            labels
        };
        assert_eq!(labels(&copy.in_flight), labels(&snapshot.in_flight));
        assert_eq!(copy.in_flight.len(), 8);
        let note = outcome.note.unwrap();
        let total = 8 * (2 * 150 + 1);
        assert!(
            note.starts_with(&format!("newest 64 of {total} records kept")),
            "{note}"
        );
        // Every copied record is byte for byte the ring's.
        let last = &copy.records[copy.records.len() - 1];
        assert!(snapshot.records.contains(last));
    }

    #[test]
    fn an_empty_ring_over_the_budget_is_copied_as_the_smallest_ring() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ring");
        ring(&path, 1 << 16, 64, 0, 0);
        let (snapshot, outcome, bytes) = read_copy(&path, 1 << 20);
        assert!(snapshot.records.is_empty());
        assert_eq!(bytes.len(), 512 + 64 * 64 + 64 * 128);
        let copy = breadcrumb::parse_ring(&bytes, &ReadOptions::default()).unwrap();
        assert_eq!((copy.header.slot_count, copy.records.len()), (64, 0));
        let note = outcome.note.unwrap();
        assert!(note.starts_with("the ring holds no record"), "{note}");
    }

    #[test]
    fn a_budget_too_small_for_one_slot_per_lane_writes_nothing_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.ring");
        ring(&path, 1 << 12, 64, 1, 5);
        let mut copy = RingCopy::new(pending(dir.path()), 1000);
        let file = File::open(&path).unwrap();
        let snapshot = crate::rings::read(&file, &mut copy).unwrap();
        assert!(!copy.written());
        let note = copy.outcome(&snapshot).note.unwrap();
        assert!(note.starts_with("ring copy not written"), "{note}");
        drop(copy);
        // The pending temp file is gone.
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "{left:?}");
    }
}
