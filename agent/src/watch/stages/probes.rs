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
    Ok(())
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
        let excerpt = if outcome.name == "cmdline" {
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
