//! Integration tests: the agent under hostile conditions it does not control — signal storms, a probe
//! that never returns, untrusted names full of control characters — and the small input defects of
//! issue 13 (empty paths, patterns that match every process, unknown `run` flags, the `--out` mode).
//!
//! The wedge tests use a real frozen loop-mounted ext4 (FrozenFs); with CI=true they must run.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::agent::{incidents_for, link_as, unique_comm, wait_in_d, wedge_helper, Agent, TempDir};
use crate::util::{bin, frozen_fs_or_skip};

const INTERVAL_S: f64 = 0.1;
const THRESHOLD_S: f64 = 1.0;
const FAST: &[&str] = &["--interval", "100ms", "--threshold", "1s", "--samples", "3"];

fn monotonic_ns(timestamp: &serde_json::Value) -> u64 {
    timestamp["monotonic_ns"]
        .as_u64()
        .unwrap_or_else(|| panic!("no monotonic time in {timestamp}"))
}

/// From the first scan that saw the wedged thread in D to the detection, in seconds.
fn detection_s(incident: &serde_json::Value) -> f64 {
    let d_since = monotonic_ns(&incident["wedged_threads"][0]["d_since"]);
    let detected = monotonic_ns(&incident["detected_at"]);
    detected.saturating_sub(d_since) as f64 / 1e9
}

#[test]
fn a_sigusr1_storm_neither_delays_sigterm_nor_hides_the_wedge() {
    let Some(mut fs) = frozen_fs_or_skip("hostile_daemon storm") else {
        return;
    };
    let dir = TempDir::new("storm");
    let file = fs.create_file("target", b"x").unwrap();
    fs.freeze().unwrap();
    let comm = unique_comm("s");
    let program = link_as(dir.path(), &comm, Path::new(bin()));
    let mut helper = wedge_helper(&program, &file, &[], "storm ioctl FS_IOC_SETFLAGS");
    wait_in_d(helper.pid(), Duration::from_secs(5));
    let out = dir.path().join("incidents");
    let pattern = format!("^{comm}$");
    let mut args = vec!["--out", out.to_str().unwrap(), "--match-comm", &pattern];
    args.extend_from_slice(FAST);
    let mut agent = Agent::start(dir.path(), &args, &[]);
    agent.wait_log(
        &format!("watching pid {}", helper.pid()),
        1,
        Duration::from_secs(10),
    );

    // 1,000 SIGUSR1 2 ms apart while the wedge is being detected, then SIGTERM at once.
    for _ in 0..1000 {
        agent.signal(libc::SIGUSR1);
        std::thread::sleep(Duration::from_millis(2));
    }
    let (code, took, log) = agent.terminate();
    assert_eq!(code, Some(0), "exit status after SIGTERM:\n{log}");
    assert!(
        took < Duration::from_secs(2),
        "SIGTERM took {took:?} (limit 2 s)"
    );

    let incidents = incidents_for(&out, helper.pid());
    let (on_demand, wedges): (Vec<_>, Vec<_>) =
        incidents.iter().partition(|i| i["trigger"] == "on_demand");
    // One target, one minute's window: at most one on-demand incident however many signals.
    assert!(
        on_demand.len() <= 1,
        "{} on-demand incidents for one target:\n{log}",
        on_demand.len()
    );
    assert!(
        !on_demand.is_empty(),
        "the storm produced no on-demand incident at all:\n{log}"
    );
    assert_eq!(wedges.len(), 1, "the wedge's incident:\n{log}");
    let wedge = wedges[0];
    assert_eq!(wedge["complete"], true, "{wedge}");
    assert!(
        wedge["verdict"]
            .as_str()
            .unwrap_or_default()
            .contains("FS_IOC_SETFLAGS"),
        "{}",
        wedge["verdict"]
    );
    let detected = detection_s(wedge);
    assert!(
        detected <= THRESHOLD_S + 2.0 * INTERVAL_S,
        "detected {detected:.3} s after the first scan saw D (limit threshold + 2 intervals)"
    );
    eprintln!(
        "storm: SIGTERM exit {took:?}, {} on-demand incident(s), wedge detected {detected:.3} s after D \
         was first seen, {} log lines",
        on_demand.len(),
        log.lines().count()
    );
    // The storm is at most one summary line, never one line per signal. (Under a heavily loaded machine
    // the kernel may merge the whole storm into one or two deliveries: then no summary is due.)
    let bursts: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("SIGUSR1 burst: "))
        .collect();
    assert!(bursts.len() <= 1, "{log}");
    if let Some(summary) = bursts.first() {
        // The kernel merges a SIGUSR1 sent while one is pending, so fewer may arrive than were sent.
        let received: u64 = summary
            .split("SIGUSR1 burst: ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no signal count in {summary}"));
        assert!((2..=1000).contains(&received), "{summary}");
        assert!(summary.contains("on_demand_rate_limit"), "{summary}");
    }
    let sigusr1_lines = log
        .lines()
        .filter(|l| l.contains("SIGUSR1") || l.contains("on-demand incident"))
        .count();
    // The run that captured (its start, the incident, its completion) and the summary.
    assert!(sigusr1_lines <= 4, "{log}");
    assert!(
        log.lines().count() < 40,
        "{} log lines:\n{log}",
        log.lines().count()
    );

    fs.thaw().unwrap();
    assert!(
        helper.wait_exit(Duration::from_secs(10)).is_some(),
        "the helper did not finish after the thaw"
    );
}

