//! agent — the `wedge-capture` binary's logic, kept out of `main` so it can be tested.
//!
//! Map:
//! - [`cli`]: every flag, defined once (clap derive); `--help` shows the [`settings`] defaults.
//! - [`exit`]: documented exit codes and the error type that carries one.
//! - [`defaults`]: every default as a named constant (a leaf: watch, settings and daemon reach down to it).
//! - [`settings`]: every setting defined once (flag, config key, type, default, help, reload), read from flags and
//!   the agent's config file, merged and resolved once into [`settings::WatchSettings`] (`run`, `selftest`,
//!   `agent`) and [`settings::Settings`] (the agent's); a low layer (watch and daemon build their types
//!   from it). Adding one: docs/settings.md.
//! - [`duration`]: durations as written on the command line and in the config file.
//! - [`preflight`]: checks before watching (incident directory writable, missing capabilities).
//! - [`cmd`]: one module per subcommand; each has `run(args) -> anyhow::Result<ExitCode>`. Nothing
//!   outside `cmd` (and `cli`/`main`, which dispatch to it) uses it.
//! - [`watch`]: the watch loop shared by `run`, `selftest` and `agent`: target sources → hot scan →
//!   tracker (D-state episodes, no-progress proof) → episode lifecycle (`watch::incident`) → the capture's
//!   ordered stages (`watch::stages::STAGES`) → durable incident.
//! - [`rings`]: everything about breadcrumb ring files — discovery in ring directories, trust checks
//!   (a header is a claim the kernel must confirm), the one "is this a ring" predicate, the one size
//!   limit, reading, the env-var names. `run` (the capture's `rings` stage) and the daemon both use it;
//!   it uses neither.
//! - [`daemon`]: what only the host agent needs: config file, reload, sd_notify, rate limits, and the host
//!   target sources (comm, cgroup, GPU fds; ring directories through [`rings::discovery`]).
//! - [`host`]: the host identity recorded with incidents. Every kernel file (kmsg, PSI, meminfo, fd links,
//!   children, …) is read through `capture::ProcRoot` / `capture::kmsg`: nothing here builds a /proc path.
//! - [`probe`]: risky reads (cmdline, NVIDIA driver files, nvidia-smi) in sacrificial children with a deadline.
//! - [`inject_env`]: finding libwedge_inject.so and libcupti for `run --inject`.
//! - [`bench`]: the benchmarks the binary runs on itself (`agent --bench-scans`, `internal bench-watch`,
//!   `internal bench-agent`), out of the modules they measure.
//! - [`testing`]: the one thing integration tests reach inside (the hot-path scanner).
//!
//! Only `cli`, `cmd`, `exit` (the binary), `settings` (the fuzzer) and `testing` are public; the rest is
//! crate-private.

pub(crate) mod bench;
pub mod cli;
pub mod cmd;
pub(crate) mod daemon;
pub(crate) mod defaults;
pub(crate) mod duration;
pub mod exit;
pub(crate) mod host;
pub(crate) mod inject_env;
pub(crate) mod preflight;
pub(crate) mod probe;
pub(crate) mod rings;
pub mod settings;
pub(crate) mod watch;

/// What the integration tests reach inside the agent (everything else is crate-private): the watch loop's
/// hot-path scanner, tested against the kernel with real thread churn.
pub mod testing {
    pub use crate::watch::scan::{ScanShortcuts, ScanStats, ThreadScanner};
    pub use crate::watch::tracker::Observation;
}
