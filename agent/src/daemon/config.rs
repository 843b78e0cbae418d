//! The agent's settings: a JSON config file (documented in docs/agent.md, example in
//! systemd/agent.example.json) with command-line flags on top. Parsing is pure ([`parse_config`]); the
//! file is read again on SIGHUP, and a config that does not parse or validate keeps the old one.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::daemon::sources::{Selection, SourceSettings};
use crate::duration::parse_duration;
use crate::settings::{self, WatchSettings};

/// Largest config file read (a config is a few hundred bytes).
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// How log lines look on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// `journal` when stderr is connected to the journal (JOURNAL_STREAM is set), else `plain`.
    #[default]
    Auto,
    /// `wedge-capture agent: warning: …`
    Plain,
    /// `<4>warning: …`: the syslog priority prefix journald understands.
    Journal,
    /// One JSON object per line: ts, level, msg and event fields.
    Json,
}

/// A duration in the config file: seconds as a number, or text such as "30s", "250ms", "10m".
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum DurationValue {
    Seconds(f64),
    Text(String),
}

impl DurationValue {
    fn get(&self, field: &str) -> Result<Duration, String> {
        match self {
            DurationValue::Seconds(s) => parse_duration(&s.to_string()),
            DurationValue::Text(t) => parse_duration(t),
        }
        .map_err(|e| format!("{field}: {e}"))
    }
}

/// One path or a list of paths.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(PathBuf),
    Many(Vec<PathBuf>),
}

/// The config file, as written. Unknown keys are errors (a typo must not silently watch nothing).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    out: Option<PathBuf>,
    #[serde(default)]
    match_comm: Vec<String>,
    #[serde(default)]
    match_cgroup: Vec<String>,
    gpu: Option<bool>,
    ring_dir: Option<OneOrMany>,
    interval: Option<DurationValue>,
    threshold: Option<DurationValue>,
    samples: Option<u32>,
    rate_limit: Option<DurationValue>,
    on_demand_rate_limit: Option<DurationValue>,
    gpu_rescan: Option<DurationValue>,
    probe_timeout: Option<DurationValue>,
    resample_every: Option<DurationValue>,
    nvidia_smi: Option<bool>,
    max_targets: Option<usize>,
    log_format: Option<LogFormat>,
    metrics_listen: Option<String>,
    textfile_dir: Option<PathBuf>,
    pods_log_dir: Option<PathBuf>,
}

/// Settings given on the command line; each one present wins over the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub out: Option<PathBuf>,
    pub match_comm: Vec<String>,
    pub match_cgroup: Vec<String>,
    pub gpu: bool,
    pub ring_dir: Vec<PathBuf>,
    pub interval: Option<Duration>,
    pub threshold: Option<Duration>,
    pub samples: Option<u32>,
    pub rate_limit: Option<Duration>,
    pub on_demand_rate_limit: Option<Duration>,
    pub gpu_rescan: Option<Duration>,
    pub probe_timeout: Option<Duration>,
    pub no_nvidia_smi: bool,
    /// Extra files read as probes of a wedge capture (a test stand-in for a driver file that hangs).
    pub extra_probe: Vec<PathBuf>,
    pub max_targets: Option<usize>,
    pub log_format: Option<LogFormat>,
    pub metrics_listen: Option<SocketAddr>,
    pub textfile_dir: Option<PathBuf>,
    pub pods_log_dir: Option<PathBuf>,
}

