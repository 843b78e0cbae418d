//! The durable store: layout, partial and complete incidents, listing, loading, bundling, permissions, retention
//! and cleanup after dead writers.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use reports::layout::{INCIDENT_FILE, MARKER_FILE, REPORT_FILE};
use reports::model::Incident;
use reports::store::Modes;
use reports::{Error, Retention, Store};

fn minimal() -> Incident {
    let mut inc = common::incident();
    inc.id.clear();
    inc.complete = false;
    inc.ring = None;
    inc.kernel_log.clear();
    inc.samples.remove(0);
    inc
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        out.push(p.clone());
        if p.is_dir() {
            walk(&p, out);
        }
    }
}

#[test]
fn create_update_finish_list_load() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("incidents"), Retention::UNLIMITED).unwrap();

    let mut handle = store.create(&minimal()).unwrap();
    assert_eq!(handle.id(), "20261202T113400Z-gpu01-4242");
    // Durable at once, partial, with a verdict filled in and the marker held.
    let partial = store.load(handle.id()).unwrap();
    assert!(!partial.complete);
    assert!(
        partial
            .verdict
            .starts_with("thread 4242 `python3` has been in D for 312 s"),
        "{}",
        partial.verdict
    );
    assert!(handle.path().join(MARKER_FILE).exists());
    let listed = store.list().unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].in_progress && !listed[0].complete && listed[0].error.is_none());

    handle.write_file("ring.bin", b"RING").unwrap();
    handle
        .write_file("samples/0001/stack.txt", b"frames")
        .unwrap();
    let full = common::incident();
    handle.update(&full).unwrap();
    assert!(!store.load(handle.id()).unwrap().complete);
    assert!(!handle.path().join(REPORT_FILE).exists());
    handle.finish(&full).unwrap();

    let done = store.load(handle.id()).unwrap();
    assert!(done.complete);
    assert_eq!(done.samples, full.samples);
    assert_eq!(done.ring, full.ring);
    // Secrets never reach the disk.
    let json = fs::read_to_string(handle.path().join(INCIDENT_FILE)).unwrap();
    assert!(!json.contains("hf_SECRETSECRET") && json.contains("[REDACTED]"));
    let md = fs::read_to_string(handle.path().join(REPORT_FILE)).unwrap();
    assert!(md.starts_with("**Verdict:** thread 4242"));
    assert_eq!(
        fs::read(handle.path().join("samples/0001/stack.txt")).unwrap(),
        b"frames"
    );

    let path = handle.path().to_path_buf();
    drop(handle);
    assert!(
        !path.join(MARKER_FILE).exists(),
        "marker removed when the writer is done"
    );
    let listed = store.list().unwrap();
    assert!(listed[0].complete && !listed[0].in_progress);

    // Same second, same host and pid: a distinct id.
    let second = store.create(&minimal()).unwrap();
    assert_eq!(second.id(), "20261202T113400Z-gpu01-4242-2");
}

#[test]
fn unknown_and_hostile_ids_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), Retention::UNLIMITED).unwrap();
    let err = store.load("20990101T000000Z-x-1").unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }));
    assert!(
        err.to_string().contains(&tmp.path().display().to_string()),
        "{err}"
    );
    for bad in ["../etc", ".tmp-x", "a/b", "", "x y"] {
        assert!(matches!(store.load(bad), Err(Error::InvalidId(_))), "{bad}");
    }
    let handle = store.create(&minimal()).unwrap();
    for bad in [
        "../x",
        "/etc/passwd",
        ".hidden",
        "incident.json",
        "report.md",
        "a/../../b",
        "a//b",
        "a/b/c/d/e",
    ] {
        assert!(
            matches!(handle.write_file(bad, b"x"), Err(Error::InvalidName { .. })),
            "{bad}"
        );
    }
    assert!(matches!(
        Store::open_read_only(tmp.path().join("missing")),
        Err(Error::NoStore { .. })
    ));
}

#[test]
fn corrupt_incident_json_is_an_error_not_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), Retention::UNLIMITED).unwrap();
    let dir = tmp.path().join("20261202T000000Z-h-1");
    fs::create_dir(&dir).unwrap();
    fs::write(
        dir.join(INCIDENT_FILE),
        b"{\"id\": \"x\", \"samples\": [1,2",
    )
    .unwrap();
    assert!(matches!(
        store.load("20261202T000000Z-h-1"),
        Err(Error::Parse { .. })
    ));
    let listed = store.list().unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0]
        .error
        .as_deref()
        .unwrap()
        .contains("not a valid incident"));
    fs::write(dir.join(INCIDENT_FILE), [0xff, 0x00, 0x13]).unwrap();
    assert!(store.load("20261202T000000Z-h-1").is_err());
}

