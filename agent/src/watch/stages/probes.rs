//! Stage `probes`: the reads that can hang (cmdline, environ, maps, the NVIDIA driver files, nvidia-smi,
//! `--extra-probe` files), each in a sacrificial child; the probe runner's one deadline bounds them all.

use reports::model::{Incident, Timestamp};

use super::context::{Capture, Deadline};
use crate::probe::{self, Probe, ProbeOutcome, ProbeStatus};

pub fn run(capture: &mut Capture<'_>, _deadline: &Deadline) -> Result<(), String> {
    let settings = capture.settings;
    let root = &settings.proc_root;
    let pid = capture.pid;
    let mut probes = probe::standard_probes(root, pid, settings.watch.nvidia_smi);
    for (i, file) in settings.watch.extra_probe.iter().enumerate() {
        probes.push(Probe::read_file(
            &format!("extra-{}", i + 1),
            file.clone(),
            "the file's driver is probably blocked",
        ));
    }
    let started_at = Timestamp::now();
    let outcomes = capture.probes.run_all(&probes);
    apply_probes(&outcomes, &started_at, capture.incident);
    match outcomes.iter().find(|o| o.name == "maps") {
        Some(maps) => {
            locate_user_frames(maps, capture.incident);
            capture.maps = (maps.status == ProbeStatus::Ok).then(|| maps.output.clone());
        }
        None => set_user_frames(capture.incident, |_| {
            Err("the maps probe did not run".to_string())
        }),
    }
    Ok(())
}

/// Every judged thread's user pc (from its syscall record at detection) located in the maps a sacrificial child
/// read; a maps read that timed out (the mmap lock is held) or failed leaves each frame absent with the reason.
fn locate_user_frames(maps: &ProbeOutcome, incident: &mut Incident) {
    let failure = (maps.status != ProbeStatus::Ok)
        .then(|| format!("reading {} {}", maps.target, maps.detail));
    set_user_frames(incident, |thread| {
        if let Some(why) = &failure {
            return Err(why.clone());
        }
        let pc = match &thread.syscall {
            Some(capture::SyscallInfo::Blocked { pc, .. }) => capture::user_frame::parse_pc(pc),
            _ => None,
        }
        .filter(|&pc| pc != 0)
        .ok_or_else(|| "no user pc: /proc/<tid>/syscall showed none at detection".to_string())?;
        capture::user_frame::locate(&maps.output, pc).ok_or_else(|| {
            if maps.output_truncated {
                format!(
                    "pc {pc:#x} is beyond the part of the maps that was kept (too many mappings)"
                )
            } else {
                format!("pc {pc:#x} is in no mapping")
            }
        })
    });
}

fn set_user_frames(
    incident: &mut Incident,
    locate: impl Fn(&capture::ThreadSnapshot) -> Result<capture::user_frame::UserFrame, String>,
) {
    for w in &mut incident.wedged_threads {
        let Some(thread) = &w.at_detection else {
            w.user_frame_not_captured = Some("no evidence as of detection".to_string());
            continue;
        };
        match locate(thread) {
            Ok(frame) => w.user_frame = Some(frame),
            Err(why) => w.user_frame_not_captured = Some(why),
        }
    }
}

fn apply_probes(outcomes: &[ProbeOutcome], started_at: &Timestamp, incident: &mut Incident) {
    for outcome in outcomes {
        match (outcome.name.as_str(), &outcome.status) {
            ("cmdline", ProbeStatus::Ok) => {
                let args: Vec<String> = outcome
                    .output
                    .split('\0')
                    .filter(|a| !a.is_empty())
                    .map(str::to_string)
                    .collect();
                if !args.is_empty() {
                    incident.process.cmdline = Some(args);
                }
            }
            ("nvidia-version", ProbeStatus::Ok) => {
                incident.host.nvidia_driver_version = parse_nvidia_version(&outcome.output);
            }
            _ => {}
        }
        // The command line goes into `process.cmdline` (redacted), never raw into an excerpt.
        // Nor the maps (file paths of the process; what matters is in `wedged_threads[].user_frame`).
        let excerpt = if outcome.name == "cmdline" || outcome.name == "maps" {
            String::new()
        } else {
            outcome.output.chars().take(4096).collect()
        };
        record_probe(incident, outcome, started_at.clone(), excerpt);
    }
}

