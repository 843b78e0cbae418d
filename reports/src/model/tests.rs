//! The model's unit tests: clocks, ring paths, parsing old and partial files, kernel log relevance, ids,
//! redaction.

use super::*;

/// `d_since.wall` is never null for a time on this boot: the wall clock of a monotonic time is the
/// wall clock now less the monotonic time elapsed since.
#[test]
fn a_monotonic_time_gets_its_wall_clock_time() {
    let now = Timestamp::now();
    let mono_now = now.monotonic_ns.unwrap();
    let ten_s_ago = Timestamp::at_monotonic(mono_now - 10_000_000_000);
    let wall = ten_s_ago.wall.expect("wall filled");
    let back = (now.wall.unwrap() - wall).num_milliseconds();
    // 10 s, plus what passed between the two reads of the clocks (generous: a loaded CI).
    assert!((9_990..12_000).contains(&back), "{back} ms");
    let boottime_back = now.boottime_ns.unwrap() - ten_s_ago.boottime_ns.unwrap();
    assert!((9_990_000_000..12_000_000_000).contains(&boottime_back));
    assert_eq!(ten_s_ago.monotonic_ns, Some(mono_now - 10_000_000_000));
    // A time that is not in the past has no wall-clock time to give.
    let future = Timestamp::at_monotonic(u64::MAX);
    assert_eq!((future.wall, future.boottime_ns), (None, None));
    // The wall time is in the JSON, not null.
    let json = serde_json::to_value(&ten_s_ago).unwrap();
    assert!(json["wall"].is_string(), "{json}");
}

#[test]
fn a_ring_says_which_breadcrumb_path_wrote_it() {
    let of = |p: &str| breadcrumb_path_of(p).unwrap_or_default();
    assert!(of("/run/rings/4242-99.driver.ring").contains("driver-API interposition"));
    assert!(of("4242-99.cupti.ring").contains("NVML clients may stall during long UVM operations"));
    assert_eq!(
        breadcrumb_path_of("/run/rings/4242-99.ring"),
        None,
        "the program's own ring"
    );
    let excerpt = RingExcerpt::unreadable(Some("/r/1-2.cupti.ring".into()), "gone");
    assert!(excerpt
        .breadcrumbs
        .unwrap()
        .starts_with("breadcrumbs by CUPTI"));
}

#[test]
fn empty_and_partial_json_parse() {
    let empty: Incident = serde_json::from_str("{}").unwrap();
    assert!(!empty.complete);
    let partial: Incident = serde_json::from_str(
        r#"{"id":"x","verdict":"v","episode":{"status":"weird"},"samples":[{"snapshot":{"pid":1,"arch":"x86_64","threads":[]}}],"future_field":1}"#,
    )
    .unwrap();
    assert_eq!(partial.episode.status, EpisodeStatus::Unknown);
    assert_eq!(partial.samples[0].snapshot.pid, 1);
}

#[test]
fn round_trip() {
    let mut inc = Incident::new(4242);
    inc.kernel_log.push(KernelLogLine::new(
        Some(1),
        Some(3),
        Some(5),
        "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
    ));
    let json = serde_json::to_string(&inc).unwrap();
    let back: Incident = serde_json::from_str(&json).unwrap();
    assert_eq!(back, inc);
    let f = back.kernel_log[0].flags;
    assert!(f.nvrm && f.xid && f.fallen_off_bus && !f.hung_task);
}

#[test]
fn kernel_lines_are_marked_by_whom_they_concern() {
    let classify = |text: &str| {
        Relevance::classify(text, &KernelLogFlags::classify(text), 4242, &[4242, 4251])
    };
    assert_eq!(
        classify("INFO: task python3:4251 blocked for more than 122 seconds."),
        Relevance::Target
    );
    assert_eq!(
        classify("python3[4242]: segfault at 0 ip 0"),
        Relevance::Target
    );
    // The same comm with another pid is another process.
    assert_eq!(
        classify("INFO: task python3:977 blocked for more than 122 seconds."),
        Relevance::OtherProcess
    );
    assert_eq!(
        classify("Out of memory: Killed process 31337 (java)"),
        Relevance::OtherProcess
    );
    assert_eq!(
        classify("NVRM: Xid (PCI:0000:01:00): 79, pid=977, GPU has fallen off the bus."),
        Relevance::Nvidia
    );
    assert_eq!(
        classify("NVRM: Xid (PCI:0000:01:00): 13, pid=4242, name=python3"),
        Relevance::Target
    );
    // Bus addresses, times and sizes are not pids.
    assert_eq!(
        classify("pci 0000:01:00.0: BAR 0 [mem 0x4242]"),
        Relevance::Context
    );
    assert_eq!(
        classify("EXT4-fs (loop7): mounted filesystem 4242 r/w"),
        Relevance::Context
    );
}

#[test]
fn clocks_are_read() {
    let t = Timestamp::now();
    assert!(
        t.wall.is_some()
            && t.monotonic_ns.unwrap() > 0
            && t.boottime_ns.unwrap() >= t.monotonic_ns.unwrap() / 2
    );
}

#[test]
fn id_format() {
    let wall = DateTime::parse_from_rfc3339("2026-12-02T11:34:00Z")
        .unwrap()
        .with_timezone(&Utc);
    assert_eq!(
        incident_id(wall, "gpu01", 4242),
        "20261202T113400Z-gpu01-4242"
    );
    assert_eq!(
        incident_id(wall, "a/../b c", 1),
        "20261202T113400Z-a_.._b_c-1"
    );
    assert_eq!(incident_id(wall, "", 1), "20261202T113400Z-host-1");
}

#[test]
fn redacted_copy_hides_secrets() {
    let mut inc = Incident::new(1);
    inc.process.cmdline = Some(vec!["x".into(), "--token".into(), "t".into()]);
    assert_eq!(inc.redacted().process.cmdline.unwrap()[2], "[REDACTED]");
}
