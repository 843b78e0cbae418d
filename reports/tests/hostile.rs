//! The store under hostile conditions (issue 13): a nearly full output filesystem, a signal storm of on-demand
//! incidents, a FIFO or a symlink where a file or an incident directory should be, bundles that fail.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reports::layout::{INCIDENT_FILE, MARKER_FILE, REPORT_FILE};
use reports::model::{Incident, TimelineEvent, Timestamp, Trigger};
use reports::retention::{Removal, RemovalReason};
use reports::{Error, Retention, Store};

fn fresh(id: &str, trigger: Trigger) -> Incident {
    let mut inc = common::incident();
    inc.id = id.into();
    inc.complete = false;
    inc.trigger = trigger;
    inc.detected_at = Timestamp::now();
    inc
}

fn temps_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if name.starts_with(".tmp-") {
            out.push(name.clone());
        }
        if entry.file_type().unwrap().is_dir() {
            out.extend(temps_under(&entry.path()));
        }
    }
    out
}

/// Bytes a writer can still use (tmpfs has no reserved blocks: this is exact, in pages).
fn free_bytes(dir: &Path) -> u64 {
    let st = nix::sys::statvfs::statvfs(dir).unwrap();
    #[allow(clippy::useless_conversion)]
    let (blocks, size) = (
        u64::from(st.blocks_available()),
        u64::from(st.fragment_size()),
    );
    blocks * size
}

/// A 4 MiB tmpfs mounted with mount(2) on a temp directory, unmounted on drop (also when the test panics).
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    /// None (skip, with a line on stderr) where this machine cannot mount; under CI=true that is a failure.
    fn for_test(test: &str) -> Option<SmallFs> {
        let dir = tempfile::tempdir().unwrap();
        let mounted = nix::mount::mount(
            Some("tmpfs"),
            dir.path(),
            Some("tmpfs"),
            nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
            Some("size=4m,mode=0700"),
        );
        match mounted {
            Ok(()) => Some(SmallFs { dir }),
            Err(errno) if breadcrumb::in_ci() => {
                panic!("{test}: CI=true but a size-limited tmpfs cannot be mounted: {errno}")
            }
            Err(errno) => {
                eprintln!("skipping {test}: cannot mount a tmpfs: {errno}");
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(self.dir.path(), nix::mount::MntFlags::MNT_DETACH);
    }
}

fn remove_fillers(dir: &Path) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("filler-")
        {
            fs::remove_file(path).unwrap();
        }
    }
}

/// Fill the filesystem of `dir` (emptied of earlier fillers first) until 16-24 KiB are left, like the issue's
/// reproducer.
fn fill_to_16_24_kib(dir: &Path) {
    remove_fillers(dir);
    let mut max_chunk: u64 = 4 << 20;
    for chunk in 0..400 {
        let free = free_bytes(dir);
        if (16 << 10..=24 << 10).contains(&free) {
            return;
        }
        assert!(free > 24 << 10, "{free} bytes free before filling");
        let take = (free - (20 << 10)).clamp(512, max_chunk) as usize;
        let path = dir.join(format!("filler-{chunk}"));
        // Written and synced so that delayed allocation does not hide the blocks from statvfs.
        let written = fs::File::create(&path).and_then(|file| {
            std::io::Write::write_all(&mut &file, &vec![0xa5u8; take])?;
            file.sync_all()
        });
        if written.is_err() || free_bytes(dir) < 16 << 10 {
            // ext4's own metadata took more than the data: undo, smaller steps.
            fs::remove_file(&path).unwrap();
            max_chunk = (take as u64 / 2).max(512);
        }
    }
    panic!(
        "could not fill {} to 16-24 KiB free ({} free)",
        dir.display(),
        free_bytes(dir)
    );
}

/// incident.json and report.md say the same thing: report.md is the rendering of exactly the stored incident, and
/// exists whenever incident.json says complete.
fn assert_pair_agrees(dir: &Path) {
    let stored: Incident =
        serde_json::from_slice(&fs::read(dir.join(INCIDENT_FILE)).unwrap()).expect("parseable");
    match fs::read_to_string(dir.join(REPORT_FILE)) {
        Ok(md) => {
            assert!(stored.complete, "report.md next to a partial incident.json");
            assert!(md.contains("capture complete"));
            assert_eq!(
                md,
                reports::render::markdown(&stored),
                "report.md is not the rendering of incident.json"
            );
        }
        Err(err) => {
            assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
            assert!(
                !stored.complete,
                "a complete incident.json without report.md"
            );
        }
    }
    assert_eq!(temps_under(dir), Vec::<String>::new(), "temp files left");
}

