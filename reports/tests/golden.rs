//! Golden tests of the Markdown rendering, and the size cap on a huge incident.
//!
//! `tests/data/incident-v1.json` is an incident as written by schema version 1; it must keep parsing and keep
//! rendering to `tests/data/report.golden.md`. Regenerate both after an intended change with
//! `WEDGE_UPDATE_GOLDEN=1 cargo test -p reports --test golden`, and review the diff. `WEDGE_DUMP_HUGE=FILE` writes
//! the huge incident's rendering to FILE for a look.

mod common;

use std::path::PathBuf;

use capture::{StackFrame, ThreadSnapshot};
use reports::limits::MAX_MARKDOWN_CHARS;
use reports::model::*;
use reports::render::markdown;
use reports::verdict::verdict;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

fn update() -> bool {
    std::env::var_os("WEDGE_UPDATE_GOLDEN").is_some()
}

#[test]
fn schema_v1_file_still_parses_to_the_same_incident() {
    let path = data("incident-v1.json");
    let fixture = common::incident();
    if update() {
        std::fs::write(&path, serde_json::to_string_pretty(&fixture).unwrap()).unwrap();
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let parsed: Incident = serde_json::from_str(&text).unwrap();
    assert_eq!(
        parsed, fixture,
        "incident-v1.json no longer parses to the fixture: a field was renamed or changed"
    );
}

#[test]
fn markdown_matches_golden() {
    // In update mode render the fixture itself: the JSON file may be being rewritten by the test above.
    let incident: Incident = if update() {
        common::incident()
    } else {
        serde_json::from_str(&std::fs::read_to_string(data("incident-v1.json")).unwrap()).unwrap()
    };
    let md = markdown(&incident);
    let path = data("report.golden.md");
    if update() {
        std::fs::write(&path, &md).unwrap();
    }
    let golden = std::fs::read_to_string(&path).unwrap();
    if md != golden {
        let actual = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report.actual.md");
        std::fs::write(&actual, &md).unwrap();
        panic!(
            "rendering differs from {} (actual output in {}); if intended, rerun with WEDGE_UPDATE_GOLDEN=1",
            path.display(),
            actual.display()
        );
    }
}

#[test]
fn verdict_names_thread_call_device_duration_and_breadcrumb() {
    let v = verdict(&common::incident());
    assert_eq!(
        v,
        "thread 4242 `python3` has been in D for 312 s in ioctl `NV_ESC_RM_CONTROL` on `/dev/nvidiactl`; \
         last breadcrumb `cuMemAlloc_v2(48 B)` entered 312 s ago and never returned; 1 more thread in D"
    );
    let md = markdown(&common::incident());
    assert!(
        md.starts_with(&format!("**Verdict:** {v}\n")),
        "the verdict must come first"
    );
    // The secret in the command line never reaches the report.
    assert!(!md.contains("hf_SECRETSECRET") && !md.contains("alice:pw"));
    assert!(md.contains("--hf-token [REDACTED]"));
}

#[test]
fn verdict_without_ioctl_ring_or_d_threads() {
    let mut inc = common::incident();
    inc.ring = None;
    inc.samples.truncate(1);
    let t = &mut inc.samples[0].snapshot.threads[0];
    t.ioctl = None;
    t.syscall = None;
    inc.samples[0].snapshot.threads.remove(2);
    assert_eq!(
        verdict(&inc),
        "thread 4242 `python3` has been in D for 302 s at `os_acquire_mutex`; no breadcrumb ring"
    );
    for t in &mut inc.samples[0].snapshot.threads {
        t.state = "S".into();
    }
    inc.episode.status = EpisodeStatus::Resolved;
    inc.episode.resolved_after_s = Some(330.0);
    assert_eq!(
        verdict(&inc),
        "pid 4242: no thread in D any more; the episode resolved after 330 s"
    );
}

fn huge_incident() -> Incident {
    let mut inc = common::incident();
    let frame = |i: usize| StackFrame {
        function: format!(
            "very_long_kernel_function_name_number_{i}_{}",
            "x".repeat(80)
        ),
        offset: 0x1234,
        size: 0x5678,
        module: Some("nvidia".into()),
    };
    let threads: Vec<ThreadSnapshot> = (0..3000)
        .map(|i| ThreadSnapshot {
            tid: 10_000 + i,
            comm: format!("worker-{i}"),
            state: if i % 2 == 0 { "D".into() } else { "S".into() },
            wchan: Some("os_acquire_mutex".into()),
            stack: (0..30).map(|j| frame(j as usize)).collect(),
            ..ThreadSnapshot::default()
        })
        .collect();
    let latest = inc.samples.len() - 1;
    inc.samples[latest].snapshot.threads.extend(threads);
    for k in 0..20_000u64 {
        inc.kernel_log.push(KernelLogLine::new(
            Some(k),
            Some(4),
            Some(k * 1000),
            format!("NVRM: Xid line {k} {}", "y".repeat(k as usize % 3000)),
        ));
    }
    let ring = inc.ring.as_mut().unwrap();
    let r = ring.records[4].clone();
    for k in 0..20_000u64 {
        let mut r = r.clone();
        r.seq = 10 + k;
        ring.records.push(r);
    }
    for k in 0..5000 {
        inc.host_context.d_state_tasks.push(DStateTask {
            pid: k,
            tid: k,
            comm: "stuck".into(),
            wchan: Some("w".into()),
            cgroup: Some("/".repeat(500)),
        });
        inc.timeline.push(TimelineEvent {
            at: Timestamp::monotonic(k as u64),
            event: "e".repeat(2000),
        });
        inc.not_captured.push(NotCaptured {
            what: format!("thing {k}"),
            why: "z".repeat(100),
        });
    }
    inc.verdict = "v".repeat(100_000);
    inc
}

#[test]
fn huge_incident_stays_under_the_limit_and_says_it_truncated() {
    let inc = huge_incident();
    let md = markdown(&inc);
    if let Some(path) = std::env::var_os("WEDGE_DUMP_HUGE") {
        std::fs::write(path, &md).unwrap();
    }
    let chars = md.chars().count();
    assert!(chars <= MAX_MARKDOWN_CHARS, "{chars} characters");
    // The cap is used, not wasted: the report stays informative.
    assert!(
        chars > MAX_MARKDOWN_CHARS * 3 / 4,
        "only {chars} characters"
    );
    assert!(
        md.contains("this report was truncated"),
        "no truncation note"
    );
    assert!(md.contains("lines cut to fit the size limit"));
    assert_eq!(
        md.matches("<details>").count(),
        md.matches("</details>").count()
    );
    assert_eq!(md.matches("```").count() % 2, 0, "unbalanced code fences");
    // Each section got a share: the kernel log's newest line is kept, and stacks still show the first thread.
    assert!(md.contains("NVRM: Xid line 19999"));
    assert!(md.contains("thread 4242 python3 state D"));
}

#[test]
fn a_small_incident_is_not_truncated() {
    let md = markdown(&common::incident());
    assert!(!md.contains("truncated"));
    assert!(md.len() < 20_000);
}

#[test]
fn hostile_strings_do_not_break_the_markdown() {
    let mut inc = common::incident();
    let t = &mut inc.samples[1].snapshot.threads[0];
    t.comm = "a`b|</details>```".into();
    t.stack[0].function = "```\n</details><script>".into();
    inc.kernel_log
        .push(KernelLogLine::new(None, None, None, "```\n</details>"));
    let md = markdown(&inc);
    // Structure lines are whole lines; hostile text never forms one.
    let opens = md.lines().filter(|l| l.starts_with("<details>")).count();
    let closes = md.lines().filter(|l| *l == "</details>").count();
    assert_eq!((opens, closes), (7, 7));
    let fences = md.lines().filter(|l| l.starts_with("```")).count();
    assert_eq!(fences, 16, "only our own fences start a line");
    assert!(
        md.lines().all(
            |l| l.starts_with("```") || !capture::escape::outside_code_spans(l).contains("```")
        ),
        "a fence inside a line, outside a code span"
    );
    // Before the first section, hostile markup only appears inside code spans or escaped.
    let head = &md[..md.find("<details>").unwrap()];
    let outside_code_spans = capture::escape::outside_code_spans;
    for line in head.lines() {
        let visible = outside_code_spans(line);
        assert!(
            !visible.contains("<script>") && !visible.contains("</details>"),
            "unescaped: {line}"
        );
    }
}

/// Comms and paths a process or container chooses (a comm is read lossily, so invalid UTF-8 arrives as U+FFFD).
const HOSTILE: &[&str] = &[
    "<img src=x onerror=alert(1)>",
    "\x1b]0;pwned\x07\x1b[2J",
    "two\nlines\r\n| forged | row |",
    "tick`s```fence",
    "nul\0byte",
    "bad\u{fffd}\u{fffd}utf8",
    "bidi\u{202e}txt.exe\u{200b}",
];

/// Every comm, cgroup, fd target, hostname and wchan of the incident made hostile.
fn with_hostile_strings(mut inc: Incident) -> Incident {
    let mut next = HOSTILE.iter().cycle().map(|s| s.to_string());
    let hostile_thread = |t: &mut ThreadSnapshot, next: &mut dyn Iterator<Item = String>| {
        t.comm = next.next().unwrap();
        t.wchan = Some(next.next().unwrap());
        t.site = Some(next.next().unwrap());
        if let Some(i) = &mut t.ioctl {
            i.fd_target = Some(next.next().unwrap());
            i.name = Some(next.next().unwrap());
        }
    };
    for s in &mut inc.samples {
        for t in &mut s.snapshot.threads {
            hostile_thread(t, &mut next);
        }
    }
    for w in &mut inc.wedged_threads {
        w.comm = next.next().unwrap();
        if let Some(t) = &mut w.at_detection {
            hostile_thread(t, &mut next);
        }
    }
    inc.process.comm = next.next().unwrap();
    inc.process.cgroup = Some(next.next().unwrap());
    inc.host.hostname = next.next().unwrap();
    inc.verdict.clear();
    inc
}

/// What a reader sees as prose on a Markdown line: code spans and escaped backticks removed, and the HTML
/// the renderer writes itself.
fn prose(line: &str) -> String {
    let outside = capture::escape::outside_code_spans(line).replace("\\`", "");
    [
        "<details>",
        "</details>",
        "<summary>",
        "</summary>",
        "<sub>",
        "</sub>",
    ]
    .iter()
    .fold(outside, |l, tag| l.replace(tag, ""))
}

/// The bug of issue 25 in report.md's form: hostile comms in the verdict, the thread tables, the process table and
/// the sections, for an incident judged at detection and for one seen through its latest sample.
#[test]
fn hostile_comms_reach_report_md_escaped_everywhere() {
    for inc in [common::incident(), common::incident_v2()] {
        let inc = with_hostile_strings(inc);
        let v = verdict(&inc);
        let md = markdown(&inc);
        assert!(
            !md.chars()
                .any(|c| c != '\n' && capture::escape::needs_escape(c)),
            "a control or bidi character reached report.md: {md:?}"
        );
        let mut fenced = false;
        for line in md.lines() {
            if line.starts_with("```") {
                fenced = !fenced;
                continue;
            }
            if fenced {
                assert!(!line.contains("```"), "{line}");
                continue;
            }
            assert!(!prose(line).contains('<'), "raw HTML in report.md: {line}");
            let outside = capture::escape::outside_code_spans(line);
            assert_eq!(
                outside.matches('`').count(),
                outside.matches("\\`").count(),
                "an unescaped backtick outside a code span: {line}"
            );
            if line.starts_with("| ") {
                // Every head table has two columns: a comm cannot split or forge a cell.
                assert_eq!(line.replace("\\|", "").matches('|').count(), 3, "{line}");
            }
        }
        assert!(!fenced, "a fence left open");
        assert!(md.starts_with("**Verdict:** thread "), "{v}");
        // Plain text elsewhere (report list, logs) keeps the verdict readable: escaped, not entity-encoded.
        assert!(!v.contains("&lt;") && !v.contains('\n'), "{v}");
    }
}

/// A schema-2 incident whose wedge resolved and whose latest sample has no thread in D: the verdict, the
/// "Wedged threads" tables and the stacks still show the evidence as of detection, and say "resolved".
#[test]
fn a_resolved_episode_keeps_its_evidence_and_says_resolved() {
    let mut inc = common::incident_v2();
    let latest = inc.samples.len() - 1;
    for t in &mut inc.samples[latest].snapshot.threads {
        t.state = "S".into();
        t.stack.clear();
        t.ioctl = None;
        t.site = None;
    }
    inc.episode.status = EpisodeStatus::Resolved;
    inc.episode.resolved_after_s = Some(330.0);
    for w in &mut inc.wedged_threads {
        w.fate = ThreadFate::Resolved;
        w.in_d_s = Some(if w.tid == 4242 { 330.0 } else { 12.0 });
    }
    let v = verdict(&inc);
    assert_eq!(
        v,
        "thread 4242 `python3` was in D for 330 s in ioctl `NV_ESC_RM_CONTROL` on `/dev/nvidiactl`; \
         last breadcrumb `cuMemAlloc_v2(48 B)` entered 312 s ago and never returned; 1 more thread wedged; resolved"
    );
    let md = markdown(&inc);
    assert!(md.starts_with(&format!("**Verdict:** {v}\n")));
    let head = &md[..md.find("<details>").unwrap()];
    assert!(head.contains("Wedged threads (2 judged wedged; evidence as of detection)"));
    assert!(head.contains("| fate | left D after 330 s"), "{head}");
    assert!(head.contains("NV_ESC_RM_CONTROL") && head.contains("(RM lock wait)"));
    assert!(
        head.contains("| top kernel frame | `__down_common+0x1b4/0x2f0` |"),
        "{head}"
    );
    assert!(head.contains("Latest sample (2026-12-02T11:34:00.000Z): 3 threads, 0 in D."));
    assert!(md.contains("Kernel stacks at detection (2 wedged threads)"));
    assert!(md.contains("    rm_ioctl+0x6b/0xe0 [nvidia]"));
    assert!(!md.contains("no thread in D"));
}

#[test]
fn an_episode_open_when_wedge_capture_exited_says_so_with_the_time() {
    let mut inc = common::incident_v2();
    let exited = common::at(
        "2026-12-02T11:35:00Z",
        common::DETECTED_MONO + 60 * common::S,
    );
    inc.episode.status = EpisodeStatus::StillWedgedAtExit;
    inc.episode.watcher_exited_at = Some(exited.clone());
    for w in &mut inc.wedged_threads {
        w.fate = ThreadFate::StillWedgedAtExit;
        w.fate_at = Some(exited.clone());
    }
    let v = verdict(&inc);
    assert!(
        v.starts_with("thread 4242 `python3` has been in D for 372 s in ioctl `NV_ESC_RM_CONTROL`"),
        "{v}"
    );
    assert!(
        v.ends_with("; still wedged when wedge-capture exited at 2026-12-02T11:35:00.000Z"),
        "{v}"
    );
    let md = markdown(&inc);
    assert!(md.contains("still wedged when wedge-capture exited at 2026-12-02T11:35:00.000Z ·"));
    assert!(!md.contains("episode still open"));
    // An episode still open reads as such; its length runs to the latest look.
    let open = common::incident_v2();
    assert!(verdict(&open).starts_with("thread 4242 `python3` has been in D for 312 s in ioctl"));
    assert!(markdown(&open).contains("episode still open"));
}

/// The budget with schema-2 evidence: 3,000 threads judged wedged (each with its stack as of detection) and a
/// full kernel-log window of every relevance.
#[test]
fn a_huge_schema_2_incident_stays_under_the_limit() {
    let mut inc = huge_incident();
    inc.schema_version = SCHEMA_VERSION;
    inc.kernel_log.clear();
    for k in 0..20_000u64 {
        let text = match k % 4 {
            0 => format!(
                "INFO: task python3:{} blocked for more than 122 seconds.",
                70_000 + k
            ),
            1 => format!("NVRM: Xid (PCI:0000:01:00): 79, line {k}"),
            2 => format!(
                "INFO: task python3:4242 blocked, line {k} {}",
                "t".repeat(k as usize % 500)
            ),
            _ => format!("context line {k} {}", "c".repeat(k as usize % 2000)),
        };
        inc.kernel_log
            .push(KernelLogLine::new(Some(k), Some(4), Some(k * 1000), text));
    }
    inc.classify_kernel_log();
    let latest = inc.samples.len() - 1;
    let threads = inc.samples[latest].snapshot.threads.clone();
    inc.wedged_threads = threads
        .iter()
        .filter(|t| t.state == "D")
        .map(|t| WedgedThread {
            tid: t.tid,
            comm: t.comm.clone(),
            d_since: inc.episode.started_at.clone(),
            detected_at: Some(inc.detected_at.clone()),
            at_detection: Some(t.clone()),
            ..WedgedThread::default()
        })
        .collect();
    assert!(inc.wedged_threads.len() >= 1500);
    let md = markdown(&inc);
    let chars = md.chars().count();
    eprintln!("schema-2 huge incident: {chars} characters of report.md");
    assert!(chars <= MAX_MARKDOWN_CHARS, "{chars} characters");
    assert!(
        chars > MAX_MARKDOWN_CHARS * 3 / 4,
        "only {chars} characters"
    );
    assert_eq!(
        md.matches("<details>").count(),
        md.matches("</details>").count()
    );
    assert_eq!(md.matches("```").count() % 2, 0, "unbalanced code fences");
    let head = &md[..md.find("<details>").unwrap()];
    assert!(head.contains("### Kernel log: the wedged process and the NVIDIA driver (10000 lines)"));
    assert!(head.contains("### Kernel log: other processes (5000 lines; not the wedged process)"));
    assert!(head.contains("<other process> <HUNG-TASK> INFO: task python3:89996 blocked"));
    assert!(md.contains("Kernel stacks at detection ("));
}

/// Issue 35: names a tenant chooses (a link, a backtick, raw HTML, a line break, pipes) in every place report.md
/// shows one — the process and thread comms, wchans, sites, the fd and syscall file paths, the cgroup, a timeline
/// event quoting a comm, the Python frames, a user frame's path, a ring's label — are inert, in the head's tables
/// and prose and in the sections; each is shown exactly in a code span or a code line somewhere.
#[test]
fn hostile_names_are_inert_everywhere_in_report_md() {
    use capture::escape::{inert_markdown_problems, HOSTILE_NAMES};
    for base in [common::incident(), common::incident_v2()] {
        for name in HOSTILE_NAMES {
            let mut inc = base.clone();
            let name = name.to_string();
            let hostile_thread = |t: &mut ThreadSnapshot| {
                t.comm = name.clone();
                t.wchan = Some(name.clone());
                t.site = Some(name.clone());
                if let Some(i) = &mut t.ioctl {
                    i.fd_target = Some(name.clone());
                }
                t.syscall_files.push(capture::SyscallFile {
                    arg: 0,
                    fd: 3,
                    target: Some(name.clone()),
                    not_captured: None,
                });
            };
            for s in &mut inc.samples {
                s.snapshot.threads.iter_mut().for_each(hostile_thread);
            }
            for w in &mut inc.wedged_threads {
                w.comm = name.clone();
                if let Some(t) = &mut w.at_detection {
                    hostile_thread(t);
                }
                w.python_stack = Some(vec![capture::python_stack::PythonFrame {
                    function: name.clone(),
                    file: format!("/w/{name}"),
                    line: Some(1),
                    code: Some(name.clone()),
                    code_not_captured: None,
                }]);
                w.user_frame = Some(UserFrame {
                    pc: "0x7f00".into(),
                    path: Some(name.clone()),
                    ..UserFrame::default()
                });
            }
            inc.process.comm = name.clone();
            inc.process.cgroup = Some(name.clone());
            inc.timeline.push(TimelineEvent {
                at: inc.detected_at.clone(),
                event: format!(
                    "thread 4242 `{name}` judged wedged: in D without progress for 3.0 s"
                ),
            });
            if let Some(ring) = &mut inc.ring {
                for r in &mut ring.records {
                    r.label = name.clone();
                }
            }
            inc.verdict.clear();
            let md = markdown(&inc);
            let problems = inert_markdown_problems(&md, &[name.as_str()]);
            assert!(problems.is_empty(), "{name:?}: {problems:#?}\n{md}");
        }
    }
}
