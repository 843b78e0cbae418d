//! `wedge-capture agent`: the host daemon (see [`crate::daemon`] and docs/agent.md).

use std::path::PathBuf;

use crate::exit::{ExitCode, Failure};
use crate::settings::{AgentOptions, Options, Settings, WatchOptions};

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
/// With --log-format json every line, a start-up error's included, is one JSON object.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  wedge-capture agent --match-comm '^python' --gpu
  wedge-capture agent --match-cgroup libpod- --ring-dir /var/lib/wedge-capture/rings
  wedge-capture agent --config /etc/wedge-capture/agent.json --check-config
  systemctl reload wedge-capture    # SIGHUP: re-read the config
  systemctl kill -s USR1 wedge-capture    # capture every target now")]
pub struct Args {
    #[command(flatten)]
    pub watch: WatchOptions,
    #[command(flatten)]
    pub agent: AgentOptions,
    /// JSON config file (re-read on SIGHUP); its keys are the flags' names with underscores.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the effective settings as a config file (JSON) and exit (0 when valid, 2 when not).
    #[arg(long)]
    pub check_config: bool,
    /// Benchmark: time N scans of the target sources against the naive way, print JSON, exit.
    #[arg(long, hide = true, value_name = "N")]
    pub bench_scans: Option<u32>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let flags = Options {
        watch: args.watch,
        agent: args.agent,
    };
    if args.check_config || args.bench_scans.is_some() {
        let settings = Settings::load(args.config.as_deref(), &flags)
            .map_err(|e| Failure::new(ExitCode::USAGE, format!("bad configuration: {e}")))?;
        match args.bench_scans {
            Some(scans) => crate::bench::sources::run(&settings, scans),
            None => println!("{}", serde_json::to_string_pretty(&settings.to_config())?),
        }
        return Ok(ExitCode::OK);
    }
    crate::daemon::run(crate::daemon::Origin {
        config: args.config,
        flags,
    })
}
