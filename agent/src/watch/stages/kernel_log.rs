//! Stage `kernel_log`: /dev/kmsg from `kmsg_before` before the wedge began until now (NVIDIA lines from before the
//! window are kept too), each line marked with whom it concerns (`relevance`: the target, the NVIDIA driver,
//! another process, context). The whole window is also written beside incident.json as `kernel-log.txt` (it goes
//! into the bundle); report.md shows only what concerns the wedge. Re-read at every update of the episode
//! ([`refresh`]), so the window runs until the last update.

use reports::model::{Incident, KernelLogLine};
use reports::store::IncidentHandle;

use super::{not_captured, timeline, Capture, Deadline};
use crate::watch::incident::CaptureSettings;
use capture::kmsg::{self, KmsgWindow};

/// The window's file in the incident directory.
pub const KERNEL_LOG_FILE: &str = "kernel-log.txt";
/// Most lines of the window kept.
const MAX_WINDOW_LINES: usize = 1000;

pub fn run(capture: &mut Capture<'_>, _deadline: &Deadline) -> Result<(), String> {
    refresh(
        capture.settings,
        capture.since_ns,
        capture.incident,
        capture.handle,
    );
    Ok(())
}

/// Read the window again (until now), classify it and rewrite `kernel-log.txt` when the incident has a directory.
pub fn refresh(
    settings: &CaptureSettings,
    d_since_ns: u64,
    incident: &mut Incident,
    handle: Option<&IncidentHandle>,
) {
    capture_kernel_log(settings, d_since_ns, incident);
    incident.classify_kernel_log();
    if let Some(handle) = handle {
        if incident.kernel_log.is_empty() {
            return;
        }
        if let Err(err) = handle.write_file(KERNEL_LOG_FILE, window_text(incident).as_bytes()) {
            not_captured(incident, "kernel-log.txt", err.to_string());
        }
    }
}

fn capture_kernel_log(settings: &CaptureSettings, d_since_ns: u64, incident: &mut Incident) {
    let since_us = (d_since_ns / 1000).saturating_sub(settings.kmsg_before.as_micros() as u64);
    let window = KmsgWindow {
        since_usec: since_us,
        max_recent: MAX_WINDOW_LINES,
        max_flagged_before: 100,
    };
    match kmsg::read_around(&settings.kmsg_path, &window) {
        Ok(capture) => {
            incident.kernel_log = capture
                .records
                .into_iter()
                .map(|r| KernelLogLine::new(Some(r.seq), Some(r.level), Some(r.usec), r.message))
                // Before the window only the NVIDIA driver's lines count: old hung-task reports of other
                // processes (or of an earlier process with the same comm) are not this wedge.
                .filter(|l| {
                    l.kernel_time_us.unwrap_or(0) >= since_us || l.flags.nvrm || l.flags.xid
                })
                .collect();
            if capture.lost > 0 {
                timeline(
                    incident,
                    format!(
                        "{} kernel log records were overwritten while being read",
                        capture.lost
                    ),
                );
            }
        }
        // The error names the device and, when refused, the privilege it needs.
        Err(err) => {
            if !incident.not_captured.iter().any(|n| n.what == "kernel log") {
                not_captured(incident, "kernel log", err.to_string())
            }
        }
    }
}

/// `[   12.345678] <relevance> text`, one line per record.
fn window_text(incident: &Incident) -> String {
    let mut out = String::new();
    for l in &incident.kernel_log {
        let us = l.kernel_time_us.unwrap_or(0);
        let relevance = match l.relevance {
            Some(reports::model::Relevance::Target) => "target",
            Some(reports::model::Relevance::Nvidia) => "nvidia",
            Some(reports::model::Relevance::OtherProcess) => "other_process",
            _ => "context",
        };
        out.push_str(&format!(
            "[{:>6}.{:06}] {relevance:<13} {}\n",
            us / 1_000_000,
            us % 1_000_000,
            reports::render::escape_controls(&l.text.replace('\n', " "))
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreadable_kernel_log_is_not_captured_with_its_reason_once() {
        let mut settings = CaptureSettings::new(capture::ProcRoot::default());
        settings.kmsg_path = "/nonexistent/kmsg".into();
        let mut incident = Incident::new(1);
        refresh(&settings, 0, &mut incident, None);
        refresh(&settings, 0, &mut incident, None);
        assert!(incident.kernel_log.is_empty());
        let missing: Vec<_> = incident
            .not_captured
            .iter()
            .filter(|n| n.what == "kernel log")
            .collect();
        assert_eq!(missing.len(), 1, "{:?}", incident.not_captured);
        assert!(missing[0].why.contains("/nonexistent/kmsg"), "{missing:?}");
    }
}
