//! The C ABI from C: compile tests/c/writer.c against include/wedge_breadcrumb.h with the system C
//! compiler, link it to the cdylib and to the staticlib built next to this test binary, run it,
//! and read its ring with the Rust reader. Also checks the header's call table against `Call`.

use std::path::{Path, PathBuf};
use std::process::Command;

use breadcrumb::{read_ring, Call, ReadOptions, RecordKind};

/// The `breadcrumb` crate (header, C test program); this test lives in its C-ABI package below it.
const CRATE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// Where the cdylib and staticlib are: this binary is target/<profile>/deps/c_abi-<hash>, wherever
/// CARGO_TARGET_DIR is. `cargo test` leaves them in deps/ (fresh); only `cargo build` copies them up to
/// target/<profile>/, where a copy can be stale, so deps/ wins.
fn lib_dir(file: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap().to_path_buf();
    if deps.join(file).exists() {
        return deps;
    }
    deps.parent().unwrap_or(&deps).to_path_buf()
}

fn compiler() -> Option<String> {
    ["cc", "gcc", "clang"]
        .into_iter()
        .find(|cc| {
            Command::new(cc)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(str::to_string)
}

/// Builds the C writer; `None` (with a message) when there is no C compiler and CI is not set.
fn build(out: &Path, link_static: bool) -> Option<PathBuf> {
    let Some(cc) = compiler() else {
        assert!(
            !breadcrumb::in_ci(),
            "CI=true but no C compiler (cc/gcc/clang) is installed"
        );
        eprintln!("skipping: no C compiler found (install gcc)");
        return None;
    };
    let lib_dir = lib_dir(if link_static {
        "libwedge_breadcrumb.a"
    } else {
        "libwedge_breadcrumb.so"
    });
    let exe = out.join(if link_static {
        "writer-static"
    } else {
        "writer-shared"
    });
    let mut command = Command::new(cc);
    command
        .arg("-std=c11")
        .arg("-Wall")
        .arg("-Wextra")
        .arg("-Werror")
        .arg("-D_GNU_SOURCE")
        .arg("-I")
        .arg(Path::new(CRATE_DIR).join("include"))
        .arg(Path::new(CRATE_DIR).join("tests/c/writer.c"))
        .arg("-o")
        .arg(&exe);
    if link_static {
        let archive = lib_dir.join("libwedge_breadcrumb.a");
        assert!(archive.exists(), "{} not built", archive.display());
        command.arg(archive).args(["-lpthread", "-ldl", "-lm"]);
    } else {
        let shared = lib_dir.join("libwedge_breadcrumb.so");
        assert!(shared.exists(), "{} not built", shared.display());
        command
            .arg("-L")
            .arg(&lib_dir)
            .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
            .args(["-lwedge_breadcrumb", "-lpthread"]);
    }
    let output = command.output().expect("run the C compiler");
    assert!(
        output.status.success(),
        "C build failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(exe)
}

fn check_ring(ring: &Path, pid_text: &str) {
    let snapshot = read_ring(ring, &ReadOptions::strict(None)).unwrap();
    assert_eq!(snapshot.header.writer_pid.to_string(), pid_text.trim());
    assert_eq!(
        snapshot.header.status.as_deref(),
        Some("cupti: subscribe failed (demo)")
    );
    assert_eq!(snapshot.header.status_code, -7);
    assert_eq!(snapshot.torn_slots + snapshot.invalid_slots, 0);
    // The main thread's lane: cuInit enter+exit and the stuck enter. Each uploader thread wrote
    // 100 enter+exit pairs into a lane of its own: the last 64 records of each (a lane's size in
    // the default 4096-slot, 64-lane ring) are kept, whatever the other threads wrote.
    let lane_slots = snapshot.header.lane_slots() as usize;
    assert_eq!(lane_slots, 64);
    assert_eq!(snapshot.records.len(), 2 + 2 * lane_slots + 1);
    assert_eq!(snapshot.records[0].call, "cuInit");
    assert_eq!(snapshot.records[0].label, "");
    let uploads = &snapshot.records[2..2 + 2 * lane_slots];
    let tids: std::collections::BTreeSet<u32> = uploads.iter().map(|r| r.tid).collect();
    assert_eq!(tids.len(), 2, "two C threads wrote");
    assert!(uploads.iter().all(|r| r.call == "cuMemcpyHtoDAsync_v2"));
    let lanes: std::collections::BTreeSet<u32> = uploads.iter().map(|r| r.lane).collect();
    assert_eq!(lanes.len(), 2, "one lane per thread");
    assert!(!lanes.contains(&snapshot.records[0].lane));
    assert_eq!(snapshot.in_flight.len(), 1);
    let stuck = &snapshot.in_flight[0];
    assert_eq!(stuck.call, "cuStreamSynchronize");
    assert_eq!(
        (stuck.args.bytes, stuck.args.ptr, stuck.args.stream),
        (64 << 20, 0xdead0000, 0x77)
    );
    assert_eq!((stuck.args.tensor_first, stuck.args.tensor_count), (5, 2));
    // 40-byte cut lands inside "é": the label keeps the 39-byte valid prefix.
    assert_eq!(stuck.label, "sync after bulkUpload of 53 chunks éé");
    assert_eq!(snapshot.records.last().unwrap().kind, RecordKind::Enter);
}

#[test]
fn c_program_writes_a_ring_through_the_shared_library() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build(dir.path(), false) else {
        return;
    };
    let ring = dir.path().join("c.ring");
    let output = Command::new(&exe).arg(&ring).output().unwrap();
    assert!(
        output.status.success(),
        "C writer failed: {:?} {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    check_ring(&ring, &String::from_utf8_lossy(&output.stdout));
}

#[test]
fn c_program_linked_statically_opens_its_ring_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build(dir.path(), true) else {
        return;
    };
    let ring_dir = dir.path().join("rings");
    std::fs::create_dir(&ring_dir).unwrap();
    let output = Command::new(&exe)
        .arg("--env")
        .env_remove("WEDGE_CAPTURE_RING")
        .env("WEDGE_CAPTURE_RING_DIR", &ring_dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "C writer failed: {:?} {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let pid = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let rings: Vec<_> = std::fs::read_dir(&ring_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(rings.len(), 1, "{rings:?}");
    let name = rings[0].file_name().unwrap().to_str().unwrap().to_string();
    assert!(
        name.starts_with(&format!("{pid}-")) && name.ends_with(".ring"),
        "{name}"
    );
    check_ring(&rings[0], &pid);
}

#[test]
fn header_call_table_matches_the_rust_table() {
    let header =
        std::fs::read_to_string(Path::new(CRATE_DIR).join("include/wedge_breadcrumb.h")).unwrap();
    let mut entries = Vec::new();
    for line in header.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("WB_CALL_") {
            let (name, id) = rest
                .trim_end_matches(',')
                .split_once(" = ")
                .expect("NAME = id");
            entries.push((name.to_string(), id.parse::<u16>().unwrap()));
        }
    }
    assert_eq!(
        entries.len(),
        Call::ALL.len(),
        "header and Rust list the same calls"
    );
    for (name, id) in entries {
        let call = Call::from_u16(id).unwrap_or_else(|| panic!("header id {id} unknown to Rust"));
        let expected = if call == Call::Custom {
            "CUSTOM"
        } else {
            call.name()
        };
        assert_eq!(name, expected, "id {id}");
    }
    assert!(header.contains("} wb_args;"));
}
