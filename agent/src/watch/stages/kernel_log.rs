//! Stage `kernel_log`: /dev/kmsg from `kmsg_before` before the wedge began until now (NVIDIA lines from before the
//! window are kept too), each line marked with whom it concerns (`relevance`: the target, the NVIDIA driver,
//! another process, context). The whole window is also written beside incident.json as `kernel-log.txt` (it goes
//! into the bundle); report.md shows only what concerns the wedge. Re-read at every update of the episode
//! ([`refresh`]), so the window runs until the last update.
//!
//! Relevance is settled here, on the data ([`settle_relevance`]): a boot line (the kernel's own boot, up to
//! `Run /sbin/init`, or a firmware/PCI/APIC bring-up message: `IOAPIC[0]` is no pid) is context, never "other
//! processes"; and a line about another process from more than [`OTHER_PROCESS_MARGIN`] before the episode began
//! is context too (an old hung-task report is not this wedge). Context before the episode is not shown in
//! report.md; kernel-log.txt keeps the whole window.

use reports::model::{Incident, KernelLogLine};
use reports::store::write::IncidentFiles;

use super::context::{Capture, Deadline};
use crate::watch::capture_settings::CaptureSettings;
use capture::kmsg;
use capture::parse::kmsg::{boot_end_usec, is_boot_line, KmsgWindow};

/// The window's file in the incident directory.
pub const KERNEL_LOG_FILE: &str = "kernel-log.txt";
/// Most lines of the window kept.
const MAX_WINDOW_LINES: usize = 1000;
/// How long before the episode began a line about another process still counts as one (a hung task reported
/// just before ours is often the same lock); older ones are context.
pub const OTHER_PROCESS_MARGIN: std::time::Duration = std::time::Duration::from_secs(120);

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
    handle: Option<&IncidentFiles>,
) {
    capture_kernel_log(settings, d_since_ns, incident);
    incident.xids = xids_of(&incident.kernel_log);
    incident.classify_kernel_log();
    settle_relevance(incident, d_since_ns);
    if let Some(handle) = handle {
        if incident.kernel_log.is_empty() {
            return;
        }
        if let Err(err) = handle.write_file(KERNEL_LOG_FILE, window_text(incident).as_bytes()) {
            incident.push_not_captured("kernel-log.txt", err.to_string());
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
                incident.push_timeline(format!(
                    "{} kernel log records were overwritten while being read",
                    capture.lost
                ));
            }
        }
        // The error names the device and, when refused, the privilege it needs.
        Err(err) => {
            if !incident.not_captured.iter().any(|n| n.what == "kernel log") {
                incident.push_not_captured("kernel log", err.to_string())
            }
        }
    }
}

/// The most Xid lines an incident keeps parsed (the newest); every line stays in `kernel_log`.
const MAX_XIDS: usize = 100;

/// The Xid and SXid lines of the window, parsed, each with its printk time (oldest first, the newest kept).
pub fn xids_of(lines: &[KernelLogLine]) -> Vec<capture::xid::XidEvent> {
    let mut xids: Vec<capture::xid::XidEvent> = lines
        .iter()
        .filter(|l| l.flags.xid)
        .filter_map(|l| {
            let mut event = capture::xid::parse_xid_line(l.text.as_bytes())?;
            event.kernel_time_us = l.kernel_time_us.or(event.kernel_time_us);
            Some(event)
        })
        .collect();
    let extra = xids.len().saturating_sub(MAX_XIDS);
    xids.drain(..extra);
    xids
}

/// Boot lines are context, and so are other processes' lines from long before the episode (see the module doc).
pub fn settle_relevance(incident: &mut Incident, d_since_ns: u64) {
    use reports::model::Relevance;
    let boot_end = boot_end_usec(
        incident
            .kernel_log
            .iter()
            .map(|l| (l.kernel_time_us.unwrap_or(0), l.text.as_str())),
    );
    let oldest_other_us =
        (d_since_ns / 1000).saturating_sub(OTHER_PROCESS_MARGIN.as_micros() as u64);
    for l in &mut incident.kernel_log {
        if l.relevance != Some(Relevance::OtherProcess) {
            continue;
        }
        let us = l.kernel_time_us.unwrap_or(0);
        if is_boot_line(us, &l.text, boot_end) || us < oldest_other_us {
            l.relevance = Some(Relevance::Context);
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
            capture::escape::controls(&l.text.replace('\n', " "))
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 28, family 8: boot lines and old lines are not "other processes".
    #[test]
    fn boot_lines_and_old_lines_are_context_not_other_processes() {
        use reports::model::{KernelLogLine, Relevance};
        let mut incident = Incident::new(4242);
        let line = |us: u64, text: &str| KernelLogLine::new(Some(us), Some(6), Some(us), text);
        incident.kernel_log = vec![
            line(
                100,
                "IOAPIC[0]: apic_id 0, version 32, address 0xfec00000, GSI 0-23",
            ),
            line(200, "pci 0000:00:02.0: [8086:9a49] type 00 class 0x030000"),
            line(1_500_000, "Run /sbin/init as init process"),
            line(
                10_000_000,
                "INFO: task rsync:77 blocked for more than 120 seconds.",
            ),
            line(
                590_000_000,
                "INFO: task rsync:78 blocked for more than 120 seconds.",
            ),
            line(
                600_000_000,
                "INFO: task python3:4242 blocked for more than 120 seconds.",
            ),
        ];
        incident.classify_kernel_log();
        // Before: the boot lines read as other processes (`IOAPIC[0]` looks like comm[pid]).
        assert_eq!(
            incident.kernel_log[0].relevance,
            Some(Relevance::OtherProcess)
        );
        settle_relevance(&mut incident, 600_000_000_000);
        let relevance: Vec<_> = incident.kernel_log.iter().map(|l| l.relevance).collect();
        assert_eq!(
            relevance,
            [
                Some(Relevance::Context),
                Some(Relevance::Context),
                Some(Relevance::Context),
                // Ten minutes before the episode: context; within the margin: another process.
                Some(Relevance::Context),
                Some(Relevance::OtherProcess),
                Some(Relevance::Target),
            ]
        );
        // The whole window stays in kernel-log.txt.
        assert_eq!(window_text(&incident).lines().count(), 6);
    }

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
