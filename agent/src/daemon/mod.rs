//! The host daemon behind `wedge-capture agent`: the shared watch loop ([`crate::watch::Watcher`]) fed by
//! the host target sources ([`sources`]), driven by signals and the service manager.
//!
//! Map:
//! - [`config`]: the JSON config file, command-line overrides, validation (reloaded on SIGHUP).
//! - [`log`]: one line per event on stderr (journald priority prefixes, plain or JSON); what a container
//!   can cause goes through its per-cause, per-minute [`log::Limiter`].
//! - [`notify`]: sd_notify (READY, RELOADING, STOPPING, WATCHDOG, STATUS).
//! - [`ratelimit`]: at most one new incident per process per window; one on-demand incident per process
//!   per `on_demand_rate_limit`.
//! - [`sources`]: the host target sources (comm, cgroup, processes holding `/dev/nvidia*`, ring directories).
//! - [`metrics`], [`http`]: Prometheus metrics (`--metrics-listen`, `--textfile-dir`), published by the
//!   loop after each scan and served by a bounded server thread that the loop never waits on.
//! - [`xids`]: the kernel log's Xid lines counted once each, across restarts (`wedge_capture_xid_total`).
//! - ring files (discovery, trust checks, reading) live in [`crate::rings`], which `run` uses too.
//!
//! The loop (`below`-style): signals arrive on a channel, the loop waits on it with a timeout until the
//! next scan. Signals are coalesced ([`Pending`]) and served by priority: SIGTERM/SIGINT first, ahead of
//! any queued work; then SIGHUP (re-read the config, at most once per interval; a bad one keeps the old
//! settings; a storm is summed up in one line), a due scan, and
//! SIGUSR1 (an on-demand incident for every current target, at most one per process per
//! `on_demand_rate_limit`). Any number of SIGUSR1 arriving during a capture make one more run, and a
//! burst of them is summed up in one log line when it is over. SIGTERM also sets a flag the probe runner
//! polls, so a stop never waits out a probe deadline: the agent exits within 2 s under any storm (the
//! incident being written is finished first, its interrupted probes marked as such). WATCHDOG=1 is sent
//! by this loop, after scans that could list the host's processes, so a stuck or blind agent is
//! restarted by systemd.
//!
//! The daemon itself, by job: [`state`] (what it holds), [`event_loop`] (signals, scans, stop), [`reload`]
//! (SIGHUP), [`on_demand`] (SIGUSR1), [`events`] (what it logs of capture events, targets and notes).

pub mod config;
mod event_loop;
mod events;
pub mod http;
pub mod log;
pub mod metrics;
pub mod notify;
mod on_demand;
pub mod ratelimit;
mod reload;
pub mod sources;
mod state;
pub mod xids;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use capture::ProcRoot;
use reports::retention::Retention;
use reports::store::Store;

use crate::exit::{ExitCode, Failure};
use crate::preflight;
use crate::settings::Settings;
use crate::watch::launch::SignalChannel;
use crate::watch::{Capturer, Watcher};
use log::{Level, Logger};
use notify::Notifier;
use ratelimit::{OnDemandLimit, RateLimit};
use sources::{HostSource, SharedSource};
pub use state::Origin;
use state::{Daemon, Pending, Reloads};

