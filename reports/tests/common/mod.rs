//! A realistic incident for the tests: a PyTorch worker wedged in an NVIDIA RM ioctl.
#![allow(dead_code)]

use capture::{IoctlInfo, ProcessSnapshot, StackFrame, SyscallInfo, ThreadSnapshot};
use chrono::{DateTime, Utc};
use reports::model::*;

pub const DETECTED_MONO: u64 = 5_000_000_000_000;
pub const S: u64 = 1_000_000_000;

pub fn wall(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

pub fn at(wall_text: &str, mono: u64) -> Timestamp {
    Timestamp {
        wall: Some(wall(wall_text)),
        monotonic_ns: Some(mono),
        boottime_ns: Some(mono + 7 * S),
    }
}

pub fn frames(text: &str) -> Vec<StackFrame> {
    text.lines()
        .map(|l| {
            let (func, rest) = l.split_once('+').unwrap();
            let (offs, module) = match rest.split_once(' ') {
                Some((o, m)) => (
                    o,
                    Some(m.trim_matches(|c| c == '[' || c == ']').to_string()),
                ),
                None => (rest, None),
            };
            let (off, size) = offs.split_once('/').unwrap();
            StackFrame {
                function: func.to_string(),
                offset: u64::from_str_radix(off.trim_start_matches("0x"), 16).unwrap(),
                size: u64::from_str_radix(size.trim_start_matches("0x"), 16).unwrap(),
                module,
            }
        })
        .collect()
}

pub fn rm_thread() -> ThreadSnapshot {
    ThreadSnapshot {
        tid: 4242,
        comm: "python3".into(),
        state: "D".into(),
        wchan: Some("os_acquire_mutex".into()),
        syscall: Some(SyscallInfo::Blocked {
            nr: 16,
            name: Some("ioctl".into()),
            args: vec![
                "0x5".into(),
                "0xc020462a".into(),
                "0x7ffd6c1e2a40".into(),
                "0x0".into(),
                "0x0".into(),
                "0x0".into(),
            ],
            sp: "0x7ffd6c1e29f8".into(),
            pc: "0x7f3a1c91a94b".into(),
        }),
        // Built from JSON so that fields capture adds later (additive) do not break this fixture.
        ioctl: Some(
            serde_json::from_value::<IoctlInfo>(serde_json::json!({
                "fd": 5, "fd_target": "/dev/nvidiactl", "request": "0xc020462a", "dir": "read|write",
                "type": 0x46, "nr": 0x2a, "size": 32, "name": "NV_ESC_RM_CONTROL", "driver": "nvidia-rm"
            }))
            .unwrap(),
        ),
        stack: frames(
            "__down_common+0x1b4/0x2f0\n__down+0x1d/0x30\ndown+0x48/0x60\nos_acquire_mutex+0x2d/0x50 [nvidia]\n\
             _nv000713rm+0x3a/0x80 [nvidia]\nrm_ioctl+0x6b/0xe0 [nvidia]\nnvidia_ioctl+0x57a/0x8e0 [nvidia]\n\
             nvidia_unlocked_ioctl+0x21/0x30 [nvidia]\n__x64_sys_ioctl+0x94/0xd0\nx64_sys_call+0x11e4/0x2350\n\
             do_syscall_64+0x71/0x290\nentry_SYSCALL_64_after_hwframe+0x76/0x7e",
        ),
        site: Some("ioctl → nvidia: rm_ioctl … os_acquire_mutex (RM lock wait)".into()),
        voluntary_ctxt_switches: Some(18_231),
        nonvoluntary_ctxt_switches: Some(977),
        cpu_ticks: Some(40_512),
        processor: Some(17),
        ..ThreadSnapshot::default()
    }
}

pub fn uvm_thread() -> ThreadSnapshot {
    ThreadSnapshot {
        tid: 4251,
        comm: "cuda-EvtHandlr".into(),
        state: "D".into(),
        wchan: Some("nv_kthread_q_flush".into()),
        syscall: Some(SyscallInfo::Blocked {
            nr: 202,
            name: Some("futex".into()),
            args: vec!["0x7f39f4000b70".into(), "0x80".into(), "0x0".into(), "0x0".into(), "0x0".into(), "0x0".into()],
            sp: "0x7f39fbffe9d0".into(),
            pc: "0x7f3a1c8a1117".into(),
        }),
        stack: frames(
            "nv_kthread_q_flush+0x83/0x140 [nvidia_uvm]\nuvm_tools_flush_events+0x1a/0x30 [nvidia_uvm]\n\
             uvm_va_space_destroy+0x390/0x510 [nvidia_uvm]\nuvm_release.isra.0+0x84/0x190 [nvidia_uvm]\n\
             __fput+0xed/0x2c0\ntask_work_run+0x62/0xa0\ndo_exit+0x247/0xac0\ndo_syscall_64+0x250/0x290\n\
             entry_SYSCALL_64_after_hwframe+0x76/0x7e",
        ),
        site: Some("exit path → nvidia_uvm: uvm_va_space_destroy … nv_kthread_q_flush".into()),
        voluntary_ctxt_switches: Some(12),
        nonvoluntary_ctxt_switches: Some(0),
        ..ThreadSnapshot::default()
    }
}

pub fn sleeping_thread() -> ThreadSnapshot {
    ThreadSnapshot {
        tid: 4250,
        comm: "pt_autograd_0".into(),
        state: "S".into(),
        ..ThreadSnapshot::default()
    }
}

pub fn snapshot(mono: u64) -> ProcessSnapshot {
    ProcessSnapshot {
        pid: 4242,
        arch: "x86_64".into(),
        monotonic_ns: mono,
        boottime_ns: mono + 7 * S,
        threads: vec![rm_thread(), sleeping_thread(), uvm_thread()],
        notes: vec![],
        summarized: None,
    }
}

fn args(bytes: u64) -> Args {
    Args {
        bytes,
        ..Args::default()
    }
}

fn record(
    seq: u64,
    kind: RecordKind,
    call_id: u16,
    call: &str,
    a: Args,
    result: Option<i64>,
    mono: u64,
) -> Record {
    Record {
        seq,
        lane: 0,
        tid: 4242,
        kind,
        call_id,
        call: call.into(),
        args: a,
        label: if call == "cuMemAlloc_v2" {
            "optimizer.state".into()
        } else {
            String::new()
        },
        result,
        enter_seq: if kind == RecordKind::Exit {
            Some(seq - 1)
        } else {
            None
        },
        enter_lane: None,
        closed: false,
        monotonic_ns: mono,
    }
}

pub fn ring() -> RingExcerpt {
    let entered = DETECTED_MONO - 312 * S;
    RingExcerpt {
        path: Some("/run/wedge-capture/rings/4242.ring".into()),
        copy: Some("ring.bin".into()),
        read_at: at("2026-12-02T11:34:00.020Z", DETECTED_MONO + 20_000_000),
        header: Some(RingHeader {
            version: 1,
            header_size: 4096,
            slot_size: 128,
            slot_count: 4096,
            writer_pid: 17,
            pidns_inode: 4026532871,
            start_time_ticks: 88_123,
            boot_id: "3f1c2a9e-6b1d-4c55-9f0e-2d7c8a1b4e60".into(),
            clock_id: 1,
            clock: "CLOCK_MONOTONIC".into(),
            created_realtime_ns: 1_796_211_000_000_000_000,
            created_monotonic_ns: DETECTED_MONO - 900 * S,
            ticks_per_second: 100,
            flags: 0,
            head: 6,
            dropped: 0,
            status: None,
            status_code: 0,
            lane_count: 1,
            counter_kind: 0,
            counter_hz: 0,
            created_counter: 0,
            calib_counter: 0,
            calib_monotonic_ns: 0,
            lane_heads: Vec::new(),
        }),
        records: vec![
            record(
                0,
                RecordKind::Enter,
                1,
                "cuInit",
                args(0),
                None,
                entered - 600 * S,
            ),
            record(
                1,
                RecordKind::Exit,
                1,
                "cuInit",
                args(0),
                Some(0),
                entered - 599 * S,
            ),
            record(
                2,
                RecordKind::Enter,
                9,
                "cuMemcpyHtoD_v2",
                Args {
                    bytes: 64 << 20,
                    chunk: 2,
                    chunk_count: 8,
                    ..Args::default()
                },
                None,
                entered - 2 * S,
            ),
            record(
                3,
                RecordKind::Exit,
                9,
                "cuMemcpyHtoD_v2",
                Args {
                    bytes: 64 << 20,
                    chunk: 2,
                    chunk_count: 8,
                    ..Args::default()
                },
                Some(0),
                entered - S,
            ),
            record(
                4,
                RecordKind::Enter,
                5,
                "cuMemAlloc_v2",
                args(48),
                None,
                entered,
            ),
        ],
        in_flight: vec![InFlight {
            tid: 4242,
            seq: 4,
            lane: 0,
            call_id: 5,
            call: "cuMemAlloc_v2".into(),
            args: args(48),
            label: "optimizer.state".into(),
            entered_monotonic_ns: entered,
            age_ns: Some(312 * S + 20_000_000),
        }],
        torn_slots: 0,
        invalid_slots: 0,
        same_boot: Some(true),
        records_omitted: 0,
        in_flight_omitted: 0,
        copy_note: None,
        error: None,
        breadcrumbs: None,
    }
}

/// The full, finished capture.
pub fn incident() -> Incident {
    let d_since = at("2026-12-02T11:28:48Z", DETECTED_MONO - 312 * S);
    let detected = at("2026-12-02T11:34:00Z", DETECTED_MONO);
    Incident {
        // Written by schema version 1 (tests/data/incident-v1.json): no evidence as of detection.
        schema_version: 1,
        id: "20261202T113400Z-gpu01-4242".into(),
        complete: true,
        verdict: String::new(),
        detected_at: detected.clone(),
        updated_at: at("2026-12-02T11:34:02Z", DETECTED_MONO + 2 * S),
        written_by: "wedge-capture 0.1.0".into(),
        episode: Episode {
            status: EpisodeStatus::Open,
            started_at: d_since.clone(),
            resolved_at: None,
            resolved_after_s: None,
            ..Episode::default()
        },
        host: HostInfo {
            hostname: "gpu01".into(),
            boot_id: "3f1c2a9e-6b1d-4c55-9f0e-2d7c8a1b4e60".into(),
            kernel_release: "6.18.44".into(),
            arch: "x86_64".into(),
            nvidia_driver_version: Some("580.159.04".into()),
        },
        process: ProcessInfo {
            pid: 4242,
            start_time: None,
            nspid: vec![4242, 17],
            comm: "python3".into(),
            cgroup: Some("/kubepods.slice/kubepods-pod1.slice/cri-containerd-9d1e0c7a3b.scope".into()),
            container_id: Some("9d1e0c7a3b".into()),
            container: None,
            cmdline: Some(vec![
                "python3".into(),
                "train.py".into(),
                "--hf-token".into(),
                "hf_SECRETSECRET".into(),
                "--data=https://alice:pw@data.example/shards".into(),
                "--lr=3e-4".into(),
            ]),
        },
        wedged_threads: vec![
            WedgedThread {
                tid: 4242,
                comm: "python3".into(),
                d_since: d_since.clone(),
                ..WedgedThread::default()
            },
            WedgedThread {
                tid: 4251,
                comm: "cuda-EvtHandlr".into(),
                d_since: at("2026-12-02T11:29:30Z", DETECTED_MONO - 270 * S),
                ..WedgedThread::default()
            },
        ],
        samples: vec![
            Sample {
                taken_at: at("2026-12-02T11:33:50Z", DETECTED_MONO - 10 * S),
                snapshot: snapshot(DETECTED_MONO - 10 * S),
                ..Sample::default()
            },
            Sample {
                taken_at: detected.clone(),
                snapshot: snapshot(DETECTED_MONO),
                ..Sample::default()
            },
        ],
        ring: Some(ring()),
        kernel_log: vec![
            KernelLogLine::new(Some(1901), Some(6), Some(4_687_002_113), "nvidia-uvm: Loaded the UVM driver, major device number 509."),
            KernelLogLine::new(
                Some(1955),
                Some(3),
                Some(4_690_410_551),
                "NVRM: Xid (PCI:0000:19:00): 109, pid=4242, name=python3, Ch 00000010, errorString CTX SWITCH TIMEOUT, Info 0x3c045",
            ),
            KernelLogLine::new(Some(1960), Some(3), Some(4_811_002_000), "INFO: task python3:4242 blocked for more than 122 seconds."),
        ],
        host_context: HostContext {
            captured_at: at("2026-12-02T11:34:00.050Z", DETECTED_MONO + 50_000_000),
            psi: vec![
                PsiLine {
                    resource: "io".into(),
                    line: "some avg10=0.00 avg60=0.00 avg300=0.00 total=1180".into(),
                },
                PsiLine {
                    resource: "memory".into(),
                    line: "some avg10=0.00 avg60=0.00 avg300=0.00 total=0".into(),
                },
            ],
            meminfo_kb: [("MemAvailable".to_string(), 101_334_512u64), ("MemTotal".to_string(), 131_072_000u64), ("Dirty".to_string(), 412u64)]
                .into_iter()
                .collect(),
            loadavg: Some("3.02 3.01 2.87 2/1534 88121".into()),
            d_state_tasks: vec![
                DStateTask {
                    pid: 4242,
                    tid: 4242,
                    comm: "python3".into(),
                    wchan: Some("os_acquire_mutex".into()),
                    cgroup: Some("/kubepods.slice/kubepods-pod1.slice/cri-containerd-9d1e0c7a3b.scope".into()),
                },
                DStateTask {
                    pid: 3100,
                    tid: 3100,
                    comm: "nvidia-smi".into(),
                    wchan: Some("os_acquire_mutex".into()),
                    cgroup: Some("/system.slice/dcgm.service".into()),
                },
            ],
            d_state_total: Some(3),
        },
        probes: vec![
            Probe {
                name: "cmdline".into(),
                outcome: ProbeOutcome::Ok,
                started_at: at("2026-12-02T11:34:00.060Z", DETECTED_MONO + 60_000_000),
                duration_ms: 3.0,
                output_excerpt: String::new(),
                error: None,
            },
            Probe {
                name: "driver/nvidia/gpus/0000:19:00.0/information".into(),
                outcome: ProbeOutcome::Timeout,
                started_at: at("2026-12-02T11:34:00.070Z", DETECTED_MONO + 70_000_000),
                duration_ms: 2000.0,
                output_excerpt: String::new(),
                error: Some("no answer within 2 s (the read takes the RM lock)".into()),
            },
        ],
        timeline: vec![
            TimelineEvent {
                at: at("2026-12-02T11:28:48Z", DETECTED_MONO - 312 * S),
                event: "thread 4242 entered cuMemAlloc_v2(48 B) (breadcrumb)".into(),
            },
            TimelineEvent {
                at: d_since,
                event: "thread 4242 first seen in D".into(),
            },
            TimelineEvent {
                at: at("2026-12-02T11:28:51.296Z", DETECTED_MONO - 309 * S),
                event: "kernel: NVRM Xid 109 (CTX SWITCH TIMEOUT)".into(),
            },
            TimelineEvent {
                at: detected,
                event: "wedge declared: no progress for 5 samples".into(),
            },
        ],
        not_captured: vec![
            NotCaptured {
                what: "environment".into(),
                why: "never captured (may hold secrets)".into(),
            },
            NotCaptured {
                what: "user-space stack of thread 4242".into(),
                why: "ptrace would block on the wedged thread".into(),
            },
        ],
        ..Incident::default()
    }
}

/// The same wedge as written by schema 2: each judged thread keeps its evidence as of detection.
pub fn incident_v2() -> Incident {
    let mut inc = incident();
    inc.schema_version = SCHEMA_VERSION;
    let detection = inc.samples.last().unwrap().snapshot.clone();
    for w in &mut inc.wedged_threads {
        w.detected_at = Some(inc.detected_at.clone());
        w.at_detection = detection.threads.iter().find(|t| t.tid == w.tid).cloned();
    }
    inc
}
