//! One target per hostile input, each with the real inputs it starts from.
//!
//! | target | what it calls | seeds |
//! |---|---|---|
//! | `ring` | `breadcrumb::parse_ring` + `in_flight_calls`; every 256th accepted ring also rendered in an incident | rings written by `breadcrumb::Writer` (format v2: 4, 16, 64 slots; one lane and 4 lanes with 3 threads, a cross-lane exit; enters, exits, labels, status) and the v1 fixture `breadcrumb/tests/data/ring-v1.bin` |
//! | `ring-file` | `breadcrumb::read_ring_with_bytes` on a file of the bytes; its saved copy must re-parse to the same records | the same rings |
//! | `ring-header` | `breadcrumb::parse_header`, `identity::parse_boot_id` | the same rings |
//! | `stat` | `capture::parse::stat::{Stat::parse, parse_lite}`, `breadcrumb::identity::parse_stat_start_time` | this machine's `/proc/*/stat`, task stats |
//! | `status` | `capture::parse::status::Status::parse` | `/proc/*/status` |
//! | `wchan` | `capture::parse::wchan::parse` | `/proc/*/wchan`, the H200 recording |
//! | `syscall` | `capture::parse::syscall::Syscall::parse`, `syscalls::name` | `/proc/*/syscall`, the H200 recording |
//! | `stack` | `capture::parse::stack::parse` + `site::classify` | `/proc/*/stack`, the H200 recording |
//! | `explain` | `capture::explain::{explain, markdown}` | the recorded public hung-task traces (`capture/tests/data/traces`) |
//! | `cgroup` | `capture::parse::cgroup::{parse, container_id}` | `/proc/*/cgroup`, docker/podman/kubernetes paths |
//! | `fd` | `capture::parse::fd::{parse_link, parse_ns_inode}` | links of `/proc/self/fd/*`, `/proc/self/ns/*` |
//! | `kmsg` | `capture::parse::kmsg::{parse_record, classify}` | kmsg records (Xid, hung task, continuation) |
//! | `pressure` | `capture::parse::pressure::Psi::parse`, `capture::parse::{meminfo, boot_id}::parse` | this machine's /proc/pressure/*, /proc/meminfo, boot_id |
//! | `config` | `agent::daemon::config::resolve` on a file holding the bytes (there is no public bytes parser) | systemd/agent.example.json and variants |
//! | `incident` | `serde_json` → `reports::Incident`, `render::markdown`, `verdict::verdict`, `Incident::redacted`, `capture::render::{markdown, text}` of its latest samples; asserts no control character reaches a view | reports/tests/data/incident-v1.json, a new incident |
//! | `netlink` | `capture::taskstats::{parse_tgid_reply, parse_family_reply}`, `capture::proc_events::parse_datagram` | a taskstats answer recorded from Linux 6.18, a proc connector exec event |
//! | `redact` | `reports::redact::redact_cmdline` on NUL-separated args; asserts idempotence and arity | command lines with secrets, PEM blocks, JSON/YAML arguments, JVM options |

use std::cell::Cell;
use std::path::PathBuf;

use breadcrumb::ReadOptions;
use capture::parse::{cgroup, fd, stack, stat, status, syscall, wchan, Parse};

use crate::seeds::{
    config_seeds, fd_seeds, incident_seeds, proc_seeds, recording_field, redact_seeds, ring_seeds,
};

/// Whether the target decoded the input (accepted inputs may join the corpus).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Accepted,
    Rejected,
}

/// A fuzz target.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]) -> Outcome,
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// Byte range most mutations land in (the ring header), if any.
    pub focus: Option<(usize, usize)>,
    /// Words of the input's language, inserted by the mutator.
    pub dict: &'static [&'static [u8]],
    /// Inputs are cut to this length.
    pub max_len: usize,
}

fn outcome<T, E>(r: &Result<T, E>) -> Outcome {
    if r.is_ok() {
        Outcome::Accepted
    } else {
        Outcome::Rejected
    }
}