/// Run the agent until SIGTERM or SIGINT.
pub fn run(origin: Origin) -> anyhow::Result<ExitCode> {
    let settings = Settings::load(origin.config.as_deref(), &origin.flags)
        .map_err(|e| Failure::new(ExitCode::USAGE, format!("bad configuration: {e}")))?;
    let logger = Logger::new(settings.agent.log_format);
    // The store creates a missing directory with its own restrictive mode (0700, like `run`); then
    // prove it can be written.
    let store = Store::open(&settings.watch.out, Retention::DEFAULT)
        .with_context(|| {
            format!(
                "cannot open the incident store {}",
                settings.watch.out.display()
            )
        })?
        .log_removals(move |removal| {
            let fields = serde_json::to_value(removal).unwrap_or_default();
            logger.event(Level::Notice, &removal.to_string(), fields)
        });
    preflight::check_writable(&settings.watch.out)?;
    // Before anything else can run: no signal may be lost.
    let stop_requested = Arc::new(AtomicBool::new(false));
    for signal in [libc::SIGINT, libc::SIGTERM] {
        signal_hook::flag::register(signal, stop_requested.clone())
            .context("cannot install signal handlers")?;
    }
    let signals = SignalChannel::new(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1])
        .context("cannot install signal handlers")?;
    let proc_root = ProcRoot::default();
    for (cap, cost) in preflight::missing_capabilities(&proc_root) {
        logger.warning(&format!("missing {cap}: {cost}"));
    }
    let capture = settings.capture_settings(proc_root.clone());
    let node_root = capture.node_root.clone();
    let xid_counter = match xids::XidCounter::open(
        &capture.kmsg_path,
        &settings.watch.out,
        proc_root.boot_id().ok(),
    ) {
        Ok(counter) => Some(counter),
        Err(err) => {
            logger.warning(&format!("Xid lines will not be counted: {err}"));
            None
        }
    };
    let source = SharedSource::new(HostSource::new(
        settings.selection(),
        settings.source_settings(),
    ));
    // Before the endpoint: the watcher's set-up (the BPF task iterator's load, ~0.1 s) must not sit
    // between "serving metrics" and the first scan.
    let mut watcher = Watcher::new(
        settings.watch.watch_config(),
        Box::new(source.clone()),
        Capturer::new(capture, store),
        proc_root.clone(),
    );
    let metrics = start_metrics(&settings, &logger)?;
    let scheduling = crate::watch::raise_watch_priority();
    watcher.capturer().set_cancel(stop_requested.clone());
    let mut daemon = Daemon {
        rate: RateLimit::new(settings.agent.rate_limit),
        on_demand: OnDemandLimit::new(settings.agent.on_demand_rate_limit),
        stop_requested,
        pending: Pending::default(),
        burst: None,
        last_scan: Instant::now(),
        origin,
        logger,
        proc_root,
        source,
        watcher,
        notifier: Notifier::from_env(),
        watched: HashMap::new(),
        healthy: true,
        incidents_written: 0,
        open_count: 0,
        last_status: String::new(),
        metrics,
        limiter: log::Limiter::default(),
        reloads: Reloads::default(),
        xids: xid_counter,
        node_root,
        container_names: HashMap::new(),
        settings,
    };
    daemon.logger.notice(&format!(
        "started (pid {}): {}; watch loop scheduling: {scheduling}; quiet-process shortcut: {}; busy-process shortcut: {}",
        std::process::id(),
        daemon.settings.summary(),
        daemon.watcher.quiet_shortcut(),
        daemon.watcher.thread_shortcut()
    ));
    daemon.run_loop(&signals);
    Ok(ExitCode::OK)
}

/// The metrics, and their server when `metrics_listen` is set (started before the loop gets its real-time
/// priority: the server's threads keep the normal policy).
fn start_metrics(settings: &Settings, logger: &Logger) -> anyhow::Result<metrics::Metrics> {
    // Generous: a capture's probes can hold the loop for several probe deadlines.
    let stale_after = (settings.watch.interval * 10).max(crate::defaults::METRICS_STALE_AFTER);
    let metrics = metrics::Metrics::new(settings.agent.textfile_dir.clone(), stale_after);
    if let Some(addr) = settings.agent.metrics_listen {
        let bound = http::serve(addr, metrics.published()).map_err(|e| {
            Failure::new(
                ExitCode::ERROR,
                format!(
                    "cannot serve metrics on {addr} (metrics_listen): {e}{}",
                    crate::host::sandbox::bind_hint(&e)
                ),
            )
        })?;
        logger.notice(&format!("serving metrics on http://{bound}/metrics"));
    }
    Ok(metrics)
}
