//! Stage `rings`: the breadcrumb rings the process holds open ([`crate::rings::files::find_rings`]), read
//! from outside with the one size limit and copied beside incident.json (so it runs after the first
//! durable write). The deadline is checked between rings.
//!
//! Bounded whatever the tenant's rings hold: each ring is streamed into its copy as it is read
//! ([`crate::rings::copy::RingCopy`]: never held whole), and the copies share
//! [`defaults::RING_COPY_BUDGET`] — each ring gets what is left divided by the rings still to read; one over
//! its share is copied as a valid smaller ring of its newest records, and the incident says what was cut
//! (`copy_note`, and a `not_captured` entry "ring copy").

use capture::ProcRoot;
use reports::model::{Incident, RingExcerpt, Timestamp};
use reports::store::write::IncidentFiles;

use super::context::{Capture, Deadline};
use crate::defaults;
use crate::rings::copy::RingCopy;
use crate::watch::capture_settings::CaptureSettings;

pub fn run(capture: &mut Capture<'_>, deadline: &Deadline) -> Result<(), String> {
    let Some(handle) = capture.handle else {
        return Err(
            "the incident is not written yet (the ring copy is one of its files)".to_string(),
        );
    };
    capture_ring(
        capture.settings,
        capture.pid,
        capture.incident,
        handle,
        deadline,
    );
    Ok(())
}

fn capture_ring(
    settings: &CaptureSettings,
    pid: i32,
    incident: &mut Incident,
    handle: &IncidentFiles,
    deadline: &Deadline,
) {
    // What an earlier run of this stage left (an adopted episode whose capture is taken up again) is replaced.
    incident.ring = None;
    incident.extra_rings.clear();
    incident
        .not_captured
        .retain(|n| n.what != "breadcrumb ring" && n.what != "ring copy");
    let mut rings = crate::rings::files::find_rings(&settings.proc_root, &settings.ring_dirs, pid);
    if rings.is_empty() {
        incident.push_not_captured(
            "breadcrumb ring",
            "no ring file found (the process holds no *.ring file open)",
        );
        return;
    }
    if rings.len() > MAX_RINGS_PER_INCIDENT {
        incident.push_timeline(format!(
            "{} ring files belong to the process; the first {MAX_RINGS_PER_INCIDENT} are in the report",
            rings.len()
        ));
        rings.truncate(MAX_RINGS_PER_INCIDENT);
    }
    // A process can hold several rings (its own breadcrumbs and the CUPTI injection's): read them all,
    // then put first the one that explains the wedge — an in-flight call, the oldest one first.
    let mut excerpts: Vec<(RingExcerpt, Option<RingCopy>)> = Vec::new();
    let mut budget_left = defaults::RING_COPY_BUDGET;
    for (n, ring) in rings.iter().enumerate() {
        if n > 0 && deadline.passed() {
            let left_out = format!("{} of {} rings", rings.len() - n, rings.len());
            incident.push_not_captured("breadcrumb ring", deadline.stopped(&left_out));
            break;
        }
        let share = budget_left / (rings.len() - n) as u64;
        let (mut excerpt, copy, copied) = read_ring_excerpt(ring, handle, share);
        if incident.process.nspid.len() > 1 && !excerpt.records.is_empty() {
            ring_tids_to_host(&settings.proc_root, pid, incident, &mut excerpt);
        }
        budget_left = budget_left.saturating_sub(copied);
        excerpts.push((excerpt, copy));
    }
    excerpts.sort_by_key(|(excerpt, _)| {
        let oldest_in_flight = excerpt
            .in_flight
            .iter()
            .map(|f| f.entered_monotonic_ns)
            .min();
        (
            oldest_in_flight.is_none(),
            oldest_in_flight.unwrap_or(u64::MAX),
        )
    });
    for (n, (mut excerpt, copy)) in excerpts.into_iter().enumerate() {
        let name = if n == 0 {
            reports::layout::RING_FILE.to_string()
        } else {
            format!("ring-{}.bin", n + 1)
        };
        if let Some(copy) = copy {
            match copy.commit(&name) {
                Ok(()) => excerpt.copy = Some(name.clone()),
                Err(err) => incident.push_not_captured("ring copy", format!("{name}: {err}")),
            }
        }
        if let Some(note) = &excerpt.copy_note {
            incident.push_not_captured("ring copy", format!("{name}: {note}"));
        }
        if n == 0 {
            incident.ring = Some(excerpt);
        } else {
            incident.extra_rings.push(excerpt);
        }
    }
}

