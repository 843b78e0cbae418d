//! Markdown for a GitHub bug thread, and the one-line verdict.
//!
//! Layout: the verdict first, then a short table per wedged thread, the process, the timeline, and `<details>`
//! blocks (stacks, samples, breadcrumbs, kernel log, host context, probes, not captured). The whole is never longer
//! than [`MAX_MARKDOWN_CHARS`] (a GitHub comment's limit): the longest `<details>` sections are cut first, each cut
//! says how many lines it dropped, and a note under the verdict lists them. Rendering is a pure function of the
//! incident (no clock read), so the output is reproducible.

mod python_view;

use std::fmt::Write as _;

use capture::{SyscallInfo, ThreadSnapshot};

use crate::model::{
    Args, EpisodeStatus, InFlight, Incident, KernelLogFlags, KernelLogLine, ProbeOutcome, Record,
    RecordKind, Relevance, Sample, ThreadFate, Timestamp, WedgedThread,
};

/// GitHub's limit for an issue comment, in characters.
pub const MAX_MARKDOWN_CHARS: usize = 65_536;
/// Longest line kept inside a section (longer ones are clipped with `…`).
const MAX_LINE: usize = 600;
/// At most this many per-thread tables; the rest are listed by tid.
const MAX_THREAD_TABLES: usize = 8;
/// At most this many timeline entries in the head.
const MAX_TIMELINE: usize = 40;
/// Room kept for the truncation note.
const NOTE_RESERVE: usize = 1_200;

/// The one-line verdict: which thread, in which call, for how long, and the last breadcrumb.
///
/// Built from the latest sample, the wedged-thread list and the ring's in-flight calls, e.g.
/// "thread 4242 `main` has been in D for 312 s in ioctl `NV_ESC_RM_CONTROL` on /dev/nvidiactl; last breadcrumb
/// `cuMemAlloc_v2(48 B)` entered 312 s ago and never returned".
pub fn verdict(incident: &Incident) -> String {
    if let Some(verdict) = episode_verdict(incident) {
        return verdict;
    }
    let pid = incident.process.pid;
    let Some(sample) = incident.latest_sample() else {
        if let Some(w) = incident.wedged_threads.first() {
            return format!(
                "thread {} `{}` is in D (no thread snapshot captured yet)",
                w.tid,
                tick_safe(&w.comm)
            );
        }
        return format!("pid {pid}: no thread snapshot captured");
    };
    let now_ns = sample_monotonic(sample);
    let d_threads: Vec<&ThreadSnapshot> = sample
        .snapshot
        .threads
        .iter()
        .filter(|t| t.state == "D")
        .collect();
    let Some(primary) = primary_thread(incident, &d_threads, now_ns) else {
        return match (incident.episode.status, incident.episode.resolved_after_s) {
            (crate::model::EpisodeStatus::Resolved, Some(s)) => {
                format!(
                    "pid {pid}: no thread in D any more; the episode resolved after {}",
                    secs(s)
                )
            }
            _ => format!("pid {pid}: no thread in D in the latest sample"),
        };
    };

    let mut out = format!("thread {} `{}`", primary.tid, tick_safe(&primary.comm));
    match d_for_ns(incident, primary.tid, now_ns) {
        Some(ns) => write!(out, " has been in D for {}", duration(ns)).unwrap(),
        None => out.push_str(" is in D"),
    }
    out.push_str(&where_blocked(primary));

    match breadcrumb_clause(incident, primary.tid, now_ns) {
        Some(clause) => {
            out.push_str("; ");
            out.push_str(&clause);
        }
        None if incident.ring.is_none() => out.push_str("; no breadcrumb ring"),
        None => {}
    }
    let others = d_threads.len().saturating_sub(1);
    if others > 0 {
        write!(out, "; {others} more thread{} in D", plural(others)).unwrap();
    }
    out
}

/// The verdict of a schema-2 incident: the episode as judged at detection (the first thread judged wedged,
/// its call, site and breadcrumb), how long it lasted and how it ended. None for older incidents (no evidence
/// as of detection): their verdict comes from the latest sample.
fn episode_verdict(incident: &Incident) -> Option<String> {
    let judged = judged_threads(incident);
    let (w, t) = *judged.first()?;
    let over = incident.episode.status != EpisodeStatus::Open
        || matches!(w.fate, ThreadFate::Resolved | ThreadFate::Exited);
    let ended = over && incident.episode.status != EpisodeStatus::StillWedgedAtExit;
    let mut out = format!("thread {} `{}`", w.tid, tick_safe(&w.comm));
    let verb = if ended { "was" } else { "has been" };
    match in_d_ns(incident, w) {
        Some(ns) => write!(out, " {verb} in D for {}", duration(ns)).unwrap(),
        None if ended => out.push_str(" was in D"),
        None => out.push_str(" is in D"),
    }
    out.push_str(&where_blocked(t));
    out.push_str(&python_view::verdict_clause(w).unwrap_or_default());
    match breadcrumb_clause(
        incident,
        w.tid,
        w.detected_at.as_ref().and_then(|d| d.monotonic_ns),
    ) {
        Some(clause) => {
            out.push_str("; ");
            out.push_str(&clause);
        }
        None if incident.ring.is_none() => out.push_str("; no breadcrumb ring"),
        None => {}
    }
    let waiters = waiting_behind(incident, w.tid);
    if !waiters.is_empty() {
        let n = waiters.len();
        write!(
            out,
            "; {n} thread{} wait{} behind tid {} ({})",
            plural(n),
            if n == 1 { "s" } else { "" },
            w.tid,
            holder_text(t)
        )
        .unwrap();
    }
    let others = judged
        .iter()
        .filter(|(o, _)| o.tid != w.tid && !waiters.contains(&o.tid))
        .count();
    if others > 0 {
        write!(out, "; {others} more thread{} wedged", plural(others)).unwrap();
    }
    match incident.episode.status {
        EpisodeStatus::Resolved => {
            out.push_str("; resolved");
            if w.fate == ThreadFate::Exited {
                out.push_str(" (the thread exited)");
            }
        }
        EpisodeStatus::StillWedgedAtExit => {
            out.push_str("; still wedged when wedge-capture exited");
            if let Some(at) = &incident.episode.watcher_exited_at {
                write!(out, " at {}", time_text(at)).unwrap();
            }
        }
        EpisodeStatus::Open | EpisodeStatus::Unknown => {}
    }
    Some(out)
}