#[test]
fn sigterm_during_a_hanging_probe_stops_within_2s() {
    let Some(mut fs) = frozen_fs_or_skip("hostile_daemon hanging probe") else {
        return;
    };
    let dir = TempDir::new("probe");
    let file = fs.create_file("target", b"x").unwrap();
    fs.freeze().unwrap();
    let comm = unique_comm("p");
    let program = link_as(dir.path(), &comm, Path::new(bin()));
    let mut helper = wedge_helper(&program, &file, &[], "probe ioctl FS_IOC_SETFLAGS");
    wait_in_d(helper.pid(), Duration::from_secs(5));
    // A FIFO nobody writes: opening it blocks, like a driver file whose lock is held.
    let fifo = dir.path().join("hung-driver-file");
    crate::util::mkfifo(&fifo, 0o600);
    let out = dir.path().join("incidents");
    let pattern = format!("^{comm}$");
    let mut args = vec![
        "--out",
        out.to_str().unwrap(),
        "--match-comm",
        &pattern,
        "--probe-timeout",
        "60s",
        "--extra-probe",
        fifo.to_str().unwrap(),
    ];
    args.extend_from_slice(FAST);
    let agent = Agent::start(dir.path(), &args, &[]);
    // The minimal incident is durable, the probes are running; the FIFO one will not return. (The log
    // line comes only when the capture returns.)
    let until = Instant::now() + Duration::from_secs(10);
    while incidents_for(&out, helper.pid()).is_empty() {
        assert!(
            Instant::now() < until,
            "no incident within 10 s:\n{}",
            agent.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !incidents_for(&out, helper.pid())
            .iter()
            .any(|i| i["complete"] == true),
        "the capture finished although a probe hangs:\n{}",
        agent.log()
    );
    let (code, took, log) = agent.terminate();
    eprintln!("hanging probe: SIGTERM exit {took:?}");
    assert_eq!(code, Some(0), "{log}");
    assert!(
        took < Duration::from_secs(2),
        "SIGTERM took {took:?} mid-probe (limit 2 s; the probe deadline is 60 s):\n{log}"
    );
    // The incident in progress was finished, and says the probe was interrupted, not hung.
    let incidents = incidents_for(&out, helper.pid());
    assert_eq!(incidents.len(), 1, "{log}");
    let incident = &incidents[0];
    assert_eq!(incident["complete"], true, "{incident}");
    let probe = incident["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| {
            p["name"]
                .as_str()
                .unwrap_or_default()
                .starts_with("extra-1")
        })
        .unwrap_or_else(|| panic!("no extra probe in {}", incident["probes"]));
    let error = probe["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("interrupted after") && error.contains("stop was requested"),
        "{probe}"
    );

    fs.thaw().unwrap();
    assert!(helper.wait_exit(Duration::from_secs(10)).is_some());
}

