//! The watch flags `run` and `agent` share, defined once (ripgrep's model: one definition per flag,
//! resolved into [`crate::settings::WatchSettings`]); their defaults are appended to `--help` from
//! [`crate::settings::flag_defaults`].

use std::path::PathBuf;
use std::time::Duration;

use crate::duration::parse_duration;

#[derive(Debug, Clone, Default, clap::Args)]
pub struct WatchFlags {
    /// Incident directory (everything wedge-capture writes goes under it).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// How often every watched thread is sampled (e.g. 1s, 250ms, 0.5).
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub interval: Option<Duration>,
    /// How long a thread must sit in D without progress to count as wedged.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub threshold: Option<Duration>,
    /// Unchanged samples needed on top of --threshold (the no-progress proof).
    #[arg(long, value_name = "K")]
    pub samples: Option<u32>,
    /// Deadline of the risky reads (cmdline, NVIDIA driver files, nvidia-smi), done in sacrificial children.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub probe_timeout: Option<Duration>,
    /// Do not run `nvidia-smi -q` as a probe.
    #[arg(long)]
    pub no_nvidia_smi: bool,
    /// Test hook: read this file as an extra risky probe of every capture (a stand-in for a driver file
    /// that hangs).
    #[arg(long, hide = true, value_name = "FILE")]
    pub extra_probe: Vec<PathBuf>,
}