/// Threads judged wedged with their evidence as of detection, the one to read first first: longest in D,
/// then the main thread, then the lowest tid.
fn judged_threads(incident: &Incident) -> Vec<(&WedgedThread, &ThreadSnapshot)> {
    let mut judged: Vec<(&WedgedThread, &ThreadSnapshot)> = incident
        .wedged_threads
        .iter()
        .filter_map(|w| Some((w, w.at_detection.as_ref()?)))
        .collect();
    // A thread that waits behind another is never read first: the one it waits for is.
    judged.sort_by_key(|(w, t)| {
        (
            !t.blocked_behind.is_empty(),
            w.d_since.monotonic_ns.unwrap_or(u64::MAX),
            w.tid != incident.process.pid,
            w.tid,
        )
    });
    judged
}

/// Tids of the threads that wait behind `tid` (`blocked_behind`), as judged at detection or in the latest sample.
fn waiting_behind(incident: &Incident, tid: i32) -> Vec<i32> {
    let mut tids: Vec<i32> = incident
        .wedged_threads
        .iter()
        .filter_map(|w| w.at_detection.as_ref())
        .chain(
            incident
                .latest_sample()
                .into_iter()
                .flat_map(|s| s.snapshot.threads.iter()),
        )
        .filter(|t| t.blocked_behind.contains(&tid))
        .map(|t| t.tid)
        .collect();
    tids.sort_unstable();
    tids.dedup();
    tids
}

/// What the thread others wait behind is doing, in words: "page fault on a frozen filesystem".
fn holder_text(t: &ThreadSnapshot) -> String {
    match t.site.as_deref() {
        Some(site) if site.starts_with("page fault") && site.contains("filesystem freeze") => {
            "page fault on a frozen filesystem".to_string()
        }
        Some(site) => tick_safe(site),
        None => "in a page fault".to_string(),
    }
}

/// The latest moment the incident knows about (monotonic): its newest sample, detection, resolution or the
/// watcher's exit.
fn last_look_ns(incident: &Incident) -> Option<u64> {
    let e = &incident.episode;
    incident
        .latest_sample()
        .and_then(sample_monotonic)
        .into_iter()
        .chain(incident.wedged_threads.iter().filter_map(|w| {
            w.detected_at
                .as_ref()
                .and_then(|d| d.monotonic_ns)
                .max(w.fate_at.as_ref().and_then(|f| f.monotonic_ns))
        }))
        .chain(e.resolved_at.as_ref().and_then(|t| t.monotonic_ns))
        .chain(e.watcher_exited_at.as_ref().and_then(|t| t.monotonic_ns))
        .max()
}

/// How long a judged thread was (or has been, so far) in D.
fn in_d_ns(incident: &Incident, w: &WedgedThread) -> Option<u64> {
    if let Some(s) = w.in_d_s.filter(|s| s.is_finite() && *s >= 0.0) {
        return Some((s * 1e9) as u64);
    }
    last_look_ns(incident)?.checked_sub(w.d_since.monotonic_ns?)
}

/// A judged thread's fate in words.
fn fate_text(incident: &Incident, w: &WedgedThread) -> String {
    let how_long = in_d_ns(incident, w)
        .map(duration)
        .unwrap_or_else(|| "? s".into());
    let at = w
        .fate_at
        .as_ref()
        .map(|t| format!(" ({})", time_text(t)))
        .unwrap_or_default();
    match w.fate {
        ThreadFate::Wedged => format!("still in D at the last look, {how_long} so far"),
        ThreadFate::Resolved => format!("left D after {how_long}{at}"),
        ThreadFate::Exited => format!("exited after {how_long} in D{at}"),
        ThreadFate::StillWedgedAtExit => {
            format!("still in D after {how_long} when wedge-capture exited{at}")
        }
        ThreadFate::Unknown => "unknown".into(),
    }
}

/// ` in ioctl `X` on /dev/…`, ` in syscall `write` at `wchan``, or ` at `wchan``.
fn where_blocked(t: &ThreadSnapshot) -> String {
    if let Some(ioctl) = &t.ioctl {
        let name = ioctl.name.clone().unwrap_or_else(|| ioctl.request.clone());
        let dev = ioctl
            .fd_target
            .clone()
            .unwrap_or_else(|| format!("fd {}", ioctl.fd));
        let operation = ioctl
            .argument
            .as_ref()
            .and_then(|a| a.operation.clone().or_else(|| a.summary.clone()))
            .map(|op| format!(" ({})", tick_safe(&op)))
            .unwrap_or_default();
        return format!(
            " in ioctl `{}` on {}{operation}",
            tick_safe(&name),
            tick_safe(&dev)
        );
    }
    let wchan = t.wchan.as_deref().filter(|w| !w.is_empty() && *w != "0");
    let mut out = String::new();
    if let Some(SyscallInfo::Blocked { nr, name, .. }) = &t.syscall {
        if *nr >= 0 {
            let name = name.clone().unwrap_or_else(|| format!("#{nr}"));
            write!(out, " in syscall `{}`", tick_safe(&name)).unwrap();
            if let Some(target) = t.syscall_files.iter().find_map(|f| f.target.as_deref()) {
                write!(out, " on {}", tick_safe(target)).unwrap();
            }
        } else if let Some(site) = &t.site {
            // A page fault (nr -1): the site says more than "outside a syscall".
            write!(out, " in {}", tick_safe(site)).unwrap();
            return out;
        } else {
            out.push_str(" outside a syscall");
        }
    }
    if let Some(w) = wchan {
        write!(out, " at `{}`", tick_safe(w)).unwrap();
    } else if let Some(site) = &t.site {
        write!(out, " ({})", tick_safe(site)).unwrap();
    }
    out
}