/// One probe's outcome into `probes` (and a timeout into the timeline) with the part of its output the
/// report may show.
pub(super) fn record_probe(
    incident: &mut Incident,
    outcome: &ProbeOutcome,
    started_at: Timestamp,
    output_excerpt: String,
) {
    if outcome.status == ProbeStatus::TimedOut {
        incident.push_timeline(format!(
            "probe {} ({}) {}",
            outcome.name, outcome.target, outcome.detail
        ));
    }
    incident.probes.push(reports::model::Probe {
        name: format!("{} ({})", outcome.name, outcome.target),
        outcome: match outcome.status {
            ProbeStatus::Ok => reports::model::ProbeOutcome::Ok,
            ProbeStatus::TimedOut => reports::model::ProbeOutcome::Timeout,
            ProbeStatus::Failed | ProbeStatus::Skipped => reports::model::ProbeOutcome::Error,
        },
        started_at,
        duration_ms: outcome.elapsed_ms as f64,
        output_excerpt,
        error: (outcome.status != ProbeStatus::Ok).then(|| outcome.detail.clone()),
    });
}

/// `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build …` → `580.95.05`.
pub fn parse_nvidia_version(text: &str) -> Option<String> {
    let line = text.lines().find(|l| l.starts_with("NVRM version:"))?;
    line.split_whitespace()
        .find(|w| {
            w.contains('.')
                && w.split('.').count() >= 2
                && w.split('.')
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reports::model::WedgedThread;

    fn maps_outcome(status: ProbeStatus, output: &str, detail: &str) -> ProbeOutcome {
        ProbeOutcome {
            name: "maps".into(),
            target: "/proc/42/maps".into(),
            status,
            detail: detail.into(),
            output: output.into(),
            output_truncated: false,
            elapsed_ms: 1,
            killed: None,
        }
    }

    fn judged(pc: Option<&str>) -> WedgedThread {
        WedgedThread {
            tid: 42,
            at_detection: pc.map(|pc| capture::ThreadSnapshot {
                tid: 42,
                syscall: Some(capture::SyscallInfo::Blocked {
                    nr: 16,
                    name: Some("ioctl".into()),
                    args: Vec::new(),
                    sp: "0x1".into(),
                    pc: pc.into(),
                }),
                ..capture::ThreadSnapshot::default()
            }),
            ..WedgedThread::default()
        }
    }

    #[test]
    fn user_frames_are_located_or_absent_with_a_reason() {
        let mut incident = Incident {
            wedged_threads: vec![
                judged(Some("0x7f0000001234")),
                judged(Some("0x10")),
                judged(Some("0x0")),
                judged(None),
            ],
            ..Incident::default()
        };
        let maps = "7f0000000000-7f0000100000 r-xp 00001000 08:01 9 /usr/lib/libc.so.6\n";
        locate_user_frames(&maps_outcome(ProbeStatus::Ok, maps, ""), &mut incident);
        let w = &incident.wedged_threads;
        assert_eq!(
            w[0].user_frame.as_ref().unwrap().short(),
            "libc.so.6+0x2234"
        );
        assert_eq!(
            w[1].user_frame_not_captured.as_deref(),
            Some("pc 0x10 is in no mapping")
        );
        assert!(w[2]
            .user_frame_not_captured
            .as_deref()
            .unwrap()
            .starts_with("no user pc"));
        assert_eq!(
            w[3].user_frame_not_captured.as_deref(),
            Some("no evidence as of detection")
        );
        // Unreadable maps (the thread or process vanished, or a refused read): every frame says why.
        let mut incident = Incident {
            wedged_threads: vec![judged(Some("0x7f0000001234"))],
            ..Incident::default()
        };
        let failed = maps_outcome(ProbeStatus::Failed, "", "failed: No such file or directory");
        locate_user_frames(&failed, &mut incident);
        let w = &incident.wedged_threads[0];
        assert!(w.user_frame.is_none());
        assert_eq!(
            w.user_frame_not_captured.as_deref(),
            Some("reading /proc/42/maps failed: No such file or directory")
        );
    }

    #[test]
    fn nvidia_version_lines() {
        assert_eq!(
            parse_nvidia_version(
                "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build  (dvs-builder@U16-I3-B03-4-3)  Tue Sep 23 09:47:54 UTC 2025\nGCC version:  gcc version 13.3.0\n"
            )
            .as_deref(),
            Some("580.95.05")
        );
        assert_eq!(parse_nvidia_version("garbage"), None);
    }
}
