//! Issue 26 item 5: no storm fills the journal. A SIGHUP storm is one reload per interval and one summary
//! line; a 30 s fork storm of matching processes stays under the per-minute cap of docs/agent.md ("Logging");
//! a real wedge (frozen ext4) started during either storm is captured within threshold + 2 intervals.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::agent::{link_as, unique_comm, wait_in_d, wait_incident, wedge_helper, Agent, TempDir};
use crate::util::{bin, frozen_fs_or_skip};

/// `LIMITED_LINES_PER_MINUTE` + its one summary line (agent/src/daemon/log.rs, docs/agent.md).
const CAP_PER_MINUTE: usize = 51;
/// Lines the agent writes whatever containers do: started, stopping, and the like.
const OWN_LINES: usize = 8;

fn monotonic_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// Seconds from `in_d_ns` to the incident's detection.
fn detection_latency(incident: &serde_json::Value, in_d_ns: u64) -> f64 {
    let detected_ns = incident["detected_at"]["monotonic_ns"].as_u64().unwrap();
    detected_ns.saturating_sub(in_d_ns) as f64 / 1e9
}

#[test]
fn a_sighup_storm_is_one_reload_per_interval_and_one_summary_line() {
    let test = "SIGHUP storm";
    let Some(mut fs) = frozen_fs_or_skip(test) else {
        return;
    };
    let dir = TempDir::new("hup-storm");
    let out = dir.path().join("incidents");
    let file = fs.create_file("target", b"x").unwrap();
    let comm = unique_comm("h");
    let program = link_as(dir.path(), &comm, Path::new(bin()));
    let pattern = format!("^{comm}$");
    let (threshold, interval) = (1.0, 0.25);
    let mut agent = Agent::start(
        dir.path(),
        &[
            "--out",
            out.to_str().unwrap(),
            "--match-comm",
            &pattern,
            "--interval",
            "250ms",
            "--threshold",
            "1s",
            "--samples",
            "2",
        ],
        &[],
    );
    agent.wait_log("started", 1, Duration::from_secs(10));
    fs.freeze().unwrap();
    let mut helper = wedge_helper(&program, &file, &[], "hup storm ioctl FS_IOC_SETFLAGS");
    // 1,000 SIGHUPs over about 2 s, while the helper goes into D.
    let storm_started = Instant::now();
    let mut in_d_ns = None;
    for sent in 0..1000 {
        agent.signal(libc::SIGHUP);
        if sent % 50 == 0 && in_d_ns.is_none() {
            let root = capture::ProcRoot::default();
            let pid = helper.pid();
            let in_d = root.tasks(pid).unwrap_or_default().iter().any(|&tid| {
                root.read_task_stat(pid, tid)
                    .is_ok_and(|stat| stat.state == 'D')
            });
            if in_d {
                in_d_ns = Some(monotonic_ns());
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let storm = storm_started.elapsed().as_secs_f64();
    let in_d_ns = in_d_ns.unwrap_or_else(|| {
        wait_in_d(helper.pid(), Duration::from_secs(5));
        monotonic_ns()
    });
    let incident = wait_incident(&mut agent, &out, helper.pid(), Duration::from_secs(20));
    let latency = detection_latency(&incident, in_d_ns);
    // The storm is over once no SIGHUP came for 1 s: then its one summary line.
    let log = agent.wait_log("SIGHUP storm:", 1, Duration::from_secs(10));
    let (code, _, log_at_exit) = agent.terminate();
    assert_eq!(code, Some(0), "{log_at_exit}");
    fs.thaw().unwrap();
    assert!(helper.wait_exit(Duration::from_secs(10)).is_some());

    let summary = log.lines().find(|l| l.contains("SIGHUP storm:")).unwrap();
    let reloads: f64 = summary
        .split(" served by ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{summary}"));
    let reload_lines = log.matches("configuration reloaded").count();
    let lines = log_at_exit.lines().count();
    eprintln!(
        "{test}: 1000 SIGHUP in {storm:.1} s: {summary:?}; {reload_lines} reload line(s), {lines} log lines \
         in all; wedge detected {latency:.2} s after D"
    );
    assert_eq!(log.matches("SIGHUP storm:").count(), 1, "{log}");
    assert!(
        reloads <= storm / interval + 2.0,
        "{test}: more than one reload per interval: {summary}"
    );
    assert_eq!(
        reload_lines, 1,
        "{test}: one line for identical reloads:\n{log}"
    );
    assert!(lines <= 20, "{test}: {lines} lines:\n{log_at_exit}");
    assert!(
        latency <= threshold + 2.0 * interval,
        "{test}: detected {latency:.2} s after D (limit {:.2} s)",
        threshold + 2.0 * interval
    );
}

#[test]
fn a_fork_storm_of_matching_processes_stays_under_the_journal_cap() {
    let test = "fork storm";
    let Some(mut fs) = frozen_fs_or_skip(test) else {
        return;
    };
    let dir = TempDir::new("fork-storm");
    let out = dir.path().join("incidents");
    let file = fs.create_file("target", b"x").unwrap();
    let storm_comm = unique_comm("s");
    let wedge_comm = unique_comm("w");
    let storm_program = link_as(dir.path(), &storm_comm, Path::new(bin()));
    let wedge_program = link_as(dir.path(), &wedge_comm, Path::new(bin()));
    let pattern = format!("^({storm_comm}|{wedge_comm})$");
    let (threshold, interval) = (1.0, 0.1);
    let mut agent = Agent::start(
        dir.path(),
        &[
            "--out",
            out.to_str().unwrap(),
            "--match-comm",
            &pattern,
            "--interval",
            "100ms",
            "--threshold",
            "1s",
            "--samples",
            "2",
        ],
        &[],
    );
    let agent_started = Instant::now();
    agent.wait_log("started", 1, Duration::from_secs(10));
    let storm_seconds = 30;
    let storm = Command::new(&storm_program)
        .args(["internal", "churn", "--seconds", &storm_seconds.to_string()])
        .args(["--processes", "20", "--threads", "1", "--work-ms", "200"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The wedge starts in the middle of the storm.
    std::thread::sleep(Duration::from_secs(10));
    fs.freeze().unwrap();
    let mut helper = wedge_helper(
        &wedge_program,
        &file,
        &[],
        "fork storm ioctl FS_IOC_SETFLAGS",
    );
    wait_in_d(helper.pid(), Duration::from_secs(5));
    let in_d_ns = monotonic_ns();
    let incident = wait_incident(&mut agent, &out, helper.pid(), Duration::from_secs(20));
    let latency = detection_latency(&incident, in_d_ns);
    let storm_out = storm.wait_with_output().unwrap();
    let started = String::from_utf8_lossy(&storm_out.stderr)
        .trim()
        .to_string();
    let (code, took, log) = agent.terminate();
    let ran = agent_started.elapsed();
    let windows = ran.as_secs() as usize / 60 + 1;
    assert_eq!(code, Some(0), "{log}");
    fs.thaw().unwrap();
    assert!(helper.wait_exit(Duration::from_secs(10)).is_some());

    let lines = log.lines().count();
    let summary = log
        .lines()
        .find(|l| l.contains("log rate limit: "))
        .unwrap_or_else(|| panic!("{test}: no summary line:\n{log}"));
    let left_out: u64 = summary
        .split("log rate limit: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    eprintln!(
        "{test}: {started} in {storm_seconds} s; the agent wrote {lines} log lines in {:.0} s ({left_out} \
         left out: {summary:?}); wedge detected {latency:.2} s after D; SIGTERM took {took:?}",
        ran.as_secs_f64()
    );
    // The storm really happened: thousands of per-process lines were due.
    assert!(left_out >= 500, "{test}: {summary}");
    assert!(summary.contains("target "), "{summary}");
    // Each limiter window (a minute, from the agent's start) at most the cap; one more summary at stop.
    assert!(
        lines <= CAP_PER_MINUTE * windows + 1 + OWN_LINES,
        "{test}: {lines} lines in {windows} minute(s) (cap {CAP_PER_MINUTE} a minute):\n{log}"
    );
    assert!(
        latency <= threshold + 2.0 * interval,
        "{test}: detected {latency:.2} s after D (limit {:.2} s)",
        threshold + 2.0 * interval
    );
}
