//! The real inputs each fuzz target starts from ([`crate::targets::TARGETS`] names them): rings the writer
//! made, this machine's /proc files, the recorded traces, configs, incidents and command lines.

use std::path::PathBuf;

use breadcrumb::{Args, Call, Writer};

/// Real rings: the writer's own output with a mix of records, in a few sizes.
pub(crate) fn ring_seeds() -> Vec<Vec<u8>> {
    let dir = std::env::temp_dir().join(format!("wedge-fuzz-rings-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let mut seeds = Vec::new();
    for (i, slots) in [4u32, 16, 64].into_iter().enumerate() {
        let path = dir.join(format!("seed-{slots}.ring"));
        let _ = std::fs::remove_file(&path);
        let Ok(writer) = Writer::create(&path, slots) else {
            continue;
        };
        let args = Args {
            bytes: 1 << 30,
            ptr: 0x7f00_dead_0000,
            ptr2: 0x7f00_beef_0000,
            stream: 0x55aa,
            chunk: 3,
            chunk_count: 8,
            tensor_first: 10,
            tensor_count: 2,
        };
        // More records than slots: the ring wraps, old slots are overwritten.
        for n in 0..(slots as usize * 2 + i) {
            let call = Call::ALL[n % Call::ALL.len()];
            let token = writer.enter(call, &args, &format!("layer.{n}.weight"));
            if n % 3 != 0 {
                writer.exit(token, (n as i64) - 1);
            }
        }
        writer.enter(Call::ALL[0], &Args::default(), "in flight ✓ `label` | <b>");
        if i == 1 {
            writer.set_status(-3, "cupti: subscribe failed");
        }
        if slots == 64 {
            // Version 2 with several lanes: two more threads in lanes of their own, one exit
            // recorded in another lane than its enter (closed in place).
            let handed_over = writer.enter(Call::CuStreamSynchronize, &args, "handed over");
            std::thread::scope(|scope| {
                for t in 0..2u32 {
                    let writer = &writer;
                    scope.spawn(move || {
                        if t == 0 {
                            writer.exit(handed_over, 0);
                        }
                        for n in 0..(20 + t) {
                            let token = writer.enter(Call::CuLaunchKernel, &args, "worker");
                            if n % 4 != 3 {
                                writer.exit(token, 0);
                            }
                        }
                    });
                }
            });
        }
        drop(writer);
        if let Ok(bytes) = std::fs::read(&path) {
            seeds.push(bytes);
        }
        let _ = std::fs::remove_file(&path);
    }
    let _ = std::fs::remove_dir(&dir);
    // A ring of the first format, written by the version-1 writer: still read.
    seeds.push(RING_V1_FIXTURE.to_vec());
    seeds
}

/// `breadcrumb/tests/data/ring-v1.bin`: 16 slots, wrapped, two calls in flight, a status.
pub(crate) const RING_V1_FIXTURE: &[u8] = include_bytes!("../../breadcrumb/tests/data/ring-v1.bin");

/// `/proc/<pid>/<file>` and `/proc/<pid>/task/<tid>/<file>` of up to 24 processes of this machine, plus `extra`.
/// Only files that never take the target's mmap lock (stat, status, wchan, syscall, stack, cgroup).
pub(crate) fn proc_seeds(file: &str, extra: &[&[u8]]) -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = extra.iter().map(|s| s.to_vec()).collect();
    let mut dirs = vec![PathBuf::from("/proc/self"), PathBuf::from("/proc/1")];
    if let Ok(entries) = std::fs::read_dir("/proc") {
        let mut pids: Vec<u32> = entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        pids.sort_unstable();
        dirs.extend(
            pids.iter()
                .take(24)
                .map(|p| PathBuf::from(format!("/proc/{p}"))),
        );
    }
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        dirs.extend(tasks.filter_map(|t| t.ok()).map(|t| t.path()).take(4));
    }
    for dir in dirs {
        if let Ok(bytes) = std::fs::read(dir.join(file)) {
            if bytes.len() <= 64 << 10 && !seeds.contains(&bytes) {
                seeds.push(bytes);
            }
        }
    }
    if seeds.is_empty() {
        seeds.push(Vec::new());
    }
    seeds
}

