//! Issue 26 items 1 and 2: an episode outlives its watcher (design invariant 8), and `npd-check` tells
//! the truth across a watcher's restart — on real D-state threads of a frozen loop-mounted ext4.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::agent::{
    incidents_for, link_as, unique_comm, wait_in_d, wedge_helper, Agent, TempDir, FAST,
};
use crate::harness::Wedge;
use crate::util::{bin, frozen_fs_or_skip, incident_dirs};

/// `npd-check --out DIR`: exit code and message.
fn npd(out: &Path) -> (Option<i32>, String) {
    let output = Command::new(bin())
        .args(["npd-check", "--out"])
        .arg(out)
        .output()
        .unwrap();
    let message = String::from_utf8_lossy(&output.stdout).trim().to_string();
    assert!(message.chars().count() <= 80, "{message:?}");
    (output.status.code(), message)
}

/// The one incident for `pid` once `done` says so (at most `limit`).
fn wait_for(
    agent: &mut Agent,
    out: &Path,
    pid: i32,
    limit: Duration,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let until = Instant::now() + limit;
    loop {
        if let Some(found) = incidents_for(out, pid).into_iter().find(&done) {
            return found;
        }
        assert!(
            Instant::now() < until,
            "no such incident for pid {pid} within {limit:?}: {:?}\n{}",
            incidents_for(out, pid),
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn status(incident: &serde_json::Value) -> &str {
    incident["episode"]["status"].as_str().unwrap_or_default()
}

fn agent_args<'a>(out: &'a str, pattern: &'a str, textfile: &'a str) -> Vec<&'a str> {
    let mut args = vec![
        "--out",
        out,
        "--match-comm",
        pattern,
        "--textfile-dir",
        textfile,
    ];
    args.extend_from_slice(FAST);
    args
}

#[test]
fn an_agent_restarted_mid_wedge_continues_the_same_incident() {
    restarted_mid_wedge("agent restarted mid-wedge", false);
}

#[test]
fn an_agent_killed_mid_wedge_is_continued_by_the_next_one() {
    restarted_mid_wedge("agent killed mid-wedge", true);
}

/// The first agent stopped (SIGTERM: `still_wedged_at_exit`) or killed (SIGKILL: left `open`, its marker
/// stale) mid-wedge; the next one takes the episode up and closes it at the thaw.
fn restarted_mid_wedge(test: &str, kill: bool) {
    let Some(mut fs) = frozen_fs_or_skip(test) else {
        return;
    };
    let dir = TempDir::new("continuity");
    let out = dir.path().join("incidents");
    let textfile = dir.path().join("textfile");
    std::fs::create_dir_all(&textfile).unwrap();
    let file = fs.create_file("target", b"x").unwrap();
    let comm = unique_comm("c");
    let program = link_as(dir.path(), &comm, Path::new(bin()));
    let pattern = format!("^{comm}$");
    let (out_s, text_s) = (out.to_str().unwrap(), textfile.to_str().unwrap());
    let args = agent_args(out_s, &pattern, text_s);

    fs.freeze().unwrap();
    let mut helper = wedge_helper(&program, &file, &[], "continuity ioctl FS_IOC_SETFLAGS");
    let pid = helper.pid();
    wait_in_d(pid, Duration::from_secs(5));
    let in_d_from = Instant::now();

    let mut first = Agent::start(dir.path(), &args, &[]);
    let incident = wait_for(&mut first, &out, pid, Duration::from_secs(20), |i| {
        i["complete"] == true
    });
    let id = incident["id"].as_str().unwrap().to_string();
    let d_since = incident["wedged_threads"][0]["d_since"].clone();
    let detected_at = incident["detected_at"].clone();
    assert!(
        incident["process"]["start_time"].as_u64().is_some(),
        "{incident}"
    );
    assert_eq!(npd(&out).0, Some(1), "{test}: while watched");

    if kill {
        let _ = first.child.kill();
        let _ = first.child.wait();
        assert_eq!(status(&incidents_for(&out, pid)[0]), "open");
    } else {
        let (code, _, log) = first.terminate();
        assert_eq!(code, Some(0), "{log}");
        let stopped = &incidents_for(&out, pid)[0];
        assert_eq!(status(stopped), "still_wedged_at_exit");
    }
    let (code, message) = npd(&out);
    assert_eq!(
        code,
        Some(1),
        "{test}: nobody watching, process still in D: {message}"
    );
    // Nobody watches for a while.
    std::thread::sleep(Duration::from_millis(1500));

    let mut second = Agent::start(dir.path(), &args, &[]);
    second.wait_log("episode taken up", 1, Duration::from_secs(10));
    let adopted = wait_for(&mut second, &out, pid, Duration::from_secs(5), |i| {
        i["episode"]["status"] == "open"
    });
    assert_eq!(adopted["id"], id.as_str(), "the same incident");
    assert_eq!(adopted["wedged_threads"][0]["d_since"], d_since);
    assert_eq!(adopted["detected_at"], detected_at);
    assert_eq!(
        adopted["episode"]["unwatched"].as_array().map(Vec::len),
        Some(1),
        "{}",
        adopted["episode"]
    );
    let timeline = adopted["timeline"].to_string();
    assert!(timeline.contains("watcher restarted at "), "{timeline}");
    assert!(timeline.contains("still in D"), "{timeline}");
    assert_eq!(npd(&out).0, Some(1), "{test}: adopted");
    // Not a second incident, and not counted again.
    assert_eq!(incident_dirs(&out).len(), 1, "{:?}", incident_dirs(&out));
    let counted = || {
        std::fs::read_to_string(textfile.join("wedge_capture.prom"))
            .unwrap_or_default()
            .lines()
            .any(|l| l == "wedge_capture_incidents_total{trigger=\"wedge\"} 0")
    };
    let until = Instant::now() + Duration::from_secs(5);
    while !counted() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(counted(), "incidents_total moved: {}", second.log());

    fs.thaw().unwrap();
    let thawed = in_d_from.elapsed().as_secs_f64();
    // The first watcher saw the thread in D from its first scan (`d_since`): how long after the thread
    // entered D that was depends on the agent's start on a loaded machine, so the bound is from `d_since` to
    // the thaw, on the same clock (CLOCK_MONOTONIC), not from this test's own stopwatch.
    let thaw_mono = monotonic_s();
    let d_since_mono = d_since["monotonic_ns"].as_f64().unwrap() / 1e9;
    let watched = thaw_mono - d_since_mono;
    let resolved = wait_for(&mut second, &out, pid, Duration::from_secs(10), |i| {
        i["episode"]["status"] == "resolved"
    });
    helper.wait_exit(Duration::from_secs(5));
    let in_d = resolved["wedged_threads"][0]["in_d_s"].as_f64().unwrap();
    // The whole time in D, across both watchers (not the second watcher's share): from the first watcher's
    // `d_since` to the scan after the thaw.
    assert!(
        in_d >= watched - 0.25 && in_d <= watched + 1.0 && in_d <= thawed + 1.0,
        "in D for {in_d:.2} s; watched {watched:.2} s (from d_since to the thaw), in D {thawed:.2} s: {}",
        resolved["wedged_threads"][0]
    );
    let (code, message) = npd(&out);
    assert_eq!(code, Some(0), "{test}: after the thaw: {message}");
    assert_eq!(incident_dirs(&out).len(), 1);
    let log = second.log();
    assert!(
        !log.lines()
            .any(|l| l.contains(&format!("pid {pid} thread"))),
        "a second incident was opened:\n{log}"
    );
    let (code, _, log) = second.terminate();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn a_process_killed_while_nobody_watched_is_closed_as_outcome_unknown() {
    let test = "killed while unwatched";
    let Some(mut fs) = frozen_fs_or_skip(test) else {
        return;
    };
    let dir = TempDir::new("unwatched");
    let out = dir.path().join("incidents");
    let textfile = dir.path().join("textfile");
    std::fs::create_dir_all(&textfile).unwrap();
    let file = fs.create_file("target", b"x").unwrap();
    let comm = unique_comm("u");
    let program = link_as(dir.path(), &comm, Path::new(bin()));
    let pattern = format!("^{comm}$");
    let (out_s, text_s) = (out.to_str().unwrap(), textfile.to_str().unwrap());
    let args = agent_args(out_s, &pattern, text_s);

    fs.freeze().unwrap();
    let mut helper = wedge_helper(&program, &file, &[], "unwatched ioctl FS_IOC_SETFLAGS");
    let pid = helper.pid();
    wait_in_d(pid, Duration::from_secs(5));
    let mut first = Agent::start(dir.path(), &args, &[]);
    wait_for(&mut first, &out, pid, Duration::from_secs(20), |i| {
        i["complete"] == true
    });
    let (code, _, log) = first.terminate();
    assert_eq!(code, Some(0), "{log}");
    // Killed (it dies once the filesystem lets its write go) while nobody watches.
    let _ = helper.child.kill();
    fs.thaw().unwrap();
    assert!(helper.wait_exit(Duration::from_secs(5)).is_some());

    let mut second = Agent::start(dir.path(), &args, &[]);
    second.wait_log("outcome unknown", 1, Duration::from_secs(10));
    let closed = &incidents_for(&out, pid)[0];
    assert_eq!(status(closed), "unknown", "{}", closed["episode"]);
    let why = closed["episode"]["outcome_unknown"].as_str().unwrap();
    assert!(why.starts_with("not watched between "), "{why}");
    assert!(why.contains("the process is gone"), "{why}");
    assert!(
        closed["verdict"]
            .as_str()
            .unwrap()
            .contains("outcome unknown"),
        "{}",
        closed["verdict"]
    );
    assert_eq!(closed["wedged_threads"][0]["fate"], "unknown");
    assert_eq!(npd(&out).0, Some(0), "{test}: the process is gone");
    assert_eq!(incident_dirs(&out).len(), 1);
    let (code, _, log) = second.terminate();
    assert_eq!(code, Some(0), "{log}");
}

#[test]
fn npd_check_help_states_the_codes_and_the_default_max_age() {
    let help = Command::new(bin())
        .args(["npd-check", "--help"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    for needle in [
        "0 = False, 1 = True",
        "(default 1h)",
        "  2  unknown",
        "  1  a wedge",
        "  0  none",
    ] {
        assert!(text.contains(needle), "{needle:?} missing:\n{text}");
    }
}

#[test]
fn run_exit_3_leaves_an_episode_npd_check_reports() {
    let Some(mut wedge) = Wedge::new("run exit 3 then npd-check", "continuity-run") else {
        return;
    };
    let done = wedge
        .run()
        .threshold("1")
        .interval("0.25")
        .exit_after("0.5")
        .finish(Duration::from_secs(30));
    assert_eq!(done.code, Some(3), "stderr: {}", done.stderr);
    let found = incident_dirs(&wedge.out);
    assert_eq!(found.len(), 1, "{found:?}");
    let (code, message) = npd(&wedge.out);
    assert_eq!(
        code,
        Some(1),
        "`run` said still wedged; npd-check agrees: {message}"
    );
    assert!(message.contains("wedged in"), "{message}");
    // A later `run` on the same store takes the episode up (its process is not the command's), follows it
    // while its own command runs, and leaves it still wedged at its exit: the same one incident.
    let again = Command::new(bin())
        .args(["run", "--no-nvidia-smi", "--interval", "0.25", "--out"])
        .arg(&wedge.out)
        .args(["--", "sleep", "0.6"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&again.stderr).to_string()
        + &String::from_utf8_lossy(&again.stdout);
    assert_eq!(again.status.code(), Some(0), "{said}");
    assert!(said.contains("episode taken up"), "{said}");
    assert_eq!(incident_dirs(&wedge.out).len(), 1);
    let taken: serde_json::Value =
        serde_json::from_slice(&std::fs::read(found[0].join("incident.json")).unwrap()).unwrap();
    assert_eq!(
        status(&taken),
        "still_wedged_at_exit",
        "{}",
        taken["episode"]
    );
    assert_eq!(
        taken["episode"]["unwatched"].as_array().map(Vec::len),
        Some(1)
    );
    assert!(taken["timeline"]
        .to_string()
        .contains("watcher restarted at "));
    assert_eq!(npd(&wedge.out).0, Some(1));
    wedge.fs.thaw().unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let mut last = npd(&wedge.out);
    while last.0 != Some(0) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
        last = npd(&wedge.out);
    }
    assert_eq!(
        last.0,
        Some(0),
        "the helper is gone after the thaw: {}",
        last.1
    );
    wedge.remove_scratch();
}

/// CLOCK_MONOTONIC in seconds: the clock of an incident's `monotonic_ns` stamps.
fn monotonic_s() -> f64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9
}