/// A comm full of control characters: the program runs through a symlink of that name.
#[test]
fn control_characters_in_a_comm_are_escaped_in_plain_and_json_logs() {
    let dir = TempDir::new("escape");
    // ESC (a terminal colour) and a newline forging a journal line, within the 15-byte comm.
    let comm = "wc\x1b[31m\n<3>X";
    assert!(comm.len() <= 15);
    let mut sleeper = Command::new(link_as(dir.path(), comm, Path::new("/bin/sleep")))
        .arg("30")
        .spawn()
        .unwrap();
    let pid = sleeper.id() as i32;
    let config = dir.path().join("agent.json");
    let out = dir.path().join("incidents");
    std::fs::File::create(&config)
        .unwrap()
        .write_all(
            format!(
                r#"{{"out": "{}", "match_comm": ["^wc\u001b\\[31m\n<3>X$"], "interval": "100ms"}}"#,
                out.display()
            )
            .as_bytes(),
        )
        .unwrap();
    for format in ["plain", "json"] {
        // Agent::start fixes the plain format; this one needs to choose.
        let log = dir.path().join(format!("agent-{format}.log"));
        let child = Command::new(bin())
            .args([
                "agent",
                "--no-nvidia-smi",
                "--log-format",
                format,
                "--config",
            ])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .unwrap();
        let mut agent = Agent { child, log };
        agent.wait_log(&format!("watching pid {pid}"), 1, Duration::from_secs(10));
        let (code, _, log) = agent.terminate();
        assert_eq!(code, Some(0), "{log}");
        assert!(
            !log.contains('\x1b'),
            "raw ESC in the {format} log:\n{log:?}"
        );
        assert!(
            !log.contains("\n<3>X"),
            "a forged line in the {format} log:\n{log:?}"
        );
        let line = log
            .lines()
            .find(|l| l.contains(&format!("watching pid {pid}")))
            .unwrap();
        let expected = r"comm `wc\e[31m\n<3>X` matches";
        if format == "json" {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            // Both the message and the structured field read the same as the plain line.
            assert!(value["msg"].as_str().unwrap().contains(expected), "{line}");
            assert!(value["why"].as_str().unwrap().contains(expected), "{line}");
            for line in log.lines() {
                serde_json::from_str::<serde_json::Value>(line)
                    .unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
            }
        } else {
            assert!(line.contains(expected), "{line:?}");
        }
    }
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

#[test]
fn run_refuses_an_unknown_flag_before_the_command() {
    let dir = TempDir::new("bogus");
    let marker = dir.path().join("ran");
    let output = Command::new(bin())
        .args(["run", "--bogus", "--out"])
        .arg(dir.path().join("incidents"))
        .args(["--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--bogus"), "{stderr}");
    assert!(!marker.exists(), "the command ran despite the usage error");
    // Flags after the command's name are the command's own.
    let output = Command::new(bin())
        .args(["run", "--no-nvidia-smi", "--out"])
        .arg(dir.path().join("incidents"))
        .args(["--", "sh", "-c", "touch \"$1\"", "sh"])
        .arg(&marker)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    assert!(marker.exists());
}

#[test]
fn check_config_refuses_empty_paths_and_match_everything_patterns() {
    let dir = TempDir::new("validate");
    let config = dir.path().join("agent.json");
    for (text, needle) in [
        (r#"{"out": "", "gpu": true}"#, "out: empty path"),
        (r#"{"gpu": true, "ring_dir": [""]}"#, "ring_dir: empty path"),
        (r#"{"match_comm": [""]}"#, "empty pattern"),
        (r#"{"match_comm": [".*"]}"#, "matches the empty string"),
    ] {
        std::fs::write(&config, text).unwrap();
        // Refused at validation, by --check-config and by the agent alike (never "valid, then exit 1").
        for check in [true, false] {
            let mut command = Command::new(bin());
            command.arg("agent").arg("--config").arg(&config);
            if check {
                command.arg("--check-config");
            }
            let output = command.output().unwrap();
            assert_eq!(output.status.code(), Some(2), "{text}: {output:?}");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(stderr.contains(needle), "{text}: {stderr}");
        }
    }
}

#[test]
fn the_agent_creates_its_output_directory_0700() {
    let dir = TempDir::new("mode");
    let out = dir.path().join("new").join("incidents");
    let pattern = format!("^{}$", unique_comm("m"));
    let mut agent = Agent::start(
        dir.path(),
        &["--out", out.to_str().unwrap(), "--match-comm", &pattern],
        &[],
    );
    agent.wait_log("started (pid", 1, Duration::from_secs(10));
    let (code, _, log) = agent.terminate();
    assert_eq!(code, Some(0), "{log}");
    let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "--out created {mode:o}");
}

/// SIGUSR1 while nothing is watched, many times: still one line for the burst, and SIGTERM at once.
#[test]
fn a_storm_with_no_target_is_one_log_line() {
    let dir = TempDir::new("empty-storm");
    let out = dir.path().join("incidents");
    let pattern = format!("^{}$", unique_comm("n"));
    let mut agent = Agent::start(
        dir.path(),
        &["--out", out.to_str().unwrap(), "--match-comm", &pattern],
        &[],
    );
    agent.wait_log("started (pid", 1, Duration::from_secs(10));
    for _ in 0..200 {
        agent.signal(libc::SIGUSR1);
        std::thread::sleep(Duration::from_millis(2));
    }
    // Let the burst end on its own (1 s of quiet): its summary, if any, is logged then, not at the stop.
    std::thread::sleep(Duration::from_millis(1500));
    let before_stop = agent.log();
    let (code, took, log) = agent.terminate();
    assert_eq!(code, Some(0), "{log}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(log.matches("no process is watched now").count(), 1, "{log}");
    // One line for the whole burst at most; it comes only when the kernel delivered more than one of
    // the 200 (it merges a SIGUSR1 sent while one is pending).
    let bursts = log.matches("SIGUSR1 burst: ").count();
    assert!(bursts <= 1, "{log}");
    assert_eq!(
        before_stop.matches("SIGUSR1 burst: ").count(),
        bursts,
        "{log}"
    );
    assert!(log.lines().count() <= 5, "{log}");
}
