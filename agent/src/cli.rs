//! The command line, defined once. Each subcommand's flags live in its `cmd::<name>::Args`.

use clap::{Parser, Subcommand};

use crate::cmd;

/// Capture the evidence of a GPU driver wedge while the machine is still wedged.
///
/// A thread stuck in an uninterruptible driver call (state D) cannot be killed or inspected from
/// inside its container. wedge-capture reads it from the host, without ever blocking on it:
/// where the kernel is stuck (/proc wchan, syscall, stack, decoded ioctl) and, through the
/// breadcrumb ring, which driver call the worker made.
#[derive(Debug, Parser)]
#[command(
    name = "wedge-capture",
    version,
    propagate_version = true,
    max_term_width = 110
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// One-shot snapshot of every thread of a process, decoded (returns at once).
    Capture(cmd::capture::Args),
    /// Decode an ioctl request word (`_IOC` fields, NVIDIA RM/UVM and Linux names).
    DecodeIoctl(cmd::decode_ioctl::Args),
    /// Read breadcrumb ring files.
    #[command(subcommand)]
    Ring(cmd::ring::RingCommand),
    /// List, show and bundle incident reports.
    #[command(subcommand)]
    Report(cmd::report::ReportCommand),
    /// Chunked bulk upload of f32 tensors, with a breadcrumb around every driver call.
    Upload(cmd::upload::Args),
    /// Run a command and watch every thread of it and its descendants; capture any wedge.
    Run(cmd::run::Args),
    /// Demonstrate a real capture end to end on a frozen loop-mounted filesystem (the README's main command).
    Selftest(cmd::selftest::Args),
    /// Check privileges, kernel settings and drivers that limit what can be captured, with fixes.
    Doctor(cmd::doctor::Args),
    /// The host daemon: find GPU workers by comm, cgroup, /dev/nvidia* fds or ring files; capture wedges.
    Agent(cmd::agent::Args),
    /// Helpers run by selftest, tests and benchmarks (not a stable interface).
    #[command(subcommand, hide = true)]
    Internal(cmd::selftest::InternalCommand),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_refuses_unknown_flags_before_the_command_and_passes_the_commands_own() {
        let err =
            Cli::try_parse_from(["wedge-capture", "run", "--bogus", "--", "true"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::UnknownArgument);
        let err = Cli::try_parse_from(["wedge-capture", "run", "--bogus", "true"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::UnknownArgument);
        for argv in [
            &["wedge-capture", "run", "--", "sh", "-c", "x", "--bogus"][..],
            &["wedge-capture", "run", "sh", "-c", "x", "--bogus"][..],
        ] {
            let Command::Run(args) = Cli::try_parse_from(argv).unwrap().command else {
                panic!("not run: {argv:?}");
            };
            assert_eq!(args.command, ["sh", "-c", "x", "--bogus"], "{argv:?}");
        }
        // A command whose name starts with a hyphen needs `--`, as with any program.
        let Command::Run(args) = Cli::try_parse_from(["wedge-capture", "run", "--", "--x"])
            .unwrap()
            .command
        else {
            panic!("not run");
        };
        assert_eq!(args.command, ["--x"]);
    }
}