/// At most this many rings of one process are read into an incident.
const MAX_RINGS_PER_INCIDENT: usize = 4;

/// One ring, read from outside and streamed into a copy of at most `budget` bytes (to be committed under its
/// name once the rings are ordered); the copy is `None` when none was written, and the bytes it takes.
fn read_ring_excerpt(
    ring: &crate::rings::files::RingFile,
    handle: &IncidentFiles,
    budget: u64,
) -> (RingExcerpt, Option<RingCopy>, u64) {
    let read_at = Timestamp::now();
    // Entry names are chosen by whoever writes the ring directory: escaped before they reach a report.
    let shown = crate::rings::files::printable_path(&ring.path);
    let (mut copy, copy_error) = match handle.pending_file() {
        Ok(pending) => (Some(RingCopy::new(pending, budget)), None),
        Err(err) => (None, Some(format!("ring copy not written: {err}"))),
    };
    let read = match copy.as_mut() {
        Some(copy) => crate::rings::read(&ring.file, copy),
        None => crate::rings::read(&ring.file, &mut NoCopy),
    };
    match read {
        Ok(snapshot) => {
            let mut excerpt = RingExcerpt::from_snapshot(
                Some(shown.clone()),
                &snapshot,
                crate::rings::EXCERPT_RECORDS,
            );
            // The reader kept only the newest records: the older ones are omitted too.
            excerpt.records_omitted += snapshot.records_omitted;
            excerpt.read_at = read_at;
            let outcome = copy.as_ref().map(|copy| copy.outcome(&snapshot));
            excerpt.copy_note = copy_error.or_else(|| outcome.as_ref()?.note.clone());
            let copied = outcome.map_or(0, |outcome| outcome.bytes);
            let copy = copy.filter(|copy| copy.written());
            (excerpt, copy, copied)
        }
        Err(err) => {
            // The reader's errors say what is wrong with the file, never what it holds.
            let mut excerpt = RingExcerpt::unreadable(Some(shown), err.to_string());
            excerpt.read_at = read_at;
            (excerpt, None, 0)
        }
    }
}

/// The ring of a worker in a PID namespace: its thread ids mapped to host ids, and the timeline says so.
fn ring_tids_to_host(
    root: &ProcRoot,
    pid: i32,
    incident: &mut Incident,
    excerpt: &mut RingExcerpt,
) {
    let translated = namespace_tids_to_host(root, pid, excerpt);
    if translated > 0 {
        let shown = excerpt.path.as_deref().unwrap_or_default();
        incident.push_timeline(format!(
            "ring {shown} thread ids translated from the process's PID namespace to host ids \
             ({translated} records; the ring copy keeps the original)"
        ));
    }
}

/// A sink that keeps nothing (the copy's file could not be created: the ring is still read).
struct NoCopy;

impl breadcrumb::RingSink for NoCopy {
    fn begin(&mut self, _layout: &breadcrumb::RingHeader) {}
    fn slots(&mut self, _first: usize, _bytes: &[u8], _records: &[Option<u64>]) {}
    fn finish(&mut self, _header_bytes: &[u8], _header: &breadcrumb::RingHeader) {}
}

/// A worker in a PID namespace writes its own (namespace) thread ids into the ring; the snapshot has host
/// ids. Map them through each thread's NSpid (innermost id → host id). Returns how many ids were changed.
fn namespace_tids_to_host(root: &ProcRoot, pid: i32, excerpt: &mut RingExcerpt) -> usize {
    let mut map = std::collections::HashMap::new();
    for tid in root.tasks(pid).unwrap_or_default() {
        if let Ok(status) = root.read_task_status(pid, tid) {
            if let Some(&inner) = status.nspid.last() {
                if let Ok(inner) = u32::try_from(inner) {
                    map.insert(inner, tid as u32);
                }
            }
        }
    }
    let mut changed = 0;
    for record in &mut excerpt.records {
        if let Some(&host) = map.get(&record.tid) {
            changed += usize::from(host != record.tid);
            record.tid = host;
        }
    }
    for call in &mut excerpt.in_flight {
        if let Some(&host) = map.get(&call.tid) {
            changed += usize::from(host != call.tid);
            call.tid = host;
        }
    }
    changed
}