/// Tokens of the ring format (magic, versions 1 and 2, lane/slot counts, the closed bit) for every ring target.
const RING_DICT: &[&[u8]] = &[
    b"WEDGERNG",
    b"\x01\0\0\0",
    b"\x02\0\0\0",
    b"\0\x02\0\0",
    b"\x80\0\0\0",
    b"\0\0\0\x80",
    b"\x40\0\0\0",
];

pub const TARGETS: &[Target] = &[
    Target {
        name: "ring",
        run: ring,
        seeds: ring_seeds,
        focus: None,
        dict: RING_DICT,
        max_len: 64 << 10,
    },
    Target {
        name: "ring-header",
        run: ring_header,
        seeds: ring_seeds,
        focus: Some((0, 512)),
        dict: RING_DICT,
        max_len: 64 << 10,
    },
    Target {
        name: "ring-file",
        run: ring_file,
        seeds: ring_seeds,
        focus: None,
        dict: RING_DICT,
        max_len: 64 << 10,
    },
    Target {
        name: "stat",
        run: stat_target,
        seeds: || {
            proc_seeds("stat", &[b"1 (a) b) R 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 42 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"])
        },
        focus: None,
        dict: &[
            b") ",
            b" (",
            b" D ",
            b" R ",
            b"18446744073709551615",
            b"-1",
            b"\n",
        ],
        max_len: 4096,
    },
    Target {
        name: "status",
        run: status_target,
        seeds: || proc_seeds("status", &[]),
        focus: None,
        dict: &[
            b"\nNSpid:\t",
            b"\nState:\tD (disk sleep)",
            b"\nvoluntary_ctxt_switches:\t",
            b"\nTgid:\t",
            b":\t",
            b" kB",
        ],
        max_len: 8192,
    },
    Target {
        name: "wchan",
        run: wchan_target,
        seeds: || {
            let mut seeds = proc_seeds("wchan", &[b"0", b"", b"do_sys_poll"]);
            seeds.extend(recording_field("wchan"));
            seeds
        },
        focus: None,
        dict: &[b"0", b"\n", b"+0x"],
        max_len: 512,
    },
    Target {
        name: "syscall",
        run: syscall_target,
        seeds: || {
            proc_seeds(
                "syscall",
                &[
                    b"running\n",
                    b"-1 0x7ffd 0x0\n",
                    b"16 0x3 0xc020462a 0x7ffc 0x0 0x0 0x0 0x7ffc 0x7f00\n",
                ],
            )
        },
        focus: None,
        dict: &[b" 0x", b"running", b"-1 ", b"\n"],
        max_len: 512,
    },
    Target {
        name: "stack",
        run: stack_target,
        seeds: || {
            let mut seeds = proc_seeds("stack", &[]);
            seeds.extend(recording_field("stack"));
            seeds
        },
        focus: None,
        dict: &[
            b"[<0>] ",
            b"+0x",
            b"/0x",
            b" [nvidia_uvm]",
            b"\n",
            b"uvm_",
            b"do_exit",
        ],
        max_len: 16 << 10,
    },
    Target {
        name: "explain",
        run: explain_target,
        seeds: trace_seeds,
        focus: None,
        dict: &[
            b"INFO: task ",
            b" blocked for more than 120 seconds.\n",
            b"Call Trace:\n",
            b" <TASK>\n",
            b" ? ",
            b"+0x",
            b"/0x",
            b" [amdgpu]",
            b") from [<",
            b"task:",
            b" state:D",
            b"Workqueue: ",
            b"\n",
        ],
        max_len: 64 << 10,
    },
    Target {
        name: "cgroup",
        run: cgroup_target,
        seeds: || {
            proc_seeds(
                "cgroup",
                &[
                    b"0::/system.slice/docker-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n",
                    b"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n",
                    b"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope/container\n",
                    b"12:memory:/docker/0123456789ab\n11:cpu,cpuacct:/\n",
                ],
            )
        },
        focus: None,
        dict: &[
            b"0::/",
            b":",
            b"docker-",
            b"libpod-",
            b"cri-containerd-",
            b".scope",
            b"\n",
        ],
        max_len: 8192,
    },
    Target {
        name: "fd",
        run: fd_target,
        seeds: fd_seeds,
        focus: None,
        dict: &[
            b"socket:[",
            b"]",
            b"anon_inode:",
            b" (deleted)",
            b"pid:[",
            b"/dev/nvidia",
        ],
        max_len: 8192,
    },
    Target {
        name: "kmsg",
        run: kmsg_target,
        seeds: || {
            [
                "6,1234,5678901,-;nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver",
                "3,2001,7000000,-;NVRM: Xid (PCI:0000:18:00): 79, pid=4242, GPU has fallen off the bus.",
                "4,2002,7000100,c;INFO: task python:4242 blocked for more than 120 seconds.\n SUBSYSTEM=pci",
                "0,1,0,-;",
            ]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect()
        },
        focus: None,
        dict: &[
            b",",
            b";",
            b"-",
            b"Xid",
            b"NVRM: ",
            b"blocked for more than",
            b"\\x0a",
            b"\n ",
        ],
        max_len: 8192,
    },
    Target {
        name: "pressure",
        run: pressure_target,
        seeds: || {
            let mut seeds: Vec<Vec<u8>> = [
                "/proc/pressure/cpu",
                "/proc/pressure/memory",
                "/proc/pressure/io",
                "/proc/meminfo",
                "/proc/sys/kernel/random/boot_id",
            ]
            .iter()
            .filter_map(|p| std::fs::read(p).ok())
            .collect();
            seeds.push(b"some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=1.50 avg60=0.10 avg300=0.01 total=123\n".to_vec());
            seeds.push(b"MemTotal:       131072000 kB\nMemAvailable:   100000000 kB\nHugePages_Total:       0\n".to_vec());
            seeds
        },
        focus: None,
        dict: &[
            b"some ", b"full ", b"avg10=", b"total=", b" kB\n", b":", b"1e400", b"-",
        ],
        max_len: 8192,
    },
    Target {
        name: "config",
        run: config_target,
        seeds: config_seeds,
        focus: None,
        dict: &[
            b"\"out\":",
            b"\"match_comm\":",
            b"\"ring_dir\":",
            b"\"interval\":",
            b"\"threshold\":",
            b"\"samples\":",
            b"\"max_targets\":",
            b"\"log_format\":",
            b"\"1ms\"",
            b"\"10m\"",
            b"1e308",
            b"-1",
            b"null",
            b"[",
            b"]",
            b"{",
            b"}",
            b",",
            b"\"\"",
            b"\"(\"",
            b"\"\\u0000\"",
        ],
        max_len: 16 << 10,
    },
    Target {
        name: "incident",
        run: incident_target,
        seeds: incident_seeds,
        focus: None,
        dict: &[
            b"null",
            b"true",
            b"[]",
            b"{}",
            b"\"\"",
            b"1e400",
            b"-1",
            b"18446744073709551616",
            b"\"\\ud800\"",
            b"\"threads\":",
            b"\"samples\":",
            b"\"records\":",
            b"\"cmdline\":",
            b"\"```\"",
            b"\"<details>\"",
        ],
        max_len: 256 << 10,
    },
    Target {
        name: "netlink",
        run: netlink_target,
        seeds: netlink_seeds,
        focus: Some((0, 64)),
        dict: &[
            b"\x10\0\0\0",
            b"\x03\0",
            b"\x02\0",
            b"\x01\0\0\0\x01\0\0\0",
            b"\x08\0\x02\0",
            b"\x00\0\0\x80",
        ],
        max_len: 4096,
    },
    Target {
        name: "redact",
        run: redact_target,
        seeds: redact_seeds,
        focus: None,
        dict: &[
            b"\0",
            b" ",
            b"--token",
            b"-p",
            b"=",
            b":",
            b"@",
            b"://",
            b"Authorization: Bearer ",
            b"ghp_",
            b"eyJ",
            b"\0mysql\0",
            b"\0ssh\0",
            b"\0curl\0-u\0",
            b"'",
            b"\"",
            b"/webhooks/",
            b"?sig=",
        ],
        max_len: 2048,
    },
];