fn with_timeline(mut inc: Incident, events: usize) -> Incident {
    for i in 0..events {
        inc.timeline.push(TimelineEvent {
            at: Timestamp::now(),
            event: format!("event {i}: {}", "x".repeat(180)),
        });
    }
    inc
}

/// The reproducer: with 16-24 KiB free, `finish` used to leave report.md saying "capture complete" while
/// incident.json still said `complete: false`. Finishes and updates of growing sizes are tried on a real
/// size-limited tmpfs kept at 16-24 KiB free; after every one, failed or not, the pair agrees.
#[test]
fn on_a_nearly_full_filesystem_report_and_json_never_disagree() {
    let Some(fs) = SmallFs::for_test("on_a_nearly_full_filesystem_report_and_json_never_disagree")
    else {
        return;
    };
    let mnt = fs.path();
    let store = Store::open(mnt.join("incidents"), Retention::UNLIMITED).unwrap();
    let mut base = fresh("20261203T000000Z-gpu01-4242", Trigger::Wedge);
    // Small enough that the first finishes fit and the later ones fail at either file.
    base.samples.truncate(1);
    base.ring = None;
    base.kernel_log.clear();
    let mut handle = store.create(&base).unwrap();
    handle.write_file("ring.bin", &[7u8; 4096]).unwrap();
    assert_pair_agrees(handle.path());

    let mut failures = 0;
    let mut successes = 0;
    for events in [0usize, 8, 20, 30, 40, 50, 64, 100, 400] {
        fill_to_16_24_kib(mnt);
        let inc = with_timeline(base.clone(), events);
        eprintln!(
            "{events} events: incident.json about {} B, report.md about {} B, {} B free",
            serde_json::to_vec_pretty(&inc).unwrap().len(),
            reports::render::markdown(&inc).len(),
            free_bytes(mnt)
        );
        match handle.finish(&inc) {
            Ok(()) => successes += 1,
            Err(err) => {
                assert!(err.to_string().contains("No space left"), "{err}");
                failures += 1;
            }
        }
        assert_pair_agrees(handle.path());
    }
    assert!(
        failures > 0,
        "the filesystem never ran out: the test proved nothing"
    );

    // Space comes back: the finish lands, and a later update that fails keeps that complete pair.
    remove_fillers(mnt);
    let finished = with_timeline(base.clone(), 4);
    handle.finish(&finished).unwrap();
    assert_pair_agrees(handle.path());
    let before = fs::read(handle.path().join(REPORT_FILE)).unwrap();
    fill_to_16_24_kib(mnt);
    let mut resolved = with_timeline(base.clone(), 400);
    resolved.episode.status = reports::model::EpisodeStatus::Resolved;
    assert!(handle.update(&resolved).is_err());
    assert_pair_agrees(handle.path());
    assert_eq!(fs::read(handle.path().join(REPORT_FILE)).unwrap(), before);
    eprintln!("nearly full filesystem: {successes} finishes landed, {failures} failed cleanly");
    drop(handle);
}

fn collecting(store: Store) -> (Store, Arc<Mutex<Vec<Removal>>>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = log.clone();
    let store = store.log_removals(move |r| sink.lock().unwrap().push(r.clone()));
    (store, log)
}

fn listed(store: &Store) -> Vec<String> {
    let mut ids: Vec<String> = store.list().unwrap().into_iter().map(|s| s.id).collect();
    ids.sort();
    ids
}

/// 1,000 SIGUSR1 used to produce enough on-demand incidents to push the real wedge out at the cap of 100. Here a
/// storm of on-demand incidents after a wedge leaves the wedge and the newest 20 on-demand ones, and every removal
/// reaches the log with its reason.
#[test]
fn an_on_demand_storm_keeps_the_wedge_and_logs_every_removal() {
    let tmp = tempfile::tempdir().unwrap();
    let limits = Retention {
        min_free_bytes: None,
        max_incidents: Some(5),
        ..Retention::DEFAULT
    };
    let (store, log) = collecting(Store::open(tmp.path(), limits).unwrap());
    let wedge = fresh("20261203T000000Z-gpu01-1", Trigger::Wedge);
    let mut handle = store.create(&wedge).unwrap();
    handle.finish(&wedge).unwrap();
    drop(handle);
    for i in 0..60 {
        let od = fresh(&format!("20261203T0001{i:02}Z-gpu01-2"), Trigger::OnDemand);
        let mut handle = store.create(&od).unwrap();
        handle.finish(&od).unwrap();
    }
    let ids = listed(&store);
    assert_eq!(ids.len(), 21, "{ids:?}");
    assert_eq!(ids[0], "20261203T000000Z-gpu01-1");
    assert_eq!(
        ids[1], "20261203T000140Z-gpu01-2",
        "the newest 20 on-demand remain"
    );
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 40);
    assert!(log
        .iter()
        .all(|r| r.on_demand && r.reason == RemovalReason::OnDemandCap { max: 20 }));
    assert_eq!(log[0].id, "20261203T000100Z-gpu01-2", "oldest first");
    assert!(log[0].to_string().contains("max_on_demand"), "{}", log[0]);

    // Under a free-space floor no filesystem meets, only the wedge (under its 24 h floor) is left.
    let strict = Retention {
        min_free_bytes: Some(u64::MAX),
        ..limits
    };
    let (strict, log) = collecting(Store::open(tmp.path(), strict).unwrap());
    let cleanup = strict.enforce_retention().unwrap();
    assert_eq!(listed(&strict), ["20261203T000000Z-gpu01-1"]);
    assert_eq!(cleanup.removed.len(), 20);
    assert_eq!(*log.lock().unwrap(), cleanup.removed);
    assert!(cleanup
        .removed
        .iter()
        .all(|r| matches!(r.reason, RemovalReason::FreeSpace { .. })));
}

