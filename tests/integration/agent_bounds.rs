//! Integration tests: `wedge-capture agent`'s bounds and setup — short-lived targets leave nothing behind,
//! `--check-config`, the systemd unit verifies, the rate limit, the GPU target source (the daemon's wedges,
//! signals and sd_notify: agent.rs).
//!
//! Tests that need root, loop devices or a writable cgroup v2 skip with a message, except with CI=true,
//! where they must run and fail loudly when they cannot set up.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::agent::{
    incidents_for, link_as, unique_comm, wait_in_d, wait_incident, Agent, Helper, TempDir, FAST,
};
use crate::util::{bin, frozen_fs_or_skip, in_ci};

fn fd_count(pid: i32) -> usize {
    // Every entry, not only the links capture can parse: a leak of any kind counts.
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Not root-only. AGENT_CHURN scales the number of processes (default 200).
#[test]
fn short_lived_targets_leave_no_fds_or_memory_behind() {
    let total: usize = std::env::var("AGENT_CHURN")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let dir = TempDir::new("churn");
    let comm = unique_comm("n");
    let program = link_as(dir.path(), &comm, Path::new("/bin/sleep"));
    let out = dir.path().join("incidents");
    let pattern = format!("^{comm}$");
    let mut agent = Agent::start(
        dir.path(),
        &[
            "--out",
            out.to_str().unwrap(),
            "--match-comm",
            &pattern,
            "--interval",
            "20ms",
        ],
        &[],
    );
    agent.wait_log("started", 1, Duration::from_secs(5));
    let batch = 25;
    let run_batch = |n: usize| {
        let mut children: Vec<Child> = (0..n)
            .map(|_| Command::new(&program).arg("0.15").spawn().unwrap())
            .collect();
        for child in &mut children {
            child.wait().unwrap();
        }
    };
    // Warm up (allocator pools, caches at their working size), then measure.
    for _ in 0..2 {
        run_batch(batch);
    }
    std::thread::sleep(Duration::from_millis(200));
    let (fds_before, rss_before) = (fd_count(agent.pid()), rss_kib(agent.pid()));
    let mut done = 0;
    while done < total {
        run_batch(batch.min(total - done));
        done += batch;
    }
    std::thread::sleep(Duration::from_millis(300));
    let (fds_after, rss_after) = (fd_count(agent.pid()), rss_kib(agent.pid()));
    let (code, _, log) = agent.terminate();
    assert_eq!(code, Some(0), "{log}");
    // Targets seen: the `watching pid` lines written, plus those the log rate limit left out (its summary,
    // written at the latest at stop, counts them by cause).
    let left_out: usize = log
        .lines()
        .filter_map(|l| l.split("lines left out in the last ").nth(1))
        .filter_map(|rest| rest.split("(target ").nth(1))
        .filter_map(|rest| rest.split([',', ')']).next()?.parse::<usize>().ok())
        .sum();
    let seen = log.matches("watching pid").count() + left_out;
    let started = total + 2 * batch;
    assert!(
        seen >= started * 3 / 4,
        "only {seen} of {started} short-lived targets were seen:\n{log}"
    );
    assert!(
        fds_after <= fds_before + 1,
        "fds grew from {fds_before} to {fds_after} after {total} targets came and went"
    );
    assert!(
        rss_after <= rss_before + 2048,
        "VmRSS grew from {rss_before} KiB to {rss_after} KiB after {total} targets came and went"
    );
    eprintln!(
        "churn: {seen} of {started} targets seen; fds {fds_before} → {fds_after}; VmRSS {rss_before} → {rss_after} KiB"
    );
}

#[test]
fn check_config_prints_the_effective_settings_and_refuses_bad_ones() {
    let dir = TempDir::new("check");
    let config = dir.path().join("agent.json");
    std::fs::write(
        &config,
        r#"{"match_comm": ["^python"], "interval": "2s", "gpu": true}"#,
    )
    .unwrap();
    let output = Command::new(bin())
        .args(["agent", "--check-config", "--config"])
        .arg(&config)
        .args(["--interval", "500ms"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let settings: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(settings["interval"], 0.5);
    assert_eq!(settings["gpu"], true);
    assert_eq!(settings["match_comm"][0], "^python");

    std::fs::write(&config, r#"{"match_comm": ["^python"], "treshold": 5}"#).unwrap();
    for extra in [&["--check-config"][..], &[][..]] {
        let output = Command::new(bin())
            .arg("agent")
            .args(extra)
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{output:?}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("treshold"));
    }
    // Nothing to watch is a usage error too.
    let output = Command::new(bin())
        .args(["agent", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("nothing to watch"));
}

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// `systemd-analyze verify` on the unit, with ExecStart pointing at the built binary: no error and no
/// warning (unknown keys and bad values are only warnings, so any output fails the test).
#[test]
fn systemd_unit_verifies() {
    let Ok(version) = Command::new("systemd-analyze").arg("--version").output() else {
        if in_ci() {
            panic!("CI=true but systemd-analyze is missing (.ci/run installs systemd)");
        }
        eprintln!("skipping systemd_unit_verifies: systemd-analyze is not installed");
        return;
    };
    assert!(version.status.success());
    let dir = TempDir::new("unit");
    let unit = std::fs::read_to_string(repo_file("systemd/wedge-capture.service")).unwrap();
    assert!(unit.contains("Type=notify") && unit.contains("WatchdogSec="));
    let exec = unit
        .lines()
        .find(|l| l.starts_with("ExecStart="))
        .expect("ExecStart");
    assert!(exec.contains(" agent "), "{exec}");
    let rewritten = unit.replace("/usr/local/bin/wedge-capture", bin());
    assert_ne!(
        rewritten, unit,
        "ExecStart does not use /usr/local/bin/wedge-capture"
    );
    let path = dir.path().join("wedge-capture.service");
    std::fs::write(&path, rewritten).unwrap();
    let output = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "systemd-analyze verify failed:\n{text}"
    );
    assert!(
        text.trim().is_empty(),
        "systemd-analyze verify warned:\n{text}"
    );

    // The tmpfiles entry creates the output and ring directories with the documented modes.
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let status = Command::new("systemd-tmpfiles")
        .arg("--create")
        .arg(format!("--root={}", root.display()))
        .arg(repo_file("systemd/wedge-capture.tmpfiles.conf"))
        .status();
    match status {
        Ok(status) => {
            assert!(status.success());
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &str| {
                std::fs::metadata(root.join(p))
                    .unwrap()
                    .permissions()
                    .mode()
                    & 0o7777
            };
            assert_eq!(mode("var/lib/wedge-capture"), 0o711);
            assert_eq!(mode("var/lib/wedge-capture/incidents"), 0o700);
            assert_eq!(mode("var/lib/wedge-capture/rings"), 0o1777);
        }
        Err(err) if in_ci() => panic!("systemd-tmpfiles: {err}"),
        Err(err) => eprintln!("skipping the tmpfiles check: {err}"),
    }
    // The example config is valid for the agent.
    let output = Command::new(bin())
        .args(["agent", "--check-config", "--config"])
        .arg(repo_file("systemd/agent.example.json"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}

/// A process that wedges, recovers and wedges again gets one incident per --rate-limit window: after its
/// first incident closed, it is left out of the watch.
#[test]
fn rate_limit_allows_one_incident_per_process_per_window() {
    let Some(mut fs) = frozen_fs_or_skip("agent rate_limit") else {
        return;
    };
    let dir = TempDir::new("rate");
    let file = fs.create_file("target", b"x").unwrap();
    let comm = unique_comm("r");
    let shell = link_as(dir.path(), &comm, Path::new("/bin/sh"));
    // Writes the file every 50 ms: in D (waiting for the thaw) whenever the filesystem is frozen.
    let mut writer = Helper {
        child: Command::new(&shell)
            .args([
                "-c",
                &format!(
                    "while :; do echo x > '{}'; sleep 0.05; done",
                    file.display()
                ),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    };
    let pid = writer.pid();
    let out = dir.path().join("incidents");
    let pattern = format!("^{comm}$");
    let mut args: Vec<&str> = vec!["--out", out.to_str().unwrap(), "--match-comm", &pattern];
    args.extend_from_slice(FAST);
    args.extend_from_slice(&["--rate-limit", "1h"]);
    let mut agent = Agent::start(dir.path(), &args, &[]);
    agent.wait_log(&format!("watching pid {pid}"), 1, Duration::from_secs(5));
    fs.freeze().unwrap();
    wait_incident(&mut agent, &out, pid, Duration::from_secs(20));
    fs.thaw().unwrap();
    agent.wait_log("recovered after", 1, Duration::from_secs(10));
    // Closed and within the window: no longer watched, though alive.
    agent.wait_log(
        &format!("pid {pid} no longer watched"),
        1,
        Duration::from_secs(5),
    );
    assert!(
        writer.child.try_wait().unwrap().is_none(),
        "the writer died"
    );
    fs.freeze().unwrap();
    wait_in_d(pid, Duration::from_secs(5));
    // Longer than threshold + K samples: a watched process would have a second incident by now.
    std::thread::sleep(Duration::from_millis(2500));
    let count = incidents_for(&out, pid).len();
    fs.thaw().unwrap();
    let (code, _, log) = agent.terminate();
    assert_eq!(count, 1, "rate limit broken:\n{log}");
    assert_eq!(code, Some(0), "{log}");
    drop(writer);
}

/// `--gpu` on a host without an NVIDIA driver: a file named like an NVIDIA device node under /dev (root
/// only) stands in for it. A process that opens it after the agent started is found once its fd count
/// changes (at most --gpu-rescan later).
#[test]
fn gpu_selects_processes_holding_an_nvidia_device_open() {
    let device = PathBuf::from(format!(
        "/dev/nvidia-wedge-capture-test-{}",
        std::process::id()
    ));
    if let Err(err) = std::fs::write(&device, b"") {
        if in_ci() {
            panic!(
                "agent gpu: CI=true but {} cannot be created: {err}",
                device.display()
            );
        }
        eprintln!("skipping agent gpu: {}: {err}", device.display());
        return;
    }
    struct Remove(PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _remove = Remove(device.clone());
    let dir = TempDir::new("gpu");
    let out = dir.path().join("incidents");
    let mut agent = Agent::start(
        dir.path(),
        &[
            "--out",
            out.to_str().unwrap(),
            "--gpu",
            "--interval",
            "100ms",
            "--gpu-rescan",
            "200ms",
        ],
        &[],
    );
    agent.wait_log("started", 1, Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(300));
    // Opens the "device" a while after it started (the agent has seen it without one by then).
    let mut holder = Command::new("sh")
        .args([
            "-c",
            &format!("sleep 0.5; exec 3<'{}'; exec sleep 30", device.display()),
        ])
        .spawn()
        .unwrap();
    let pid = holder.id();
    let log = agent.wait_log(
        &format!("watching pid {pid}: holds {} open", device.display()),
        1,
        Duration::from_secs(5),
    );
    let _ = holder.kill();
    let _ = holder.wait();
    agent.wait_log(
        &format!("pid {pid} no longer watched"),
        1,
        Duration::from_secs(5),
    );
    let (code, _, _) = agent.terminate();
    assert_eq!(code, Some(0), "{log}");
}