/// A field of every thread in the H200 recording (capture/tests/data), as bytes.
pub(crate) fn recording_field(field: &str) -> Vec<Vec<u8>> {
    let recording: serde_json::Value = serde_json::from_slice(include_bytes!(
        "../../capture/tests/data/h200-nvidia-uvm-dstate.json"
    ))
    .unwrap_or_default();
    recording["threads"]
        .as_array()
        .map(|threads| {
            threads
                .iter()
                .filter_map(|t| t[field].as_str().map(|s| s.as_bytes().to_vec()))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn fd_seeds() -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = [
        "/dev/nvidiactl",
        "/dev/nvidia0",
        "/dev/nvidia-uvm",
        "/tmp/x.ring (deleted)",
        "socket:[123456]",
        "pipe:[42]",
        "anon_inode:[eventfd]",
        "anon_inode:dmabuf",
        "pid:[4026531836]",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    for dir in ["/proc/self/fd", "/proc/self/ns"] {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.filter_map(|e| e.ok()) {
                if let Ok(target) = std::fs::read_link(entry.path()) {
                    seeds.push(target.into_os_string().into_encoded_bytes());
                }
            }
        }
    }
    seeds
}

pub(crate) fn config_seeds() -> Vec<Vec<u8>> {
    vec![
        include_bytes!("../../systemd/agent.example.json").to_vec(),
        b"{}".to_vec(),
        br#"{"out":"/tmp/x","match_comm":["^python$"],"ring_dir":"/run/rings","interval":0.5,"threshold":2,"samples":1}"#.to_vec(),
        br#"{"match_cgroup":["kubepods"],"gpu":false,"rate_limit":"0s","gpu_rescan":"250ms","log_format":"json","max_targets":1}"#.to_vec(),
    ]
}

pub(crate) fn incident_seeds() -> Vec<Vec<u8>> {
    let mut seeds = vec![include_bytes!("../../reports/tests/data/incident-v1.json").to_vec()];
    let mut fresh = reports::Incident::new(4242);
    fresh.process.cmdline = Some(vec!["python".into(), "--token".into(), "abc".into()]);
    if let Ok(json) = serde_json::to_vec(&fresh) {
        seeds.push(json);
    }
    seeds
}

pub(crate) fn redact_seeds() -> Vec<Vec<u8>> {
    [
        "python\0train.py\0--token\0abc\0--max-tokens\x00128",
        "curl\0-H\0Authorization: Bearer abc\0-u\0a:b\0https://u:p@h/x?access_token=t&x=1",
        "sshpass\0-p\0pw\0ssh\0-p\x0022\0user:pw@host",
        "sh\0-c\0mysql -uroot -phunter2 db && curl -H 'X-Api-Key: k' https://hooks.slack.com/services/T/B/X",
        "env\0HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz\0ghp_16C7e42F292c6912E7710c838347Ae178B4a\0AKIAIOSFODNN7EXAMPLE",
        "x\0eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig\0--db-password:x\0-Dpassword=y",
        // Issue 26: PEM blocks (whole, spread over arguments, cut short), JSON/YAML with secret keys, JVM options.
        "app\0--tls\0-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----",
        "app\0-----BEGIN\0RSA\0PRIVATE\0KEY-----\0MIIEowIBAAKCAQEA\0-----END\0RSA\0PRIVATE\0KEY-----",
        "app\0-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXktdjE",
        "app\0--config\0{\"token\": \"abc\", \"db\": {\"password\": \"p\"}, \"max_tokens\": 64}",
        "app\0--values\0auth:\n  - apiKey: abc\n{token: x, user: y}\0sh\0-c\0curl -d '{\\\"secret\\\": \\\"s\\\"}'",
        "java\0-Xpassword\0pw\0-Xpassword:pw\0-XX:KeyStorePassword=pw\0-Dkey=pw\0-Xmx4g",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}