/// Inputs that once failed (fuzz/regressions/`<target>.<what>.bin`): replayed by a test, and seeds of every run.
pub fn regressions(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/regressions"));
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut found: Vec<(PathBuf, Vec<u8>)> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.split_once('.'))
                .is_some_and(|(name, _)| name == target)
        })
        .filter_map(|p| std::fs::read(&p).ok().map(|bytes| (p, bytes)))
        .collect();
    found.sort();
    found
}

/// The target called `name`.
pub fn find(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

// ---- targets ----

thread_local! {
    static ACCEPTED_RINGS: Cell<u64> = const { Cell::new(0) };
}

fn ring(bytes: &[u8]) -> Outcome {
    // compute_age off: it reads this reader's boot id from /proc on every call; ages are fed below instead.
    let options = ReadOptions {
        compute_age: false,
        ..ReadOptions::default()
    };
    let Ok(snapshot) = breadcrumb::parse_ring(bytes, &options) else {
        return Outcome::Rejected;
    };
    let now = match bytes.len() % 3 {
        0 => None,
        1 => Some(0),
        _ => Some(u64::MAX),
    };
    let _ = breadcrumb::in_flight_calls(&snapshot.records, now);
    let _ = snapshot.last(8);
    let n = ACCEPTED_RINGS.with(|c| {
        c.set(c.get() + 1);
        c.get()
    });
    if n % 256 == 1 {
        // The path a ring's labels and status take into a report.
        let mut incident = reports::Incident::new(1);
        incident.ring = Some(reports::model::RingExcerpt::from_snapshot(
            None, &snapshot, 64,
        ));
        let _ = reports::render::markdown(&incident);
        let _ = reports::verdict::verdict(&incident);
    }
    Outcome::Accepted
}

thread_local! {
    /// One ring file per thread, rewritten for every execution of `ring-file`.
    static RING_FILE: PathBuf = scratch_file("ring");
}

/// The reader's I/O path (`read_ring_with_bytes`: open, fstat, bounded copy, two passes) on a file of the bytes.
fn ring_file(bytes: &[u8]) -> Outcome {
    RING_FILE.with(|path| {
        if std::fs::write(path, bytes).is_err() {
            return Outcome::Rejected;
        }
        let options = ReadOptions {
            compute_age: false,
            ..ReadOptions::default()
        };
        let read = breadcrumb::read_ring_with_bytes(path, &options);
        if let Ok((snapshot, copy)) = &read {
            // The saved copy must parse to the same records (the evidence file is what a report ships).
            let reparsed = breadcrumb::parse_ring(copy, &options)
                .expect("the reader's own copy does not parse");
            assert_eq!(
                reparsed.records, snapshot.records,
                "the saved copy gives other records"
            );
        }
        outcome(&read)
    })
}

fn scratch_file(what: &str) -> PathBuf {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    dir.join(format!(
        "wedge-fuzz-{what}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ))
}

fn ring_header(bytes: &[u8]) -> Outcome {
    let _ = breadcrumb::identity::parse_boot_id(&bytes[..bytes.len().min(64)]);
    let header = breadcrumb::parse_header(bytes);
    if let Ok(h) = &header {
        let _ = h.needed_len();
    }
    outcome(&header)
}

fn stat_target(bytes: &[u8]) -> Outcome {
    let _ = stat::parse_lite(bytes);
    let _ = breadcrumb::identity::parse_stat_start_time(bytes);
    let parsed = stat::Stat::parse(bytes);
    if let Ok(s) = &parsed {
        let _ = s.cpu_ticks();
    }
    outcome(&parsed)
}

fn status_target(bytes: &[u8]) -> Outcome {
    let parsed = status::Status::parse(bytes);
    if let Ok(s) = &parsed {
        let _ = s.ctxt_switches();
    }
    outcome(&parsed)
}

fn wchan_target(bytes: &[u8]) -> Outcome {
    outcome(&wchan::parse(bytes))
}

fn syscall_target(bytes: &[u8]) -> Outcome {
    let parsed = syscall::Syscall::parse(bytes);
    if let Some(nr) = parsed.as_ref().ok().and_then(|s| s.nr()) {
        let _ = capture::decode::syscalls::name(capture::Arch::host(), nr);
    }
    outcome(&parsed)
}

fn stack_target(bytes: &[u8]) -> Outcome {
    let parsed = stack::parse(bytes);
    if let Ok(frames) = &parsed {
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(64)]);
        let _ = capture::site::classify(frames, Some(&text), Some("ioctl"));
        let _ = capture::site::classify(frames, None, None);
    }
    outcome(&parsed)
}

fn explain_target(bytes: &[u8]) -> Outcome {
    let parsed = capture::explain::explain(bytes);
    if let Ok(explained) = &parsed {
        let _ = capture::explain::markdown(explained);
    }
    outcome(&parsed)
}

/// The recorded public traces, read at run time (they are test data of the capture crate).
fn trace_seeds() -> Vec<Vec<u8>> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../capture/tests/data/traces");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return vec![b"[<0>] mutex_lock+0x1/0x2\n".to_vec()];
    };
    entries
        .filter_map(|e| std::fs::read(e.ok()?.path()).ok())
        .collect()
}

