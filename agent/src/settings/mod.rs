//! The settings layer, ripgrep's model: every setting defined once, read from flags and the config file
//! into one optional-field struct, merged once, resolved once.
//!
//! - The definitions below ([`WatchOptions`]: shared by `run` and `agent`; [`AgentOptions`]: the agent's
//!   own) give each setting its flag, config key, type, default, help and reload behaviour ([`Reload`]) in
//!   one place ([`define::define_settings`] makes the rest, the reload's lists included). Adding one:
//!   docs/settings.md.
//! - Sources, lowest first: the defaults ([`crate::defaults`]) < the config file (`agent --config`) <
//!   the flags. `run` has no config file; `selftest` uses fixed values over the defaults.
//! - Resolved: [`WatchSettings`] is what `run` and the agent share; the watch loop builds its own types
//!   from it (`WatchConfig`, `CaptureSettings`, which carries it whole, so a new shared setting reaches the
//!   capture path without a second field); [`Settings`] is the agent's (watch + agent-only), printed by
//!   `agent --check-config` as a config file.
//! - [`values`]: how values are written (durations, path lists, addresses) and shown in `--help`.
//!
//! A low layer: it reaches down to `defaults` and `duration` only; `watch`, `daemon` and `cmd` reach down
//! to it.

pub(crate) mod define;
pub mod values;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use regex::Regex;

use crate::defaults;
use crate::duration::parse_duration;
use define::define_settings;
pub use define::{Definition, Reload};
pub use values::LogFormat;

define_settings! {
    /// The watch settings `run` and `agent` share (flattened into both commands' flags).
    pub struct WatchOptions => WatchSettings {
        /// Incident store (everything wedge-capture writes goes under it; created 0700 when missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf = PathBuf::from(defaults::INCIDENT_DIR) => Restart,
        /// How often every watched thread is sampled (e.g. 1s, 250ms, 0.5).
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        #[serde(with = "values::duration")]
        interval: Duration = defaults::INTERVAL => Live,
        /// How long a thread must sit in D without progress to count as wedged.
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        #[serde(with = "values::duration")]
        threshold: Duration = defaults::THRESHOLD => Live,
        /// Unchanged samples needed on top of --threshold (the no-progress proof).
        #[arg(long, value_name = "K")]
        samples: u32 = defaults::SAMPLES => Live,
        /// Deadline of the risky reads (cmdline, NVIDIA driver files, nvidia-smi), done in sacrificial children.
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        #[serde(with = "values::duration")]
        probe_timeout: Duration = defaults::PROBE_TIMEOUT => Restart,
        /// While an episode is open, a new thread snapshot is added this often (config file only; `run`
        /// re-samples every --threshold, at least 10 s apart).
        #[arg(skip)]
        #[serde(with = "values::duration")]
        resample_every: Duration = defaults::RESAMPLE_EVERY => Restart,
        /// Do not run `nvidia-smi -q` as a probe (config: "nvidia_smi": false).
        #[arg(long = "no-nvidia-smi", num_args = 0, default_missing_value = "false")]
        nvidia_smi: bool = true => Restart,
        /// py-spy, to read a CPython target's Python stacks (`py-spy dump --nonblocking`, in a sacrificial child
        /// under --probe-timeout): a bare name is looked up on PATH; install with `pip install py-spy`.
        #[arg(long = "py-spy", value_name = "PATH")]
        py_spy: PathBuf = PathBuf::from(defaults::PY_SPY) => Restart,
        /// Most incidents opened in any hour, all processes together (0: no cap): when more wedges come, each is
        /// logged and not captured, so that a host where everything wedges at once does not spend its disk
        /// and CPU on the hundredth copy of the same evidence.
        #[arg(long, value_name = "N")]
        max_incidents_per_hour: u32 = 0 => Restart,
        /// The quiet-process shortcut (taskstats: a process whose summed counters did not move since the last
        /// scan has its sleeping threads skipped); --no-taskstats reads every thread every scan (benchmarks,
        /// doubting users; WEDGE_CAPTURE_TASKSTATS=off in the environment does the same).
        #[arg(long = "no-taskstats", num_args = 0, default_missing_value = "false")]
        taskstats: bool = !env_says_off(ENV_TASKSTATS) => Restart,
        /// The busy-process shortcut (a BPF task iterator: a sleeper that has not run since the last scan is
        /// not read); --no-task-iter reads every sleeper's schedstat every scan (benchmarks, doubting users;
        /// WEDGE_CAPTURE_TASK_ITER=off in the environment does the same).
        #[arg(long = "no-task-iter", num_args = 0, default_missing_value = "false")]
        task_iter: bool = !env_says_off(ENV_TASK_ITER) => Restart,
        /// Test hook: the wait-graph stage's BPF program refuses the blocker field, as on a kernel without it
        /// (WEDGE_CAPTURE_TEST_REFUSE_BLOCKER_FIELD=1 in the environment does the same).
        #[arg(long, hide = true, num_args = 0, default_missing_value = "true")]
        refuse_blocker_field: bool = env_says_on(capture::blockers::REFUSE_ENV) => Restart,
        /// Test hook: read this file as an extra risky probe of every capture (a stand-in for a driver
        /// file that hangs).
        #[arg(long, hide = true, value_name = "FILE")]
        extra_probe: Vec<PathBuf> = Vec::new() => Restart,
    }
}