/// A wedge past the floor goes by its own limits, after on-demand ones, and an open episode (its writer alive)
/// never goes.
#[test]
fn old_wedges_go_by_their_own_limits_and_live_ones_never() {
    let tmp = tempfile::tempdir().unwrap();
    let limits = Retention {
        min_free_bytes: None,
        max_total_bytes: None,
        max_incidents: Some(1),
        ..Retention::DEFAULT
    };
    let (store, log) = collecting(Store::open(tmp.path(), limits).unwrap());
    // Detected years ago: past the 24 h floor.
    let mut old_live = fresh("20200101T000000Z-gpu01-1", Trigger::Wedge);
    old_live.detected_at = common::at("2020-01-01T00:00:00Z", 1);
    let live = store.create(&old_live).unwrap();
    let mut old = fresh("20200102T000000Z-gpu01-2", Trigger::Wedge);
    old.detected_at = common::at("2020-01-02T00:00:00Z", 1);
    let mut h = store.create(&old).unwrap();
    h.finish(&old).unwrap();
    drop(h);
    let young = fresh("20261203T000000Z-gpu01-3", Trigger::Wedge);
    let mut h = store.create(&young).unwrap();
    h.finish(&young).unwrap();
    drop(h);
    // Count 3 > 1: the old finished wedge goes; the live one and the young one stay.
    assert_eq!(
        listed(&store),
        ["20200101T000000Z-gpu01-1", "20261203T000000Z-gpu01-3"]
    );
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].id, "20200102T000000Z-gpu01-2");
    assert_eq!(log[0].reason, RemovalReason::Count { max: 1 });
    assert!(!log[0].on_demand);
    drop(live);
}

/// A FIFO named incident.json (or .in-progress) used to hang `list` in `open`.
#[test]
fn a_fifo_in_an_incident_is_listed_unreadable_without_blocking() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path(), Retention::UNLIMITED).unwrap();
    let good = fresh("20261203T000000Z-gpu01-1", Trigger::Wedge);
    let mut h = store.create(&good).unwrap();
    h.finish(&good).unwrap();
    drop(h);
    let fifo_dir = tmp.path().join("20261203T000001Z-gpu01-2");
    fs::create_dir(&fifo_dir).unwrap();
    let mode = nix::sys::stat::Mode::from_bits_truncate(0o600);
    nix::unistd::mkfifo(&fifo_dir.join(INCIDENT_FILE), mode).unwrap();
    nix::unistd::mkfifo(&fifo_dir.join(MARKER_FILE), mode).unwrap();
    let link_dir = tmp.path().join("20261203T000002Z-gpu01-3");
    fs::create_dir(&link_dir).unwrap();
    let secret = tmp.path().join("secret");
    fs::write(&secret, "{\"verdict\":\"TOP-SECRET-CONTENT\"}").unwrap();
    std::os::unix::fs::symlink(&secret, link_dir.join(INCIDENT_FILE)).unwrap();

    let (tx, rx) = std::sync::mpsc::channel();
    let reader = Store::open_read_only(tmp.path()).unwrap();
    std::thread::spawn(move || {
        let _ = tx.send(reader.list());
    });
    let list = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("list blocked on a FIFO")
        .unwrap();
    assert_eq!(list.len(), 3);
    let fifo = list.iter().find(|s| s.id.ends_with("-2")).unwrap();
    let why = fifo.error.as_deref().expect("listed as unreadable");
    assert!(why.contains("FIFO"), "{why}");
    let link = list.iter().find(|s| s.id.ends_with("-3")).unwrap();
    let why = link.error.as_deref().expect("listed as unreadable");
    assert!(why.contains("symbolic link"), "{why}");
    assert!(!format!("{list:?}").contains("TOP-SECRET"));
    assert!(list.iter().any(|s| s.id.ends_with("-1") && s.complete));
    assert!(matches!(
        store.load("20261203T000001Z-gpu01-2"),
        Err(Error::Untrusted { .. })
    ));
}

