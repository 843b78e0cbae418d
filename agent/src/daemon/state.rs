//! The daemon's state, shared by the rooms that act on it: the loop ([`super::event_loop`]), reloads
//! ([`super::reload`]), on-demand runs ([`super::on_demand`]) and the log of events ([`super::events`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use capture::ProcRoot;

use super::log::{self, Logger};
use super::metrics;
use super::notify::Notifier;
use super::ratelimit::{OnDemandLimit, RateLimit};
use super::sources::SharedSource;
use super::xids;
use crate::settings::Settings;
use crate::watch::Watcher;

/// A SIGUSR1 burst is over when none came for this long; then it is summed up in one log line.
pub(super) const BURST_QUIET: Duration = Duration::from_secs(1);

/// Signals received and not acted on yet, coalesced: one reload for any number of SIGHUP, one on-demand
/// run for any number of SIGUSR1, and a stop that wins over both.
#[derive(Debug, Default)]
pub(super) struct Pending {
    pub(super) stop: Option<i32>,
    pub(super) reload: bool,
    /// SIGUSR1 received since the last on-demand run started.
    pub(super) capture: u64,
}

/// The SIGUSR1 signals of one burst (until [`BURST_QUIET`] passes without one), for its summary line.
#[derive(Debug)]
pub(super) struct Burst {
    pub(super) signals: u64,
    pub(super) runs: u64,
    pub(super) captured: u64,
    /// Targets left out of a run because they had an on-demand incident within the window.
    pub(super) limited: u64,
    pub(super) first: Instant,
    pub(super) last: Instant,
}

/// Where the settings come from (kept for reloads).
#[derive(Debug, Clone)]
pub struct Origin {
    pub config: Option<PathBuf>,
    /// The flags given (they win over the file).
    pub flags: crate::settings::Options,
}

/// The agent's state: settings, the watch loop, the signals not acted on yet, what the log and the
/// metrics last said.
pub(super) struct Daemon {
    pub(super) origin: Origin,
    pub(super) settings: Settings,
    pub(super) logger: Logger,
    pub(super) proc_root: ProcRoot,
    pub(super) source: SharedSource,
    pub(super) watcher: Watcher,
    pub(super) notifier: Notifier,
    pub(super) rate: RateLimit,
    pub(super) on_demand: OnDemandLimit,
    /// Set from the SIGTERM/SIGINT handler itself; the probe runner polls it.
    pub(super) stop_requested: Arc<AtomicBool>,
    pub(super) pending: Pending,
    pub(super) burst: Option<Burst>,
    pub(super) last_scan: Instant,
    /// pid → why, as of the last scan (to log targets that come and go).
    pub(super) watched: HashMap<i32, String>,
    pub(super) healthy: bool,
    pub(super) incidents_written: u64,
    /// Episodes open after the last scan.
    pub(super) open_count: usize,
    /// The last STATUS= sent to the service manager.
    pub(super) last_status: String,
    pub(super) metrics: metrics::Metrics,
    /// Log lines a container can cause, capped per cause and per minute (see [`log::Limiter`]).
    pub(super) limiter: log::Limiter,
    /// SIGHUPs coalesced into at most one reload per interval, summed up in one line per storm.
    pub(super) reloads: Reloads,
    /// The kernel log's Xid lines, counted once each across restarts (`wedge_capture_xid_total`).
    pub(super) xids: Option<xids::XidCounter>,
    /// Where the node's root is (the kubelet's container log names, for the wedged-process info labels).
    pub(super) node_root: PathBuf,
    /// Container names by container id, for the wedged processes only.
    pub(super) container_names: HashMap<String, Option<String>>,
}

/// SIGHUPs of one storm (until [`BURST_QUIET`] passes without one and no reload is due).
#[derive(Debug, Default)]
pub(super) struct Reloads {
    pub(super) last: Option<Instant>,
    pub(super) signals: u64,
    pub(super) done: u64,
    pub(super) failed: u64,
    pub(super) first: Option<Instant>,
    pub(super) last_signal: Option<Instant>,
    /// What the previous reload of the storm logged: a later one logs only when it differs.
    pub(super) last_outcome: String,
}
