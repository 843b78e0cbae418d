//! Integration tests: ring. `wedge-capture ring dump` of a ring written by the Rust writer (text
//! and JSON), of a corrupt file and of a missing one.

use std::path::Path;
use std::process::{Command, Output};

use breadcrumb::{Args, Call, Writer};

fn wedge_capture(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_wedge-capture"))
        .args(args)
        .output()
        .expect("run wedge-capture")
}

fn dump(path: &Path, extra: &[&str]) -> Output {
    let mut args: Vec<&std::ffi::OsStr> = vec!["ring".as_ref(), "dump".as_ref(), path.as_os_str()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    wedge_capture(&args)
}

/// A ring like the uploader leaves when its thread wedges in a copy: 3 chunks done, chunk 12 stuck.
fn write_wedged_ring(path: &Path) -> Writer {
    let writer = Writer::create(path, 256).unwrap();
    let token = writer.enter(
        Call::CuMemAlloc_v2,
        &Args {
            bytes: 222 << 20,
            ..Args::default()
        },
        "bulkUpload alloc",
    );
    writer.exit(token, 0);
    for chunk in 9..12 {
        let args = Args {
            bytes: 4 << 20,
            ptr: 0x7f00_0000 + u64::from(chunk),
            chunk,
            chunk_count: 53,
            ..Args::default()
        };
        let token = writer.enter(
            Call::CuMemcpyHtoD_v2,
            &args,
            &format!("bulkUpload chunk {chunk}/53"),
        );
        writer.exit(token, 0);
    }
    let stuck = Args {
        bytes: 4 << 20,
        ptr: 0x7f00_000c,
        ptr2: 0x5555_0000,
        chunk: 12,
        chunk_count: 53,
        tensor_first: 40,
        tensor_count: 3,
        ..Args::default()
    };
    writer.enter(Call::CuMemcpyHtoD_v2, &stuck, "bulkUpload chunk 12/53");
    writer
}

#[test]
fn dump_text_names_the_call_in_flight_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("worker.ring");
    let _writer = write_wedged_ring(&path);
    let out = dump(&path, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let in_flight = text.find("IN FLIGHT (1 entered").expect(&text);
    let line = text[in_flight..].lines().nth(1).unwrap();
    assert!(line.contains("cuMemcpyHtoD_v2"), "{line}");
    assert!(line.contains("\"bulkUpload chunk 12/53\""), "{line}");
    assert!(
        line.contains("bytes=4194304")
            && line.contains("chunk=12/53")
            && line.contains("tensors=40..43"),
        "{line}"
    );
    assert!(
        line.contains(" for "),
        "same boot: the age is shown: {line}"
    );
    assert!(text.contains(&format!("writer pid {}", std::process::id())));
    assert!(text.contains("(this boot)"));
    assert!(text.contains("LAST 9 RECORDS"), "{text}");
    assert!(text.contains("exit  cuMemAlloc_v2 -> 0"), "{text}");

    let out = dump(&path, &["--last", "2"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("LAST 2 RECORDS"), "{text}");
}

#[test]
fn dump_json_is_machine_readable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("worker.ring");
    let _writer = write_wedged_ring(&path);
    let out = dump(&path, &["--format", "json", "--last", "3"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["header"]["writer_pid"], std::process::id());
    assert_eq!(value["header"]["clock"], "CLOCK_MONOTONIC");
    assert_eq!(value["records_in_ring"], 9);
    assert_eq!(value["records"].as_array().unwrap().len(), 3);
    assert_eq!(value["records"][2]["kind"], "enter");
    let stuck = &value["in_flight"][0];
    assert_eq!(stuck["call"], "cuMemcpyHtoD_v2");
    assert_eq!(stuck["label"], "bulkUpload chunk 12/53");
    assert_eq!(stuck["args"]["chunk"], 12);
    assert_eq!(stuck["args"]["ptr2"], 0x5555_0000u64);
    assert!(stuck["age_ns"].as_u64().is_some());
    // The JSON deserializes back into the library's types (reports embed them).
    let _: Vec<breadcrumb::InFlight> = serde_json::from_value(value["in_flight"].clone()).unwrap();
    let _: Vec<breadcrumb::Record> = serde_json::from_value(value["records"].clone()).unwrap();
}

#[test]
fn corrupt_and_missing_files_fail_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let corrupt = dir.path().join("corrupt.ring");
    std::fs::write(&corrupt, b"this is not a ring file at all, just text\n").unwrap();
    let out = dump(&corrupt, &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("corrupt.ring") && stderr.contains("bad magic"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());

    // A valid ring with a bumped version.
    let versioned = dir.path().join("v9.ring");
    drop(write_wedged_ring(&versioned));
    let mut bytes = std::fs::read(&versioned).unwrap();
    bytes[8] = 9;
    std::fs::write(&versioned, &bytes).unwrap();
    let out = dump(&versioned, &["--format", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unsupported ring format version") && !stderr.contains(" 9 "),
        "{stderr}"
    );

    let missing = dir.path().join("nowhere.ring");
    let out = dump(&missing, &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");

    let link = dir.path().join("link.ring");
    std::os::unix::fs::symlink(&versioned, &link).unwrap();
    let out = dump(&link, &["--strict"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("symbolic link"));
}

const CHILD_RING: &str = "WEDGE_CAPTURE_TEST_RING_CHILD";

/// Body of the re-executed child for `dump_reads_the_ring_of_a_killed_worker`; a no-op otherwise.
#[test]
fn ring_child_entry() {
    let Some(path) = std::env::var_os(CHILD_RING) else {
        return;
    };
    let writer = write_wedged_ring(Path::new(&path));
    println!("\nWEDGE_RING_CHILD_READY");
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
        let _ = &writer;
    }
}

#[test]
fn dump_reads_the_ring_of_a_killed_worker() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.ring");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "ring::ring_child_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_RING, &path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let ready = std::io::BufReader::new(stdout).lines().any(|line| {
        line.map(|l| l.contains("WEDGE_RING_CHILD_READY"))
            .unwrap_or(false)
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(ready, "child never got ready");

    let out = dump(&path, &["--format", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["header"]["writer_pid"], child.id());
    assert_eq!(value["in_flight"][0]["call"], "cuMemcpyHtoD_v2");
    assert_eq!(value["in_flight"][0]["label"], "bulkUpload chunk 12/53");
    assert_eq!(value["in_flight"][0]["args"]["chunk"], 12);
}
