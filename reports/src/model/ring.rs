//! The breadcrumb ring's records kept with an incident ([`RingExcerpt`]).

use super::time::Timestamp;
use breadcrumb::{InFlight, Record, RingHeader, RingSnapshot};
use serde::{Deserialize, Serialize};

/// The breadcrumb ring as read from outside.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RingExcerpt {
    /// Path of the ring file on the host.
    pub path: Option<String>,
    /// Name of the byte-exact copy inside the incident directory (`ring.bin`), if one was written.
    pub copy: Option<String>,
    pub read_at: Timestamp,
    pub header: Option<RingHeader>,
    /// The last records, oldest first (times: CLOCK_MONOTONIC).
    pub records: Vec<Record>,
    /// Calls entered and never exited, per thread.
    pub in_flight: Vec<InFlight>,
    /// Slots being rewritten while read (skipped).
    pub torn_slots: u64,
    /// Slots whose content failed validation (skipped).
    pub invalid_slots: u64,
    /// Whether the ring was written on this boot (then its monotonic times compare with ours).
    pub same_boot: Option<bool>,
    /// Records in the ring that are not in `records` (the excerpt keeps the newest).
    pub records_omitted: u64,
    /// Calls in flight not in `in_flight` (the excerpt keeps the oldest; a hostile ring can hold 2^20).
    #[serde(skip_serializing_if = "is_zero")]
    pub in_flight_omitted: u64,
    /// What the copy (`copy`) leaves out of the ring when it is not the whole ring: a ring over the incident's
    /// ring-copy budget is copied as a valid smaller ring of its newest records.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub copy_note: Option<String>,
    /// Why the ring could not be read, when it could not.
    pub error: Option<String>,
    /// Which breadcrumb path wrote the ring, from its file name (docs/inject.md): `<pid>-<start>.driver.ring`
    /// "breadcrumbs by driver-API interposition (LD_PRELOAD)", `.cupti.ring` "breadcrumbs by CUPTI: NVML
    /// clients may stall during long UVM operations"; absent for other names (the program's own rings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breadcrumbs: Option<String>,
}

/// [`RingExcerpt::breadcrumbs`] of a ring file path.
pub fn breadcrumb_path_of(path: &str) -> Option<String> {
    let file = path.rsplit('/').next().unwrap_or(path);
    if file.ends_with(".driver.ring") {
        Some("breadcrumbs by driver-API interposition (LD_PRELOAD)".to_string())
    } else if file.ends_with(".cupti.ring") {
        Some("breadcrumbs by CUPTI: NVML clients may stall during long UVM operations".to_string())
    } else {
        None
    }
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl RingExcerpt {
    /// The excerpt of a ring read: header, in-flight calls and the newest `max_records` records.
    pub fn from_snapshot(
        path: Option<String>,
        snapshot: &RingSnapshot,
        max_records: usize,
    ) -> RingExcerpt {
        let keep = snapshot.records.len().min(max_records);
        let omitted = snapshot.records.len() - keep;
        RingExcerpt {
            breadcrumbs: path.as_deref().and_then(breadcrumb_path_of),
            path,
            copy: None,
            // The reader's clock when it computed the ages: `ring dump` of the copy counts ages from it.
            read_at: match snapshot.reader_monotonic_ns {
                Some(ns) => Timestamp::at_monotonic(ns),
                None => Timestamp::now(),
            },
            header: Some(snapshot.header.clone()),
            records: snapshot.records[omitted..].to_vec(),
            in_flight: snapshot.in_flight.clone(),
            torn_slots: snapshot.torn_slots,
            invalid_slots: snapshot.invalid_slots,
            same_boot: snapshot.same_boot,
            records_omitted: omitted as u64,
            in_flight_omitted: snapshot.in_flight_omitted,
            copy_note: None,
            error: None,
        }
    }

    /// The ring could not be read.
    pub fn unreadable(path: Option<String>, error: impl Into<String>) -> RingExcerpt {
        RingExcerpt {
            breadcrumbs: path.as_deref().and_then(breadcrumb_path_of),
            path,
            read_at: Timestamp::now(),
            error: Some(error.into()),
            ..RingExcerpt::default()
        }
    }
}