#[test]
fn files_are_0600_and_directories_0700_whatever_the_umask() {
    let tmp = tempfile::tempdir().unwrap();
    // SAFETY: umask changes only this process's file-creation mask.
    let old = unsafe { libc::umask(0) };
    let root = tmp.path().join("a/b/incidents");
    let store = Store::open(&root, Retention::UNLIMITED).unwrap();
    let mut handle = store.create(&minimal()).unwrap();
    handle.write_file("ring.bin", b"r").unwrap();
    handle.write_file("samples/x/y.txt", b"s").unwrap();
    handle.finish(&common::incident()).unwrap();
    // SAFETY: as above.
    unsafe { libc::umask(old) };

    assert_eq!(mode(&root), 0o700);
    let mut paths = Vec::new();
    walk(&root, &mut paths);
    assert!(paths.len() >= 7, "{paths:?}");
    for p in paths {
        let expected = if p.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode(&p), expected, "{}", p.display());
    }

    let out = tmp.path().join("bundle.tar.gz");
    store.bundle(handle.id(), &out).unwrap();
    assert_eq!(mode(&out), 0o600);
}

#[test]
fn custom_modes_are_applied() {
    let tmp = tempfile::tempdir().unwrap();
    let modes = Modes {
        file: 0o640,
        dir: 0o750,
    };
    let store = Store::open_with_modes(tmp.path().join("s"), Retention::UNLIMITED, modes).unwrap();
    let handle = store.create(&minimal()).unwrap();
    handle.write_file("ring.bin", b"r").unwrap();
    assert_eq!(mode(handle.path()), 0o750);
    assert_eq!(mode(&handle.path().join("ring.bin")), 0o640);
    assert_eq!(mode(&handle.path().join(INCIDENT_FILE)), 0o640);
}

#[test]
fn bundle_holds_the_incident_files_and_nothing_else() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("s"), Retention::UNLIMITED).unwrap();
    let mut handle = store.create(&minimal()).unwrap();
    handle.write_file("ring.bin", b"RINGBYTES").unwrap();
    handle
        .write_file("samples/0001-stack.txt", b"stack")
        .unwrap();
    handle.finish(&common::incident()).unwrap();
    // A symlink planted in the incident must not pull the target's content into the bundle.
    std::os::unix::fs::symlink("/etc/hostname", handle.path().join("evil")).unwrap();
    fs::write(handle.path().join(".tmp-leftover"), b"junk").unwrap();

    let out = tmp.path().join("out.tar.gz");
    let size = store.bundle(handle.id(), &out).unwrap();
    assert!(size > 0);
    let mut archive =
        tar::Archive::new(flate2::read::GzDecoder::new(fs::File::open(&out).unwrap()));
    let mut names = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().display().to_string();
        if name.ends_with("ring.bin") {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut entry, &mut s).unwrap();
            assert_eq!(s, "RINGBYTES");
        }
        names.push(name);
    }
    let id = handle.id();
    let expected: Vec<String> = [
        id.to_string(),
        format!("{id}/incident.json"),
        format!("{id}/report.md"),
        format!("{id}/ring.bin"),
        format!("{id}/samples"),
        format!("{id}/samples/0001-stack.txt"),
    ]
    .into();
    assert_eq!(names, expected);
    assert!(matches!(
        store.bundle("20990101T000000Z-x-1", &out),
        Err(Error::NotFound { .. })
    ));
}

fn make(store: &Store, id: &str, payload: usize) {
    let mut inc = minimal();
    inc.id = id.into();
    let mut handle = store.create(&inc).unwrap();
    handle.write_file("ring.bin", &vec![7u8; payload]).unwrap();
    handle.finish(&inc).unwrap();
}

fn ids(store: &Store) -> Vec<String> {
    let mut v: Vec<String> = store.list().unwrap().into_iter().map(|s| s.id).collect();
    v.sort();
    v
}

