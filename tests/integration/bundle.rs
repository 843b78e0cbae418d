//! `report bundle` (issue 27): members dated at the incident, `--output`/`-o`, and `--public` scrubbing host
//! and other-tenant values planted in every kind of file of an incident.

use std::path::Path;
use std::process::{Command, Output};

use reports::model::{DStateTask, Incident, KernelLogLine, Probe, Relevance};
use reports::{Retention, Store};

use crate::util::bin;

const FIXTURE: &str = include_str!("../../reports/tests/data/incident-v1.json");

const HOST: &str = "planted-host-3141";
const BOOT_ID: &str = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d";
const TENANT_COMM: &str = "tenant-miner-x";
const TENANT_CGROUP: &str = "/kubepods/besteffort/podtenant-0000-secret";
const TENANT_LINE: &str = "tenant-miner-x[31337]: segfault at 0 ip 0000 sp 0000 error 4";
const TENANT_XID: &str =
    "NVRM: Xid (PCI:0000:19:00): 13, pid=31337, name=miner, Graphics Exception";
const GPU_UUID: &str = "GPU-deadbeef-1234-5678-9abc-def012345678";
const GPU_SERIAL: &str = "1654321098765";
/// 2026-12-02T11:34:00Z, the fixture's detection time.
const DETECTED_AT: u64 = 1_796_211_240;

fn report(args: &[&str], cwd: &Path) -> Output {
    Command::new(bin())
        .arg("report")
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run wedge-capture")
}

/// The fixture incident with host and tenant values planted in every field that can hold one, and in raw files.
fn planted_store(dir: &Path) -> String {
    let mut incident: Incident = serde_json::from_str(FIXTURE).unwrap();
    incident.id.clear();
    incident.host.hostname = HOST.into();
    incident.host.boot_id = BOOT_ID.into();
    incident.host_context.d_state_tasks.push(DStateTask {
        pid: 31337,
        tid: 31338,
        comm: TENANT_COMM.into(),
        wchan: Some("os_acquire_mutex".into()),
        cgroup: Some(TENANT_CGROUP.into()),
    });
    for (text, relevance) in [
        (TENANT_LINE, Some(Relevance::OtherProcess)),
        // Unclassified (an older writer): the pid alone says it is someone else's.
        (TENANT_XID, None),
    ] {
        incident.kernel_log.push(KernelLogLine {
            text: text.into(),
            relevance,
            ..KernelLogLine::default()
        });
    }
    incident.probes.push(Probe {
        name: "nvidia-smi".into(),
        output_excerpt: format!(
            "    Product Name : NVIDIA H100 80GB HBM3\n    Serial Number : {GPU_SERIAL}\n    GPU UUID : {GPU_UUID}\n"
        ),
        ..Probe::default()
    });
    incident.not_captured.push(reports::model::NotCaptured {
        what: "note".into(),
        why: format!("seen on {HOST} next to {TENANT_COMM}"),
    });
    let store = Store::open(dir, Retention::UNLIMITED).unwrap();
    let mut handle = store.create(&incident).unwrap();
    let mut ring = b"WCRING\0\0".to_vec();
    ring.extend(uuid_bytes(BOOT_ID));
    ring.extend(HOST.as_bytes());
    ring.push(0xff);
    handle.write_file("ring.bin", &ring).unwrap();
    handle
        .write_file(
            "kernel-log.txt",
            format!("[  1.0] context       {TENANT_LINE}\n[  2.0] nvidia        {TENANT_XID}\n[  3.0] target        NVRM: Xid (PCI:0000:19:00): 109, pid=4242, name=python3\n")
                .as_bytes(),
        )
        .unwrap();
    handle
        .write_file(
            "samples/0001-status.txt",
            format!("host {HOST} gpu {GPU_UUID}\n").as_bytes(),
        )
        .unwrap();
    handle.finish(&incident).unwrap();
    handle.id().to_string()
}

