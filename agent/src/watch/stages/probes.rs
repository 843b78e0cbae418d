//! Stage `probes`: the reads that can hang (cmdline, environ, maps, the NVIDIA driver files, nvidia-smi,
//! `--extra-probe` files), each in a sacrificial child; the probe runner's one deadline bounds them all.

use reports::model::{Incident, Timestamp};

use super::{timeline, Capture, Deadline};
use crate::probe::{self, Probe, ProbeOutcome, ProbeStatus};

pub fn run(capture: &mut Capture<'_>, _deadline: &Deadline) -> Result<(), String> {
    let settings = capture.settings;
    let root = &settings.proc_root;
    let pid = capture.pid;
    let mut probes = probe::standard_probes(root, pid, settings.nvidia_smi);
    for (i, file) in settings.extra_probe_files.iter().enumerate() {
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
        Some(maps) => locate_user_frames(maps, capture.incident),
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
        let report_outcome = match outcome.status {
            ProbeStatus::Ok => reports::model::ProbeOutcome::Ok,
            ProbeStatus::TimedOut => reports::model::ProbeOutcome::Timeout,
            ProbeStatus::Failed | ProbeStatus::Skipped => reports::model::ProbeOutcome::Error,
        };
        if outcome.status == ProbeStatus::TimedOut {
            timeline(
                incident,
                format!(
                    "probe {} ({}) {}",
                    outcome.name, outcome.target, outcome.detail
                ),
            );
        }
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
        incident.probes.push(reports::model::Probe {
            name: format!("{} ({})", outcome.name, outcome.target),
            outcome: report_outcome,
            started_at: started_at.clone(),
            duration_ms: outcome.elapsed_ms as f64,
            output_excerpt: excerpt,
            error: (outcome.status != ProbeStatus::Ok).then(|| outcome.detail.clone()),
        });
    }
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
