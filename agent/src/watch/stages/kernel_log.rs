//! Stage `kernel_log`: /dev/kmsg from `kmsg_before` before the wedge began (flagged lines kept longer).

use reports::model::{Incident, KernelLogLine};

use super::{not_captured, timeline, Capture, Deadline};
use crate::watch::incident::CaptureSettings;
use capture::kmsg::{self, KmsgWindow};

pub fn run(capture: &mut Capture<'_>, _deadline: &Deadline) -> Result<(), String> {
    capture_kernel_log(capture.settings, capture.since_ns, capture.incident);
    Ok(())
}

fn capture_kernel_log(settings: &CaptureSettings, d_since_ns: u64, incident: &mut Incident) {
    let since_us = (d_since_ns / 1000).saturating_sub(settings.kmsg_before.as_micros() as u64);
    let window = KmsgWindow {
        since_usec: since_us,
        max_recent: 400,
        max_flagged_before: 100,
    };
    match kmsg::read_around(&settings.kmsg_path, &window) {
        Ok(capture) => {
            incident.kernel_log = capture
                .records
                .into_iter()
                .map(|r| KernelLogLine::new(Some(r.seq), Some(r.level), Some(r.usec), r.message))
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
        Err(err) => not_captured(incident, "kernel log", err.to_string()),
    }
}