fn cgroup_target(bytes: &[u8]) -> Outcome {
    let parsed = cgroup::parse(bytes);
    if let Ok(lines) = &parsed {
        for line in lines {
            let _ = line.is_v2();
            let _ = cgroup::container_id(&line.path);
        }
    }
    if let Ok(text) = std::str::from_utf8(bytes) {
        let _ = cgroup::container_id(text);
    }
    outcome(&parsed)
}

fn fd_target(bytes: &[u8]) -> Outcome {
    let _ = fd::parse_ns_inode(bytes);
    let parsed = fd::parse_link(bytes);
    if let Ok(target) = &parsed {
        let _ = target.path();
    }
    outcome(&parsed)
}

/// Netlink datagrams: a taskstats answer (its request's seq and tgid taken from the bytes, so that
/// mutations reach the stats) and the controller's family answer, then the same bytes as proc connector
/// events.
fn netlink_target(bytes: &[u8]) -> Outcome {
    let word = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
            .unwrap_or(0)
    };
    let (seq, tgid) = (word(8), word(28) as i32);
    let stats = capture::taskstats::parse_tgid_reply(bytes, seq, tgid);
    let _ = capture::taskstats::parse_family_reply(bytes, seq);
    let mut events = Vec::new();
    let proc_events = capture::proc_events::parse_datagram(bytes, &mut events);
    if stats.is_ok() || (proc_events.is_ok() && !events.is_empty()) {
        Outcome::Accepted
    } else {
        Outcome::Rejected
    }
}

