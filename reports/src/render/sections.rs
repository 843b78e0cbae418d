//! report.md's `<details>` sections, one small function each, listed in [`SECTIONS`] in the order they are shown.
//! Each returns its block of fenced lines; an empty one is left out, and the budget cuts the longest first.

use std::fmt::Write as _;

use capture::render::frame_line;
use capture::ThreadSnapshot;

use super::head::kmsg_line;
use super::section::{Keep, Section};
use crate::limits::{MAX_PROBE_OUTPUT_LINES, MAX_TIDS_LISTED};
use crate::model::{
    Incident, KernelLogLine, ProbeOutcome, Record, RecordKind, Relevance, RingExcerpt,
};
use crate::text::{call_text, duration, label_beside, opt, time_text};
use crate::verdict::{fate_text, in_flight_age, judged_threads, sample_monotonic};

/// The sections, in order.
pub(super) const SECTIONS: &[fn(&Incident) -> Section] = &[
    super::wait_graph::section,
    stacks_at_detection,
    python_stacks,
    history_before_detection,
    latest_stacks,
    samples_over_time,
    breadcrumbs,
    kernel_log,
    host_context,
    probes,
    not_captured,
];

/// Every thread's Python stack (py-spy), innermost frame first.
fn python_stacks(incident: &Incident) -> Section {
    let (title, lines) = super::python_view::python_stacks(incident);
    let mut section = Section::new(title, Keep::Head);
    lines.iter().for_each(|line| section.push(line));
    section
}

/// The judged threads' kernel stacks as of detection, with each thread's fate.
fn stacks_at_detection(incident: &Incident) -> Section {
    let judged = judged_threads(incident);
    let mut section = Section::new(
        format!(
            "Kernel stacks at detection ({} wedged threads)",
            judged.len()
        ),
        Keep::Head,
    );
    for (w, t) in &judged {
        section.push(format!(
            "thread {} {} state {} wchan {} ({})",
            t.tid,
            t.comm,
            t.state,
            t.wchan.as_deref().unwrap_or("-"),
            fate_text(incident, w)
        ));
        push_stack(&mut section, t);
    }
    section
}

/// Every thread of the latest sample that is in D or has a stack, D threads first.
fn latest_stacks(incident: &Incident) -> Section {
    let mut stacks = Section::new("Kernel stacks", Keep::Head);
    let Some(sample) = incident.latest_sample() else {
        return stacks;
    };
    let mut threads: Vec<&ThreadSnapshot> = sample.snapshot.threads.iter().collect();
    threads.sort_by_key(|t| (t.state != "D", t.stack.is_empty(), t.tid));
    let with_stacks = threads.iter().filter(|t| !t.stack.is_empty()).count();
    stacks.title = format!(
        "Kernel stacks in the latest sample, {} ({with_stacks} threads)",
        time_text(&sample.taken_at)
    );
    for t in threads
        .iter()
        .filter(|t| !t.stack.is_empty() || t.state == "D")
    {
        stacks.push(format!(
            "thread {} {} state {} wchan {}",
            t.tid,
            t.comm,
            t.state,
            t.wchan.as_deref().unwrap_or("-")
        ));
        push_stack(&mut stacks, t);
    }
    for n in &sample.snapshot.notes {
        stacks.push(format!("note: {n}"));
    }
    if let Some(summary) = &sample.snapshot.summarized {
        stacks.push(format!(
            "not listed: {} ({})",
            summary.describe(),
            summary.why
        ));
    }
    stacks
}

/// One line per sample (threads, how many in D) and one per D thread in it, newest kept when cut.
fn samples_over_time(incident: &Incident) -> Section {
    let mut history = Section::new(
        format!("Samples over time ({})", incident.samples.len()),
        Keep::Tail,
    );
    if incident.samples.len() <= 1 {
        return history;
    }
    for s in &incident.samples {
        let d: Vec<&ThreadSnapshot> = s
            .snapshot
            .threads
            .iter()
            .filter(|t| t.state == "D")
            .collect();
        history.push(format!(
            "{}: {} threads, {} in D",
            time_text(&s.taken_at),
            s.snapshot.thread_count(),
            s.snapshot.threads_in_d()
        ));
        for t in d.iter().take(MAX_TIDS_LISTED) {
            history.push(format!(
                "    {} {} wchan {} ctxt {}+{} cpu {}",
                t.tid,
                t.comm,
                t.wchan.as_deref().unwrap_or("-"),
                opt(t.voluntary_ctxt_switches),
                opt(t.nonvoluntary_ctxt_switches),
                opt(t.cpu_ticks)
            ));
        }
    }
    history
}

