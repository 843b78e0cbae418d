//! Episode continuity in the store: a later watcher takes an incident up again ([`Store::reopen`]) with
//! the marker held, never while a live writer holds it; the new episode fields round-trip.

mod common;

use reports::layout::MARKER_FILE;
use reports::model::{EpisodeStatus, Timestamp, Unwatched};
use reports::{Retention, Store};

#[test]
fn an_incident_is_taken_up_again_only_when_no_live_writer_holds_it() {
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(tmp.path().join("incidents"), Retention::UNLIMITED).unwrap();
    let mut incident = common::incident();
    incident.id.clear();
    incident.process.start_time = Some(12345);
    incident.wedged_threads[0].start_time = Some(12346);
    let handle = store.create(&incident).unwrap();
    let id = handle.id().to_string();
    // A live writer: nobody else may take it up.
    assert!(store.reopen(&id, false).is_err());
    drop(handle);
    assert!(!store.list().unwrap()[0].in_progress);

    let reopened = store.reopen(&id, false).unwrap();
    assert!(reopened.path().join(MARKER_FILE).exists());
    assert!(store.list().unwrap()[0].in_progress);
    assert!(store.reopen(&id, false).is_err(), "one writer at a time");
    let mut later = store.load(&id).unwrap();
    later.episode.status = EpisodeStatus::Unknown;
    later.episode.outcome_unknown = Some("not watched between a and b: the process is gone".into());
    later.episode.unwatched.push(Unwatched {
        from: Timestamp::now(),
        until: Timestamp::now(),
    });
    reopened.update(&later).unwrap();
    drop(reopened);
    let back = store.load(&id).unwrap();
    assert_eq!(back.id, id);
    assert_eq!(back.process.start_time, Some(12345));
    assert_eq!(back.wedged_threads[0].start_time, Some(12346));
    assert_eq!(back.episode.status, EpisodeStatus::Unknown);
    assert_eq!(back.episode.unwatched.len(), 1);
    assert!(back.episode.outcome_unknown.is_some());
    assert!(!back.complete);
    // A store opened read-only never takes one up; an unknown id is an error.
    assert!(Store::open_read_only(tmp.path().join("incidents"))
        .unwrap()
        .reopen(&id, false)
        .is_err());
    assert!(store.reopen("no-such-incident", false).is_err());
}