#[test]
fn retention_by_count_removes_oldest_first_but_never_one_in_progress() {
    let tmp = tempfile::tempdir().unwrap();
    let limits = Retention {
        max_incidents: Some(3),
        ..Retention::UNLIMITED
    };
    let store = Store::open(tmp.path(), limits).unwrap();
    // The oldest one stays open (its writer is alive) throughout.
    let mut oldest = minimal();
    oldest.id = "20260101T000000Z-h-1".into();
    let live = store.create(&oldest).unwrap();
    for (i, day) in ["02", "03", "04", "05", "06"].iter().enumerate() {
        make(&store, &format!("202601{day}T000000Z-h-{}", i + 2), 10);
    }
    assert_eq!(
        ids(&store),
        [
            "20260101T000000Z-h-1",
            "20260105T000000Z-h-5",
            "20260106T000000Z-h-6"
        ]
    );
    drop(live);
    make(&store, "20260107T000000Z-h-7", 10);
    assert_eq!(
        ids(&store),
        [
            "20260105T000000Z-h-5",
            "20260106T000000Z-h-6",
            "20260107T000000Z-h-7"
        ]
    );
    // Removal leaves no temp directory behind, and what it removed is in dropped.json.
    assert_eq!(fs::read_dir(tmp.path()).unwrap().count(), 3 + 1);
    assert_eq!(store.dropped().dropped.len(), 4);
}

#[test]
fn retention_by_bytes_and_free_space() {
    let tmp = tempfile::tempdir().unwrap();
    let limits = Retention {
        max_total_bytes: Some(250_000),
        ..Retention::UNLIMITED
    };
    let store = Store::open(tmp.path().join("bytes"), limits).unwrap();
    for i in 1..=4 {
        make(&store, &format!("2026010{i}T000000Z-h-{i}"), 100_000);
    }
    assert_eq!(
        ids(&store),
        ["20260103T000000Z-h-3", "20260104T000000Z-h-4"]
    );

    // No filesystem has u64::MAX bytes free: everything that is not in progress goes.
    let limits = Retention {
        min_free_bytes: Some(u64::MAX),
        ..Retention::UNLIMITED
    };
    let store = Store::open(tmp.path().join("free"), Retention::UNLIMITED).unwrap();
    make(&store, "20260101T000000Z-h-1", 10);
    make(&store, "20260102T000000Z-h-2", 10);
    let strict = Store::open(tmp.path().join("free"), limits).unwrap();
    let mut inc = minimal();
    inc.id = "20260103T000000Z-h-3".into();
    let live = strict.create(&inc).unwrap();
    assert_eq!(ids(&strict), ["20260103T000000Z-h-3"]);
    drop(live);
}

#[test]
fn open_cleans_up_after_a_dead_writer_but_not_a_live_one() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), Retention::UNLIMITED).unwrap();
    let live = store.create(&minimal()).unwrap();
    fs::write(live.path().join(".tmp-incident.json-1-1"), b"half").unwrap();

    // A dead writer: marker present but nobody holds its lock, temp files left in the incident and a half-built
    // incident directory.
    let dead = tmp.path().join("20250101T000000Z-h-9");
    fs::create_dir(&dead).unwrap();
    fs::write(
        dead.join(INCIDENT_FILE),
        serde_json::to_vec(&minimal()).unwrap(),
    )
    .unwrap();
    fs::write(dead.join(MARKER_FILE), b"").unwrap();
    fs::create_dir(dead.join("samples")).unwrap();
    fs::write(dead.join("samples/.tmp-x-1-1"), b"half").unwrap();
    fs::write(dead.join(".tmp-report.md-1-2"), b"half").unwrap();
    let half_built = tmp.path().join(".tmp-20250101T000000Z-h-10-77-0");
    fs::create_dir(&half_built).unwrap();
    fs::write(half_built.join(MARKER_FILE), b"").unwrap();
    let half_removed = tmp.path().join(".tmp-del-.tmp-20240101T000000Z-h-1-77-0");
    fs::create_dir(&half_removed).unwrap();

    let listed = store.list().unwrap();
    let dead_summary = listed
        .iter()
        .find(|s| s.id == "20250101T000000Z-h-9")
        .unwrap();
    assert!(
        !dead_summary.in_progress,
        "a stale marker is not a live writer"
    );

    let _reopened = Store::open(tmp.path(), Retention::UNLIMITED).unwrap();
    assert!(!dead.join(MARKER_FILE).exists());
    assert!(!dead.join("samples/.tmp-x-1-1").exists());
    assert!(!dead.join(".tmp-report.md-1-2").exists());
    assert!(dead.join(INCIDENT_FILE).exists());
    assert!(!half_built.exists() && !half_removed.exists());
    // The live writer's files are untouched.
    assert!(live.path().join(".tmp-incident.json-1-1").exists());
    assert!(live.path().join(MARKER_FILE).exists());
    live.update(&common::incident()).unwrap();
}

#[test]
fn read_only_store_refuses_to_write() {
    let tmp = tempfile::tempdir().unwrap();
    Store::open(tmp.path(), Retention::UNLIMITED).unwrap();
    let ro = Store::open_read_only(tmp.path()).unwrap();
    assert!(ro.create(&minimal()).is_err());
    assert!(ro.list().unwrap().is_empty());
}