fn archive_entries(path: &Path) -> Vec<(String, u32, Vec<u8>)> {
    let mut archive =
        tar::Archive::new(flate2::read::GzDecoder::new(fs::File::open(path).unwrap()));
    let mut out = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().display().to_string();
        let mode = entry.header().mode().unwrap();
        let mut body = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut body).unwrap();
        out.push((name, mode, body));
    }
    out
}

#[test]
fn bundles_keep_the_incident_modes() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("s"), Retention::UNLIMITED).unwrap();
    let inc = fresh("20261203T000000Z-gpu01-1", Trigger::Wedge);
    let mut h = store.create(&inc).unwrap();
    h.write_file("samples/0001-stack.txt", b"stack").unwrap();
    h.finish(&inc).unwrap();
    let out = tmp.path().join("b.tar.gz");
    store.bundle(h.id(), &out).unwrap();
    assert_eq!(
        fs::metadata(&out).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let entries = archive_entries(&out);
    assert_eq!(
        entries.len(),
        5,
        "{:?}",
        entries.iter().map(|e| &e.0).collect::<Vec<_>>()
    );
    for (name, mode, _) in &entries {
        let dir = name == h.id() || name.ends_with("/samples");
        assert_eq!(*mode, if dir { 0o700 } else { 0o600 }, "{name}");
    }
}

/// `ln -s /etc out/20990101T000000Z-vm-1` used to bundle /etc.
#[test]
fn a_symlinked_incident_directory_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("s"), Retention::UNLIMITED).unwrap();
    let elsewhere = tmp.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    fs::write(elsewhere.join(INCIDENT_FILE), b"{}").unwrap();
    fs::write(elsewhere.join("secret.txt"), b"TOP-SECRET-CONTENT").unwrap();
    let id = "20990101T000000Z-vm-1";
    std::os::unix::fs::symlink(&elsewhere, store.dir().join(id)).unwrap();
    let out = tmp.path().join("b.tar.gz");
    let err = store.bundle(id, &out).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert!(!out.exists());
    assert!(matches!(store.load(id), Err(Error::Untrusted { .. })));
    assert_eq!(
        fs::read_dir(tmp.path()).unwrap().count(),
        2,
        "nothing written"
    );
}

#[test]
fn a_failed_bundle_leaves_no_temp_file() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("s"), Retention::UNLIMITED).unwrap();
    let inc = fresh("20261203T000000Z-gpu01-1", Trigger::Wedge);
    let mut h = store.create(&inc).unwrap();
    h.finish(&inc).unwrap();
    // The output name is taken by a non-empty directory: the final rename fails.
    let out_dir = tmp.path().join("out");
    let taken = out_dir.join("b.tar.gz");
    fs::create_dir_all(&taken).unwrap();
    fs::write(taken.join("keep"), b"x").unwrap();
    let started = Instant::now();
    assert!(store.bundle(h.id(), &taken).is_err());
    assert!(started.elapsed() < Duration::from_secs(30));
    let names: Vec<_> = fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [std::ffi::OsString::from("b.tar.gz")]);
}

/// A writer SIGKILLed between the renames of its final commit: the new report.md is in place, incident.json
/// is still the partial one. The next open of the store (the dead writer's marker is stale) restores the
/// pair: report.md only beside a complete incident.json.
#[test]
fn a_report_left_ahead_of_its_incident_by_a_killed_writer_is_removed_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Retention::UNLIMITED).unwrap();
    let handle = store.create(&fresh("x", Trigger::Wedge)).unwrap();
    let path = handle.path().to_path_buf();
    drop(handle);
    drop(store);
    let partial: Incident =
        serde_json::from_slice(&fs::read(path.join(INCIDENT_FILE)).unwrap()).unwrap();
    assert!(!partial.complete);
    let mut complete = partial.clone();
    complete.complete = true;
    fs::write(path.join(REPORT_FILE), reports::render::markdown(&complete)).unwrap();
    fs::write(path.join(MARKER_FILE), b"").unwrap();
    Store::open(dir.path(), Retention::UNLIMITED).unwrap();
    assert_pair_agrees(&path);
}