fn netlink_seeds() -> Vec<Vec<u8>> {
    let hex = include_str!("../../capture/tests/data/taskstats-tgid-reply.hex").trim();
    let reply: Vec<u8> = (0..hex.len() / 2)
        .filter_map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
        .collect();
    // A proc connector exec event: nlmsghdr, cn_msg (proc:proc, 24 bytes of data), proc_event.
    let mut exec = Vec::new();
    // Type 3 (NLMSG_DONE) with flags 0 is the second word, little or big endian alike in its u16s.
    for w in [60u32, 3, 0, 0, 1, 1, 0, 0] {
        exec.extend_from_slice(&w.to_ne_bytes());
    }
    exec.extend_from_slice(&24u16.to_ne_bytes());
    exec.extend_from_slice(&0u16.to_ne_bytes());
    for w in [2u32, 0, 0, 0, 4242, 4242] {
        exec.extend_from_slice(&w.to_ne_bytes());
    }
    vec![reply, exec]
}

fn kmsg_target(bytes: &[u8]) -> Outcome {
    let parsed = capture::parse::kmsg::parse_record(bytes);
    let _ = capture::parse::kmsg::classify(&String::from_utf8_lossy(bytes));
    outcome(&parsed)
}

fn pressure_target(bytes: &[u8]) -> Outcome {
    let _ = capture::parse::boot_id::parse(bytes);
    let psi = capture::parse::pressure::Psi::parse(bytes);
    let meminfo = capture::parse::meminfo::parse(bytes);
    if psi.is_ok() || meminfo.is_ok() {
        Outcome::Accepted
    } else {
        Outcome::Rejected
    }
}

