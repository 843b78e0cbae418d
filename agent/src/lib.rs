//! wedge_agent — the `wedge-capture` binary's logic, kept out of `main` so it can be tested.
//!
//! Map:
//! - [`cli`]: every flag, defined once (clap derive).
//! - [`exit`]: documented exit codes and the error type that carries one.
//! - [`cmd`]: one module per subcommand; each has `run(args) -> anyhow::Result<ExitCode>`.

pub mod cli;
pub mod cmd;
pub mod daemon;
pub mod exit;
pub mod host;
pub mod inject_env;
pub mod probe;
pub mod watch;