/// Every ring's calls in flight and its records, newest kept when cut.
fn breadcrumbs(incident: &Incident) -> Section {
    let now_ns = incident.latest_sample().and_then(sample_monotonic);
    let mut crumbs = Section::new("Breadcrumbs", Keep::Tail);
    let rings: Vec<&RingExcerpt> = incident.ring.iter().chain(&incident.extra_rings).collect();
    if rings.is_empty() {
        return crumbs;
    }
    let torn: u64 = rings.iter().map(|r| r.torn_slots).sum();
    crumbs.title = format!(
        "Breadcrumbs ({} in flight, {} records{}{})",
        rings.iter().map(|r| r.in_flight.len()).sum::<usize>(),
        rings.iter().map(|r| r.records.len()).sum::<usize>(),
        if rings.len() > 1 {
            format!(", {} rings", rings.len())
        } else {
            String::new()
        },
        if torn > 0 {
            format!(", {torn} torn slots skipped")
        } else {
            String::new()
        }
    );
    for ring in rings {
        push_ring(&mut crumbs, ring, now_ns);
    }
    crumbs
}

/// One ring: its path, read error, calls in flight, then its records.
fn push_ring(crumbs: &mut Section, ring: &RingExcerpt, now_ns: Option<u64>) {
    if let Some(p) = &ring.path {
        crumbs.push(format!("ring {p}"));
    }
    // Which breadcrumb path wrote it (the interposer, or CUPTI with its cost on the host).
    if let Some(path) = &ring.breadcrumbs {
        crumbs.push(path.clone());
    }
    if let Some(e) = &ring.error {
        crumbs.push(format!("ring could not be read: {e}"));
    }
    for f in &ring.in_flight {
        let age = in_flight_age(f, now_ns)
            .map(|ns| format!("{} ago", duration(ns)))
            .unwrap_or_else(|| "age unknown".into());
        crumbs.push(format!(
            "IN FLIGHT tid {} {} {}entered {age}",
            f.tid,
            call_text(&f.call, &f.args, &f.label),
            label_beside(&f.call, &f.label)
        ));
    }
    if ring.records_omitted > 0 {
        crumbs.push(format!(
            "({} older records not kept in the excerpt)",
            ring.records_omitted
        ));
    }
    if !ring.records.is_empty() {
        let clock = if now_ns.is_some() {
            "s before the latest sample"
        } else {
            "CLOCK_MONOTONIC s"
        };
        crumbs.push(format!("seq tid time ({clock}) kind call result label"));
    }
    for r in &ring.records {
        crumbs.push(record_line(r, now_ns));
    }
}

/// The kernel log, newest kept when cut. Schema 2: what concerns the wedge, and context lines only from the
/// episode's start on (never the boot log of a machine that booted minutes before); the whole window is
/// kernel-log.txt.
fn kernel_log(incident: &Incident) -> Section {
    let flagged = incident.kernel_log.iter().filter(|l| l.flags.any()).count();
    let mut kmsg = Section::new(
        format!(
            "Kernel log ({} lines, {flagged} flagged)",
            incident.kernel_log.len()
        ),
        Keep::Tail,
    );
    if !incident.kernel_log.iter().any(|l| l.relevance.is_some()) {
        kmsg.lines = incident.kernel_log.iter().map(kmsg_line).collect();
        return kmsg;
    }
    let start_us = incident
        .episode
        .started_at
        .monotonic_ns
        .map(|ns| ns / 1000)
        .unwrap_or(0);
    let shown: Vec<&KernelLogLine> = incident
        .kernel_log
        .iter()
        .filter(|l| {
            l.relevance != Some(Relevance::Context) || l.kernel_time_us.unwrap_or(0) >= start_us
        })
        .collect();
    kmsg.title = format!(
        "Kernel log ({} of {} lines of the window: what concerns the wedge, and context since the episode \
         began; the whole window is kernel-log.txt)",
        shown.len(),
        incident.kernel_log.len()
    );
    kmsg.lines = shown.into_iter().map(kmsg_line).collect();
    kmsg
}

/// Load, pressure, memory and the host's other tasks in D.
fn host_context(incident: &Incident) -> Section {
    let mut host = Section::new("Host context", Keep::Head);
    let hc = &incident.host_context;
    if let Some(l) = &hc.loadavg {
        host.push(format!("loadavg {l}"));
    }
    for p in &hc.psi {
        host.push(format!("psi {} {}", p.resource, p.line));
    }
    for (k, v) in &hc.meminfo_kb {
        host.push(format!("meminfo {k} {v} kB"));
    }
    if !hc.d_state_tasks.is_empty() || hc.d_state_total.is_some() {
        let listed = hc.d_state_tasks.len() as u64;
        let total = hc.d_state_total.unwrap_or(listed).max(listed);
        // A cut census or a scrubbed one lists fewer rows than the count: say both.
        host.push(if total > listed {
            format!("tasks in D on the host: {total} ({listed} listed)")
        } else {
            format!("tasks in D on the host: {total}")
        });
        for t in &hc.d_state_tasks {
            host.push(format!(
                "    pid {} tid {} {} wchan {} cgroup {}",
                t.pid,
                t.tid,
                t.comm,
                t.wchan.as_deref().unwrap_or("-"),
                t.cgroup.as_deref().unwrap_or("-")
            ));
        }
    }
    host
}

