//! The watch settings, defined once (ripgrep's model: raw flags → resolved settings).
//!
//! Every default of the watch loop and the capture path is a named constant here and nowhere else; the
//! front ends only say where their values come from:
//! - `run`: its flags over [`WatchSettings::default`] (cmd/run.rs);
//! - `selftest`: fixed short values ([`SELFTEST_INTERVAL`], [`SELFTEST_THRESHOLD`]) over the defaults;
//! - `agent`: defaults ← config file ← flags ([`crate::daemon::config::resolve`]), which embeds a
//!   [`WatchSettings`] next to the settings only the daemon has (target selection, rate limits, …).
//!
//! [`WatchSettings`] then builds what the lower layers take: [`WatchConfig`] (loop + tracker) and
//! [`CaptureSettings`]. Those types' own `Default`/`new` read the same constants.
//!
//! [`flag_defaults`] renders the defaults for `--help`, so the help text cannot disagree with them.

use std::path::PathBuf;
use std::time::Duration;

use capture::ProcRoot;
use serde::Serialize;

use crate::duration::format_duration;
use crate::watch::tracker::TrackerConfig;
use crate::watch::{CaptureSettings, WatchConfig};

/// How often every watched thread is sampled.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// How long a thread must sit in D without progress to count as wedged.
pub const THRESHOLD: Duration = Duration::from_secs(30);
/// K: unchanged samples needed on top of the threshold (the no-progress proof).
pub const SAMPLES: u32 = 3;
/// Deadline of the risky reads done in sacrificial children.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Probe children still stuck (unkillable) before further probes are skipped.
pub const MAX_STUCK_PROBES: usize = 4;
/// While an episode is open, a new thread snapshot is added this often.
pub const RESAMPLE_EVERY: Duration = Duration::from_secs(30);
/// `run` re-samples every threshold, but not more often than this (a short test threshold must not
/// fill the incident with samples).
pub const MIN_RUN_RESAMPLE_EVERY: Duration = Duration::from_secs(10);
/// Kernel log kept from this long before the wedge began.
pub const KMSG_BEFORE: Duration = Duration::from_secs(600);
/// Samples kept per incident (the first and the latest ones).
pub const MAX_SAMPLES: usize = 8;
/// Pre-wedge history: each watched process's cheap samples cover the threshold plus this much.
pub const HISTORY_BEYOND_THRESHOLD: Duration = Duration::from_secs(30);
/// Pre-wedge history bounds: samples per process, threads per sample (5 bytes each: ≤ 1.2 MiB per 1,000
/// threads), and threads written into an incident.
pub const HISTORY_MAX_SAMPLES: usize = 240;
pub const HISTORY_MAX_THREADS: usize = 4096;
pub const HISTORY_THREADS_WRITTEN: usize = 64;
/// Most D-state tasks listed in the host census.
pub const MAX_CENSUS: usize = 256;
/// Agent: at most one new incident per process in this window.
pub const RATE_LIMIT: Duration = Duration::from_secs(600);
/// Agent: at most one on-demand (SIGUSR1) incident per process in this window.
pub const ON_DEMAND_RATE_LIMIT: Duration = Duration::from_secs(60);
/// Agent: shortest time between two reads of one process's fd links for `--gpu`.
pub const GPU_RESCAN: Duration = Duration::from_secs(5);
/// Agent: most processes watched at once.
pub const MAX_TARGETS: usize = 4096;
/// Agent metrics endpoint: most connections served at once; more are closed at once (a flood of
/// clients costs a socket each, never a thread each).
pub const METRICS_MAX_CONNECTIONS: usize = 64;
/// Agent metrics endpoint: the whole request head must arrive within this (a slow client is dropped).
pub const METRICS_REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// Agent metrics endpoint: the largest request head read (a scrape's is a few hundred bytes).
pub const METRICS_MAX_REQUEST_BYTES: usize = 8 * 1024;
/// Agent metrics endpoint: `/healthz` fails once the loop has not published for this long (or 10
/// intervals, if longer): a watch loop stuck that long gets its pod restarted.
pub const METRICS_STALE_AFTER: Duration = Duration::from_secs(60);
/// Agent `--textfile-dir`: the file node_exporter's textfile collector reads.
pub const TEXTFILE_NAME: &str = "wedge_capture.prom";
/// Agent `--textfile-dir`: rewritten at most this often unless a gauge an alert reads changed.
pub const TEXTFILE_EVERY: Duration = Duration::from_secs(10);
/// Where the kubelet keeps one directory per pod, `<namespace>_<name>_<uid>` (pod names of incidents).
pub const PODS_LOG_DIR: &str = "/var/log/pods";
/// `npd-check`: an open episode whose incident was last written longer ago than this is stale (its
/// agent died; an open episode is rewritten every `resample_every`), so the node is not marked for it.
pub const NPD_MAX_AGE: Duration = Duration::from_secs(3600);
/// `selftest`: sampling interval of its (deliberately fast) watch.
pub const SELFTEST_INTERVAL: Duration = Duration::from_millis(250);
/// `selftest`: wedge threshold of its watch.
pub const SELFTEST_THRESHOLD: Duration = Duration::from_secs(2);
/// Where incidents go unless `--out` (or the config's `out`) says otherwise.
pub const INCIDENT_DIR: &str = reports::store::DEFAULT_DIR;
/// Directory inside `--out` where `run` and `selftest` put their per-run ring directories. A dot name:
/// the incident store skips it (not an incident, never bundled, never removed by retention).
pub const RINGS_SUBDIR: &str = ".rings";