thread_local! {
    /// One file per thread, rewritten for every execution (resolve() reads a path, not bytes).
    static CONFIG_FILE: PathBuf = scratch_file("config");
}

fn config_target(bytes: &[u8]) -> Outcome {
    CONFIG_FILE.with(|path| {
        if std::fs::write(path, bytes).is_err() {
            return Outcome::Rejected;
        }
        use agent::settings::{Options, Settings};
        let resolved = Settings::load(Some(path), &Options::default());
        if let Ok(settings) = &resolved {
            let _ = settings.summary();
            let _ = settings.selection();
            let _ = settings.needs_restart(settings);
            // --check-config's output is a config that means the same.
            let printed = serde_json::to_vec(&settings.to_config()).expect("settings serialize");
            let again = Options::from_config(&printed)
                .and_then(Settings::resolve)
                .expect("--check-config output is accepted as a config");
            assert_eq!(&again, settings, "config round trip changed the settings");
        }
        outcome(&resolved)
    })
}

/// Remove this thread's scratch files (at the end of a run).
pub fn cleanup() {
    for file in [&CONFIG_FILE, &RING_FILE] {
        file.with(|path| {
            let _ = std::fs::remove_file(path);
        });
    }
}

fn incident_target(bytes: &[u8]) -> Outcome {
    let parsed = serde_json::from_slice::<reports::Incident>(bytes);
    if let Ok(incident) = &parsed {
        let redacted = incident.redacted();
        let _ = reports::verdict::verdict(&redacted);
        let md = reports::render::markdown(&redacted);
        assert!(
            md.chars().count() <= reports::limits::MAX_MARKDOWN_CHARS,
            "markdown over its cap"
        );
        assert_escaped(&md, "report.md");
        // The same snapshots through `capture --format markdown|text`.
        for sample in redacted.samples.iter().rev().take(2) {
            let snapshot = &sample.snapshot;
            assert_escaped(&capture::render::markdown(snapshot), "capture markdown");
            assert_escaped(&capture::render::text(snapshot), "capture text");
        }
        let _ = serde_json::to_vec(&redacted);
    }
    outcome(&parsed)
}

/// Every string of an incident is someone else's choice: none may reach a view with a control or bidi character
/// of its own (the view's newlines are its own).
fn assert_escaped(view: &str, what: &str) {
    assert!(
        !view
            .chars()
            .any(|c| c != '\n' && capture::escape::needs_escape(c)),
        "an unescaped control character reached {what}"
    );
}

