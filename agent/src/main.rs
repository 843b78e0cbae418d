//! The `wedge-capture` binary: parse flags, dispatch, map errors to documented exit codes.

use agent::cli::{self, Command};
use agent::cmd;
use agent::exit;

fn main() {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // An agent that logs JSON says its start-up errors in JSON too, a usage error included.
    let errors = cli::ErrorStyle::of_args(&argv);
    let cli = cli::parse_from(argv);
    let result = match cli.command {
        Command::Capture(args) => cmd::capture::run(args),
        Command::DecodeIoctl(args) => cmd::decode_ioctl::run(args),
        Command::Explain(args) => cmd::explain::run(args),
        Command::Ring(sub) => cmd::ring::run(sub),
        Command::Report(sub) => cmd::report::run(sub),
        Command::Upload(args) => cmd::upload::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Selftest(args) => cmd::selftest::run(args),
        Command::Doctor(args) => cmd::doctor::run(args),
        Command::Agent(args) => cmd::agent::run(args),
        Command::NpdCheck(args) => cmd::npd_check::run(args),
        Command::Internal(sub) => cmd::selftest::run_internal(sub),
    };
    let code = match result {
        Ok(code) => code,
        Err(err) => {
            let code = exit::code_for(&err);
            errors.print(&format!("{err:#}"), code);
            code
        }
    };
    std::process::exit(i32::from(code.0));
}