/// What the watch loop and the capture path need, resolved from flags, a config file or fixed values.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WatchSettings {
    /// The incident directory.
    pub out: PathBuf,
    /// Directories holding breadcrumb rings (`*.ring`).
    pub ring_dirs: Vec<PathBuf>,
    #[serde(serialize_with = "seconds")]
    pub interval: Duration,
    #[serde(serialize_with = "seconds")]
    pub threshold: Duration,
    pub samples: u32,
    #[serde(serialize_with = "seconds")]
    pub probe_timeout: Duration,
    #[serde(serialize_with = "seconds")]
    pub resample_every: Duration,
    /// Run `nvidia-smi -q` as a probe when it is installed.
    pub nvidia_smi: bool,
    /// `run --kill-on-wedge` only; the agent never kills.
    #[serde(skip)]
    pub kill_on_wedge: bool,
    /// Extra files read as probes (the hidden test stand-in for a driver file that hangs).
    #[serde(skip)]
    pub extra_probe: Vec<PathBuf>,
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings {
            out: PathBuf::from(INCIDENT_DIR),
            ring_dirs: Vec::new(),
            interval: INTERVAL,
            threshold: THRESHOLD,
            samples: SAMPLES,
            probe_timeout: PROBE_TIMEOUT,
            resample_every: RESAMPLE_EVERY,
            nvidia_smi: true,
            kill_on_wedge: false,
            extra_probe: Vec::new(),
        }
    }
}

impl WatchSettings {
    /// Refuse what cannot work, naming the setting (the caller adds `--` for a flag).
    pub fn validate(&self) -> Result<(), String> {
        if self.interval.is_zero() {
            return Err("interval must be more than 0".into());
        }
        if self.samples == 0 {
            return Err("samples must be at least 1".into());
        }
        if self.out.as_os_str().is_empty() {
            return Err(
                "out: empty path (give the incident directory, or leave it out for the default)"
                    .into(),
            );
        }
        if self.ring_dirs.iter().any(|d| d.as_os_str().is_empty()) {
            return Err("ring_dir: empty path".into());
        }
        if self.extra_probe.iter().any(|p| p.as_os_str().is_empty()) {
            return Err("extra_probe: empty path".into());
        }
        Ok(())
    }

    /// The watch loop's part.
    pub fn watch_config(&self) -> WatchConfig {
        WatchConfig {
            interval: self.interval,
            tracker: TrackerConfig {
                threshold: self.threshold,
                samples: self.samples,
            },
        }
    }

    /// The capture path's part.
    pub fn capture_settings(&self, proc_root: ProcRoot) -> CaptureSettings {
        let mut capture = CaptureSettings::new(proc_root);
        capture.ring_dirs = self.ring_dirs.clone();
        capture.probe_timeout = self.probe_timeout;
        capture.nvidia_smi = self.nvidia_smi;
        capture.resample_every = self.resample_every;
        capture.kill_on_wedge = self.kill_on_wedge;
        capture.extra_probe_files = self.extra_probe.clone();
        capture
    }
}

/// `--flag` → its default, as `--help` shows it, for the flags of `run` and `agent` whose default is
/// one of the constants above.
pub fn flag_defaults() -> Vec<(&'static str, String)> {
    vec![
        ("interval", format_duration(INTERVAL)),
        ("threshold", format_duration(THRESHOLD)),
        ("samples", SAMPLES.to_string()),
        ("probe-timeout", format_duration(PROBE_TIMEOUT)),
        ("rate-limit", format_duration(RATE_LIMIT)),
        (
            "on-demand-rate-limit",
            format_duration(ON_DEMAND_RATE_LIMIT),
        ),
        ("gpu-rescan", format_duration(GPU_RESCAN)),
        ("max-targets", MAX_TARGETS.to_string()),
        ("out", INCIDENT_DIR.to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_settings_build_the_default_loop_and_capture() {
        let settings = WatchSettings::default();
        settings.validate().unwrap();
        let watch = settings.watch_config();
        let default = WatchConfig::default();
        assert_eq!(watch.interval, default.interval);
        assert_eq!(watch.tracker, default.tracker);
        let built = settings.capture_settings(ProcRoot::default());
        let plain = CaptureSettings::new(ProcRoot::default());
        assert_eq!(built.probe_timeout, plain.probe_timeout);
        assert_eq!(built.resample_every, plain.resample_every);
        assert_eq!(built.nvidia_smi, plain.nvidia_smi);
        assert_eq!(built.kill_on_wedge, plain.kill_on_wedge);
    }

    #[test]
    fn settings_that_cannot_work_are_refused_by_name() {
        for (change, needle) in [
            (
                (|s: &mut WatchSettings| s.interval = Duration::ZERO) as fn(&mut WatchSettings),
                "interval",
            ),
            (|s| s.samples = 0, "samples"),
            (|s| s.out = PathBuf::new(), "out: empty path"),
            (
                |s| s.ring_dirs = vec![PathBuf::new()],
                "ring_dir: empty path",
            ),
            (|s| s.extra_probe = vec![PathBuf::new()], "extra_probe"),
        ] {
            let mut settings = WatchSettings::default();
            change(&mut settings);
            let err = settings.validate().unwrap_err();
            assert!(err.contains(needle), "{err}");
        }
    }

    #[test]
    fn the_help_defaults_are_the_constants() {
        let defaults: std::collections::HashMap<_, _> = flag_defaults().into_iter().collect();
        assert_eq!(defaults["threshold"], "30s");
        assert_eq!(defaults["interval"], "1s");
        assert_eq!(
            crate::duration::parse_duration(&defaults["rate-limit"]).unwrap(),
            RATE_LIMIT
        );
    }
}