/// Each probe's outcome and an excerpt of its output.
fn probes(incident: &Incident) -> Section {
    let mut probes = Section::new(format!("Probes ({})", incident.probes.len()), Keep::Head);
    for p in &incident.probes {
        let outcome = match p.outcome {
            ProbeOutcome::Ok => "ok",
            ProbeOutcome::Timeout => "TIMEOUT",
            ProbeOutcome::Error => "error",
            ProbeOutcome::Unknown => "unknown",
        };
        probes.push(format!(
            "{}: {outcome} in {:.0} ms{}",
            p.name,
            p.duration_ms,
            p.error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        ));
        for line in p.output_excerpt.lines().take(MAX_PROBE_OUTPUT_LINES) {
            probes.push(format!("    {line}"));
        }
    }
    probes
}

/// What was not captured, and why.
fn not_captured(incident: &Incident) -> Section {
    let mut missing = Section::new(
        format!("Not captured ({})", incident.not_captured.len()),
        Keep::Head,
    );
    for n in &incident.not_captured {
        missing.push(format!("{}: {}", n.what, n.why));
    }
    missing
}

/// The watcher's samples from before the detection: one state strip per thread that matters (oldest first, `.`
/// where the thread did not exist yet), the wchans it slept in and its switch deltas while in D.
fn history_before_detection(incident: &Incident) -> Section {
    let h = &incident.history;
    let mut section = Section::new("History before detection", Keep::Head);
    let (Some(first), Some(last)) = (h.first(), h.last()) else {
        return section;
    };
    let span_ns = last
        .taken_at
        .monotonic_ns
        .unwrap_or(0)
        .saturating_sub(first.taken_at.monotonic_ns.unwrap_or(0));
    section.title = format!(
        "History before detection ({} samples over {})",
        h.len(),
        duration(span_ns)
    );
    let counts: Vec<String> = h.iter().map(|s| s.in_d.to_string()).collect();
    section.push(format!("threads in D per sample: {}", counts.join(" ")));
    let mut tids: Vec<i32> = Vec::new();
    for sample in h {
        for t in &sample.threads {
            if !tids.contains(&t.tid) {
                tids.push(t.tid);
            }
        }
    }
    for tid in tids {
        let mut strip = Vec::with_capacity(h.len());
        let mut wchans: Vec<&str> = Vec::new();
        let mut switches = 0u64;
        for sample in h {
            match sample.threads.iter().find(|t| t.tid == tid) {
                Some(t) => {
                    strip.push(t.state.chars().next().unwrap_or('?'));
                    if let Some(w) = t.wchan.as_deref() {
                        if !wchans.contains(&w) {
                            wchans.push(w);
                        }
                    }
                    switches += t.ctxt_delta.unwrap_or(0);
                }
                None => strip.push('.'),
            }
        }
        let strip: Vec<String> = strip.iter().map(char::to_string).collect();
        let judged = if incident.wedged_threads.iter().any(|w| w.tid == tid) {
            " (judged wedged)"
        } else {
            ""
        };
        let mut line = format!("tid {tid}{judged}: {}", strip.join(" "));
        if !wchans.is_empty() {
            write!(line, "; in D at {}", wchans.join(", ")).unwrap();
            write!(line, "; context switches while in D +{switches}").unwrap();
        }
        section.push(line);
    }
    section
}

/// A thread's kernel frames and notes, indented under its header line.
fn push_stack(section: &mut Section, t: &ThreadSnapshot) {
    if t.stack.is_empty() {
        section.push("    (no stack read)");
    }
    for f in &t.stack {
        section.push(format!("    {}", frame_line(f)));
    }
    for n in &t.notes {
        section.push(format!("    note: {n}"));
    }
}

fn record_line(r: &Record, now_ns: Option<u64>) -> String {
    let kind = match r.kind {
        RecordKind::Enter => "enter",
        RecordKind::Exit => "exit ",
    };
    let result = r
        .result
        .map(|v| v.to_string())
        .unwrap_or_else(|| "-".into());
    let time = match now_ns {
        Some(now) => format!("T-{:.3}", (now as f64 - r.monotonic_ns as f64) / 1e9),
        None => format!("{:.6}", r.monotonic_ns as f64 / 1e9),
    };
    format!(
        "{} {} {time} {kind} {} {result} {}",
        r.seq,
        r.tid,
        call_text(&r.call, &r.args, &r.label),
        label_beside(&r.call, &r.label)
    )
    .trim_end()
    .to_string()
}
