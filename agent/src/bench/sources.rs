//! `wedge-capture agent --bench-scans N`: the cost of finding targets on this host, per scan, against the
//! naive way measured in the same run (every scan: list the proc root, read `stat` of every pid, and, for
//! the selectors that need them, `cgroup` and every fd link of every pid). Figures in docs/agent.md.

use std::time::{Duration, Instant};

use capture::parse::fd::FdTarget;
use capture::ProcRoot;

use crate::daemon::sources::{is_nvidia_device, HostSource};
use crate::settings::Settings;
use crate::watch::targets::TargetSource;

fn cpu_time() -> Duration {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}

/// The naive scan: everything re-read every time. Returns the number of matching processes.
fn naive_scan(root: &ProcRoot, settings: &Settings) -> usize {
    let selection = settings.selection();
    let mut matched = 0;
    for pid in root.pids().unwrap_or_default() {
        let Ok(stat) = root.read_stat(pid) else {
            continue;
        };
        if selection.comm.iter().any(|re| re.is_match(&stat.comm)) {
            matched += 1;
            continue;
        }
        if !selection.cgroup.is_empty() {
            if let Ok(lines) = root.cgroup(pid) {
                if lines
                    .iter()
                    .any(|l| selection.cgroup.iter().any(|s| l.path.contains(s.as_str())))
                {
                    matched += 1;
                    continue;
                }
            }
        }
        if selection.gpu {
            let holds = root
                .find_fd_link(pid, usize::MAX, |link| {
                    matches!(&link.target, FdTarget::Path { path, .. } if is_nvidia_device(path))
                })
                .is_ok_and(|hit| hit.is_some());
            if holds {
                matched += 1;
            }
        }
    }
    matched
}

/// Run `scans` scans each way and print per-scan wall and CPU time.
pub fn run(settings: &Settings, scans: u32) {
    let root = ProcRoot::default();
    let scans = scans.max(1);
    let mut source = HostSource::new(settings.selection(), settings.source_settings());
    // Warm: the first scan reads everything (that is the cost of a start, not of a scan).
    let first = source.targets(&root).len();
    let (wall0, cpu0) = (Instant::now(), cpu_time());
    let mut found = 0;
    for _ in 0..scans {
        found = source.targets(&root).len();
    }
    let (source_wall, source_cpu) = (wall0.elapsed() / scans, (cpu_time() - cpu0) / scans);
    let (wall0, cpu0) = (Instant::now(), cpu_time());
    let mut naive_found = 0;
    for _ in 0..scans {
        naive_found = naive_scan(&root, settings);
    }
    let (naive_wall, naive_cpu) = (wall0.elapsed() / scans, (cpu_time() - cpu0) / scans);
    let pids = root.pids().map(|p| p.len()).unwrap_or(0);
    let ratio = naive_cpu.as_secs_f64() / source_cpu.as_secs_f64().max(1e-9);
    println!(
        "{}",
        serde_json::json!({
            "pids": pids,
            "scans": scans,
            "selectors": settings.summary(),
            "targets_first_scan": first,
            "targets": found,
            "naive_targets": naive_found,
            "source_us_per_scan": {"wall": source_wall.as_secs_f64() * 1e6, "cpu": source_cpu.as_secs_f64() * 1e6},
            "naive_us_per_scan": {"wall": naive_wall.as_secs_f64() * 1e6, "cpu": naive_cpu.as_secs_f64() * 1e6},
            "naive_over_source_cpu": ratio,
            "cpu_share_at_1hz_percent": source_cpu.as_secs_f64() * 100.0,
        })
    );
}
