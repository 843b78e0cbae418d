//! Integration tests: `report list|show|bundle` on a hostile incident directory (issue 13): a FIFO named
//! incident.json, an incident directory that is a symlink, a bundle that cannot be written, a comm with terminal
//! escapes.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use reports::model::Incident;
use reports::{Retention, Store};

use crate::util::bin;

const FIXTURE: &str = include_str!("../../reports/tests/data/incident-v1.json");
/// Nothing here may take longer; the FIFO used to make `report list` hang forever.
const BOUND: Duration = Duration::from_secs(10);

/// Run `wedge-capture report ARGS`, killed if it runs past [`BOUND`].
fn report(args: &[&str]) -> Output {
    let mut child = Command::new(bin())
        .arg("report")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run wedge-capture");
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`report {}` still running after {BOUND:?}", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A store holding one complete incident; returns its id.
fn store_with_one(dir: &Path, comm: &str) -> String {
    let store = Store::open(dir, Retention::UNLIMITED).unwrap();
    let mut inc: Incident = serde_json::from_str(FIXTURE).unwrap();
    inc.id.clear();
    inc.verdict.clear();
    inc.process.comm = comm.into();
    for sample in &mut inc.samples {
        for t in &mut sample.snapshot.threads {
            t.comm = comm.into();
        }
    }
    for w in &mut inc.wedged_threads {
        w.comm = comm.into();
    }
    let mut handle = store.create(&inc).unwrap();
    handle.write_file("ring.bin", b"RING").unwrap();
    handle
        .write_file("samples/0001-stack.txt", b"stack")
        .unwrap();
    handle.finish(&inc).unwrap();
    handle.id().to_string()
}

#[test]
fn list_with_a_fifo_incident_json_returns_and_says_unreadable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    let good = store_with_one(&dir, "python3");
    let bad = dir.join("20991231T000000Z-vm-1");
    fs::create_dir(&bad).unwrap();
    nix::unistd::mkfifo(
        &bad.join("incident.json"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let out = report(&["list", "--dir", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let listing = text(&out);
    let line = listing
        .lines()
        .find(|l| l.starts_with("20991231T000000Z-vm-1"))
        .unwrap_or_else(|| panic!("the FIFO incident is not listed:\n{listing}"));
    assert!(
        line.contains("unreadable") && line.contains("FIFO"),
        "{line}"
    );
    assert!(listing.contains(&good), "{listing}");
    // `show` of it is an error, not a hang.
    let out = report(&[
        "show",
        "20991231T000000Z-vm-1",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("FIFO"), "{}", text(&out));
}

/// `ln -s /etc out/20990101T000000Z-vm-1` used to bundle /etc. The target here holds a 0600 secret and a valid
/// incident.json, so that only the symlink check can refuse it.
#[test]
fn bundle_refuses_a_symlinked_incident_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    let good = store_with_one(&dir, "python3");
    let elsewhere = tmp.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    fs::copy(
        dir.join(&good).join("incident.json"),
        elsewhere.join("incident.json"),
    )
    .unwrap();
    let secret = elsewhere.join("shadow");
    fs::write(&secret, "root:TOP-SECRET-HASH:19000:0:99999:7:::\n").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    let id = "20990101T000000Z-vm-1";
    std::os::unix::fs::symlink(&elsewhere, dir.join(id)).unwrap();

    let bundles = tmp.path().join("bundles");
    fs::create_dir(&bundles).unwrap();
    let output = bundles.join("b.tar.gz");
    for which in [id, "latest"] {
        let out = report(&[
            "bundle",
            which,
            "--dir",
            dir.to_str().unwrap(),
            "-o",
            output.to_str().unwrap(),
        ]);
        let all = text(&out);
        assert!(!all.contains("TOP-SECRET"), "{all}");
        if which == id {
            assert_eq!(out.status.code(), Some(1), "{all}");
            assert!(all.contains("symbolic link"), "{all}");
            assert!(!output.exists(), "a bundle was written");
        } else {
            // `latest` is the newest real incident: the symlink is not an incident at all.
            assert!(out.status.success(), "{all}");
            let tar = Command::new("gzip")
                .arg("-dc")
                .arg(&output)
                .output()
                .unwrap();
            assert!(tar.status.success());
            assert!(!String::from_utf8_lossy(&tar.stdout).contains("TOP-SECRET"));
        }
        for entry in fs::read_dir(&bundles).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            assert!(!name.starts_with(".tmp-"), "temp file left: {name}");
        }
    }
    let out = report(&["show", id, "--dir", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!text(&out).contains("TOP-SECRET"));
}

#[test]
fn a_failed_bundle_removes_its_temp_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    let id = store_with_one(&dir, "python3");
    let bundles = tmp.path().join("bundles");
    // The output name is a non-empty directory: everything is written, the final rename fails.
    let taken = bundles.join("b.tar.gz");
    fs::create_dir_all(&taken).unwrap();
    fs::write(taken.join("keep"), b"x").unwrap();
    let out = report(&[
        "bundle",
        &id,
        "--dir",
        dir.to_str().unwrap(),
        "-o",
        taken.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let names: Vec<String> = fs::read_dir(&bundles)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["b.tar.gz"], "temp file left behind");
}

#[test]
fn bundle_keeps_the_incident_modes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    let id = store_with_one(&dir, "python3");
    let output = tmp.path().join("b.tar.gz");
    let out = report(&[
        "bundle",
        &id,
        "--dir",
        dir.to_str().unwrap(),
        "-o",
        output.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        fs::metadata(&output).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // As the person receiving the attachment sees it: `tar -tv` prints each entry's mode.
    let listing = Command::new("tar")
        .arg("-tvzf")
        .arg(&output)
        .output()
        .expect("run tar");
    assert!(listing.status.success(), "{}", text(&listing));
    let mut seen = 0;
    for line in String::from_utf8_lossy(&listing.stdout).lines() {
        let mode = line.split_whitespace().next().unwrap();
        let expected = if mode.starts_with('d') {
            "drwx------"
        } else {
            "-rw-------"
        };
        assert_eq!(mode, expected, "{line}");
        seen += 1;
    }
    // The directory, samples/, incident.json, report.md, ring.bin, the stack file.
    assert_eq!(seen, 6);
}

/// A comm with ESC and a newline used to be printed raw by `report list` (and inconsistently in report.md).
#[test]
fn control_characters_in_a_comm_never_reach_the_terminal_raw() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    let comm = "evil\u{1b}]0;owned\u{7}\u{1b}[2J\nFAKE";
    store_with_one(&dir, comm);
    for args in [
        vec!["list"],
        vec!["show", "latest"],
        vec!["show", "latest", "--format", "json"],
    ] {
        let mut args = args.clone();
        args.extend(["--dir", dir.to_str().unwrap()]);
        let out = report(&args);
        assert!(out.status.success(), "{}", text(&out));
        let stdout = String::from_utf8(out.stdout.clone()).unwrap();
        assert!(
            !stdout.contains('\u{1b}') && !stdout.contains('\u{7}'),
            "raw control character in `report {}`",
            args.join(" ")
        );
        assert!(
            !stdout.lines().any(|l| l.starts_with("FAKE")),
            "a newline in the comm forged a line in `report {}`",
            args.join(" ")
        );
        assert!(stdout.contains("evil"), "{stdout}");
    }
}

/// Retention used to delete evidence with no log line. Here the store already holds 22 on-demand incidents and a
/// wedge from minutes ago; one SIGUSR1 adds a 23rd on-demand one, and the agent logs each of the 3 removals with its
/// reason while the wedge stays.
#[test]
fn the_agent_logs_each_retention_removal_and_keeps_the_wedge() {
    use crate::agent::{link_as, unique_comm, Agent, TempDir};
    let dir = TempDir::new("retention-log");
    let out = dir.path().join("incidents");
    let store = Store::open(&out, Retention::UNLIMITED).unwrap();
    let mut wedge: Incident = serde_json::from_str(FIXTURE).unwrap();
    wedge.id = "20200101T000000Z-gpu01-1".into();
    wedge.detected_at = reports::model::Timestamp::now();
    let mut handle = store.create(&wedge).unwrap();
    handle.finish(&wedge).unwrap();
    drop(handle);
    let mut old_on_demand = Vec::new();
    for i in 0..22 {
        let mut od: Incident = serde_json::from_str(FIXTURE).unwrap();
        od.id = format!("20200102T0000{i:02}Z-gpu01-2");
        od.trigger = reports::model::Trigger::OnDemand;
        let mut handle = store.create(&od).unwrap();
        handle.finish(&od).unwrap();
        old_on_demand.push(od.id);
    }

    let comm = unique_comm("r");
    let mut target = Command::new(link_as(dir.path(), &comm, Path::new("/bin/sleep")))
        .arg("30")
        .spawn()
        .unwrap();
    let mut agent = Agent::start(
        dir.path(),
        &[
            "--out",
            out.to_str().unwrap(),
            "--match-comm",
            &format!("^{comm}$"),
            "--interval",
            "100ms",
        ],
        &[],
    );
    agent.wait_log(
        &format!("watching pid {}", target.id()),
        1,
        Duration::from_secs(10),
    );
    agent.signal(libc::SIGUSR1);
    let log = agent.wait_log(
        "retention removed on-demand incident",
        3,
        Duration::from_secs(10),
    );
    for id in &old_on_demand[..3] {
        let line = log
            .lines()
            .find(|l| l.contains(id.as_str()))
            .unwrap_or_else(|| panic!("no log line for the removal of {id}:\n{log}"));
        assert!(
            line.contains("max_on_demand") || line.contains("min_free_bytes"),
            "{line}"
        );
        assert!(!out.join(id).exists(), "{id} still there");
    }
    assert!(
        out.join("20200101T000000Z-gpu01-1").is_dir(),
        "the wedge was removed:\n{log}"
    );
    assert!(!log.contains("retention removed wedge"), "{log}");
    let _ = agent.terminate();
    let _ = target.kill();
    let _ = target.wait();
}
