//! Integration tests: report (list, show, bundle through the built binary, on a store written by the library).

use std::path::Path;
use std::process::{Command, Output};

use reports::layout::{INCIDENT_FILE, MARKER_FILE};
use reports::model::Incident;
use reports::{Retention, Store};

/// The schema-v1 incident the reports crate's golden test renders.
const FIXTURE: &str = include_str!("../../reports/tests/data/incident-v1.json");

fn report(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wedge-capture"))
        .arg("report")
        .args(args)
        .output()
        .expect("run wedge-capture")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn fixture() -> Incident {
    serde_json::from_str(FIXTURE).expect("fixture parses")
}

/// A store with one complete incident (older) and one partial one (newer, its writer gone).
fn store_with_two(dir: &Path) -> (String, String) {
    let store = Store::open(dir, Retention::UNLIMITED).unwrap();
    let mut complete = fixture();
    complete.id.clear();
    let mut handle = store.create(&complete).unwrap();
    handle.write_file("ring.bin", b"RING-BYTES").unwrap();
    handle
        .write_file(
            "samples/0001-stack.txt",
            b"[<0>] os_acquire_mutex+0x2d/0x50 [nvidia]\n",
        )
        .unwrap();
    handle.finish(&complete).unwrap();
    let complete_id = handle.id().to_string();
    drop(handle);

    let mut partial = fixture();
    partial.id = "20261202T120000Z-gpu01-5151".into();
    partial.process.pid = 5151;
    partial.verdict = "thread 5151 `python3` is in D".into();
    let handle = store.create(&partial).unwrap();
    let partial_id = handle.id().to_string();
    // Simulate a writer killed mid-capture: the marker stays, nobody holds its lock.
    std::mem::forget(handle);
    (complete_id, partial_id)
}

#[test]
fn list_shows_newest_first_with_state() {
    let tmp = tempfile::tempdir().unwrap();
    let (complete, partial) = store_with_two(tmp.path());
    let out = report(&["list", "--out", tmp.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("2 incidents in "), "{text}");
    assert!(lines[1].starts_with("ID"), "{text}");
    // The forgotten handle still holds its flock inside this process: it reads as in progress.
    assert!(
        lines[2].starts_with(&partial) && lines[2].contains("in progress"),
        "{text}"
    );
    assert!(
        lines[3].starts_with(&complete) && lines[3].contains("complete"),
        "{text}"
    );
    assert!(
        lines[3].contains("has been in D for 312 s in ioctl `NV_ESC_RM_CONTROL`"),
        "{text}"
    );
}

#[test]
fn list_json_is_machine_readable() {
    let tmp = tempfile::tempdir().unwrap();
    let (complete, partial) = store_with_two(tmp.path());
    let out = report(&[
        "list",
        "--out",
        tmp.path().to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 2);
    assert_eq!(arr[0]["id"], partial.as_str());
    assert_eq!(arr[0]["complete"], false);
    assert_eq!(arr[1]["id"], complete.as_str());
    assert_eq!(arr[1]["complete"], true);
    assert_eq!(arr[1]["pid"], 4242);
}

#[test]
fn list_of_a_missing_directory_is_empty_not_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("never-created");
    let out = report(&[
        "list",
        "--out",
        missing.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert!(out.status.success());
    assert_eq!(stdout(&out).trim(), "[]");
    assert!(!missing.exists(), "listing must not create the directory");
}

#[test]
fn show_markdown_json_and_latest() {
    let tmp = tempfile::tempdir().unwrap();
    let (complete, partial) = store_with_two(tmp.path());
    let dir = tmp.path().to_str().unwrap();

    let out = report(&["show", &complete, "--out", dir]);
    assert!(out.status.success(), "{}", stderr(&out));
    let md = stdout(&out);
    assert!(
        md.starts_with("**Verdict:** thread 4242 `python3` has been in D for 312 s"),
        "{md}"
    );
    assert!(
        md.contains("| ioctl | `NV_ESC_RM_CONTROL 0xc020462a ("),
        "{md}"
    );
    assert!(md.contains("<details><summary>Kernel stacks"));
    assert!(md.contains("capture complete"));
    assert!(!md.contains("hf_SECRETSECRET"), "secrets must be redacted");

    let out = report(&["show", &complete, "--out", dir, "--format", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stored = std::fs::read(tmp.path().join(&complete).join(INCIDENT_FILE)).unwrap();
    assert_eq!(
        out.stdout.trim_ascii_end(),
        stored.trim_ascii_end(),
        "json is the stored file"
    );
    let parsed: Incident = serde_json::from_slice(&out.stdout).unwrap();
    assert!(parsed.complete);

    let out = report(&["show", "latest", "--out", dir]);
    assert!(out.status.success(), "{}", stderr(&out));
    let md = stdout(&out);
    assert!(
        md.starts_with("**Verdict:** thread 5151 `python3` is in D"),
        "{md}"
    );
    assert!(md.contains("capture partial"), "{md}");
    assert!(tmp.path().join(&partial).join(MARKER_FILE).exists());
}

#[test]
fn unknown_id_exits_1_and_names_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    store_with_two(tmp.path());
    let dir = tmp.path().to_str().unwrap();
    for sub in ["show", "bundle"] {
        let out = report(&[sub, "20200101T000000Z-nohost-1", "--out", dir]);
        assert_eq!(out.status.code(), Some(1), "{sub}");
        let err = stderr(&out);
        let expected = tmp
            .path()
            .join("20200101T000000Z-nohost-1")
            .join(INCIDENT_FILE);
        assert!(
            err.contains("no incident `20200101T000000Z-nohost-1`"),
            "{err}"
        );
        assert!(err.contains(&expected.display().to_string()), "{err}");
        assert!(!err.contains("panicked"));
    }
    let out = report(&["show", "../../etc", "--out", dir]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("invalid incident id"));
    let out = report(&[
        "show",
        "x",
        "--out",
        tmp.path().join("missing").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
}

#[test]
fn bundle_writes_a_tar_gz_with_the_incident() {
    let tmp = tempfile::tempdir().unwrap();
    let store_dir = tmp.path().join("incidents");
    let (complete, _) = store_with_two(&store_dir);
    let out_file = tmp.path().join("attach.tar.gz");
    let out = report(&[
        "bundle",
        &complete,
        "--out",
        store_dir.to_str().unwrap(),
        "-o",
        out_file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with(&out_file.display().to_string()));

    // Read it back with the system's tar, as the person receiving the attachment would.
    let unpacked = tmp.path().join("unpacked");
    std::fs::create_dir(&unpacked).unwrap();
    let untar = Command::new("tar")
        .arg("-xzf")
        .arg(&out_file)
        .arg("-C")
        .arg(&unpacked)
        .output()
        .expect("run tar");
    assert!(untar.status.success(), "{}", stderr(&untar));
    let listing = Command::new("tar")
        .arg("-tzf")
        .arg(&out_file)
        .output()
        .expect("run tar");
    let names: Vec<String> = stdout(&listing)
        .lines()
        .map(|l| l.trim_end_matches('/').to_string())
        .collect();
    let inc: Incident = serde_json::from_slice(
        &std::fs::read(unpacked.join(&complete).join(INCIDENT_FILE)).unwrap(),
    )
    .unwrap();
    assert!(inc.complete);
    assert_eq!(
        std::fs::read(unpacked.join(&complete).join("ring.bin")).unwrap(),
        b"RING-BYTES"
    );
    for want in [
        "incident.json",
        "report.md",
        "ring.bin",
        "samples/0001-stack.txt",
    ] {
        assert!(
            names.contains(&format!("{complete}/{want}")),
            "{want} missing from {names:?}"
        );
    }
    assert!(!names
        .iter()
        .any(|n| n.contains(".in-progress") || n.contains(".tmp-")));

    // Default output name: ./<id>.tar.gz in the working directory.
    let out = Command::new(env!("CARGO_BIN_EXE_wedge-capture"))
        .args([
            "report",
            "bundle",
            "latest",
            "--out",
            store_dir.to_str().unwrap(),
        ])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(tmp
        .path()
        .join("20261202T120000Z-gpu01-5151.tar.gz")
        .exists());
}
