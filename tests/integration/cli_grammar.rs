//! One command-line grammar, through the built binary: an agent that logs JSON says every start-up error in
//! JSON from the first line (a usage error included), and no flag is accepted only to be ignored: a flag the
//! chosen mode would not use is refused with exit 2 and named, `decode-ioctl --driver` decodes with that
//! driver's table. The old spellings (`--json`, `--format md`) still work. The help itself (one format
//! enum, exit codes last, whole examples) is walked by `agent::cli`'s unit tests over clap's Command tree.

use std::process::{Command, Output};

use crate::util::bin;

fn wedge(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every line on stderr is a JSON log line at level error, the exit code in it and the process's equal.
fn assert_json_errors(args: &[&str], code: i32, says: &str) {
    let out = wedge(args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    assert!(!stderr.trim().is_empty(), "{args:?}: nothing on stderr");
    for line in stderr.lines() {
        let value: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{args:?}: not a JSON line ({e}): {line:?}"));
        assert_eq!(value["level"], "error", "{line}");
        assert_eq!(value["exit_code"], code, "{line}");
        assert!(value["ts"].is_string(), "{line}");
    }
    assert!(stderr.contains(says), "{args:?}: {stderr}");
}

#[test]
fn an_agent_logging_json_says_start_up_errors_in_json() {
    let dir = tempfile::tempdir().unwrap();
    // A usage error, the flag before and after it.
    assert_json_errors(&["agent", "--log-format", "json", "--bogus"], 2, "--bogus");
    assert_json_errors(&["agent", "--bogus", "--log-format=json"], 2, "--bogus");
    // An invalid configuration (nothing to watch).
    assert_json_errors(&["agent", "--log-format", "json"], 2, "nothing to watch");
    // The config file asks for JSON logs; the store cannot be opened.
    let config = dir.path().join("agent.json");
    let store = dir.path().join("file-not-dir");
    std::fs::write(&store, b"x").unwrap();
    std::fs::write(
        &config,
        serde_json::json!({"log_format": "json", "gpu": true, "out": store.join("incidents")})
            .to_string(),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    assert_json_errors(&["agent", "--config", config], 1, "incident store");
    // … and a usage error with that config.
    assert_json_errors(
        &["agent", "--config", config, "--interval", "soon"],
        2,
        "soon",
    );
    // Without JSON logs: the plain line, as before.
    let out = wedge(&["agent", "--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(serde_json::from_slice::<serde_json::Value>(&out.stderr).is_err());
    // Help is help, not an error.
    let out = wedge(&["agent", "--log-format", "json", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("Exit codes:"));
}

#[test]
fn decode_ioctl_uses_driver_or_refuses_it() {
    // `--driver` alone: decoded with that driver's table, as on one of its DRM nodes.
    let out = wedge(&["decode-ioctl", "0xc0186444", "--driver", "amdgpu"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("DRM_IOCTL_AMDGPU_CS"), "{shown}");
    assert!(shown.contains("driver   amdgpu"), "{shown}");
    let json = wedge(&[
        "decode-ioctl",
        "0xc0186444",
        "--driver",
        "i915",
        "--format",
        "json",
    ]);
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value["drm_driver"], "i915", "{value}");
    assert_ne!(value["name"], "DRM_IOCTL_AMDGPU_CS", "{value}");
    // Where it cannot apply, a usage error that says why.
    for (args, says) in [
        (
            &["decode-ioctl", "0xc0186444", "--driver", "nouveau"][..],
            "no DRM table",
        ),
        (
            &[
                "decode-ioctl",
                "0xc0186444",
                "--driver",
                "amdgpu",
                "--device",
                "/dev/nvidiactl",
            ][..],
            "applies to DRM nodes",
        ),
        (
            &[
                "decode-ioctl",
                "0xc020462a",
                "--device",
                "/dev/nvidiactl",
                "--arg",
                "00",
                "--inner",
                "00",
            ][..],
            "--inner",
        ),
    ] {
        let out = wedge(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(says),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

/// The family: a flag accepted by the parser but unused in the mode chosen is refused, naming it.
#[test]
fn no_flag_is_silently_ignored() {
    let host = [
        "upload",
        "--backend",
        "host",
        "--tensors",
        "10",
        "--params",
        "0",
    ];
    let with = |extra: &[&'static str]| {
        let mut args: Vec<&str> = host.to_vec();
        args.extend_from_slice(extra);
        args
    };
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (with(&["--pack-threads", "4"]), "--pack-threads"),
        (
            with(&["--strategy", "managed", "--staging-bytes", "1MiB"]),
            "--staging-bytes",
        ),
        (with(&["--pack-wait", "park"]), "--pack-wait"),
        (with(&["--no-prefetch"]), "--no-prefetch"),
        (vec!["upload", "--host-memory", "1GiB"], "--host-memory"),
        (with(&["--repeat", "3"]), "--compare"),
        (with(&["--skip", "managed"]), "--compare"),
        (with(&["--compare", "--strategy", "pinned"]), "--strategy"),
        (with(&["--compare", "--verify"]), "--verify"),
        (
            vec!["capture", "--pid", "1", "--tid", "1", "--all-threads"],
            "--all-threads",
        ),
        (with(&["--ring-slots", "8"]), "--ring"),
        (
            vec!["ring", "dump", "x.ring", "--all", "--last", "3"],
            "--last",
        ),
        (vec!["selftest", "--keep", "--out", "/tmp/x"], "--keep"),
        (
            vec!["report", "list", "--json", "--format", "text"],
            "--format",
        ),
    ];
    for (args, says) in cases {
        let out = wedge(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} accepted: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // What the mode does use is accepted.
    let out = wedge(&with(&[
        "--strategy",
        "pinned",
        "--pack-threads",
        "2",
        "--pack-wait",
        "park",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn old_spellings_still_work() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_str().unwrap();
    let old = wedge(&["report", "list", "--out", store, "--json"]);
    let new = wedge(&["report", "list", "--out", store, "--format", "json"]);
    assert_eq!(old.status.code(), Some(0), "{}", text(&old.stderr));
    assert_eq!(old.stdout, new.stdout);
    assert_eq!(text(&new.stdout).trim(), "[]");
    let old = wedge(&["decode-ioctl", "0x40086602", "--json"]);
    let new = wedge(&["decode-ioctl", "0x40086602", "--format", "json"]);
    assert_eq!(old.stdout, new.stdout);
    // `md` is markdown wherever markdown is offered; a format a subcommand cannot print is refused.
    let out = wedge(&["explain", "--format", "md", "/dev/null"]);
    assert_ne!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = wedge(&["ring", "dump", "x.ring", "--format", "markdown"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("[possible values: text, json]"),
        "{}",
        text(&out.stderr)
    );
}

/// The selftest's incident agrees with itself: `ring dump` of its ring copy shows the same ages on two looks
/// and names the call as report.md and the verdict do; `d_since.wall` is filled. And a selftest that removes
/// its temporary store prints no path into it.
#[test]
fn a_selftest_incident_agrees_with_itself() {
    use crate::harness::{start, temp_dir, wait_limited};
    let Some(fs) = crate::util::frozen_fs_or_skip("a_selftest_incident_agrees_with_itself") else {
        return;
    };
    drop(fs);
    let out = temp_dir("selftest-artefacts");
    let done = wait_limited(
        start(Command::new(bin()).args([
            "selftest",
            "--format",
            "json",
            "--out",
            out.to_str().unwrap(),
        ])),
        std::time::Duration::from_secs(90),
    );
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let summary: serde_json::Value = serde_json::from_str(done.stdout.trim()).unwrap();
    assert_eq!(summary["incident_kept"], true, "{summary}");
    let dir = std::path::PathBuf::from(summary["incident"].as_str().unwrap());
    let incident: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("incident.json")).unwrap()).unwrap();

    // d_since.wall: filled, and the detection's wall time less the monotonic time between the two.
    let wedged = &incident["wedged_threads"][0];
    let wall = |t: &serde_json::Value| {
        chrono::DateTime::parse_from_rfc3339(t["wall"].as_str().unwrap_or_else(|| panic!("{t}")))
            .unwrap()
    };
    let (since, detected) = (&wedged["d_since"], &wedged["detected_at"]);
    let mono = |t: &serde_json::Value| t["monotonic_ns"].as_i64().unwrap();
    let wall_gap = (wall(detected) - wall(since)).num_milliseconds();
    let mono_gap = (mono(detected) - mono(since)) / 1_000_000;
    assert!(
        (wall_gap - mono_gap).abs() <= 5,
        "wall {wall_gap} ms, monotonic {mono_gap} ms"
    );
    assert!(
        incident["episode"]["started_at"]["wall"].is_string(),
        "{}",
        incident["episode"]
    );

    // ring dump of the copy, twice, a while apart: the same line, the ages of the capture.
    let ring = dir.join("ring.bin");
    let dump = || {
        let out = wedge(&["ring", "dump", ring.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let in_flight = |dump: &str| {
        let at = dump.find("IN FLIGHT (").unwrap_or_else(|| panic!("{dump}"));
        dump[at..].lines().nth(1).unwrap().to_string()
    };
    let first = dump();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let second = dump();
    assert_eq!(in_flight(&first), in_flight(&second), "{first}\n{second}");
    assert!(first.contains("ages at the capture's read"), "{first}");
    // One name: ring dump's, report.md's and the verdict's.
    let name = "selftest ioctl FS_IOC_SETFLAGS()";
    assert!(in_flight(&first).contains(name), "{first}");
    assert!(!in_flight(&first).contains("custom"), "{first}");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains(name), "{report}");
    assert!(
        incident["verdict"].as_str().unwrap().contains(name),
        "{}",
        incident["verdict"]
    );
    let _ = std::fs::remove_dir_all(&out);

    // A temporary store is removed at the end: its incident's path is not printed.
    let done = wait_limited(
        start(Command::new(bin()).args(["selftest", "--format", "json"])),
        std::time::Duration::from_secs(90),
    );
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let summary: serde_json::Value = serde_json::from_str(done.stdout.trim()).unwrap();
    assert_eq!(summary["incident"], serde_json::Value::Null, "{summary}");
    assert_eq!(summary["incident_kept"], false, "{summary}");
    let done = wait_limited(
        start(Command::new(bin()).args(["selftest"])),
        std::time::Duration::from_secs(90),
    );
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let line = done
        .stdout
        .lines()
        .find(|l| l.starts_with("Incident: "))
        .unwrap();
    assert!(
        line.contains("removed with the temporary directory"),
        "{line}"
    );
}