fn redact_target(bytes: &[u8]) -> Outcome {
    let args: Vec<String> = bytes
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let once = reports::redact::redact_cmdline(&args);
    assert_eq!(
        once.len(),
        args.len(),
        "redaction changed the number of arguments"
    );
    let twice = reports::redact::redact_cmdline(&once);
    assert_eq!(once, twice, "redaction is not idempotent on {args:?}");
    let text = args.join(" ");
    let once = reports::redact::redact_text(&text);
    assert_eq!(
        reports::redact::redact_text(&once),
        once,
        "redact_text is not idempotent on {text:?}"
    );
    Outcome::Accepted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{run, RunOptions};

    /// The heap counters are process-wide: one test at a time, or one test's allocations land in another's.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every target, a short run each (CI's fuzz pass): no panic, no execution over its heap budget, and the
    /// seeds themselves are accepted (a target whose real inputs fail would fuzz nothing but its error path).
    #[test]
    fn every_target_runs_clean_for_a_short_count() {
        let _serial = serial();
        let crash_dir =
            std::env::temp_dir().join(format!("wedge-fuzz-test-{}", std::process::id()));
        for target in TARGETS {
            let accepted = (target.seeds)()
                .iter()
                .filter(|s| (target.run)(s) == Outcome::Accepted)
                .count();
            assert!(accepted > 0, "{}: no seed is accepted", target.name);
            let report = run(
                target,
                &RunOptions {
                    iterations: 3_000,
                    seed: 13,
                    crash_dir: crash_dir.clone(),
                    max_saved: 4,
                },
            );
            eprintln!("{}", report.line());
            assert_eq!(report.executions, 3_000);
            assert!(report.clean(), "{}: {:?}", target.name, report.saved);
            assert!(
                report.accepted > 0,
                "{}: every mutated input was rejected",
                target.name
            );
        }
        cleanup();
    }

    /// Every input that once made a target fail passes now (each was fixed at its source).
    #[test]
    fn saved_regressions_pass() {
        let _serial = serial();
        let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/regressions"));
        let mut replayed = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap();
            let (target, _) = name.split_once('.').unwrap();
            assert!(find(target).is_some(), "{name}: no target {target:?}");
        }
        for target in TARGETS {
            for (path, input) in regressions(target.name) {
                let result = std::panic::catch_unwind(|| (target.run)(&input));
                assert!(result.is_ok(), "{} fails again", path.display());
                replayed += 1;
            }
        }
        assert!(
            replayed >= 3,
            "the regression inputs were not found in {}",
            dir.display()
        );
    }

    /// The engine does catch a panic, counts it and writes the input; a check that cannot fail is a defect.
    #[test]
    fn a_panicking_target_is_caught_and_its_input_saved() {
        let _serial = serial();
        fn panics_on_x(b: &[u8]) -> Outcome {
            assert!(!b.contains(&b'x'), "found x");
            Outcome::Rejected
        }
        let target = Target {
            name: "selftest",
            run: panics_on_x,
            seeds: || vec![b"abcx".to_vec(), b"abc".to_vec()],
            focus: None,
            dict: &[],
            max_len: 64,
        };
        let crash_dir =
            std::env::temp_dir().join(format!("wedge-fuzz-selftest-{}", std::process::id()));
        let report = run(
            &target,
            &RunOptions {
                iterations: 200,
                seed: 1,
                crash_dir: crash_dir.clone(),
                max_saved: 2,
            },
        );
        assert!(report.panics > 0);
        assert!(!report.clean());
        assert_eq!(report.saved.len(), 2);
        let saved = std::fs::read(&report.saved[0]).unwrap();
        assert!(saved.contains(&b'x'));
        let why = std::fs::read_to_string(report.saved[0].with_extension("txt")).unwrap();
        assert!(why.contains("found x"), "{why}");
        let _ = std::fs::remove_dir_all(&crash_dir);
    }

    /// An execution that allocates far beyond its input is flagged even though it frees the memory again.
    #[test]
    fn an_execution_over_its_heap_budget_is_flagged() {
        let _serial = serial();
        fn hog(b: &[u8]) -> Outcome {
            let v = vec![1u8; 64 << 20];
            std::hint::black_box(&v);
            if b.is_empty() {
                Outcome::Rejected
            } else {
                Outcome::Accepted
            }
        }
        let target = Target {
            name: "hog",
            run: hog,
            seeds: || vec![b"a".to_vec()],
            focus: None,
            dict: &[],
            max_len: 16,
        };
        let crash_dir = std::env::temp_dir().join(format!("wedge-fuzz-hog-{}", std::process::id()));
        let report = run(
            &target,
            &RunOptions {
                iterations: 3,
                seed: 1,
                crash_dir: crash_dir.clone(),
                max_saved: 1,
            },
        );
        assert_eq!(report.over_budget, 3);
        assert!(report.max_exec_heap >= 64 << 20);
        let _ = std::fs::remove_dir_all(&crash_dir);
    }
}