fn uuid_bytes(uuid: &str) -> Vec<u8> {
    let hex: String = uuid.chars().filter(|c| *c != '-').collect();
    (0..16)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// The uncompressed tar stream (member names, headers and data together).
fn tar_stream(archive: &Path) -> Vec<u8> {
    let out = Command::new("gzip")
        .arg("-dc")
        .arg(archive)
        .output()
        .unwrap();
    assert!(out.status.success());
    out.stdout
}

/// (name, mtime, data) of every member, read from the headers themselves.
fn members(stream: &[u8]) -> Vec<(String, u64, Vec<u8>)> {
    let octal = |field: &[u8]| {
        let text = String::from_utf8_lossy(field);
        u64::from_str_radix(text.trim_matches(|c: char| c == '\0' || c == ' '), 8).unwrap_or(0)
    };
    let mut out = Vec::new();
    let mut at = 0;
    while at + 512 <= stream.len() && stream[at..at + 512].iter().any(|b| *b != 0) {
        let header = &stream[at..at + 512];
        let name = String::from_utf8_lossy(&header[..100])
            .trim_end_matches('\0')
            .to_string();
        let size = octal(&header[124..136]) as usize;
        let mtime = octal(&header[136..148]);
        let data = stream[at + 512..at + 512 + size].to_vec();
        out.push((name, mtime, data));
        at += 512 + size.div_ceil(512) * 512;
    }
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn bundle_members_are_dated_at_the_incident_and_output_has_both_spellings() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("incidents");
    let id = planted_store(&store);
    for flag in ["--output", "-o"] {
        let file = tmp.path().join(format!("b{flag}.tar.gz"));
        let out = report(
            &[
                "bundle",
                &id,
                "--out",
                store.to_str().unwrap(),
                flag,
                file.to_str().unwrap(),
            ],
            tmp.path(),
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let members = members(&tar_stream(&file));
        assert!(members.len() >= 5, "{members:?}");
        for (name, mtime, _) in &members {
            assert_eq!(*mtime, DETECTED_AT, "{name}");
        }
    }
    // Not public: the host name stays (the directory is the id).
    let stream = tar_stream(&tmp.path().join("b--output.tar.gz"));
    assert!(contains(&stream, HOST.as_bytes()));
}

#[test]
fn public_bundle_holds_no_planted_host_or_tenant_value() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("incidents");
    let id = planted_store(&store);
    let out = report(
        &[
            "bundle",
            "latest",
            "--out",
            store.to_str().unwrap(),
            "--public",
        ],
        tmp.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("scrubbed:"), "{stdout}");
    // The default file name carries no host name either.
    let name = format!("{}-scrubbed-4242.tar.gz", id.split('-').next().unwrap());
    let archive = tmp.path().join(&name);
    assert!(archive.exists(), "{name} not written: {stdout}");

    let stream = tar_stream(&archive);
    let mut planted: Vec<Vec<u8>> = [
        HOST,
        BOOT_ID,
        &BOOT_ID.replace('-', ""),
        TENANT_COMM,
        TENANT_CGROUP,
        TENANT_LINE,
        TENANT_XID,
        "31337",
        GPU_UUID,
        GPU_SERIAL,
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    planted.push(uuid_bytes(BOOT_ID));
    for value in &planted {
        assert!(
            !contains(&stream, value),
            "{:?} is still in the public archive",
            String::from_utf8_lossy(value)
        );
    }
    let members = members(&stream);
    let file = |suffix: &str| {
        members
            .iter()
            .find(|(n, _, _)| n.ends_with(suffix))
            .map(|(_, _, d)| String::from_utf8_lossy(d).into_owned())
            .unwrap_or_else(|| panic!("{suffix} missing"))
    };
    let report_md = file("/report.md");
    assert!(
        report_md.starts_with("> **Scrubbed for a public issue**"),
        "{report_md}"
    );
    assert!(
        report_md.contains("2 other processes in the host's D-state census"),
        "{report_md}"
    );
    assert!(
        report_md.contains("2 kernel-log lines about other processes"),
        "{report_md}"
    );
    // What the bug is about stays: the watched process, its own driver line, the other non-tenant rows.
    let incident: Incident = serde_json::from_str(&file("/incident.json")).unwrap();
    assert_eq!(incident.process.pid, 4242);
    assert_eq!(incident.process.comm, "python3");
    assert!(incident
        .kernel_log
        .iter()
        .any(|l| l.text.contains("pid=4242")));
    assert!(incident.host.hostname.is_empty() && incident.host.boot_id.is_empty());
    assert!(file("/kernel-log.txt").contains("pid=4242, name=python3"));
    let ring = members.iter().find(|(n, _, _)| n.ends_with("/ring.bin"));
    let ring = &ring.expect("ring.bin").2;
    assert_eq!(ring.len(), 8 + 16 + HOST.len() + 1, "ring layout kept");
    assert!(ring.starts_with(b"WCRING\0\0"));
    for (_, mtime, _) in &members {
        assert_eq!(*mtime, DETECTED_AT);
    }
}