fn breadcrumb_clause(incident: &Incident, tid: i32, now_ns: Option<u64>) -> Option<String> {
    let ring = incident.ring.as_ref()?;
    let own = ring
        .in_flight
        .iter()
        .chain(incident.extra_rings.iter().flat_map(|r| &r.in_flight))
        .find(|f| i64::from(f.tid) == i64::from(tid));
    if let Some(f) = own.or_else(|| {
        ring.in_flight
            .iter()
            .max_by_key(|f| in_flight_age(f, now_ns))
    }) {
        let age = in_flight_age(f, now_ns)
            .map(|ns| format!(" {} ago", duration(ns)))
            .unwrap_or_default();
        let other = if i64::from(f.tid) == i64::from(tid) {
            String::new()
        } else {
            format!(" on thread {}", f.tid)
        };
        return Some(format!(
            "last breadcrumb `{}`{other} entered{age} and never returned",
            tick_safe(&call_text(&f.call, &f.args, &f.label))
        ));
    }
    let last = ring
        .records
        .iter()
        .rev()
        .find(|r| i64::from(r.tid) == i64::from(tid))
        .or(ring.records.last())?;
    let age = now_ns
        .and_then(|now| now.checked_sub(last.monotonic_ns))
        .map(|ns| format!(" {} before the sample", duration(ns)))
        .unwrap_or_default();
    let what = match last.kind {
        RecordKind::Enter => "entered",
        RecordKind::Exit => "returned",
    };
    Some(format!(
        "no call in flight; last breadcrumb `{}` {what}{age}",
        tick_safe(&call_text(&last.call, &last.args, &last.label))
    ))
}

/// The call in flight on thread `tid` in any ring of the process.
fn in_flight_of(incident: &Incident, tid: i32) -> Option<&InFlight> {
    incident
        .ring
        .iter()
        .chain(&incident.extra_rings)
        .flat_map(|r| &r.in_flight)
        .find(|f| i64::from(f.tid) == i64::from(tid))
}

fn in_flight_age(f: &InFlight, now_ns: Option<u64>) -> Option<u64> {
    f.age_ns
        .or_else(|| now_ns?.checked_sub(f.entered_monotonic_ns))
}

/// The thread a reader should look at first: longest in D, then the main thread, then the lowest tid.
fn primary_thread<'a>(
    incident: &Incident,
    d: &[&'a ThreadSnapshot],
    now_ns: Option<u64>,
) -> Option<&'a ThreadSnapshot> {
    d.iter().copied().max_by_key(|t| {
        (
            d_for_ns(incident, t.tid, now_ns).unwrap_or(0),
            t.tid == incident.process.pid,
            -t.tid,
        )
    })
}

fn d_for_ns(incident: &Incident, tid: i32, now_ns: Option<u64>) -> Option<u64> {
    let since = incident
        .wedged_threads
        .iter()
        .find(|w| w.tid == tid)?
        .d_since
        .monotonic_ns?;
    now_ns?.checked_sub(since)
}

fn sample_monotonic(sample: &Sample) -> Option<u64> {
    sample
        .taken_at
        .monotonic_ns
        .or((sample.snapshot.monotonic_ns > 0).then_some(sample.snapshot.monotonic_ns))
}

/// `cuMemAlloc_v2(48 B)`, `cuMemcpyHtoD_v2(64 MiB, chunk 3/10)`.
/// A custom call (id 0) has no name of its own: its label names it (`selftest ioctl FS_IOC_SETFLAGS(…)`).
pub fn call_text(call: &str, args: &Args, label: &str) -> String {
    let mut parts = Vec::new();
    if args.bytes > 0 {
        parts.push(bytes(args.bytes));
    }
    if args.chunk_count > 0 {
        parts.push(format!(
            "chunk {}/{}",
            args.chunk.saturating_add(1),
            args.chunk_count
        ));
    }
    if args.tensor_count > 0 {
        parts.push(format!(
            "tensors {}..{}",
            args.tensor_first,
            args.tensor_first.saturating_add(args.tensor_count)
        ));
    }
    let name = match (call, label.trim()) {
        ("" | "custom", label) if !label.is_empty() => label,
        ("", _) => "?",
        (call, _) => call,
    };
    format!("{name}({})", parts.join(", "))
}

/// `48 B`, `1.5 KiB`, `64 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else if value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `0.3 s`, `312 s`, `1 h 05 min`.
pub fn duration(ns: u64) -> String {
    secs(ns as f64 / 1e9)
}

fn secs(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return "? s".to_string();
    }
    if s < 10.0 {
        format!("{s:.1} s")
    } else if s < 3600.0 {
        format!("{s:.0} s")
    } else {
        let total = s as u64;
        format!("{} h {:02} min", total / 3600, (total % 3600) / 60)
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Text safe to print to a terminal: every control character but a tab (ESC, CSI, BEL, backspace, newline, …)
/// becomes a visible escape (`\x1b`, `\n`, `\u{9b}`), so a comm or a hostname chosen by whoever runs the
/// process cannot move the cursor, retitle the window or forge a line. Borrowed when there is nothing to escape.
pub fn escape_controls(s: &str) -> std::borrow::Cow<'_, str> {
    let is_unsafe = |c: char| c.is_control() && c != '\t';
    if !s.chars().any(is_unsafe) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if is_unsafe(c) && (c as u32) < 0x80 => write!(out, "\\x{:02x}", c as u32).unwrap(),
            c if is_unsafe(c) => write!(out, "\\u{{{:x}}}", c as u32).unwrap(),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// One line of inline Markdown: newlines become spaces (they would end a table row), other control characters
/// are escaped ([`escape_controls`]).
fn one_line(s: &str) -> String {
    escape_controls(&s.replace(['\n', '\r'], " ")).into_owned()
}

/// Text that goes inside single backticks: no backticks, no newlines, no control characters, bounded.
fn tick_safe(s: &str) -> String {
    one_line(&clip(s, 300).replace('`', "'"))
}

/// Text for a Markdown table cell or HTML summary: HTML-escaped, pipes escaped, one line.
fn cell(s: &str) -> String {
    one_line(
        &clip(s, 400)
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('|', "\\|"),
    )
}

/// A code span in a table cell.
fn code_cell(s: &str) -> String {
    format!("`{}`", tick_safe(s).replace('|', "\\|"))
}

fn clip(s: &str, max_chars: usize) -> String {
    if s.len() <= max_chars {
        // Fast path: no more bytes than allowed characters.
        return s.to_string();
    }
    match s.char_indices().nth(max_chars) {
        None => s.to_string(),
        Some((idx, _)) => format!("{}…", &s[..idx]),
    }
}

/// One line inside a fenced block: bounded, and unable to close the fence.
fn fenced_line(s: &str) -> String {
    // Clip first: lines can be megabytes long. Byte searches (memchr) keep this cheap for the common clean line.
    let mut s = clip(s, MAX_LINE);
    if s.as_bytes().contains(&b'\n') || s.as_bytes().contains(&b'\r') {
        s = s.replace(['\n', '\r'], " ");
    }
    // Only C0 bytes, DEL and the UTF-8 lead byte of C1 controls can start one: cheap to rule out.
    if s.bytes().any(|b| b < 0x20 || b == 0x7f || b == 0xc2) {
        s = escape_controls(&s).into_owned();
    }
    if s.as_bytes().contains(&b'`') && s.contains("```") {
        s.replace('`', "'")
    } else {
        s
    }
}

fn time_text(t: &Timestamp) -> String {
    match (t.wall, t.monotonic_ns) {
        (Some(w), _) => w.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        (None, Some(m)) => format!("monotonic {:.3} s", m as f64 / 1e9),
        (None, None) => match t.boottime_ns {
            Some(b) => format!("boottime {:.3} s", b as f64 / 1e9),
            None => "time unknown".to_string(),
        },
    }
}

/// Which end of a section to keep when it is cut.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    Head,
    /// The most recent lines (logs, breadcrumbs).
    Tail,
}