define_settings! {
    /// The settings only the agent has: what to watch, rate limits, metrics, logging.
    pub struct AgentOptions => AgentSettings {
        /// Watch processes whose comm matches REGEX (repeatable; unanchored, like pgrep: a pattern that matches
        /// the empty string, such as .* or ^, is refused, as it would watch every process on the host).
        #[arg(long = "match-comm", value_name = "REGEX")]
        match_comm: Vec<String> = Vec::new() => Live,
        /// Watch processes whose cgroup path contains SUBSTR (repeatable).
        #[arg(long = "match-cgroup", value_name = "SUBSTR")]
        match_cgroup: Vec<String> = Vec::new() => Live,
        /// Watch every process holding an open /dev/nvidia* fd.
        #[arg(long, num_args = 0, default_missing_value = "true")]
        gpu: bool = false => Live,
        /// Watch the writer of every breadcrumb ring (*.ring) created in DIR (repeatable; created if missing).
        #[arg(long = "ring-dir", value_name = "DIR")]
        #[serde(with = "values::paths")]
        ring_dir: Vec<PathBuf> = Vec::new() => Live,
        /// At most one new incident per process in this window.
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        #[serde(with = "values::duration")]
        rate_limit: Duration = defaults::RATE_LIMIT => Live,
        /// At most one on-demand (SIGUSR1) incident per process in this window; 0 turns it off.
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        #[serde(with = "values::duration")]
        on_demand_rate_limit: Duration = defaults::ON_DEMAND_RATE_LIMIT => Live,
        /// Shortest time between two reads of one process's fd links for --gpu.
        #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
        #[serde(with = "values::duration")]
        gpu_rescan: Duration = defaults::GPU_RESCAN => Live,
        /// Most processes watched at once (lowest pids first; a warning says when more match).
        #[arg(long, value_name = "N")]
        max_targets: usize = defaults::MAX_TARGETS => Live,
        /// Log line format on stderr [default: auto: journal under systemd, else plain].
        #[arg(long, value_enum, value_name = "FORMAT")]
        log_format: LogFormat = LogFormat::Auto => Live,
        /// Serve Prometheus metrics on ADDR (IP:PORT, e.g. 127.0.0.1:9464): GET /metrics and /healthz.
        #[arg(long, value_name = "ADDR")]
        #[serde(with = "values::socket_addr")]
        metrics_listen: SocketAddr => Restart,
        /// Write the metrics to DIR/wedge_capture.prom for node_exporter's textfile collector.
        #[arg(long, value_name = "DIR")]
        textfile_dir: PathBuf => Live,
        /// New processes found from the proc connector's fork/exec/exit events (the proc root listed every 16
        /// scans); --no-proc-events lists the proc root every scan (benchmarks, doubting users;
        /// WEDGE_CAPTURE_PROC_EVENTS=off in the environment does the same).
        #[arg(long = "no-proc-events", num_args = 0, default_missing_value = "false")]
        proc_events: bool = !env_says_off(ENV_PROC_EVENTS) => Restart,
        /// The kubelet's pod log directories (<namespace>_<name>_<uid>), to name a target's pod.
        #[arg(long, value_name = "DIR")]
        pods_log_dir: PathBuf = PathBuf::from(defaults::PODS_LOG_DIR) => Restart,
        /// The node's root as the agent sees it (/proc/1/root in a hostPID pod): the kubelet's and the container
        /// runtime's state under it (var/lib/kubelet/pods, run/containerd, run/containers/storage) confirm a
        /// target's pod; otherwise the pod is marked as claimed by the cgroup name only.
        #[arg(long, value_name = "DIR")]
        node_root: PathBuf = PathBuf::from(defaults::NODE_ROOT) => Restart,
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
        if self.py_spy.as_os_str().is_empty() {
            return Err(
                "py_spy: empty path (give py-spy's path, or leave it out to look it up on PATH)"
                    .into(),
            );
        }
        if self.extra_probe.iter().any(|p| p.as_os_str().is_empty()) {
            return Err("extra_probe: empty path".into());
        }
        Ok(())
    }
}

