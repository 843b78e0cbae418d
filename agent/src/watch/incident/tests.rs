//! Tests of the episode lifecycle (the parent module).

use super::*;
use reports::model::EpisodeStatus;
use std::path::Path;

/// A wedge of thread `tid` of `pid` (in D since boot), judged at `detected`.
fn wedge(pid: i32, tid: i32, start_time: u64, comm: &str, detected: Instant) -> Wedge {
    Wedge {
        pid,
        tid,
        start_time,
        comm: comm.to_string(),
        d_since_ns: 0,
        detected,
    }
}

fn capturer(dir: &Path) -> Capturer {
    capturer_with(dir, |_| {})
}

fn capturer_with(dir: &Path, change: impl FnOnce(&mut CaptureSettings)) -> Capturer {
    let mut settings = CaptureSettings::new(ProcRoot::default());
    settings.watch.nvidia_smi = false;
    settings.watch.probe_timeout = Duration::from_millis(500);
    change(&mut settings);
    let store = Store::open(dir, reports::retention::Retention::DEFAULT).unwrap();
    Capturer::new(settings, store)
}

#[test]
fn on_demand_runs_the_same_stages_and_never_kills() {
    let dir = tempfile::tempdir().unwrap();
    // Were the kill stage to act on demand, it would kill this test process.
    let mut capturer = capturer_with(dir.path(), |s| s.kill_on_wedge = true);
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    capturer.capture_on_demand(me, "SIGUSR1", &mut out);
    // The minimal incident is written at once; the rest comes back from a capture worker.
    assert!(matches!(&out[..], [CaptureEvent::Opened { .. }]), "{out:?}");
    capturer.finish_captures(Duration::from_secs(60), &mut out);
    let [CaptureEvent::Opened { .. }, CaptureEvent::Completed {
        path,
        verdict,
        killed,
        ..
    }] = &out[..]
    else {
        panic!("{out:?}")
    };
    assert!(
        verdict.starts_with("on-demand capture (SIGUSR1): "),
        "{verdict}"
    );
    assert_eq!(*killed, None);
    let incident =
        reports::store::read::read_incident(&path.join(reports::layout::INCIDENT_FILE)).unwrap();
    assert!(incident.complete);
    assert_eq!(&incident.verdict, verdict);
    // Minimal, safe and risky stages all ran: threads, host context, probes.
    assert!(!incident.samples.is_empty());
    assert!(incident.host_context.captured_at.monotonic_ns.is_some());
    assert!(
        incident
            .probes
            .iter()
            .any(|p| p.name.starts_with("cmdline")),
        "{:?}",
        incident.probes
    );
    assert!(
        !incident
            .timeline
            .iter()
            .any(|t| t.event.contains("SIGKILL")),
        "{:?}",
        incident.timeline
    );
}

fn my_start_time() -> u64 {
    let me = std::process::id() as i32;
    ProcRoot::default()
        .read_task_stat(me, me)
        .unwrap()
        .starttime
}

fn incident_dirs(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().join(reports::layout::INCIDENT_FILE).exists())
        .count()
}

#[test]
fn no_incident_for_a_process_or_thread_gone_before_the_capture() {
    let dir = tempfile::tempdir().unwrap();
    let mut capturer = capturer(dir.path());
    let mut out = Vec::new();
    // A process that exited (and was reaped) before its capture began.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let gone = child.id() as i32;
    child.wait().unwrap();
    capturer.on_wedged(&wedge(gone, gone, 1, "true", Instant::now()), &mut out);
    // A live tid whose start time is not the one judged wedged: the tid was reused.
    let me = std::process::id() as i32;
    let reused = my_start_time() + 1;
    capturer.on_wedged(&wedge(me, me, reused, "test", Instant::now()), &mut out);
    assert_eq!(
        out,
        vec![
            CaptureEvent::Gone {
                pid: gone,
                tid: gone,
                total: 1
            },
            CaptureEvent::Gone {
                pid: me,
                tid: me,
                total: 2
            },
        ]
    );
    assert_eq!(capturer.gone_before_capture(), 2);
    assert!(capturer.open_incidents().is_empty());
    assert_eq!(incident_dirs(dir.path()), 0);
    // The same thread with its real start time is captured.
    out.clear();
    wedge_this_process_opens(&mut capturer, &mut out);
    assert_eq!(incident_dirs(dir.path()), 1);
}

#[test]
fn evidence_fate_and_the_exit_write_of_an_open_episode() {
    let dir = tempfile::tempdir().unwrap();
    let mut capturer = capturer(dir.path());
    let me = std::process::id() as i32;
    let mut out = Vec::new();
    capturer.on_wedged(
        &wedge(me, me, my_start_time(), "test", Instant::now()),
        &mut out,
    );
    let Some(CaptureEvent::Opened { path, .. }) = out.first().cloned() else {
        panic!("{out:?}")
    };
    out.clear();
    capturer.shutdown(Duration::from_secs(60), &mut out);
    assert!(!capturer.is_open(me) && capturer.unwritten().is_empty());
    let incident =
        reports::store::read::read_incident(&path.join(reports::layout::INCIDENT_FILE)).unwrap();
    assert_eq!(incident.episode.status, EpisodeStatus::StillWedgedAtExit);
    assert!(incident.episode.watcher_exited_at.is_some());
    let w = &incident.wedged_threads[0];
    assert_eq!(w.fate, ThreadFate::StillWedgedAtExit);
    assert_eq!(w.at_detection.as_ref().map(|t| t.tid), Some(me));
    assert!(
        incident
            .verdict
            .contains("; still wedged when wedge-capture exited at "),
        "{}",
        incident.verdict
    );
    // A thread missing from the snapshot taken at detection (it vanished): no evidence, and why.
    let mut gone = Incident::new(me);
    gone.wedged_threads.push(WedgedThread {
        tid: -5,
        ..WedgedThread::default()
    });
    changes::keep_evidence(&mut gone, -5);
    assert!(gone.wedged_threads[0].at_detection.is_none());
    assert_eq!(gone.not_captured[0].what, "evidence as of detection");
}