/// The effective settings: the watch settings every front end has, and what only the agent has.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Settings {
    /// Incident directory, ring directories, interval, threshold, samples, probes, re-sampling.
    #[serde(flatten)]
    pub watch: WatchSettings,
    pub match_comm: Vec<String>,
    pub match_cgroup: Vec<String>,
    pub gpu: bool,
    /// At most one new incident per process in this window.
    #[serde(serialize_with = "seconds")]
    pub rate_limit: Duration,
    /// At most one on-demand (SIGUSR1) incident per process in this window (0: no limit).
    #[serde(serialize_with = "seconds")]
    pub on_demand_rate_limit: Duration,
    #[serde(serialize_with = "seconds")]
    pub gpu_rescan: Duration,
    pub max_targets: usize,
    pub log_format: LogFormat,
    /// Serve `/metrics` and `/healthz` here (off when None).
    pub metrics_listen: Option<SocketAddr>,
    /// Write the metrics to `<dir>/wedge_capture.prom` for node_exporter (off when None).
    pub textfile_dir: Option<PathBuf>,
    /// The kubelet's pod log directories, to name the pod of a containerised target.
    pub pods_log_dir: PathBuf,
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Settings {
    /// The target selection (regexes compiled; validated before, so this cannot fail).
    pub fn selection(&self) -> Selection {
        Selection {
            comm: self
                .match_comm
                .iter()
                .filter_map(|p| Regex::new(p).ok())
                .collect(),
            cgroup: self.match_cgroup.clone(),
            gpu: self.gpu,
            ring_dirs: self.watch.ring_dirs.clone(),
        }
    }

    pub fn source_settings(&self) -> SourceSettings {
        SourceSettings {
            gpu_rescan: self.gpu_rescan,
            max_targets: self.max_targets,
        }
    }

    /// Settings a reload cannot change (they shape the capture path, built once): their names.
    pub fn needs_restart(&self, new_settings: &Settings) -> Vec<&'static str> {
        let (old, new) = (&self.watch, &new_settings.watch);
        let mut out = Vec::new();
        if old.out != new.out {
            out.push("out");
        }
        if old.probe_timeout != new.probe_timeout {
            out.push("probe_timeout");
        }
        if old.nvidia_smi != new.nvidia_smi {
            out.push("nvidia_smi");
        }
        if old.resample_every != new.resample_every {
            out.push("resample_every");
        }
        if old.extra_probe != new.extra_probe {
            out.push("extra_probe");
        }
        if self.metrics_listen != new_settings.metrics_listen {
            out.push("metrics_listen");
        }
        out
    }

    /// `new`, keeping what a reload cannot change (see [`Settings::needs_restart`]) as it is now.
    pub fn reloaded(&self, new: Settings) -> Settings {
        Settings {
            watch: WatchSettings {
                out: self.watch.out.clone(),
                probe_timeout: self.watch.probe_timeout,
                nvidia_smi: self.watch.nvidia_smi,
                resample_every: self.watch.resample_every,
                extra_probe: self.watch.extra_probe.clone(),
                ..new.watch
            },
            metrics_listen: self.metrics_listen,
            ..new
        }
    }

    /// One line for the log.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        for p in &self.match_comm {
            parts.push(format!("comm /{p}/"));
        }
        for c in &self.match_cgroup {
            parts.push(format!("cgroup *{c}*"));
        }
        if self.gpu {
            parts.push("/dev/nvidia* holders".to_string());
        }
        for d in &self.watch.ring_dirs {
            parts.push(format!("ring writers in {}", d.display()));
        }
        format!(
            "watching {}; interval {:?}, threshold {:?}, K={}, rate limit {:?}, on-demand rate limit {:?}; \
             incidents under {}",
            parts.join(", "),
            self.watch.interval,
            self.watch.threshold,
            self.watch.samples,
            self.rate_limit,
            self.on_demand_rate_limit,
            self.watch.out.display()
        )
    }
}

/// Parse a config file's text (JSON).
fn parse_config(text: &[u8]) -> Result<ConfigFile, String> {
    serde_json::from_slice(text).map_err(|e| e.to_string())
}

/// The config file's bytes. The admin names it, so a symlink to it is followed (configuration management
/// and Kubernetes ConfigMaps install configs as symlinks), but what it resolves to must be a regular file
/// of at most [`MAX_CONFIG_BYTES`], opened without blocking: a FIFO put there must not hang a SIGHUP.
/// Errors say what is wrong with the file, never what it holds.
fn read_config(path: &Path) -> Result<Vec<u8>, String> {
    let real = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    capture::untrusted::read(&real, capture::untrusted::Limits::max_len(MAX_CONFIG_BYTES)).map_err(
        |e| match e {
            capture::Error::Untrusted { why, .. } => format!("{}: {why}", path.display()),
            other => format!("{}: {other}", path.display()),
        },
    )
}