impl Default for WatchSettings {
    fn default() -> Self {
        WatchOptions::default().resolve()
    }
}

impl AgentSettings {
    fn validate(&self) -> Result<(), String> {
        for pattern in &self.match_comm {
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
        if self.match_cgroup.iter().any(|c| c.is_empty()) {
            return Err("match_cgroup: an empty substring would match every process".into());
        }
        if self.ring_dir.iter().any(|d| d.as_os_str().is_empty()) {
            return Err("ring_dir: empty path".into());
        }
        if self.match_comm.is_empty()
            && self.match_cgroup.is_empty()
            && !self.gpu
            && self.ring_dir.is_empty()
        {
            return Err(
                "nothing to watch: give match_comm, match_cgroup, gpu or ring_dir (--match-comm, --match-cgroup, --gpu, --ring-dir)"
                    .into(),
            );
        }
        if self
            .textfile_dir
            .as_ref()
            .is_some_and(|d| d.as_os_str().is_empty())
        {
            return Err("textfile_dir: empty path".into());
        }
        if self.max_targets == 0 {
            return Err("max_targets must be at least 1".into());
        }
        Ok(())
    }
}

/// Every setting of one source (the config file, or the flags), before defaults.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    pub watch: WatchOptions,
    pub agent: AgentOptions,
}

impl Options {
    /// `over`'s settings where it has them, ours elsewhere.
    pub fn overlaid(self, over: Options) -> Options {
        Options {
            watch: self.watch.overlaid(over.watch),
            agent: self.agent.overlaid(over.agent),
        }
    }

    /// A config file's text (JSON, one object of config keys). Pure. Unknown keys are errors (a typo
    /// must not silently watch nothing); a bad value names its key.
    pub fn from_config(text: &[u8]) -> Result<Options, String> {
        let value: serde_json::Value = serde_json::from_slice(text).map_err(|e| e.to_string())?;
        let serde_json::Value::Object(map) = &value else {
            return Err("expected a JSON object of settings".into());
        };
        if let Some(key) = map
            .keys()
            .find(|k| !config_keys().any(|known| known == k.as_str()))
        {
            return Err(format!(
                "unknown field `{key}`, expected one of {}",
                config_keys()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Ok(Options {
            watch: from_value(&value)?,
            agent: from_value(&value)?,
        })
    }
}

fn config_keys() -> impl Iterator<Item = &'static str> {
    WatchOptions::KEYS.iter().chain(AgentOptions::KEYS).copied()
}

fn from_value<T: serde::de::DeserializeOwned>(value: &serde_json::Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        format!("{path}: {}", e.into_inner())
    })
}

/// The agent's effective settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub watch: WatchSettings,
    pub agent: AgentSettings,
}

impl Settings {
    /// Defaults under `options`, validated.
    pub fn resolve(options: Options) -> Result<Settings, String> {
        let settings = Settings {
            watch: options.watch.resolve(),
            agent: options.agent.resolve(),
        };
        settings.agent.validate()?;
        settings.watch.validate()?;
        Ok(settings)
    }

    /// Read the config file `file` (if any), put `flags` on top, resolve.
    pub fn load(file: Option<&Path>, flags: &Options) -> Result<Settings, String> {
        let from_file = match file {
            Some(path) => Options::from_config(&read_config(path)?)
                .map_err(|e| format!("{}: {e}", path.display()))?,
            None => Options::default(),
        };
        Settings::resolve(from_file.overlaid(flags.clone()))
    }