/// A `<details>` block of fenced text lines.
struct Section {
    title: String,
    lines: Vec<String>,
    keep: Keep,
}

impl Section {
    fn new(title: impl Into<String>, keep: Keep) -> Section {
        Section {
            title: title.into(),
            lines: Vec::new(),
            keep,
        }
    }

    fn push(&mut self, line: impl AsRef<str>) {
        self.lines.push(fenced_line(line.as_ref()));
    }

    fn open(&self) -> String {
        format!(
            "<details><summary>{}</summary>\n\n```text\n",
            cell(&self.title)
        )
    }

    const CLOSE: &'static str = "```\n\n</details>\n\n";

    fn cut_note(dropped: usize, keep: Keep) -> String {
        match keep {
            Keep::Head => {
                format!("… {dropped} more lines cut to fit the size limit (all in incident.json)\n")
            }
            Keep::Tail => format!(
                "… {dropped} earlier lines cut to fit the size limit (all in incident.json)\n"
            ),
        }
    }

    /// Byte sizes for every possible number of shown lines, computed once.
    fn measure(&self) -> Measured {
        let ordered: Box<dyn Iterator<Item = &String>> = match self.keep {
            Keep::Head => Box::new(self.lines.iter()),
            Keep::Tail => Box::new(self.lines.iter().rev()),
        };
        let mut prefix = Vec::with_capacity(self.lines.len() + 1);
        let mut sum = 0;
        prefix.push(0);
        for line in ordered {
            sum += line.len() + 1;
            prefix.push(sum);
        }
        Measured {
            fixed: self.open().len() + Self::CLOSE.len(),
            prefix,
            keep: self.keep,
        }
    }
    fn render(&self, shown: usize, out: &mut String) {
        out.push_str(&self.open());
        let dropped = self.lines.len() - shown;
        let range = match self.keep {
            Keep::Head => 0..shown,
            Keep::Tail => self.lines.len() - shown..self.lines.len(),
        };
        if dropped > 0 && self.keep == Keep::Tail {
            out.push_str(&Self::cut_note(dropped, self.keep));
        }
        for line in &self.lines[range] {
            out.push_str(line);
            out.push('\n');
        }
        if dropped > 0 && self.keep == Keep::Head {
            out.push_str(&Self::cut_note(dropped, self.keep));
        }
        out.push_str(Self::CLOSE);
    }
}

/// Render the incident as Markdown, at most [`MAX_MARKDOWN_CHARS`] characters.
pub fn markdown(incident: &Incident) -> String {
    let head = head(incident);
    let sections: Vec<Section> = sections(incident)
        .into_iter()
        .filter(|s| !s.lines.is_empty())
        .collect();
    let footer = format!(
        "<sub>wedge-capture incident schema {} v{}; times are UTC wall clock unless marked.</sub>\n",
        cell(&incident.schema),
        incident.schema_version
    );

    let budget = MAX_MARKDOWN_CHARS.saturating_sub(head.len() + footer.len() + NOTE_RESERVE);
    let shown = fit(&sections, budget);

    let cut: Vec<String> = sections
        .iter()
        .zip(&shown)
        .filter(|(s, n)| **n < s.lines.len())
        .map(|(s, n)| format!("{} ({} of {} lines shown)", s.title, n, s.lines.len()))
        .collect();

    let mut out = String::with_capacity(MAX_MARKDOWN_CHARS);
    out.push_str(&head);
    if !cut.is_empty() {
        let note = format!(
            "> **Note:** this report was truncated to fit GitHub's {MAX_MARKDOWN_CHARS}-character limit: {}. \
             The full data is in incident.json.\n\n",
            cut.join("; ")
        );
        out.push_str(&clip(&note, NOTE_RESERVE - 20));
        if !out.ends_with('\n') {
            out.push_str("\n\n");
        }
    }
    for (section, n) in sections.iter().zip(&shown) {
        section.render(*n, &mut out);
    }
    out.push_str(&footer);
    enforce_cap(out)
}

