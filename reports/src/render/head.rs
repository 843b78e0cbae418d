//! report.md's head, always shown whole: the verdict, one line of facts, the wedged threads' tables, the process,
//! the timeline and the flagged kernel log lines, each part one function of [`HEAD`].

use std::fmt::Write as _;

use capture::escape;

use super::threads::thread_tables;
use crate::limits::{
    HIGHLIGHTS_FIRST_LAST, MAX_CELL_CHARS, MAX_HIGHLIGHT_CHARS, MAX_NSPID_SHOWN, MAX_TIMELINE,
    MAX_VERDICT_CHARS, OTHERS_FIRST_LAST, OURS_FIRST_LAST,
};
use crate::model::{
    ContainerInfo, EpisodeStatus, Incident, KernelLogFlags, KernelLogLine, PodIdentity, Relevance,
    Trigger,
};
use crate::text::{cell, clip, code, code_cell, fenced_line, secs, time_text};
use crate::verdict::verdict;

/// The head's parts, in order.
pub(super) const HEAD: &[fn(&Incident, &mut String)] = &[
    verdict_line,
    facts_line,
    thread_tables,
    super::wait_graph::head,
    process_table,
    timeline,
    kernel_log_highlights,
];

/// `**Verdict:** …`: the stored verdict, or one computed now for an incident without one. Its code spans stay
/// code; everything else is escaped as prose (a stored verdict is whatever incident.json says).
fn verdict_line(incident: &Incident, out: &mut String) {
    let verdict_text = if incident.verdict.trim().is_empty() {
        verdict(incident)
    } else {
        incident.verdict.clone()
    };
    writeln!(
        out,
        "**Verdict:** {}\n",
        escape::markdown_text(&clip(&verdict_text, MAX_VERDICT_CHARS))
    )
    .unwrap();
}

/// `incident … · detected … · host … · episode … · capture complete`.
fn facts_line(incident: &Incident, out: &mut String) {
    let mut facts = vec![format!("incident {}", code(&incident.id))];
    facts.push(format!("detected {}", time_text(&incident.detected_at)));
    facts.extend(host_fact(incident));
    facts.push(episode_fact(incident));
    facts.push(if incident.complete {
        "capture complete".to_string()
    } else {
        "**capture partial** (the writer had not finished)".to_string()
    });
    writeln!(out, "{}\n", facts.join(" · ")).unwrap();
}

/// `host `gpu01` (kernel 6.18.44, x86_64, NVIDIA driver 580.159.04)`.
fn host_fact(incident: &Incident) -> Option<String> {
    let host = &incident.host;
    if host.hostname.is_empty() {
        return None;
    }
    let mut h = format!("host {}", code(&host.hostname));
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
    Some(h)
}

/// How the episode stands: open, resolved after …, still wedged when wedge-capture exited, on demand.
fn episode_fact(incident: &Incident) -> String {
    let episode = &incident.episode;
    match (episode.status, episode.resolved_after_s) {
        _ if incident.trigger == Trigger::OnDemand => {
            "on-demand capture (not a detected wedge)".to_string()
        }
        (EpisodeStatus::Resolved, Some(s)) => format!("episode resolved after {}", secs(s)),
        (EpisodeStatus::Resolved, None) => "episode resolved".to_string(),
        (EpisodeStatus::Open, _) => "episode still open".to_string(),
        (EpisodeStatus::StillWedgedAtExit, _) => match &episode.watcher_exited_at {
            Some(at) => format!(
                "still wedged when wedge-capture exited at {}",
                time_text(at)
            ),
            None => "still wedged when wedge-capture exited".to_string(),
        },
        (EpisodeStatus::Unknown, _) => "episode status unknown".to_string(),
    }
}

fn process_table(incident: &Incident, out: &mut String) {
    let p = &incident.process;
    writeln!(out, "### Process\n\n| | |\n|---|---|").unwrap();
    writeln!(out, "| pid | {} |", p.pid).unwrap();
    if !p.nspid.is_empty() {
        let chain: Vec<String> = p
            .nspid
            .iter()
            .take(MAX_NSPID_SHOWN)
            .map(i32::to_string)
            .collect();
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
    pod_rows(p.container.as_ref(), out);
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

/// The pod, and how it was established: a pod the node's state did not confirm is shown as claimed by the cgroup
/// name (a tenant can name its cgroups like another pod's).
fn pod_rows(container: Option<&ContainerInfo>, out: &mut String) {
    let Some(c) = container else {
        return;
    };
    let Some(uid) = &c.pod_uid else {
        return;
    };
    let name = match &c.pod {
        Some(pod) => format!(
            "{} (uid {})",
            code_cell(&format!("{}/{}", pod.namespace, pod.name)),
            code_cell(uid)
        ),
        None => format!("uid {}", code_cell(uid)),
    };
    let claimed = if c.pod_confirmed() { "" } else { "claimed " };
    writeln!(out, "| {claimed}pod | {name} |").unwrap();
    let identity = c.pod_identity.unwrap_or(PodIdentity::CgroupName).describe();
    match &c.pod_identity_note {
        Some(note) => writeln!(out, "| pod identity | {identity}: {} |", cell(note)).unwrap(),
        None => writeln!(out, "| pod identity | {identity} |").unwrap(),
    }
}

fn timeline(incident: &Incident, out: &mut String) {
    if incident.timeline.is_empty() {
        return;
    }
    let mut events: Vec<_> = incident.timeline.iter().collect();
    events.sort_by_key(|e| (e.at.monotonic_ns.is_none(), e.at.monotonic_ns, e.at.wall));
    out.push_str("### Timeline\n\n");
    for e in events.iter().take(MAX_TIMELINE) {
        // An event quotes names (a comm, a ring path) in text of ours: escaped prose, any span in it kept code.
        writeln!(
            out,
            "- {} — {}",
            time_text(&e.at),
            escape::markdown_text(&clip(&e.event, MAX_CELL_CHARS))
        )
        .unwrap();
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

/// Flagged kernel log lines (Xid, NVRM, hung task, off the bus) in the head, so that cutting the full log to size
/// never hides them: the first ones (where it started) and the last ones.
fn kernel_log_highlights(incident: &Incident, out: &mut String) {
    if incident.kernel_log.iter().any(|l| l.relevance.is_some()) {
        kernel_log_by_relevance(incident, out);
        return;
    }
    const FIRST: usize = HIGHLIGHTS_FIRST_LAST.0;
    const LAST: usize = HIGHLIGHTS_FIRST_LAST.1;
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
        writeln!(out, "{}", clip(&kmsg_line(l), MAX_HIGHLIGHT_CHARS)).unwrap();
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
                writeln!(out, "{}", clip(&kmsg_line(l), MAX_HIGHLIGHT_CHARS)).unwrap();
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
        OURS_FIRST_LAST.0,
        OURS_FIRST_LAST.1,
    );
    block(
        format!(
            "Kernel log: other processes ({} lines; not the wedged process)",
            others.len()
        ),
        &others,
        OTHERS_FIRST_LAST.0,
        OTHERS_FIRST_LAST.1,
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

pub(super) fn kmsg_line(l: &KernelLogLine) -> String {
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