    /// The settings as a config file (`agent --check-config`): fed back as `--config`, it means the same.
    pub fn to_config(&self) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        for part in [
            serde_json::to_value(WatchOptions::from(&self.watch)),
            serde_json::to_value(AgentOptions::from(&self.agent)),
        ] {
            if let Ok(serde_json::Value::Object(map)) = part {
                out.extend(map);
            }
        }
        serde_json::Value::Object(out)
    }

    /// Settings a reload cannot change (declared `=> Restart` in their definitions) that differ in `new`:
    /// their config keys.
    pub fn needs_restart(&self, new: &Settings) -> Vec<&'static str> {
        let mut keys = self.watch.restart_changes(&new.watch);
        keys.extend(self.agent.restart_changes(&new.agent));
        keys
    }

    /// `new`, keeping what a reload cannot change (see [`Settings::needs_restart`]) as it is now.
    pub fn reloaded(&self, new: Settings) -> Settings {
        Settings {
            watch: self.watch.reloaded(new.watch),
            agent: self.agent.reloaded(new.agent),
        }
    }

    /// One line for the log.
    pub fn summary(&self) -> String {
        let agent = &self.agent;
        let mut parts = Vec::new();
        for p in &agent.match_comm {
            parts.push(format!("comm /{p}/"));
        }
        for c in &agent.match_cgroup {
            parts.push(format!("cgroup *{c}*"));
        }
        if agent.gpu {
            parts.push("/dev/nvidia* holders".to_string());
        }
        for d in &agent.ring_dir {
            parts.push(format!("ring writers in {}", d.display()));
        }
        format!(
            "watching {}; interval {:?}, threshold {:?}, K={}, rate limit {:?}, on-demand rate limit {:?}; \
             incidents under {}",
            parts.join(", "),
            self.watch.interval,
            self.watch.threshold,
            self.watch.samples,
            agent.rate_limit,
            agent.on_demand_rate_limit,
            self.watch.out.display()
        )
    }
}

/// `WEDGE_CAPTURE_TASKSTATS=off`: `taskstats`'s default is off (the benchmarks set it for the agent they run).
pub const ENV_TASKSTATS: &str = "WEDGE_CAPTURE_TASKSTATS";
/// `WEDGE_CAPTURE_TASK_ITER=off`: `task_iter`'s default is off (benchmarks; the busy-scan integration test).
pub const ENV_TASK_ITER: &str = "WEDGE_CAPTURE_TASK_ITER";
/// `WEDGE_CAPTURE_PROC_EVENTS=off`: `proc_events`'s default is off (benchmarks).
pub const ENV_PROC_EVENTS: &str = "WEDGE_CAPTURE_PROC_EVENTS";

/// The environment turns a switch's default off (`VAR=off`): the switches the benchmarks and tests set for
/// a child they start, which takes no flag from them.
pub fn env_says_off(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| v == "off")
}

/// The environment turns a test hook's default on (`VAR=1` or `VAR=true`).
pub fn env_says_on(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| v == "1" || v == "true")
}

/// Largest config file read (a config is a few hundred bytes).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The config file's bytes. The admin names it, so a symlink to it is followed (configuration management
/// and Kubernetes ConfigMaps install configs as symlinks), but what it resolves to must be a regular file
/// of at most [`MAX_CONFIG_BYTES`], opened without blocking: a FIFO put there must not hang a SIGHUP.
/// Errors say what is wrong with the file, never what it holds.
pub(crate) fn read_config(path: &Path) -> Result<Vec<u8>, String> {
    let real = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    capture::untrusted::read(&real, capture::untrusted::Limits::max_len(MAX_CONFIG_BYTES)).map_err(
        |e| match e {
            capture::Error::Untrusted { why, .. } => format!("{}: {why}", path.display()),
            other => format!("{}: {other}", path.display()),
        },
    )
}

/// `--flag` → its default, as `--help` shows it, for every setting with a default worth showing.
pub fn flag_defaults() -> Vec<(String, String)> {
    WatchOptions::help_defaults()
        .into_iter()
        .chain(AgentOptions::help_defaults())
        .map(|(key, text)| (key.replace('_', "-"), text))
        .collect()
}

#[cfg(test)]
mod tests;