#[test]
fn a_first_write_that_fails_is_kept_and_retried_until_it_lands() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("incidents");
    let mut capturer = capturer(&dir);
    // The output directory replaced by a file: every write fails (root ignores permission bits).
    let aside = parent.path().join("aside");
    std::fs::rename(&dir, &aside).unwrap();
    std::fs::write(&dir, b"not a directory").unwrap();
    let me = std::process::id() as i32;
    let detected = Instant::now();
    let mut out = Vec::new();
    capturer.on_wedged(&wedge(me, me, my_start_time(), "test", detected), &mut out);
    assert!(
        matches!(&out[..], [CaptureEvent::WritePending { pid, tid, .. }] if *pid == me && *tid == me),
        "{out:?}"
    );
    assert_eq!(capturer.unwritten().len(), 1);
    assert!(capturer.is_open(me));
    // Retried at every tick, the alarm raised once.
    out.clear();
    for _ in 0..3 {
        capturer.tick(&mut out);
    }
    assert!(out.is_empty(), "{out:?}");
    // The directory comes back: the next tick writes the incident as of detection, then completes it.
    std::fs::remove_file(&dir).unwrap();
    std::fs::rename(&aside, &dir).unwrap();
    capturer.tick(&mut out);
    assert!(capturer.unwritten().is_empty());
    capturer.finish_captures(Duration::from_secs(60), &mut out);
    let kinds: Vec<&str> = out
        .iter()
        .filter_map(|e| match e {
            CaptureEvent::Opened { .. } => Some("opened"),
            CaptureEvent::Landed { .. } => Some("landed"),
            CaptureEvent::Completed { .. } => Some("completed"),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, ["opened", "landed", "completed"], "{out:?}");
    let Some(CaptureEvent::Landed { path, after, .. }) = out.get(1) else {
        unreachable!()
    };
    assert!(*after <= detected.elapsed());
    let incident =
        reports::store::read::read_incident(&path.join(reports::layout::INCIDENT_FILE)).unwrap();
    assert!(incident.complete);
    let first_sample = incident.samples[0].taken_at.monotonic_ns.unwrap();
    let timeline: Vec<&str> = incident.timeline.iter().map(|t| t.event.as_str()).collect();
    assert!(
        timeline
            .iter()
            .any(|t| t.contains("s after detection; writing failed")),
        "{timeline:?}"
    );
    // The evidence is the snapshot taken at detection, before the first successful write.
    let landed_at = incident
        .timeline
        .iter()
        .find(|t| t.event.contains("minimal incident durable"))
        .and_then(|t| t.at.monotonic_ns)
        .unwrap();
    assert!(first_sample < landed_at);
}

/// `max_incidents_per_hour`: with a cap of 1, the first wedge of the hour opens an incident and a second
/// process's wedge is logged and not captured (no incident written); without a cap both would open.
#[test]
fn the_hourly_incident_cap_holds() {
    let dir = tempfile::tempdir().unwrap();
    let mut capturer = capturer_with(dir.path(), |s| s.watch.max_incidents_per_hour = 1);
    let mut other = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let other_pid = other.id() as i32;
    let other_start = ProcRoot::default().read_stat(other_pid).unwrap().starttime;
    let mut out = Vec::new();
    wedge_this_process_opens(&mut capturer, &mut out);
    out.clear();
    capturer.on_wedged(
        &wedge(other_pid, other_pid, other_start, "sleep", Instant::now()),
        &mut out,
    );
    other.kill().unwrap();
    other.wait().unwrap();
    let [CaptureEvent::Failed { pid, message }] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(*pid, other_pid);
    assert!(message.contains("max_incidents_per_hour"), "{message}");
    assert_eq!(incident_dirs(dir.path()), 1);
    assert!(!capturer.is_open(other_pid));
}

/// The cap's window slides: an incident opened an hour ago no longer counts; no cap keeps nothing.
#[test]
fn the_hourly_cap_forgets_incidents_older_than_an_hour() {
    let start = Instant::now();
    let mut cap = HourlyCap::default();
    assert!(!cap.is_full(2, start));
    cap.record(2, start);
    cap.record(2, start + Duration::from_secs(600));
    assert!(cap.is_full(2, start + Duration::from_secs(601)));
    assert!(cap.is_full(2, start + Duration::from_secs(3599)));
    assert!(!cap.is_full(2, start + Duration::from_secs(3600)));
    assert!(cap.is_full(1, start + Duration::from_secs(3600)));
    let mut none = HourlyCap::default();
    for i in 0..100 {
        none.record(0, start + Duration::from_secs(i));
        assert!(!none.is_full(0, start + Duration::from_secs(i)));
    }
    assert!(none.0.is_empty());
}

/// This test process judged wedged: its incident opens (the first event says so).
fn wedge_this_process_opens(capturer: &mut Capturer, out: &mut Vec<CaptureEvent>) {
    let me = std::process::id() as i32;
    capturer.on_wedged(&wedge(me, me, my_start_time(), "test", Instant::now()), out);
    assert!(
        matches!(out.first(), Some(CaptureEvent::Opened { pid, .. }) if *pid == me),
        "{out:?}"
    );
}