/// Read `file` (if any), apply `cli` on top, validate.
pub fn resolve(file: Option<&Path>, cli: &Overrides) -> Result<Settings, String> {
    let config = match file {
        Some(path) => {
            parse_config(&read_config(path)?).map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => ConfigFile::default(),
    };
    merge(config, cli)
}

fn merge(config: ConfigFile, cli: &Overrides) -> Result<Settings, String> {
    let duration = |value: &Option<DurationValue>, field: &str, default: Duration| {
        value
            .as_ref()
            .map(|v| v.get(field))
            .transpose()
            .map(|d| d.unwrap_or(default))
    };
    let file_ring_dirs = match config.ring_dir {
        None => Vec::new(),
        Some(OneOrMany::One(p)) => vec![p],
        Some(OneOrMany::Many(v)) => v,
    };
    let watch = WatchSettings {
        out: cli
            .out
            .clone()
            .or(config.out)
            .unwrap_or_else(|| PathBuf::from(settings::INCIDENT_DIR)),
        ring_dirs: pick(&cli.ring_dir, file_ring_dirs),
        interval: match cli.interval {
            Some(d) => d,
            None => duration(&config.interval, "interval", settings::INTERVAL)?,
        },
        threshold: match cli.threshold {
            Some(d) => d,
            None => duration(&config.threshold, "threshold", settings::THRESHOLD)?,
        },
        samples: cli.samples.or(config.samples).unwrap_or(settings::SAMPLES),
        probe_timeout: match cli.probe_timeout {
            Some(d) => d,
            None => duration(
                &config.probe_timeout,
                "probe_timeout",
                settings::PROBE_TIMEOUT,
            )?,
        },
        resample_every: duration(
            &config.resample_every,
            "resample_every",
            settings::RESAMPLE_EVERY,
        )?,
        nvidia_smi: !cli.no_nvidia_smi && config.nvidia_smi.unwrap_or(true),
        kill_on_wedge: false,
        extra_probe: cli.extra_probe.clone(),
    };
    let settings = Settings {
        watch,
        match_comm: pick(&cli.match_comm, config.match_comm),
        match_cgroup: pick(&cli.match_cgroup, config.match_cgroup),
        gpu: cli.gpu || config.gpu.unwrap_or(false),
        rate_limit: match cli.rate_limit {
            Some(d) => d,
            None => duration(&config.rate_limit, "rate_limit", settings::RATE_LIMIT)?,
        },
        on_demand_rate_limit: match cli.on_demand_rate_limit {
            Some(d) => d,
            None => duration(
                &config.on_demand_rate_limit,
                "on_demand_rate_limit",
                settings::ON_DEMAND_RATE_LIMIT,
            )?,
        },
        gpu_rescan: match cli.gpu_rescan {
            Some(d) => d,
            None => duration(&config.gpu_rescan, "gpu_rescan", settings::GPU_RESCAN)?,
        },
        max_targets: cli
            .max_targets
            .or(config.max_targets)
            .unwrap_or(settings::MAX_TARGETS),
        log_format: cli.log_format.or(config.log_format).unwrap_or_default(),
        metrics_listen: match cli.metrics_listen {
            Some(addr) => Some(addr),
            None => config
                .metrics_listen
                .as_deref()
                .map(|text| {
                    text.parse::<SocketAddr>().map_err(|e| {
                        format!("metrics_listen: {e} (give IP:PORT, e.g. 127.0.0.1:9464)")
                    })
                })
                .transpose()?,
        },
        textfile_dir: cli.textfile_dir.clone().or(config.textfile_dir),
        pods_log_dir: cli
            .pods_log_dir
            .clone()
            .or(config.pods_log_dir)
            .unwrap_or_else(|| PathBuf::from(settings::PODS_LOG_DIR)),
    };
    validate(&settings)?;
    Ok(settings)
}

fn pick<T: Clone>(cli: &[T], file: Vec<T>) -> Vec<T> {
    if cli.is_empty() {
        file
    } else {
        cli.to_vec()
    }
}

fn validate(s: &Settings) -> Result<(), String> {
    for pattern in &s.match_comm {
        let regex = Regex::new(pattern).map_err(|e| format!("match_comm /{pattern}/: {e}"))?;
        if pattern.is_empty() {
            return Err(
                "match_comm: an empty pattern would match every process; name the comm you mean"
                    .into(),
            );
        }
        if regex.is_match("") {
            // Unanchored matching: a pattern that matches "" matches inside every comm.
            return Err(format!(
                "match_comm /{pattern}/ matches the empty string, so it would watch every process on the \
                 host (like /.*/); give a pattern that needs at least one character of the comm, e.g. ^python"
            ));
        }
    }
    if s.match_cgroup.iter().any(|c| c.is_empty()) {
        return Err("match_cgroup: an empty substring would match every process".into());
    }
    if s.match_comm.is_empty()
        && s.match_cgroup.is_empty()
        && !s.gpu
        && s.watch.ring_dirs.is_empty()
    {
        return Err(
            "nothing to watch: give match_comm, match_cgroup, gpu or ring_dir (--match-comm, --match-cgroup, --gpu, --ring-dir)"
                .into(),
        );
    }
    if s.textfile_dir
        .as_ref()
        .is_some_and(|d| d.as_os_str().is_empty())
    {
        return Err("textfile_dir: empty path".into());
    }
    if s.max_targets == 0 {
        return Err("max_targets must be at least 1".into());
    }
    s.watch.validate()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_text(text: &str, cli: &Overrides) -> Result<Settings, String> {
        merge(parse_config(text.as_bytes())?, cli)
    }

    #[test]
    fn a_full_config_parses() {
        let s = from_text(
            r#"{"out": "/srv/inc", "match_comm": ["^python", "train"], "match_cgroup": ["libpod-"],
                "gpu": true, "ring_dir": "/run/rings", "interval": "500ms", "threshold": 20,
                "samples": 4, "rate_limit": "5m", "gpu_rescan": 2.5, "probe_timeout": "3s",
                "nvidia_smi": false, "max_targets": 100, "log_format": "json"}"#,
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(s.watch.out, PathBuf::from("/srv/inc"));
        assert_eq!(s.match_comm, vec!["^python", "train"]);
        assert_eq!(s.watch.ring_dirs, vec![PathBuf::from("/run/rings")]);
        assert_eq!(s.watch.interval, Duration::from_millis(500));
        assert_eq!(s.watch.threshold, Duration::from_secs(20));
        assert_eq!(s.rate_limit, Duration::from_secs(300));
        assert_eq!(s.gpu_rescan, Duration::from_millis(2500));
        assert!(!s.watch.nvidia_smi);
        assert_eq!(s.log_format, LogFormat::Json);
        assert_eq!(s.selection().comm.len(), 2);
    }

    #[test]
    fn the_example_config_is_valid() {
        let text = include_str!("../../../systemd/agent.example.json");
        let s = from_text(text, &Overrides::default()).unwrap();
        assert!(!s.selection().is_empty());
    }

    #[test]
    fn command_line_wins() {
        let cli = Overrides {
            match_comm: vec!["^worker$".into()],
            interval: Some(Duration::from_millis(250)),
            out: Some("/tmp/x".into()),
            no_nvidia_smi: true,
            ..Overrides::default()
        };
        let s = from_text(
            r#"{"match_comm": ["python"], "interval": 2, "gpu": true}"#,
            &cli,
        )
        .unwrap();
        assert_eq!(s.match_comm, vec!["^worker$"]);
        assert_eq!(s.watch.interval, Duration::from_millis(250));
        assert_eq!(s.watch.out, PathBuf::from("/tmp/x"));
        assert!(s.gpu && !s.watch.nvidia_smi);
        // Defaults.
        assert_eq!(s.watch.threshold, Duration::from_secs(30));
        assert_eq!(s.watch.samples, 3);
    }

    #[test]
    fn bad_configs_are_refused_with_a_reason() {
        let none = Overrides::default();
        for (text, needle) in [
            (r#"{"match_comm": ["("]}"#, "match_comm"),
            (r#"{"match_comm": ["x"], "intervall": 1}"#, "unknown field"),
            (r#"{}"#, "nothing to watch"),
            (r#"{"gpu": true, "interval": 0}"#, "interval"),
            (r#"{"gpu": true, "threshold": "soon"}"#, "threshold"),
            (r#"{"match_cgroup": [""]}"#, "empty substring"),
            (r#"{"gpu": "yes"}"#, "invalid type"),
            ("not json", "expected"),
            (r#"{"gpu": true, "samples": 0}"#, "samples"),
            (r#"{"gpu": true, "out": ""}"#, "out: empty path"),
            (r#"{"gpu": true, "ring_dir": ""}"#, "ring_dir: empty path"),
            (
                r#"{"gpu": true, "ring_dir": ["/run/rings", ""]}"#,
                "ring_dir: empty path",
            ),
            (
                r#"{"match_comm": [""]}"#,
                "empty pattern would match every process",
            ),
            (
                r#"{"match_comm": ["^python", ".*"]}"#,
                "matches the empty string",
            ),
            (r#"{"match_comm": ["x?"]}"#, "matches the empty string"),
            (r#"{"match_comm": ["^"]}"#, "matches the empty string"),
            (r#"{"match_comm": ["(|a)"]}"#, "matches the empty string"),
            (
                r#"{"gpu": true, "on_demand_rate_limit": "often"}"#,
                "on_demand_rate_limit",
            ),
        ] {
            let err = from_text(text, &none).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn empty_paths_on_the_command_line_are_refused_too() {
        let file = r#"{"gpu": true, "out": "/srv/inc"}"#;
        let cli = Overrides {
            out: Some(PathBuf::new()),
            ..Overrides::default()
        };
        assert!(from_text(file, &cli)
            .unwrap_err()
            .contains("out: empty path"));
        let cli = Overrides {
            ring_dir: vec![PathBuf::from("/run/rings"), PathBuf::new()],
            ..Overrides::default()
        };
        assert!(from_text(file, &cli)
            .unwrap_err()
            .contains("ring_dir: empty path"));
        let cli = Overrides {
            match_comm: vec!["a*".into()],
            ..Overrides::default()
        };
        assert!(from_text(file, &cli)
            .unwrap_err()
            .contains("matches the empty string"));
    }

    #[test]
    fn a_config_that_is_no_regular_file_or_too_large_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("agent.json");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // An ordinary open would block here forever (no writer).
        let err = resolve(Some(&fifo), &Overrides::default()).unwrap_err();
        assert!(err.contains("not a regular file"), "{err}");
        let big = dir.path().join("big.json");
        std::fs::write(&big, vec![b' '; MAX_CONFIG_BYTES as usize + 1]).unwrap();
        let err = resolve(Some(&big), &Overrides::default()).unwrap_err();
        assert!(err.contains("larger than"), "{err}");
        // A symlink to a good config (how ConfigMaps are mounted) is followed.
        let good = dir.path().join("real.json");
        std::fs::write(&good, r#"{"gpu": true}"#).unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        assert!(resolve(Some(&link), &Overrides::default()).unwrap().gpu);
        let err = resolve(
            Some(&dir.path().join("missing.json")),
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(err.contains("missing.json"), "{err}");
    }

    #[test]
    fn patterns_that_need_a_character_are_accepted() {
        for pattern in ["^python", "train", "^a*b$", "x+", "^(py|tr)", "[.]"] {
            let text = format!(r#"{{"match_comm": ["{pattern}"]}}"#);
            assert!(from_text(&text, &Overrides::default()).is_ok(), "{pattern}");
        }
    }

    #[test]
    fn on_demand_rate_limit_defaults_to_a_minute_and_can_be_set() {
        let s = from_text(r#"{"gpu": true}"#, &Overrides::default()).unwrap();
        assert_eq!(s.on_demand_rate_limit, Duration::from_secs(60));
        let s = from_text(
            r#"{"gpu": true, "on_demand_rate_limit": "5m"}"#,
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(s.on_demand_rate_limit, Duration::from_secs(300));
        let cli = Overrides {
            on_demand_rate_limit: Some(Duration::ZERO),
            ..Overrides::default()
        };
        let s = from_text(r#"{"gpu": true, "on_demand_rate_limit": 30}"#, &cli).unwrap();
        assert_eq!(s.on_demand_rate_limit, Duration::ZERO);
    }

    #[test]
    fn reload_reports_what_needs_a_restart() {
        let a = from_text(r#"{"gpu": true}"#, &Overrides::default()).unwrap();
        let b = from_text(
            r#"{"gpu": true, "out": "/elsewhere", "interval": 3}"#,
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(a.needs_restart(&b), vec!["out"]);
    }
}
