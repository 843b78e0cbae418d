//! `wedge-capture agent`: the host daemon (see [`crate::daemon`] and docs/agent.md).

use std::path::PathBuf;
use std::time::Duration;

use crate::cmd::watch_flags::WatchFlags;
use crate::daemon::config::{self, LogFormat, Overrides};
use crate::duration::parse_duration;
use crate::exit::{ExitCode, Failure};

/// Watch the host's GPU workers and capture every wedge (the systemd service).
///
/// Targets are found by any of: --match-comm REGEX (process comm, unanchored, like pgrep), --match-cgroup
/// SUBSTR (a podman `libpod-<id>` scope, a Kubernetes pod uid…), --gpu (every process holding an open
/// /dev/nvidia* fd) and --ring-dir DIR (the writer of every breadcrumb ring created there). Processes that
/// start or exit are picked up without a restart. Each target's threads are sampled every --interval; a
/// thread in D without progress for --threshold is wedged and an incident is written under --out (at most
/// one new incident per process per --rate-limit).
///
/// Settings come from --config FILE (JSON, see docs/agent.md); flags given here win over the file.
/// Signals: SIGTERM/SIGINT stop within 2 s, ahead of any queued work (probes in progress are cut short
/// and the incident being written is finished); SIGHUP re-reads the config (a bad one keeps the old);
/// SIGUSR1 writes an on-demand incident for every current target (at most one per process per
/// --on-demand-rate-limit; signals arriving during a capture are coalesced into one more run). Under
/// systemd (Type=notify) the agent sends READY, RELOADING, STOPPING and WATCHDOG notifications.
///
/// Exit status: 0 after SIGTERM/SIGINT; 2 bad configuration; 1 other errors (output not writable…).
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  wedge-capture agent --match-comm '^python' --gpu\n  \
    wedge-capture agent --match-cgroup libpod- --ring-dir /var/lib/wedge-capture/rings\n  \
    wedge-capture agent --config /etc/wedge-capture/agent.json --check-config\n  \
    systemctl reload wedge-capture    # SIGHUP: re-read the config\n  \
    systemctl kill -s USR1 wedge-capture    # capture every target now"
)]
pub struct Args {
    #[command(flatten)]
    pub watch: WatchFlags,
    /// JSON config file (re-read on SIGHUP).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Watch processes whose comm matches REGEX (repeatable).
    #[arg(long = "match-comm", value_name = "REGEX")]
    pub match_comm: Vec<String>,
    /// Watch processes whose cgroup path contains SUBSTR (repeatable).
    #[arg(long = "match-cgroup", value_name = "SUBSTR")]
    pub match_cgroup: Vec<String>,
    /// Watch every process holding an open /dev/nvidia* fd.
    #[arg(long)]
    pub gpu: bool,
    /// Watch the writer of every breadcrumb ring (*.ring) created in DIR (repeatable).
    #[arg(long = "ring-dir", value_name = "DIR")]
    pub ring_dir: Vec<PathBuf>,
    /// At most one new incident per process in this window.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub rate_limit: Option<Duration>,
    /// At most one on-demand (SIGUSR1) incident per process in this window; 0 turns it off.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub on_demand_rate_limit: Option<Duration>,
    /// Shortest time between two reads of one process's fd links for --gpu.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub gpu_rescan: Option<Duration>,
    /// Most processes watched at once.
    #[arg(long, value_name = "N")]
    pub max_targets: Option<usize>,
    /// Log line format on stderr [default: auto: journal under systemd, else plain].
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Serve Prometheus metrics on ADDR (IP:PORT, e.g. 127.0.0.1:9464): GET /metrics and /healthz.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Write the metrics to DIR/wedge_capture.prom for node_exporter's textfile collector.
    #[arg(long, value_name = "DIR")]
    pub textfile_dir: Option<PathBuf>,
    /// The kubelet's pod log directories (<namespace>_<name>_<uid>), to name a target's pod.
    #[arg(long, value_name = "DIR")]
    pub pods_log_dir: Option<PathBuf>,
    /// Print the effective settings as JSON and exit (0 when valid, 2 when not).
    #[arg(long)]
    pub check_config: bool,
    /// Benchmark: time N scans of the target sources against the naive way, print JSON, exit.
    #[arg(long, hide = true, value_name = "N")]
    pub bench_scans: Option<u32>,
}

impl Args {
    fn overrides(&self) -> Overrides {
        Overrides {
            out: self.watch.out.clone(),
            match_comm: self.match_comm.clone(),
            match_cgroup: self.match_cgroup.clone(),
            gpu: self.gpu,
            ring_dir: self.ring_dir.clone(),
            interval: self.watch.interval,
            threshold: self.watch.threshold,
            samples: self.watch.samples,
            rate_limit: self.rate_limit,
            on_demand_rate_limit: self.on_demand_rate_limit,
            gpu_rescan: self.gpu_rescan,
            probe_timeout: self.watch.probe_timeout,
            no_nvidia_smi: self.watch.no_nvidia_smi,
            max_targets: self.max_targets,
            log_format: self.log_format,
            metrics_listen: self.metrics_listen,
            textfile_dir: self.textfile_dir.clone(),
            pods_log_dir: self.pods_log_dir.clone(),
            extra_probe: self.watch.extra_probe.clone(),
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let overrides = args.overrides();
    if args.check_config || args.bench_scans.is_some() {
        let settings = config::resolve(args.config.as_deref(), &overrides)
            .map_err(|e| Failure::new(ExitCode::USAGE, format!("bad configuration: {e}")))?;
        match args.bench_scans {
            Some(scans) => crate::daemon::bench::run(&settings, scans),
            None => println!("{}", serde_json::to_string_pretty(&settings)?),
        }
        return Ok(ExitCode::OK);
    }
    crate::daemon::run(crate::daemon::Origin {
        config: args.config,
        overrides,
    })
}