/// Lines to show per section so that the sections together take at most `budget` bytes: every section gets up to a
/// common cap, found by bisection, so the longest sections are cut first.
fn fit(sections: &[Section], budget: usize) -> Vec<usize> {
    let measured: Vec<Measured> = sections.iter().map(Section::measure).collect();
    let total =
        |cap: usize| -> usize { measured.iter().map(|m| m.size(m.lines_within(cap))).sum() };
    let max_cap = measured
        .iter()
        .map(|m| m.size(m.lines()))
        .max()
        .unwrap_or(0);
    let (mut lo, mut hi) = (0usize, max_cap);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if total(mid) <= budget {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    measured.iter().map(|m| m.lines_within(lo)).collect()
}

/// Sizes of one section for each number of shown lines.
struct Measured {
    fixed: usize,
    /// `prefix[n]`: bytes of the first n lines in keep order, newlines included.
    prefix: Vec<usize>,
    keep: Keep,
}

impl Measured {
    fn lines(&self) -> usize {
        self.prefix.len() - 1
    }

    /// Rendered bytes with `n` lines shown (the cut note included when n is short of all).
    fn size(&self, n: usize) -> usize {
        let note = if n < self.lines() {
            Section::cut_note(self.lines() - n, self.keep).len()
        } else {
            0
        };
        self.fixed + self.prefix[n] + note
    }

    /// The most lines whose rendering fits in `cap` bytes (0 if even the bare section does not fit).
    fn lines_within(&self, cap: usize) -> usize {
        if self.size(self.lines()) <= cap {
            return self.lines();
        }
        // size(n) grows with n (the note's length changes by a few bytes at most, less than a line).
        let (mut lo, mut hi) = (0usize, self.lines());
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.size(mid) <= cap {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    }
}

/// Last resort, should the head alone be huge: cut at a character boundary and say so.
fn enforce_cap(out: String) -> String {
    if out.chars().count() <= MAX_MARKDOWN_CHARS {
        return out;
    }
    let marker =
        "\n\n… report cut at the size limit (truncated); the full data is in incident.json.\n";
    let keep = MAX_MARKDOWN_CHARS - marker.chars().count();
    let end = out
        .char_indices()
        .nth(keep)
        .map(|(i, _)| i)
        .unwrap_or(out.len());
    let mut cut = out[..end].to_string();
    cut.push_str(marker);
    cut
}

fn head(incident: &Incident) -> String {
    let mut out = String::new();
    let verdict_text = if incident.verdict.trim().is_empty() {
        verdict(incident)
    } else {
        incident.verdict.clone()
    };
    writeln!(
        out,
        "**Verdict:** {}\n",
        one_line(&clip(&verdict_text, 1000))
    )
    .unwrap();

    let host = &incident.host;
    let mut facts = vec![format!("incident `{}`", tick_safe(&incident.id))];
    facts.push(format!("detected {}", time_text(&incident.detected_at)));
    if !host.hostname.is_empty() {
        let mut h = format!("host `{}`", tick_safe(&host.hostname));
        let mut extra = Vec::new();
        if !host.kernel_release.is_empty() {
            extra.push(format!("kernel {}", cell(&host.kernel_release)));
        }
        if !host.arch.is_empty() {
            extra.push(cell(&host.arch));
        }
        if let Some(v) = &host.nvidia_driver_version {
            extra.push(format!("NVIDIA driver {}", cell(v)));
        }
        if !extra.is_empty() {
            write!(h, " ({})", extra.join(", ")).unwrap();
        }
        facts.push(h);
    }
    let episode = match (incident.episode.status, incident.episode.resolved_after_s) {
        _ if incident.trigger == crate::model::Trigger::OnDemand => {
            "on-demand capture (not a detected wedge)".to_string()
        }
        (crate::model::EpisodeStatus::Resolved, Some(s)) => {
            format!("episode resolved after {}", secs(s))
        }
        (crate::model::EpisodeStatus::Resolved, None) => "episode resolved".to_string(),
        (crate::model::EpisodeStatus::Open, _) => "episode still open".to_string(),
        (crate::model::EpisodeStatus::StillWedgedAtExit, _) => {
            match &incident.episode.watcher_exited_at {
                Some(at) => format!(
                    "still wedged when wedge-capture exited at {}",
                    time_text(at)
                ),
                None => "still wedged when wedge-capture exited".to_string(),
            }
        }
        (crate::model::EpisodeStatus::Unknown, _) => "episode status unknown".to_string(),
    };
    facts.push(episode);
    facts.push(if incident.complete {
        "capture complete".to_string()
    } else {
        "**capture partial** (the writer had not finished)".to_string()
    });
    writeln!(out, "{}\n", facts.join(" · ")).unwrap();

    thread_tables(incident, &mut out);
    process_table(incident, &mut out);
    timeline(incident, &mut out);
    kernel_log_highlights(incident, &mut out);
    out
}

/// Flagged kernel log lines (Xid, NVRM, hung task, off the bus) in the head, so that cutting the full log to size
/// never hides them: the first ones (where it started) and the last ones.
fn kernel_log_highlights(incident: &Incident, out: &mut String) {
    if incident.kernel_log.iter().any(|l| l.relevance.is_some()) {
        kernel_log_by_relevance(incident, out);
        return;
    }
    const FIRST: usize = 4;
    const LAST: usize = 4;
    let flagged: Vec<_> = incident
        .kernel_log
        .iter()
        .filter(|l| l.flags.any())
        .collect();
    if flagged.is_empty() {
        return;
    }
    let shown: Vec<_> = if flagged.len() <= FIRST + LAST {
        flagged.clone()
    } else {
        flagged[..FIRST]
            .iter()
            .chain(&flagged[flagged.len() - LAST..])
            .copied()
            .collect()
    };
    writeln!(
        out,
        "### Kernel log highlights ({} of {} flagged lines)\n\n```text",
        shown.len(),
        flagged.len()
    )
    .unwrap();
    for (i, l) in shown.iter().enumerate() {
        if i == FIRST && flagged.len() > FIRST + LAST {
            writeln!(
                out,
                "… {} more flagged lines in between (see the kernel log below and incident.json)",
                flagged.len() - FIRST - LAST
            )
            .unwrap();
        }
        writeln!(out, "{}", clip(&kmsg_line(l), 300)).unwrap();
    }
    out.push_str("```\n\n");
}

/// Schema 2: the lines about the wedged process and the NVIDIA driver first, then other processes' lines under a
/// heading that says whose they are. Context lines stay in the section below and in kernel-log.txt.
fn kernel_log_by_relevance(incident: &Incident, out: &mut String) {
    let of = |r: Relevance| -> Vec<&KernelLogLine> {
        incident
            .kernel_log
            .iter()
            .filter(|l| l.relevance == Some(r))
            .collect()
    };
    let ours: Vec<&KernelLogLine> = incident
        .kernel_log
        .iter()
        .filter(|l| matches!(l.relevance, Some(Relevance::Target | Relevance::Nvidia)))
        .collect();
    let others = of(Relevance::OtherProcess);
    let mut block = |title: String, lines: &[&KernelLogLine], first: usize, last: usize| {
        if lines.is_empty() {
            return;
        }
        writeln!(
            out,
            "### {title}

```text"
        )
        .unwrap();
        for (i, l) in lines.iter().enumerate() {
            if lines.len() > first + last && i == first {
                writeln!(
                    out,
                    "… {} more lines in between (see the kernel log below and kernel-log.txt)",
                    lines.len() - first - last
                )
                .unwrap();
            }
            if i < first || i + last >= lines.len() {
                writeln!(out, "{}", clip(&kmsg_line(l), 300)).unwrap();
            }
        }
        out.push_str(
            "```

",
        );
    };
    block(
        format!(
            "Kernel log: the wedged process and the NVIDIA driver ({} lines)",
            ours.len()
        ),
        &ours,
        4,
        6,
    );
    block(
        format!(
            "Kernel log: other processes ({} lines; not the wedged process)",
            others.len()
        ),
        &others,
        2,
        4,
    );
}

fn relevance_text(r: Option<Relevance>) -> &'static str {
    match r {
        Some(Relevance::Target) => " <target>",
        Some(Relevance::Nvidia) => " <nvidia>",
        Some(Relevance::OtherProcess) => " <other process>",
        _ => "",
    }
}

fn kmsg_line(l: &crate::model::KernelLogLine) -> String {
    let t = l
        .kernel_time_us
        .map(|us| format!("[{:>6}.{:06}]", us / 1_000_000, us % 1_000_000))
        .unwrap_or_else(|| "[      ?      ]".into());
    fenced_line(&format!(
        "{t}{}{} {}",
        relevance_text(l.relevance),
        flag_text(&l.flags),
        l.text
    ))
}

fn thread_tables(incident: &Incident, out: &mut String) {
    let judged = judged_threads(incident);
    if !judged.is_empty() {
        judged_tables(incident, &judged, out);
        return;
    }
    let Some(sample) = incident.latest_sample() else {
        out.push_str("No thread snapshot was captured.\n\n");
        return;
    };
    let now_ns = sample_monotonic(sample);
    let mut d: Vec<&ThreadSnapshot> = sample
        .snapshot
        .threads
        .iter()
        .filter(|t| t.state == "D")
        .collect();
    let primary = primary_thread(incident, &d, now_ns).map(|t| t.tid);
    d.sort_by_key(|t| {
        (
            Some(t.tid) != primary,
            std::cmp::Reverse(d_for_ns(incident, t.tid, now_ns)),
            t.tid,
        )
    });
    writeln!(
        out,
        "### Wedged threads ({} in D of {} threads, sample at {})\n",
        d.len(),
        sample.snapshot.threads.len(),
        time_text(&sample.taken_at)
    )
    .unwrap();
    for t in d.iter().take(MAX_THREAD_TABLES) {
        let since = d_for_ns(incident, t.tid, now_ns).map(|ns| {
            let since = incident
                .wedged_threads
                .iter()
                .find(|w| w.tid == t.tid)
                .map(|w| time_text(&w.d_since))
                .unwrap_or_default();
            format!("{} ({} before the sample)", cell(&since), duration(ns))
        });
        thread_table(incident, t, since, None, now_ns, out);
    }
    more_threads(d.len(), d.iter().map(|t| t.tid), "in D", out);
}

/// The threads judged wedged, each with its evidence as of detection and its fate; then one line on the latest
/// sample, which is shown as what it is (a later look), never in place of the evidence.
fn judged_tables(
    incident: &Incident,
    judged: &[(&WedgedThread, &ThreadSnapshot)],
    out: &mut String,
) {
    writeln!(
        out,
        "### Wedged threads ({} judged wedged; evidence as of detection)\n",
        judged.len()
    )
    .unwrap();
    for (w, t) in judged.iter().take(MAX_THREAD_TABLES) {
        let mut since = cell(&time_text(&w.d_since));
        if let Some(at) = &w.detected_at {
            write!(since, "; judged wedged {}", cell(&time_text(at))).unwrap();
        }
        let fate = fate_text(incident, w);
        let at_ns = w.detected_at.as_ref().and_then(|d| d.monotonic_ns);
        thread_table(incident, t, Some(since), Some(cell(&fate)), at_ns, out);
        let user = match (&w.user_frame, &w.user_frame_not_captured) {
            (Some(frame), _) => {
                let mut v = format!("pc {} in {}", cell(&frame.pc), code_cell(&frame.short()));
                v.push_str(&python_view::symbol_suffix(frame));
                if let Some(path) = &frame.path {
                    write!(v, " ({})", cell(path)).unwrap();
                }
                if let Some(f) = in_flight_of(incident, w.tid) {
                    write!(
                        v,
                        " while {} in flight",
                        code_cell(&call_text(&f.call, &f.args, &f.label))
                    )
                    .unwrap();
                }
                v
            }
            (None, Some(why)) => format!("not captured: {}", cell(why)),
            (None, None) => {
                python_view::append_rows(out, &python_view::thread_rows(w));
                continue;
            }
        };
        // The table's last row: no blank line between it and the table above.
        out.pop();
        writeln!(out, "| user frame | {user} |\n").unwrap();
        python_view::append_rows(out, &python_view::thread_rows(w));
    }
    more_threads(
        judged.len(),
        judged.iter().map(|(w, _)| w.tid),
        "judged wedged",
        out,
    );
    if let Some(sample) = incident.latest_sample() {
        let d: Vec<String> = sample
            .snapshot
            .threads
            .iter()
            .filter(|t| t.state == "D")
            .take(16)
            .map(|t| t.tid.to_string())
            .collect();
        writeln!(
            out,
            "Latest sample ({}): {} threads, {} in D{}.\n",
            time_text(&sample.taken_at),
            sample.snapshot.threads.len(),
            sample
                .snapshot
                .threads
                .iter()
                .filter(|t| t.state == "D")
                .count(),
            if d.is_empty() {
                String::new()
            } else {
                format!(" (tids {})", d.join(", "))
            }
        )
        .unwrap();
    }
}

/// `N more threads <what> (tids …)` after the tables that were shown.
fn more_threads(total: usize, tids: impl Iterator<Item = i32>, what: &str, out: &mut String) {
    if total <= MAX_THREAD_TABLES {
        return;
    }
    let rest: Vec<String> = tids
        .skip(MAX_THREAD_TABLES)
        .take(64)
        .map(|t| t.to_string())
        .collect();
    let more = if total - MAX_THREAD_TABLES > rest.len() {
        ", …"
    } else {
        ""
    };
    writeln!(
        out,
        "{} more threads {what} (tids {}{more}); their stacks are below.\n",
        total - MAX_THREAD_TABLES,
        rest.join(", ")
    )
    .unwrap();
}

/// One thread's table: state, since when, fate, wchan, syscall, ioctl, site, top frame, breadcrumb.
fn thread_table(
    incident: &Incident,
    t: &ThreadSnapshot,
    since: Option<String>,
    fate: Option<String>,
    now_ns: Option<u64>,
    out: &mut String,
) {
    writeln!(
        out,
        "| thread {} | `{}` |\n|---|---|",
        t.tid,
        tick_safe(&t.comm).replace('|', "\\|")
    )
    .unwrap();
    let mut row = |k: &str, v: String| writeln!(out, "| {k} | {v} |").unwrap();
    row("state", cell(&t.state));
    if let Some(since) = since {
        row("in D since", since);
    }
    if let Some(fate) = fate {
        row("fate", fate);
    }
    row(
        "wchan",
        t.wchan
            .as_deref()
            .map(code_cell)
            .unwrap_or_else(|| "not read".into()),
    );
    row("syscall", syscall_text(t));
    if let Some(i) = &t.ioctl {
        let name = i.name.clone().unwrap_or_else(|| "unknown".into());
        let mut v = format!(
            "{} `{}` dir {} type {:#x} nr {:#x} size {}",
            code_cell(&name),
            cell(&i.request),
            cell(&i.dir),
            i.ioctl_type,
            i.nr,
            i.size
        );
        if let Some(d) = &i.driver {
            write!(v, " ({})", cell(d)).unwrap();
        }
        write!(
            v,
            " on fd {} → {}",
            i.fd,
            i.fd_target
                .as_deref()
                .map(code_cell)
                .unwrap_or_else(|| "?".into())
        )
        .unwrap();
        row("ioctl", v);
    }
    if let Some(site) = &t.site {
        row("site", cell(site));
    }
    if let Some(class) = &t.waits_for {
        let behind: Vec<String> = t
            .blocked_behind
            .iter()
            .take(16)
            .map(i32::to_string)
            .collect();
        let v = if behind.is_empty() {
            format!(
                "{} (no thread of the process in D holds it)",
                code_cell(class)
            )
        } else {
            format!("{} held by tid {}", code_cell(class), behind.join(", "))
        };
        row("waits for", v);
    }
    let waiters = waiting_behind(incident, t.tid);
    if !waiters.is_empty() {
        let tids: Vec<String> = waiters.iter().take(16).map(i32::to_string).collect();
        row(
            "blocks",
            format!("tid {} (they wait behind it)", tids.join(", ")),
        );
    }
    if let Some(top) = t.stack.first() {
        row("top kernel frame", code_cell(&frame_text(top)));
    }
    if let Some(clause) = breadcrumb_clause(incident, t.tid, now_ns) {
        row("breadcrumb", cell(&clause.replace('`', "")));
    }
    out.push('\n');
}

fn syscall_text(t: &ThreadSnapshot) -> String {
    match &t.syscall {
        None => "not read".into(),
        Some(SyscallInfo::Running { .. }) => "running (not in a syscall)".into(),
        Some(SyscallInfo::Blocked { nr, name, args, .. }) => {
            if *nr < 0 {
                return "blocked outside a syscall (nr -1)".into();
            }
            let name = name.clone().unwrap_or_else(|| "?".into());
            let shown: Vec<&str> = args.iter().take(3).map(String::as_str).collect();
            let mut text = format!(
                "{} ({nr}) args {}",
                code_cell(&name),
                cell(&shown.join(", "))
            );
            for f in &t.syscall_files {
                let target = match (&f.target, &f.not_captured) {
                    (Some(target), _) => code_cell(target),
                    (None, Some(why)) => format!("? ({})", cell(why)),
                    (None, None) => "?".into(),
                };
                write!(text, "; fd {} → {target}", f.fd).unwrap();
            }
            text
        }
    }
}

fn frame_text(f: &capture::StackFrame) -> String {
    let mut s = format!("{}+{:#x}/{:#x}", f.function, f.offset, f.size);
    if let Some(m) = &f.module {
        write!(s, " [{m}]").unwrap();
    }
    s
}

fn process_table(incident: &Incident, out: &mut String) {
    let p = &incident.process;
    writeln!(out, "### Process\n\n| | |\n|---|---|").unwrap();
    writeln!(out, "| pid | {} |", p.pid).unwrap();
    if !p.nspid.is_empty() {
        let chain: Vec<String> = p.nspid.iter().take(8).map(i32::to_string).collect();
        writeln!(out, "| NSpid | {} |", chain.join(" → ")).unwrap();
    }
    if !p.comm.is_empty() {
        writeln!(out, "| comm | {} |", code_cell(&p.comm)).unwrap();
    }
    if let Some(c) = &p.cgroup {
        writeln!(out, "| cgroup | {} |", code_cell(c)).unwrap();
    }
    if let Some(c) = &p.container_id {
        writeln!(out, "| container | {} |", code_cell(c)).unwrap();
    }
    if let Some(args) = &p.cmdline {
        let redacted = crate::redact::redact_cmdline(args);
        writeln!(
            out,
            "| command line (redacted) | {} |",
            code_cell(&redacted.join(" "))
        )
        .unwrap();
    }
    out.push('\n');
}

fn timeline(incident: &Incident, out: &mut String) {
    if incident.timeline.is_empty() {
        return;
    }
    let mut events: Vec<_> = incident.timeline.iter().collect();
    events.sort_by_key(|e| (e.at.monotonic_ns.is_none(), e.at.monotonic_ns, e.at.wall));
    out.push_str("### Timeline\n\n");
    for e in events.iter().take(MAX_TIMELINE) {
        writeln!(out, "- {} — {}", time_text(&e.at), cell(&e.event)).unwrap();
    }
    if events.len() > MAX_TIMELINE {
        writeln!(
            out,
            "- … {} more events in incident.json",
            events.len() - MAX_TIMELINE
        )
        .unwrap();
    }
    out.push('\n');
}

fn sections(incident: &Incident) -> Vec<Section> {
    let latest = incident.latest_sample();
    let now_ns = latest.and_then(sample_monotonic);

    let judged = judged_threads(incident);
    let mut at_detection = Section::new(
        format!(
            "Kernel stacks at detection ({} wedged threads)",
            judged.len()
        ),
        Keep::Head,
    );
    for (w, t) in &judged {
        at_detection.push(format!(
            "thread {} {} state {} wchan {} ({})",
            t.tid,
            t.comm,
            t.state,
            t.wchan.as_deref().unwrap_or("-"),
            fate_text(incident, w)
        ));
        push_stack(&mut at_detection, t);
    }

    let (title, lines) = python_view::python_stacks(incident);
    let mut python = Section::new(title, Keep::Head);
    lines.iter().for_each(|line| python.push(line));

    let before = history_section(incident);

    let mut stacks = Section::new("Kernel stacks", Keep::Head);
    if let Some(sample) = latest {
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
    }

    let mut history = Section::new(
        format!("Samples over time ({})", incident.samples.len()),
        Keep::Tail,
    );
    if incident.samples.len() > 1 {
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
                s.snapshot.threads.len(),
                d.len()
            ));
            for t in d.iter().take(16) {
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
    }

    let mut crumbs = Section::new("Breadcrumbs", Keep::Tail);
    let rings: Vec<&crate::model::RingExcerpt> =
        incident.ring.iter().chain(&incident.extra_rings).collect();
    if !rings.is_empty() {
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
    }
    for ring in rings {
        if let Some(p) = &ring.path {
            crumbs.push(format!("ring {p}"));
        }
        if let Some(e) = &ring.error {
            crumbs.push(format!("ring could not be read: {e}"));
        }
        for f in &ring.in_flight {
            let age = in_flight_age(f, now_ns)
                .map(|ns| format!("{} ago", duration(ns)))
                .unwrap_or_else(|| "age unknown".into());
            crumbs.push(format!(
                "IN FLIGHT tid {} {} {} entered {age}",
                f.tid,
                call_text(&f.call, &f.args, &f.label),
                label(&f.label)
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

    let flagged = incident.kernel_log.iter().filter(|l| l.flags.any()).count();
    let mut kmsg = Section::new(
        format!(
            "Kernel log ({} lines, {flagged} flagged)",
            incident.kernel_log.len()
        ),
        Keep::Tail,
    );
    if incident.kernel_log.iter().any(|l| l.relevance.is_some()) {
        // Schema 2: what concerns the wedge, and context lines only from the episode's start on (never the
        // boot log of a machine that booted minutes before); the whole window is kernel-log.txt.
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
        for l in shown {
            kmsg.lines.push(kmsg_line(l));
        }
    } else {
        for l in &incident.kernel_log {
            kmsg.lines.push(kmsg_line(l));
        }
    }

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
        let total = hc.d_state_total.unwrap_or(hc.d_state_tasks.len() as u64);
        host.push(format!("tasks in D on the host: {total}"));
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
        for line in p.output_excerpt.lines().take(200) {
            probes.push(format!("    {line}"));
        }
    }

    let mut missing = Section::new(
        format!("Not captured ({})", incident.not_captured.len()),
        Keep::Head,
    );
    for n in &incident.not_captured {
        missing.push(format!("{}: {}", n.what, n.why));
    }

    vec![
        at_detection,
        python,
        before,
        stacks,
        history,
        crumbs,
        kmsg,
        host,
        probes,
        missing,
    ]
}

/// The watcher's samples from before the detection: one state strip per thread that matters (oldest first, `.`
/// where the thread did not exist yet), the wchans it slept in and its switch deltas while in D.
fn history_section(incident: &Incident) -> Section {
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
        section.push(format!("    {}", frame_text(f)));
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
        label(&r.label)
    )
}

fn label(l: &str) -> String {
    if l.is_empty() {
        String::new()
    } else {
        format!("\"{l}\"")
    }
}

fn opt(v: Option<u64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "?".into())
}

fn flag_text(f: &KernelLogFlags) -> String {
    let mut tags = Vec::new();
    if f.xid {
        tags.push("XID");
    }
    if f.fallen_off_bus {
        tags.push("OFF-BUS");
    }
    if f.hung_task {
        tags.push("HUNG-TASK");
    }
    if f.nvrm && !f.xid {
        tags.push("NVRM");
    }
    if tags.is_empty() {
        String::new()
    } else {
        format!(" <{}>", tags.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(bytes(48), "48 B");
        assert_eq!(bytes(64 << 20), "64 MiB");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(duration(312_000_000_000), "312 s");
        assert_eq!(duration(300_000_000), "0.3 s");
        assert_eq!(duration(3_900_000_000_000), "1 h 05 min");
    }

    #[test]
    fn hostile_text_cannot_break_out() {
        assert_eq!(fenced_line("a```b"), "a'''b");
        assert_eq!(cell("<b>|x"), "&lt;b&gt;\\|x");
        assert_eq!(tick_safe("a`b\nc"), "a'b c");
    }

    #[test]
    fn control_characters_are_escaped_everywhere_text_is_inlined() {
        let comm = "x\x1b]0;pwned\x07y\u{9b}2J\nz";
        assert_eq!(escape_controls(comm), "x\\x1b]0;pwned\\x07y\\u{9b}2J\\nz");
        assert_eq!(escape_controls("tab\tok"), "tab\tok");
        for rendered in [
            tick_safe(comm),
            cell(comm),
            fenced_line(comm),
            code_cell(comm),
        ] {
            assert!(!rendered.chars().any(|c| c.is_control()), "{rendered:?}");
            assert!(rendered.contains("\\x1b"), "{rendered:?}");
        }
        let mut incident = Incident {
            verdict: format!("thread 1 `{comm}` is in D"),
            ..Incident::default()
        };
        incident.process.comm = comm.into();
        incident.host.hostname = comm.into();
        let md = markdown(&incident);
        assert!(
            !md.chars().any(|c| c.is_control() && c != '\n'),
            "a control character reached report.md"
        );
    }

    #[test]
    fn the_verdict_names_the_decoded_nvidia_operation() {
        let t: ThreadSnapshot = serde_json::from_value(serde_json::json!({
            "tid": 7, "comm": "w", "state": "D", "wchan": null, "syscall": null, "stack": [], "site": null,
            "ioctl": {"fd": 5, "fd_target": "/dev/nvidiactl", "request": "0xc020462a", "dir": "read|write",
                "type": 70, "nr": 42, "size": 32, "name": "NV_ESC_RM_CONTROL", "driver": "nvidia-rm",
                "argument": {"pointer": "0x1000", "structure": "NVOS54_PARAMETERS", "bytes_read": 32,
                    "operation": "RM control NV2080_CTRL_CMD_GPU_GET_INFO_V2 waits for a GSP RPC reply"}}
        }))
        .unwrap();
        assert_eq!(
            where_blocked(&t),
            " in ioctl `NV_ESC_RM_CONTROL` on /dev/nvidiactl (RM control NV2080_CTRL_CMD_GPU_GET_INFO_V2 waits for a GSP RPC reply)"
        );
    }

    #[test]
    fn empty_incident_renders() {
        let md = markdown(&Incident::default());
        assert!(md.starts_with("**Verdict:** pid 0: no thread snapshot captured"));
    }
}
