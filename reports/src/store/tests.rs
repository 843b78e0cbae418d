//! The store's unit tests: the incident budget, the quota's order and dropped.json, process trees, heads.

use std::fs;

use super::read::{SummaryFields, SummaryProcess};
use super::removal::tree_of;
use super::write::IncidentHandle;
use super::*;
use crate::layout::{DROPPED_FILE, INCIDENT_FILE, MARKER_FILE};
use crate::model::{EpisodeStatus, Timestamp, Trigger};

fn incident_in(cgroup: &str, pid: i32) -> Incident {
    let mut incident = Incident::new(pid);
    incident.process.cgroup = Some(cgroup.to_string());
    incident
}

/// A pending file of `len` bytes (sparse) committed as `name`.
fn grow(handle: &IncidentHandle, name: &str, len: u64) -> Result<()> {
    let pending = handle.pending_file()?;
    pending.file().set_len(len).unwrap();
    pending.commit(name)
}

#[test]
fn raw_files_over_the_incident_budget_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Retention::UNLIMITED).unwrap();
    let handle = store.create(&Incident::new(1)).unwrap();
    grow(&handle, "ring.bin", 40 << 20).unwrap();
    // Replacing a file counts its new size only.
    grow(&handle, "ring.bin", 50 << 20).unwrap();
    let err = grow(&handle, "ring-2.bin", 20 << 20).unwrap_err();
    assert!(matches!(err, Error::OverBudget { .. }), "{err}");
    assert!(err.to_string().contains("ring-2.bin"), "{err}");
    let err = handle
        .write_file("kernel-log.txt", &vec![b'x'; 15 << 20])
        .unwrap_err();
    assert!(matches!(err, Error::OverBudget { .. }), "{err}");
    handle.write_file("kernel-log.txt", b"small").unwrap();
    // Nothing refused is left behind, not even a temp file.
    let mut names: Vec<String> = fs::read_dir(handle.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [MARKER_FILE, INCIDENT_FILE, "kernel-log.txt", "ring.bin"]
    );
    // incident.json itself is never refused (the evidence is bounded where it is made).
    handle.update(&Incident::new(1)).unwrap();
}

/// The quota holds for young wedges: a tenant's older incidents go first, even one its writer still
/// holds (whose next write then says why it fails); the newest of each tree stays; dropped.json says
/// what went.
#[test]
fn the_quota_removes_a_tenants_older_incidents_first_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Retention {
        max_total_bytes: Some(100 << 20),
        ..Retention::DEFAULT
    };
    let logged = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = logged.clone();
    let store = Store::open(dir.path(), limits)
        .unwrap()
        .log_removals(move |removal| log.lock().unwrap().push(removal.to_string()));
    let mut other = incident_in("/other.scope", 10);
    other.id = "20260101T000000Z-h-10".into();
    let mut handle = store.create(&other).unwrap();
    grow(&handle, "ring.bin", 30 << 20).unwrap();
    handle.finish(&other).unwrap();
    drop(handle);
    let mut live = Vec::new();
    for n in 1..=3 {
        let mut incident = incident_in("/hostile.scope", 100 + n);
        incident.id = format!("20260101T00000{n}Z-h-{}", 100 + n);
        let mut handle = store.create(&incident).unwrap();
        grow(&handle, "ring.bin", 30 << 20).unwrap();
        handle.finish(&incident).unwrap();
        live.push((handle, incident));
    }
    // 4 × 30 MiB over 100 MiB: the hostile tree's oldest (its writer alive) went, nothing else.
    let (first, incident) = &mut live[0];
    assert!(!first.path().exists());
    let err = first.update(incident).unwrap_err();
    assert!(matches!(err, Error::Dropped { .. }), "{err}");
    assert!(err.to_string().contains("quota"), "{err}");
    assert!(first.pending_file().is_err() && first.write_file("x", b"x").is_err());
    for kept in [
        "20260101T000000Z-h-10",
        "20260101T000002Z-h-102",
        "20260101T000003Z-h-103",
    ] {
        assert!(dir.path().join(kept).join(INCIDENT_FILE).exists(), "{kept}");
    }
    let dropped = store.dropped().dropped;
    assert_eq!(dropped.len(), 1);
    assert_eq!(dropped[0].removal.id, "20260101T000001Z-h-101");
    assert_eq!(dropped[0].removal.tree, "cgroup:/hostile.scope");
    assert!(dropped[0].removal.writer_live);
    assert_eq!(logged.lock().unwrap().as_slice(), [dropped[0].why.clone()]);
    let text = fs::read_to_string(dir.path().join(DROPPED_FILE)).unwrap();
    assert!(text.contains("\"limit\": \"quota\""), "{text}");
    // The listing is not confused by dropped.json.
    assert_eq!(store.list().unwrap().len(), 3);
}

#[test]
fn the_process_tree_is_the_cgroup_else_the_process() {
    let head = |cgroup: Option<&str>, start: Option<u64>| SummaryFields {
        process: SummaryProcess {
            pid: 7,
            start_time: start,
            cgroup: cgroup.map(str::to_string),
        },
        ..SummaryFields::default()
    };
    assert_eq!(
        tree_of(Some(&head(Some("/a/b"), Some(5))), "i"),
        "cgroup:/a/b"
    );
    assert_eq!(tree_of(Some(&head(Some("/"), Some(5))), "i"), "process:7:5");
    assert_eq!(tree_of(Some(&head(None, None)), "i"), "incident:i");
    assert_eq!(tree_of(None, "i"), "incident:i");
}

#[test]
fn an_incidents_head_is_read_from_its_first_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Retention::UNLIMITED).unwrap();
    let mut incident = Incident::new(3);
    incident.episode.status = EpisodeStatus::Resolved;
    // A long tail (a big sample would do the same): the head is still in the first 4 KiB.
    incident.timeline = (0..5000)
        .map(|n| crate::model::TimelineEvent {
            at: Timestamp::now(),
            event: format!("event {n}"),
        })
        .collect();
    let mut handle = store.create(&incident).unwrap();
    handle.finish(&incident).unwrap();
    let json = handle.path().join(INCIDENT_FILE);
    assert!(fs::metadata(&json).unwrap().len() > 64 << 10);
    let head = store.load_head(handle.id()).unwrap();
    assert_eq!(head.trigger, Trigger::Wedge);
    assert_eq!(head.episode.status, EpisodeStatus::Resolved);
    // A corrupt tail does not hide the head; a corrupt head is an error; no trigger (schema 1) is a wedge.
    let mut bytes = fs::read(&json).unwrap();
    let len = bytes.len();
    bytes[len - 100..].fill(b'{');
    fs::write(&json, &bytes).unwrap();
    assert_eq!(
        store.load_head(handle.id()).unwrap().episode.status,
        EpisodeStatus::Resolved
    );
    fs::write(&json, b"{\"episode\": {\"status\": ").unwrap();
    assert!(matches!(
        store.load_head(handle.id()),
        Err(Error::Parse { .. })
    ));
    fs::write(
        &json,
        br#"{"id": "x", "episode": {"status": "open"}, "samples": [}"#,
    )
    .unwrap();
    let head = store.load_head(handle.id()).unwrap();
    assert_eq!(
        (head.trigger, head.episode.status),
        (Trigger::Wedge, EpisodeStatus::Open)
    );
    fs::write(&json, br#"{"trigger": "on_demand"}"#).unwrap();
    assert_eq!(
        store.load_head(handle.id()).unwrap().trigger,
        Trigger::OnDemand
    );
}
