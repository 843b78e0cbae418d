//! The command line, defined once. Each subcommand's flags live in its `cmd::<name>::Args`; the defaults
//! `--help` shows for `run` and `agent` come from [`crate::settings`] ([`command`] adds them).

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::cmd;
use crate::settings;

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
    /// Where each task of a pasted hung-task log, sysrq dump or /proc/<tid>/stack is stuck (the live classifier).
    Explain(cmd::explain::Args),
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
    /// node-problem-detector plugin: exit 1 a wedge is going on, 0 none, 2 unknown (see --help).
    NpdCheck(cmd::npd_check::Args),
    /// Helpers run by selftest, tests and benchmarks (not a stable interface).
    #[command(subcommand, hide = true)]
    Internal(cmd::selftest::InternalCommand),
}

/// Subcommands whose flags default to [`settings`] constants (they are `Option`s: "not given" must stay
/// visible to the resolution, so clap cannot fill the default in itself).
const SETTINGS_COMMANDS: &[&str] = &["run", "agent"];

/// The clap command, with each settings default appended to its flag's help.
pub fn command() -> clap::Command {
    let defaults = settings::flag_defaults();
    let mut command = Cli::command();
    for name in SETTINGS_COMMANDS {
        command = command.mut_subcommand(name, |mut sub| {
            for (flag, value) in &defaults {
                let Some(id) = sub
                    .get_arguments()
                    .find(|arg| arg.get_long() == Some(flag.as_str()))
                    .map(|arg| arg.get_id().clone())
                else {
                    continue;
                };
                sub = sub.mut_arg(id, |arg| {
                    let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                    let long = arg.get_long_help().map(|h| h.to_string());
                    let arg = arg.help(format!("{help} [default: {value}]"));
                    match long {
                        Some(long) => arg.long_help(format!("{long} [default: {value}]")),
                        None => arg,
                    }
                });
            }
            sub
        });
    }
    command
}

/// Parse the process's arguments (exit with clap's message and code on a usage error).
pub fn parse() -> Cli {
    let matches = command().get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_shows_the_settings_defaults() {
        for (name, flags) in [
            (
                "run",
                &["threshold", "interval", "samples", "probe-timeout", "out"][..],
            ),
            (
                "agent",
                &[
                    "threshold",
                    "rate-limit",
                    "gpu-rescan",
                    "max-targets",
                    "out",
                ][..],
            ),
        ] {
            let mut command = command();
            let help = command
                .find_subcommand_mut(name)
                .unwrap()
                .render_help()
                .to_string();
            for flag in flags {
                let line = help
                    .lines()
                    .skip_while(|l| !l.contains(&format!("--{flag} ")))
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" ");
                assert!(line.contains("[default: "), "{name} --{flag}: {line}");
            }
            assert!(help.contains("[default: 30s]"), "{name}: {help}");
        }
    }

    #[test]
    fn markdown_has_the_same_names_on_capture_and_report_show() {
        for name in ["md", "markdown"] {
            let cli = Cli::try_parse_from([
                "wedge-capture",
                "report",
                "show",
                "latest",
                "--format",
                name,
            ])
            .unwrap();
            let Command::Report(cmd::report::ReportCommand::Show(args)) = cli.command else {
                panic!("not report show");
            };
            assert_eq!(args.format, cmd::report::ShowFormat::Md, "{name}");
            let cli =
                Cli::try_parse_from(["wedge-capture", "capture", "--pid", "1", "--format", name])
                    .unwrap();
            let Command::Capture(args) = cli.command else {
                panic!("not capture");
            };
            assert_eq!(args.format, cmd::capture::Format::Markdown, "{name}");
        }
    }

    #[test]
    fn report_takes_out_and_still_reads_dir() {
        for flag in ["--out", "--dir"] {
            let cli =
                Cli::try_parse_from(["wedge-capture", "report", "list", flag, "/srv/x"]).unwrap();
            let Command::Report(cmd::report::ReportCommand::List(args)) = cli.command else {
                panic!("not report list");
            };
            assert_eq!(args.out.out, std::path::PathBuf::from("/srv/x"), "{flag}");
        }
        let mut command = command();
        let help = command
            .find_subcommand_mut("report")
            .unwrap()
            .find_subcommand_mut("list")
            .unwrap()
            .render_help()
            .to_string();
        assert!(help.contains("--out") && !help.contains("--dir"), "{help}");
    }

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
